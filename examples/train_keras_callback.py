"""Keras-style callbacks, unchanged, on aspecthook's Runner.

``History`` and ``EarlyStoppingAtPlateau`` below are written the Keras way:
``on_epoch_end(epoch, logs)`` with ``logs`` a dict of floats (``loss``, ``val_loss``), and
a stop request made by setting ``self.model.stop_training = True``. The runner takes them
in ``aspects=`` as they are (wrapped into ``aspecthook.adapters.KerasCallback``): it gives
each the model through ``set_model``, builds the ``logs`` from the step outputs and the
validation metrics, and turns ``stop_training`` into ``runner.stop()``.

``Callback`` stands in for ``keras.callbacks.Callback`` so the example needs no Keras.
Run: ``python examples/train_keras_callback.py``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from aspecthook.train import Runner


class Callback:
    """The shape of ``keras.callbacks.Callback``: no-op methods, ``set_model``."""

    def __init__(self) -> None:
        self.model: Any = None
        self.params: dict[str, Any] = {}

    def set_model(self, model: Any) -> None:
        self.model = model

    def set_params(self, params: dict[str, Any]) -> None:
        self.params = params

    def on_train_begin(self, logs: Any = None) -> None: ...
    def on_train_end(self, logs: Any = None) -> None: ...
    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None: ...
    def on_epoch_end(self, epoch: int, logs: Any = None) -> None: ...
    def on_train_batch_end(self, batch: int, logs: Any = None) -> None: ...


class History(Callback):
    """Keeps every epoch's logs, as ``model.fit`` returns them in Keras."""

    def on_train_begin(self, logs: Any = None) -> None:
        self.epochs: list[dict[str, float]] = []
        print(f"training for up to {self.params['epochs']} epochs of {self.params['steps']} steps")

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.epochs.append(dict(logs or {}))
        print(f"epoch {epoch}: " + "  ".join(f"{k}={v:.4f}" for k, v in (logs or {}).items()))


class EarlyStoppingAtPlateau(Callback):
    """Stops when ``monitor`` has not improved by ``min_delta`` for ``patience`` epochs."""

    def __init__(self, monitor: str = "val_loss", patience: int = 2, min_delta: float = 0.01):
        super().__init__()
        self.monitor, self.patience, self.min_delta = monitor, patience, min_delta
        self.best = float("inf")
        self.wait = 0

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        value = (logs or {})[self.monitor]
        if value < self.best - self.min_delta:
            self.best, self.wait = value, 0
            return
        self.wait += 1
        if self.wait >= self.patience:
            print(f"epoch {epoch}: {self.monitor} has not improved for {self.wait} epochs")
            self.model.stop_training = True


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(320, 5)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 0.0, 3.0]) + 0.3 * torch.randn(320)
    model = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    history, stopper = History(), EarlyStoppingAtPlateau()
    runner = Runner(
        model,
        torch.optim.Adam(model.parameters(), lr=0.05),
        DataLoader(TensorDataset(x[:256], y[:256, None]), batch_size=32, shuffle=True),
        val_loader=DataLoader(TensorDataset(x[256:], y[256:, None]), batch_size=64),
        loss_fn=torch.nn.functional.mse_loss,
        max_epochs=40,
        aspects=[history, stopper],  # each wrapped into KerasCallback(...) by the runner
    )
    runner.run()
    print(f"\nstopped after {runner.epoch} of 40 epochs: {runner.stop_reason}")
    print(f"history has {len(history.epochs)} epochs; best val_loss {stopper.best:.4f}")
    assert history.epochs
    assert stopper.model is runner.model
    runner.close()


if __name__ == "__main__":
    main()
