"""The fault-injection test's training run, which kills itself with SIGKILL where told to.

``python _resume_worker.py WORK_DIR OUT_FILE`` trains :func:`build_runner`'s configuration
with ``Checkpoint(resume='auto')`` in ``WORK_DIR``; the test also calls :func:`main` in
processes forked from a forkserver that has torch imported already (a fresh interpreter
costs seconds of imports per run). ``RESUME_KILL=<mode>:<k>`` (``kill=`` for
:func:`main`) makes the run die by ``SIGKILL`` (no cleanup, no ``finally``, as with the
OOM killer or a lost node):

- ``iter:k`` in the middle of iteration ``k + 1`` (in its backward pass), once every
  checkpoint saved so far is on disk (the modes below kill while one is being written);
- ``save:k`` inside ``torch.save`` of iteration ``k``'s checkpoint (which serializes it in
  memory on the training thread), half of it serialized: nothing of it is on disk yet;
- ``write:k`` on the background writer thread, with half of iteration ``k``'s checkpoint
  written to its temp file (before the fsync);
- ``replace:k`` with iteration ``k``'s checkpoint whole in its temp file, before
  ``os.replace`` gives it its name;
- ``latest:k`` with that checkpoint in place, before the manifest ``latest`` moves to it;
- ``prune:k`` after ``latest`` moved, before the old checkpoints are deleted;
- ``inflight:k`` on the training thread, in the backward pass of iteration ``k + 2``,
  while iteration ``k``'s checkpoint is still being written (its writer is held before
  ``os.replace``): training goes on while a write is in flight, and a kill then loses it.

The writer-thread kills are told apart by the files they act on, not by ``runner.iter``:
training has moved on by the time the writer gets there.

A run that finishes writes :func:`snapshot` to ``OUT_FILE``. Every resume appends a JSON
line ``{"resumed": "<file>", "iter": n}`` to ``OUT_FILE.events``.
"""

from __future__ import annotations

import io
import json
import os
import random
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import numpy
import structlog
import torch
from _fixtures import make_dataset, make_loader, make_model

import aspecthook as ah
from aspecthook import Aspect, CallContext, Event, Priority
from aspecthook.train import Runner
from aspecthook.train.aspects import EMA, Checkpoint, Evaluate, LRSchedule

N_ITERS = 60  # 96 samples in batches of 8: 12 iterations an epoch, the run ends on epoch 5's edge
INTERVAL = 3  # a checkpoint every 3 iterations; kills between them replay up to 2
MAX_KEEP = 2
KILL_MODES = ("iter", "save", "write", "replace", "latest", "prune", "inflight")


