"""The wrappers ``Advice.compiled`` puts around an advice function: its filters
(``every=``, ``window=``, ``once=``, ``when=``, ``rank=``), the ``errors='log'`` policy
and, for an aspect that ``needs_runner`` away from a runner's own join points, the check
that the call has a runner.

The closures built here run on every call of a woven function; they are kept apart from
``_advice``, whose code runs when advice is registered. Their bodies are as short as the
filters allow: the values they test are read into closure variables when they are built.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Awaitable, Callable
from types import CoroutineType
from typing import TYPE_CHECKING, Any, NoReturn

from ._context import Event
from .errors import RunnerError

if TYPE_CHECKING:
    from ._advice import Advice

__all__ = [
    "_Counters",
    "_filter",
    "_guard",
    "_guard_around",
    "_runner_required",
    "current_rank",
    "log_own_failure",
]


def current_rank() -> int:
    """This process's distributed rank: torch.distributed's when initialised, else ``$RANK``.

    torch is only consulted when the program already imported ``torch.distributed``.
    """
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    return int(os.environ.get("RANK", "0"))


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
    passes = _passes(advice, counters, numbered=numbered)
    if (advice.every and not numbered) or advice.once:
        # Under torch.compile (advice at a module's hooks) Dynamo would trace the count
        # as a constant and guard on it: a new graph at every call until its recompile
        # limit, then none. Marked as torch.compiler.disable() marks a function, the
        # test runs in Python and the graph breaks there. Never read outside Dynamo.
        passes.__dict__.update(
            _torchdynamo_disable=True,
            _torchdynamo_disable_msg="aspecthook counts calls for every= / once= in Python",
        )

    if advice.kind == "around":

        def filtered_around(ctx: Any, proceed: Callable[..., Any]) -> Any:
            return fn(ctx, proceed) if passes(ctx) else proceed()

        return filtered_around

    def filtered(ctx: Any) -> Any:
        return fn(ctx) if passes(ctx) else None

    return filtered


def _passes(advice: Advice, counters: _Counters, *, numbered: bool) -> Callable[[Any], bool]:
    """The test of ``_filter``: whether a call passes every filter of ``advice``; with
    ``every=``, each call that passes ``rank=`` and ``when=`` is counted in ``counters``."""
    every, once, when, rank = advice.every, advice.once, advice.when, advice.rank
    lead = advice.window - 1  # the window's calls end at each every-th one
    counter, fired = counters.calls, counters.fired
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
        # Counted only for every= (not rank= / when= alone): a compiled graph guards on
        # the count, so a count taken on every call recompiled it on every call.
        if every:
            n = ctx._number if numbered else next(counter) + 1
            if (n + lead) % every > lead:
                return False
        return not once or not next(fired)

    return passes


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

    log_safely(
        "error",
        "advice.failed",
        advice=advice.name,
        aspect=advice.aspect_name,
        kind=advice.kind,
        joinpoint=_point_name(point),
        failures=advice.failures,
        exc_info=True,
    )


def _point_name(point: object) -> object:
    """The name of the join point or event where advice failed: ``point`` is a call's
    context, a join point, or an ``Event``, whose name is read first (its payload also reads
    as attributes, so an event sent with ``joinpoint=...`` must not be asked for one)."""
    if isinstance(point, Event):
        return point.name
    return getattr(getattr(point, "joinpoint", point), "name", point)


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
            result = fn(ctx)
        except Exception:
            _log_failure(advice, ctx)
            return None
        if type(result) is CoroutineType:  # an async function behind a plain decorator
            return _awaited_safely(advice, ctx, result)
        return result

    return guarded


async def _awaited_safely(advice: Advice, ctx: Any, coroutine: Awaitable[Any]) -> Any:
    """The coroutine a synchronous advice function returned, awaited (by an async join
    point's dispatcher) under the same ``errors='log'`` policy as the call itself."""
    try:
        return await coroutine
    except Exception:
        _log_failure(advice, ctx)
        return None


def _guard_around(advice: Advice, fn: Callable[..., Any]) -> Callable[..., Any]:
    """errors='log' for around advice: the target still runs exactly once.

    If the advice fails before calling ``proceed`` we proceed for it; if it fails after,
    the result ``proceed`` produced stands; an exception of the target itself propagates.
    """
    if advice.is_async:
        return _guard_around_async(advice, fn)
    return _guard_around_sync(advice, fn)


def _guard_around_sync(advice: Advice, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``_guard_around`` for a plain function."""

    def guarded(ctx: Any, proceed: Callable[..., Any]) -> Any:
        outcome: list[Any] = []

        def tracked(*args: Any, **kwargs: Any) -> Any:
            try:
                result = proceed(*args, **kwargs)
            except BaseException as exc:
                outcome.append((False, exc))
                raise
            if type(result) is CoroutineType:  # an async join point's: its outcome comes later
                return _tracked_outcome(result, outcome)
            outcome.append((True, result))
            return result

        try:
            result = fn(ctx, tracked)
            if type(result) is CoroutineType:  # an async function behind a plain decorator
                # Its late proceed() must go on from this advice's place in the chain.
                later = ctx.deferred(proceed)
                return _guard_around_result(advice, ctx, later, result, outcome)
            return result
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

    return guarded


async def _tracked_outcome(coroutine: Awaitable[Any], outcome: list[Any]) -> Any:
    """``proceed``'s coroutine, noting its outcome when it completes (see ``tracked``)."""
    try:
        result = await coroutine
    except BaseException as exc:
        outcome.append((False, exc))
        raise
    outcome.append((True, result))
    return result


async def _guard_around_result(
    advice: Advice,
    ctx: Any,
    proceed: Callable[..., Any],
    coroutine: Awaitable[Any],
    outcome: list[Any],
) -> Any:
    """An around advice's coroutine (an ``async def`` advice's, or one a plain function
    returned at an async join point), awaited under ``_guard_around``'s rules: the target's
    own exception propagates; a failure of the advice is logged, and the call goes on with
    ``proceed()`` when it had not proceeded, or with the result it had."""
    try:
        return await coroutine
    except Exception as exc:
        if outcome and not outcome[-1][0] and outcome[-1][1] is exc:
            raise
        _log_failure(advice, ctx)
        if not outcome:
            return await proceed()
        ok, value = outcome[-1]
        if ok:
            return value
    _reraise(value)


def _guard_around_async(advice: Advice, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``_guard_around`` for a coroutine function: its coroutine is awaited under the same
    rules as one a plain function returns (``_guard_around_result``)."""

    async def guarded_async(ctx: Any, proceed: Callable[..., Any]) -> Any:
        outcome: list[Any] = []

        def tracked(*args: Any, **kwargs: Any) -> Any:
            return _tracked_outcome(proceed(*args, **kwargs), outcome)

        return await _guard_around_result(advice, ctx, proceed, fn(ctx, tracked), outcome)

    return guarded_async


def _runner_required(advice: Advice, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (compiled advice) run only when the call has a runner (``ctx.runner``).

    For advice of an aspect that ``needs_runner`` at a join point that is not a runner's
    own: called outside a run, it does not run, and ``_no_runner`` reports why (a
    ``RunnerError`` raised, or logged under ``errors='log'``); around advice then proceeds
    for it, so the target still runs once. Outermost, so it fails on the first call, not
    on the first one that passes ``every=``. Logged once per advice and join point: it is
    the set-up that is wrong, and the calls go on.
    """
    reported: list[bool] = []  # logged once already (errors='log')
    if advice.kind == "around":
        if advice.is_async:

            async def checked_around_async(ctx: Any, proceed: Callable[..., Any]) -> Any:
                if ctx.runner is None:
                    _no_runner(advice, ctx, reported)
                    return await proceed()
                return await fn(ctx, proceed)

            return checked_around_async

        def checked_around(ctx: Any, proceed: Callable[..., Any]) -> Any:
            if ctx.runner is None:
                _no_runner(advice, ctx, reported)
                return proceed()  # an async join point's coroutine: its dispatcher awaits it
            return fn(ctx, proceed)

        return checked_around
    if advice.is_async:

        async def checked_async(ctx: Any) -> Any:
            if ctx.runner is None:
                _no_runner(advice, ctx, reported)
                return None
            return await fn(ctx)

        return checked_async

    def checked(ctx: Any) -> Any:
        if ctx.runner is None:
            _no_runner(advice, ctx, reported)
            return None
        return fn(ctx)

    return checked


def _no_runner(advice: Advice, ctx: Any, reported: list[bool]) -> None:
    """Report that ``advice`` cannot run at ``ctx``'s call, which has no runner: raise the
    ``RunnerError``, or under ``errors='log'`` log it (with its traceback) and count it, the
    first time only (``reported``)."""
    aspect = type(advice.aspect).__name__
    name = ctx.joinpoint.name
    error = RunnerError(
        f"{aspect} needs a training runner: {name!r} was called outside a run, so "
        f"ctx.runner is None for its advice {advice.name!r}; give the aspect to "
        f"aspecthook.train.Runner(aspects=[{aspect}(...)]), or call {name!r} from within "
        "runner.run() (a function of the run, e.g. declared with @runner.joinpoint), in "
        "the thread or task that runs it: a thread started during the run is outside it "
        "unless it calls in a copy of the run's context (contextvars.copy_context().run)"
    )
    if advice.errors != "log":
        raise error
    if reported:
        return
    reported.append(True)
    try:
        raise error
    except RunnerError:
        _log_failure(advice, ctx)
