"""Advice: one hook function of one kind, its options, and how it is compiled for dispatch.

An ``Advice`` is also its own handle: ``.remove()`` unregisters it, and it is a context
manager. Options are checked here, at registration, so mistakes surface where they are
made; ``compile`` turns the function plus its filters into one plain callable so that the
dispatch loop only ever calls ``fn(ctx)``.
"""

from __future__ import annotations

import inspect
import itertools
import os
import sys
import types
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from . import _tracking
from ._pointcut import Pointcut
from ._priority import resolve_priority
from .errors import AdviceSignatureError, InvalidOptionError

if TYPE_CHECKING:
    from ._handle import Handle

__all__ = ["KINDS", "Advice", "AdviceKind", "current_rank"]

AdviceKind = Literal["before", "after", "on_error", "around", "on"]
KINDS: tuple[AdviceKind, ...] = ("before", "after", "on_error", "around", "on")
_EXPECTED = {
    "before": "(ctx)",
    "after": "(ctx)",
    "on_error": "(ctx)",
    "around": "(ctx, proceed)",
    "on": "(event)",
}
_ERRORS = ("raise", "log")


#: Set on an advice function that applies its own ``errors=`` policy to its own work (and
#: never around the target), so the generic per-call guard is not added around it.
GUARDED = "__aspecthook_guarded__"


def handles_own_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark ``fn`` as applying its aspect's ``errors=`` policy itself (see ``GUARDED``)."""
    setattr(fn, GUARDED, True)
    return fn


#: Set on around advice whose aspect can also run it as a *dispatch layer*: the value is
#: the name of the aspect's method ``(jp, inner, guard) -> layer`` (see ``_joinpoint``).
LAYER = "__aspecthook_layer__"