class LossHistory(Aspect):
    """Records every iteration's loss and LR; part of checkpoints, so the history of a
    resumed run is complete only if the resume was exact."""

    priority = Priority.LOW

    def __init__(self) -> None:
        super().__init__()
        self.losses: list[float] = []
        self.lrs: list[float] = []

    def after_train_iter(self, ctx: CallContext) -> None:
        runner = ctx.runner
        self.losses.append(runner.outputs["loss"].item())
        self.lrs.append(float(runner.optimizer.param_groups[0]["lr"]))

    def state_dict(self) -> dict[str, Any]:
        return {"losses": list(self.losses), "lrs": list(self.lrs)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.losses, self.lrs = list(state["losses"]), list(state["lrs"])


def noisy_step(runner: Runner, batch: Any) -> torch.Tensor:
    """Cross-entropy on inputs jittered with python, numpy and torch random numbers, so an
    RNG restored wrongly (any of the three) changes the result."""
    x, y = batch
    scale = 0.05 * random.random() + 0.05 * float(numpy.random.rand())
    x = x + scale * torch.randn_like(x)
    return torch.nn.functional.cross_entropy(runner.model(x), y)


def accuracy(outputs: torch.Tensor, targets: torch.Tensor) -> float:
    return float((outputs.argmax(dim=1) == targets).float().mean())


def build_runner(work_dir: str | os.PathLike[str]) -> Runner:
    """Shuffling, dropout, SGD with momentum, warm-up + cosine LR per iteration, EMA,
    validation every 6 iterations, a checkpoint every 3 (keeping 2, plus the best; best
    saves fall on checkpoint iterations, so each kill has one known resume point)."""
    model = make_model(features=6, hidden=32, dropout=0.2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9, weight_decay=1e-4)
    features = 6
    return Runner(
        model,
        optimizer,
        make_loader(make_dataset(96, features), batch_size=8, shuffle=True),
        val_loader=make_loader(make_dataset(32, features, seed=1), batch_size=16),
        loss_fn=torch.nn.functional.cross_entropy,
        train_step=noisy_step,
        max_iters=N_ITERS,
        seed=1234,
        work_dir=work_dir,
        aspects=[
            LRSchedule(
                lambda opt: torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=N_ITERS),
                by_epoch=False,
                warmup="linear",
                warmup_iters=8,
            ),
            EMA(decay=0.9),
            Evaluate(2 * INTERVAL, by_epoch=False, metrics={"acc": accuracy}),
            LossHistory(),
            Checkpoint(
                INTERVAL, by_epoch=False, max_keep=MAX_KEEP, save_best="val/acc", resume="auto"
            ),
        ],
    )


def snapshot(runner: Runner) -> dict[str, Any]:
    """What must match bit for bit: weights, optimizer, scheduler, EMA, metrics, history."""
    state = runner.state_dict()
    return {
        "model": state["model"],
        "optimizer": state["optimizer"],
        "scheduler": state["scheduler"],
        "counters": state["counters"],
        "metrics": state["metrics"],
        "ema": state["aspects"]["ema"],
        "history": state["aspects"]["loss_history"],
        "best": state["aspects"]["checkpoint"],
    }


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


class _KillInBackward(Aspect):
    """Dies in the backward pass after iteration ``at``, once ``ready`` says so."""

    priority = Priority.LOWEST

    def __init__(self, at: int, ready: Any) -> None:
        super().__init__()
        self.at = at
        self.ready = ready

    def before_backward(self, ctx: CallContext) -> None:
        if ctx.runner.iter == self.at:
            self.ready()
            _die()


def _arm(runner: Runner, mode: str, at: int) -> None:
    """Make the run die as ``mode`` says once it reaches iteration ``at``."""
    checkpoint = runner.get_aspect(Checkpoint)
    assert isinstance(checkpoint, Checkpoint)
    if mode == "iter":
        runner.add_aspect(_KillInBackward(at, checkpoint.wait))
        return
    held = threading.Event()  # inflight: the writer of iteration at's checkpoint is held
    if mode == "inflight":
        runner.add_aspect(_KillInBackward(at + 1, lambda: held.wait(60)))
    target = f"iter_{at}.pt"
    done: set[str] = set()  # the steps of target's save done so far: placed, latest
    temp_names: dict[int, str] = {}  # open temp file descriptors -> their names
    real_save, real_replace, real_unlink = torch.save, os.replace, os.unlink
    real_fsync, real_open = os.fsync, os.open

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:  # training thread
        if mode == "save" and runner.iter == at:
            buffer = io.BytesIO()
            real_save(obj, buffer, *args, **kwargs)
            f.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
            f.flush()
            _die()
        real_save(obj, f, *args, **kwargs)

    def open_(path: Any, *args: Any, **kwargs: Any) -> int:
        fd = real_open(path, *args, **kwargs)
        temp_names[fd] = Path(path).name
        return fd

    def fsync(fd: int) -> None:
        name = temp_names.pop(fd, "")
        if mode == "write" and name.startswith(f".{target}."):
            os.ftruncate(fd, os.fstat(fd).st_size // 2)
            _die()
        real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        name = Path(dst).name
        if name == target and mode == "replace":
            _die()
        if name == target and mode == "inflight":
            held.set()
            threading.Event().wait()  # until the training thread kills the process
        if name == "latest" and "placed" in done and mode == "latest":
            _die()
        real_replace(src, dst)
        if name == target:
            done.add("placed")
        elif name == "latest" and "placed" in done:
            done.add("latest")

    def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        if mode == "prune" and "latest" in done and Path(path).suffix == ".pt":
            _die()
        real_unlink(path, *args, **kwargs)

    torch.save, os.replace, os.unlink, os.fsync = save, replace, unlink, fsync  # type: ignore[assignment]
    os.open = open_


def main(work_dir: str, out_file: str, kill: str | None = None) -> None:
    """Train (resuming from ``work_dir`` if it has a checkpoint); die as ``kill`` says."""
    torch.set_num_threads(1)
    runner = build_runner(work_dir)
    if kill:
        mode, at = kill.split(":")
        _arm(runner, mode, int(at))

    def report(event: Event) -> None:
        with open(f"{out_file}.events", "a") as events:
            events.write(json.dumps({"resumed": Path(event.path).name, "iter": event.iter}) + "\n")

    with ah.on("checkpoint.resumed")(report):
        runner.run()
    torch.save(snapshot(runner), out_file)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], os.environ.get("RESUME_KILL"))


