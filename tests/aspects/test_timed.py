"""Timed: timings per join point, the quantile sketch, the summary and the trace file."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import inspect
import json
import math
import os
import random
import stat
import sys
import threading
import time
from collections.abc import Generator, Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

import aspecthook as ah
from aspecthook.aspects import Timed, _trace
from aspecthook.aspects._sketch import QuantileSketch
from aspecthook.aspects._timed import Summary, TimingRow
from aspecthook.errors import AspectDefinitionError, InvalidOptionError


def sleepy(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def quick(x: int) -> int:
    return x + 1


def failing(error: Exception) -> None:
    raise error


def outer() -> int:
    time.sleep(0.002)
    return inner() + inner()


def inner() -> int:
    time.sleep(0.001)
    return 1


async def sleepy_async(seconds: float) -> float:
    await asyncio.sleep(seconds)
    return seconds


def plain_decorator(fn: Any) -> Any:
    """A decorator that is not async itself, as many tracing decorators are."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


@plain_decorator
async def sleepy_decorated(seconds: float) -> float:
    await asyncio.sleep(seconds)
    return seconds


@plain_decorator
def numbers_decorated(n: int, pause: float = 0.0) -> Generator[int, Any, str]:
    for i in range(n):
        time.sleep(pause)
        yield i
    return "done"


async def handoff(
    started: asyncio.Event | None, wait_for: asyncio.Event | None, done: asyncio.Event
) -> None:
    """Sets ``started`` and returns, setting ``done``; or waits for ``wait_for`` and then
    for ``done``: two such calls overlap without nesting."""
    if started is not None:
        started.set()
        await asyncio.sleep(0)
        done.set()
        return
    assert wait_for is not None
    await wait_for.wait()
    await done.wait()


async def failing_async(error: Exception) -> None:
    await asyncio.sleep(0)
    raise error


def numbers(n: int, pause: float = 0.0) -> Generator[int, Any, str]:
    for i in range(n):
        time.sleep(pause)
        yield i
    return "done"


def echo() -> Generator[Any, Any, None]:
    received = None
    while True:
        try:
            received = yield received
        except KeyError:
            received = "caught"


def broken_numbers(error: Exception) -> Iterator[int]:
    yield 1
    raise error


