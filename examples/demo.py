"""The main demo: a complete training run whose every concern is an aspect.

It trains a small classifier on data made in code, with warm-up + cosine LR, logging,
a progress bar, checkpoints every epoch (last 3 kept, plus the best), EMA weights used for
validation, and early stopping. It prints the run's describe() table and leaves, in the
work folder, ``metrics.jsonl``, a Chrome trace of the run (``trace.json``: open it in
https://ui.perfetto.dev or chrome://tracing) and ``curves.png`` (loss and LR).

To show that resume is exact, the demo trains twice in child processes: once without
interruption (its output hidden), and once killed with SIGKILL in the middle of an epoch
and resumed from its last checkpoint. The two final checkpoints must be equal bit for bit:
model, optimizer, LR scheduler, EMA weights, early-stopping state, metrics and RNG states;
so must every loss, LR and validation metric the two runs logged to ``metrics.jsonl``.

    python examples/demo.py [--work-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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
    IterTimer,
    Logger,
    LRSchedule,
    ProgressBar,
)

EPOCHS = 8
BATCH = 32
WARMUP = 40
PATIENCE = 3
KILL_AT = 150  # an iteration in the middle of epoch 3 (64 batches per epoch)


def spirals(n: int, seed: int) -> TensorDataset:
    """Three interleaved spirals in 2-D, with noise: a small problem an MLP can learn."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 3, (n,), generator=g)
    radius = torch.rand(n, generator=g)
    angle = labels * (2 * math.pi / 3) + radius * 4.0 + 0.25 * torch.randn(n, generator=g)
    points = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=1)
    return TensorDataset(points, labels)


def accuracy(outputs: torch.Tensor, targets: torch.Tensor) -> float:
    return float((outputs.argmax(dim=1) == targets).float().mean())


