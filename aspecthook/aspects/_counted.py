"""``Counted``: how many times each join point was called, and how many of those raised."""

from __future__ import annotations

import functools
import threading
from collections import Counter
from typing import Any

from .. import before, on_error
from .._aspect import Aspect, AspectOptions
from .._context import CallContext
from .._dispatch import after_error_advice
from .._fork import OwnsLock
from .._priority import Priority, PriorityLike
from .._typing import Unpack

__all__ = ["Counted"]


class Counted(Aspect, OwnsLock):
    """Count calls and exceptions per join point name: ``counts`` and ``error_counts``.

    ``weave(target, Counted())`` counts a callable; ``register(Counted(pointcut='*'))``
    named join points. A call is counted when it starts (``HIGHEST`` before advice), an
    exception when the call raises it (``on_error`` advice) and no error advice recovers
    it (``ctx.recover``: the caller got a value), whatever the order of the error advice;
    the exception propagates unchanged.

    What ``error_counts`` leaves out, because on_error advice never sees it:

    - ``BaseException``s that are not ``Exception``s: a cancelled task or an expired
      ``asyncio.timeout`` (``asyncio.CancelledError``), ``KeyboardInterrupt``,
      ``SystemExit``. Such a call counts in ``counts`` only: it was stopped, it did not fail.
    - Exceptions raised later, after the call returned: while iterating a returned
      generator, or when awaiting the coroutine a synchronous callable returns (an async
      function behind a plain decorator; an ``async def`` join point's failures do count).
      Seeing those would take advice after every call, which every ordinary call would
      pay for; ``Timed`` counts them.

    A copy (``copy.copy`` or ``copy.deepcopy``) starts from the counts as they are and
    counts apart from this one; so does one unpickled (``multiprocessing`` hands an
    aspect to a spawned worker so).
    """

    priority: PriorityLike = Priority.HIGHEST
    errors: str = "log"

    def __init__(
        self,
        **options: Unpack[AspectOptions],
    ) -> None:
        super().__init__(**options)  # pointcut, priority, name, errors, order_after/before
        self._own_lock()  # a fork while another thread counts: not held
        self._calls: Counter[str] = Counter()
        self._errors: Counter[str] = Counter()

    def _reset_locks(self) -> None:
        """A new lock (also in a forked child, where another thread may have held it)."""
        self._lock = threading.Lock()

    def _copied_data(self, memo: dict[int, Any] | None) -> dict[str, Any]:
        """The counts, for a copy that counts apart (``OwnsLock``)."""
        return {"_calls": Counter(self._calls), "_errors": Counter(self._errors)}

    @before()
    def count_call(self, ctx: CallContext) -> None:
        """Count one call of this join point."""
        with self._lock:
            self._calls[ctx.joinpoint.name] += 1

    @on_error()
    def count_error(self, ctx: CallContext) -> None:
        """Count one exception (an ``Exception``) raised by a call of this join point,
        once the call's error advice has run, unless one recovered (the caller got a
        value): whatever the order of the error advice."""
        after_error_advice(ctx, functools.partial(self._count_error, ctx.joinpoint.name))

    def _count_error(self, name: str, recovered: bool) -> None:
        if not recovered:
            with self._lock:
                self._errors[name] += 1

    @property
    def counts(self) -> Counter[str]:
        """Calls per join point name (a snapshot; a name never called reads 0)."""
        with self._lock:
            return Counter(self._calls)

    @property
    def error_counts(self) -> Counter[str]:
        """Exceptions raised per join point name (a snapshot; 0 for none); cancellations
        and other ``BaseException``s are not counted (see the class docstring)."""
        with self._lock:
            return Counter(self._errors)

    def reset(self) -> None:
        """Set every count back to zero."""
        with self._lock:
            self._calls.clear()
            self._errors.clear()
