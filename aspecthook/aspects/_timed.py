"""``Timed``: per-join-point call timings in bounded memory, a summary table, a trace file.

Durations go into a DDSketch-style log-bucket quantile sketch (``QuantileSketch``):
quantiles are within 1% relative error and memory is one counter per occupied bucket,
whatever the number of calls. With ``trace=True`` every call is also kept (up to
``max_events``) as a complete event for ``export_chrome_trace``, which Perfetto and
chrome://tracing open.
"""

from __future__ import annotations

import io
import json
import math
import os
import threading
import time
import weakref
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import CoroutineType, GeneratorType
from typing import Any

from .. import around
from .._advice import log_own_failure, runs_as_layer
from .._aspect import Aspect
from .._context import CallContext, Proceed
from .._joinpoint import JoinPoint
from .._priority import Priority, PriorityLike
from .._units import format_seconds
from ..errors import InvalidOptionError

__all__ = ["RELATIVE_ACCURACY", "QuantileSketch", "Summary", "Timed", "TimingRow"]

#: Relative error of every quantile ``QuantileSketch`` reports (DDSketch's alpha).
RELATIVE_ACCURACY = 0.01

# Module-level aliases: one global lookup on the hot path instead of a module attribute.
# Integer nanoseconds. perf_counter() (float seconds) reads faster here, but a double of the
# seconds since boot has a resolution of ~2 ns after 180 days of uptime and ~15 ns after
# 1,000: too coarse for calls of a few hundred ns. perf_counter_ns keeps 1 ns.
_clock = time.perf_counter_ns
_native_id = threading.get_native_id
_log = math.log
_ceil = math.ceil

#: Calls buffered per join point before they are folded into its sketch: folding sorts
#: the batch and then works per occupied bucket, so a larger batch costs less per call
#: (durations of one join point fill few buckets); 1,024 durations are ~40 KB.
_BATCH = 1024

#: Time zero of every trace (``perf_counter_ns`` at import): shared by all ``Timed``
#: instances, so their traces line up when merged into one file.
_ORIGIN = _clock()


