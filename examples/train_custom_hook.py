"""An OpenMMLab-style custom hook, unchanged, on aspecthook's Runner.

Teams coming from mmengine / mmcv have hooks like ``LossSpikeHook`` below: a ``Hook``
subclass overriding a few ``before_*`` / ``after_*`` methods, with a ``priority``. The
runner takes such an object in ``aspects=`` as it is: it is wrapped into an aspect
(``aspecthook.adapters.MMHook``) whose advice calls the overridden methods with the
arguments OpenMMLab passes (``runner``, ``batch_idx``, ``data_batch``, ``outputs``,
``metrics``). The no-op methods of the base class cost nothing: they get no advice.

``Hook`` here stands in for ``mmengine.hooks.Hook`` so the example needs no mmengine; a
real mmengine hook object is wrapped the same way. Run: ``python examples/train_custom_hook.py``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from aspecthook.adapters import MMHook
from aspecthook.train import Runner


class Hook:
    """The shape of mmengine's ``Hook``: every method a no-op, priority NORMAL."""

    priority: Any = "NORMAL"

    def before_run(self, runner: Any) -> None: ...
    def after_run(self, runner: Any) -> None: ...
    def before_train_epoch(self, runner: Any) -> None: ...
    def after_train_epoch(self, runner: Any) -> None: ...
    def before_train_iter(self, runner: Any, batch_idx: int, data_batch: Any = None) -> None: ...
    def after_train_iter(
        self, runner: Any, batch_idx: int, data_batch: Any = None, outputs: Any = None
    ) -> None: ...
    def before_val_epoch(self, runner: Any) -> None: ...
    def after_val_epoch(self, runner: Any, metrics: Any = None) -> None: ...


class LossSpikeHook(Hook):
    """Flags iterations whose loss jumps above ``factor`` times the running mean."""

    priority = "LOW"  # after the NORMAL hooks, as an mmengine user would set it

    def __init__(self, factor: float = 1.5) -> None:
        self.factor = factor
        self.mean: float | None = None
        self.spikes: list[tuple[int, int, float]] = []

    def before_train_epoch(self, runner: Any) -> None:
        lr = runner.optimizer.param_groups[0]["lr"]
        print(f"epoch {runner.epoch}: lr={lr:.3f}")

    def after_train_iter(
        self, runner: Any, batch_idx: int, data_batch: Any = None, outputs: Any = None
    ) -> None:
        loss = outputs["loss"].item()
        if self.mean is not None and loss > self.factor * self.mean:
            self.spikes.append((runner.epoch, batch_idx, loss))
        self.mean = loss if self.mean is None else 0.9 * self.mean + 0.1 * loss

    def after_val_epoch(self, runner: Any, metrics: Any = None) -> None:
        print(f"  validation: {', '.join(f'{k}={v:.4f}' for k, v in metrics.items())}")


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(256, 6)
    y = (x[:, 0] + x[:, 1] * x[:, 2] > 0).long()
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    hook = LossSpikeHook()
    runner = Runner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.5),
        DataLoader(TensorDataset(x[:192], y[:192]), batch_size=16, shuffle=True),
        val_loader=DataLoader(TensorDataset(x[192:], y[192:]), batch_size=64),
        loss_fn=torch.nn.functional.cross_entropy,
        max_epochs=3,
        aspects=[hook],  # wrapped into MMHook(hook) by the runner
    )
    runner.run()

    adapted = runner.get_aspect(MMHook)
    assert adapted is not None
    assert adapted.target is hook
    # The overridden methods only, plus the adapter's batch counter (their batch_idx).
    print(f"\n{adapted!r} advises:")
    for row in runner.describe():
        if row.aspect == adapted.name:
            print(f"  {row.joinpoint:12} {row.stage:6} {row.advice:40} priority={row.priority}")
    spikes = [(epoch, batch_idx, round(loss, 3)) for epoch, batch_idx, loss in hook.spikes]
    print(f"loss spikes (epoch, batch_idx, loss): {spikes}")
    runner.close()


if __name__ == "__main__":
    main()
