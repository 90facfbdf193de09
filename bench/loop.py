"""Training-loop overhead: aspecthook's Runner beside a hand-written loop, ignite and Lightning.

Every variant trains the same tiny MLP (Linear 32->64, ReLU, Linear 64->10) with SGD
(lr 0.05, momentum 0.9) on batches of 16, for ``--iters`` iterations (default 3,000), on
one thread, and does the same work around each step:

* forward, cross-entropy loss, backward, ``optimizer.step()``, ``zero_grad(set_to_none)``;
* one LR step per iteration of a torch ``CosineAnnealingLR(T_max=iters)``;
* every ``--log-every`` iterations (50) a record with iteration, loss and LR, handed to
  a structlog logger; structlog is configured once, for every variant alike, with a single
  processor that counts the event and drops it (``DropEvent``), so nothing is formatted
  or written and the records are counted the same way for all;
* every ``--ckpt-every`` iterations (1,000) a checkpoint of model and optimizer state
  with ``torch.save`` into a fresh temporary folder (one per variant and round).

The variants, used the way their documentation shows:

* ``hand``: a plain ``for x, y in loader`` loop with the checks written inline;
* ``ignite``: ``Engine(step)``, handlers on ``Events.ITERATION_COMPLETED`` for the LR
  step (``scheduler.step()``) and on ``Events.ITERATION_COMPLETED(every=...)`` for the log
  record and the checkpoint; ``engine.run(loader, max_iters=iters)``. Not ignite's
  ``LRScheduler`` wrapper: it never calls ``scheduler.step()`` (it sets ``last_epoch`` and
  calls ``get_lr()`` itself), so torch's ``_step_count`` stays 1 and, with torch 2.13,
  ``CosineAnnealingLR.get_lr`` takes its closed-form branch for every later step and its
  recursive one at ``last_epoch=0``: the first step runs at 0.0500343 instead of 0.05
  and the rest differ in the last bits, so the run does not end where the others do;
* ``lightning``: a ``LightningModule`` whose ``configure_optimizers`` returns the same
  optimizer and scheduler (``interval='step'``), a ``Callback`` whose
  ``on_train_batch_end`` logs and saves; ``Trainer(max_steps=iters, accelerator='cpu',
  devices=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
  enable_checkpointing=False)``; its info output and warnings are silenced;
* ``aspecthook``: ``Runner(..., loss_fn=F.cross_entropy, scheduler=..., max_iters=...)``
  with ``IterTimer()``, ``LRSchedule(by_epoch=False)``, ``Logger(interval=50,
  json_file=None)`` and ``Checkpoint(interval=1000, by_epoch=False, save_last=False)``
  plus the runner's default aspects (``DistSamplerSeed``). ``save_last=False`` keeps the
  checkpoint count equal to "every 1,000" for any ``--iters`` (at 3,000 the last save is
  due anyway). aspecthook does more per save than the others (RNG states, scheduler and
  aspect state, sha256, ``fsync`` of file and folder, a manifest): that is its
  crash-safety. It serializes the state on the training thread at the save (inside its
  time, like the peers' ``torch.save``) and writes the file, its sha256, the fsyncs and
  the manifest on a background thread while training goes on; the last save of the run
  is written before ``run()`` returns, so that write is inside its time too, and the
  files are counted once every one is on disk. Its ``Logger`` also keeps a smoothed loss
  (one ``loss.detach()`` in each of the 20 iterations before a log point) and its
  ``IterTimer`` times every iteration; the peers do neither.

Data: a seeded ``TensorDataset`` of 4,000 samples (250 batches an epoch, 12 epochs at
3,000 iterations) in a ``DataLoader`` without shuffling, so every variant sees the same
batches; every variant starts from the same weights (``torch.manual_seed`` before the
model is built). Building model, optimizer, scheduler and loader is not timed; building
the framework's objects (engine, trainer, runner) is, as the "setup" part of the total.

Correctness is asserted, not assumed: after every run the benchmark checks that every
variant took the same number of optimizer steps (an optimizer step hook counts them), the
same number of scheduler steps, applied the same LR at its last step, emitted the same
number of log records and wrote the same number of checkpoints, and that its final
parameters and its loss on a fixed evaluation batch equal the hand-written loop's (bit for
bit is expected: the float operations are the same and in the same order). A mismatch
exits with an error.

Timing: one process, ``torch.set_num_threads(1)``, one untimed warm-up round, then
``--rounds`` rounds; each round runs every variant once, in an order shuffled per round
(seeded); ``gc.collect()`` before each run. Reported per variant: the median total time
over rounds, and the paired ratio to the hand-written loop, i.e. per round the variant's
time divided by the hand-written loop's time in the same round, with its median (the
figure the target is about) and its min-max. Targets are printed as PASS/MISS and never
asserted.

Lockstep (``--lockstep N``, default 3 runs per variant, after the rounds): on a shared
machine the speed of the CPU drifts by tens of percent within seconds, so two runs taken
seconds apart differ by more than the few percent the target is about, and even the
paired median over rounds moves by several percent from one invocation to the next. The
lockstep measurement takes that drift out: each variant runs as above, and after each of
its iterations (the last ``after_train_iter`` advice, ignite handler, Lightning callback)
one hand-written iteration runs on a second model, loader and folder, timed on its own.
Both loops then advance iteration by iteration under the same conditions; the variant's
loop time is its time from its first batch to its end less the hand-written iterations
inside it. The hand-written loop itself is run the same way as an A/A control: its ratio
(about 1.02-1.03 here) is the cost of the measurement, and "corrected" divides it out.
Setup is not in these figures (it is in the table above).

    python bench/loop.py                        # full run: 3-6 minutes on 2 busy cores
    python bench/loop.py --variants aspecthook --rounds 30   # and the hand-written baseline
    python bench/loop.py --variants aspecthook --aspects lr,timer --lockstep 5  # one aspect's cost
    python bench/loop.py --quick --json o.json  # smoke run: 60 iterations, 1 round
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import json
import logging
import math
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from importlib.metadata import version
from pathlib import Path
from typing import Any

import structlog
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

SEED = 0
DATA_SEED = 1
N_TRAIN = 4000
N_EVAL = 512
BATCH = 16
LR = 0.05
MOMENTUM = 0.9

VARIANTS = ("hand", "ignite", "lightning", "aspecthook")
LABELS = {
    "hand": "hand-written loop",
    "ignite": "pytorch-ignite",
    "lightning": "PyTorch Lightning",
    "aspecthook": "aspecthook Runner",
}
#: Ratios to the hand-written loop measured when the issue was written (for context).
REFERENCE = {"ignite": "1.02-1.14x", "lightning": "3.2x", "mmengine": "2.1x"}
TARGET = 1.03

# -- the log sink every variant shares ------------------------------------------------------

SINK: collections.Counter[str] = collections.Counter()


def count_and_drop(logger: Any, method: str, event_dict: Any) -> Any:
    """structlog's only processor: count the event by name, then drop it."""
    SINK[str(event_dict.get("event"))] += 1
    raise structlog.DropEvent


