"""The weaver: where advice is registered, events are emitted and join points declared.

There is one process-wide ``default_weaver``; any number of private ones can be made.
A global weaver's advice applies to every join point; a local weaver's advice applies
only to join points declared or woven through it (a training runner owns one).
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar, overload

from ._advice import Advice, AdviceKind
from ._aspect import MARK, Aspect
from ._context import Event
from ._handle import Handle
from ._joinpoint import JoinPoint, JoinPointProxy, find_proxy
from ._pointcut import Pointcut, PointcutLike, as_pointcut
from ._process import ensure_sources, warn_local_subscriptions
from ._registry import LOCK, REGISTRY, subscribes
from ._typing import AdviceFunctions
from .errors import AspectDefinitionError, InvalidOptionError, WeaverClosedError

if TYPE_CHECKING:
    from ._describe import Description

__all__ = ["AdviceDecorator", "Weaver", "default_weaver"]

F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
A = TypeVar("A", bound=Aspect)
OPTIONS = frozenset(
    (
        "priority",
        "every",
        "window",
        "once",
        "when",
        "rank",
        "errors",
        "name",
        "order_after",
        "order_before",
    )
)
POINTCUT_FAILED = "event.pointcut_failed"
# Subscriptions whose pointcut raised when matched against an event name, already logged.
_FAILED_POINTCUTS: weakref.WeakSet[Advice] = weakref.WeakSet()


def _in_class_body(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is being defined in a class body (its qualname says so).

    Only a function (or a static/class method object) can be: a bound method
    (``recorder.record``) or a builtin (``list.append``) has a dotted qualname too, and is
    advice to register at once.
    """
    if inspect.ismethod(fn) or not inspect.isfunction(getattr(fn, "__func__", fn)):
        return False
    qualname = getattr(fn, "__qualname__", "")
    owner, _, _ = qualname.rpartition(".")
    # A class's name is an identifier; '<locals>' (a function's body) and '<listcomp>',
    # '<genexpr>', '<lambda>' ... (a lambda made in a comprehension) are not.
    return owner.rpartition(".")[2].isidentifier()


class AdviceDecorator(Protocol):
    """What ``@before(...)`` and the other advice decorators return, as type checkers see it.

    In an ``Aspect`` body the decorator only marks the method, so a method (its first
    parameter an ``Aspect``), a ``staticmethod`` or a ``classmethod`` comes back as it
    is; any other callable is registered at once and comes back as an ``Advice`` that
    calls it with the same parameters.
    """

    # A staticmethod object is callable too, so the last overload would also take it.
    @overload
    def __call__(self, fn: staticmethod[P, R], /) -> staticmethod[P, R]: ...  # type: ignore[overload-overlap]

    @overload
    def __call__(self, fn: classmethod[T, P, R], /) -> classmethod[T, P, R]: ...

    # functools.partial's __call__ takes (*args: Any), which the Aspect overloads would take.
    @overload
    def __call__(self, fn: functools.partial[R], /) -> Advice[..., R]: ...

    # A first parameter that takes any object (``ctx: object``, ``*args: object``) would
    # fit the Aspect overloads below (an Aspect is an object): it is a plain function.
    @overload
    def __call__(self, fn: Callable[Concatenate[object, P], R], /) -> Advice[..., R]: ...

    @overload
    def __call__(self, fn: Callable[Concatenate[A, P], R], /) -> Callable[Concatenate[A, P], R]: ...

    # A method under @classmethod, as mypy passes it to a decorator above the classmethod.
    @overload
    def __call__(
        self, fn: Callable[Concatenate[type[A], P], R], /
    ) -> Callable[Concatenate[type[A], P], R]: ...

    @overload
    def __call__(self, fn: Callable[P, R], /) -> Advice[P, R]: ...


#: Event names whose subscribers a weaver keeps worked out (see ``Weaver._subscribers``).
_MAX_EVENT_NAMES = 1024


