"""Exact resume: killed anywhere (SIGKILL, even mid-write) and resumed, a run ends bit for bit
where an uninterrupted one ends; consumed batches are skipped without loading them."""

from __future__ import annotations

import hashlib
import io
import json
import multiprocessing
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _resume_worker
import numpy
import pytest
import torch
from _fixtures import CountingDataset, make_runner, one_thread, params
from _resume_worker import INTERVAL, KILL_MODES, N_ITERS
from torch.utils.data import DataLoader

import aspecthook as ah
from aspecthook import Aspect, CallContext, Priority
from aspecthook.train import Runner
from aspecthook.train._rng import capture, restore, restore_own_rank
from aspecthook.train.aspects import Checkpoint, GradAccumulation, NaNGuard

WORKER = Path(__file__).with_name("_resume_worker.py")


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    with one_thread():
        yield


def assert_identical(a: Any, b: Any, where: str = "state") -> None:
    """Equal types and values all the way down; tensors by ``torch.equal`` and dtype."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype, f"{where}: {a.dtype} != {b.dtype}"
        assert torch.equal(a, b), f"{where} differs"
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), f"{where}: keys {sorted(a)} != {sorted(b)}"
        for key in a:
            assert_identical(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{where}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_identical(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def _latest_is_readable(folder: Path) -> int:
    """Check the file ``latest`` names against its size and sha256, load it; its iteration."""
    manifest = json.loads((folder / "latest").read_text())
    record = manifest["checkpoints"][manifest["latest"]]
    data = (folder / manifest["latest"]).read_bytes()
    assert len(data) == record["size"], f"{manifest['latest']} is truncated"
    assert hashlib.sha256(data).hexdigest() == record["sha256"]
    payload = torch.load(io.BytesIO(data), weights_only=True)
    return int(payload["runner"]["counters"]["iter"])


def _kill_plan(rng: random.Random) -> list[tuple[str, int, int]]:
    """(mode, iteration, the iteration the next run resumes from) for each kill, in order.

    Checkpoint-write kills happen at checkpoint iterations (multiples of INTERVAL from the
    third on, so there is something to prune); ``iter`` kills anywhere after the first;
    ``inflight`` kills two iterations after a checkpoint, so not after the last one.
    """
    points = sorted(rng.sample(range(3 * INTERVAL, N_ITERS + 1, INTERVAL), len(KILL_MODES)))
    plan: list[tuple[str, int, int]] = []
    for mode, at in zip(rng.sample(KILL_MODES, len(KILL_MODES)), points, strict=True):
        if mode == "iter":
            at = min(at + rng.randrange(INTERVAL), N_ITERS - 1)
            resume = at - at % INTERVAL
        else:
            if mode == "inflight":
                at = min(at, N_ITERS - INTERVAL)
            resume = at if mode == "prune" else at - INTERVAL
        plan.append((mode, at, resume))
    # In the order the runs reach them (moving inflight back may have put it behind
    # another); at the same iteration, a kill that loses the checkpoint comes first.
    return sorted(plan, key=lambda kill: (kill[1], kill[2]))


@pytest.fixture(scope="module")
def forkserver() -> multiprocessing.context.ForkServerContext:
    """Processes forked from a server that has torch, its compiler stack and the worker
    imported: each run starts in milliseconds instead of seconds of imports."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch", "torch._dynamo", "_resume_worker"])
    return context


def _forked(
    context: multiprocessing.context.ForkServerContext, work_dir: Path, out: Path, kill: str | None
) -> int | None:
    """Run the worker in a fresh process; its exit code (-9: killed by SIGKILL)."""
    process = context.Process(target=_resume_worker.main, args=(str(work_dir), str(out), kill))
    process.start()
    process.join(120)
    if process.is_alive():
        process.kill()
        pytest.fail(f"the worker ({kill}) hung")
    return process.exitcode