class Model:
    def forward(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    @classmethod
    def build(cls) -> str:
        return cls.__name__

    @staticmethod
    def helper() -> int:
        return 7


def name(fn: Any) -> str:
    """The join point name weave() gives a module-level function or method."""
    return f"{fn.__module__}.{fn.__qualname__}"


def row(timed: Timed, fn: Any) -> TimingRow:
    """The summary row of ``fn``."""
    (found,) = [r for r in timed.summary() if r.name == name(fn)]
    return found


# -- the sketch ------------------------------------------------------------------------


def exact_quantile(values: list[float], q: float) -> float:
    """The value of rank floor(q * (n - 1)): what the sketch promises to be within 1% of."""
    ordered = sorted(values)
    return ordered[math.floor(q * (len(ordered) - 1))]


def assert_within_one_percent(estimate: float, exact: float) -> None:
    assert abs(estimate - exact) <= 0.01 * exact * (1 + 1e-9), (estimate, exact)


@settings(deadline=None)  # a loaded CI machine must not turn slowness into failures
@given(
    values=st.lists(
        st.one_of(st.just(0.0), st.floats(min_value=1e-300, max_value=1e300)), min_size=1
    ),
    q=st.floats(min_value=0, max_value=1),
)
def test_sketch_quantile_within_one_percent(values: list[float], q: float) -> None:
    """Any quantile of any non-negative data is within 1% of the exact quantile."""
    sketch = QuantileSketch()
    for value in values:
        sketch.add(value)
    assert_within_one_percent(sketch.quantile(q), exact_quantile(values, q))


@settings(deadline=None)
@given(values=st.lists(st.one_of(st.just(0), st.integers(min_value=1, max_value=10**12))))
def test_sketch_add_many_counts_like_add(values: list[int]) -> None:
    """A batch added at once gives the same count, total, extremes and quantiles."""
    one, many = QuantileSketch(), QuantileSketch()
    for value in values:
        one.add(value)
    many.add_many(values)
    qs = (0, 0.25, 0.5, 0.99, 1)
    assert (many.count, many.total, many.min, many.max) == (one.count, one.total, one.min, one.max)
    assert many._buckets == one._buckets  # the same bucket for every value, boundaries too
    assert many.quantiles(qs) == pytest.approx(one.quantiles(qs), nan_ok=True)


_G = QuantileSketch._gamma
_ON_BOUNDARIES = [
    x
    for k in range(-40, 40, 3)
    for x in (math.nextafter(_G**k, 0), _G**k, math.nextafter(_G**k, 2))
]


@settings(deadline=None)
@given(values=st.lists(st.one_of(st.just(0.0), st.floats(min_value=1e-300, max_value=1e300))))
@example(values=_ON_BOUNDARIES)
def test_sketch_add_many_of_floats_buckets_like_add(values: list[float]) -> None:
    """Floats anywhere in range, bucket boundaries included, land where add puts them."""
    one, many = QuantileSketch(), QuantileSketch()
    for value in values:
        one.add(value)
    many.add_many(values)
    assert many._buckets == one._buckets
    assert (many.count, many._zeros) == (one.count, one._zeros)


def test_sketch_values_beyond_float_range_bucket_like_add() -> None:
    """Ints too big for a float still get a bucket each, the same one add gives."""
    values = [10**308, 2 * 10**308, 10**400, 10**400 + 1, 5]
    one, many = QuantileSketch(), QuantileSketch()
    for value in values:
        one.add(value)
    many.add_many(values)
    assert many._buckets == one._buckets
    assert len(many._buckets) == 4


@pytest.mark.parametrize("max_buckets", [0, -1, 1.5, True])
def test_sketch_refuses_a_bucket_cap_below_one(max_buckets: Any) -> None:
    """max_buckets must be an int >= 1."""
    with pytest.raises(ValueError, match="give an int >= 1"):
        QuantileSketch(max_buckets=max_buckets)


def test_sketch_quantiles_of_seeded_random_data() -> None:
    """p50/p95/p99 of 50,000 log-normal durations are within 1%; min, max, total exact."""
    rng = random.Random(1234)
    values = [rng.lognormvariate(10, 2) for _ in range(50_000)]
    sketch = QuantileSketch()
    for value in values:
        sketch.add(value)
    qs = (0.5, 0.95, 0.99)
    for q, estimate in zip(qs, sketch.quantiles(qs), strict=True):
        assert_within_one_percent(estimate, exact_quantile(values, q))
    assert (sketch.count, sketch.min, sketch.max) == (50_000, min(values), max(values))
    assert sketch.total == pytest.approx(sum(values))


def test_sketch_memory_stays_bounded() -> None:
    """A million distinct durations need only a few hundred buckets."""
    sketch = QuantileSketch()
    for ns in range(1, 1_000_001):
        sketch.add(ns)
    assert sketch.count == 1_000_000
    assert sketch.bucket_count <= 700  # log(1e6) / log(1.01 / 0.99) = 691
    assert_within_one_percent(sketch.quantile(0.5), 500_000)


def test_sketch_max_buckets_caps_memory_for_any_range() -> None:
    """Beyond max_buckets the lowest buckets merge: memory capped, high quantiles exact."""
    sketch = QuantileSketch(max_buckets=50)
    values = [10.0**e for e in range(-100, 101)]
    for value in values:
        sketch.add(value)
    assert sketch.bucket_count == 50
    assert sketch.count == len(values)
    assert_within_one_percent(sketch.quantile(0.99), exact_quantile(values, 0.99))
    assert sketch.quantile(1) == 1e100


def test_sketch_edge_cases() -> None:
    """Empty gives nan, zeros count, negatives and quantiles outside 0..1 are refused."""
    sketch = QuantileSketch()
    assert math.isnan(sketch.quantile(0.5))
    sketch.add(0)
    assert sketch.quantile(0.5) == 0
    with pytest.raises(ValueError, match="must be finite numbers >= 0"):
        sketch.add(-1)
    with pytest.raises(ValueError, match=r"within 0\.\.1"):
        sketch.quantile(1.5)


def _state(sketch: QuantileSketch) -> tuple[Any, ...]:
    """Everything a sketch has counted."""
    return (
        dict(sketch._buckets),
        sketch._zeros,
        sketch.count,
        sketch.total,
        sketch.min,
        sketch.max,
    )


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_sketch_add_refuses_nan_and_infinities(value: float) -> None:
    """add(nan / inf / -inf) is a ValueError that says what values it takes; nothing counts."""
    sketch = QuantileSketch()
    sketch.add(3.0)
    before = _state(sketch)
    with pytest.raises(ValueError, match="must be finite numbers >= 0"):
        sketch.add(value)
    assert _state(sketch) == before


@settings(deadline=None)
@given(
    values=st.lists(st.floats(min_value=0, max_value=1e300), max_size=50),
    bad=st.sampled_from([math.nan, math.inf, -math.inf, -1.0]),
    position=st.integers(min_value=0),
)
def test_sketch_add_many_refuses_a_batch_with_nan_infinities_or_negatives(
    values: list[float], bad: float, position: int
) -> None:
    """One NaN, infinite or negative value anywhere in a batch refuses the whole batch,
    with add's ValueError, and leaves the sketch as it was."""
    batch = [*values]
    batch.insert(position % (len(batch) + 1), bad)
    sketch = QuantileSketch()
    sketch.add_many([1.0, 2.0])
    before = _state(sketch)
    with pytest.raises(ValueError, match="must be finite numbers >= 0"):
        sketch.add_many(batch)
    assert _state(sketch) == before


def test_sketch_add_many_takes_finite_values_that_sum_past_float_range() -> None:
    """Finite values whose sum overflows are counted, as add counts them (total inf)."""
    values = [1e308, 1.5e308, 1.0]
    one, many = QuantileSketch(), QuantileSketch()
    for value in values:
        one.add(value)
    many.add_many(values)
    assert _state(many) == _state(one)
    assert many.total == math.inf


# -- what is timed ---------------------------------------------------------------------


def test_times_a_function() -> None:
    """Count, total, mean, min, quantiles and max of a woven function's calls."""
    timed = Timed()
    with ah.weave(sleepy, timed):
        for seconds in (0.01, 0.01, 0.02):
            assert sleepy(seconds) == seconds
    r = row(timed, sleepy)
    assert (r.count, r.errors) == (3, 0)
    assert r.min_s >= 0.009
    assert r.p50_s >= 0.009
    assert r.max_s >= 0.019
    assert r.min_s <= r.p50_s <= r.p95_s <= r.p99_s <= r.max_s
    assert r.mean_s == pytest.approx(r.total_s / 3)
    assert r.total_s >= 0.039


def test_times_methods() -> None:
    """Instance, class and static methods are each timed under their own name."""
    timed = Timed()
    with ah.weave(Model, timed):
        assert Model().forward(0.01) == 0.01
        assert Model.build() == "Model"
        assert Model().helper() == 7
    assert row(timed, Model.forward).p50_s >= 0.009
    assert {r.name for r in timed.summary()} == {
        name(Model.forward),
        name(Model.build),
        name(Model.helper),
    }


def test_times_async_until_the_coroutine_completes() -> None:
    """An async call is timed until it completes, not until the coroutine is made."""
    timed = Timed()
    with ah.weave(sleepy_async, timed):
        assert asyncio.run(sleepy_async(0.02)) == 0.02
    r = row(timed, sleepy_async)
    assert r.count == 1
    assert r.p50_s >= 0.019


def test_async_exception_counted_and_reraised() -> None:
    """An async call that raises counts as an error and its exception propagates as is."""
    timed, error = Timed(), ValueError("boom")
    with ah.weave(failing_async, timed), pytest.raises(ValueError, match="boom") as caught:
        asyncio.run(failing_async(error))
    assert caught.value is error
    assert (row(timed, failing_async).count, row(timed, failing_async).errors) == (1, 1)


def test_summary_table_shows_names_as_text_not_markup() -> None:
    """A join point named 'eval[val]' keeps its brackets in the printed summary."""
    timed = Timed(pointcut="test_timed.eval[[]val]")
    ah.joinpoint("test_timed.eval[val]")(quick)
    with ah.register(timed):
        ah.joinpoint("test_timed.eval[val]")(quick)(1)
    assert "test_timed.eval[val]" in str(timed.summary())


def test_a_coroutine_returned_by_a_plain_callable_is_timed_until_it_completes() -> None:
    """An async function behind a plain functools.wraps decorator returns its coroutine at
    once: the call is timed until that coroutine completes (not just its creation)."""
    timed = Timed()
    with ah.weave(sleepy_decorated, timed):
        asyncio.run(sleepy_decorated(0.02))
    r = row(timed, sleepy_decorated)
    assert r.count == 1
    assert r.total_s >= 0.02


def test_times_time_spent_inside_a_generator() -> None:
    """A generator is timed across next() calls, without the consumer's time between them."""
    timed = Timed()
    with ah.weave(numbers, timed):
        items = []
        for item in numbers(2, pause=0.01):
            items.append(item)
            time.sleep(0.1)
    assert items == [0, 1]
    r = row(timed, numbers)
    assert r.count == 1
    assert 0.019 <= r.total_s < 0.15


def test_generator_closed_early_or_dropped_is_recorded() -> None:
    """A generator closed or garbage-collected before its end is recorded then."""
    timed = Timed()
    with ah.weave(numbers, timed):
        gen = numbers(5)
        assert next(gen) == 0
        assert timed.summary() == []
        gen.close()
        assert row(timed, numbers).count == 1
        dropped = numbers(5)
        next(dropped)
        del dropped
        gc.collect()
    assert (row(timed, numbers).count, row(timed, numbers).errors) == (2, 0)


def test_generator_closed_or_dropped_before_its_first_value_is_recorded() -> None:
    """A generator never iterated is a call all the same: closed or collected unstarted,
    it is recorded (as every other call), with the time it took to create."""
    timed = Timed()
    with ah.weave(numbers, timed):
        numbers(5).close()
        assert row(timed, numbers).count == 1
        numbers(5)  # made and dropped at once
        gc.collect()
    assert (row(timed, numbers).count, row(timed, numbers).errors) == (2, 0)


@functools.cache
def cached_stream(n: int) -> Generator[int, Any, None]:
    """A cached generator function: every call with n hands out the same generator."""
    yield from range(n)


def test_a_cached_generator_is_not_closed_when_a_result_is_dropped() -> None:
    """lru_cache over a generator function hands out one shared generator: dropping one
    call's result must leave it to the next call."""
    cached_stream.cache_clear()
    with ah.weave(f"{__name__}.cached_stream", Timed()):
        first = cached_stream(5)
        assert next(first) == 0
        del first
        gc.collect()
        assert list(cached_stream(5)) == [1, 2, 3, 4]


class Loader:
    """Hands out one stored generator on every call."""

    def __init__(self) -> None:
        self.batches = (i for i in range(6))

    def stream(self) -> Generator[int, Any, None]:
        return self.batches


def test_a_timed_generator_starts_as_a_new_generator_does() -> None:
    """Unstarted until its first next(): its state says so, and a non-None first send()
    is refused without using it up, as with the generator itself."""
    with ah.weave(echo, Timed()):
        gen = echo()
        assert inspect.getgeneratorstate(gen) == inspect.GEN_CREATED
        with pytest.raises(TypeError, match="just-started generator"):
            gen.send("too early")
        assert next(gen) is None
        assert gen.send("hello") == "hello"
        gen.close()


def test_a_generator_function_behind_a_plain_decorator_is_timed_while_iterated() -> None:
    """functools.wraps over a generator function: each call still makes its own generator,
    so its iteration is timed, not just its creation."""
    timed = Timed()
    with ah.weave(numbers_decorated, timed):
        assert list(numbers_decorated(2, pause=0.01)) == [0, 1]
    assert row(timed, numbers_decorated).total_s >= 0.02


def test_a_generator_handed_out_by_a_getter_is_not_closed_when_a_result_is_dropped() -> None:
    """A callable that returns a generator it did not create (a stored stream): dropping
    one call's result must not close the generator the next call returns again."""
    timed = Timed()
    loader = Loader()
    with ah.weave(Loader.stream, timed):
        first = loader.stream()
        assert [next(first), next(first)] == [0, 1]
        second = loader.stream()
        del first
        gc.collect()
        assert list(second) == [2, 3, 4, 5]
    assert row(timed, Loader.stream).count == 2  # the calls; the stream is not theirs


def test_woven_generator_behaves_like_the_original() -> None:
    """send(), throw() and the return value reach the caller as with the original."""
    timed = Timed()
    with ah.weave(echo, timed), ah.weave(numbers, timed):
        gen = echo()
        assert next(gen) is None
        assert gen.send("hello") == "hello"
        assert gen.throw(KeyError("k")) == "caught"
        gen.close()

        def delegate() -> Generator[int, Any, str]:
            return (yield from numbers(2))

        outer_gen = delegate()
        assert list(outer_gen) == [0, 1]
        with pytest.raises(StopIteration) as stop:
            next(numbers(0))
        assert stop.value.value == "done"
    assert row(timed, echo).count == 1
    assert row(timed, numbers).count == 2


def test_generator_exception_counted_and_reraised() -> None:
    """A generator that raises while iterated counts an error; the exception propagates."""
    timed, error = Timed(), ValueError("boom")
    with ah.weave(broken_numbers, timed):
        gen = broken_numbers(error)
        assert next(gen) == 1
        with pytest.raises(ValueError, match="boom") as caught:
            next(gen)
    assert caught.value is error
    assert row(timed, broken_numbers).errors == 1


def test_exceptions_counted_separately_and_reraised_unchanged() -> None:
    """A raising call counts in count and errors; the same exception object propagates."""
    timed, error = Timed(), ValueError("boom")
    with ah.weave(failing, timed), ah.weave(quick, timed):
        quick(1)
        with pytest.raises(ValueError, match="boom") as caught:
            failing(error)
    assert caught.value is error
    assert caught.value.__context__ is None
    assert not caught.value.__suppress_context__
    assert caught.traceback[-1].name == "failing"
    assert (row(timed, failing).count, row(timed, failing).errors) == (1, 1)
    assert row(timed, quick).errors == 0


def _interrupt() -> None:
    raise KeyboardInterrupt


async def _wait_forever() -> None:
    await asyncio.Event().wait()


def _stop_after_one() -> Generator[int, None, None]:
    yield 1
    raise KeyboardInterrupt


def test_cancelled_and_interrupted_calls_are_timed_but_not_errors() -> None:
    """A KeyboardInterrupt (in a call or a generator) and a cancelled task are timed calls,
    not errors: errors counts Exceptions, as Counted's error_counts does."""

    async def cancel_one() -> None:
        task = asyncio.ensure_future(_wait_forever())
        await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    timed = Timed()
    with ah.weave(_interrupt, timed), ah.weave(_wait_forever, timed):
        with ah.weave(_stop_after_one, timed), pytest.raises(KeyboardInterrupt):
            list(_stop_after_one())
        with pytest.raises(KeyboardInterrupt):
            _interrupt()
        asyncio.run(cancel_one())
    rows = {r.name.rsplit(".", 1)[-1]: (r.count, r.errors) for r in timed.summary()}
    assert rows == {"_interrupt": (1, 0), "_wait_forever": (1, 0), "_stop_after_one": (1, 0)}


def test_many_calls_counted_exactly() -> None:
    """Thousands of calls (several folds into the sketch), some raising, are all counted."""
    timed = Timed()
    with ah.weave(failing, timed), ah.weave(quick, timed):
        for i in range(2501):
            quick(i)
            if i % 2:
                with pytest.raises(ValueError, match="boom"):
                    failing(ValueError("boom"))
    assert (row(timed, failing).count, row(timed, failing).errors) == (1250, 1250)
    assert (row(timed, quick).count, row(timed, quick).errors) == (2501, 0)
    assert 0 < row(timed, quick).min_s <= row(timed, quick).p50_s <= row(timed, quick).max_s


@pytest.mark.parametrize("neighbour", [False, True], ids=["layer", "context"])
def test_layer_and_context_paths_time_alike(neighbour: bool) -> None:
    """Alone at a join point Timed runs as a dispatch layer, beside other advice as around
    advice: calls, errors, generators, methods and trace events come out the same."""
    timed = Timed(trace=True)
    with contextlib.ExitStack() as stack:
        for target in (quick, failing, numbers, Model):
            handle = stack.enter_context(ah.weave(target, timed))
            if neighbour:
                stack.enter_context(ah.weave(target, before=lambda ctx: None))
            for advice in handle.items:
                for jp in advice.points:
                    assert (jp.proxy_ref()._self_wrapper.__name__ == "timed") is not neighbour
        assert quick(1) == 2
        with pytest.raises(ValueError, match="x"):
            failing(ValueError("x"))
        assert list(numbers(2, pause=0.002)) == [0, 1]
        assert Model().forward(0.002) == 0.002
    assert (row(timed, quick).count, row(timed, quick).errors) == (1, 0)
    assert (row(timed, failing).count, row(timed, failing).errors) == (1, 1)
    assert row(timed, numbers).count == 1
    assert row(timed, numbers).total_s >= 0.004
    assert row(timed, Model.forward).count == 1
    assert row(timed, Model.forward).min_s >= 0.002
    names = [event[0] for event in timed._events]
    assert names.count(name(numbers)) == 3  # one event per resume: 2 values, then the end
    assert names.count(name(quick)) == names.count(name(failing)) == 1


def test_outermost_around_advice() -> None:
    """Timed runs outermost, so its time includes other around advice of the call."""
    timed = Timed()

    def slow_around(ctx: ah.CallContext, proceed: ah.Proceed) -> Any:
        time.sleep(0.01)
        return proceed()

    with ah.weave(quick, around=slow_around), ah.weave(quick, timed):
        assert quick(1) == 2
    assert row(timed, quick).p50_s >= 0.009


@pytest.mark.parametrize("trace", [False, True])
def test_thread_safe_counts(trace: bool) -> None:
    """Calls from many threads at once are all counted, even while summaries are read."""
    timed = Timed(trace=trace)
    with ah.weave(quick, timed):
        threads = [
            threading.Thread(target=lambda: [quick(i) for i in range(1000)]) for _ in range(8)
        ]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            timed.summary()
        for thread in threads:
            thread.join()
    assert row(timed, quick).count == 8000


# -- failures of Timed itself ----------------------------------------------------------


def boom(*args: object, **kwargs: object) -> None:
    raise RuntimeError("timing broke")


def test_failing_timing_never_breaks_the_host_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """With errors='log' a failure inside Timed is logged; results and exceptions pass."""
    timed, error = Timed(trace=True), ValueError("boom")  # trace: every call goes to _record
    monkeypatch.setattr(timed, "_record", boom)
    with (
        ah.weave(quick, timed),
        ah.weave(failing, timed),
        ah.weave(numbers, timed),
        ah.weave(sleepy_async, timed),
        capture_logs() as logs,
    ):
        assert quick(1) == 2
        with pytest.raises(ValueError, match="boom") as caught:
            failing(error)
        assert list(numbers(2)) == [0, 1]
        assert asyncio.run(sleepy_async(0)) == 0
    assert caught.value is error
    assert caught.value.__context__ is None
    assert [entry["event"] for entry in logs] == ["advice.failed"] * 4
    assert {entry["aspect"] for entry in logs} == {"timed"}


def test_errors_raise_lets_a_timing_failure_through(monkeypatch: pytest.MonkeyPatch) -> None:
    """With errors='raise' a failure inside Timed propagates, for debugging the aspect."""
    timed = Timed(errors="raise", trace=True)
    monkeypatch.setattr(timed, "_record", boom)
    with ah.weave(quick, timed), pytest.raises(RuntimeError, match="timing broke"):
        quick(1)


# -- weaving and registering -----------------------------------------------------------


def test_register_with_a_pointcut_and_remove() -> None:
    """register(Timed(pointcut=...)) times the matching join points until removed."""

    @ah.joinpoint("timed_test.train_step")
    def train_step() -> str:
        return "step"

    @ah.joinpoint("timed_test.evaluate")
    def evaluate() -> str:
        return "eval"

    timed = Timed(pointcut="timed_test.train_*")
    handle = ah.register(timed)
    assert (train_step(), evaluate()) == ("step", "eval")
    handle.remove()
    train_step()
    assert [(r.name, r.count) for r in timed.summary()] == [("timed_test.train_step", 1)]


def test_weave_and_remove_restore_the_original() -> None:
    """weave(target, Timed()) times the target; remove() puts the original back."""
    original = quick
    timed = Timed()
    handle = ah.weave(quick, timed)
    assert quick is not original
    quick(1)
    handle.remove()
    assert quick is original
    quick(1)
    assert row(timed, quick).count == 1


def test_register_without_pointcut_is_refused() -> None:
    """register(Timed()) without a pointcut says to give one or to weave it."""
    with pytest.raises(AspectDefinitionError, match="pointcut"):
        ah.register(Timed())


def test_invalid_max_events_is_refused() -> None:
    """max_events must be a non-negative int."""
    with pytest.raises(InvalidOptionError, match="max_events"):
        Timed(max_events=-1)


# -- summary ---------------------------------------------------------------------------


def test_summary_rows_sorted_by_total_time() -> None:
    """Rows come slowest total first and carry every statistic by name."""
    timed = Timed()
    with ah.weave(quick, timed), ah.weave(sleepy, timed):
        quick(1)
        sleepy(0.01)
    summary = timed.summary()
    assert isinstance(summary, Summary)
    assert [r.name for r in summary] == [name(sleepy), name(quick)]
    assert list(summary[0].as_dict()) == [
        "name",
        "count",
        "errors",
        "total_s",
        "mean_s",
        "min_s",
        "p50_s",
        "p95_s",
        "p99_s",
        "max_s",
    ]


def test_summary_types_are_exported_with_timed() -> None:
    """Summary and TimingRow, what Timed.summary() returns, import from aspecthook.aspects."""
    from aspecthook.aspects import Summary as PublicSummary
    from aspecthook.aspects import TimingRow as PublicRow

    assert (PublicSummary, PublicRow) == (Summary, TimingRow)
    assert {"Summary", "TimingRow"} <= set(dir(ah.aspects))


def test_summary_prints_a_table() -> None:
    """str() of the summary and rich both render a table of the rows."""
    from rich.console import Console

    timed = Timed()
    with ah.weave(sleepy, timed):
        sleepy(0.01)
    text = str(timed.summary())
    for word in ("join point", "calls", "errors", "total", "p50", "p95", "p99", "max"):
        assert word in text
    assert name(sleepy) in text
    assert " ms " in text
    out = StringIO()
    Console(file=out, width=200).print(timed.summary())
    assert name(sleepy) in out.getvalue()


def test_reset_forgets_everything() -> None:
    """reset() empties the summary and the trace."""
    timed = Timed(trace=True, max_events=1)
    with ah.weave(quick, timed):
        quick(1)
        quick(1)
        timed.reset()
        assert (timed.summary(), timed.dropped_events) == ([], 0)
        quick(1)
    assert row(timed, quick).count == 1


# -- chrome trace ----------------------------------------------------------------------


def load_events(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The whole document and its complete events."""
    document = json.loads(path.read_text())
    return document, [e for e in document["traceEvents"] if e["ph"] == "X"]


def test_chrome_trace_into_a_missing_folder_names_the_path_given(tmp_path: Path) -> None:
    """export_chrome_trace into a folder that does not exist says so about the user's
    path, not the hidden temp file beside it."""
    target = tmp_path / "missing" / "trace.json"
    with pytest.raises(FileNotFoundError, match="does not exist") as exc:
        Timed(trace=True).export_chrome_trace(target)
    assert exc.value.filename == str(target)
    assert ".tmp" not in str(exc.value)
    assert not (tmp_path / "missing").exists()


def test_chrome_trace_nests_nested_calls(tmp_path: Path) -> None:
    """The trace file is Trace Event JSON; a callee's interval lies inside its caller's."""
    timed = Timed(trace=True)
    with ah.weave(outer, timed), ah.weave(inner, timed):
        assert outer() == 2
    path = timed.export_chrome_trace(tmp_path / "trace.json")
    document, events = load_events(path)
    assert document["displayTimeUnit"] == "ms"
    assert [e["name"] for e in events] == [name(outer), name(inner), name(inner)]
    for event in events:
        assert event["cat"] == "aspecthook"
        assert event["pid"] == os.getpid()
        assert event["tid"] == threading.get_native_id()
        assert event["ts"] >= 0
        assert event["dur"] > 0
    parent, first, second = events
    for child in (first, second):
        assert child["ts"] >= parent["ts"]
        assert child["ts"] + child["dur"] <= parent["ts"] + parent["dur"] + 1e-6
    assert first["ts"] + first["dur"] <= second["ts"] + 1e-6
    assert parent["dur"] >= 4000  # microseconds: 2 ms + 2 x 1 ms of sleep


def test_chrome_trace_thread_ids(tmp_path: Path) -> None:
    """Each event carries the native id of the thread that made the call."""
    timed = Timed(trace=True)
    ids = []

    def work() -> None:
        ids.append(threading.get_native_id())
        quick(1)

    with ah.weave(quick, timed):
        threads = [threading.Thread(target=work) for _ in range(3)]
        for thread in threads:
            thread.start()
            thread.join()
    _, events = load_events(timed.export_chrome_trace(tmp_path / "trace.json"))
    assert sorted(e["tid"] for e in events) == sorted(ids)


def test_chrome_trace_names_the_process_and_every_thread(tmp_path: Path) -> None:
    """Metadata events name the process and every thread that made an event, so a viewer
    shows names, not bare ids: one still alive at the export, and one that had ended
    before it (by the name it had at its first event; it showed a bare id)."""
    timed = Timed(trace=True)
    release = threading.Event()

    def work() -> None:
        quick(1)
        release.wait(5)

    with ah.weave(quick, timed):
        quick(1)
        alive = threading.Thread(target=work, name="loader-1")
        ended = threading.Thread(target=work, name="gone")
        ended.start()
        release.set()
        ended.join()
        release.clear()
        alive.start()
        try:
            document, events = load_events(timed.export_chrome_trace(tmp_path / "trace.json"))
        finally:
            release.set()
            alive.join()
    meta = [e for e in document["traceEvents"] if e["ph"] == "M"]
    assert meta[0]["name"] == "process_name"
    assert meta[0]["pid"] == os.getpid()
    threads = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert threads == {
        threading.main_thread().native_id: "MainThread",
        alive.native_id: "loader-1",
        ended.native_id: "gone",
    }
    assert {e["tid"] for e in events} >= set(threads)


def test_concurrent_coroutines_are_async_events_of_their_own(tmp_path: Path) -> None:
    """Two calls on one thread that overlap without nesting (the first starts, the second
    starts, the first ends, the second ends): each is a begin/end pair of async events
    with its own id; complete events on one thread would claim that one nests in the other."""
    timed = Timed(trace=True)

    async def both() -> None:
        first_started, first_done = asyncio.Event(), asyncio.Event()
        await asyncio.gather(
            handoff(first_started, None, first_done), handoff(None, first_started, first_done)
        )

    with ah.weave(handoff, timed):
        asyncio.run(both())
    document, complete = load_events(timed.export_chrome_trace(tmp_path / "trace.json"))
    assert complete == []
    begins = sorted((e for e in document["traceEvents"] if e["ph"] == "b"), key=lambda e: e["ts"])
    ends = {e["id"]: e["ts"] for e in document["traceEvents"] if e["ph"] == "e"}
    assert len(begins) == 2
    assert len({e["id"] for e in begins}) == 2
    first, second = begins
    assert first["ts"] <= second["ts"] <= ends[first["id"]] <= ends[second["id"]]
    other = Timed(trace=True)  # another instance's ids differ, so merged files pair right
    with ah.weave(handoff, other):
        asyncio.run(both())
    document, _ = load_events(other.export_chrome_trace(tmp_path / "other.json"))
    assert not {e["id"] for e in document["traceEvents"] if "id" in e} & set(ends)


def finishing(pause: float) -> Generator[int, Any, None]:
    """Yields once, then works ``pause`` seconds before it is exhausted."""
    yield 1
    time.sleep(pause)


def cleaning(pause: float) -> Generator[int, Any, None]:
    """Yields once; closed there, cleans up for ``pause`` seconds."""
    try:
        yield 1
    finally:
        time.sleep(pause)


def test_every_resume_of_a_generator_is_a_trace_event(tmp_path: Path) -> None:
    """The resume that exhausts a generator, one that raises and its close are events too,
    so the trace shows the time the summary counts; one that raised is marked an error."""
    timed = Timed(trace=True)
    with ah.weave(finishing, timed), ah.weave(broken_numbers, timed), ah.weave(cleaning, timed):
        assert list(finishing(0.02)) == [1]
        with pytest.raises(KeyError):
            list(broken_numbers(KeyError("k")))
        closed = cleaning(0.02)
        next(closed)
        closed.close()
    _, events = load_events(timed.export_chrome_trace(tmp_path / "trace.json"))
    for fn in (finishing, cleaning):
        resumes = [e for e in events if e["name"] == name(fn)]
        assert len(resumes) == 2
        assert resumes[1]["dur"] >= 20_000  # microseconds: the 20 ms after the yield
    broken = [e for e in events if e["name"] == name(broken_numbers)]
    assert [e.get("args") for e in broken] == [None, {"error": True}]


def test_traces_of_two_timed_share_a_time_origin(tmp_path: Path) -> None:
    """Two Timed made at different times put one call at the same ts, so traces merge."""
    first = Timed(trace=True)
    time.sleep(0.05)
    second = Timed(trace=True)
    with ah.weave(quick, first), ah.weave(quick, second):
        quick(1)
    _, (a,) = load_events(first.export_chrome_trace(tmp_path / "a.json"))
    _, (b,) = load_events(second.export_chrome_trace(tmp_path / "b.json"))
    assert abs(a["ts"] - b["ts"]) < 10_000  # microseconds; the creations were 50 ms apart


def test_trace_events_bounded_and_dropped_counted(tmp_path: Path) -> None:
    """Past max_events calls are still timed but their events are dropped and counted."""
    timed = Timed(trace=True, max_events=3)
    with ah.weave(quick, timed):
        for i in range(5):
            quick(i)
    document, events = load_events(timed.export_chrome_trace(tmp_path / "trace.json"))
    assert len(events) == 3
    assert timed.dropped_events == 2
    assert document["otherData"]["dropped_events"] == 2
    assert row(timed, quick).count == 5


def test_no_trace_events_unless_asked(tmp_path: Path) -> None:
    """Without trace=True no events are kept; the file is still valid and empty."""
    timed = Timed()
    with ah.weave(quick, timed):
        quick(1)
    _, events = load_events(timed.export_chrome_trace(tmp_path / "trace.json"))
    assert events == []


def test_trace_written_atomically(tmp_path: Path) -> None:
    """Export replaces an existing file whole and leaves no temporary file behind."""
    target = tmp_path / "trace.json"
    target.write_text("old")
    timed = Timed(trace=True)
    with ah.weave(quick, timed):
        quick(1)
    assert timed.export_chrome_trace(str(target)) == target
    assert len(load_events(target)[1]) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]


def test_trace_export_fsyncs_the_folder_after_the_replace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Export fsyncs the temp file, replaces the trace with it, then fsyncs the trace's
    folder, so that the rename survives a power loss as a checkpoint's does."""
    target = tmp_path / "trace.json"
    timed = Timed(trace=True)
    with ah.weave(quick, timed):
        quick(1)
    steps: list[tuple[str, Any]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        info = os.fstat(fd)
        folder = stat.S_ISDIR(info.st_mode)
        steps.append(("fsync", (info.st_dev, info.st_ino) if folder else "file"))
        real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        steps.append(("replace", Path(dst).name))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    timed.export_chrome_trace(target)
    folder = tmp_path.stat()
    assert steps == [
        ("fsync", "file"),
        ("replace", "trace.json"),
        ("fsync", (folder.st_dev, folder.st_ino)),
    ]


def test_trace_written_under_the_longest_file_name(tmp_path: Path) -> None:
    """A file name as long as the file system allows is written: the temporary file beside
    it has a name of its own that fits too."""
    target = tmp_path / ("t" * 250 + ".json")  # 255 bytes, the usual limit
    timed = Timed(trace=True)
    with ah.weave(quick, timed):
        quick(1)
    assert len(load_events(timed.export_chrome_trace(target))[1]) == 1
    assert [p.name for p in tmp_path.iterdir()] == [target.name]


def test_chrome_trace_marks_the_calls_that_raised(tmp_path: Path) -> None:
    """A call that raised carries args {'error': True} in the trace; one that returned
    carries no args."""
    timed = Timed(trace=True)
    with ah.weave(quick, timed), ah.weave(failing, timed):
        quick(1)
        with pytest.raises(ValueError, match="boom"):
            failing(ValueError("boom"))
    _, events = load_events(timed.export_chrome_trace(tmp_path / "trace.json"))
    assert [(e["name"], e.get("args")) for e in events] == [
        (name(quick), None),
        (name(failing), {"error": True}),
    ]


def test_a_failed_export_leaves_the_previous_trace_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An export that fails while writing raises, keeps the file an earlier export wrote
    as it was, and leaves no half-written temp file beside it."""
    timed = Timed(trace=True)
    with ah.weave(quick, timed):
        quick(1)
        path = timed.export_chrome_trace(tmp_path / "trace.json")
        before = path.read_text()
        quick(2)

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        timed.export_chrome_trace(path)
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]


def test_summary_without_rich_is_a_plain_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where rich cannot be imported, printing the summary gives a plain-text table: a
    header, then one line per join point with its calls and errors, largest total first."""
    timed = Timed()
    with ah.weave(sleepy, timed), ah.weave(failing, timed):
        sleepy(0.002)
        sleepy(0.002)
        with pytest.raises(ValueError, match="x"):
            failing(ValueError("x"))
    monkeypatch.setitem(sys.modules, "rich.console", None)  # import fails: ImportError
    header, *lines = str(timed.summary()).splitlines()
    assert header.split() == [
        "join", "point", "calls", "errors", "total", "mean", "min", "p50", "p95", "p99", "max"
    ]  # fmt: skip
    assert [line.split()[:3] for line in lines] == [
        [r.name, str(r.count), str(r.errors)] for r in timed.summary()
    ]
    assert [(r.name, r.count, r.errors) for r in timed.summary()] == [
        (name(sleepy), 2, 0),
        (name(failing), 1, 1),
    ]


def test_summary_table_shows_long_names_whole() -> None:
    """Two join points whose long names differ only at the end are told apart in the
    printed summary: the table grows wider than its usual 140 columns rather than cut them
    to the same prefix."""
    stem = "test_timed.service.handlers." + "orders_" * 12
    rows = [
        TimingRow(f"{stem}{end}", 1, 0, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001)
        for end in ("get", "put")
    ]
    text = str(Summary(rows))
    assert f"{stem}get" in text
    assert f"{stem}put" in text
    for column in ("calls", "errors", "total", "p99", "max"):
        assert column in text


def test_thread_names_kept_for_traces_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A program that starts threads without end keeps the names of the latest ones only
    (the oldest go first), so tracing never grows without bound."""
    monkeypatch.setattr(_trace, "_THREAD_NAMES", {})
    monkeypatch.setattr(_trace, "_NAMES_KEPT", 2)
    timed = Timed(trace=True, max_events=0)  # names are noted even when events are dropped
    with ah.weave(quick, timed):
        for n in range(3):
            thread = threading.Thread(target=quick, args=(1,), name=f"short-{n}")
            thread.start()
            thread.join()
    assert list(_trace._THREAD_NAMES.values()) == ["short-1", "short-2"]
