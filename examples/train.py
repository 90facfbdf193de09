"""The demo's training run as a short script: every concern besides the maths is an aspect.

The ``Runner`` loop is nothing but join points (``run``, ``train_epoch``, ``train_iter``,
``forward``, ``backward``, ``optimizer_step``, ``val_*``). What makes it a trainer is the
list of aspects, the same as in ``examples/demo.py``: a linear warm-up followed by cosine
annealing (torch's own schedulers, stepped per iteration), validation with an accuracy
metric on EMA weights, structured logging with a ``metrics.jsonl`` file, a progress bar,
checkpoints every epoch that keep the last three and the best, early stopping on the
validation loss, and a Chrome trace of every join point. The run stops half-way and a new
runner resumes it from the last checkpoint; it then plots ``curves.png`` (loss and LR; with
matplotlib installed). The data is made in code; the run takes a few seconds. (The demo
kills the run with SIGKILL instead, and checks the resumed run against an uninterrupted one.)

Run it with ``python examples/train.py [WORK_DIR]`` (a temporary folder by default).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import torch
from torch.optim import lr_scheduler
from torch.utils.data import DataLoader, TensorDataset

import aspecthook as ah
from aspecthook.aspects import Timed
from aspecthook.train import Runner
from aspecthook.train.aspects import (
    EMA,
    Checkpoint,
    EarlyStopping,
    Evaluate,
    Logger,
    LRSchedule,
    ProgressBar,
)

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


def build(work_dir: Path, max_epochs: int, timed: Timed) -> Runner:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    train = DataLoader(make_data(512, seed=0), batch_size=32, shuffle=True)
    total_iters = EPOCHS * len(train)
    aspects: list[ah.Aspect] = [
        LRSchedule(
            lambda opt: lr_scheduler.CosineAnnealingLR(opt, T_max=total_iters - WARMUP_ITERS),
            by_epoch=False,
            warmup="linear",
            warmup_iters=WARMUP_ITERS,
        ),
        Evaluate(metrics={"acc": accuracy}),
        EMA(0.9),
        Logger(interval=32, file_interval=2),
        ProgressBar(),
        Checkpoint(interval=1, max_keep=3, save_best="val/acc", resume="auto"),
        EarlyStopping(monitor="val/loss", patience=2),
        timed,
    ]
    val = DataLoader(make_data(256, seed=1), batch_size=128)
    runner = Runner(
        model,
        optimizer,
        train,
        val_loader=val,
        loss_fn=torch.nn.functional.cross_entropy,
        max_epochs=max_epochs,
        work_dir=work_dir,
        seed=0,
        aspects=aspects,
    )
    return runner


def plot(work_dir: Path) -> None:
    """curves.png: the logged loss and LR per iteration (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: no curves.png (pip install aspecthook[plot])")
        return
    records = [json.loads(line) for line in (work_dir / "metrics.jsonl").read_text().splitlines()]
    rows = {r["iter"]: r for r in records if r["mode"] == "train"}  # a redone iter: the last
    iters = sorted(rows)
    fig, (loss_ax, lr_ax) = plt.subplots(2, 1, sharex=True)
    loss_ax.plot(iters, [rows[i]["loss"] for i in iters])
    lr_ax.plot(iters, [rows[i]["lr"] for i in iters], color="tab:orange")
    loss_ax.set_ylabel("loss")
    lr_ax.set_ylabel("learning rate")
    lr_ax.set_xlabel("iteration")
    fig.savefig(work_dir / "curves.png")


def main(work_dir: Path) -> None:
    timed = Timed(pointcut=ah.Glob("*"), trace=True)  # both runners' join points, timed
    first = build(work_dir, max_epochs=EPOCHS // 2, timed=timed)
    print(first.describe())
    first.run()  # stops after half the epochs, as if interrupted there
    first.close()

    runner = build(work_dir, max_epochs=EPOCHS, timed=timed)  # resumes: resume="auto"
    metrics = runner.run()
    timed.export_chrome_trace(work_dir / "trace.json")
    runner.close()
    plot(work_dir)

    print(f"\nstopped after {runner.epoch} epochs ({runner.stop_reason or 'max_epochs'})")
    print(f"val/loss={metrics['val/loss']:.4f}  val/acc={metrics['val/acc']:.3f} (EMA weights)")
    print(f"work_dir {work_dir}:", ", ".join(sorted(p.name for p in work_dir.iterdir())))
    assert metrics["val/acc"] > 0.6, metrics  # it did learn


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as folder:
            main(Path(folder))
