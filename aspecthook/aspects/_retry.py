"""``Retry``: run a join point again when it raises, with exponential backoff and jitter.

Around advice, so each attempt re-runs the rest of the chain and the target through
``proceed()``. For an ``async`` join point the advice returns a coroutine that awaits each
attempt and sleeps with ``asyncio.sleep``; a synchronous one sleeps with ``time.sleep``
(both injectable, which is how the tests read the backoff sequence without waiting).
"""

from __future__ import annotations

import asyncio
import builtins
import inspect
import math
import random
import sys
import time
from collections.abc import Awaitable, Callable
from types import CoroutineType
from typing import Any

from .. import around
from .._aspect import Aspect, AspectOptions
from .._context import CallContext, Proceed
from .._log import log_safely
from .._typing import Unpack
from ..errors import InvalidOptionError
from ..registry import _import

__all__ = ["RETRY_ATTEMPT", "RETRY_GAVE_UP", "Retry"]


RETRY_ATTEMPT = "retry.attempt"
"""Logged (warning) after a failed attempt that will be retried, before the sleep."""
RETRY_GAVE_UP = "retry.gave_up"
"""Logged (warning) when the last attempt failed, before the exception propagates."""

GiveUp = Callable[[CallContext, BaseException], Any]

# Jitter's source: not the global ``random``, which a retry must not move (a seeded
# training run's data order would then depend on a transient error); the OS's randomness,
# so that processes forked from one parent do not draw alike. Module level: it has no
# state, and a Retry holding it could not be copied.
_JITTER = random.SystemRandom()

# What stops work rather than reports a failure: never retried, whatever ``on=`` says
# (``on=BaseException`` included), and refused when ``on=`` names one. Retrying them would
# keep a program running after Ctrl-C or ``sys.exit()``, or a task after its cancellation.
_STOPS = (KeyboardInterrupt, SystemExit, GeneratorExit, asyncio.CancelledError)

# Exception groups: builtins from Python 3.11; before, the backport that anyio and trio
# raise, where it is installed (else a Python 3.10 program has none to retry).
if sys.version_info >= (3, 11):
    _GROUPS: tuple[type[builtins.BaseExceptionGroup[Any]], ...] = (builtins.BaseExceptionGroup,)
else:  # pragma: no cover - Python 3.10
    try:
        from exceptiongroup import BaseExceptionGroup as _Backport

        _GROUPS = (_Backport,)
    except ImportError:
        _GROUPS = ()


