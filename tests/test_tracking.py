"""track_calls(): call counts and time per advice in describe(), off until asked for."""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Callable, Iterator
from typing import Any

import _weave_targets as targets
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aspecthook as ah
from aspecthook import _tracking
from aspecthook.aspects import Retry, Timed


@pytest.fixture
def point(request: pytest.FixtureRequest) -> str:
    """A join point name that no other test uses."""
    return "test_tracking." + re.sub(r"\W", "_", request.node.name)


@pytest.fixture(autouse=True)
def untracked() -> Iterator[None]:
    """Every test starts and ends with tracking off."""
    ah.track_calls(False)
    yield
    ah.track_calls(False)


def _calls(point: str) -> dict[str, int | None]:
    return {row.advice: row.calls for row in ah.describe(point) if row.stage}


def _noted_step(weaver: ah.Weaver, point: str) -> Callable[[], None]:
    """A join point ``point`` with one before advice, ``note``, that does nothing."""

    @weaver.joinpoint(point)
    def step() -> None:
        pass

    @weaver.before(point)
    def note(ctx: Any) -> None:
        pass

    return step


def test_nothing_is_counted_until_tracking_is_turned_on(weaver: ah.Weaver, point: str) -> None:
    """Off by default: rows say None (not 0) and the table has no calls column."""

    step = _noted_step(weaver, point)
    step()
    (row,) = ah.describe(point)
    assert row.calls is None
    assert row.time_s is None
    headers = [column.header for column in ah.describe(point).__rich__().columns]
    assert "calls" not in headers


def test_each_advice_counts_the_calls_that_ran_it_at_each_join_point(
    weaver: ah.Weaver, point: str
) -> None:
    """Per join point and advice; filters decide what counts (the advice must have run)."""
    other = point + "_other"

    @weaver.joinpoint(point)
    def step() -> None:
        pass

    @weaver.joinpoint(other)
    def other_step() -> None:
        pass

    @weaver.before(ah.Name(point) | ah.Name(other))
    def both(ctx: Any) -> None:
        pass

    @weaver.after(point, every=3)
    def third(ctx: Any) -> None:
        pass

    @weaver.after(point, once=True)
    def first(ctx: Any) -> None:
        pass

    with ah.track_calls():
        for _ in range(7):
            step()
        other_step()
    assert _calls(point) == {"both": 7, "third": 2, "first": 1}
    assert _calls(other) == {"both": 1}
    headers = [column.header for column in ah.describe(point).__rich__().columns]
    assert {"calls", "time"} <= set(headers)


