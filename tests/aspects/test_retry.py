"""``Retry``: attempts, backoff with jitter, the exception filter and the give-up hook."""

from __future__ import annotations

import asyncio
import builtins
import copy
import functools
import multiprocessing
import random
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

import aspecthook as ah
from aspecthook.aspects import Counted, Logged, Retry, Timed
from aspecthook.errors import InvalidOptionError
from aspecthook.testing import Recorder

MODULE = __name__


class Flaky:
    """Fails ``failures`` times (a new exception object each time), then returns 'done'."""

    def __init__(self, failures: int, exc_type: type[Exception] = ConnectionError) -> None:
        self.failures = failures
        self.exc_type = exc_type
        self.calls = 0
        self.raised: list[Exception] = []

    def step(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            exc = self.exc_type(f"failure {self.calls}")
            self.raised.append(exc)
            raise exc
        return "done"


FLAKY = Flaky(0)


def fetch() -> str:
    """A function that fails as FLAKY says."""
    return FLAKY.step()


async def afetch() -> str:
    """The async twin of fetch."""
    await asyncio.sleep(0)
    return FLAKY.step()


def plain_decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A decorator that is not async itself, as many tracing decorators are."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


@plain_decorator
async def afetch_decorated() -> str:
    """afetch behind a plain decorator: a synchronous callable returning a coroutine."""
    await asyncio.sleep(0)
    return FLAKY.step()


def stream(n: int) -> Iterator[int]:
    """A generator that fails as FLAKY says while being iterated."""
    yield from range(n)
    FLAKY.step()


class Client:
    """A method that fails as its own Flaky says."""

    def __init__(self, failures: int) -> None:
        self.flaky = Flaky(failures)

    def get(self, path: str) -> str:
        return f"{self.flaky.step()} {path}"


@pytest.fixture
def flaky() -> Iterator[Any]:
    """Install a fresh Flaky (set its failures in the test) for fetch and afetch."""
    global FLAKY
    FLAKY = Flaky(0)
    yield FLAKY
    FLAKY = Flaky(0)


@pytest.fixture(autouse=True)
def _structlog_defaults() -> Iterator[None]:
    """Every test starts and ends with structlog's default configuration."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


def retry(**options: Any) -> tuple[Retry, list[float]]:
    """A Retry that records its sleeps instead of sleeping."""
    sleeps: list[float] = []
    options.setdefault("sleep", sleeps.append)
    return Retry(**options), sleeps


# -- retrying ------------------------------------------------------------------------------


def test_succeeds_after_failures_and_logs_each_retry(flaky: Flaky) -> None:
    """Two failures then success: three calls, two sleeps, two 'retry.attempt' events."""
    flaky.failures = 2
    aspect, sleeps = retry(attempts=3)
    with ah.weave(fetch, aspect), capture_logs() as logs:
        assert fetch() == "done"
    assert flaky.calls == 3
    assert len(sleeps) == 2
    assert [(e["event"], e["attempt"], e["log_level"]) for e in logs] == [
        ("retry.attempt", 1, "warning"),
        ("retry.attempt", 2, "warning"),
    ]
    assert logs[0]["joinpoint"] == f"{MODULE}.fetch"
    assert logs[0]["attempts"] == 3
    assert logs[0]["error"] == "ConnectionError: failure 1"


def test_gives_up_after_attempts_with_the_last_exception_unchanged(flaky: Flaky) -> None:
    """When every attempt fails, the last exception object propagates after `attempts` calls."""
    flaky.failures = 10
    aspect, sleeps = retry(attempts=4)
    with (
        ah.weave(fetch, aspect),
        capture_logs() as logs,
        pytest.raises(ConnectionError, match="failure 4") as raised,
    ):
        fetch()
    assert flaky.calls == 4
    assert raised.value is flaky.raised[-1]
    assert raised.traceback[-1].name == "step"
    assert len(sleeps) == 3
    assert logs[-1]["event"] == "retry.gave_up"


def test_exceptions_outside_the_filter_are_not_retried(flaky: Flaky) -> None:
    """An exception that `on` does not match propagates from the first call."""
    flaky.failures, flaky.exc_type = 5, KeyError
    aspect, sleeps = retry(on=(ConnectionError, TimeoutError))
    with ah.weave(fetch, aspect), pytest.raises(KeyError) as raised:
        fetch()
    assert flaky.calls == 1
    assert sleeps == []
    assert raised.value is flaky.raised[0]


STOPS = [KeyboardInterrupt, SystemExit, GeneratorExit, asyncio.CancelledError]
stopped_calls: list[type[BaseException]] = []


def stop(kind: type[BaseException]) -> None:
    """Records the call, then raises ``kind``: an interrupt, an exit or a cancellation."""
    stopped_calls.append(kind)
    raise kind()


async def astop(kind: type[BaseException]) -> None:
    """The async twin of stop."""
    await asyncio.sleep(0)
    stop(kind)


@pytest.mark.parametrize("kind", STOPS, ids=lambda kind: kind.__name__)
def test_interrupts_exits_and_cancellations_are_never_retried(
    kind: type[BaseException],
) -> None:
    """Even on=BaseException lets Ctrl-C, sys.exit() or a cancellation through at once,
    unchanged, without a retry, a sleep, a give_up call or a retry.* report."""
    stopped_calls.clear()
    seen: list[BaseException] = []
    aspect, sleeps = retry(on=BaseException, give_up=lambda ctx, exc: seen.append(exc))
    with ah.weave(stop, aspect), capture_logs() as logs, pytest.raises(kind):
        stop(kind)
    assert (stopped_calls, sleeps, seen, logs) == ([kind], [], [], [])


@pytest.mark.parametrize("kind", STOPS, ids=lambda kind: kind.__name__)
def test_an_async_call_interrupted_or_cancelled_is_never_retried(
    kind: type[BaseException],
) -> None:
    """The same for an async join point: no retry, no async sleep."""
    stopped_calls.clear()
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    aspect = Retry(on=BaseException, async_sleep=fake_sleep)
    with ah.weave(astop, aspect), capture_logs() as logs, pytest.raises(kind):
        asyncio.run(astop(kind))
    assert (stopped_calls, slept, logs) == ([kind], [], [])


# -- exception groups --------------------------------------------------------------------------

group_calls: list[int] = []
needs_groups = pytest.mark.skipif(
    sys.version_info < (3, 11), reason="exception groups and asyncio.TaskGroup are Python 3.11+"
)


def _built(leaves: list[Any]) -> list[BaseException]:
    """``leaves`` with each ``(message, exceptions)`` pair made an ExceptionGroup: made
    only when a test runs (Python 3.10 has none)."""
    return [builtins.ExceptionGroup(*leaf) if isinstance(leaf, tuple) else leaf for leaf in leaves]


def fail_as_a_group(*leaves: BaseException) -> str:
    """Raises a group of ``leaves`` on the first two calls, then returns 'done'."""
    group_calls.append(1)
    if len(group_calls) <= 2:
        raise builtins.BaseExceptionGroup("several", list(leaves))
    return "done"


async def gather_in_a_task_group(failures: int) -> str:
    """What an async join point running a TaskGroup raises: an ExceptionGroup of the
    tasks' exceptions (here a ConnectionError, ``failures`` times)."""
    group_calls.append(1)

    async def connect() -> None:
        if len(group_calls) <= failures:
            raise ConnectionError("refused")

    async with asyncio.TaskGroup() as group:
        group.create_task(connect())
    return "done"


@needs_groups
def test_a_task_group_of_exceptions_in_on_is_retried_at_an_async_join_point() -> None:
    """A TaskGroup raises ExceptionGroup([ConnectionError()]): Retry(on=ConnectionError)
    let it through at once, as the group is no ConnectionError; every exception in it
    is one, as ``except* ConnectionError`` would handle it whole, so it is retried."""
    group_calls.clear()
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    aspect = Retry(attempts=3, on=ConnectionError, jitter=0, async_sleep=fake_sleep)
    with ah.weave(gather_in_a_task_group, aspect), capture_logs() as logs:
        assert asyncio.run(gather_in_a_task_group(2)) == "done"
    assert len(group_calls) == 3
    assert len(slept) == 2
    assert logs[0]["error"].startswith("ExceptionGroup: unhandled errors in a TaskGroup")


@pytest.mark.parametrize(
    ("on", "leaves", "retried"),
    [
        (ConnectionError, [ConnectionError(), ConnectionError()], True),
        ((ConnectionError, TimeoutError), [("inner", [TimeoutError()])], True),
        ("ExceptionGroup", [KeyError()], True),  # the group itself is one of on=
        (ConnectionError, [ConnectionError(), KeyError()], False),  # not all of it
        (Exception, [ConnectionError(), asyncio.CancelledError()], False),
        (BaseException, [KeyboardInterrupt()], False),  # stops work, whatever on= says
    ],
    ids=["all", "nested", "group-in-on", "mixed", "cancelled", "interrupt"],
)
@needs_groups
def test_an_exception_group_is_retried_when_all_of_it_is_retryable(
    on: Any, leaves: list[Any], retried: bool
) -> None:
    """A group is retried when every exception in it is one of on= and none stops work
    (or when on= names the group's own class); otherwise it propagates at once, the
    same object."""
    group_calls.clear()
    leaves = _built(leaves)
    aspect, sleeps = retry(attempts=3, on=on)
    with ah.weave(fail_as_a_group, aspect), capture_logs():
        if retried:
            assert fail_as_a_group(*leaves) == "done"
        else:
            with pytest.raises(builtins.BaseExceptionGroup) as raised:
                fail_as_a_group(*leaves)
            assert list(raised.value.exceptions) == leaves
    assert (len(group_calls), len(sleeps)) == ((3, 2) if retried else (1, 0))


def test_a_single_exception_class_is_a_filter_too(flaky: Flaky) -> None:
    """on= takes one exception class as well as a tuple, and subclasses match."""
    flaky.failures = 1
    aspect, _ = retry(on=OSError)  # ConnectionError is an OSError
    with ah.weave(fetch, aspect), capture_logs():
        assert fetch() == "done"
    assert flaky.calls == 2


def test_exceptions_can_be_named_as_in_a_config_file(flaky: Flaky) -> None:
    """on= takes builtin exception names and 'package.module:Name' paths, in a list too."""
    flaky.failures = 1
    aspect, _ = retry(on=["TimeoutError", "builtins:ConnectionError"])
    assert aspect.on == (TimeoutError, ConnectionError)
    with ah.weave(fetch, aspect), capture_logs():
        assert fetch() == "done"
    assert flaky.calls == 2


def test_give_up_hook_is_called_with_the_context_and_the_last_exception(flaky: Flaky) -> None:
    """give_up(ctx, exc) runs once, before the last exception propagates."""
    flaky.failures = 10
    seen: list[tuple[str, BaseException]] = []
    aspect, _ = retry(attempts=2, give_up=lambda ctx, exc: seen.append((ctx.joinpoint.name, exc)))
    with ah.weave(fetch, aspect), capture_logs(), pytest.raises(ConnectionError):
        fetch()
    assert seen == [(f"{MODULE}.fetch", flaky.raised[-1])]


def test_give_up_is_not_called_on_success_or_for_unfiltered_errors(flaky: Flaky) -> None:
    """The hook is only for running out of attempts."""
    seen: list[BaseException] = []
    flaky.failures = 1
    aspect, _ = retry(attempts=2, on=ConnectionError, give_up=lambda ctx, exc: seen.append(exc))
    with ah.weave(fetch, aspect), capture_logs():
        assert fetch() == "done"
        flaky.calls, flaky.failures, flaky.exc_type = 0, 1, KeyError
        with pytest.raises(KeyError):
            fetch()
    assert seen == []


def test_one_attempt_never_retries_but_gives_up(flaky: Flaky) -> None:
    """attempts=1 calls once, sleeps never, and calls give_up on failure."""
    flaky.failures = 1
    seen: list[BaseException] = []
    aspect, sleeps = retry(attempts=1, give_up=lambda ctx, exc: seen.append(exc))
    with ah.weave(fetch, aspect), capture_logs(), pytest.raises(ConnectionError):
        fetch()
    assert (flaky.calls, sleeps, seen) == (1, [], flaky.raised)


# -- backoff -----------------------------------------------------------------------------------


def test_backoff_without_jitter_is_base_times_factor_to_the_retry(flaky: Flaky) -> None:
    """With jitter=0 the sleeps are backoff * factor**i exactly."""
    flaky.failures = 10
    aspect, sleeps = retry(attempts=5, backoff=0.5, factor=3.0, jitter=0)
    with ah.weave(fetch, aspect), capture_logs(), pytest.raises(ConnectionError):
        fetch()
    assert sleeps == [0.5, 1.5, 4.5, 13.5]


def test_max_backoff_caps_the_delay(flaky: Flaky) -> None:
    """max_backoff caps each delay."""
    flaky.failures = 10
    aspect, sleeps = retry(attempts=5, backoff=0.5, factor=3.0, jitter=0, max_backoff=2.0)
    with ah.weave(fetch, aspect), capture_logs(), pytest.raises(ConnectionError):
        fetch()
    assert sleeps == [0.5, 1.5, 2.0, 2.0]
    assert aspect.delay(5000) == 2.0  # factor**5000 overflows a float; the cap still holds


def test_jitter_scales_the_delay_within_its_fraction() -> None:
    """jitter=0.5 puts every delay within 50% of the exponential schedule, and varies it."""
    aspect = Retry(backoff=1.0, factor=2.0, jitter=0.5)
    delays = [aspect.delay(2) for _ in range(200)]
    assert all(2.0 <= d <= 6.0 for d in delays)
    assert len(set(delays)) > 1


def test_jitter_leaves_the_programs_global_random_untouched() -> None:
    """A retry must not move a seeded program's random numbers (its data order, say)."""
    random.seed(7)
    expected = [random.random() for _ in range(3)]
    random.seed(7)
    aspect = Retry(backoff=1.0, jitter=0.5)
    aspect.delay(0)
    aspect.delay(1)
    assert [random.random() for _ in range(3)] == expected


def test_processes_forked_from_one_parent_draw_different_jitter() -> None:
    """Workers forked from one process must not retry in lockstep: their jitter differs."""
    with multiprocessing.get_context("fork").Pool(2) as pool:
        first, second = pool.map(_delays, [0, 1])
    assert first != second


FORKED = Retry(backoff=1.0, jitter=0.5)  # made in the parent, used in forked workers


def _delays(_: int) -> list[float]:
    return [FORKED.delay(i) for i in range(3)]


def test_a_retry_aspect_copies_like_any_object() -> None:
    copied = copy.deepcopy(Retry(attempts=5, backoff=0.5))
    assert (copied.attempts, copied.backoff) == (5, 0.5)
    assert 0.25 <= copied.delay(0) <= 0.75


def test_no_backoff_stays_zero_however_many_retries() -> None:
    """backoff=0 means no sleep, also past the retry where factor**i overflows a float."""
    aspect = Retry(backoff=0.0, factor=2.0, jitter=0.0)
    assert aspect.delay(5000) == 0.0


def test_a_failing_log_sink_does_not_stop_the_retries(
    flaky: Flaky, capsys: pytest.CaptureFixture[str]
) -> None:
    """The retry.attempt report failing (a full disk under the log file) is not the call's
    error: the call is retried all the same, and the report goes to stderr."""

    def sink_down(logger: Any, method: str, event_dict: Any) -> Any:
        raise OSError("log sink down")

    structlog.configure(processors=[sink_down])
    flaky.failures = 2
    aspect, sleeps = retry(attempts=3, jitter=0.0)
    with ah.weave(fetch, aspect):
        assert fetch() == "done"
    assert len(sleeps) == 2
    assert capsys.readouterr().err.count("could not log retry.attempt") == 2


# -- flavours ---------------------------------------------------------------------------------


def test_async_function_is_retried_with_async_sleep(flaky: Flaky) -> None:
    """An async join point is awaited per attempt and sleeps through async_sleep."""
    flaky.failures = 2
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    aspect = Retry(attempts=3, backoff=1.0, factor=2.0, jitter=0, async_sleep=fake_sleep)
    with ah.weave(afetch, aspect), capture_logs() as logs:
        assert asyncio.run(afetch()) == "done"
    assert flaky.calls == 3
    assert slept == [1.0, 2.0]
    assert [e["event"] for e in logs] == ["retry.attempt", "retry.attempt"]


def test_an_async_sleep_that_returns_no_awaitable_is_reported_as_the_option_at_fault(
    flaky: Flaky,
) -> None:
    """async_sleep=time.sleep (it blocks the loop and returns None) fails the first retry
    with an error naming the option, not a bare 'NoneType can't be used in await'."""
    flaky.failures = 1
    slept: list[float] = []
    aspect = Retry(backoff=0.5, jitter=0, async_sleep=slept.append)
    with (
        ah.weave(afetch, aspect),
        capture_logs(),
        pytest.raises(InvalidOptionError, match=r"async_sleep=.* returned None, not an awaitable"),
    ):
        asyncio.run(afetch())
    assert slept == [0.5]


def test_async_function_behind_a_plain_decorator_is_retried_when_awaited(flaky: Flaky) -> None:
    """The call returns a coroutine at once; the failures come when it is awaited, so the
    retries are awaited too (the coroutine used to pass as a success, never retried)."""
    flaky.failures = 2
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    aspect = Retry(attempts=3, backoff=1.0, jitter=0, async_sleep=fake_sleep)
    with ah.weave(afetch_decorated, aspect):
        assert asyncio.run(afetch_decorated()) == "done"
    assert flaky.calls == 3
    assert slept == [1.0, 2.0]


def test_async_function_gives_up_with_the_last_exception(flaky: Flaky) -> None:
    """An async join point that keeps failing raises its last exception unchanged."""
    flaky.failures = 10
    given_up: list[BaseException] = []

    async def no_sleep(seconds: float) -> None:
        pass

    aspect = Retry(attempts=3, async_sleep=no_sleep, give_up=lambda c, e: given_up.append(e))
    with (
        ah.weave(afetch, aspect),
        capture_logs(),
        pytest.raises(ConnectionError, match="failure 3") as raised,
    ):
        asyncio.run(afetch())
    assert raised.value is flaky.raised[-1]
    assert given_up == [raised.value]


class Stop(BaseException):
    """Not an Exception, so never retried: ends a call that would retry without end, so
    that such a test fails instead of hanging."""


attempted_urls: list[str] = []


@plain_decorator
async def afetch_url(url: str) -> str:
    """Always refused; records the url each attempt got and stops after 20 attempts."""
    attempted_urls.append(url)
    if len(attempted_urls) > 20:
        raise Stop("still retrying after 20 attempts")
    await asyncio.sleep(0)
    raise ConnectionError(f"refused {url}")


def _no_sleep_retry() -> Retry:
    async def no_sleep(seconds: float) -> None:
        pass

    return Retry(attempts=3, backoff=0, async_sleep=no_sleep, priority=60)


def _replaced(ctx: ah.CallContext, proceed: ah.Proceed) -> Any:
    return proceed("replaced")


# What each combination weaves with a Retry(attempts=3) (priority 60: inside the others),
# and the url every attempt must get.
WITH_RETRY: dict[str, tuple[Callable[[], tuple[Any, ...]], dict[str, Any], str]] = {
    "alone": (lambda: (), {}, "u"),
    "on_error advice": (lambda: (), {"on_error": lambda ctx: None}, "u"),
    "Recorder(HIGHEST)": (lambda: (Recorder(priority="HIGHEST"),), {}, "u"),
    "around advice": (lambda: (), {"around": lambda ctx, proceed: proceed()}, "u"),
    "around proceed('replaced')": (lambda: (), {"around": _replaced}, "replaced"),
    "Counted": (lambda: (Counted(),), {}, "u"),
    "the guide's set": (lambda: (Timed(), Counted(), Logged(), Recorder()), {}, "u"),
}


@pytest.mark.parametrize("track", [False, True], ids=["untracked", "tracked"])
@pytest.mark.parametrize("combination", list(WITH_RETRY))
def test_async_function_behind_a_plain_decorator_with_other_advice_is_retried_attempts_times(
    combination: str, track: bool
) -> None:
    """With other advice around it, each retry runs the rest of the chain from Retry's own
    place with the arguments Retry was given: `attempts` calls, then it gives up (it used
    to start Retry again per retry, without end, and lose replaced arguments)."""
    others, advice, url = WITH_RETRY[combination]
    attempted_urls.clear()
    with (
        ah.track_calls(track),
        ah.woven(afetch_url, *others(), _no_sleep_retry(), **advice),
        capture_logs() as logs,
        pytest.raises(ConnectionError, match=f"refused {url}"),
    ):
        asyncio.run(afetch_url("u"))
    assert attempted_urls == [url] * 3
    assert [e["event"] for e in logs if e["event"].startswith("retry.")] == [
        "retry.attempt",
        "retry.attempt",
        "retry.gave_up",
    ]


def test_async_function_behind_a_plain_decorator_retried_by_two_retries_nests_them() -> None:
    """Two Retry aspects on such a function: each outer attempt runs the inner Retry's
    attempts, 2 x 3 calls in all."""
    attempted_urls.clear()
    with (
        ah.woven(afetch_url, Retry(attempts=2, backoff=0), _no_sleep_retry()),
        capture_logs(),
        pytest.raises(ConnectionError),
    ):
        asyncio.run(afetch_url("u"))
    assert attempted_urls == ["u"] * 6


attempt_arguments: list[tuple[int, str]] = []


def refuse(n: int, mode: str = "plain") -> None:
    """Always refused; records the arguments each attempt got."""
    attempt_arguments.append((n, mode))
    raise ConnectionError("refused")


async def arefuse(n: int, mode: str = "plain") -> None:
    """The async twin of refuse."""
    await asyncio.sleep(0)
    refuse(n, mode)


def _bump_in_place(ctx: ah.CallContext, proceed: ah.Proceed) -> Any:
    ctx.args[0] += 1
    ctx.kwargs["mode"] = ctx.kwargs.get("mode", "plain") + "+"
    return proceed()


async def _abump_in_place(ctx: ah.CallContext, proceed: ah.Proceed) -> Any:
    ctx.args[0] += 1
    ctx.kwargs["mode"] = ctx.kwargs.get("mode", "plain") + "+"
    return await proceed()


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_every_attempt_gets_the_arguments_retry_was_given(is_async: bool) -> None:
    """Around advice inside Retry that edits ctx.args / ctx.kwargs in place edits them for
    its attempt only: each retry starts again from the call's arguments (the edits used to
    pile up, attempt after attempt)."""
    attempt_arguments.clear()

    async def no_sleep(seconds: float) -> None:
        pass

    aspect = Retry(attempts=3, backoff=0, sleep=lambda s: None, async_sleep=no_sleep)
    target, bump = (arefuse, _abump_in_place) if is_async else (refuse, _bump_in_place)
    call = (lambda: asyncio.run(arefuse(1))) if is_async else (lambda: refuse(1))
    with (
        ah.weave(target, aspect),
        ah.weave(target, around=bump, priority="LOW"),  # inside Retry (NORMAL)
        capture_logs(),
        pytest.raises(ConnectionError),
    ):
        call()
    assert attempt_arguments == [(2, "plain+")] * 3


def refuse_bare(mode: str = "plain") -> None:
    """Always refused, called with no arguments; records the mode each attempt got."""
    attempt_arguments.append((0, mode))
    raise ConnectionError("refused")


async def arefuse_bare(mode: str = "plain") -> None:
    """The async twin of refuse_bare."""
    await asyncio.sleep(0)
    refuse_bare(mode)


@plain_decorator
async def drefuse_bare(mode: str = "plain") -> None:
    """arefuse_bare behind a plain decorator: the call returns the coroutine at once."""
    await arefuse_bare(mode)


def _mark_in_place(ctx: ah.CallContext, proceed: ah.Proceed) -> Any:
    ctx.kwargs["mode"] = ctx.kwargs.get("mode", "plain") + "+"
    return proceed()


async def _amark_in_place(ctx: ah.CallContext, proceed: ah.Proceed) -> Any:
    ctx.kwargs["mode"] = ctx.kwargs.get("mode", "plain") + "+"
    return await proceed()


@pytest.mark.parametrize("kind", ["sync", "async", "deferred"])
def test_every_attempt_of_a_call_without_arguments_starts_without_them(kind: str) -> None:
    """A call made with no arguments is retried with none: a keyword that advice inside
    Retry added in place for one attempt is not there at the next (it used to carry over:
    a retry with nothing to hand back re-used the call's edited arguments)."""
    attempt_arguments.clear()

    async def no_sleep(seconds: float) -> None:
        pass

    aspect = Retry(attempts=3, backoff=0, sleep=lambda s: None, async_sleep=no_sleep)
    target: Callable[..., Any] = {
        "sync": refuse_bare,
        "async": arefuse_bare,
        "deferred": drefuse_bare,
    }[kind]
    call = {  # through the module's names: weave() replaces them
        "sync": lambda: refuse_bare(),
        "async": lambda: asyncio.run(arefuse_bare()),
        "deferred": lambda: asyncio.run(drefuse_bare()),
    }[kind]
    mark = _amark_in_place if kind == "async" else _mark_in_place
    with (
        ah.weave(target, aspect),
        ah.weave(target, around=mark, priority="LOW"),  # inside Retry (NORMAL)
        capture_logs(),
        pytest.raises(ConnectionError),
    ):
        call()
    assert attempt_arguments == [(0, "plain+")] * 3


def test_method_is_retried_on_its_instance() -> None:
    """Retry woven into a method retries the bound call with the same arguments."""
    aspect, sleeps = retry(attempts=3)
    client = Client(failures=2)
    with ah.weave(Client.get, aspect), capture_logs():
        assert client.get("/x") == "done /x"
    assert client.flaky.calls == 3
    assert len(sleeps) == 2


def test_generator_function_retries_the_call_not_the_iteration(flaky: Flaky) -> None:
    """Creating a generator does not fail, so a failure while iterating is not retried."""
    flaky.failures = 1
    aspect, sleeps = retry(attempts=3)
    with ah.weave(stream, aspect), pytest.raises(ConnectionError):
        list(stream(2))
    assert flaky.calls == 1
    assert sleeps == []


def test_logged_inside_retry_logs_every_attempt(flaky: Flaky) -> None:
    """With Logged nested inside Retry (a lower priority), each attempt is one event."""
    flaky.failures = 2
    aspect, _ = retry(attempts=3)
    with ah.weave(fetch, aspect, Logged(priority="LOW")), capture_logs() as logs:
        assert fetch() == "done"
    assert [(e["event"], e.get("outcome")) for e in logs] == [
        ("call", "error"),
        ("retry.attempt", None),
        ("call", "error"),
        ("retry.attempt", None),
        ("call", "ok"),
    ]


# -- options -----------------------------------------------------------------------------------


async def _async_give_up(ctx: ah.CallContext, exc: BaseException) -> None:
    """A give_up hook Retry would call without awaiting: it would never run."""


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"attempts": 0}, r"attempts=0 is not a number of calls: give an int >= 1"),
        ({"attempts": 2.5}, r"attempts=2.5 is not a number of calls"),
        ({"backoff": -1}, r"backoff=-1 is out of range: give backoff as seconds >= 0"),
        ({"factor": 0.5}, r"factor=0.5 is out of range: give factor as a multiplier >= 1"),
        ({"max_backoff": float("nan")}, r"max_backoff=nan is out of range"),
        ({"jitter": 1.5}, r"jitter=1.5 is out of range: give jitter as a fraction"),
        ({"on": ValueError("x")}, r"on=ValueError\('x'\) is not an exception class"),
        ({"on": (KeyError, 3)}, r"is not an exception class or a tuple of them"),
        ({"on": (KeyError, "x")}, r"on: 'x' is not a builtin exception: name one"),
        ({"on": "json:Nope"}, r"on: 'json:Nope' cannot be imported"),
        ({"on": ()}, r"on=\(\) is not an exception class"),
        ({"on": KeyboardInterrupt}, r"on: KeyboardInterrupt is never retried: it stops"),
        ({"on": (OSError, "SystemExit")}, r"on: SystemExit is never retried"),
        ({"on": asyncio.CancelledError}, r"on: CancelledError is never retried"),
        ({"give_up": 3}, r"give_up=3 is not callable"),
        ({"sleep": None}, r"sleep=None is not callable"),
        ({"sleep": asyncio.sleep}, r"sleep=.* is an async function: sleep= must block"),
        ({"give_up": _async_give_up}, r"give_up=.* is an async function: give_up is called, never"),
    ],
)
def test_invalid_options_are_refused_with_what_to_do(options: dict[str, Any], match: str) -> None:
    """Bad options raise InvalidOptionError (a ValueError) naming the option and the fix."""
    with pytest.raises(InvalidOptionError, match=match) as raised:
        Retry(**options)
    assert isinstance(raised.value, ValueError)
    assert raised.value.option == next(iter(options))