class Retry(Aspect):
    """Retry the target when it raises one of ``on``: at most ``attempts`` calls in all.

    Before attempt ``i + 2`` it sleeps ``min(backoff * factor**i, max_backoff)``, scaled by
    a random factor in ``[1 - jitter, 1 + jitter]`` (drawn from the OS's randomness,
    ``random.SystemRandom``, never the global ``random``; ``jitter=0`` gives the exact
    sequence). Each retry is logged as ``retry.attempt`` (a log sink that fails does not
    stop it). When the last attempt fails, ``give_up(ctx, exc)`` is called and the last
    exception propagates unchanged (same object, same traceback); an exception not in
    ``on`` propagates at once, and one raised by ``give_up`` propagates instead of the last
    one (chained to it). ``KeyboardInterrupt``, ``SystemExit``, ``GeneratorExit`` and
    ``asyncio.CancelledError`` stop work, so they propagate at once even under
    ``on=BaseException``; ``on=`` naming one of them is refused.

    An exception group (``ExceptionGroup``, e.g. from an ``asyncio.TaskGroup``) is retried
    when every exception in it is one of ``on`` (as ``except*`` with those classes would
    handle all of it), or when the group itself is (``on=ExceptionGroup``, or the default
    ``on=Exception``); a group holding anything else, or anything that stops work, is
    not retried.

    For a generator function the retried call is the one that creates the generator, not
    its iteration. A synchronous callable that returns a coroutine (an async function
    behind a plain decorator) is retried as an async one: each attempt is awaited, and
    runs the advice inside Retry and the target again with the arguments Retry was given.
    """

    def __init__(
        self,
        attempts: int = 3,
        *,
        on: type[BaseException] | tuple[type[BaseException], ...] = (Exception,),
        backoff: float = 0.1,
        factor: float = 2.0,
        max_backoff: float | None = None,
        jitter: float = 0.1,
        give_up: GiveUp | None = None,
        sleep: Callable[[float], Any] = time.sleep,
        async_sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        **options: Unpack[AspectOptions],
    ) -> None:
        super().__init__(**options)  # pointcut, priority, name, errors, order_after/before
        if not (isinstance(attempts, int) and not isinstance(attempts, bool) and attempts >= 1):
            raise InvalidOptionError(
                f"attempts={attempts!r} is not a number of calls: give an int >= 1 "
                "(attempts=1 calls once and never retries)",
                option="attempts",
                value=attempts,
            )
        self.attempts = attempts
        self.on = _exception_types(on)
        self.backoff = _number("backoff", backoff, "seconds >= 0 before the first retry", 0.0)
        self.factor = _number("factor", factor, "a multiplier >= 1 per retry", 1.0)
        self.max_backoff = (
            None
            if max_backoff is None
            else _number("max_backoff", max_backoff, "seconds >= 0, or None for no cap", 0.0)
        )
        self.jitter = _number("jitter", jitter, "a fraction of the delay in [0, 1]", 0.0, 1.0)
        self.give_up: GiveUp | None = (
            None
            if give_up is None
            else _not_async(
                "give_up",
                _callable("give_up", give_up, "a function (ctx, exc)"),
                "give_up is called, never awaited (it would not run): give a plain function "
                "(ctx, exc)",
            )
        )
        self.sleep = _not_async(
            "sleep",
            _callable("sleep", sleep, "a function sleep(seconds)"),
            "sleep= must block, for synchronous join points; give it as async_sleep=, which "
            "async join points await",
        )
        self.async_sleep = _callable("async_sleep", async_sleep, "an async function (seconds)")

    def delay(self, retry: int) -> float:
        """Seconds to sleep before retry number ``retry`` (0 for the first retry)."""
        try:
            delay = self.backoff * self.factor**retry
        except OverflowError:  # thousands of retries: only the cap is meaningful
            delay = math.inf if self.backoff else 0.0
        if self.max_backoff is not None:
            delay = min(delay, self.max_backoff)
        if self.jitter:
            delay *= _JITTER.uniform(1.0 - self.jitter, 1.0 + self.jitter)
        return delay

    @around()
    def retry_call(self, ctx: CallContext, proceed: Proceed) -> Any:
        """Call ``proceed()`` until it returns, the exception is not retryable, or attempts
        run out."""
        # What every retry is given: the arguments as Retry got them. Copies, as advice
        # inside Retry may edit ctx.args / ctx.kwargs in place, which must not carry over
        # to the next attempt (the first attempt needs none: it runs with them as they are).
        args, kwargs = tuple(ctx._args), ctx.kwargs.copy()
        if ctx.joinpoint.is_async:
            return self._retry_async(ctx, proceed, args, kwargs)
        attempt = 1
        while True:
            try:
                if attempt > 1:
                    _start_again(ctx, args, kwargs)
                result = proceed()
            except BaseException as exc:
                if not self._retryable(exc):
                    raise
                if attempt >= self.attempts:
                    self._give_up(ctx, exc)
                    raise
                self.sleep(self._next_delay(ctx, exc, attempt))
            else:
                if type(result) is CoroutineType:
                    # An async function behind a plain decorator: the call that fails is
                    # the awaited one, so the retries are awaited too, after this advice
                    # has returned: through ``ctx.deferred``, which runs the rest of the
                    # chain from here with this call's arguments (a bare ``proceed()``
                    # then would start the chain at Retry again, a retry loop per retry).
                    _start_again(ctx, args, kwargs)  # what the deferred retries start from
                    deferred = ctx.deferred(proceed)
                    return self._retry_async(ctx, deferred, args, kwargs, result, attempt)
                return result
            attempt += 1

    async def _retry_async(
        self,
        ctx: CallContext,
        proceed: Proceed,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        first: Any = None,
        attempt: int = 1,
    ) -> Any:
        """Await the attempts; ``first`` is the coroutine of attempt ``attempt`` when a
        synchronous callable returned it (else attempt 1 is made here)."""
        while True:
            try:
                if first is not None:
                    awaited, first = first, None
                    return await awaited
                if attempt > 1:
                    _start_again(ctx, args, kwargs)
                return await proceed()
            except BaseException as exc:
                if not self._retryable(exc):
                    raise
                if attempt >= self.attempts:
                    self._give_up(ctx, exc)
                    raise
                await self._pause(self._next_delay(ctx, exc, attempt))
            attempt += 1

    def _retryable(self, exc: BaseException) -> bool:
        """Whether ``exc`` is one of ``on`` and stops no work; an exception group is when
        every exception in it (``except*`` would handle it whole) is, or when it is one
        of ``on`` itself and holds nothing that stops work."""
        if isinstance(exc, _GROUPS):
            return exc.subgroup(_STOPS) is None and exc.split(self.on)[1] is None
        return isinstance(exc, self.on) and not isinstance(exc, _STOPS)

    def _pause(self, delay: float) -> Awaitable[Any]:
        """``async_sleep(delay)``, checked to be something to await."""
        pause = self.async_sleep(delay)
        if inspect.isawaitable(pause):
            return pause
        raise InvalidOptionError(
            f"async_sleep={self.async_sleep!r} returned {pause!r}, not an awaitable: give an "
            "async function, e.g. async_sleep=asyncio.sleep (a blocking sleep would stop "
            "the event loop)",
            option="async_sleep",
            value=self.async_sleep,
        )

    def _next_delay(self, ctx: CallContext, exc: BaseException, attempt: int) -> float:
        delay = self.delay(attempt - 1)
        log_safely(
            "warning",
            RETRY_ATTEMPT,
            joinpoint=ctx.joinpoint.name,
            attempt=attempt,
            attempts=self.attempts,
            delay_s=round(delay, 6),
            error=_describe(exc),
        )
        return delay

    def _give_up(self, ctx: CallContext, exc: BaseException) -> None:
        log_safely(
            "warning",
            RETRY_GAVE_UP,
            joinpoint=ctx.joinpoint.name,
            attempts=self.attempts,
            error=_describe(exc),
        )
        if self.give_up is not None:
            self.give_up(ctx, exc)

    def __repr__(self) -> str:
        names = ", ".join(t.__name__ for t in self.on)
        return f"<Retry {self.name!r} attempts={self.attempts} on=({names})>"