def rank_main(rank: int, world_size: int, init_file: str, work_dir: str, out_file: str) -> None:
    """One rank of a gloo run: train 2 iterations (resuming if ``work_dir`` has a
    checkpoint), then write this rank's next random numbers to ``OUT_FILE.<rank>``.

    Ranks seed differently, so their generators differ and each must get its own back.
    """
    torch.set_num_threads(1)
    dist = torch.distributed
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size
    )
    try:
        model = make_model()  # seeds torch itself: the ranks' own seeds come after
        torch.manual_seed(100 + rank)
        random.seed(100 + rank)
        runner = Runner(
            model,
            torch.optim.SGD(model.parameters(), lr=0.1),
            make_loader(make_dataset(16)),
            loss_fn=torch.nn.functional.cross_entropy,
            max_iters=2,
            work_dir=work_dir,
            aspects=[Checkpoint(by_epoch=False, resume="auto")],
        )
        runner.run()
        draws = {"torch": torch.rand(3), "python": random.random()}
        torch.save(draws, f"{out_file}.{rank}")
    finally:
        dist.destroy_process_group()


def save_best_rank_main(rank: int, init_file: str, work_dir: str, out_file: str) -> None:
    """One of two gloo ranks whose validation shards disagree on whether ``val/acc``
    improved (rank 0: up every time, rank 1: down): every rank must still take part in
    every save, which is a collective, or rank 0 would wait in it for ever."""
    dist = _gloo(rank, init_file)
    try:
        checkpoint = Checkpoint(interval=10, save_last=False, save_best="val/acc")
        scores = {0: [0.5, 0.7, 0.9], 1: [0.5, 0.4, 0.3]}[rank]
        runner = _scored_runner("acc", scores, checkpoint, max_epochs=3, work_dir=work_dir)
        runner.run()
        torch.save({"epoch": runner.epoch}, f"{out_file}.{rank}")
    finally:
        dist.destroy_process_group()