class QuantileSketch:
    """Streaming quantiles of non-negative values with 1% relative error, bounded memory.

    DDSketch (Masson, Rim and Lee, VLDB 2019): a value ``x > 0`` counts in bucket
    ``ceil(log(x) / log(gamma))`` with ``gamma = (1 + a) / (1 - a)`` and ``a = 0.01``.
    Bucket ``i`` holds ``(gamma**(i-1), gamma**i]`` and answers with
    ``2 * gamma**i / (gamma + 1)``, within ``a`` of every value in it, so a quantile is
    within 1% of the exact one (the value of rank ``floor(q * (n - 1))``); ``q`` 0 and 1
    give the exact min and max. Memory is one dict entry per occupied bucket: values
    spanning a ratio ``r`` need about ``log(r) / 0.02`` buckets (1 ns .. 1 hour: ~1,450).
    ``max_buckets`` caps any input by merging the lowest buckets, which only blurs the
    lowest quantiles.

    Bucket membership is decided by comparison with ``gamma**i`` itself (``_key``), so
    ``add`` and ``add_many`` agree exactly even for values on a bucket boundary.
    """

    __slots__ = ("_buckets", "_zeros", "count", "max", "max_buckets", "min", "total")

    _gamma = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
    _inv_log_gamma = 1 / math.log(_gamma)

    def __init__(self, max_buckets: int = 2048) -> None:
        if not isinstance(max_buckets, int) or isinstance(max_buckets, bool) or max_buckets < 1:
            raise ValueError(f"max_buckets={max_buckets!r}: give an int >= 1")
        self._buckets: Counter[int] = Counter()
        self._zeros = 0
        self.max_buckets = max_buckets
        self.count = 0
        self.total: float = 0
        self.min = math.inf
        self.max = -math.inf

    def add(self, value: float) -> None:
        """Count one value (a duration in any unit); negative values are refused."""
        if value > 0:
            key = self._key(value)
            buckets = self._buckets
            buckets[key] = buckets.get(key, 0) + 1
            if len(buckets) > self.max_buckets:
                self._collapse_lowest()
        elif value == 0:
            self._zeros += 1
        else:
            raise ValueError(f"QuantileSketch.add({value!r}): values must be >= 0")
        self.count += 1
        self.total += value
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value

    def add_many(self, values: Sequence[float]) -> None:
        """Count a batch of values, as ``add`` does each, with less work per value.

        The batch is sorted (in C) and then counted a bucket at a time: one key for the
        bucket's first value and one ``bisect`` for where the bucket ends. The durations
        of one join point fill few buckets, so a batch costs a handful of logarithms
        instead of one per value (a logarithm costs more than the rest of a timed call's
        bookkeeping on the machines we measured; counting equal values first with a
        ``Counter`` measured slower than the sort).
        """
        if not values:
            return
        ordered = sorted(values)
        low = ordered[0]
        if not low >= 0:
            raise ValueError(f"QuantileSketch.add({low!r}): values must be >= 0")
        buckets = self._buckets
        gamma, inv_log_gamma = self._gamma, self._inv_log_gamma
        n = len(ordered)
        i = bisect_right(ordered, 0) if not low else 0
        self._zeros += i
        while i < n:
            value = ordered[i]
            # _key inlined, keeping gamma**key for the bisect (this loop is Timed's fold).
            key = _ceil(_log(value) * inv_log_gamma)
            try:
                bound = gamma**key
                if value > bound:
                    key += 1
                    bound = gamma**key
                elif value <= gamma ** (key - 1):
                    key -= 1
                    bound = gamma**key
            except OverflowError:  # beyond float range: one value at a time, as add does
                end = i + 1
            else:
                end = bisect_right(ordered, bound, i + 1)
            buckets[key] = buckets.get(key, 0) + end - i
            i = end
        while len(buckets) > self.max_buckets:
            self._collapse_lowest()
        self.count += n
        self.total += sum(ordered)
        self.min = min(self.min, low)
        self.max = max(self.max, ordered[-1])

    @classmethod
    def _key(cls, value: float) -> int:
        """The bucket of ``value > 0``: the ``i`` with ``gamma**(i-1) < value <= gamma**i``.

        ``ceil(log(value) / log(gamma))`` is that ``i`` up to rounding; the two comparisons
        settle values on a boundary, so ``add_many`` can find a bucket's end by bisecting
        on ``gamma**i`` and agree with ``add`` exactly.
        """
        key = _ceil(_log(value) * cls._inv_log_gamma)
        try:
            if value > cls._gamma**key:
                key += 1
            elif value <= cls._gamma ** (key - 1):
                key -= 1
        except OverflowError:  # beyond float range at the top: the top key stands
            pass
        return key

    def _collapse_lowest(self) -> None:
        buckets = self._buckets
        lowest = buckets.pop(min(buckets))
        buckets[min(buckets)] += lowest

    @property
    def bucket_count(self) -> int:
        """How many buckets are in use: the sketch's memory, in counters."""
        return len(self._buckets) + (1 if self._zeros else 0)

    def quantile(self, q: float) -> float:
        """The ``q``-quantile (``0 <= q <= 1``) within 1%; ``nan`` when empty."""
        return self.quantiles((q,))[0]

    def quantiles(self, qs: Iterable[float]) -> list[float]:
        """Several quantiles in one pass over the buckets."""
        wanted = sorted((float(q), i) for i, q in enumerate(qs))
        if any(not 0 <= q <= 1 for q, _ in wanted):
            raise ValueError(f"quantiles must be within 0..1, got {[q for q, _ in wanted]}")
        result = [math.nan] * len(wanted)
        if not self.count:
            return result
        items = iter(sorted(self._buckets.items()))
        seen, value = self._zeros, 0.0
        for q, i in wanted:
            rank = q * (self.count - 1)
            if rank <= 0 or rank >= self.count - 1:
                result[i] = self.min if rank <= 0 else self.max
                continue
            while seen <= rank:
                key, n = next(items, (None, 0))
                if key is None:
                    value = self.max
                    break
                seen += n
                value = self._bucket_value(key)
            result[i] = min(max(value, self.min), self.max)
        return result

    def _bucket_value(self, key: int) -> float:
        """The value bucket ``key`` answers with (past float range: clamped by the caller)."""
        try:
            return 2 * self._gamma**key / (self._gamma + 1)
        except OverflowError:
            return math.inf