def build(work_dir: Path) -> tuple[Runner, Timed]:
    """The run: model, data and the aspects that make it a complete trainer."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(2, 64),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.1),
        torch.nn.Linear(64, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 3),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    train = DataLoader(spirals(2048, seed=1), batch_size=BATCH, shuffle=True)
    val = DataLoader(spirals(512, seed=2), batch_size=256)
    total = EPOCHS * len(train)
    timed = Timed(pointcut=ah.Glob("*"), trace=True)
    aspects: list[ah.Aspect] = [
        LRSchedule(
            lambda opt: lr_scheduler.CosineAnnealingLR(opt, T_max=total - WARMUP),
            by_epoch=False,
            warmup="linear",
            warmup_iters=WARMUP,
            warmup_ratio=0.05,
        ),
        Evaluate(metrics={"acc": accuracy}),
        EMA(0.95),
        Checkpoint(interval=1, max_keep=3, save_best="val/acc", resume="auto"),
        EarlyStopping("val/acc", patience=PATIENCE),
        IterTimer(),
        Logger(interval=64, file_interval=4),
        timed,
        ProgressBar(),
    ]
    runner = Runner(
        model,
        optimizer,
        train,
        val_loader=val,
        loss_fn=torch.nn.functional.cross_entropy,
        max_epochs=EPOCHS,
        work_dir=work_dir,
        seed=0,
        aspects=aspects,
    )
    return runner, timed


def train(work_dir: Path, *, describe: bool, kill_at: int | None) -> None:
    """Child process: train (resuming if a checkpoint exists), export the trace."""
    runner, timed = build(work_dir)
    if kill_at is not None:

        @runner.weaver.after("train_iter")
        def crash(ctx: ah.CallContext) -> None:
            if ctx.runner.iter == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no flush: a real crash

    if describe:
        print(runner.describe())
    runner.run()
    timed.export_chrome_trace(work_dir / "trace.json")
    print(timed.summary())


def plot(work_dir: Path) -> Path | None:
    """curves.png: the logged loss and LR per iteration (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: skipping curves.png (pip install aspecthook[plot])")
        return None
    rows: dict[int, dict[str, Any]] = {}
    for line in (work_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("mode") == "train":
            rows[record["iter"]] = record  # a resumed run logs redone iterations again
    iters = sorted(rows)
    fig, (loss_ax, lr_ax) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    loss_ax.plot(iters, [rows[i]["loss"] for i in iters])
    loss_ax.set_ylabel("loss (smoothed)")
    lr_ax.plot(iters, [rows[i]["lr"] for i in iters], color="tab:orange")
    lr_ax.set_ylabel("learning rate")
    lr_ax.set_xlabel("iteration")
    fig.suptitle("aspecthook demo: warm-up + cosine")
    fig.tight_layout()
    path = work_dir / "curves.png"
    fig.savefig(path, dpi=100)
    return path


def child(
    work_dir: Path, *, quiet: bool = False, describe: bool = False, kill_at: int | None = None
) -> int:
    cmd = [sys.executable, __file__, "--child", "--work-dir", str(work_dir)]
    if describe:
        cmd.append("--describe")
    if kill_at is not None:
        cmd += ["--kill-at", str(kill_at)]
    out = subprocess.DEVNULL if quiet else None
    return subprocess.run(cmd, stdout=out, check=False).returncode


def last_checkpoint(work_dir: Path) -> dict[str, Any]:
    """The checkpoint 'latest' names: the whole state of the run as it ended."""
    name = json.loads((work_dir / "latest").read_text())["latest"]
    state: dict[str, Any] = torch.load(work_dir / name, weights_only=True)
    return state


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two checkpoints differ: every tensor compared with torch.equal, the rest ==."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{path} (keys)"]
        return [d for k in a for d in differences(a[k], b[k], f"{path}/{k}")]
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            return [f"{path} (length)"]
        pairs = enumerate(zip(a, b, strict=True))
        return [d for i, (x, y) in pairs for d in differences(x, y, f"{path}/{i}")]
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return [] if a.dtype == b.dtype and torch.equal(a, b) else [path]
    return [] if type(a) is type(b) and a == b else [path]


def logged(work_dir: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """metrics.jsonl's loss, LR and validation records by iteration, without the timings
    (a resumed run logs the iterations it redoes again: the later record counts)."""
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for line in (work_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["mode"] in ("train", "val"):
            timings = ("time", "data_time", "eta_s")
            rows[record["mode"], record["iter"]] = {
                k: v for k, v in record.items() if k not in timings
            }
    return rows


def report(reference: Path, resumed: Path) -> bool:
    """Compare the two runs; print what was compared and what EMA and early stopping did."""
    a, b = last_checkpoint(reference), last_checkpoint(resumed)
    diff = differences(a, b)
    runner = b["runner"]
    print(f"\nresumed run == uninterrupted run, bit for bit: {not diff}")
    print(f"  compared: the last checkpoints' {', '.join(k for k in runner if k != 'aspects')},")
    print(f"    the states of aspects {', '.join(runner['aspects'])}, and the RNG states")
    if diff:
        print(f"  they differ at: {', '.join(diff[:5])}")
    logs_a, logs_b = logged(reference), logged(resumed)
    same_logs = logs_a == logs_b
    print(f"  metrics.jsonl: {len(logs_b)} loss/LR/validation records, equal: {same_logs}")
    ema, stop = runner["aspects"]["ema"], runner["aspects"]["early_stopping"]
    print(f"  EMA: {ema['steps']} updates; validation and 'best' use the EMA weights")
    print(
        f"  early stopping on {stop['monitor']}: best {stop['best']:.4f}, "
        f"{stop['wait']} of {PATIENCE} validations without improvement, "
        f"{runner['stop_reason'] or 'not triggered (ran all epochs)'}"
    )
    print("final metrics:", runner["metrics"])
    return not diff and same_logs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--describe", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--kill-at", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        train(args.work_dir, describe=args.describe, kill_at=args.kill_at)
        return 0

    root = args.work_dir or Path(tempfile.mkdtemp(prefix="aspecthook-demo-"))
    reference, resumed = root / "uninterrupted", root / "run"
    start = time.perf_counter()
    print(f"== 1. reference run, uninterrupted (output hidden), in {reference}")
    # The same child as the others, describe() included: printing it imports rich, whose
    # import draws from Python's global `random`, so the RNG states compared match.
    assert child(reference, quiet=True, describe=True) == 0
    print(f"== 2. the same run in {resumed}, killed with SIGKILL at iteration {KILL_AT}")
    code = child(resumed, describe=True, kill_at=KILL_AT)
    print(f"\n   ... the training process died (exit code {code})")
    latest = json.loads((resumed / "latest").read_text())
    print(f"   'latest' names {latest['latest']}")
    print("== 3. resumed from the last checkpoint")
    assert child(resumed) == 0

    same = report(reference, resumed)
    png = plot(resumed)
    print(f"\nwork folder: {resumed}")
    notes = {
        "trace.json": "the resumed process only; uninterrupted/trace.json has the whole run",
        "curves.png": "loss and LR per iteration",
    }
    for name in ("metrics.jsonl", "trace.json", "curves.png"):
        if (resumed / name).exists():
            size = (resumed / name).stat().st_size
            print(f"  {name:14} {size:>9} bytes  {notes.get(name, '')}".rstrip())
    print("  checkpoints:", ", ".join(sorted(p.name for p in resumed.glob("*.pt"))), "+ latest")
    if png is not None:
        print(f"open {png}; load trace.json in https://ui.perfetto.dev")
    print(f"done in {time.perf_counter() - start:.0f} s")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
