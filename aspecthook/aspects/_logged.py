"""``Logged``: one structlog event per call, and ``configure_logging`` for where it goes.

The event carries the join point, a size-capped summary of the arguments and the result,
the duration and the outcome, and on failure the exception itself as ``exc_info`` (the
exception propagates unchanged). A cancelled call (``asyncio.CancelledError``) is an
outcome of its own, not a failure. While the call runs, ``joinpoint`` and
``joinpoint_stack`` are bound as structlog context variables, so anything logged inside
it, including the events of nested ``Logged`` join points, shows where it came from.

Fast path: structlog's native filtering loggers (``make_filtering_bound_logger``, the
default) fix their level per class, so whether our two levels are enabled is computed once
and cached until structlog is configured with another wrapper class. A call whose levels
are both disabled then costs one identity check and ``proceed()``. A logger whose level can
change at any time (stdlib-backed) is asked ``is_enabled_for`` on every call instead.

Failures of ``Logged`` itself follow ``errors=`` (an argument whose ``repr`` raises is not
one: it is summarised as ``'<unrepresentable T>'``). With the default ``'log'`` they are
reported as ``advice.failed`` and the host call goes on. ``Logged`` applies that policy
around its own steps because it knows where ``proceed()`` is: the core's generic guard
costs a tracking closure on every call, and cannot see inside the coroutine returned for
an ``async`` join point.

Re-entrancy: while ``Logged`` emits its own event (summarising the arguments, rendering,
writing), a call to a ``Logged`` join point is passed straight through, un-logged. Without
that, logging ``json.*`` with JSON log lines would log the renderer's own ``json`` calls,
whose events are rendered with ``json`` again, without end.

``configure_logging`` and ``LEVELS`` live in ``_logging_config``, ``summarize`` in
``_summary``; this module re-exports them.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import logging
import threading
import time
import weakref
from asyncio import CancelledError
from collections.abc import Callable, Collection, Iterable
from contextvars import ContextVar
from types import CoroutineType
from typing import Any

import structlog
import structlog._config

from .. import around
from .._advice import log_own_failure, runs_as_layer
from .._aspect import Aspect, AspectOptions
from .._context import CallContext, Proceed
from .._dispatch import after_error_advice, error_advice_follows
from .._joinpoint import JoinPoint, new_context
from .._typing import Unpack
from ..errors import InvalidOptionError
from ._logging_config import LEVELS, configure_logging
from ._logging_config import _level as _level  # also aspecthook run's (_cli)
from ._logging_config import logger_settings as logger_settings  # also aspecthook run's
from ._summary import _Summary, summarize

__all__ = ["CALL", "LEVELS", "Logged", "configure_logging", "summarize"]

log = structlog.get_logger()

CALL = "call"
"""The default event name of ``Logged``."""

_REDACTED = "***"
# What a call does: nothing (levels off), log failures only, log everything, or ask the
# logger first (its level can change at any time, e.g. a stdlib logger's).
_OFF, _ERRORS_ONLY, _FULL, _ASK = 0, 1, 2, 3

# structlog's global configuration object. ``get_config()`` returns the same
# ``wrapper_class`` but builds a dict per call; the fast path reads the attribute instead
# (one identity check per call). If a future structlog moves it, fall back to the public
# function, which is slower but equally correct.
_CONFIG: Any = getattr(structlog._config, "_CONFIG", None)
if not hasattr(_CONFIG, "default_wrapper_class"):  # pragma: no cover - structlog internals

    class _PublicConfig:
        @property
        def default_wrapper_class(self) -> Any:
            return structlog.get_config()["wrapper_class"]

    _CONFIG = _PublicConfig()

# The join points of the Logged calls in progress, outermost first (per thread and task).
_STACK: ContextVar[tuple[str, ...]] = ContextVar("aspecthook_logged_stack", default=())


class _Emitting(threading.local):
    """Per thread: whether a ``Logged`` aspect is emitting its own event right now.

    A thread-local rather than a context variable: emitting is synchronous, so no other
    task can run on this thread meanwhile, and reading it is cheaper.
    """

    active = False


_EMITTING = _Emitting()


# -- arguments by name -------------------------------------------------------------------


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_Parameters = tuple[tuple[str, ...] | None, inspect.Signature | None]

# Per join point and kind of wrapped callable (a bound method has no self): the names of
# the positional parameters when arguments can simply be zipped onto them (no *args),
# and the signature for the general case.
_PARAMETERS: weakref.WeakKeyDictionary[JoinPoint, dict[type, _Parameters]] = (
    weakref.WeakKeyDictionary()
)


def _parameters(ctx: CallContext) -> _Parameters:
    per_kind = _PARAMETERS.setdefault(ctx.joinpoint, {})
    kind = type(ctx.target)
    found = per_kind.get(kind)
    if found is None:
        try:
            signature: inspect.Signature | None = inspect.signature(ctx.target)
        except (TypeError, ValueError):  # builtins without a signature
            signature = None
        names: tuple[str, ...] | None = None
        if signature is not None:
            params = signature.parameters.values()
            if all(p.kind is not p.VAR_POSITIONAL for p in params):
                names = tuple(p.name for p in params if p.kind in _POSITIONAL)
        found = per_kind[kind] = (names, signature)
    return found


def _named_arguments(ctx: CallContext, parameters: _Parameters) -> dict[str, Any]:
    """The call's arguments by parameter name (``**kwargs`` flattened, ``#0`` for unnamed);
    ``parameters`` are ``_parameters(ctx)``."""
    args, kwargs = ctx._args, ctx.kwargs
    names, signature = parameters
    named: dict[str, Any]
    if names is not None and len(args) <= len(names):  # the common case, without binding
        named = dict(zip(names, args, strict=False))
        named.update(kwargs)
        return named
    if signature is not None:
        try:
            bound = signature.bind_partial(*args, **kwargs)
        except TypeError:
            pass
        else:
            named = {}
            for name, value in bound.arguments.items():
                if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
                    named.update(value)
                else:
                    named[name] = value
            return named
    # A call that does not bind (it fails with TypeError): still name what can be named,
    # so that redaction by name holds for the arguments a secret would be in.
    positional = (
        [p.name for p in signature.parameters.values() if p.kind in _POSITIONAL]
        if signature is not None
        else []
    )
    named = {
        positional[i] if i < len(positional) else f"#{i}": value for i, value in enumerate(args)
    }
    named.update(kwargs)
    return named


def _opaque_positional(parameters: _Parameters) -> str | None:
    """The ``*args`` parameter of a callable (its ``_parameters``) that takes positional
    arguments only through it, such as ``wrapper(*args, **kwargs)`` (a decorator without
    ``functools.wraps``), whose positional arguments no parameter names; else None."""
    names, signature = parameters
    if names is not None or signature is None:  # no *args, or no signature (#0, #1 ...)
        return None
    for parameter in signature.parameters.values():
        if parameter.kind is parameter.VAR_POSITIONAL:
            return parameter.name
        if parameter.kind in _POSITIONAL:
            return None
    return None  # pragma: no cover - names is None only with a *args parameter


def _own_names_if_keywords_redacted(
    parameters: _Parameters, redact: frozenset[str]
) -> Collection[str] | None:
    """The parameter names of a callable (its ``_parameters``) whose ``**kwargs`` parameter
    ``redact`` names: any other name among its arguments came through that parameter.
    None when it has no such parameter, or no signature."""
    signature = parameters[1]
    if signature is None:
        return None
    for parameter in signature.parameters.values():
        if parameter.kind is parameter.VAR_KEYWORD and parameter.name.lower() in redact:
            return signature.parameters.keys()
    return None


# -- levels and options ------------------------------------------------------------------


def _has_fixed_level(bound: Any) -> bool:
    """Whether ``bound`` is a native filtering logger: its class is its level.

    ``make_filtering_bound_logger`` returns one class per level, so a logger whose class
    is the one made for its own effective level can never change level.
    """
    try:
        level = bound.get_effective_level()
        return type(bound) is structlog.make_filtering_bound_logger(level)
    except Exception:
        return False


def _names(option: str, value: object) -> frozenset[str]:
    names = (value,) if isinstance(value, str) else value
    if isinstance(names, Iterable):
        items = tuple(names)
        if all(isinstance(n, str) for n in items):
            return frozenset(n.lower() for n in items)
    raise InvalidOptionError(
        f"{option}={value!r} is not a list of argument names: give e.g. "
        f"{option}=('password', 'token')",
        option=option,
        value=value,
    )


def _positive(option: str, value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise InvalidOptionError(
        f"{option}={value!r} is not a positive int: give {option}=n with n >= 1",
        option=option,
        value=value,
    )


def _structlog_logger(logger: Any, levels: Iterable[str]) -> Any:
    """``logger=`` as given, unless it is a standard library logger (its methods take no
    event fields) or lacks a method for one of ``levels``: every call would fail to log.

    Methods are looked up on the logger's class (or its class's ``__getattr__``, as
    structlog's lazy proxy has), never on the logger: asking a lazy proxy would bind it,
    and with ``cache_logger_on_first_use`` fix the configuration it logs with.
    """
    if isinstance(logger, (logging.Logger, logging.LoggerAdapter)):
        raise InvalidOptionError(
            f"logger={logger!r} is a standard library logger, which takes no event fields: "
            "give a structlog logger, e.g. logger=structlog.wrap_logger(logging.getLogger("
            f"{getattr(logger, 'name', 'name')!r}))",
            option="logger",
            value=logger,
        )
    kind = type(logger)
    for level in levels:
        if not (callable(getattr(kind, level, None)) or hasattr(kind, "__getattr__")):
            raise InvalidOptionError(
                f"logger={logger!r} has no method {level!r} to log at level {level!r}: give "
                "a structlog logger, e.g. logger=structlog.get_logger('app')",
                option="logger",
                value=logger,
            )
    return logger


# -- the aspect --------------------------------------------------------------------------


class Logged(Aspect):
    """Log one structlog event per call of the join points it is woven into.

    ``weave(target, Logged())`` or ``register(Logged(pointcut='json.*'))``. The event
    (``event=``, default ``'call'``) has ``joinpoint``, ``args`` (parameter name -> capped
    summary, see :func:`summarize`; names in ``redact`` show ``'***'``), ``result``,
    ``outcome`` and ``duration_ms``. The outcome is ``'ok'`` (logged at ``level``),
    ``'error'`` for any exception, ``KeyboardInterrupt`` and ``SystemExit`` included
    (logged at ``error_level`` with ``exc_info``, the exception, so structlog renders its
    traceback), ``'recovered'`` for an exception that error advice recovered
    (``ctx.recover``: logged at ``level`` with the ``result`` the caller got and the
    exception summarised as ``error``; this needs every around advice outside ``Logged``
    to be ``Timed`` or ``Logged``, at a synchronous join point, else the call is logged
    as what came out of ``proceed()``, an error; ``docs/known-issues.md``), or
    ``'cancelled'`` for ``asyncio.CancelledError`` (a cancelled task, an expired
    ``asyncio.timeout``: logged at ``level``, without a traceback, as it is how asyncio
    stops work, not a failure).
    An ``async`` call is logged when it completes, and so is a coroutine a synchronous
    callable returns (an async function behind a plain decorator); a generator
    function's call when it returns the generator.

    Context variables ``joinpoint`` (this call) and ``joinpoint_stack`` (the Logged calls
    in progress, outermost first) are bound while the call runs (a returned coroutine
    included, while it is awaited), when ``level`` is enabled. The stack is not capped:
    a recursive join point adds a name per level (``docs/known-issues.md`` says how to
    trim it where events are rendered; a cap would be a test on every logged call).
    With only ``error_level`` enabled, failures are still logged; with neither, the call
    costs a cached level check.

    ``logger=`` is the structlog logger to write to (default: this module's).

    Calls made while a ``Logged`` aspect emits its event (by a renderer, a ``repr``) are
    not logged, so ``Logged`` can log the functions its own logging uses, e.g. ``json.*``
    with ``configure_logging(format='json')``.

    Redaction covers the event, not renderers that print a traceback's local variables
    (structlog's unconfigured console does): :func:`configure_logging` turns them off.
    """

    errors = "log"

    def __init__(
        self,
        *,
        level: str | int = "info",
        error_level: str | int = "error",
        event: str = CALL,
        redact: Iterable[str] = (),
        log_args: bool = True,
        log_result: bool = True,
        max_length: int = 80,
        max_items: int = 8,
        logger: Any = None,
        **options: Unpack[AspectOptions],
    ) -> None:
        super().__init__(**options)  # pointcut, priority, name, errors, order_after/before
        self.level, self._level_no = _level("level", level)
        self.error_level, self._error_level_no = _level("error_level", error_level)
        if not isinstance(event, str) or not event:
            raise InvalidOptionError(
                f"event={event!r} is not an event name: give a non-empty str, e.g. 'call'",
                option="event",
                value=event,
            )
        self.event = event
        self.redact = _names("redact", redact)
        self.log_args = bool(log_args)
        self.log_result = bool(log_result)
        self._summary = _Summary(
            _positive("max_length", max_length), _positive("max_items", max_items)
        )
        self._max_arguments = 4 * max_items
        levels = (self.level, self.error_level)
        self.logger = _structlog_logger(logger, levels) if logger is not None else log
        # Level cache: valid while structlog's wrapper class is the one it was made for.
        self._seen: Any = object()
        self._mode = _FULL
        self._enabled: Callable[[int], bool] | None = None

    # -- advice ------------------------------------------------------------------------

    @around()
    @runs_as_layer("_layer")  # and applies errors= around its own steps, never the target
    def log_call(self, ctx: CallContext, proceed: Proceed) -> Any:
        """Log the call (the fast path when both levels are disabled: just proceed)."""
        if _CONFIG.default_wrapper_class is not self._seen:
            self._safely(ctx, self._refresh_levels)
        mode = self._mode
        if mode == _ASK:
            mode = self._ask_levels()
        if not mode or _EMITTING.active:  # off, or called by our own emission
            return proceed()
        if ctx.joinpoint.is_async:
            return self._log_async(ctx, proceed(), mode, time.perf_counter())
        if mode == _ERRORS_ONLY:
            start = time.perf_counter()
            try:
                result = proceed()
            except BaseException as exc:
                self._emit_failure(ctx, exc, start, None)
                raise
            if type(result) is CoroutineType:  # an async function behind a plain decorator
                return self._log_async(ctx, result, mode, start)
            return result
        return self._log_sync(ctx, proceed)

    def _layer(
        self, jp: JoinPoint, inner: Callable[..., Any] | None, guard: tuple[Any, Any] | None
    ) -> Callable[..., Any]:
        """``log_call`` as a dispatch layer: a ``CallContext`` is built only to log.

        Used when every advice at ``jp`` is a layer (``runs_as_layer``); ``inner`` and
        ``guard`` are explained in ``aspecthook._specialised._layered``. With the level
        disabled a call costs the cached level check and, when failures are logged, one
        clock reading.
        """
        checked = guard is not None
        chain, general = guard if guard is not None else (None, None)
        config, emitting, clock = _CONFIG, _EMITTING, time.perf_counter
        errors_only, full, ask = _ERRORS_ONLY, _FULL, _ASK  # closure cells: no global lookups
        coroutine_type = CoroutineType

        # Long on purpose: ``logged`` runs on every call of the join point, so its steps
        # stay inline (a helper per step would cost a call each, on every call).
        def logged(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            if checked and jp._chain is not chain:
                return general(wrapped, instance, args, kwargs)  # type: ignore[misc]
            if config.default_wrapper_class is not self._seen:
                self._safely(jp, self._refresh_levels)
            mode = self._mode
            if mode == ask:
                mode = self._ask_levels()
            if mode == errors_only:
                start = clock()
                try:
                    if inner is None:
                        result = wrapped(*args, **kwargs)
                    else:
                        result = inner(wrapped, instance, args, kwargs)
                except BaseException as exc:
                    # Read here, not before the call: a call made by our own emission is
                    # not logged, and the flag is the same before and after a call.
                    if not emitting.active:
                        ctx = new_context(jp, wrapped, instance, args, kwargs)
                        self._emit(ctx, self._emit_error, exc, start)
                    raise
                if type(result) is coroutine_type and not emitting.active:
                    ctx = new_context(jp, wrapped, instance, args, kwargs)
                    return self._log_async(ctx, result, errors_only, start)
                return result
            if mode == full and not emitting.active:
                ctx = new_context(jp, wrapped, instance, args, kwargs)
                if inner is None:
                    return self._log_sync(ctx, lambda: wrapped(*args, **kwargs))
                return self._log_sync(ctx, lambda: inner(wrapped, instance, args, kwargs))
            if inner is None:  # off, or called by our own emission
                return wrapped(*args, **kwargs)
            return inner(wrapped, instance, args, kwargs)

        return logged

    def _log_sync(self, ctx: CallContext, proceed: Proceed) -> Any:
        """Log a synchronous call with both levels on; a coroutine it returns (an async
        function behind a plain decorator) is logged when it completes, as an async call."""
        entered = self._safely(ctx, self._enter, ctx)
        try:
            start = time.perf_counter()
            try:
                result = proceed()
            except BaseException as exc:
                self._emit_failure(ctx, exc, start, _STACK.get() if entered else None)
                raise
            if type(result) is CoroutineType:
                return self._log_async(ctx, result, _FULL, start)
            self._emit(ctx, self._emit_ok, result, start)
            return result
        finally:
            if entered is not None:
                self._safely(ctx, self._exit, entered)

    async def _log_async(self, ctx: CallContext, call: Any, mode: int, start: float) -> Any:
        """Await ``call`` (the coroutine of the call, not started yet, or one a synchronous
        callable returned) with the context variables bound, and log it when it completes;
        ``start`` is when the call began."""
        entered = self._safely(ctx, self._enter, ctx) if mode == _FULL else None
        try:
            try:
                result = await call
            except BaseException as exc:
                self._emit(ctx, self._emit_error, exc, start)
                raise
            if mode == _FULL:
                self._emit(ctx, self._emit_ok, result, start)
            return result
        finally:
            if entered is not None:
                self._safely(ctx, self._exit, entered)

    def _emit_failure(
        self, ctx: CallContext, exc: BaseException, start: float, stack: tuple[str, ...] | None
    ) -> None:
        """Log a synchronous call that raised ``exc`` now, or, where error advice follows
        (``error_advice_follows``), once it has run: as recovered if one recovered it.
        ``stack`` is ``joinpoint_stack`` as bound for the call (None: not bound)."""
        if isinstance(exc, Exception) and error_advice_follows(ctx):
            end = time.perf_counter()
            settle = functools.partial(self._emit_settled, ctx, exc, start, end, stack)
            after_error_advice(ctx, settle)
        else:
            self._emit(ctx, self._emit_error, exc, start)

    def _emit_settled(
        self,
        ctx: CallContext,
        exc: BaseException,
        start: float,
        end: float,
        stack: tuple[str, ...] | None,
        recovered: bool,
    ) -> None:
        """Log a failed call once its error advice has run (``_emit_failure``), with the
        context variables of the call bound again, and its duration until it raised."""
        entered = None if stack is None else self._safely(ctx, self._enter_again, stack)
        try:
            step = self._emit_recovered if recovered else self._emit_error
            self._emit(ctx, step, exc, start - (time.perf_counter() - end))
        finally:
            if entered is not None:
                self._safely(ctx, self._exit, entered)

    # -- steps (each run through _safely) ----------------------------------------------

    def _enter(self, ctx: CallContext) -> tuple[Any, ...]:
        name = ctx.joinpoint.name
        stack = (*_STACK.get(), name)
        token = _STACK.set(stack)
        tokens = structlog.contextvars.bind_contextvars(joinpoint=name, joinpoint_stack=stack)
        return token, tokens

    def _enter_again(self, stack: tuple[str, ...]) -> tuple[Any, ...]:
        """``_enter`` once the call has returned: ``stack`` as it was bound for it."""
        token = _STACK.set(stack)
        tokens = structlog.contextvars.bind_contextvars(joinpoint=stack[-1], joinpoint_stack=stack)
        return token, tokens

    def _exit(self, entered: tuple[Any, ...]) -> None:
        token, tokens = entered
        structlog.contextvars.reset_contextvars(**tokens)
        _STACK.reset(token)

    def _emit(self, ctx: CallContext, step: Callable[..., None], *args: Any) -> None:
        """Run an emitting step safely, with calls it makes passed through un-logged."""
        emitting = _EMITTING
        previous, emitting.active = emitting.active, True
        try:
            self._safely(ctx, step, ctx, *args)
        finally:
            emitting.active = previous

    def _emit_ok(self, ctx: CallContext, result: Any, start: float) -> None:
        fields = self._fields(ctx, start)
        if self.log_result:
            fields["result"] = self._summary.summary(result)
        fields["outcome"] = "ok"
        getattr(self.logger, self.level)(self.event, **fields)

    def _emit_error(self, ctx: CallContext, exc: BaseException, start: float) -> None:
        """Log a call that raised ``exc``; a cancelled one (``asyncio.CancelledError``: a
        task cancelled, an ``asyncio.timeout`` expired) is not a failure of the call, so it
        is logged at ``level`` as ``outcome='cancelled'``, with no traceback."""
        if isinstance(exc, CancelledError):
            if self._ask_levels() == _FULL:  # level enabled (errors-only calls come here)
                fields = self._fields(ctx, start)
                fields["outcome"] = "cancelled"
                getattr(self.logger, self.level)(self.event, **fields)
            return
        fields = self._fields(ctx, start)
        fields["outcome"] = "error"
        getattr(self.logger, self.error_level)(self.event, exc_info=exc, **fields)

    def _emit_recovered(self, ctx: CallContext, exc: BaseException, start: float) -> None:
        """Log a call whose exception error advice recovered: the caller got ``result``,
        so it is logged at ``level`` (when enabled), with the exception as ``error``."""
        if self._ask_levels() != _FULL:  # level disabled (errors-only calls come here)
            return
        fields = self._fields(ctx, start)
        if self.log_result:
            fields["result"] = self._summary.summary(ctx.result)
        fields["outcome"] = "recovered"
        fields["error"] = self._summary.summary(exc)
        getattr(self.logger, self.level)(self.event, **fields)

    def _fields(self, ctx: CallContext, start: float) -> dict[str, Any]:
        duration_ms = round((time.perf_counter() - start) * 1e3, 3)
        fields: dict[str, Any] = {"joinpoint": ctx.joinpoint.name}
        if self.log_args:
            fields["args"] = self.summarize_arguments(ctx)
        fields["duration_ms"] = duration_ms
        return fields

    def summarize_arguments(self, ctx: CallContext) -> dict[str, str]:
        """Parameter name -> capped summary of this call's arguments, redaction applied;
        past ``4 * max_items`` arguments (a huge ``**kwargs``) the rest are counted under
        ``'...'``."""
        redact, summary = self.redact, self._summary.summary
        parameters = _parameters(ctx)
        named = _named_arguments(ctx, parameters)
        items: Iterable[tuple[str, Any]] = named.items()
        more = len(named) - self._max_arguments
        if more > 0:
            items = itertools.islice(items, self._max_arguments)
        if not redact:
            shown = {name: summary(value) for name, value in items}
        else:
            # An argument no parameter names (``#2``: a call that does not fit the
            # signature, or a callable without one; the positional arguments of
            # ``(*args, **kwargs)``, a wrapper hiding the real signature) may be any of
            # them: masked.
            # So may every keyword a redacted ``**kwargs`` parameter takes (shown one by one).
            opaque = _opaque_positional(parameters)
            own = _own_names_if_keywords_redacted(parameters, redact)
            shown = {
                name: _REDACTED
                if name.lower() in redact
                or name.startswith("#")
                or name == opaque
                or (own is not None and name not in own)
                else summary(value)
                for name, value in items
            }
        if more > 0:
            shown["..."] = f"<{more} more>"
        return shown

    def _safely(self, point: CallContext | JoinPoint, step: Callable[..., Any], *args: Any) -> Any:
        """Run one of our steps under the ``errors=`` policy; None when it failed."""
        try:
            return step(*args)
        except Exception:
            if self.errors != "log":
                raise
            log_own_failure(self, point)
            return None

    # -- level cache -------------------------------------------------------------------

    def _refresh_levels(self) -> None:
        """Work out, for this structlog configuration, how to tell whether we log.

        structlog's native filtering loggers (``make_filtering_bound_logger``) keep one
        level for the life of their class, so the answer is cached until structlog gets
        another wrapper class. Other loggers with ``is_enabled_for`` (stdlib-backed ones,
        whose level may change at any time) are asked on every call; loggers without it
        are always called and filter for themselves.
        """
        seen = _CONFIG.default_wrapper_class
        bound = self.logger.bind() if hasattr(self.logger, "bind") else self.logger
        enabled = getattr(bound, "is_enabled_for", None)
        self._enabled = enabled
        if enabled is None:
            self._mode = _FULL
        elif _has_fixed_level(bound):
            self._mode = self._ask_levels()
        else:
            self._mode = _ASK
        self._seen = seen

    def _ask_levels(self) -> int:
        enabled = self._enabled
        if enabled is None or enabled(self._level_no):
            return _FULL
        return _ERRORS_ONLY if enabled(self._error_level_no) else _OFF

    def __repr__(self) -> str:
        return f"<Logged {self.name!r} level={self.level!r} error_level={self.error_level!r}>"