class _Stats(QuantileSketch):
    """A join point's sketch of durations (ns) plus how many of those calls raised."""

    __slots__ = ("errors",)

    def __init__(self) -> None:
        super().__init__()
        self.errors = 0


@dataclass(frozen=True)
class TimingRow:
    """One join point in ``Timed.summary()``; times in seconds, quantiles within 1%."""

    name: str
    count: int
    errors: int
    total_s: float
    mean_s: float
    min_s: float
    p50_s: float
    p95_s: float
    p99_s: float
    max_s: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Summary(list[TimingRow]):
    """The rows of ``Timed.summary()``, slowest total first; printing renders a table."""

    def __str__(self) -> str:
        try:
            from rich.console import Console
        except ImportError:
            return self._plain()
        console = Console(width=140, record=True, file=io.StringIO())
        console.print(self.__rich__())
        return console.export_text().rstrip()

    def __rich__(self) -> Any:
        from rich.table import Table
        from rich.text import Text

        table = Table(title="aspecthook: timings (quantiles within 1%)")
        table.add_column("join point")
        for column in ("calls", "errors", "total", "mean", "min", "p50", "p95", "p99", "max"):
            table.add_column(column, justify="right")
        for row in self:
            # Text, not markup: a name such as 'eval[val]' is shown as it is.
            table.add_row(Text(row.name), str(row.count), str(row.errors), *_times(row))
        return table

    def _plain(self) -> str:
        head = f"{'join point':40} {'calls':>8} {'errors':>6} " + " ".join(
            f"{c:>9}" for c in ("total", "mean", "min", "p50", "p95", "p99", "max")
        )
        lines = [head]
        for row in self:
            times = " ".join(f"{t:>9}" for t in _times(row))
            lines.append(f"{row.name:40} {row.count:>8} {row.errors:>6} {times}")
        return "\n".join(lines)


def _times(row: TimingRow) -> list[str]:
    values = (row.total_s, row.mean_s, row.min_s, row.p50_s, row.p95_s, row.p99_s, row.max_s)
    return [format_seconds(v) for v in values]


