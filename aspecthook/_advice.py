"""Advice: one hook function of one kind, its options, and how it is compiled for dispatch.

An ``Advice`` is also its own handle: ``.remove()`` unregisters it, and it is a context
manager. Options are checked at registration (``_advice_checks``), so mistakes surface
where they are made; ``compiled`` turns the function plus its filters into one plain
callable (``_advice_wrappers``) so that the dispatch loop only ever calls ``fn(ctx)``.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, Literal, ParamSpec, TypeAlias, TypeVar

from . import _tracking
from ._advice_checks import (
    _check_callable,
    _check_errors,
    _check_every,
    _check_name,
    _check_once,
    _check_order_self,
    _check_rank,
    _check_window,
    _names,
    check_signature,
    is_coroutine_function,
)
from ._advice_wrappers import (
    _Counters,
    _filter,
    _guard,
    _guard_around,
    _runner_required,
    current_rank,
    log_own_failure,
)
from ._context import is_runners_own
from ._handle import Handle
from ._pointcut import Pointcut
from ._priority import resolve_priority
from ._typing import Self
from .errors import InvalidOptionError

if TYPE_CHECKING:
    # Type checkers see defaults (PEP 696), so a bare ``Advice`` means
    # ``Advice[..., Any]``; at run time the parameters only make ``Advice[...]`` valid.
    from typing_extensions import ParamSpec as _ParamSpec
    from typing_extensions import TypeVar as _TypeVar

    P = _ParamSpec("P", default=...)
    R = _TypeVar("R", default=Any)
else:
    P = ParamSpec("P")
    R = TypeVar("R")

# ``current_rank`` and ``log_own_failure`` live with the compiled wrappers that use them;
# the aspects import ``log_own_failure`` from here, with the decorators it goes with.
__all__ = ["KINDS", "Advice", "AdviceKind", "OrderNames", "current_rank", "log_own_failure"]

AdviceKind = Literal["before", "after", "on_error", "around", "on"]
KINDS: tuple[AdviceKind, ...] = ("before", "after", "on_error", "around", "on")

#: ``order_after=`` / ``order_before=``: one aspect or advice name, or several (what
#: ``_advice_checks._names`` accepts).
OrderNames: TypeAlias = str | tuple[str, ...] | list[str] | set[str] | frozenset[str]


#: Set on an advice function that applies its own ``errors=`` policy to its own work (and
#: never around the target), so the generic per-call guard is not added around it.
GUARDED = "__aspecthook_guarded__"


def handles_own_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark ``fn`` as applying its aspect's ``errors=`` policy itself (see ``GUARDED``)."""
    setattr(fn, GUARDED, True)
    return fn


#: Set on around advice whose aspect can also run it as a *dispatch layer*: the value is
#: the name of the aspect's method ``(jp, inner, guard) -> layer`` (see ``_specialised``).
LAYER = "__aspecthook_layer__"