class FakeClock:
    """``_tracking``'s nanosecond clock, moved on by hand: times are exact, not measured."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now

    def spend(self, seconds: float) -> None:
        self.now += round(seconds * 1e9)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(_tracking, "_clock", fake)
    return fake


def test_time_is_the_advices_own_and_around_advice_leaves_out_proceed(
    weaver: ah.Weaver, point: str, clock: FakeClock
) -> None:
    @weaver.joinpoint(point)
    def slow() -> str:
        clock.spend(0.5)
        return "done"

    @weaver.before(point)
    def busy(ctx: Any) -> None:
        clock.spend(0.25)

    @weaver.around(point)
    def wrap(ctx: Any, proceed: ah.Proceed) -> Any:
        clock.spend(0.125)
        result = proceed()
        clock.spend(0.125)
        return result

    with ah.track_calls():
        assert slow() == "done"
        assert slow() == "done"
    times = {row.advice: row.time_s for row in ah.describe(point) if row.stage}
    assert times == {"busy": 0.5, "wrap": 0.5}  # two calls each; the target's 1 s is not theirs


def test_turning_on_starts_from_zero_and_turning_off_keeps_the_figures(
    weaver: ah.Weaver, point: str
) -> None:
    step = _noted_step(weaver, point)
    ah.track_calls()
    step()
    step()
    ah.track_calls(False)
    step()  # not counted
    assert _calls(point) == {"note": 2}
    ah.track_calls(True)
    assert _calls(point) == {"note": 0}
    step()
    ah.track_calls(True)  # already on: goes on counting
    step()
    assert _calls(point) == {"note": 2}


def test_the_block_form_puts_the_previous_setting_back(weaver: ah.Weaver, point: str) -> None:
    step = _noted_step(weaver, point)
    with ah.track_calls():
        step()
        with ah.track_calls(False):
            step()
        step()
    step()
    assert _calls(point) == {"note": 2}


def test_switching_keeps_every_and_once_state(weaver: ah.Weaver, point: str) -> None:
    """Tracking recompiles the advice; its filters go on where they were."""
    ran: list[str] = []

    @weaver.joinpoint(point)
    def step() -> None:
        pass

    @weaver.before(point, every=2)
    def second(ctx: Any) -> None:
        ran.append("second")

    @weaver.before(point, once=True)
    def first(ctx: Any) -> None:
        ran.append("first")

    step()  # call 1: first
    with ah.track_calls():
        step()  # call 2: second (not first again)
        step()
    step()  # call 4: second
    assert ran == ["first", "second", "second"]


def test_advice_registered_while_tracking_is_counted(weaver: ah.Weaver, point: str) -> None:
    @weaver.joinpoint(point)
    def step() -> None:
        pass

    with ah.track_calls():

        @weaver.after(point)
        def late(ctx: Any) -> None:
            pass

        step()
    assert _calls(point) == {"late": 1}


def test_aspects_that_run_as_dispatch_layers_are_counted(weaver: ah.Weaver, point: str) -> None:
    """Retry normally runs as a layer without a context: tracked, it runs as advice."""
    attempts = []

    @weaver.joinpoint(point)
    def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError("try again")
        return "ok"

    weaver.register(Retry(attempts=3, backoff=0, pointcut=point))
    with ah.track_calls():
        assert flaky() == "ok"
    (row,) = ah.describe(point)
    assert (row.stage, row.calls) == ("around", 1)
    assert len(attempts) == 3


def test_aspects_that_run_as_plain_wrappers_are_counted(weaver: ah.Weaver, point: str) -> None:
    """Timed alone at a join point runs as a dispatch layer, without a context: tracked,
    it runs as advice and is counted like any other."""

    @weaver.joinpoint(point)
    def step() -> None:
        pass

    weaver.register(Timed(pointcut=point))
    with ah.track_calls():
        for _ in range(5):
            step()
    (row,) = ah.describe(point)
    assert (row.stage, row.calls) == ("around", 5)


def test_async_advice_is_counted_and_timed(weaver: ah.Weaver, point: str, clock: FakeClock) -> None:
    @weaver.joinpoint(point)
    async def fetch() -> int:
        await asyncio.sleep(0)
        clock.spend(0.5)
        return 1

    @weaver.before(point)
    async def ready(ctx: Any) -> None:
        await asyncio.sleep(0)
        clock.spend(0.25)

    @weaver.around(point)
    async def wrap(ctx: Any, proceed: ah.Proceed) -> Any:
        clock.spend(0.125)
        return await proceed()

    with ah.track_calls():
        assert asyncio.run(fetch()) == 1
    rows = {row.advice: (row.calls, row.time_s) for row in ah.describe(point) if row.stage}
    assert rows == {"ready": (1, 0.25), "wrap": (1, 0.125)}


def test_plain_advice_returning_a_coroutine_is_timed_until_it_completes(
    weaver: ah.Weaver, point: str, clock: FakeClock
) -> None:
    """A plain function returning a coroutine (the shape of ``Timed`` or ``Retry`` at an
    async join point) is timed while that coroutine runs, less the time awaiting
    ``proceed`` (it used to show only the instant of making the coroutine: 0)."""

    @weaver.joinpoint(point)
    async def fetch() -> int:
        await asyncio.sleep(0)
        clock.spend(0.5)
        return 1

    async def work(proceed: ah.Proceed) -> Any:
        clock.spend(0.125)
        result = await proceed()
        clock.spend(0.125)
        return result

    @weaver.before(point)
    def ready(ctx: Any) -> Any:
        async def later() -> None:
            clock.spend(0.25)

        return later()

    weaver.around(point, name="wrap")(lambda ctx, proceed: work(proceed))
    with ah.track_calls():
        assert asyncio.run(fetch()) == 1
        assert asyncio.run(fetch()) == 1
    rows = {row.advice: (row.calls, row.time_s) for row in ah.describe(point) if row.stage}
    assert rows == {"ready": (2, 0.5), "wrap": (2, 0.5)}


def test_plain_advice_at_an_async_function_behind_a_plain_decorator_is_timed_when_awaited(
    weaver: ah.Weaver, point: str, clock: FakeClock
) -> None:
    """The same at a synchronous join point whose call returns a coroutine: the advice's
    coroutine is its own time, the target's coroutine is inside ``proceed``."""

    async def fetch() -> int:
        await asyncio.sleep(0)
        clock.spend(0.5)
        return 1

    fetch_ = weaver.joinpoint(point)(lambda: fetch())

    async def work(coroutine: Any) -> Any:
        clock.spend(0.125)
        return await coroutine

    weaver.around(point, name="wrap")(lambda ctx, proceed: work(proceed()))
    with ah.track_calls():
        assert asyncio.run(fetch_()) == 1
    rows = {row.advice: (row.calls, row.time_s) for row in ah.describe(point) if row.stage}
    assert rows == {"wrap": (1, 0.125)}