class Timed(Aspect):
    """Time every call of the join points it advises: count, errors, total, quantiles.

    ``weave(target, Timed())`` times a callable; ``register(Timed(pointcut='train_*'))``
    times named join points. Async join points are timed until the coroutine completes,
    and so is a coroutine a synchronous callable returns (an async function behind a
    plain decorator); generator functions by the time spent inside the generator until
    it is exhausted or closed (a generator returned by another callable, which may be
    shared, is not iterated through a timer: the call alone is timed). Calls that raise
    are timed too and counted in ``errors``. Quantiles come from a ``QuantileSketch``
    (1% relative error, bounded memory). ``trace=True`` also keeps up to ``max_events``
    calls for ``export_chrome_trace``; later ones are counted in ``dropped_events``.
    Outermost around advice (``HIGHEST``) with ``errors='log'``: a failure in the timing
    is logged, never raised into the timed call.
    """

    priority: PriorityLike = Priority.HIGHEST
    errors: str = "log"

    def __init__(
        self,
        *,
        trace: bool = False,
        max_events: int = 100_000,
        **options: Any,
    ) -> None:
        super().__init__(**options)  # pointcut, priority, name, errors, order_after/before
        if not isinstance(max_events, int) or isinstance(max_events, bool) or max_events < 0:
            raise InvalidOptionError(
                f"max_events={max_events!r} is not a count: give an int >= 0",
                option="max_events",
                value=max_events,
            )
        self.trace = bool(trace)
        self.max_events = max_events
        self.dropped_events = 0
        # Reentrant: a signal handler or a garbage-collected generator may record while
        # this thread holds it; a plain Lock would deadlock there.
        self._lock = threading.RLock()
        self._stats: dict[str, _Stats] = {}
        # Durations (ns) not yet folded into the sketch, per name.
        self._pending: dict[str, list[int]] = {}
        self._events: list[tuple[str, int, int, int, bool, bool]] = []

    # -- the advice -------------------------------------------------------------------

    @around()
    @runs_as_layer("_layer")  # and applies errors= itself: the generic guard costs ~0.5 us
    def time_call(self, ctx: CallContext, proceed: Proceed) -> Any:
        """Time one call; hand coroutines and generators to their own timers."""
        jp = ctx.joinpoint
        if jp.is_async:
            return self._time_async(ctx, proceed)
        start = _clock()
        try:
            result = proceed()
        except BaseException:
            self._record_safely(jp, start, _clock() - start, True)
            raise
        elapsed = _clock() - start
        if jp.is_generator and type(result) is GeneratorType:
            return _timed(self, jp, result, elapsed)
        if type(result) is CoroutineType:
            return self._time_coroutine(jp, result, start)
        self._record_safely(jp, start, elapsed, False)
        return result

    def _layer(
        self, jp: JoinPoint, inner: Callable[..., Any] | None, guard: tuple[Any, Any] | None
    ) -> Callable[..., Any]:
        """``time_call`` as a dispatch layer: the same timing with no ``CallContext``.

        Used when every advice at ``jp`` is a layer (``runs_as_layer``); ``inner`` and
        ``guard`` are explained in ``aspecthook._specialised._layered``.
        """
        checked = guard is not None
        chain, general = guard if guard is not None else (None, None)
        pending = self._pending_list(jp.name)
        append, room = pending.append, _BATCH - 1
        clock = _clock
        generator = jp.is_generator

        def timed(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            if checked and jp._chain is not chain:
                return general(wrapped, instance, args, kwargs)  # type: ignore[misc]
            start = clock()
            try:
                if inner is None:
                    result = wrapped(*args, **kwargs)
                else:
                    result = inner(wrapped, instance, args, kwargs)
            except BaseException:
                self._record_safely(jp, start, clock() - start, True)
                raise
            elapsed = clock() - start
            if generator and type(result) is GeneratorType:
                return _timed(self, jp, result, elapsed)
            if type(result) is CoroutineType:
                return self._time_coroutine(jp, result, start)
            if len(pending) < room and not self.trace:
                append(elapsed)  # the common case of _record: one append
            else:
                self._record_safely(jp, start, elapsed, False)
            return result

        return timed

    async def _time_async(self, ctx: CallContext, proceed: Proceed) -> Any:
        jp = ctx.joinpoint
        start = _clock()
        try:
            result = await proceed()
        except BaseException:
            self._record_safely(jp, start, _clock() - start, True, concurrent=True)
            raise
        self._record_safely(jp, start, _clock() - start, False, concurrent=True)
        return result

    async def _time_coroutine(self, jp: JoinPoint, coroutine: Any, start: int) -> Any:
        """A synchronous callable's coroutine (an async function behind a plain decorator),
        timed from the call until it completes, as an async join point's call is."""
        try:
            result = await coroutine
        except BaseException:
            self._record_safely(jp, start, _clock() - start, True, concurrent=True)
            raise
        self._record_safely(jp, start, _clock() - start, False, concurrent=True)
        return result

    def _record_safely(
        self, jp: JoinPoint, start: int, duration: int, failed: bool, *, concurrent: bool = False
    ) -> None:
        """``_record`` under the ``errors=`` policy (a failure is logged or raised)."""
        try:
            self._record(jp.name, start, duration, failed, concurrent=concurrent)
        except Exception:
            self._failed(jp)

    def _record(
        self, name: str, start: int, duration: int, failed: bool, *, concurrent: bool = False
    ) -> None:
        """Note one call (``start`` from ``perf_counter_ns``; ``-1``: no trace event).

        ``concurrent``: a coroutine's call, which may overlap others on its thread without
        nesting in them; its trace event is an async one (see ``export_chrome_trace``).

        The hot path takes no lock: ``list.append`` is atomic, so each call appends to its
        name's pending list and every ``_BATCH`` calls they are folded into the sketch
        under the lock (``_fold``). Memory stays bounded by ``_BATCH`` per name.
        """
        pending = self._pending.get(name)
        if pending is None:
            pending = self._pending_list(name)
        if failed:
            with self._lock:
                self._stats_of(name).errors += 1
        pending.append(duration)
        if len(pending) >= _BATCH:
            self._fold(name, pending)
        if self.trace and start >= 0:
            self._add_event(name, start, duration, failed, concurrent)

    def _pending_list(self, name: str) -> list[int]:
        """``name``'s list of durations not yet folded (kept for the life of this Timed)."""
        with self._lock:
            return self._pending.setdefault(name, [])

    def _stats_of(self, name: str) -> _Stats:
        """``name``'s sketch (call with the lock held)."""
        stats = self._stats.get(name)
        if stats is None:
            stats = self._stats[name] = _Stats()
        return stats

    def _fold(self, name: str, pending: list[int]) -> None:
        """Move ``pending`` durations into ``name``'s sketch.

        Copying and then deleting exactly the copied prefix (each one atomic) keeps a
        duration another thread appends meanwhile for the next fold.
        """
        with self._lock:
            durations = pending[:]
            del pending[: len(durations)]
            self._stats_of(name).add_many(durations)

    def _fold_all(self) -> None:
        with self._lock:
            for name, pending in list(self._pending.items()):
                self._fold(name, pending)

    def _add_event(
        self, name: str, start: int, duration: int, failed: bool, concurrent: bool = False
    ) -> None:
        with self._lock:
            if len(self._events) < self.max_events:
                self._events.append((name, start, duration, _native_id(), failed, concurrent))
            else:
                self.dropped_events += 1

    def _failed(self, jp: JoinPoint) -> None:
        """The timing itself failed (called in an ``except`` block): log or re-raise."""
        if self.errors != "log":
            raise  # the failure our caller is handling
        log_own_failure(self, jp)

    # -- results ----------------------------------------------------------------------

    def summary(self) -> Summary:
        """One row per join point, largest total time first; ``print()`` it for a table."""
        with self._lock:
            self._fold_all()
            rows = [_row(name, stats) for name, stats in self._stats.items() if stats.count]
        rows.sort(key=lambda row: row.total_s, reverse=True)
        return Summary(rows)

    def reset(self) -> None:
        """Forget every timing and trace event (a call in progress may still be counted)."""
        with self._lock:
            for pending in self._pending.values():
                del pending[:]  # emptied in place: layers hold on to these lists
            self._stats = {}
            self._events.clear()
            self.dropped_events = 0

    def export_chrome_trace(self, path: str | os.PathLike[str]) -> Path:
        """Write the recorded calls as Trace Event Format JSON, atomically; return the path.

        Complete events (``ph: 'X'``) with ``ts``/``dur`` in microseconds from one origin
        per process (so traces of several ``Timed`` merge), the process id and native
        thread ids; nested calls nest. A coroutine's call is a pair of async events
        (``ph: 'b'`` / ``'e'`` with an ``id`` of its own): coroutines on one thread overlap
        without nesting, which complete events on one thread must not. Needs
        ``trace=True``, else the file has no events.
        """
        with self._lock:
            events = sorted(self._events, key=lambda e: (e[1], -e[2]))
            dropped = self.dropped_events
        pid = os.getpid()
        trace: list[dict[str, Any]] = []
        for call, (name, start, duration, tid, failed, concurrent) in enumerate(events):
            ts, dur = (start - _ORIGIN) / 1000, duration / 1000
            if concurrent:  # ids unique across Timed instances too, so traces merge
                trace += _async_events(name, ts, dur, pid, tid, failed, f"{id(self):x}.{call}")
            else:
                trace.append(_trace_event(name, ts, dur, pid, tid, failed))
        document = {
            "traceEvents": trace,
            "displayTimeUnit": "ms",
            "otherData": {"producer": "aspecthook.Timed", "dropped_events": dropped},
        }
        target = Path(path)
        _write_atomically(target, json.dumps(document))
        return target


def _row(name: str, stats: _Stats) -> TimingRow:
    p50, p95, p99 = stats.quantiles((0.5, 0.95, 0.99))
    return TimingRow(
        name=name,
        count=stats.count,
        errors=stats.errors,
        total_s=stats.total / 1e9,
        mean_s=stats.total / stats.count / 1e9,
        min_s=stats.min / 1e9,
        p50_s=p50 / 1e9,
        p95_s=p95 / 1e9,
        p99_s=p99 / 1e9,
        max_s=stats.max / 1e9,
    )


def _trace_event(
    name: str, ts: float, dur: float, pid: int, tid: int, failed: bool
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "name": name,
        "cat": "aspecthook",
        "ph": "X",
        "ts": ts,
        "dur": dur,
        "pid": pid,
        "tid": tid,
    }
    if failed:
        event["args"] = {"error": True}
    return event


def _async_events(
    name: str, ts: float, dur: float, pid: int, tid: int, failed: bool, call: str
) -> list[dict[str, Any]]:
    """A coroutine's call as the begin and end of an async event, ``id`` its own."""
    begin: dict[str, Any] = {"name": name, "cat": "aspecthook", "ph": "b", "id": call}
    begin |= {"ts": ts, "pid": pid, "tid": tid}
    if failed:
        begin["args"] = {"error": True}
    end: dict[str, Any] = {"name": name, "cat": "aspecthook", "ph": "e", "id": call}
    end |= {"ts": ts + dur, "pid": pid, "tid": tid}
    return [begin, end]


def _write_atomically(target: Path, text: str) -> None:
    """Write ``text`` to a temp file next to ``target``, then ``os.replace`` it in.

    A reader never sees a half-written trace, and a crash leaves the old file intact.
    """
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _timed(
    timed: Timed, jp: JoinPoint, gen: Generator[Any, Any, Any], elapsed: int
) -> Generator[Any, Any, Any]:
    """``gen`` behind a timer (``_timed_generator``). A generator closed or dropped before
    it was ever iterated runs none of its code, so its call is recorded when it is
    collected (a ``weakref.finalize``); one that started records itself."""
    started = [False]
    wrapper = _timed_generator(timed, jp, gen, elapsed, started)
    finalizer = weakref.finalize(wrapper, _record_unstarted, timed, jp, elapsed, started)
    finalizer.atexit = False  # not after a summary printed at exit
    return wrapper


def _record_unstarted(timed: Timed, jp: JoinPoint, elapsed: int, started: list[bool]) -> None:
    if not started[0]:
        timed._record_safely(jp, -1, elapsed, False)


def _timed_generator(
    timed: Timed,
    jp: JoinPoint,
    gen: Generator[Any, Any, Any],
    elapsed: int,
    started: list[bool],
) -> Generator[Any, Any, Any]:
    """Delegate to ``gen`` exactly as ``yield from`` does, adding up the time inside it.

    ``yield from`` cannot be timed per resume, so this is its PEP 380 expansion with a
    clock around each ``send`` / ``throw`` / ``close``. The total is recorded once, when
    ``gen`` is exhausted, raises or is closed (also by garbage collection); with tracing,
    each resume is one event.
    """
    started[0] = True
    name = jp.name
    failed = False
    resume: Any = gen.send
    arg: Any = None
    try:
        while True:
            start = _clock()
            try:
                value = resume(arg)
            except StopIteration as stop:
                elapsed += _clock() - start
                return stop.value
            except BaseException:
                elapsed += _clock() - start
                raise
            took = _clock() - start
            elapsed += took
            if timed.trace:
                timed._add_event(name, start, took, False)
            try:
                arg = yield value
                resume = gen.send
            except GeneratorExit:
                start = _clock()
                try:
                    gen.close()
                finally:
                    elapsed += _clock() - start
                raise
            except BaseException as exc:
                resume, arg = gen.throw, exc
    except GeneratorExit:
        raise
    except BaseException:
        failed = True
        raise
    finally:
        timed._record_safely(jp, -1, elapsed, failed)
