"""Call counts and time spent per advice, for ``describe()``: off until ``track_calls()``.

Off, advice is compiled as it always is and nothing is counted: the dispatch path costs
nothing more. On, the advice at every join point is compiled inside a wrapper that counts
the calls that ran it (after its filters) and adds up the time they took, and
``describe()`` fills each row's ``calls`` and ``time_s``. Switching recompiles every
join point's chain, keeping the advice's filter state (``every=`` counts, ``once=``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import CoroutineType, TracebackType
from typing import Any

__all__ = ["CallStats", "is_tracking", "starts_fresh", "track", "track_calls"]

_clock = time.perf_counter_ns


class _Switch:
    on = False
    fresh = False  # while recompiling for a turn on: figures start from zero


_SWITCH = _Switch()


class CallStats:
    """The calls of one advice at one join point since tracking was turned on."""

    __slots__ = ("calls", "ns")

    def __init__(self) -> None:
        self.calls = 0
        self.ns = 0

    @property
    def time_s(self) -> float:
        return self.ns / 1e9


def is_tracking() -> bool:
    """Whether advice compiled now is tracked."""
    return _SWITCH.on


def starts_fresh() -> bool:
    """Whether the advice being recompiled now starts its figures from zero."""
    return _SWITCH.fresh


class track_calls:  # a function to the user; a class so that it also works with `with`
    """Turn call tracking on (or off with ``False``) for every join point, now.

    Turning it on starts every count at zero; turning it off keeps the figures for
    ``describe()`` until it is turned on again. Also a context manager that puts the
    previous setting back at the end of the block (going on counting where it was, when
    that setting was on)::

        with aspecthook.track_calls():
            train()
        print(aspecthook.describe())   # calls and time per advice

    Tracked advice costs two clock readings and a few stores per call; untracked advice
    costs nothing. Counts are exact within one thread; calls racing in several threads
    may lose an increment.
    """

    def __init__(self, enabled: bool = True) -> None:
        if not isinstance(enabled, bool):
            raise TypeError(
                f"track_calls(enabled={enabled!r}): give True to count calls or False to stop"
            )
        from ._registry import LOCK

        with LOCK:
            self._previous = _SWITCH.on
            _set(enabled)

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        from ._registry import LOCK

        with LOCK:
            _set(self._previous, fresh=False)


def _set(enabled: bool, *, fresh: bool = True) -> None:
    from ._registry import REGISTRY  # not at import: the registry imports advice, and this

    if enabled != _SWITCH.on:
        _SWITCH.on = enabled
        _SWITCH.fresh = enabled and fresh
        try:
            REGISTRY.recompile()
        finally:
            _SWITCH.fresh = False


def track(stats: CallStats, fn: Callable[..., Any], *, around: bool, is_async: bool) -> Any:
    """``fn`` (compiled advice) counted and timed into ``stats``. Around advice is timed
    without the time spent in the ``proceed`` it is given (the target and inner advice).

    A plain function that returns a coroutine (``Timed``, ``Logged``, ``Retry`` at an
    async join point, or at an async function behind a plain decorator) does its work when
    that coroutine is awaited: the coroutine is timed too, and a coroutine from
    ``proceed`` counts as time inside ``proceed``."""
    if around:
        return _tracked_around_async(stats, fn) if is_async else _tracked_around(stats, fn)
    return _tracked_async(stats, fn) if is_async else _tracked(stats, fn)


# One maker per kind of advice: each returned wrapper runs on every call of its advice, so
# it holds ``stats`` and ``fn`` as closure cells and decides nothing at call time.


def _tracked_around_async(stats: CallStats, fn: Callable[..., Any]) -> Any:
    async def tracked_around_async(ctx: Any, proceed: Callable[..., Any]) -> Any:
        inner = 0

        async def timed(*args: Any, **kwargs: Any) -> Any:
            nonlocal inner
            start = _clock()
            try:
                return await proceed(*args, **kwargs)
            finally:
                inner += _clock() - start

        start = _clock()
        try:
            return await fn(ctx, timed)
        finally:
            stats.calls += 1
            stats.ns += _clock() - start - inner

    return tracked_around_async


def _tracked_around(stats: CallStats, fn: Callable[..., Any]) -> Any:
    def tracked_around(ctx: Any, proceed: Callable[..., Any]) -> Any:
        inner = 0

        def timed(*args: Any, **kwargs: Any) -> Any:
            nonlocal inner
            start = _clock()
            try:
                result = proceed(*args, **kwargs)
            finally:
                inner += _clock() - start
            if type(result) is not CoroutineType:
                return result

            # proceed's coroutine (an async join point, or an async function behind a
            # plain decorator): the time it is awaited is not the advice's either.
            async def awaited() -> Any:
                nonlocal inner
                start = _clock()
                try:
                    return await result
                finally:
                    inner += _clock() - start

            return awaited()

        start = _clock()
        try:
            result = fn(ctx, timed)
        finally:
            stats.calls += 1
            stats.ns += _clock() - start - inner
        if type(result) is not CoroutineType:
            return result

        # A plain advice's coroutine (Timed, Retry and the like at an async join point):
        # its time when awaited is the advice's own, less what ``timed`` took meanwhile.
        async def finished() -> Any:
            start, before = _clock(), inner
            try:
                return await result
            finally:
                stats.ns += _clock() - start - (inner - before)

        return finished()

    return tracked_around


def _tracked_async(stats: CallStats, fn: Callable[..., Any]) -> Any:
    async def tracked_async(ctx: Any) -> Any:
        start = _clock()
        try:
            return await fn(ctx)
        finally:
            stats.calls += 1
            stats.ns += _clock() - start

    return tracked_async


def _tracked(stats: CallStats, fn: Callable[..., Any]) -> Any:
    def tracked(ctx: Any) -> Any:
        start = _clock()
        try:
            result = fn(ctx)
        finally:
            stats.calls += 1
            stats.ns += _clock() - start
        if type(result) is not CoroutineType or not ctx.joinpoint.is_async:
            return result  # (a sync join point drops it: a wrapper would only add a warning)

        async def finished() -> Any:  # awaited by the async dispatcher: the advice's work
            start = _clock()
            try:
                return await result
            finally:
                stats.ns += _clock() - start

        return finished()

    return tracked