def test_a_woven_function_is_counted() -> None:
    """weave() of code you do not own: its row (the target's path) is counted too."""
    with ah.weave(targets.add_one, before=lambda ctx: None), ah.track_calls():
        assert targets.add_one(1) == 2
        assert targets.add_one(2) == 3
        rows = [r for r in ah.describe() if r.joinpoint.endswith("add_one") and r.stage]
    assert [r.calls for r in rows] == [2]


def test_a_flag_that_is_not_a_bool_is_refused() -> None:
    with pytest.raises(TypeError, match="give True to count calls or False"):
        ah.track_calls("yes")  # type: ignore[arg-type]


_EXAMPLES = itertools.count()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["call", "on", "off"]), max_size=25))
def test_counts_are_the_calls_made_since_tracking_was_last_turned_on(ops: list[str]) -> None:
    """Any sequence of calls and switches: the figure is what a user would count by hand."""
    weaver = ah.Weaver("tracking property")
    name = f"test_tracking.property_{next(_EXAMPLES)}"  # earlier examples' points may live on
    try:

        @weaver.joinpoint(name)
        def step() -> None:
            pass

        @weaver.before(name, every=2)
        def even(ctx: Any) -> None:
            pass

        on, expected, seen, n = False, None, False, 0
        for op in ops:
            if op == "call":
                n += 1
                step()
                if on and n % 2 == 0:
                    expected = (expected or 0) + 1
            elif op == "on":
                if not on:
                    expected, seen = 0, True
                on = True
                ah.track_calls(True)
            else:
                on = False
                ah.track_calls(False)
        calls = _calls(name)
        assert calls == {"even": expected if seen else None}
    finally:
        ah.track_calls(False)
        weaver.clear()
        weaver.close()


def test_the_table_shows_time_in_a_readable_unit(
    weaver: ah.Weaver, point: str, clock: FakeClock
) -> None:
    """20 min 34 s reads as '1234 s', as Timed's tables write it (not '1.23e+03 s')."""

    @weaver.joinpoint(point)
    def step() -> None:
        pass

    @weaver.before(point)
    def slow(ctx: Any) -> None:
        clock.spend(1234)

    with ah.track_calls():
        step()
    table = ah.describe(point)._plain()
    assert "1234 s" in table
