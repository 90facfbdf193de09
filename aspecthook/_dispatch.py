"""The general dispatchers: what runs a join point's chain around one call, whatever its shape.

``JoinPoint.general`` is one of these (``_make_dispatch``, or ``_make_async_dispatch`` for an
``async def`` target); the dispatchers generated per chain shape (``_specialised``) fall
back to it, and share its context classes and the ``_UNBOUND`` sentinel. Kept apart from
the join point itself because this is the code that runs per call.

Construction notes (measured in bench/calls.py):

* ``_UNBOUND`` is the instance the proxy gives wrapt for a plain function, so that wrapt's
  C ``__call__`` skips its per-call ``__self__`` probe (see ``_proxy``); every dispatcher
  maps it back to ``None``.
* The dispatcher reads the join point's ``Chain`` once per call. Registrations replace
  the chain object whole, so concurrent weaving never exposes a half-built chain.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._context import CallContext, RunnerOnRead, skip_in_error_advice
from .errors import UnsupportedAdviceError

if TYPE_CHECKING:
    from ._joinpoint import JoinPoint

__all__ = [
    "_UNBOUND",
    "_FastContext",
    "_FastRunnerContext",
    "_make_async_dispatch",
    "_make_dispatch",
    "after_error_advice",
    "error_advice_follows",
    "new_context",
]


class _Unbound:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<unbound>"


_UNBOUND = _Unbound()


class _FastContext(RunnerOnRead):
    """``CallContext`` built without a Python ``__init__``.

    With ``object.__init__`` as its initialiser, calling the class runs only C code; the
    dispatcher then fills the seven slots a call needs. Measured: faster than both
    ``CallContext(...)`` and ``object.__new__(CallContext)``. ``runner`` is worked out
    on first read (``RunnerOnRead``).
    """

    __slots__ = ()
    __init__ = object.__init__


class _FastRunnerContext(CallContext):
    """``_FastContext`` for a runner's own join points, whose dispatchers fill ``runner``:
    no ``__getattr__``, so the interpreter specialises every read of it (see
    ``RunnerOnRead``), in the dispatcher and in the advice alike."""

    __slots__ = ()
    __init__ = object.__init__


def _make_dispatch(jp: JoinPoint) -> Callable[..., Any]:
    """The wrapt wrapper function of ``jp``: runs the chain around one call.

    This is the hot loop; it is written out flat on purpose, and so longer than our usual
    function (no helper calls on the common path, one chain read, locals for everything
    used twice).
    """

    context = _FastContext
    unbound = _UNBOUND
    counter = jp.counter

    def dispatch(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        chain = jp._chain  # one read: a concurrent rebuild swaps the whole object
        # CallContext.__init__ inlined: a Python-level __init__ call is the largest single
        # cost of building the context, and these seven stores are all a call needs.
        ctx = context()
        ctx.joinpoint = jp
        ctx.target = wrapped
        ctx.instance = None if instance is unbound else instance
        ctx._args = args
        ctx.kwargs = kwargs
        ctx.result = None
        ctx._skipped = False
        if counter is not None:
            ctx._number = getattr(instance, counter) + 1
        for fn in chain.before:
            fn(ctx)
        if not ctx._skipped:
            try:
                if chain.around:
                    ctx._arounds = chain.around
                    ctx._level = 0
                    ctx.result = ctx.proceed()
                elif ctx.kwargs:
                    ctx.result = wrapped(*ctx._args, **ctx.kwargs)
                else:
                    ctx.result = wrapped(*ctx._args)
            except Exception as exc:
                if not chain.on_error or not _handle_error(chain.on_error, ctx, exc):
                    raise  # the original exception, unchanged
        for fn in chain.after:
            fn(ctx)
        return ctx.result

    return dispatch


def new_context(
    jp: JoinPoint, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> CallContext:
    """A ``CallContext`` for a call a layer is handling (when it needs one)."""
    return RunnerOnRead(jp, wrapped, None if instance is _UNBOUND else instance, args, kwargs)


def _handle_error(
    handlers: tuple[Callable[..., Any], ...], ctx: CallContext, exc: Exception
) -> bool:
    """Run error advice; True when one recovered. A raising handler replaces ``exc``
    (chained to it, see ``_chain_to``). Then what advice left for this moment runs
    (``after_error_advice``), told whether the call was recovered."""
    ctx.exception = exc
    recovered = False
    # The target ran, so before advice did not skip; around advice may have (not refused).
    skipped = ctx._skipped
    try:
        for fn in handlers:
            try:
                fn(ctx)
            except Exception as new:
                _chain_to(new, exc)
                raise
            if ctx.recovered:
                recovered = True
                return True
            if ctx._skipped and not skipped:  # error advice called ctx.skip()
                raise skip_in_error_advice(ctx.joinpoint.name, exc)
        return False
    finally:
        _settle(ctx, recovered)


def error_advice_follows(ctx: CallContext) -> bool:
    """Whether an ``Exception`` that leaves the around advice asking, now, goes straight to
    this call's error advice, so that ``after_error_advice`` can wait for its outcome.

    True at a synchronous call run by the general dispatcher with error advice (the chain
    whose around advice the context holds is still the join point's, and has error
    advice: only ``_make_dispatch`` runs such a chain) when every around advice outside
    the asking one passes exceptions through as they came (``Timed``, ``Logged``: those
    that run as layers, ``runs_as_layer``). Asked on error paths only: it costs a call
    nothing.
    """
    from ._advice import LAYER  # here: _advice is built on this module's neighbours

    try:
        level, arounds = ctx._level, ctx._arounds
    except AttributeError:  # no around chain on this context (an async join point)
        return False
    chain = ctx.joinpoint._chain
    if chain.around is not arounds or not chain.on_error:
        return False
    usable = [a for a in chain.entries.get("around", ()) if a not in chain.skipped]
    if len(usable) != len(arounds):
        return False
    return all(getattr(a.fn, LAYER, None) is not None for a in usable[: level - 1])


def after_error_advice(ctx: CallContext, settle: Callable[[bool], None]) -> None:
    """Call ``settle(recovered)`` once this call's error advice has run: from error advice
    itself, or from around advice for which ``error_advice_follows(ctx)`` is true."""
    try:
        ctx._settle.append(settle)
    except AttributeError:
        ctx._settle = [settle]


def _settle(ctx: CallContext, recovered: bool) -> None:
    try:
        settles = ctx._settle
    except AttributeError:
        return
    del ctx._settle
    for settle in settles:
        settle(recovered)


def _chain_to(new: Exception, exc: Exception) -> None:
    """Make ``exc`` the ``__cause__`` of ``new``, the exception error advice raised in its
    place, unless ``new`` is ``exc`` or already says what caused it: a cause of its own,
    or ``raise ... from None``, whose suppressed chain must stay hidden as in plain Python."""
    if new is not exc and new.__cause__ is None and not new.__suppress_context__:
        new.__cause__ = exc


def _make_async_dispatch(jp: JoinPoint) -> Callable[..., Any]:
    """Dispatch for ``async def`` targets: returns a coroutine that awaits async advice.

    The coroutine carries the target's ``__name__`` and ``__qualname__`` (its ``repr``, a
    task's ``repr`` and the "never awaited" warning name the target, not this module):
    they come from a copy of ``_dispatch_async`` named after the target, made once here,
    so that naming costs nothing per call.
    """
    run = _named_after(jp.target)

    def dispatch(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return run(jp, wrapped, None if instance is _UNBOUND else instance, args, kwargs)

    return dispatch


def _named_after(target: Any) -> Callable[..., Any]:
    """``_dispatch_async`` under the names of the coroutine ``target`` makes: a coroutine
    takes its names from the function object that makes it, so a copy sharing the code
    is enough. ``_dispatch_async`` itself when the target has no names to give."""
    func = getattr(target, "__func__", target)
    while isinstance(func, functools.partial):
        func = func.func
    if not isinstance(getattr(func, "__name__", None), str):  # an instance: its __call__ runs
        func = inspect.getattr_static(type(func), "__call__", None)
    name, qualname = getattr(func, "__name__", None), getattr(func, "__qualname__", None)
    if not isinstance(name, str):
        return _dispatch_async
    code = _dispatch_async.__code__
    named = types.FunctionType(code, _dispatch_async.__globals__, name)
    named.__qualname__ = qualname if isinstance(qualname, str) else name
    return named


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


class _AsyncContext(RunnerOnRead):
    """The ``CallContext`` of a call at an async join point.

    Its around chain runs as nested coroutines, and each around advice receives a
    ``proceed`` of its own, bound to its place in the chain (``_run_around_async``): the
    context records no chain position, because concurrent branches of one call (``gather``
    of two ``proceed()``) would share it. So ``ctx.proceed`` cannot know where to go on
    from, and says to use the ``proceed`` argument; that one works at any time, so
    ``deferred`` gives it back as it is.
    """

    __slots__ = ()

    def proceed(self, *args: Any, **kwargs: Any) -> Any:
        name = self.joinpoint.name
        raise UnsupportedAdviceError(
            f"ctx.proceed() cannot run the rest of the chain of {name!r}, an async join "
            "point: call the proceed your around advice receives instead "
            "(`async def advice(ctx, proceed): return await proceed()`)",
            kind="proceed",
            target=name,
        )

    def deferred(self, proceed: Any) -> Any:
        return proceed


async def _dispatch_async(
    jp: JoinPoint, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    chain = jp._chain
    ctx = _AsyncContext(jp, wrapped, instance, args, kwargs)
    for fn in chain.before:
        await _maybe_await(fn(ctx))
    if not ctx._skipped:
        try:
            if chain.around:
                ctx.result = await _run_around_async(chain.around, 0, ctx, wrapped)
            else:
                ctx.result = await wrapped(*ctx._args, **ctx.kwargs)
        except Exception as exc:
            if not chain.on_error or not await _handle_error_async(chain.on_error, ctx, exc):
                raise
    for fn in chain.after:
        await _maybe_await(fn(ctx))
    return ctx.result


async def _run_around_async(
    arounds: tuple[Callable[..., Any], ...], index: int, ctx: CallContext, wrapped: Any
) -> Any:
    """Run around advice ``index`` and, through the ``proceed`` it receives, the rest.

    ``proceed(*args, **kwargs)`` runs the rest on a copy of the context holding those
    arguments (``CallContext._branch``) rather than swapping them in and out of the shared
    one, as the synchronous ``CallContext.proceed`` does: a swap held across an ``await``
    would leak into branches of the same call running concurrently.
    """
    nxt = index + 1

    async def proceed(*args: Any, **kwargs: Any) -> Any:
        here = ctx._branch(args, kwargs) if args or kwargs else ctx
        if nxt < len(arounds):
            return await _run_around_async(arounds, nxt, here, wrapped)
        return await wrapped(*here._args, **here.kwargs)

    return await _maybe_await(arounds[index](ctx, proceed))


async def _handle_error_async(
    handlers: tuple[Callable[..., Any], ...], ctx: CallContext, exc: Exception
) -> bool:
    ctx.exception = exc
    recovered = False
    skipped = ctx._skipped  # as in _handle_error
    try:
        for fn in handlers:
            try:
                await _maybe_await(fn(ctx))
            except Exception as new:
                _chain_to(new, exc)
                raise
            if ctx.recovered:
                recovered = True
                return True
            if ctx._skipped and not skipped:  # as in _handle_error
                raise skip_in_error_advice(ctx.joinpoint.name, exc)
        return False
    finally:
        _settle(ctx, recovered)
