"""``Timed``: per-join-point call timings in bounded memory, a summary table, a trace file.

Durations go into a DDSketch-style log-bucket quantile sketch (``QuantileSketch``):
quantiles are within 1% relative error and memory is one counter per occupied bucket,
whatever the number of calls. With ``trace=True`` every call is also kept (up to
``max_events``) as a complete event for ``export_chrome_trace``, which Perfetto and
chrome://tracing open.

The sketch lives in ``_sketch`` (re-exported here), the trace file's format in ``_trace``.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import threading
import time
import weakref
from collections.abc import Callable, Generator
from dataclasses import asdict, dataclass
from pathlib import Path
from types import CoroutineType, GeneratorType
from typing import Any

from .. import around
from .._advice import log_own_failure, runs_as_layer
from .._aspect import Aspect, AspectOptions
from .._context import CallContext, Proceed
from .._dispatch import after_error_advice, error_advice_follows
from .._fork import OwnsLock
from .._joinpoint import JoinPoint
from .._priority import Priority, PriorityLike
from .._rich import import_rich, render
from .._typing import Unpack
from .._units import format_seconds
from ..errors import InvalidOptionError
from ._sketch import RELATIVE_ACCURACY, QuantileSketch, _Stats
from ._trace import THIS_THREAD, chrome_trace, note_thread, write_atomically

__all__ = ["RELATIVE_ACCURACY", "QuantileSketch", "Summary", "Timed", "TimingRow"]

# Module-level aliases: one global lookup on the hot path instead of a module attribute.
# Integer nanoseconds. perf_counter() (float seconds) reads faster here, but a double of the
# seconds since boot has a resolution of ~2 ns after 180 days of uptime and ~15 ns after
# 1,000: too coarse for calls of a few hundred ns. perf_counter_ns keeps 1 ns.
_clock = time.perf_counter_ns

#: Calls buffered per join point before they are folded into its sketch: folding sorts
#: the batch and then works per occupied bucket, so a larger batch costs less per call
#: (durations of one join point fill few buckets); 1,024 durations are ~40 KB.
_BATCH = 1024


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
        import_rich()  # first, so that importing it leaves ``random`` as it was
        try:
            import rich.console  # noqa: F401
        except ImportError:
            return self._plain()
        return render(self.__rich__(), 140)

    def __rich__(self) -> Any:
        import_rich()
        from rich.table import Table
        from rich.text import Text

        table = Table(title="aspecthook: timings (quantiles within 1%)")
        # Nothing wraps or is cut: a long name widens the table (``_rich.render``).
        table.add_column("join point", no_wrap=True)
        for column in ("calls", "errors", "total", "mean", "min", "p50", "p95", "p99", "max"):
            table.add_column(column, justify="right", no_wrap=True)
        for row in self:
            # Text, not markup: a name such as 'eval[val]' is shown as it is.
            table.add_row(Text(row.name), str(row.count), str(row.errors), *_times(row))
        return table

    def _plain(self) -> str:
        width = max([40, *(len(row.name) for row in self)])  # names whole, columns aligned
        head = f"{'join point':{width}} {'calls':>8} {'errors':>6} " + " ".join(
            f"{c:>9}" for c in ("total", "mean", "min", "p50", "p95", "p99", "max")
        )
        lines = [head]
        for row in self:
            times = " ".join(f"{t:>9}" for t in _times(row))
            lines.append(f"{row.name:{width}} {row.count:>8} {row.errors:>6} {times}")
        return "\n".join(lines)


def _times(row: TimingRow) -> list[str]:
    values = (row.total_s, row.mean_s, row.min_s, row.p50_s, row.p95_s, row.p99_s, row.max_s)
    return [format_seconds(v) for v in values]


class Timed(Aspect, OwnsLock):
    """Time every call of the join points it advises: count, errors, total, quantiles.

    ``weave(target, Timed())`` times a callable; ``register(Timed(pointcut='train_*'))``
    times named join points. Async join points are timed until the coroutine completes,
    and so is a coroutine a synchronous callable returns (an async function behind a
    plain decorator); generator functions by the time spent inside the generator until
    it is exhausted or closed (a generator returned by another callable, which may be
    shared, is not iterated through a timer: the call alone is timed). Calls that raise
    are timed too; ``errors`` counts those that raised an ``Exception`` (a cancelled or
    interrupted call is a call, not an error, as in ``Counted``). A call whose exception
    error advice recovers (``ctx.recover``) returned a value to its caller, and is no
    error when ``Timed`` is the outermost around advice at a synchronous join point (its
    place by default; ``Logged`` outside it is no obstacle); inside other around advice,
    or at an async join point, it counts what came out of ``proceed()``
    (``docs/known-issues.md``). Quantiles come from a
    ``QuantileSketch`` (1% relative error, bounded memory). ``trace=True`` also keeps up to
    ``max_events`` calls for ``export_chrome_trace``; later ones are counted in
    ``dropped_events``.
    Outermost around advice (``HIGHEST``) with ``errors='log'``: a failure in the timing
    is logged, never raised into the timed call. A copy (``copy.copy`` or
    ``copy.deepcopy``) starts from the timings and trace events as they are and records
    apart from this one; so does one unpickled (``multiprocessing`` hands an aspect to a
    spawned worker so), whose summary then counts the calls timed before it was pickled.
    """

    priority: PriorityLike = Priority.HIGHEST
    errors: str = "log"

    def __init__(
        self,
        *,
        trace: bool = False,
        max_events: int = 100_000,
        **options: Unpack[AspectOptions],
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
        self._own_lock()  # a fork while another thread records: not held
        self._stats: dict[str, _Stats] = {}
        # Durations (ns) not yet folded into the sketch, per name.
        self._pending: dict[str, list[int]] = {}
        self._events: list[tuple[str, int, int, int, bool, bool]] = []

    def _reset_locks(self) -> None:
        """A new lock (also in a forked child, where another thread may have held it)."""
        # Reentrant: a signal handler or a garbage-collected generator may record while
        # this thread holds it; a plain Lock would deadlock there.
        self._lock = threading.RLock()

    def _copied_data(self, memo: dict[int, Any] | None) -> dict[str, Any]:
        """The timings and trace events, for a copy that records apart (``OwnsLock``):
        the pending lists too, which this instance's dispatch layers append to."""
        return {
            "_stats": {name: copy.deepcopy(stats) for name, stats in self._stats.items()},
            "_pending": {name: list(pending) for name, pending in self._pending.items()},
            "_events": list(self._events),
        }

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
        except BaseException as exc:
            elapsed = _clock() - start
            if isinstance(exc, Exception) and error_advice_follows(ctx):
                # An error only if no error advice recovers it (see the class docstring).
                settle = functools.partial(self._record_failure, jp, start, elapsed)
                after_error_advice(ctx, settle)
            else:
                self._record_safely(jp, start, elapsed, isinstance(exc, Exception))
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
            except BaseException as exc:
                self._record_safely(jp, start, clock() - start, isinstance(exc, Exception))
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
        except BaseException as exc:
            failed = isinstance(exc, Exception)
            self._record_safely(jp, start, _clock() - start, failed, concurrent=True)
            raise
        self._record_safely(jp, start, _clock() - start, False, concurrent=True)
        return result

    async def _time_coroutine(self, jp: JoinPoint, coroutine: Any, start: int) -> Any:
        """A synchronous callable's coroutine (an async function behind a plain decorator),
        timed from the call until it completes, as an async join point's call is."""
        try:
            result = await coroutine
        except BaseException as exc:
            failed = isinstance(exc, Exception)
            self._record_safely(jp, start, _clock() - start, failed, concurrent=True)
            raise
        self._record_safely(jp, start, _clock() - start, False, concurrent=True)
        return result

    def _record_failure(self, jp: JoinPoint, start: int, elapsed: int, recovered: bool) -> None:
        """Record a call that raised, once its error advice has run: an error unless one
        recovered it."""
        self._record_safely(jp, start, elapsed, not recovered)

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
        tid = THIS_THREAD.tid
        if tid is None:  # the thread's first trace event: its id, and its name noted
            tid = note_thread()
        with self._lock:
            if len(self._events) < self.max_events:
                self._events.append((name, start, duration, tid, failed, concurrent))
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
        without nesting, which complete events on one thread must not. Metadata events
        name the process and each thread: one still alive by its name now, one that has
        ended by the name it had at its first event. Needs ``trace=True``, else the file
        has no events.
        """
        with self._lock:
            events = sorted(self._events, key=lambda e: (e[1], -e[2]))
            dropped = self.dropped_events
        target = Path(path)
        write_atomically(target, json.dumps(chrome_trace(events, dropped, id(self))))
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
    each resume is one event, the last one (which exhausts, raises or closes) included.
    """
    # Long on purpose: one generator function is the only way to stand in for
    # ``yield from``, and each resume runs through this loop, so nothing is a helper.
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
                elapsed += _resumed(timed, name, start, False)
                return stop.value
            except BaseException as exc:
                elapsed += _resumed(timed, name, start, isinstance(exc, Exception))
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
                except BaseException as exc:
                    elapsed += _resumed(timed, name, start, isinstance(exc, Exception))
                    raise
                elapsed += _resumed(timed, name, start, False)
                raise
            except BaseException as exc:
                resume, arg = gen.throw, exc
    except GeneratorExit:
        raise
    except Exception:
        failed = True
        raise
    finally:
        timed._record_safely(jp, -1, elapsed, failed)


def _resumed(timed: Timed, name: str, start: int, failed: bool) -> int:
    """The time since ``start`` of a generator's last resume (one that ended it), kept as
    a trace event as every resume is."""
    took = _clock() - start
    if timed.trace:
        timed._add_event(name, start, took, failed)
    return took
