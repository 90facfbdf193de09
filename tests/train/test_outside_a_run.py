"""Training aspects at a join point of your own called outside a run: a ``RunnerError``
that says so, while the same join point inside a run, and a runner's own join points, run
the advice as before (the runner's with no check at all)."""

from __future__ import annotations

import asyncio
import contextvars
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import structlog
import torch
from _fixtures import make_runner, one_thread

import aspecthook as ah
from aspecthook import Aspect, CallContext, Proceed
from aspecthook.errors import RunnerError
from aspecthook.train import Runner
from aspecthook.train.aspects import (
    EMA,
    Checkpoint,
    DistSamplerSeed,
    EarlyStopping,
    EmptyCache,
    Evaluate,
    GradClip,
    IterTimer,
    Logger,
    LRSchedule,
    NaNGuard,
)


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    with one_thread():
        yield


def _outside(aspect: str, stage: str) -> str:
    """The pattern of the error for ``aspect``'s advice at ``stage`` called outside a run."""
    name = re.escape(repr(stage))
    return (
        rf"^{aspect} needs a training runner: {name} was called outside a run, so "
        rf"ctx\.runner is None .*give the aspect to "
        rf"aspecthook\.train\.Runner\(aspects=\[{aspect}\(\.\.\.\)\]\), or call {name} "
        r"from within runner\.run\(\)"
    )


def _users_step(x: int) -> int:
    """A step of the user's own loop, not of a Runner."""
    return x + 1


@pytest.mark.parametrize(
    ("make", "stage"),
    [
        pytest.param(lambda: LRSchedule(warmup="linear", warmup_iters=5), "train_iter", id="lr"),
        # every=2 (and Logger's every=50): the check comes before the filter, so the
        # first call already fails.
        pytest.param(lambda: Checkpoint(interval=2, by_epoch=False), "train_iter", id="ckpt"),
        pytest.param(lambda: Logger(interval=50, errors="raise"), "train_iter", id="logger"),
        pytest.param(IterTimer, "train_iter", id="timer"),
        pytest.param(lambda: EmptyCache(interval=1), "train_iter", id="empty_cache"),
        pytest.param(Evaluate, "train_epoch", id="evaluate"),
        pytest.param(DistSamplerSeed, "train_epoch", id="sampler_seed"),
        pytest.param(EarlyStopping, "val_epoch", id="early_stopping"),
        pytest.param(lambda: GradClip(max_norm=1.0), "optimizer_step", id="grad_clip"),
        pytest.param(NaNGuard, "backward", id="nan_guard"),
    ],
)
def test_a_training_aspect_on_your_own_join_point_outside_a_run_raises_runner_error(
    make: Callable[[], Aspect], stage: str
) -> None:
    """A training aspect at a join point of the user's own named like a runner stage,
    called outside a run: RunnerError naming the aspect and the join point, and the fix."""
    aspect = make()
    point = ah.joinpoint(stage)(_users_step)
    with (
        ah.register(aspect),
        pytest.raises(RunnerError, match=_outside(type(aspect).__name__, stage)),
    ):
        point(1)


def test_around_advice_outside_a_run_raises_or_logs_and_the_target_runs_once() -> None:
    """EMA's around_val_epoch outside a run: RunnerError before the target runs; under
    errors='log' the failure is logged and the target runs once, its result kept."""
    calls: list[int] = []

    def validate() -> str:
        calls.append(1)
        return "metrics"

    point = ah.joinpoint("val_epoch")(validate)
    with ah.register(EMA()), pytest.raises(RunnerError, match=_outside("EMA", "val_epoch")):
        point()
    assert calls == []
    with ah.register(EMA(errors="log")), structlog.testing.capture_logs() as logs:
        assert point() == "metrics"
    assert calls == [1]
    [failed] = [e for e in logs if e["event"] == "advice.failed"]
    assert failed["advice"] == "ema.around_val_epoch"


def test_logger_outside_a_run_is_reported_once_under_errors_log() -> None:
    """Logger (errors='log') at the user's train_iter: reported at the first call (not only
    on its logging iterations), once, not at every call of the user's loop; the calls go
    on."""
    point = ah.joinpoint("train_iter")(_users_step)
    with ah.register(Logger(interval=50)), structlog.testing.capture_logs() as logs:
        assert [point(i) for i in range(3)] == [1, 2, 3]
    failed = [e for e in logs if e["event"] == "advice.failed"]
    assert [e["advice"] for e in failed] == ["logger.after_train_iter"]


class _NeedsRunner(Aspect):
    """An aspect of the user's own that reads the run."""

    needs_runner = True

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.seen: list[Any] = []

    def before_score(self, ctx: CallContext) -> None:
        self.seen.append(ctx.runner)

    def around_score(self, ctx: CallContext, proceed: Proceed) -> Any:
        return proceed()


class _NeedsRunnerAsync(Aspect):
    """The same with async advice, for an async join point."""

    needs_runner = True

    async def around_score(self, ctx: CallContext, proceed: Proceed) -> Any:
        return await proceed()