def sync_buffers_rank_main(rank: int, init_file: str, out_file: str) -> None:
    """One of two gloo ranks training a batch-norm model on its own data with
    ``SyncBuffers``: writes its buffers before the sync (advice that runs first) and after
    the run to ``OUT_FILE.<rank>``."""
    torch.set_num_threads(1)
    dist = torch.distributed
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        from aspecthook.train.aspects import SyncBuffers

        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
        runner = Runner(
            model,
            torch.optim.SGD(model.parameters(), lr=0.1),
            make_loader(make_dataset(16, seed=rank)),  # each rank its own shard
            val_loader=make_loader(make_dataset(8, seed=2)),
            loss_fn=torch.nn.functional.cross_entropy,
            max_epochs=1,
            aspects=[SyncBuffers()],
        )
        before: dict[str, torch.Tensor] = {}
        validated: dict[str, torch.Tensor] = {}
        runner.weaver.after("train_epoch", priority="HIGHEST")(
            lambda ctx: before.update({k: v.clone() for k, v in model.named_buffers()})
        )
        runner.weaver.before("val_epoch")(
            lambda ctx: validated.update({k: v.clone() for k, v in model.named_buffers()})
        )
        runner.run()
        after = {k: v.clone() for k, v in model.named_buffers()}
        torch.save({"before": before, "validated": validated, "after": after}, f"{out_file}.{rank}")
    finally:
        dist.destroy_process_group()


def _scored_runner(metric: str, scores: list[float], aspect: Any, **kwargs: Any) -> Runner:
    """A runner whose validations report ``scores`` in turn as ``val/<metric>`` (this
    rank's shard), with ``aspect`` deciding on them."""
    from aspecthook.train.aspects import Evaluate

    values = iter(scores)
    model = make_model()
    return Runner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        make_loader(make_dataset(16)),
        val_loader=make_loader(make_dataset(8, seed=1), batch_size=8),
        loss_fn=torch.nn.functional.cross_entropy,
        aspects=[Evaluate(metrics={metric: lambda outputs, targets: next(values)}), aspect],
        **kwargs,
    )


def _gloo(rank: int, init_file: str) -> Any:
    """Join the two-rank gloo group (a 20 s timeout: a hang fails instead of waiting)."""
    import datetime

    torch.set_num_threads(1)
    dist = torch.distributed
    dist.init_process_group(
        "gloo",
        init_method=f"file://{init_file}",
        rank=rank,
        world_size=2,
        timeout=datetime.timedelta(seconds=20),
    )
    return dist


def early_stop_rank_main(rank: int, init_file: str, out_file: str) -> None:
    """One of two gloo ranks whose validation shards disagree (rank 0's score falls, rank
    1's rises): both must see the whole set's score and stop at the same validation."""
    dist = _gloo(rank, init_file)
    try:
        from aspecthook.train.aspects import EarlyStopping

        stopping = EarlyStopping("val/score", rule="less", patience=1)
        scores = {0: [1.0, 0.5, 0.4, 0.3], 1: [1.0, 2.0, 3.0, 4.0]}[rank]
        runner = _scored_runner("score", scores, stopping, max_epochs=4)
        runner.run()
        result = {"epoch": runner.epoch, "reason": runner.stop_reason, **runner.metrics}
        torch.save(result, f"{out_file}.{rank}")
    finally:
        dist.destroy_process_group()


def nan_guard_rank_main(rank: int, init_file: str, out_file: str) -> None:
    """One of two gloo ranks of a DistributedDataParallel model whose loss is NaN on rank 1
    only, at iteration 2: both ranks must skip that step together and stay in step."""
    dist = _gloo(rank, init_file)
    try:
        from aspecthook.train.aspects import NaNGuard

        model = torch.nn.parallel.DistributedDataParallel(make_model())

        def step(runner: Runner, batch: Any) -> torch.Tensor:
            loss = torch.nn.functional.cross_entropy(runner.model(batch[0]), batch[1])
            return loss * float("nan") if rank == 1 and runner.iter == 2 else loss

        guard = NaNGuard("skip")
        runner = Runner(
            model,
            torch.optim.SGD(model.parameters(), lr=0.1),
            make_loader(make_dataset(32, seed=rank)),
            train_step=step,
            max_epochs=1,
            aspects=[guard],
        )
        with structlog.testing.capture_logs() as logs:
            runner.run()
        events = [log["event"] for log in logs if log["event"].startswith("nan_guard.")]
        weights = [p.detach().clone() for p in model.module.parameters()]
        result = {"skipped": guard.skipped, "weights": weights, "logged": len(events)}
        torch.save(result, f"{out_file}.{rank}")
    finally:
        dist.destroy_process_group()