class Weaver:
    """A registry of advice that dispatches calls of the join points it reaches."""

    def __init__(self, name: str = "weaver", *, local: bool = False) -> None:
        self.name = name
        self.is_global = not local
        self.registered: list[Advice] = []
        self._handles: list[Handle] = []
        # Each event name's subscribers, for the registry's event_version (see _subscribers).
        self._events: dict[str, tuple[int, tuple[Callable[..., Any], ...]]] = {}
        #: Stacked decorators' shared handles, to the two handles each one joined.
        self._stacks: dict[Handle, tuple[Handle, Handle]] = {}
        #: Set (under LOCK) when close() starts: registrations are refused from then on.
        self._closed = False
        # close() is this handle's undo: a second close(), in any thread, is a no-op that
        # returns once the first has finished. (Weakly: an unused weaver is freed at once.)
        self._closer = Handle(functools.partial(_shut, weakref.ref(self)), f"close {name}")
        if self.is_global:
            with LOCK:
                REGISTRY.weavers.add(self)

    def __repr__(self) -> str:
        scope = "global" if self.is_global else "local"
        if self._closed:
            return f"<Weaver {self.name!r} {scope}, closed>"
        return f"<Weaver {self.name!r} {scope}, {len(self.registered)} advice>"

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called: the weaver then refuses registrations."""
        return self._closed

    # -- advice decorators ----------------------------------------------------------------

    def before(self, pointcut: PointcutLike | None = None, **opts: Any) -> AdviceDecorator:
        """``fn(ctx)`` runs before the target; it may edit ``ctx.args`` or ``ctx.skip()``."""
        return self._decorator("before", pointcut, opts)

    def after(self, pointcut: PointcutLike | None = None, **opts: Any) -> AdviceDecorator:
        """``fn(ctx)`` runs after the target returned, was skipped or recovered."""
        return self._decorator("after", pointcut, opts)

    def on_error(self, pointcut: PointcutLike | None = None, **opts: Any) -> AdviceDecorator:
        """``fn(ctx)`` runs when the target raised; ``ctx.recover(value)`` suppresses it."""
        return self._decorator("on_error", pointcut, opts)

    def around(self, pointcut: PointcutLike | None = None, **opts: Any) -> AdviceDecorator:
        """``fn(ctx, proceed)`` wraps the target and returns the result."""
        return self._decorator("around", pointcut, opts)

    def on(self, event: PointcutLike | None = None, **opts: Any) -> AdviceDecorator:
        """``fn(event)`` runs when an event whose name matches ``event`` is emitted."""
        return self._decorator("on", event, opts)

    def _decorator(
        self, kind: AdviceKind, pointcut: PointcutLike | None, opts: dict[str, Any]
    ) -> AdviceDecorator:
        self._check_open(kind)
        _check_decorator(kind, pointcut, opts)
        pc = as_pointcut(pointcut) if pointcut is not None else None

        def decorate(fn: Any) -> Any:
            func = fn.fn if isinstance(fn, Advice) else fn
            if _in_class_body(func) and not isinstance(fn, Advice):
                # In an Aspect body: only mark; advice is made when an instance registers.
                return _mark(fn, func, kind, pc, opts)
            if pc is None:
                raise AspectDefinitionError(
                    f"@{kind}() without a pointcut is only for methods of an Aspect subclass: "
                    f"give a pointcut, e.g. @{kind}('train_iter')"
                )
            inner = fn if isinstance(fn, Advice) and fn.active else None
            if inner is not None and inner._handle not in self._handles:
                raise AspectDefinitionError(
                    f"@{kind}({pc!r}) is stacked on {inner!r}, which another weaver holds, "
                    "so no one handle could remove both: give one decorator a pointcut "
                    f"for all its join points, e.g. @{kind}(Name('a') | Name('b'))"
                )
            advice = Advice(kind, func, pc, **opts)
            _copy_metadata(advice, func)
            handle = self.add(advice)
            if inner is not None:
                self._stack(inner, handle)
            return advice

        return decorate

    # -- registration ---------------------------------------------------------------------

    def add(self, *advices: Advice) -> Handle:
        """Register prepared ``Advice`` objects; the handle removes exactly these."""
        items = list(advices)
        for advice in items:
            if advice.active:
                raise AspectDefinitionError(
                    f"{advice!r} is registered already: remove() it first or make a new one"
                )
        # One step, so that close() (which sets _closed under LOCK) either refuses this
        # registration or finds its handle to remove; _stack and _unstack rewrite the
        # handle list under LOCK too.
        with LOCK:
            self._check_open("add")
            REGISTRY.add_advice(self, items)
            handle = Handle(lambda: self._remove(items, handle), f"{len(items)} advice", items)
            for advice in items:
                advice._handle = handle
            self._handles.append(handle)
        if self.is_global:
            try:
                ensure_sources(*items)  # process.start/exit, uncaught, audit.*: on first use
            except BaseException:
                # A subscriber that raises as process.start is replayed to it: the
                # registration fails, so it changes nothing (no advice left behind).
                handle.remove()
                raise
        else:
            warn_local_subscriptions(*items)
        return handle

    def register(self, aspect: Aspect | Advice | Iterable[Aspect | Advice]) -> Handle:
        """Register an aspect instance (or advice); the handle removes all of it."""
        self._check_open("register")
        advices: list[Advice] = []
        for item in _items(aspect):
            if isinstance(item, Aspect):
                advices.extend(item.make_advice())
            else:
                advices.append(item)
        return self.add(*advices)

    def _stack(self, inner: Advice, outer: Handle) -> None:
        """Stacked decorators (``@before('a')`` over ``@before('b')``): the registrations
        share one handle, so removing the function removes all of it, as in an Aspect."""
        first = inner._handle
        assert first is not None
        items = (*first.items, *outer.items)

        def undo() -> None:
            self._stacks.pop(both, None)
            outer.remove()
            first.remove()
            self.forget(both)  # as _remove() does for one handle: let go of the advice

        both = Handle(undo, f"{len(items)} advice", items)
        with LOCK:
            self._handles[:] = [h for h in self._handles if h is not first and h is not outer]
            self._handles.append(both)
            self._stacks[both] = (first, outer)
        for advice in items:
            advice._handle = both

    def _unstack(self, both: Handle) -> tuple[Handle, Handle] | None:
        """Take a stacked decorators' shared handle apart again: the two handles it joined,
        each registered again with its own advice, or None if ``both`` is not one. (The
        test fixtures remove a test's decorator stacked on one registered at import, and
        keep that one.)"""
        with LOCK:
            parts = self._stacks.pop(both, None)
            if parts is None or not both.active:
                return None
            first, outer = parts
            self._handles[:] = [h for h in self._handles if h is not both]
            self._handles += [first, outer]
            with both._lock:
                both._undo = None  # replaced by the two handles it joined
        for handle in parts:
            for advice in handle.items:
                advice._handle = handle
        return parts

    def _registrations(self) -> list[Handle]:
        """The handles of what was registered here (``add``, ``register``, decorators),
        not those of weaves: the ones ``_register_again`` can put back."""
        with LOCK:
            return [
                h
                for h in self._handles
                if h._state is None and h.items and all(isinstance(a, Advice) for a in h.items)
            ]

    def _register_again(self, handle: Handle) -> None:
        """Register the advice of ``handle``, removed meanwhile, again under that same
        handle and in its first registration's order, without replaying
        ``process.start`` (the test fixtures put back what a test removed)."""
        items: list[Advice] = list(handle.items)
        with LOCK:
            if handle.active or any(a.active for a in items):
                return
            self._check_open("add")
            REGISTRY.add_advice(self, items, again=True)
            with handle._lock:
                handle._undo = lambda: self._remove(items, handle)
            for advice in items:
                advice._handle = handle
            self._handles.append(handle)

    def _remove(self, items: list[Advice], handle: Handle) -> None:
        REGISTRY.remove_advice(self, items)
        with LOCK:
            if handle in self._handles:
                self._handles.remove(handle)

    def clear(self) -> None:
        """Remove everything registered or woven through this weaver."""
        for handle in list(reversed(self._handles)):
            handle.remove()

    def close(self) -> None:
        """Clear this weaver and stop it reaching any join point; it refuses registrations
        afterwards (``WeaverClosedError``). Closing again does nothing. ``describe()``,
        ``emit()`` and ``clear()`` still work. The default weaver cannot be closed."""
        if self is default_weaver:
            raise WeaverClosedError(
                "the default weaver cannot be closed: the module-level functions "
                "(aspecthook.before, weave, ...) register on it for the whole process; "
                "call default_weaver.clear() to remove everything registered on it",
                weaver=self.name,
                operation="close",
            )
        self._closer.remove()

    def _check_open(self, operation: str) -> None:
        """Raise ``WeaverClosedError`` if this weaver is closed (``operation`` is refused)."""
        if self._closed:
            raise WeaverClosedError(
                f"{operation}() on weaver {self.name!r}, which is closed: close() removed "
                "its advice and it takes no more registrations; register on a new Weaver "
                "(for a closed runner's weaver, build a new Runner)",
                weaver=self.name,
                operation=operation,
            )

    def track(self, handle: Handle) -> Handle:
        """Let ``clear()`` remove ``handle`` too (used by weave()). On a weaver closed
        meanwhile, ``handle`` is removed at once and ``WeaverClosedError`` raised."""
        with LOCK:
            closed = self._closed
            if not closed:
                self._handles.append(handle)
        if closed:
            handle.remove()
            self._check_open("weave")
        return handle

    def forget(self, handle: Handle) -> None:
        with LOCK:
            if handle in self._handles:
                self._handles.remove(handle)

    # -- join points ------------------------------------------------------------------------

    @overload
    def joinpoint(self, name_or_fn: F) -> F: ...

    @overload
    def joinpoint(self, name_or_fn: str | None = None) -> Callable[[F], F]: ...

    def joinpoint(self, name_or_fn: Any = None) -> Any:
        """Declare a function or method as a join point: ``@joinpoint`` or ``@joinpoint('x')``."""
        # classmethod objects are not callable (staticmethod ones are since 3.10).
        if isinstance(name_or_fn, (classmethod, staticmethod)) or (
            callable(name_or_fn) and not isinstance(name_or_fn, str)
        ):
            return self._declare(name_or_fn, None)
        if name_or_fn is not None and not (isinstance(name_or_fn, str) and name_or_fn.strip()):
            raise AspectDefinitionError(
                f"@joinpoint takes a name string, got {name_or_fn!r}: use @joinpoint (named "
                "module.qualname) or @joinpoint('train_iter')"
            )
        return lambda fn: self._declare(fn, name_or_fn)

    def _declare(self, fn: Any, name: str | None, *, counter: str | None = None) -> Any:
        """``@joinpoint`` on ``fn``; ``counter`` numbers its calls (``JoinPoint.counter``)."""
        self._check_open("joinpoint")
        if isinstance(fn, (classmethod, staticmethod)) or callable(fn):
            func = getattr(fn, "__func__", fn)
        else:
            raise AspectDefinitionError(f"@joinpoint needs a function or method, got {fn!r}")
        existing = find_proxy(fn)
        if existing is not None and type(fn) is JoinPointProxy:
            jp = existing._self_joinpoint
            if name is not None:
                REGISTRY.rename(jp, add=(name,))
            return fn
        default = f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', func)}"
        jp = JoinPoint(
            name or default,
            fn,
            declared=True,
            local_weaver=None if self.is_global else self,
            counter=counter,
        )
        if name and not inspect.ismethod(fn):  # a bound method's dotted name is not its own
            jp.add_names((default,))
        proxy = JoinPointProxy(fn, jp)
        REGISTRY.add_joinpoint(jp)
        return proxy

    # -- events ---------------------------------------------------------------------------

    def emit(self, event: str, /, source: Any = None, **payload: Any) -> Event:
        """Send ``event`` to its subscribers in priority order; returns the ``Event``."""
        evt = Event(event, payload, source)
        for fn in self._subscribers(event):
            fn(evt)
        return evt

    def _emits_to(self) -> list[Weaver]:
        """The weavers whose subscriptions this one's ``emit`` runs: the global ones, and
        this one's own (a runner's weaver is not global)."""
        weavers = list(REGISTRY.weavers)
        if self not in weavers:
            weavers.append(self)
        return weavers

    def _subscribers(self, event: str) -> tuple[Callable[..., Any], ...]:
        try:
            cached = self._events.get(event)
        except TypeError:  # unhashable: refused just below
            cached = None
        if cached is not None and cached[0] == REGISTRY.event_version:
            return cached[1]
        if not isinstance(event, str):  # a name seen for the first time: checked once
            raise InvalidOptionError(
                f"emit({event!r}): an event name is a string: give e.g. "
                "emit('checkpoint.saved', path=path)",
                option="event",
                value=event,
            )
        from ._chain import order_stage

        with LOCK:
            version = REGISTRY.event_version
            if cached is not None or len(self._events) >= _MAX_EVENT_NAMES:
                # Subscriptions changed (every entry is stale) or names carry ids
                # (``job.<id>.done``): start again rather than keep every name ever sent.
                self._events.clear()
            weavers = self._emits_to()
            point = Event(event, {})
            failed: list[tuple[Advice, Exception]] = []
            matched = [
                a
                for w in weavers
                for a in w.registered
                if a.kind == "on" and subscribes(a, point, failed)
            ]
            fns = tuple(a.compiled(event) for a in order_stage(matched))
            self._events[event] = (version, fns)
            failed = [(a, exc) for a, exc in failed if a not in _FAILED_POINTCUTS]
            _FAILED_POINTCUTS.update(a for a, _ in failed)
        for advice, exc in failed:  # logged outside the lock: a logger may call woven code
            _log_pointcut_failure(advice, event, exc)
        return fns

    # -- weaving and introspection ------------------------------------------------------------

    def weave(
        self,
        target: Any,
        *aspects: Aspect | Advice,
        before: AdviceFunctions = None,
        after: AdviceFunctions = None,
        on_error: AdviceFunctions = None,
        around: AdviceFunctions = None,
        name: str | None = None,
        requires: str | None = None,
        strict: bool = False,
        **opts: Any,
    ) -> Handle:
        """``weave(target, ...)`` registering on this weaver; see ``aspecthook.weave``."""
        from ._weave import weave

        return weave(
            target,
            *aspects,
            before=before,
            after=after,
            on_error=on_error,
            around=around,
            name=name,
            requires=requires,
            strict=strict,
            weaver=self,
            **opts,
        )

    def describe(self, pointcut: PointcutLike | None = None) -> Description:
        """Rows of every join point this weaver reaches and the advice at each, in order."""
        from ._describe import describe

        return describe(pointcut, weaver=self)


def _shut(ref: weakref.ref[Weaver]) -> None:
    """What ``Weaver.close()`` does, once: refuse registrations, clear, stop reaching."""
    weaver = ref()
    if weaver is None:
        return
    with LOCK:
        weaver._closed = True
    weaver.clear()
    with LOCK:
        REGISTRY.weavers.discard(weaver)


def _log_pointcut_failure(advice: Advice, event: str, exc: Exception) -> None:
    from ._log import get_logger

    get_logger().warning(
        POINTCUT_FAILED,
        advice=advice.name,
        aspect=advice.aspect_name,
        pointcut=repr(advice.pointcut),
        emitted=event,
        hint="an event pointcut sees only the event's name: select by name and filter "
        "on the payload with when=",
        exc_info=exc,
    )


def check_weaver(weaver: object) -> None:
    """``weaver=`` is a ``Weaver`` (or None): refused when given, not at its first use."""
    if weaver is not None and not isinstance(weaver, Weaver):
        raise InvalidOptionError(
            f"weaver={weaver!r} is not a Weaver: give a Weaver (e.g. Weaver('mine')), or "
            "leave it out for every weaver's (weave: the default weaver)",
            option="weaver",
            value=weaver,
        )


def _check_decorator(kind: AdviceKind, pointcut: PointcutLike | None, opts: dict[str, Any]) -> None:
    """Refuse a decorator's unknown options, and an advice function given as its pointcut."""
    unknown = set(opts) - OPTIONS
    if unknown:
        raise InvalidOptionError(
            f"unknown option(s) {sorted(unknown)} for @{kind}: valid options are {sorted(OPTIONS)}",
            option=sorted(unknown)[0],
            value=opts[sorted(unknown)[0]],
        )
    if _looks_like_advice(pointcut):
        name = getattr(pointcut, "__name__", "?")
        raise AspectDefinitionError(
            f"@{kind} got the function {name!r} as its pointcut, so it would never be "
            f"called: write @{kind}('train_iter') (the pointcut in parentheses); a "
            "predicate pointcut takes the join point, e.g. lambda jp: ..., or wrap a "
            f"function in aspecthook.Predicate({name})"
        )