def configure_sink() -> None:
    structlog.configure(
        processors=[count_and_drop],
        logger_factory=structlog.ReturnLoggerFactory(),
        cache_logger_on_first_use=True,
    )


def quiet_peers() -> None:
    """Lightning's info lines and the warnings it gives about this set-up (no workers...)."""
    import lightning  # noqa: F401  (it sets its loggers' levels when imported)

    warnings.filterwarnings("ignore", module=r"lightning(\..*)?")
    warnings.filterwarnings("ignore", module=r"pytorch_lightning(\..*)?")
    warnings.filterwarnings("ignore", message=r".*does not have many workers.*")
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)


# -- the work every variant shares ---------------------------------------------------------


def make_model() -> nn.Module:
    torch.manual_seed(SEED)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))


def make_data() -> tuple[TensorDataset, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(DATA_SEED)
    teacher = torch.randn(32, 10, generator=g)

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(n, 32, generator=g)
        y = (x @ teacher + 0.5 * torch.randn(n, 10, generator=g)).argmax(dim=1)
        return x, y

    x, y = draw(N_TRAIN)
    x_eval, y_eval = draw(N_EVAL)
    return TensorDataset(x, y), x_eval, y_eval


class StepCounter:
    """An optimizer step post-hook: counts steps and keeps the LR the last step used."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.steps = 0
        self.last_lr = float("nan")
        optimizer.register_step_post_hook(self)

    def __call__(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.steps += 1
        self.last_lr = optimizer.param_groups[0]["lr"]


@dataclass
class Parts:
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    loader: Any  # a DataLoader, or a StampedLoader around one (lockstep)
    counter: StepCounter


class StampedLoader:
    """A loader that notes the time each batch is handed out (lockstep measurements)."""

    def __init__(self, loader: DataLoader[Any]) -> None:
        self.loader = loader
        self.stamps: list[float] = []

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        clock, stamps = time.perf_counter, self.stamps
        for batch in self.loader:
            stamps.append(clock())
            yield batch


@dataclass
class Work:
    dataset: TensorDataset
    x_eval: torch.Tensor
    y_eval: torch.Tensor
    iters: int
    log_every: int
    ckpt_every: int
    #: Lockstep only: called after each iteration of the variant; batches are stamped.
    after_iter: Callable[[], None] | None = None
    #: The Runner's aspects (``--aspects``): all four, or fewer to see what each costs.
    aspects: tuple[str, ...] = ("timer", "lr", "logger", "checkpoint")

    def build(self) -> Parts:
        model = make_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=self.iters)
        loader: Any = DataLoader(self.dataset, batch_size=BATCH, shuffle=False)
        if self.after_iter is not None:
            loader = StampedLoader(loader)
        return Parts(model, optimizer, scheduler, loader, StepCounter(optimizer))


def save_checkpoint(folder: Path, step: int, model: nn.Module, opt: torch.optim.Optimizer) -> None:
    """The peers' checkpoint: model and optimizer state, ``torch.save`` into ``folder``."""
    torch.save(
        {"model": model.state_dict(), "optimizer": opt.state_dict()}, folder / f"iter_{step}.pt"
    )


Stamp = tuple[float, float]


def stamp() -> Stamp:
    """Wall time and this process's CPU time, now."""
    return time.perf_counter(), time.process_time()


@dataclass
class Run:
    """One variant's run: its times and what it did (checked against the hand-written one)."""

    setup_s: float
    total_s: float
    cpu_s: float
    steps: int
    scheduler_steps: int
    last_lr: float
    records: int
    checkpoints: int
    eval_loss: float
    params: torch.Tensor = field(repr=False)


# -- (a) the hand-written loop ---------------------------------------------------------------


def run_hand(w: Work, folder: Path) -> tuple[Stamp, Stamp, Parts]:
    p = w.build()
    model, opt, sched = p.model, p.optimizer, p.scheduler
    log = structlog.get_logger("bench")
    t0 = stamp()
    t1 = t0
    it = 0
    model.train()
    while it < w.iters:
        for x, y in p.loader:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            sched.step()
            it += 1
            if it % w.log_every == 0:
                record = {"iter": it, "loss": loss.item(), "lr": opt.param_groups[0]["lr"]}
                log.info("train", **record)
            if it % w.ckpt_every == 0:
                save_checkpoint(folder, it, model, opt)
            if it >= w.iters:
                break
    return t0, t1, p


# -- (b) pytorch-ignite ----------------------------------------------------------------------


def run_ignite(w: Work, folder: Path) -> tuple[Stamp, Stamp, Parts]:
    from ignite.engine import Engine, Events

    p = w.build()
    model, opt, sched = p.model, p.optimizer, p.scheduler
    log = structlog.get_logger("bench")
    t0 = stamp()

    def train_step(engine: Engine, batch: Any) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    engine = Engine(train_step)

    @engine.on(Events.ITERATION_COMPLETED)
    def lr_step(engine: Engine) -> None:
        sched.step()

    @engine.on(Events.ITERATION_COMPLETED(every=w.log_every))
    def log_record(engine: Engine) -> None:
        it = engine.state.iteration
        record = {"iter": it, "loss": engine.state.output.item(), "lr": opt.param_groups[0]["lr"]}
        log.info("train", **record)

    @engine.on(Events.ITERATION_COMPLETED(every=w.ckpt_every))
    def checkpoint(engine: Engine) -> None:
        save_checkpoint(folder, engine.state.iteration, model, opt)

    if w.after_iter is not None:  # lockstep only, registered last
        engine.add_event_handler(Events.ITERATION_COMPLETED, lambda _: w.after_iter())

    t1 = stamp()
    model.train()
    engine.run(p.loader, max_iters=w.iters)
    return t0, t1, p


# -- (c) PyTorch Lightning ---------------------------------------------------------------------


def run_lightning(w: Work, folder: Path) -> tuple[Stamp, Stamp, Parts]:
    import lightning as L

    p = w.build()
    log = structlog.get_logger("bench")

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = p.model

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return F.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return {
                "optimizer": p.optimizer,
                "lr_scheduler": {"scheduler": p.scheduler, "interval": "step", "frequency": 1},
            }

    class Every(L.Callback):
        def on_train_batch_end(
            self, trainer: L.Trainer, module: L.LightningModule, outputs: Any, batch: Any, i: int
        ) -> None:
            step = trainer.global_step
            if step % w.log_every == 0:
                lr = p.optimizer.param_groups[0]["lr"]
                record = {"iter": step, "loss": outputs["loss"].item(), "lr": lr}
                log.info("train", **record)
            if step % w.ckpt_every == 0:
                save_checkpoint(folder, step, p.model, p.optimizer)

    class AfterIter(L.Callback):  # lockstep only, after Every
        def on_train_batch_end(self, *args: Any) -> None:
            assert w.after_iter is not None
            w.after_iter()

    t0 = stamp()
    module = Module()
    trainer = L.Trainer(
        max_steps=w.iters,
        max_epochs=-1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        callbacks=[Every(), *([AfterIter()] if w.after_iter is not None else [])],
        default_root_dir=str(folder),
    )
    t1 = stamp()
    trainer.fit(module, train_dataloaders=p.loader)
    return t0, t1, p


# -- (d) aspecthook ---------------------------------------------------------------------------


def run_aspecthook(w: Work, folder: Path) -> tuple[Stamp, Stamp, Parts]:
    import aspecthook
    from aspecthook.train import Runner
    from aspecthook.train.aspects import Checkpoint, IterTimer, Logger, LRSchedule

    class AfterIter(aspecthook.Aspect):  # lockstep only, after every other advice
        priority = aspecthook.Priority.LOWEST

        def after_train_iter(self, ctx: Any) -> None:
            assert w.after_iter is not None
            w.after_iter()

    p = w.build()
    t0 = stamp()
    made = {
        "timer": IterTimer,
        "lr": lambda: LRSchedule(by_epoch=False),
        "logger": lambda: Logger(interval=w.log_every, json_file=None),
        "checkpoint": lambda: Checkpoint(interval=w.ckpt_every, by_epoch=False, save_last=False),
    }
    runner = Runner(
        p.model,
        p.optimizer,
        p.loader,
        scheduler=p.scheduler,
        loss_fn=F.cross_entropy,
        max_iters=w.iters,
        work_dir=folder,
        aspects=[
            *(made[name]() for name in w.aspects),
            *([AfterIter()] if w.after_iter is not None else []),
        ],
    )
    t1 = stamp()
    try:
        runner.run()
    finally:
        runner.close()
    return t0, t1, p


RUNNERS: dict[str, Callable[[Work, Path], tuple[Stamp, Stamp, Parts]]] = {
    "hand": run_hand,
    "ignite": run_ignite,
    "lightning": run_lightning,
    "aspecthook": run_aspecthook,
}


# -- measuring ---------------------------------------------------------------------------------


def run_variant(key: str, w: Work) -> Run:
    with tempfile.TemporaryDirectory(prefix=f"aspecthook-bench-loop-{key}-") as tmp:
        folder = Path(tmp)
        records_before = SINK["train"]
        gc.collect()
        t0, t1, p = RUNNERS[key](w, folder)
        t2 = stamp()
        checkpoints = len(list(folder.glob("*.pt")))
        records = SINK["train"] - records_before
    if torch.get_num_threads() != 1:
        raise SystemExit(f"variant {key} changed torch's thread count to {torch.get_num_threads()}")
    model = p.model
    model.eval()
    with torch.no_grad():
        eval_loss = float(F.cross_entropy(model(w.x_eval), w.y_eval))
        params = torch.cat([t.detach().reshape(-1) for t in model.parameters()]).clone()
    return Run(
        setup_s=t1[0] - t0[0],
        total_s=t2[0] - t0[0],
        cpu_s=t2[1] - t0[1],
        steps=p.counter.steps,
        scheduler_steps=p.scheduler.last_epoch,
        last_lr=p.counter.last_lr,
        records=records,
        checkpoints=checkpoints,
        eval_loss=eval_loss,
        params=params,
    )


def check_same_work(runs: dict[str, Run], w: Work) -> None:
    """Every variant did the hand-written loop's work and ended where it ended."""
    ref = runs["hand"]
    expected = {
        "steps": w.iters,
        "scheduler_steps": w.iters,
        "records": w.iters // w.log_every,
        "checkpoints": w.iters // w.ckpt_every,
    }
    # --aspects without the logger or the checkpoint: the Runner does less, on purpose.
    left_out = {"records": "logger", "checkpoints": "checkpoint"}
    problems = []
    for key, run in runs.items():
        for what, value in expected.items():
            if key == "aspecthook" and left_out.get(what, "lr") not in w.aspects:
                continue
            if getattr(run, what) != value:
                problems.append(f"{key}: {what} = {getattr(run, what)}, expected {value}")
        if run.last_lr != ref.last_lr:
            problems.append(f"{key}: LR of the last step {run.last_lr!r} != {ref.last_lr!r}")
        same_params = torch.allclose(run.params, ref.params, rtol=1e-6, atol=1e-8)
        if not same_params:
            diff = float((run.params - ref.params).abs().max())
            problems.append(f"{key}: final parameters differ (max abs diff {diff:.3g})")
        if not torch.allclose(
            torch.tensor(run.eval_loss), torch.tensor(ref.eval_loss), rtol=1e-6, atol=1e-8
        ):
            problems.append(f"{key}: eval loss {run.eval_loss!r} != {ref.eval_loss!r}")
    if problems:
        raise SystemExit("variants did not do the same work:\n  " + "\n  ".join(problems))


def measure(
    w: Work, keys: tuple[str, ...], rounds: int, warmup: bool, seed: int
) -> tuple[dict[str, list[Run]], int]:
    """Interleaved rounds (order shuffled per round); returns the runs and how many rounds
    ended bit-identical to the hand-written loop."""
    runs: dict[str, list[Run]] = {key: [] for key in keys}
    order = list(keys)
    rng = random.Random(seed)
    identical = 0
    for r in range(-1 if warmup else 0, rounds):
        rng.shuffle(order)
        this_round = {key: run_variant(key, w) for key in order}
        check_same_work(this_round, w)
        ref = this_round["hand"]
        identical += all(
            torch.equal(run.params, ref.params) and run.eval_loss == ref.eval_loss
            for run in this_round.values()
        )
        if r >= 0:
            for key in keys:
                runs[key].append(this_round[key])
    return runs, identical


# -- lockstep ---------------------------------------------------------------------------------


class HandStep:
    """One hand-written iteration per call, on its own model, optimizer, loader and folder,
    timed: the reference the lockstep measurement runs beside each variant's iterations."""

    def __init__(self, w: Work, folder: Path) -> None:
        self.w = w
        self.folder = folder
        self.p = w.build()
        self.it = 0
        self.batches = iter(self.p.loader)
        self.log = structlog.get_logger("bench")
        self.times: list[float] = []
        self.p.model.train()

    def __call__(self) -> None:
        t = time.perf_counter()
        p, w = self.p, self.w
        try:
            x, y = next(self.batches)
        except StopIteration:
            self.batches = iter(p.loader)
            x, y = next(self.batches)
        loss = F.cross_entropy(p.model(x), y)
        loss.backward()
        p.optimizer.step()
        p.optimizer.zero_grad(set_to_none=True)
        p.scheduler.step()
        self.it += 1
        it = self.it
        if it % w.log_every == 0:
            record = {"iter": it, "loss": loss.item(), "lr": p.optimizer.param_groups[0]["lr"]}
            self.log.info("train", **record)
        if it % w.ckpt_every == 0:
            save_checkpoint(self.folder, it, p.model, p.optimizer)
        self.times.append(time.perf_counter() - t)


def run_hand_lockstep(w: Work, folder: Path) -> tuple[Stamp, Stamp, Parts]:
    """The hand-written loop again, calling ``w.after_iter`` after each iteration: the
    A/A control of the lockstep measurement (what it reports when nothing differs)."""
    p = w.build()
    model, opt, sched, after = p.model, p.optimizer, p.scheduler, w.after_iter
    assert after is not None
    log = structlog.get_logger("bench")
    t0 = stamp()
    it = 0
    model.train()
    while it < w.iters:
        for x, y in p.loader:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            sched.step()
            it += 1
            if it % w.log_every == 0:
                record = {"iter": it, "loss": loss.item(), "lr": opt.param_groups[0]["lr"]}
                log.info("train", **record)
            if it % w.ckpt_every == 0:
                save_checkpoint(folder, it, model, opt)
            after()
            if it >= w.iters:
                break
    return t0, t0, p


def run_lockstep(key: str, w: Work) -> tuple[float, float]:
    """Run ``key`` with one timed hand-written iteration after each of its iterations.

    Returns (variant's loop seconds, hand-written loop seconds): the variant's time from
    its first batch to its end, less the hand-written iterations run inside it. Both loops
    then run under the same machine conditions, iteration by iteration, which a busy
    machine never gives two runs seconds apart.
    """
    with (
        tempfile.TemporaryDirectory(prefix="aspecthook-bench-loop-ls-") as mine,
        tempfile.TemporaryDirectory(prefix="aspecthook-bench-loop-ls-hand-") as theirs,
    ):
        hand = HandStep(replace(w, after_iter=None), Path(theirs))
        stepped = replace(w, after_iter=hand)
        gc.collect()
        run = run_hand_lockstep if key == "hand" else RUNNERS[key]
        _, _, p = run(stepped, Path(mine))
        end = time.perf_counter()
    stamps = p.loader.stamps
    if p.counter.steps != w.iters or hand.it != w.iters:
        raise SystemExit(
            f"lockstep {key}: {p.counter.steps} variant steps and {hand.it} hand-written "
            f"steps, expected {w.iters} each"
        )
    theirs_params = torch.cat([t.detach().reshape(-1) for t in hand.p.model.parameters()])
    mine_params = torch.cat([t.detach().reshape(-1) for t in p.model.parameters()])
    if not torch.allclose(mine_params, theirs_params, rtol=1e-6, atol=1e-8):
        raise SystemExit(f"lockstep {key}: the variant ended elsewhere than the hand-written loop")
    hand_s = sum(hand.times)
    return end - stamps[0] - hand_s, hand_s


def measure_lockstep(
    w: Work, keys: tuple[str, ...], reps: int, seed: int
) -> dict[str, dict[str, Any]]:
    """``reps`` lockstep runs of every variant (the hand-written one as the A/A control)."""
    ratios: dict[str, list[float]] = {key: [] for key in keys}
    per_iter: dict[str, list[tuple[float, float]]] = {key: [] for key in keys}
    order = list(keys)
    rng = random.Random(seed + 1)
    for _ in range(reps):
        rng.shuffle(order)
        for key in order:
            mine, hand = run_lockstep(key, w)
            ratios[key].append(mine / hand)
            per_iter[key].append((mine / w.iters, hand / w.iters))
    control = statistics.median(ratios["hand"])
    out: dict[str, dict[str, Any]] = {}
    for key in keys:
        ratio = statistics.median(ratios[key])
        out[key] = {
            "label": LABELS[key] + (" (A/A control)" if key == "hand" else ""),
            "ratio_median": ratio,
            "ratios": ratios[key],
            "corrected": ratio / control,
            "variant_us_per_iter": statistics.median(m for m, _ in per_iter[key]) * 1e6,
            "hand_us_per_iter": statistics.median(h for _, h in per_iter[key]) * 1e6,
            "overhead_us_per_iter": statistics.median(m - h for m, h in per_iter[key]) * 1e6,
        }
    return out


# -- reporting ---------------------------------------------------------------------------------


def median_interval(values: list[float], level: float = 0.9) -> tuple[float, float]:
    """A distribution-free interval for the median of ``values`` (order statistics and the
    binomial distribution): the true median lies in it with probability >= ``level``, or
    the whole range when there are too few values for that."""
    ordered, n = sorted(values), len(values)
    k, below = 0, 0.0  # the widest k with P(Binomial(n, 1/2) < k) <= (1 - level) / 2
    while k < n // 2:
        below += math.comb(n, k) / 2**n
        if below > (1 - level) / 2:
            break
        k += 1
    return (ordered[k - 1], ordered[n - k]) if k else (ordered[0], ordered[-1])


def summarize(runs: dict[str, list[Run]]) -> dict[str, dict[str, Any]]:
    hand = runs["hand"]
    rows: dict[str, dict[str, Any]] = {}
    for key in runs:
        totals = [r.total_s for r in runs[key]]
        cpus = [r.cpu_s for r in runs[key]]
        ratios = [r.total_s / h.total_s for r, h in zip(runs[key], hand, strict=True)]
        cpu_ratios = [r.cpu_s / h.cpu_s for r, h in zip(runs[key], hand, strict=True)]
        last = runs[key][-1]
        rows[key] = {
            "label": LABELS[key],
            "median_s": statistics.median(totals),
            "min_s": min(totals),
            "times_s": totals,
            "cpu_median_s": statistics.median(cpus),
            "cpu_s": cpus,
            "setup_median_ms": statistics.median(r.setup_s for r in runs[key]) * 1e3,
            "ratio_median": statistics.median(ratios),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
            "ratio_interval": median_interval(ratios),
            "ratios": ratios,
            "cpu_ratio_median": statistics.median(cpu_ratios),
            "cpu_ratios": cpu_ratios,
            "steps": last.steps,
            "scheduler_steps": last.scheduler_steps,
            "last_lr": last.last_lr,
            "records": last.records,
            "checkpoints": last.checkpoints,
            "eval_loss": last.eval_loss,
        }
    return rows


def targets(
    rows: dict[str, dict[str, Any]], lockstep: dict[str, dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """The issue's targets on the paired medians, and the same on the lockstep figures."""
    if "aspecthook" not in rows:
        return []
    checks: list[tuple[str, float, float, bool]] = []
    figures = [("paired median", rows, "ratio_median", True)]
    if lockstep is not None:
        figures.append(("lockstep, loop only", lockstep, "corrected", False))
    for what, table, column, issue in figures:
        ours = table["aspecthook"][column]
        checks.append((f"aspecthook <= {TARGET}x hand-written ({what})", ours, TARGET, issue))
        peers = [table[k][column] for k in ("ignite", "lightning") if k in table]
        if peers:
            name = f"aspecthook ahead of every peer ({what}, best peer)"
            checks.append((name, ours, min(peers), issue))
    return [
        {
            "target": name,
            "value": value,
            "op": "<=",
            "limit": limit,
            "pass": value <= limit,
            "issue_figure": issue,
        }
        for name, value, limit, issue in checks
    ]


def print_report(
    rows: dict[str, dict[str, Any]],
    lockstep: dict[str, dict[str, Any]] | None,
    checks: list[dict[str, Any]],
    meta: dict[str, Any],
) -> None:
    print(
        f"python {meta['python']} | torch {meta['torch']} (threads {meta['torch_threads']}) | "
        f"ignite {meta['ignite']} | lightning {meta['lightning']} | {meta['cpus']} CPUs, "
        f"load avg {meta['loadavg_before']} before, {meta['loadavg_after']} after"
    )
    rounds = meta["rounds"]
    print(
        f"{meta['iters']} iterations, log every {meta['log_every']}, checkpoint every "
        f"{meta['ckpt_every']}; {rounds} interleaved round{'s' if rounds != 1 else ''}"
        + (" after 1 untimed warm-up round" if meta["warmup"] else "")
        + f"; final state bit-identical to the hand-written loop's in {meta['identical_rounds']}"
        f" of {meta['checked_rounds']} rounds; Runner aspects: {meta['aspects']}"
    )
    print()
    width = max(len(r["label"]) for r in rows.values())
    head = (
        f"{'variant':<{width}}  {'median s':>8}  {'min s':>6}  {'setup ms':>8}  "
        f"{'vs hand (paired median)':>23}  {'min-max':>11}  {'CPU vs hand':>11}  {'steps':>5}  "
        f"{'eval loss':>9}"
    )
    print(head)
    print("-" * len(head))
    for row in rows.values():
        spread = f"{row['ratio_min']:.2f}-{row['ratio_max']:.2f}"
        print(
            f"{row['label']:<{width}}  {row['median_s']:8.3f}  {row['min_s']:6.3f}  "
            f"{row['setup_median_ms']:8.1f}  {row['ratio_median']:22.3f}x  {spread:>11}  "
            f"{row['cpu_ratio_median']:10.3f}x  {row['steps']:5d}  {row['eval_loss']:9.6f}"
        )
    print(
        "median s / min s: wall time of a whole run (setup included) over rounds; setup ms: "
        "building the engine / trainer / runner;\nvs hand: median (and min-max) over rounds "
        "of the variant's wall time / the hand-written loop's in the same round;\nCPU vs "
        "hand: the same with process CPU time (leaves out time spent waiting for a CPU, not the "
        "slow-down that busy neighbours still cause)"
    )
    measured = [f"{k} {rows[k]['ratio_median']:.2f}x" for k in ("ignite", "lightning") if k in rows]
    print(
        "reference figures from the issue: "
        + ", ".join(f"{k} {v}" for k, v in REFERENCE.items())
        + ("; measured here: " + ", ".join(measured) if measured else "")
    )
    if lockstep is not None:
        print()
        print(
            f"lockstep ({meta['lockstep_reps']} run{'s' if meta['lockstep_reps'] != 1 else ''} "
            "per variant): after each of the variant's iterations one hand-written iteration "
            "runs, timed; loop only (from the first batch), setup left out"
        )
        head = (
            f"{'variant':<{width + 14}}  {'variant us/it':>13}  {'hand us/it':>10}  "
            f"{'overhead us/it':>14}  {'ratio':>7}  {'corrected':>9}"
        )
        print(head)
        print("-" * len(head))
        for row in lockstep.values():
            print(
                f"{row['label']:<{width + 14}}  {row['variant_us_per_iter']:13.1f}  "
                f"{row['hand_us_per_iter']:10.1f}  {row['overhead_us_per_iter']:14.1f}  "
                f"{row['ratio_median']:6.3f}x  {row['corrected']:8.3f}x"
            )
        print(
            "ratio: median over runs of the variant's loop time / the hand-written iterations' "
            "time beside it;\ncorrected: that / the A/A control's ratio (the cost of the "
            "measurement itself)"
        )
    print()
    if "aspecthook" in rows:
        low, high = rows["aspecthook"]["ratio_interval"]
        print(
            f"aspecthook paired median {rows['aspecthook']['ratio_median']:.3f}x, 90% interval "
            f"for the median {low:.3f}-{high:.3f}x (order statistics over {rounds} rounds)"
        )
    print("targets (the issue's, on the paired medians; the lockstep lines are for context)")
    for check in checks:
        mark = "PASS" if check["pass"] else "MISS"
        print(
            f"  {mark}  {check['target']}: {check['value']:.3f} "
            f"(target {check['op']} {check['limit']:.3f})"
        )


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--iters", type=int, default=3000, help="iterations (default 3000)")
    parser.add_argument("--rounds", type=int, default=10, help="timed rounds (default 10)")
    parser.add_argument("--log-every", type=int, default=50, help="log interval (default 50)")
    parser.add_argument(
        "--ckpt-every", type=int, default=1000, help="checkpoint interval (default 1000)"
    )
    parser.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up round")
    parser.add_argument(
        "--lockstep",
        type=int,
        default=3,
        metavar="N",
        help="lockstep runs per variant after the rounds (default 3; 0 skips them)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 60 iterations, log every 10, checkpoint every 30, 1 round, no warm-up",
    )
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help="comma-separated variants to run (the hand-written loop always runs: it is the "
        f"baseline); default: all of {','.join(VARIANTS)}",
    )
    parser.add_argument(
        "--aspects",
        default="timer,lr,logger,checkpoint",
        help="the Runner's aspects, of timer,lr,logger,checkpoint (lr always: the others step "
        "the scheduler too); fewer show what each costs, the others then do more work",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the per-round variant order")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if args.quick:
        args.iters, args.log_every, args.ckpt_every, args.rounds = 60, 10, 30, 1
        args.no_warmup, args.lockstep = True, 1
    chosen = {v.strip() for v in args.variants.split(",") if v.strip()}
    unknown = chosen - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; choose from {', '.join(VARIANTS)}")
    keys = tuple(k for k in VARIANTS if k == "hand" or k in chosen)
    for option in ("iters", "rounds", "log_every", "ckpt_every"):
        if getattr(args, option) < 1:
            parser.error(f"--{option.replace('_', '-')} must be a positive int")
    if args.lockstep < 0:
        parser.error("--lockstep must be 0 or more")
    aspects = tuple(a.strip() for a in args.aspects.split(",") if a.strip())
    if not set(aspects) <= {"timer", "lr", "logger", "checkpoint"} or "lr" not in aspects:
        parser.error("--aspects takes timer, lr, logger, checkpoint, and lr must be one of them")

    configure_sink()
    if "lightning" in keys:
        quiet_peers()
    dataset, x_eval, y_eval = make_data()
    work = Work(dataset, x_eval, y_eval, args.iters, args.log_every, args.ckpt_every)
    work = replace(work, aspects=aspects)
    loadavg = " ".join(f"{v:.2f}" for v in os.getloadavg())
    with one_thread():
        threads = torch.get_num_threads()
        runs, identical = measure(work, keys, args.rounds, not args.no_warmup, args.seed)
        lockstep = measure_lockstep(work, keys, args.lockstep, args.seed) if args.lockstep else None

    rows = summarize(runs)
    checks = targets(rows, lockstep)
    meta = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": threads,
        "ignite": version("pytorch-ignite"),
        "lightning": version("lightning"),
        "structlog": version("structlog"),
        "iters": args.iters,
        "log_every": args.log_every,
        "ckpt_every": args.ckpt_every,
        "aspects": ",".join(aspects),
        "rounds": args.rounds,
        "warmup": not args.no_warmup,
        "seed": args.seed,
        "loadavg_before": loadavg,
        "loadavg_after": " ".join(f"{v:.2f}" for v in os.getloadavg()),
        "lockstep_reps": args.lockstep,
        "identical_rounds": identical,
        "checked_rounds": args.rounds + (0 if args.no_warmup else 1),
        "reference": REFERENCE,
    }
    print_report(rows, lockstep, checks, meta)
    if args.json is not None:
        data = {"meta": meta, "variants": rows, "lockstep": lockstep, "targets": checks}
        args.json.write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