def _cold_start(work_dir: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """Run the worker script in a new interpreter, as a restarted job would."""
    env = {k: v for k, v in os.environ.items() if k != "RESUME_KILL"}
    return subprocess.run(
        [sys.executable, str(WORKER), str(work_dir), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _resumed_from(out: Path) -> list[int]:
    """The iterations the runs resumed from, in order, and forget them."""
    events = Path(f"{out}.events")
    if not events.exists():
        return []
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    events.unlink()
    return [int(line["iter"]) for line in lines]


@pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL and a forkserver")
def test_killed_runs_resumed_end_bit_for_bit_equal_to_an_uninterrupted_run(
    tmp_path: Path, forkserver: multiprocessing.context.ForkServerContext
) -> None:
    """SIGKILL mid-iteration, inside torch.save, with half a temp file written, before
    os.replace, before ``latest`` moves, before pruning and while training goes on beside
    a write in flight, at random iterations: every kill leaves a readable ``latest``, each
    run resumes where expected, and the end state (weights, optimizer, scheduler, EMA,
    metrics, every loss and LR) and files equal those of one run in one go. The last run is
    a new interpreter, which imports everything anew while it resumes."""
    seed = int(os.environ.get("RESUME_TEST_SEED", random.randrange(2**32)))
    plan = _kill_plan(random.Random(seed))
    context = f"RESUME_TEST_SEED={seed}, plan={plan}"
    reference_dir, work_dir = tmp_path / "ref", tmp_path / "run"
    reference_out, out = tmp_path / "reference.pt", tmp_path / "final.pt"
    assert _forked(forkserver, reference_dir, reference_out, None) == 0
    expected = torch.load(reference_out, weights_only=True)

    previous: list[int] = []
    for mode, at, resume in plan:
        code = _forked(forkserver, work_dir, out, f"{mode}:{at}")
        assert code == -9, f"{context}: {mode}:{at} ended with {code}, not by SIGKILL"
        assert _resumed_from(out) == previous, context
        assert _latest_is_readable(work_dir) == resume, f"{context}: after {mode}:{at}"
        previous = [resume]
    done = _cold_start(work_dir, out)
    assert done.returncode == 0, f"{context}\n{done.stderr}"
    assert _resumed_from(out) == previous, context

    assert_identical(torch.load(out, weights_only=True), expected, "final")
    assert len(expected["history"]["losses"]) == N_ITERS
    assert {p.name for p in work_dir.iterdir()} == {p.name for p in reference_dir.iterdir()}


class _Crash(Aspect):
    """Raises in the backward pass of iteration ``at + 1`` (an in-process 'kill')."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def before_backward(self, ctx: CallContext) -> None:
        if ctx.runner.iter == self.at:
            raise KeyboardInterrupt


class _EpochDraws(Aspect):
    """Draws a random number at every epoch start (as a random curriculum would): resumed
    inside an epoch, the replayed start must not shift the RNG; at an epoch boundary, the
    real start must."""

    def before_train_epoch(self, ctx: CallContext) -> None:
        torch.rand(())


def _shuffled(work_dir: Path, by_epoch: bool, *extra: Aspect) -> Runner:
    """8 shuffled batches an epoch, dropout, 20 iterations; a checkpoint every epoch or
    every 5 iterations."""
    checkpoint = Checkpoint(1 if by_epoch else 5, by_epoch=by_epoch, resume="auto")
    aspects = [_EpochDraws(), *extra, checkpoint]
    return make_runner(work_dir, shuffle=True, dropout=0.3, max_iters=20, seed=7, aspects=aspects)


@pytest.mark.parametrize(
    ("by_epoch", "crash_at", "resumed_at"),
    [(False, 12, 10), (True, 18, 16)],
    ids=["inside-an-epoch", "at-an-epoch-boundary"],
)
def test_a_crashed_run_resumed_ends_like_one_that_never_stopped(
    tmp_path: Path, by_epoch: bool, crash_at: int, resumed_at: int
) -> None:
    """Same batches, dropout masks and per-epoch draws after the resume: the weights and
    optimizer state end equal to an uninterrupted run's."""
    crashed = _shuffled(tmp_path / "run", by_epoch, _Crash(crash_at))
    with pytest.raises(KeyboardInterrupt):
        crashed.run()
    resumed = _shuffled(tmp_path / "run", by_epoch)
    seen: list[int] = []
    with ah.on("checkpoint.resumed")(lambda event: seen.append(event.iter)):
        resumed.run()
    assert seen == [resumed_at]
    reference = _shuffled(tmp_path / "ref", by_epoch)
    reference.run()
    assert_identical(params(resumed), params(reference), "params")
    assert_identical(resumed.optimizer.state_dict(), reference.optimizer.state_dict(), "optim")


class _NaNLoss(Aspect):
    """Makes the loss of iteration ``at`` NaN (before ``NaNGuard`` sees it)."""

    priority = Priority.HIGHEST

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def before_backward(self, ctx: CallContext) -> None:
        if ctx.runner.iter == self.at:
            ctx.args[0] = ctx.args[0] * float("nan")


@pytest.mark.parametrize("nan_at", [None, 9], ids=["finite", "nan-earlier-in-the-group"])
def test_a_run_resumed_inside_an_accumulation_group_ends_like_one_that_never_stopped(
    tmp_path: Path, nan_at: int | None
) -> None:
    """Groups of 4 and a checkpoint every 5 iterations: the one at 10 is taken halfway
    through the group 8-11 (after a NaN at 9 that drops that group, in one case); the run
    resumed from it ends with the uninterrupted run's weights and optimizer state."""

    def extra() -> list[Aspect]:
        nan = [_NaNLoss(nan_at), NaNGuard("skip")] if nan_at is not None else []
        return [GradAccumulation(4), *nan]

    crashed = _shuffled(tmp_path / "run", False, _Crash(12), *extra())
    with pytest.raises(KeyboardInterrupt):
        crashed.run()
    resumed = _shuffled(tmp_path / "run", False, *extra())
    seen: list[int] = []
    with ah.on("checkpoint.resumed")(lambda event: seen.append(event.iter)):
        resumed.run()
    assert seen == [10]
    reference = _shuffled(tmp_path / "ref", False, *extra())
    reference.run()
    assert_identical(params(resumed), params(reference), "params")
    assert_identical(resumed.optimizer.state_dict(), reference.optimizer.state_dict(), "optim")


def _sampled(work_dir: Path, kind: str, *extra: Aspect) -> Runner:
    """48 samples through a sampler of ``kind`` (6 batches of 4 an epoch), 18 iterations,
    a checkpoint every 2."""
    from torch.utils.data import (
        BatchSampler,
        SubsetRandomSampler,
        TensorDataset,
        WeightedRandomSampler,
    )

    x = torch.randn(48, 4, generator=torch.Generator().manual_seed(0))
    data = TensorDataset(x, (x.sum(1) > 0).long())
    if kind == "subset":
        loader = DataLoader(data, batch_size=4, sampler=SubsetRandomSampler(range(0, 48, 2)))
    elif kind == "weighted":
        loader = DataLoader(data, batch_size=4, sampler=WeightedRandomSampler(torch.ones(48), 24))
    else:  # a batch sampler around a subset sampler
        inner = SubsetRandomSampler(range(1, 48, 2))
        loader = DataLoader(data, batch_sampler=BatchSampler(inner, 4, drop_last=False))
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    return Runner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loader,
        loss_fn=torch.nn.functional.cross_entropy,
        max_iters=18,
        seed=0,
        work_dir=work_dir,
        aspects=[*extra, Checkpoint(interval=2, by_epoch=False, resume="auto")],
    )


@pytest.mark.parametrize("kind", ["subset", "weighted", "batch-sampler"])
def test_samplers_with_a_generator_resume_mid_epoch_bit_for_bit(tmp_path: Path, kind: str) -> None:
    """DistSamplerSeed seeds any sampler with a generator (and the one inside a batch
    sampler): a run crashed mid-epoch resumes with the same order, ending equal."""
    crashed = _sampled(tmp_path / "run", kind, _Crash(8))
    with pytest.raises(KeyboardInterrupt):
        crashed.run()
    resumed = _sampled(tmp_path / "run", kind)
    resumed.run()
    reference = _sampled(tmp_path / "ref", kind)
    reference.run()
    assert_identical(params(resumed), params(reference), "params")


class _EpochEnds(Aspect):
    """Counts ``after_train_epoch`` calls; the count is part of checkpoints."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def after_train_epoch(self, ctx: CallContext) -> None:
        self.count += 1

    def state_dict(self) -> dict[str, Any]:
        return {"count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.count = state["count"]


class _CrashAfterLastIteration(Aspect):
    """Raises once the last iteration's after-advice (checkpoint included) has run."""

    priority = Priority.LOWEST

    def after_train_iter(self, ctx: CallContext) -> None:
        if ctx.runner.finished:
            raise KeyboardInterrupt


def test_a_crash_after_the_last_iteration_still_runs_the_epoch_end_once(tmp_path: Path) -> None:
    """max_iters=10 ends inside epoch 2; killed before that epoch's end advice ran, the
    resumed run replays it (the last iteration's checkpoint waits for the run's end)."""

    def build(folder: Path, *extra: Aspect) -> tuple[Runner, _EpochEnds]:
        ends = _EpochEnds()
        checkpoint = Checkpoint(by_epoch=False, resume="auto")
        runner = make_runner(folder, max_iters=10, aspects=[ends, *extra, checkpoint])
        return runner, ends

    crashed, _ = build(tmp_path / "run", _CrashAfterLastIteration())
    with pytest.raises(KeyboardInterrupt):
        crashed.run()
    resumed, ends = build(tmp_path / "run")
    resumed.run()
    reference, reference_ends = build(tmp_path / "ref")
    reference.run()
    assert ends.count == reference_ends.count == 2
    assert_identical(params(resumed), params(reference), "params")


class _StopAt(Aspect):
    """Stops the run after iteration ``at``, as EarlyStopping would."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def after_train_iter(self, ctx: CallContext) -> None:
        if ctx.runner.iter == self.at:
            ctx.runner.stop(f"stopped at {self.at}")


def test_a_run_stopped_early_stays_stopped_when_resumed(tmp_path: Path) -> None:
    """The stop reason is part of the checkpoint: resuming trains no further."""
    first = make_runner(tmp_path, max_iters=20, aspects=[_StopAt(5), Checkpoint(by_epoch=False)])
    first.run()
    again = make_runner(tmp_path, max_iters=20, aspects=[Checkpoint(resume="auto")])
    again.run()
    assert (again.iter, again.stop_reason) == (5, "stopped at 5")


def test_resume_skips_consumed_batches_without_loading_them(tmp_path: Path) -> None:
    """Resumed at iteration 9,000 of a 10,000-batch epoch, ``__getitem__`` runs only for the
    last 1,000 batches, and they are the last 1,000 of that epoch's shuffled order."""

    def runner_for(data: CountingDataset, checkpoint: Checkpoint) -> Runner:
        model = torch.nn.Linear(1, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
        loader = DataLoader(data, batch_size=1, shuffle=True)
        return Runner(
            model,
            optimizer,
            loader,
            loss_fn=torch.nn.functional.mse_loss,
            max_iters=10_000,
            seed=3,
            work_dir=tmp_path,
            aspects=[checkpoint],
        )

    saver = Checkpoint(by_epoch=False, interval=10_000, save_last=False)
    first = runner_for(CountingDataset(10_000), saver)
    first.iter = first.inner_iter = 9_000  # as if 9,000 iterations had run
    saver.save(first)
    data = CountingDataset(10_000)
    runner = runner_for(data, Checkpoint(by_epoch=False, interval=10_000, resume="auto"))
    runner.run()
    assert runner.iter == 10_000
    assert data.calls == 1_000
    order = torch.randperm(10_000, generator=torch.Generator().manual_seed(3)).tolist()
    assert data.seen == order[9_000:]


@pytest.mark.skipif(
    sys.platform == "win32" or not torch.distributed.is_available(), reason="needs gloo"
)
def test_each_rank_of_a_distributed_run_gets_its_own_rng_states_back(
    tmp_path: Path, forkserver: multiprocessing.context.ForkServerContext
) -> None:
    """Two gloo ranks with different generators: rank 0 writes one checkpoint holding both
    ranks' states; resumed, each rank draws what it drew after the checkpoint."""

    def run(phase: str) -> list[dict[str, Any]]:
        init, out = tmp_path / f"init-{phase}", tmp_path / phase
        args = (2, str(init), str(tmp_path / "run"), str(out))
        ranks = [
            forkserver.Process(target=_resume_worker.rank_main, args=(r, *args)) for r in (0, 1)
        ]
        for process in ranks:
            process.start()
        for process in ranks:
            process.join(120)
        assert [process.exitcode for process in ranks] == [0, 0]
        return [torch.load(f"{out}.{r}", weights_only=True) for r in (0, 1)]

    first = run("first")
    payload = torch.load(tmp_path / "run" / "iter_2.pt", weights_only=True)
    assert len(payload["rng"]) == 2
    assert not torch.equal(first[0]["torch"], first[1]["torch"])
    resumed = run("resumed")
    assert_identical(resumed, first, "draws")


def _two_ranks(
    forkserver: multiprocessing.context.ForkServerContext, target: Any, *args: str
) -> None:
    """Run ``target(rank, *args)`` as ranks 0 and 1; both must exit cleanly."""
    ranks = [forkserver.Process(target=target, args=(r, *args)) for r in (0, 1)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(120)
    assert [process.exitcode for process in ranks] == [0, 0]


@pytest.mark.skipif(
    sys.platform == "win32" or not torch.distributed.is_available(), reason="needs gloo"
)
def test_ranks_whose_metrics_disagree_still_save_the_best_together(
    tmp_path: Path, forkserver: multiprocessing.context.ForkServerContext
) -> None:
    """save_best follows rank 0's metric on every rank: both ranks finish, and the best
    file is rank 0's best (it used to leave rank 0 waiting in the save's collective)."""
    args = (str(tmp_path / "init"), str(tmp_path / "run"), str(tmp_path / "out"))
    _two_ranks(forkserver, _resume_worker.save_best_rank_main, *args)
    assert [torch.load(f"{args[2]}.{r}", weights_only=True)["epoch"] for r in (0, 1)] == [3, 3]
    assert {p.name for p in (tmp_path / "run").glob("best_*")} == {"best_val_acc_epoch_3.pt"}


@pytest.mark.skipif(
    sys.platform == "win32" or not torch.distributed.is_available(), reason="needs gloo"
)
def test_ranks_without_a_runner_seed_shuffle_from_rank_0s_base_seed(
    tmp_path: Path, forkserver: multiprocessing.context.ForkServerContext
) -> None:
    """DistSamplerSeed draws the base seed of a run without a seed once, on rank 0, for
    every rank, as a runner seed is one for all ranks. Each rank drew its own, and the
    checkpoint keeps rank 0's aspect state, so the other ranks shuffled differently once
    resumed."""
    args = (str(tmp_path / "init"), str(tmp_path / "out"))
    _two_ranks(forkserver, _resume_worker.sampler_seed_rank_main, *args)
    got = [torch.load(f"{args[1]}.{r}", weights_only=True) for r in (0, 1)]
    assert got[0]["base_seed"] == got[1]["base_seed"]
    assert torch.equal(got[0]["batch"], got[1]["batch"])


@pytest.mark.skipif(
    sys.platform == "win32" or not torch.distributed.is_available(), reason="needs gloo"
)
def test_sync_buffers_averages_float_buffers_over_the_ranks(
    tmp_path: Path, forkserver: multiprocessing.context.ForkServerContext
) -> None:
    """Two ranks, each on its own data: after the epoch both hold the mean of their
    running statistics, and rank 0's batch counter, already when they validate."""
    args = (str(tmp_path / "init"), str(tmp_path / "out"))
    _two_ranks(forkserver, _resume_worker.sync_buffers_rank_main, *args)
    got = [torch.load(f"{args[1]}.{r}", weights_only=True) for r in (0, 1)]
    mean = "1.running_mean"
    assert not torch.equal(got[0]["before"][mean], got[1]["before"][mean])
    expected = (got[0]["before"][mean] + got[1]["before"][mean]) / 2
    for r in (0, 1):
        torch.testing.assert_close(got[r]["validated"][mean], expected)
        torch.testing.assert_close(got[r]["after"][mean], expected)
        assert torch.equal(
            got[r]["after"]["1.num_batches_tracked"], got[0]["before"]["1.num_batches_tracked"]
        )


@pytest.mark.skipif(
    sys.platform == "win32" or not torch.distributed.is_available(), reason="needs gloo"
)
def test_ranks_whose_validation_shards_disagree_stop_together(
    tmp_path: Path, forkserver: multiprocessing.context.ForkServerContext
) -> None:
    """Evaluate adds up the ranks' shards: both ranks see the whole set's score (mean of
    1.0/1.0, then 0.5/2.0) and EarlyStopping stops both after the second validation."""
    args = (str(tmp_path / "init"), str(tmp_path / "out"))
    _two_ranks(forkserver, _resume_worker.early_stop_rank_main, *args)
    got = [torch.load(f"{args[1]}.{r}", weights_only=True) for r in (0, 1)]
    assert got[0] == got[1]
    assert got[0]["epoch"] == 2
    assert got[0]["val/score"] == 1.25
    assert got[0]["reason"] is not None


@pytest.mark.skipif(
    sys.platform == "win32" or not torch.distributed.is_available(), reason="needs gloo"
)
def test_a_nan_on_one_rank_is_skipped_by_every_rank(
    tmp_path: Path, forkserver: multiprocessing.context.ForkServerContext
) -> None:
    """NaNGuard under DistributedDataParallel: a NaN loss on rank 1 only makes both ranks
    skip that step, so their gradient all-reduces stay paired and the weights equal; rank
    0 alone logs it (every rank did)."""
    args = (str(tmp_path / "init"), str(tmp_path / "out"))
    _two_ranks(forkserver, _resume_worker.nan_guard_rank_main, *args)
    got = [torch.load(f"{args[1]}.{r}", weights_only=True) for r in (0, 1)]
    assert (
        got[0]["skipped"] == got[1]["skipped"] == [3]
    )  # the third iteration (runner.iter 2 as it starts)
    for a, b in zip(got[0]["weights"], got[1]["weights"], strict=True):
        assert torch.equal(a, b)
    assert [g["logged"] for g in got] == [1, 0]


@pytest.mark.skipif(
    sys.platform == "win32" or not torch.distributed.is_available(), reason="needs gloo"
)
def test_a_runner_built_before_the_process_group_sees_its_rank_when_it_runs(
    tmp_path: Path, forkserver: multiprocessing.context.ForkServerContext
) -> None:
    """rank and world_size are read from the process group when asked: a runner built
    before init_process_group gathers the shards' metrics and saves on rank 0 only."""
    args = (str(tmp_path / "init"), str(tmp_path / "run"), str(tmp_path / "out"))
    _two_ranks(forkserver, _resume_worker.late_group_rank_main, *args)
    got = [torch.load(f"{args[2]}.{r}", weights_only=True) for r in (0, 1)]
    assert [(g["rank"], g["world"]) for g in got] == [(0, 2), (1, 2)]
    assert [g["val/r"] for g in got] == [0.5, 0.5]
    assert [g["saved"] for g in got] == [["epoch_1.pt"], []]


@pytest.mark.skipif(
    sys.platform == "win32" or not torch.distributed.is_available(), reason="needs gloo"
)
def test_checkpoint_logs_and_warns_on_rank_0_only(
    tmp_path: Path, forkserver: multiprocessing.context.ForkServerContext
) -> None:
    """Two ranks start, find nothing, save, then resume past a damaged manifest: rank 0
    logs each of those once and warns about the manifest; rank 1 logs and warns nothing."""
    args = (str(tmp_path / "init"), str(tmp_path / "run"), str(tmp_path / "out"))
    _two_ranks(forkserver, _resume_worker.log_rank_main, *args)
    got = [json.loads(Path(f"{args[2]}.{r}").read_text()) for r in (0, 1)]
    assert got[1] == {"events": [], "warnings": []}
    events = got[0]["events"]
    assert {"checkpoint.start", "checkpoint.none_found", "checkpoint.unusable"} <= set(events)
    assert "checkpoint.resumed" in events
    assert events.count("checkpoint.start") == 2
    assert any("unreadable manifest" in warning for warning in got[0]["warnings"])


# -- RNG states --------------------------------------------------------------------------


def _draws(generator: torch.Generator) -> tuple[float, float, list[float], list[float]]:
    return (
        random.random(),
        float(numpy.random.rand()),
        torch.rand(3).tolist(),
        torch.rand(3, generator=generator).tolist(),
    )


def test_rng_states_restore_python_numpy_torch_and_named_generators() -> None:
    """After restore() every generator repeats the draws made after capture()."""
    generator = torch.Generator().manual_seed(5)
    state = capture({"loader": generator})
    first = _draws(generator)
    restore(state, {"loader": generator})
    assert _draws(generator) == first


def test_rng_states_survive_a_weights_only_round_trip() -> None:
    """Captured states are plain data: saved and loaded with weights_only they still restore."""
    buffer = io.BytesIO()
    torch.save([capture()], buffer)
    first = _draws(torch.Generator())
    buffer.seek(0)
    states = torch.load(buffer, weights_only=True)
    assert restore_own_rank(states, 0)
    assert _draws(torch.Generator())[:3] == first[:3]


def test_rng_keys_are_one_tensor_each_and_older_lists_of_ints_restore_too() -> None:
    """python's and numpy's keys are saved as int64 tensors (one record, not 624 pickled
    ints); checkpoints written with lists of ints restore the same generators."""
    state = capture()
    assert state["python"]["key"].dtype == state["numpy"]["key"].dtype == torch.int64
    as_lists = {
        **state,
        "python": {**state["python"], "key": state["python"]["key"].tolist()},
        "numpy": {**state["numpy"], "key": state["numpy"]["key"].tolist()},
    }
    generator = torch.Generator()
    first = _draws(generator)
    restore(as_lists)
    assert _draws(generator)[:3] == first[:3]


def test_a_rank_the_checkpoint_has_no_state_for_keeps_its_generators() -> None:
    """restore_own_rank says False and touches nothing for a rank beyond the saved ones."""
    states = [capture()]
    expected = torch.get_rng_state()
    random_state = random.getstate()
    assert not restore_own_rank(states, 1)
    assert torch.equal(torch.get_rng_state(), expected)
    assert random.getstate() == random_state


def test_a_distributed_sampler_is_given_each_epoch() -> None:
    """DistSamplerSeed calls set_epoch on a DistributedSampler before every epoch, as torch
    asks: each epoch's order is the one torch's sampler gives for that epoch, so the order
    changes from epoch to epoch (without set_epoch it would repeat)."""
    from torch.utils.data.distributed import DistributedSampler

    def sampler(dataset: CountingDataset) -> DistributedSampler[Any]:
        return DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True, seed=3)

    dataset = CountingDataset(8)
    model = torch.nn.Linear(1, 1)
    runner = Runner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        DataLoader(dataset, batch_size=4, sampler=sampler(dataset)),
        loss_fn=torch.nn.functional.mse_loss,
        max_epochs=3,
        seed=0,
    )
    epochs: list[int] = []
    runner.weaver.before("train_epoch")(lambda ctx: epochs.append(ctx.runner.epoch))
    runner.run()
    orders = [dataset.seen[i : i + 8] for i in range(0, 24, 8)]
    expected = []
    for epoch in epochs:
        reference = sampler(CountingDataset(8))
        reference.set_epoch(epoch)
        expected.append(list(reference))
    assert epochs == [0, 1, 2]
    assert orders == expected
    assert len({tuple(order) for order in orders}) == 3