def late_group_rank_main(rank: int, init_file: str, work_dir: str, out_file: str) -> None:
    """One of two gloo ranks whose runner is built before the process group is joined:
    it must still see its rank and the world size when it runs (rank 0 alone writes, the
    metric is the whole set's)."""
    torch.set_num_threads(1)
    checkpoint = Checkpoint(save_last=True)
    runner = _scored_runner("r", [float(rank)], checkpoint, max_epochs=1, work_dir=work_dir)
    dist = _gloo(rank, init_file)
    try:
        saved: list[str] = []
        with ah.on("checkpoint.saved")(lambda event: saved.append(Path(event.path).name)):
            runner.run()
        result = {"rank": runner.rank, "world": runner.world_size, "saved": saved}
        torch.save({**result, "val/r": runner.metrics["val/r"]}, f"{out_file}.{rank}")
    finally:
        dist.destroy_process_group()


def sampler_seed_rank_main(rank: int, init_file: str, out_file: str) -> None:
    """One of two gloo ranks with generators seeded apart and no runner seed, shuffling
    with a ``RandomSampler``: writes ``DistSamplerSeed``'s base seed and the first batch's
    samples to ``OUT_FILE.<rank>``."""
    dist = _gloo(rank, init_file)
    try:
        from aspecthook.train.aspects import DistSamplerSeed

        model = make_model()  # seeds torch with 0
        torch.manual_seed(rank)
        first: list[torch.Tensor] = []
        runner = Runner(
            model,
            torch.optim.SGD(model.parameters(), lr=0.1),
            make_loader(make_dataset(16), shuffle=True),
            loss_fn=torch.nn.functional.cross_entropy,
            max_iters=1,
        )
        runner.weaver.before("train_iter")(lambda ctx: first.append(ctx.args[-1][0]))
        runner.run()
        aspect = runner.get_aspect(DistSamplerSeed)
        assert aspect is not None
        torch.save({"base_seed": aspect.base_seed, "batch": first[0]}, f"{out_file}.{rank}")
    finally:
        dist.destroy_process_group()


def log_rank_main(rank: int, init_file: str, work_dir: str, out_file: str) -> None:
    """One of two gloo ranks that train with ``Checkpoint(resume='auto')`` in an empty
    ``work_dir``, then again after rank 0 damaged the manifest: writes the events its
    ``checkpoint.*`` log records name and its warnings to ``OUT_FILE.<rank>`` (JSON)."""
    import warnings

    dist = _gloo(rank, init_file)
    try:
        events: list[str] = []
        with (
            structlog.testing.capture_logs() as logs,
            warnings.catch_warnings(record=True) as caught,
        ):
            warnings.simplefilter("always")
            for max_iters in (2, 4):
                if max_iters == 4:
                    dist.barrier()  # the first run's files are all written
                    if rank == 0:
                        (Path(work_dir) / "latest").write_text("{")
                    dist.barrier()
                model = make_model()
                runner = Runner(
                    model,
                    torch.optim.SGD(model.parameters(), lr=0.1),
                    make_loader(make_dataset(16)),
                    loss_fn=torch.nn.functional.cross_entropy,
                    max_iters=max_iters,
                    work_dir=work_dir,
                    aspects=[Checkpoint(by_epoch=False, resume="auto")],
                    default_aspects=False,
                )
                runner.run()
        events = [log["event"] for log in logs if log["event"].startswith("checkpoint.")]
        said = [str(warning.message) for warning in caught]
        Path(f"{out_file}.{rank}").write_text(json.dumps({"events": events, "warnings": said}))
    finally:
        dist.destroy_process_group()