def runs_as_layer(factory: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark around advice as also offered by its aspect's method ``factory`` as a layer.

    A layer is the same advice written as a plain wrapper ``(wrapped, instance, args,
    kwargs) -> result``: when a join point's chain is nothing but such advice, dispatch
    runs the layers without building a ``CallContext`` (see ``_specialised._layered``). The
    advice must also handle its own errors (``handles_own_errors``): no guard can be
    put around a layer.
    """

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        setattr(fn, LAYER, factory)
        return handles_own_errors(fn)

    return mark


def _check_kind(kind: AdviceKind) -> AdviceKind:
    if kind not in KINDS:
        raise InvalidOptionError(
            f"unknown advice kind {kind!r}: use one of {', '.join(KINDS)}",
            option="kind",
            value=kind,
        )
    return kind


class Advice(Generic[P, R]):
    """One hook function attached to the join points a pointcut selects.

    Calling an ``Advice`` calls its function. ``remove()`` unregisters it (a no-op when it is
    not registered), and ``with advice:`` removes it at the end of the block. For type
    checkers it is generic in the function's parameters and result (``Advice[P, R]``), so a
    call is checked as a call of the function; a bare ``Advice`` is ``Advice[..., Any]``.

    The filters narrow one another in turn, per join point: ``every=`` counts the calls
    that ``rank=`` and ``when=`` let by, and ``once=True`` runs the advice on the first call
    all of them let by, so ``every=3, once=True`` runs on the 3rd call only.
    """

    def __init__(
        self,
        kind: AdviceKind,
        fn: Callable[P, R],
        pointcut: Pointcut | None,
        *,
        priority: object = 50,
        every: int | None = None,
        window: int | None = None,
        once: bool = False,
        when: Callable[[Any], bool] | None = None,
        rank: int | None = None,
        errors: str = "raise",
        name: str | None = None,
        order_after: OrderNames = (),
        order_before: OrderNames = (),
        aspect: object | None = None,
        aspect_name: str | None = None,
    ) -> None:
        self.kind: AdviceKind = _check_kind(kind)
        self.fn = fn
        self.pointcut = pointcut
        self.priority = resolve_priority(priority)
        self.every = _check_every(every)
        self.window = _check_window(window, self.every)
        self.once = _check_once(once)
        self.when = _check_callable("when", when)
        self.rank = _check_rank(rank)
        self.errors = _check_errors(errors)
        self.name: str = _check_name("name", name) or str(
            getattr(fn, "__name__", type(fn).__name__)
        )
        self.order_after = _names("order_after", order_after)
        self.order_before = _names("order_before", order_before)
        self.aspect = aspect
        self.aspect_name: str | None = _check_name("name", aspect_name)
        _check_order_self(self.name, self.aspect_name, self.order_after, self.order_before)
        self.is_async = is_coroutine_function(fn)
        self._init_state()
        check_signature(fn, kind, self.describe_target())

    def _init_state(self) -> None:
        """What the advice keeps as it is registered, compiled and run: empty at first."""
        self.seq = -1
        self.failures = 0
        self._handle: Handle | None = None
        self.points: weakref.WeakSet[Any] = weakref.WeakSet()
        # Compiled callables per join point (weakly keyed: advice never keeps a join point,
        # and so its target, alive) and per event name.
        self._compiled: weakref.WeakKeyDictionary[Any, Callable[..., Any]] = (
            weakref.WeakKeyDictionary()
        )
        self._compiled_events: dict[str, Callable[..., Any]] = {}
        # Filter state (``every=`` / ``once=`` counters) per join point, kept when the
        # advice is compiled again (``recompile``), and call figures (``track_calls``).
        self._counters: weakref.WeakKeyDictionary[Any, _Counters] = weakref.WeakKeyDictionary()
        self._counters_events: dict[str, _Counters] = {}
        self._stats: weakref.WeakKeyDictionary[Any, _tracking.CallStats] = (
            weakref.WeakKeyDictionary()
        )

    # -- being its own handle ---------------------------------------------------------

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def remove(self) -> None:
        """Unregister this advice; removing twice, or an unregistered advice, does nothing."""
        handle = self._handle
        if handle is not None:
            handle.remove()

    @property
    def active(self) -> bool:
        """Whether the advice is registered now."""
        return self._handle is not None and self._handle.active

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    # -- introspection ----------------------------------------------------------------

    @property
    def labels(self) -> frozenset[str]:
        """Names that ``order_after`` / ``order_before`` of other advice may refer to."""
        if self.aspect_name:
            return frozenset((self.name, self.aspect_name))
        return frozenset((self.name,))

    @property
    def location(self) -> str:
        """``file:line`` where the advice function is defined."""
        return location_of(self.fn)

    @property
    def filters(self) -> str:
        """The call filters as text, e.g. ``'every=10, rank=0'``."""
        parts = []
        if self.every:
            parts.append(f"every={self.every}")
        if self.window > 1:
            parts.append(f"window={self.window}")
        if self.once:
            parts.append("once")
        if self.when is not None:
            parts.append(f"when={getattr(self.when, '__name__', 'fn')}")
        if self.rank is not None:
            parts.append(f"rank={self.rank}")
        if self.errors != "raise":
            parts.append(f"errors={self.errors}")
        return ", ".join(parts)

    def describe_target(self) -> str:
        return repr(self.pointcut) if self.pointcut is not None else "its weave target"

    def __repr__(self) -> str:
        owner = f" of {self.aspect_name}" if self.aspect_name else ""
        return f"<Advice {self.kind} {self.name}{owner} -> {self.describe_target()}>"

    # -- compilation ------------------------------------------------------------------

    def compiled(self, key: object) -> Callable[..., Any]:
        """The callable that dispatch runs for this advice at ``key`` (a join point/event).

        Filters keep their counters per key, so ``every=10`` counts the calls of each join
        point separately (a join point with a counter numbers its calls itself, see
        ``JoinPoint.counter``); the compiled callable is cached so a chain rebuild keeps them.
        """
        if isinstance(key, str):
            cache: Any = self._compiled_events
            if not (self.every or self.once):
                # Only every=/once= keep state per event name; the callable is otherwise
                # the same for every name, so one is kept, not one per name ever sent.
                key = ""
        else:
            cache = self._compiled
        fn = cache.get(key)
        if fn is None:
            fn = cache[key] = self._compile(key)
        return fn  # type: ignore[no-any-return]

    def inlined_every(self, key: object) -> tuple[int, int, Callable[..., Any]] | None:
        """``(every, window, fn)`` when ``every=`` (with its ``window=``) is this advice's
        only filter at ``key``, a join point whose calls are numbered
        (``JoinPoint.counter``): a generated dispatcher then tests the call's number itself
        and calls ``fn`` (the advice with its ``errors=`` policy, without the filter) only
        on the calls that pass."""
        if not self.every or self.once or self.when is not None or self.rank is not None:
            return None
        if getattr(key, "counter", None) is None or self.kind == "around":
            return None
        if self.checks_runner(key):
            return None  # the check comes first, on every call (see ``_compile``)
        return self.every, self.window, self._tracked(key, self._guarded(self.fn))

    def layer_factory(self, key: object) -> Callable[..., Any] | None:
        """The aspect's layer factory for this around advice at join point ``key``
        (``runs_as_layer``), or ``None`` when it has none, or a filter
        (``every``/``once``/``when``/``rank``) or the runner check must run per call."""
        name = getattr(self.fn, LAYER, None)
        if name is None or self.kind != "around" or self.is_async or _tracking.is_tracking():
            return None  # a layer has no compiled advice to count calls in
        if self.checks_runner(key):
            return None
        if self.every or self.once or self.when is not None or self.rank is not None:
            return None
        factory: Callable[..., Any] | None = getattr(getattr(self.fn, "__self__", None), name, None)
        return factory

    def share_filters(self, repeat: Advice, key: object) -> None:
        """Share this advice's filter state at join point ``key`` with ``repeat``: another
        registration of the same aspect method, left out of the chain there in favour of
        this one. Whichever of the two has counted the calls there so far lends its count,
        so the one that runs counts on from it: ``once=True`` stays once and ``every=``
        keeps its beat when the other is removed."""
        if not (self.every or self.once) or isinstance(key, str):
            return
        mine, theirs = self._counters.get(key), repeat._counters.get(key)
        counters = mine or theirs or _Counters()
        for advice, had in ((self, mine), (repeat, theirs)):
            if had is not counters:
                advice._counters[key] = counters
                advice.recompile(key)

    def forget(self, key: object) -> None:
        """Drop everything kept for ``key``: the advice left that join point (or event)."""
        self.recompile(key)
        counters: Any = self._counters_events if isinstance(key, str) else self._counters
        counters.pop(key, None)
        if not isinstance(key, str):
            self._stats.pop(key, None)

    def recompile(self, key: object) -> None:
        """Compile again at ``key`` on next use, keeping its filter state; with call
        tracking just turned on, its figures start from zero."""
        cache: Any = self._compiled_events if isinstance(key, str) else self._compiled
        cache.pop(key, None)
        if _tracking.starts_fresh() and not isinstance(key, str):
            self._stats.pop(key, None)

    def stats(self, key: object) -> _tracking.CallStats | None:
        """Calls and time at join point ``key`` while tracked (``track_calls``), or None."""
        return self._stats.get(key)

    def _compile(self, key: object) -> Callable[..., Any]:
        fn = self._tracked(key, self._guarded(self.fn))
        if self.every or self.once or self.when is not None or self.rank is not None:
            numbered = getattr(key, "counter", None) is not None
            cache: Any = self._counters_events if isinstance(key, str) else self._counters
            counters = cache.get(key)
            if counters is None:
                counters = cache[key] = _Counters()
            fn = _filter(self, fn, counters, numbered=numbered)
        if self.checks_runner(key):
            fn = _runner_required(self, fn)
        return fn

    def checks_runner(self, key: object) -> bool:
        """Whether, compiled at join point ``key``, this advice runs behind the check that
        the call has a runner (``_runner_required``): advice of an aspect that
        ``needs_runner``, at a join point that is not a runner's own. A runner's own join
        points always have their runner, so there the advice runs as it is, at no cost."""
        if isinstance(key, str) or not getattr(self.aspect, "needs_runner", False):
            return False  # an event is not a call: ``Event`` has no runner to check
        return not is_runners_own(key)

    def _tracked(self, key: object, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` counted and timed at join point ``key`` while calls are tracked."""
        if isinstance(key, str) or not _tracking.is_tracking():
            return fn  # events are not join points: describe() has no row for them
        stats = self._stats.get(key)
        if stats is None:
            stats = self._stats[key] = _tracking.CallStats()
        around = self.kind == "around"
        return _tracking.track(stats, fn, around=around, is_async=self.is_async)  # type: ignore[no-any-return]

    def _guarded(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        if self.errors == "log" and not getattr(fn, GUARDED, False):
            return _guard_around(self, fn) if self.kind == "around" else _guard(self, fn)
        return fn


def location_of(fn: object) -> str:
    fn = inspect.unwrap(getattr(fn, "__func__", fn))  # type: ignore[arg-type]
    code = getattr(fn, "__code__", None)
    if code is None:
        return "?"
    return f"{code.co_filename}:{code.co_firstlineno}"