def _mark(fn: F, func: Any, kind: AdviceKind, pc: Pointcut | None, opts: dict[str, Any]) -> F:
    """Mark a method of an Aspect body as ``kind`` advice for ``pc``; returns ``fn``."""
    Advice(kind, lambda *a: None, pc, **opts)  # validate options now
    # Above @staticmethod / @classmethod: mark the function, where the aspect
    # looks for marks (and the other order of the decorators puts them).
    marks = getattr(func, "__func__", func).__dict__.setdefault(MARK, [])
    marks.insert(0, (kind, pc, dict(opts)))
    return fn


def _items(value: Any) -> list[Aspect | Advice]:
    if isinstance(value, (Aspect, Advice)):
        return [value]
    if isinstance(value, type) and issubclass(value, Aspect):
        raise AspectDefinitionError(
            f"register() got the class {value.__name__}, not an instance: "
            f"use register({value.__name__}())"
        )
    try:
        items = list(value)
    except TypeError:
        items = None
    if items is None or not all(isinstance(i, (Aspect, Advice)) for i in items):
        raise AspectDefinitionError(
            f"cannot register {value!r}: give an Aspect instance, an Advice, or a list of them"
        )
    return items


def _copy_metadata(advice: Advice, fn: Any) -> None:
    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
        try:
            setattr(advice, attr, getattr(fn, attr))
        except AttributeError:
            pass
    advice.__wrapped__ = fn  # type: ignore[attr-defined]
    if inspect.isfunction(fn):
        advice.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]


default_weaver = Weaver("default")


_ADVICE_PARAMETERS = frozenset(["ctx", "proceed", "event"])


def _looks_like_advice(pointcut: object) -> bool:
    """Whether a pointcut is an advice function given by mistake (``@before`` with no
    parentheses): a ``def`` function with a ``ctx``, ``proceed`` or ``event`` parameter.
    A lambda is a predicate (nobody decorates with one); ``Predicate(fn)`` says so for a
    ``def``."""
    if not inspect.isfunction(pointcut) or pointcut.__name__ == "<lambda>":
        return False
    code = pointcut.__code__
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    return not _ADVICE_PARAMETERS.isdisjoint(names)
