"""Train a small classifier where every concern besides the maths is an aspect.

The ``Runner`` loop is nothing but join points (``run``, ``train_epoch``, ``train_iter``,
``forward``, ``backward``, ``optimizer_step``, ``val_*``). What makes it a trainer is the
list of aspects: a linear warm-up followed by cosine annealing (torch's own schedulers,
stepped per iteration), validation with an accuracy metric, structured logging with a
``metrics.jsonl`` file, checkpoints that keep the last two and the best, and early
stopping on the validation loss. The data is made in code; the run takes a few seconds.

Run it with ``python examples/train.py``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch
from torch.optim import lr_scheduler
from torch.utils.data import DataLoader, TensorDataset

from aspecthook.train import Runner
from aspecthook.train.aspects import Checkpoint, EarlyStopping, Evaluate, Logger, LRSchedule

EPOCHS = 8
WARMUP_ITERS = 10


def make_data(n: int, seed: int) -> TensorDataset:
    """Points in 8-d whose class (0, 1, 2) depends on them: learnable, but not trivially."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = (x[:, :3].argmax(dim=1) + (x[:, 3] > 1).long()) % 3
    return TensorDataset(x, y)


def accuracy(outputs: torch.Tensor, targets: torch.Tensor) -> float:
    return float((outputs.argmax(dim=1) == targets).float().mean())


def main() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    train = DataLoader(make_data(512, seed=0), batch_size=32, shuffle=True)
    val = DataLoader(make_data(256, seed=1), batch_size=128)
    total_iters = EPOCHS * len(train)

    with tempfile.TemporaryDirectory() as work_dir:
        runner = Runner(
            model,
            optimizer,
            train,
            val_loader=val,
            loss_fn=torch.nn.functional.cross_entropy,
            max_epochs=EPOCHS,
            work_dir=work_dir,
            seed=0,
            aspects=[
                LRSchedule(
                    lambda opt: lr_scheduler.CosineAnnealingLR(opt, T_max=total_iters),
                    by_epoch=False,
                    warmup="linear",
                    warmup_iters=WARMUP_ITERS,
                ),
                Evaluate(metrics={"acc": accuracy}),
                Logger(interval=32),
                Checkpoint(interval=1, max_keep=2, save_best="val/acc"),
                EarlyStopping(monitor="val/loss", patience=2),
            ],
        )
        print(runner.describe())
        metrics = runner.run()

        print(f"\nstopped after {runner.epoch} epochs ({runner.stop_reason or 'max_epochs'})")
        print(f"val/loss={metrics['val/loss']:.4f}  val/acc={metrics['val/acc']:.3f}")
        files = sorted(p.name for p in Path(work_dir).iterdir() if not p.name.startswith("."))
        print("work_dir:", ", ".join(files))
        lines = (Path(work_dir) / "metrics.jsonl").read_text().splitlines()
        print(f"metrics.jsonl: {len(lines)} records, last: {json.loads(lines[-1])}")
        assert metrics["val/acc"] > 0.6, metrics  # it did learn
        runner.close()


if __name__ == "__main__":
    main()
