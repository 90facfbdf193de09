"""A call whose exception error advice recovers (``ctx.recover``) returned a value to its
caller: ``Timed``, ``Logged``, ``Counted`` and ``Recorder`` report it as such, not as an error."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from structlog.contextvars import get_contextvars, merge_contextvars
from structlog.testing import capture_logs

import aspecthook as ah
from aspecthook.aspects import Counted, Logged, Retry, Timed
from aspecthook.testing import Recorder

MODULE = __name__


def lookup(key: str) -> str:
    """Fail with KeyError(key)."""
    raise KeyError(key)


def outer(key: str) -> str:
    """Call lookup (for the context variables of a nested call)."""
    return lookup(key)


async def alookup(key: str) -> str:
    """The async twin of lookup."""
    await asyncio.sleep(0)
    raise KeyError(key)


def fallback(ctx: ah.CallContext) -> None:
    """Error advice that recovers every failure with 'default'."""
    ctx.recover("default")


@pytest.fixture(autouse=True)
def _structlog_defaults() -> Iterator[None]:
    """Every test starts and ends with structlog's default configuration."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


@contextlib.contextmanager
def observed(target: Any, *advice: Any, first: bool = False, **on_error: Any) -> Iterator[Any]:
    """Timed, Logged and Counted woven into ``target`` with the given error advice (woven
    before them when ``first``); yields the three aspects and the captured log."""
    timed, logged, counted = Timed(), Logged(), Counted()
    with contextlib.ExitStack() as stack:
        if first:
            stack.enter_context(ah.weave(target, *advice, **on_error))
        stack.enter_context(ah.weave(target, timed, logged, counted))
        if not first:
            stack.enter_context(ah.weave(target, *advice, **on_error))
        logs = stack.enter_context(capture_logs())
        yield timed, logged, counted, logs


@pytest.mark.parametrize(
    ("priority", "first"),
    [("HIGHEST", True), ("HIGHEST", False), ("NORMAL", False), ("LOWEST", False)],
    ids=["highest-first", "highest", "normal", "lowest"],
)
def test_a_recovered_call_is_no_error_whatever_the_error_advice_order(
    priority: str, first: bool
) -> None:
    """Timed and Logged always reported a recovered call as an error (their around advice
    sees the exception before any error advice runs), and Counted did unless the
    recovering advice ran before its own; the caller got 'default'."""
    with observed(lookup, on_error=fallback, priority=priority, first=first) as seen:
        timed, _, counted, logs = seen
        assert lookup("k") == "default"
    [row] = timed.summary()
    assert (row.count, row.errors) == (1, 0)
    assert (counted.counts[f"{MODULE}.lookup"], counted.error_counts[f"{MODULE}.lookup"]) == (1, 0)
    [event] = logs
    assert event["outcome"] == "recovered"
    assert event["log_level"] == "info"
    assert event["result"] == "'default'"
    assert event["error"] == "KeyError('k')"
    assert "exc_info" not in event


def test_a_failure_no_error_advice_recovers_is_still_an_error() -> None:
    """Error advice that looks and does not recover: an error in all three, logged with
    the exception, and the exception propagates unchanged."""
    looked: list[BaseException | None] = []
    with observed(lookup, on_error=lambda ctx: looked.append(ctx.exception)) as seen:
        timed, _, counted, logs = seen
        with pytest.raises(KeyError) as raised:
            lookup("k")
    assert looked == [raised.value]
    assert timed.summary()[0].errors == 1
    assert counted.error_counts[f"{MODULE}.lookup"] == 1
    [event] = logs
    assert (event["outcome"], event["log_level"], event["exc_info"]) == (
        "error",
        "error",
        raised.value,
    )


def test_error_advice_that_raises_instead_leaves_an_error() -> None:
    """Error advice that replaces the exception: the call failed for its caller."""

    def translate(ctx: ah.CallContext) -> None:
        raise LookupError("translated")

    with observed(lookup, on_error=translate) as seen:
        timed, _, counted, logs = seen
        with pytest.raises(LookupError, match="translated"):
            lookup("k")
    assert timed.summary()[0].errors == 1
    assert counted.error_counts[f"{MODULE}.lookup"] == 1
    assert [e["outcome"] for e in logs] == ["error"]