def _describe(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:
        text = "<unprintable>"
    return f"{type(exc).__qualname__}: {text[:200]}" if text else type(exc).__qualname__


def _exception_types(on: object) -> tuple[type[BaseException], ...]:
    """``on=`` as a tuple of exception classes.

    Besides classes it takes names, so that a config file can say it: a builtin's name
    (``'ConnectionError'``) or a ``'package.module:Name'`` path; and a list as a tuple.
    """
    items = tuple(on) if isinstance(on, (tuple, list)) else (on,)
    types = tuple(_exception_named(t) if isinstance(t, str) else t for t in items)
    if types and all(isinstance(t, type) and issubclass(t, BaseException) for t in types):
        classes: tuple[type[BaseException], ...] = types  # type: ignore[assignment]  # just checked
        _refuse_stops(classes, on)
        return classes
    raise InvalidOptionError(
        f"on={on!r} is not an exception class or a tuple of them: give e.g. "
        "on=(ConnectionError, TimeoutError), or in a config on: [ConnectionError, "
        "'package.module:SomeError']",
        option="on",
        value=on,
    )


def _refuse_stops(classes: tuple[type[BaseException], ...], on: object) -> None:
    for cls in classes:
        if issubclass(cls, _STOPS):
            raise InvalidOptionError(
                f"on: {cls.__qualname__} is never retried: it stops the program or a task "
                "rather than reporting a failure; name the exception classes to retry instead "
                "(e.g. on=ConnectionError)",
                option="on",
                value=on,
            )


def _exception_named(name: str) -> object:
    """The class a builtin exception name or a ``'package.module:Name'`` path names."""
    if ":" not in name:
        found = getattr(builtins, name.strip(), None)
        if isinstance(found, type) and issubclass(found, BaseException):
            return found
        raise InvalidOptionError(
            f"on: {name!r} is not a builtin exception: name one (e.g. 'TimeoutError') or "
            "give the class's 'package.module:Name' path",
            option="on",
            value=name,
        )
    try:
        return _import(name)
    except (ImportError, AttributeError) as exc:
        raise InvalidOptionError(
            f"on: {name!r} cannot be imported ({exc}): check the 'package.module:Name' path",
            option="on",
            value=name,
        ) from exc


def _number(option: str, value: object, what: str, low: float, high: float = math.inf) -> float:
    if (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and low <= value <= high
    ):
        return float(value)
    raise InvalidOptionError(
        f"{option}={value!r} is out of range: give {option} as {what}",
        option=option,
        value=value,
    )


def _not_async(option: str, value: Any, what: str) -> Any:
    """``value`` as given, unless it is an async function, which ``Retry`` would call
    without awaiting: it would do nothing (and warn that it was never awaited)."""
    if inspect.iscoroutinefunction(value):
        raise InvalidOptionError(
            f"{option}={value!r} is an async function: {what}",
            option=option,
            value=value,
        )
    return value


def _callable(option: str, value: Any, what: str) -> Any:
    if callable(value):
        return value
    raise InvalidOptionError(
        f"{option}={value!r} is not callable: give {what}",
        option=option,
        value=value,
    )


def _start_again(ctx: CallContext, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Give the context fresh copies of the call's arguments for the next attempt.

    Set on the context rather than passed as ``proceed(*args, **kwargs)``: a call made
    with no arguments would pass none, and ``proceed()`` means "the context's arguments as
    they are now", edits of the attempt before included.
    """
    ctx._args, ctx.kwargs = list(args), kwargs.copy()