def runs_as_layer(factory: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark around advice as also offered by its aspect's method ``factory`` as a layer.

    A layer is the same advice written as a plain wrapper ``(wrapped, instance, args,
    kwargs) -> result``: when a join point's chain is nothing but such advice, dispatch
    runs the layers without building a ``CallContext`` (see ``_joinpoint._layered``). The
    advice must also handle its own errors (``handles_own_errors``): no guard can be
    put around a layer.
    """

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        setattr(fn, LAYER, factory)
        return handles_own_errors(fn)

    return mark


def current_rank() -> int:
    """This process's distributed rank: torch.distributed's when initialised, else ``$RANK``.

    torch is only consulted when the program already imported ``torch.distributed``.
    """
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    return int(os.environ.get("RANK", "0"))


class Advice:
    """One hook function attached to the join points a pointcut selects.

    Calling an ``Advice`` calls its function. ``remove()`` unregisters it (a no-op when it is
    not registered), and ``with advice:`` removes it at the end of the block.
    """

    def __init__(
        self,
        kind: AdviceKind,
        fn: Callable[..., Any],
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
        order_after: Iterable[str] = (),
        order_before: Iterable[str] = (),
        aspect: object | None = None,
        aspect_name: str | None = None,
    ) -> None:
        if kind not in KINDS:
            raise InvalidOptionError(
                f"unknown advice kind {kind!r}: use one of {', '.join(KINDS)}",
                option="kind",
                value=kind,
            )
        self.kind: AdviceKind = kind
        self.fn = fn
        self.pointcut = pointcut
        self.priority = resolve_priority(priority)
        self.every = _check_every(every)
        self.window = _check_window(window, self.every)
        self.once = bool(once)
        self.when = _check_callable("when", when)
        self.rank = _check_rank(rank)
        self.errors = _check_errors(errors)
        self.name: str = name or str(getattr(fn, "__name__", type(fn).__name__))
        self.order_after = _names("order_after", order_after)
        self.order_before = _names("order_before", order_before)
        self.aspect = aspect
        self.aspect_name: str | None = aspect_name
        self.is_async = inspect.iscoroutinefunction(fn)
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
        check_signature(fn, kind, self.describe_target())

    # -- being its own handle ---------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
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

    def __enter__(self) -> Advice:
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
        cache: Any = self._compiled_events if isinstance(key, str) else self._compiled
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
        return self.every, self.window, self._tracked(key, self._guarded(self.fn))

    def layer_factory(self) -> Callable[..., Any] | None:
        """The aspect's layer factory for this around advice (``runs_as_layer``), or
        ``None`` when it has none or a filter (``every``/``once``/``when``/``rank``) must
        run per call."""
        name = getattr(self.fn, LAYER, None)
        if name is None or self.kind != "around" or self.is_async or _tracking.is_tracking():
            return None  # a layer has no compiled advice to count calls in
        if self.every or self.once or self.when is not None or self.rank is not None:
            return None
        factory: Callable[..., Any] | None = getattr(getattr(self.fn, "__self__", None), name, None)
        return factory

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
        return fn

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


# -- option checks ---------------------------------------------------------------------


def _check_every(every: object) -> int | None:
    if every is None:
        return None
    if isinstance(every, int) and not isinstance(every, bool) and every >= 1:
        return every
    raise InvalidOptionError(
        f"every={every!r} is not a positive int: give every=n to run on every n-th call",
        option="every",
        value=every,
    )


def _check_window(window: object, every: int | None) -> int:
    if window is None:
        return 1
    if every is None:
        raise InvalidOptionError(
            f"window={window!r} needs every=n: it runs the advice on the `window` calls "
            "that end at every n-th call",
            option="window",
            value=window,
        )
    if isinstance(window, int) and not isinstance(window, bool) and 1 <= window <= every:
        return window
    raise InvalidOptionError(
        f"window={window!r} is not an int from 1 to every={every}: give the number of calls, "
        "ending at each n-th call, on which the advice runs",
        option="window",
        value=window,
    )


def _check_rank(rank: object) -> int | None:
    if rank is None:
        return None
    if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0:
        return rank
    raise InvalidOptionError(
        f"rank={rank!r} is not a process rank: give an int >= 0 (rank=0 for the main process)",
        option="rank",
        value=rank,
    )


def _check_errors(errors: object) -> str:
    if errors in _ERRORS:
        return str(errors)
    raise InvalidOptionError(
        f"errors={errors!r} is not a policy: use errors='raise' to propagate failures of the "
        "advice, or errors='log' to log them and let the call continue",
        option="errors",
        value=errors,
    )


def _check_callable(option: str, value: object) -> Any:
    if value is None or callable(value):
        return value
    raise InvalidOptionError(
        f"{option}={value!r} is not callable: give a function taking ctx and returning a bool",
        option=option,
        value=value,
    )


def _names(option: str, names: object) -> tuple[str, ...]:
    if isinstance(names, str):
        return (names,)
    result: tuple[object, ...] | None = None
    if isinstance(names, (tuple, list, set, frozenset)):
        result = tuple(names)
    if result is None or not all(isinstance(n, str) for n in result):
        raise InvalidOptionError(
            f"{option}={names!r} must be a name or a tuple of aspect/advice names",
            option=option,
            value=names,
        )
    return tuple(str(n) for n in result)


def check_signature(fn: Callable[..., Any], kind: AdviceKind, target: str) -> None:
    """Refuse, at registration, a function that cannot be called as its kind calls it."""
    if not callable(fn):
        raise AdviceSignatureError(
            f"{kind} advice for {target} must be callable, got {fn!r}",
            advice=repr(fn),
            signature="",
            expected=_EXPECTED[kind],
        )
    arity = 2 if kind == "around" else 1
    if _takes_positional(fn, arity):
        return
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins have no signature; let them through
        return
    try:
        signature.bind(*range(arity))
    except TypeError:
        name = getattr(fn, "__qualname__", repr(fn))
        expected = _EXPECTED[kind]
        raise AdviceSignatureError(
            f"{kind} advice {name}{signature} for {target} cannot be called as "
            f"{name}{expected}: define it as def {getattr(fn, '__name__', 'fn')}{expected}",
            advice=name,
            signature=str(signature),
            expected=expected,
        ) from None


def _takes_positional(fn: Any, arity: int) -> bool:
    """Whether a plain function or method surely accepts ``arity`` positional arguments.

    Read from the code object, because ``inspect.signature`` costs ~0.1 ms and a runner
    checks some forty advice methods when it is built. False means "not sure": the caller
    then asks ``inspect`` (which also words the error).
    """
    func = getattr(fn, "__func__", fn)
    code = getattr(func, "__code__", None)
    if type(func) is not types.FunctionType or code is None:
        return False
    if inspect.ismethod(fn):
        arity += 1  # self (or cls) comes first
    if func.__kwdefaults__ is None and code.co_kwonlyargcount:
        return False  # a keyword-only argument without a default
    if func.__kwdefaults__ is not None and len(func.__kwdefaults__) < code.co_kwonlyargcount:
        return False
    required = code.co_argcount - len(func.__defaults__ or ())
    fits = arity <= code.co_argcount or bool(code.co_flags & inspect.CO_VARARGS)
    return required <= arity and fits


def location_of(fn: object) -> str:
    fn = inspect.unwrap(getattr(fn, "__func__", fn))  # type: ignore[arg-type]
    code = getattr(fn, "__code__", None)
    if code is None:
        return "?"
    return f"{code.co_filename}:{code.co_firstlineno}"


# -- compiled wrappers: filters and the errors='log' policy ------------------------------


class _Counters:
    """The state of one advice's filters at one join point (kept across recompiles)."""

    __slots__ = ("calls", "fired")

    def __init__(self) -> None:
        self.calls = itertools.count()  # next() on itertools.count is atomic under the GIL
        self.fired = itertools.count()  # once=: the calls that passed every other filter


def _filter(
    advice: Advice, fn: Callable[..., Any], counters: _Counters, *, numbered: bool
) -> Callable[..., Any]:
    """``fn`` run only on the calls that pass the filters. ``every=`` counts the calls that
    reach it, or with ``numbered`` (see ``JoinPoint.counter``) uses the call's own number."""
    every, once, when, rank = advice.every, advice.once, advice.when, advice.rank
    lead = advice.window - 1  # the window's calls end at each every-th one
    counter, fired = counters.calls, counters.fired
    around = advice.kind == "around"
    logs = advice.errors == "log"

    def holds(ctx: Any) -> bool:
        # ``when`` is part of the advice: with errors='log' its failure is logged and the
        # advice does not run, as a failure of the advice itself would not break the call.
        assert when is not None
        if not logs:
            return bool(when(ctx))
        try:
            return bool(when(ctx))
        except Exception:
            _log_failure(advice, ctx)
            return False

    def passes(ctx: Any) -> bool:
        if rank is not None and current_rank() != rank:
            return False
        if when is not None and not holds(ctx):
            return False
        n = next(counter)
        if every and ((ctx._number if numbered else n + 1) + lead) % every > lead:
            return False
        return not once or not next(fired)

    if around:

        def filtered_around(ctx: Any, proceed: Callable[..., Any]) -> Any:
            return fn(ctx, proceed) if passes(ctx) else proceed()

        return filtered_around

    def filtered(ctx: Any) -> Any:
        return fn(ctx) if passes(ctx) else None

    return filtered


def _reraise(exc: BaseException) -> NoReturn:
    """Raise ``exc`` again with the ``__context__`` it had."""
    context = exc.__context__
    try:
        raise exc
    finally:
        exc.__context__ = context


def _log_failure(advice: Advice, point: object) -> None:
    advice.failures += 1
    from ._log import log_safely

    name = getattr(getattr(point, "joinpoint", point), "name", point)
    log_safely(
        "error",
        "advice.failed",
        advice=advice.name,
        aspect=advice.aspect_name,
        kind=advice.kind,
        joinpoint=name,
        failures=advice.failures,
        exc_info=True,
    )


def log_own_failure(aspect: Any, point: Any) -> None:
    """Report a failure of ``aspect``'s own work (called in an ``except`` block) as the
    ``errors='log'`` guard does: counted on its advice at ``point``'s join point and logged.

    For aspects that apply ``errors=`` themselves (``handles_own_errors``); ``point`` is a
    ``CallContext`` or a ``JoinPoint``.
    """
    jp = getattr(point, "joinpoint", point)
    for advice in jp.advice:
        if advice.aspect is aspect:
            _log_failure(advice, point)
            return
    from ._log import log_safely

    log_safely(
        "error",
        "advice.failed",
        aspect=getattr(aspect, "name", None),
        joinpoint=jp.name,
        exc_info=True,
    )


def _guard(advice: Advice, fn: Callable[..., Any]) -> Callable[..., Any]:
    if advice.is_async:

        async def guarded_async(ctx: Any) -> Any:
            try:
                return await fn(ctx)
            except Exception:
                _log_failure(advice, ctx)
                return None

        return guarded_async

    def guarded(ctx: Any) -> Any:
        try:
            return fn(ctx)
        except Exception:
            _log_failure(advice, ctx)
            return None

    return guarded


def _guard_around(advice: Advice, fn: Callable[..., Any]) -> Callable[..., Any]:
    """errors='log' for around advice: the target still runs exactly once.

    If the advice fails before calling ``proceed`` we proceed for it; if it fails after,
    the result ``proceed`` produced stands; an exception of the target itself propagates.
    """

    def guarded(ctx: Any, proceed: Callable[..., Any]) -> Any:
        outcome: list[Any] = []

        def tracked(*args: Any, **kwargs: Any) -> Any:
            try:
                result = proceed(*args, **kwargs)
            except BaseException as exc:
                outcome.append((False, exc))
                raise
            outcome.append((True, result))
            return result

        try:
            return fn(ctx, tracked)
        except Exception as exc:
            if outcome and not outcome[-1][0] and outcome[-1][1] is exc:
                raise
            _log_failure(advice, ctx)
            if not outcome:
                return proceed()
            ok, value = outcome[-1]
            if ok:
                return value
        # The target's exception, raised outside the handler: its own __cause__ stays as
        # the target left it, and so does its __context__ (restored: a raise inside a
        # caller's except block would set it to the caller's exception).
        _reraise(value)

    if advice.is_async:

        async def guarded_async(ctx: Any, proceed: Callable[..., Any]) -> Any:
            outcome: list[Any] = []

            async def tracked(*args: Any, **kwargs: Any) -> Any:
                try:
                    result = await proceed(*args, **kwargs)
                except BaseException as exc:
                    outcome.append((False, exc))
                    raise
                outcome.append((True, result))
                return result

            try:
                return await fn(ctx, tracked)
            except Exception as exc:
                if outcome and not outcome[-1][0] and outcome[-1][1] is exc:
                    raise
                _log_failure(advice, ctx)
                if not outcome:
                    return await proceed()
                ok, value = outcome[-1]
                if ok:
                    return value
            _reraise(value)  # outside the handler, as above

        return guarded_async
    return guarded