def test_the_recovered_event_carries_the_calls_context_variables() -> None:
    """Logged is told of the recovery after the call's own context has gone; its event is
    logged with the call's joinpoint and joinpoint_stack bound again, and then unbound."""
    with (
        ah.weave(outer, Logged()),
        ah.weave(lookup, Logged(), on_error=fallback),
        capture_logs(processors=[merge_contextvars]) as logs,
    ):
        assert outer("k") == "default"
    inner_event, outer_event = logs
    assert inner_event["outcome"] == "recovered"
    assert inner_event["joinpoint_stack"] == (f"{MODULE}.outer", f"{MODULE}.lookup")
    assert outer_event["joinpoint_stack"] == (f"{MODULE}.outer",)
    assert get_contextvars() == {}


def test_inside_retry_each_failed_attempt_is_still_logged_as_an_error() -> None:
    """The rule's limit: Logged inside other around advice (Retry, woven first at the
    same priority) logs what came out of proceed(), each attempt, even when error advice
    later recovers the call."""
    with (
        ah.weave(lookup, Retry(attempts=2, backoff=0, jitter=0)),
        ah.weave(lookup, Logged(), on_error=fallback),
        capture_logs() as logs,
    ):
        assert lookup("k") == "default"
    calls = [e["outcome"] for e in logs if e["event"] == "call"]
    assert calls == ["error", "error"]


def test_counted_leaves_out_recovered_calls_at_an_async_join_point() -> None:
    """Counted waits for the error advice at an async join point too."""
    counted = Counted()
    with ah.weave(alookup, counted), ah.weave(alookup, on_error=fallback):
        assert asyncio.run(alookup("k")) == "default"
    assert counted.error_counts[f"{MODULE}.alookup"] == 0
    assert counted.counts[f"{MODULE}.alookup"] == 1


# -- Recorder --------------------------------------------------------------------------------


@pytest.mark.parametrize("priority", ["LOWEST", "HIGHEST"])
@pytest.mark.parametrize("first", [True, False], ids=["advice-first", "recorder-first"])
def test_recorder_records_a_recovered_call_with_the_value_the_caller_got(
    priority: str, first: bool
) -> None:
    """Recorder recorded a recovered call as failed (its around advice saw the exception
    before any error advice ran). It records the value the caller got, no exception, and
    the exception recovered from, innermost or outermost, with Timed outside it or not."""
    recorder = Recorder(priority=priority)
    with contextlib.ExitStack() as stack:
        if first:
            stack.enter_context(ah.weave(lookup, on_error=fallback))
        stack.enter_context(ah.weave(lookup, recorder))
        if not first:
            stack.enter_context(ah.weave(lookup, Timed(), on_error=fallback))
        assert lookup("k") == "default"
    call = recorder.assert_called_with(f"{MODULE}.lookup", "k")
    assert (call.ok, call.result, call.exception) == (True, "default", None)
    assert call.recovered
    assert isinstance(call.recovered_from, KeyError)
    assert call.recovered_from.args == ("k",)


def test_recorder_records_a_failure_no_error_advice_recovers_as_failed() -> None:
    """Error advice that only looks: the call is recorded with its exception, unchanged."""
    recorder = Recorder()
    with ah.weave(lookup, recorder, on_error=lambda ctx: None), pytest.raises(KeyError) as raised:
        lookup("k")
    [call] = recorder.calls
    assert (call.ok, call.exception, call.recovered, call.recovered_from) == (
        False,
        raised.value,
        False,
        None,
    )


def test_recorder_inside_retry_records_each_attempt_as_it_came_out_of_proceed() -> None:
    """The rule's limit, as for Timed: Recorder inside other around advice (Retry) records
    each attempt as it failed, though error advice recovers the call in the end."""
    recorder = Recorder()
    with (
        ah.weave(lookup, Retry(attempts=2, backoff=0, jitter=0)),
        ah.weave(lookup, recorder, on_error=fallback),
    ):
        assert lookup("k") == "default"
    assert [(c.ok, c.recovered) for c in recorder.calls] == [(False, False), (False, False)]