def test_needs_runner_on_an_aspect_of_your_own() -> None:
    """needs_runner=True on the user's aspect: outside a run its advice raises RunnerError;
    inside a run the same module-level join point gets the runner (from the current run)."""
    aspect = _NeedsRunner()
    point = ah.joinpoint("score")(_users_step)
    runner = make_runner(None, max_iters=2, train_step=lambda r, batch: _loss(r, batch, point))
    with ah.register(aspect):
        with pytest.raises(RunnerError, match=_outside("_NeedsRunner", "score")):
            point(1)
        runner.run()
    assert aspect.seen == [runner, runner]


def _loss(runner: Runner, batch: Any, point: Callable[[int], int]) -> torch.Tensor:
    """The default step's loss, after calling the user's join point ``point``."""
    point(1)
    x, y = batch
    return torch.nn.functional.cross_entropy(runner.model(x), y)


@pytest.mark.parametrize("aspect", [IterTimer, _NeedsRunnerAsync], ids=["sync", "async"])
def test_an_async_join_point_outside_a_run_raises_runner_error(aspect: type[Aspect]) -> None:
    """At an async join point, sync and async advice of such an aspect raise it too; under
    errors='log' the target still runs (around advice proceeds for it)."""
    stage = "train_iter" if aspect is IterTimer else "score"

    async def step(x: int) -> int:
        return x + 1

    point = ah.joinpoint(stage)(step)
    with ah.register(aspect()), pytest.raises(RunnerError, match=_outside(aspect.__name__, stage)):
        asyncio.run(point(1))
    with ah.register(aspect(errors="log")), structlog.testing.capture_logs() as logs:
        assert asyncio.run(point(1)) == 2
    assert [e["event"] for e in logs].count("advice.failed") >= 1


def test_the_same_join_point_inside_a_run_gets_the_runner() -> None:
    """A validation of the user's own declared on the run (@runner.joinpoint('val_epoch'))
    and called from its train_step: EarlyStopping reads the run and stops it; called after
    the run, outside it, the same join point raises RunnerError."""
    runner = make_runner(None, aspects=[EarlyStopping(patience=1)], max_epochs=1)

    @runner.joinpoint("val_epoch")
    def validate() -> None:
        runner.metrics["val/loss"] = 1.0  # never improves after the first

    def train_step(r: Runner, batch: Any) -> torch.Tensor:
        validate()
        x, y = batch
        return torch.nn.functional.cross_entropy(r.model(x), y)

    runner.train_step = train_step
    runner.run()
    assert runner.iter == 2  # 8 batches; stopped after the second validation
    assert "did not improve" in (runner.stop_reason or "")
    with pytest.raises(RunnerError, match=_outside("EarlyStopping", "val_epoch")):
        validate()


def test_a_runners_own_join_points_run_the_advice_unchecked() -> None:
    """The check is added only where a call may have no runner: a training aspect on the
    default weaver runs as it is at a runner's own train_iter (its chain and generated
    dispatcher hold the advice itself, no guard frame) and behind the check at the
    user's join point named train_iter."""
    timer = IterTimer()
    point: Any = ah.joinpoint("train_iter")(_users_step)
    runner = make_runner(None, max_iters=2)
    with ah.register(timer):
        proxy: Any = runner._proxies["train_iter"]
        own = proxy._self_joinpoint.chain
        assert timer.before_train_iter in own.before
        assert timer.after_train_iter in own.after
        dispatcher: Any = runner.train_iter  # what the loop calls: generated for the chain
        assert timer.after_train_iter in [c.cell_contents for c in dispatcher.__closure__]
        users = point._self_joinpoint.chain
        assert timer.after_train_iter not in users.after
        assert timer.before_train_iter not in users.before
        runner.run()
        assert runner.outputs["time"] > 0
        with pytest.raises(RunnerError, match=_outside("IterTimer", "train_iter")):
            point(1)


def test_a_thread_started_during_a_run_is_told_it_is_outside_the_run() -> None:
    """A run is per thread and task: a join point of the run called from a thread started
    in train_step gets a RunnerError that says so (not only "call it within runner.run()",
    which it was) and the way in: the call made in a copy of the run's context runs the
    advice with the runner."""
    timer = IterTimer()
    runner = make_runner(None, aspects=[timer], max_iters=1)
    augment = runner.joinpoint("train_iter")(_users_step)
    outcomes: list[Any] = []

    def call(run: Callable[..., Any]) -> None:
        try:
            outcomes.append((run(augment, 1), len(timer.times)))
        except RunnerError as exc:
            outcomes.append(exc)

    def train_step(r: Runner, batch: Any) -> torch.Tensor:
        for run in (lambda f, x: f(x), contextvars.copy_context().run):
            thread = threading.Thread(target=call, args=(run,))
            thread.start()
            thread.join()
        x, y = batch
        return torch.nn.functional.cross_entropy(r.model(x), y)

    runner.train_step = train_step
    runner.run()
    error, (result, timed) = outcomes
    assert isinstance(error, RunnerError)
    assert re.search(_outside("IterTimer", "train_iter"), str(error))
    assert "a thread started during the run is outside it" in str(error)
    assert "contextvars.copy_context().run" in str(error)
    # The copied-context call ran IterTimer's advice: it timed that call, before the
    # run's own (only) iteration ended and was timed too.
    assert (result, timed) == (2, 1)
    assert len(timer.times) == 2
