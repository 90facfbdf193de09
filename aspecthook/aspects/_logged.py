"""``Logged``: one structlog event per call, and ``configure_logging`` for where it goes.

The event carries the join point, a size-capped summary of the arguments and the result,
the duration and the outcome, and on failure the exception itself as ``exc_info`` (the
exception propagates unchanged). While the call runs, ``joinpoint`` and
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
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import reprlib
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from typing import Any, TextIO

import structlog
import structlog._config
import structlog.tracebacks

from .. import around
from .._advice import log_own_failure, runs_as_layer
from .._aspect import Aspect
from .._context import CallContext, Proceed
from .._handle import Handle
from .._joinpoint import JoinPoint, new_context
from ..errors import InvalidOptionError

__all__ = ["CALL", "LEVELS", "Logged", "configure_logging", "summarize"]

log = structlog.get_logger()

CALL = "call"
"""The default event name of ``Logged``."""

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
"""Level names ``Logged`` and ``configure_logging`` take, with structlog's numbers."""

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


# -- summaries ---------------------------------------------------------------------------


_SCALARS = frozenset((bool, float, complex, type(None)))
_BIG_INT = 10**18


class _Summary(reprlib.Repr):
    """``reprlib`` with our caps: long text and big containers become type and length,
    array-likes (``shape`` and ``dtype``) type, shape and dtype, and a failing ``repr``
    ``'<unrepresentable T>'``. Nothing is ever converted whole."""

    _SIZED = (list, tuple, dict, set, frozenset, deque)

    def __init__(self, max_length: int, max_items: int) -> None:
        super().__init__()
        self.maxlevel = 3
        self.maxstring = self.maxother = self.maxlong = max_length
        self.maxtuple = self.maxlist = self.maxset = self.maxfrozenset = max_items
        self.maxdeque = self.maxdict = self.maxarray = max_items
        self.limit = 4 * max_length

    def repr1(self, x: Any, level: int) -> str:
        kind = type(x)  # the common small values first, without reprlib's dispatch
        if kind in _SCALARS or (kind is int and -_BIG_INT < x < _BIG_INT):
            return repr(x)
        if kind is str and len(x) <= self.maxstring:
            return repr(x)
        try:
            array = _array_summary(x)
            if array is not None:
                return array
            # reprlib sorts sets and dict keys before slicing: never on big ones.
            if isinstance(x, self._SIZED) and len(x) > self.maxlist:
                return f"<{type(x).__qualname__} len={len(x)}>"
            return str(super().repr1(x, level))
        except Exception:
            return _unrepresentable(x)

    def repr_str(self, x: str, level: int) -> str:
        if len(x) <= self.maxstring:
            return repr(x)
        return f"<str len={len(x)} {super().repr_str(x, level)}>"

    def repr_bytes(self, x: bytes | bytearray, level: int) -> str:
        if len(x) <= self.maxstring:
            return repr(x)
        head = repr(bytes(x[: self.maxstring - 3]))[:-1]  # a slice: never the whole buffer
        return f"<{type(x).__qualname__} len={len(x)} {head}...'>"

    repr_bytearray = repr_bytes

    def repr_memoryview(self, x: memoryview, level: int) -> str:
        # Its bytes, however many dimensions and whatever item format: nbytes and a cast
        # view slice only what is shown.
        flat = x.cast("B") if x.c_contiguous else None
        if flat is None:
            return f"<memoryview nbytes={x.nbytes} format={x.format!r} shape={x.shape}>"
        if x.nbytes <= self.maxstring:
            return repr(flat.tobytes())
        head = repr(flat[: self.maxstring - 3].tobytes())[:-1]
        return f"<memoryview nbytes={x.nbytes} {head}...'>"

    def repr_instance(self, x: Any, level: int) -> str:
        try:
            text = repr(x)
        except Exception:
            return _unrepresentable(x)
        if len(text) > self.maxother:
            return text[: self.maxother - 3] + "..."
        return text

    def summary(self, x: Any) -> str:
        text = self.repr1(x, self.maxlevel)
        return text if len(text) <= self.limit else text[: self.limit - 3] + "..."


def _unrepresentable(x: Any) -> str:
    return f"<unrepresentable {type(x).__qualname__}>"


def _array_summary(x: Any) -> str | None:
    """``'<Tensor shape=(2, 3) dtype=torch.float32>'`` for tensors and arrays, else None."""
    if isinstance(x, type) or not (hasattr(x, "shape") and hasattr(x, "dtype")):
        return None
    shape = x.shape
    try:
        shape = tuple(shape)
    except TypeError:
        pass
    if shape == ():  # a scalar (numpy.float32(1.5)): its value says more
        return None
    return f"<{type(x).__qualname__} shape={shape} dtype={x.dtype}>"


_DEFAULT_SUMMARY = _Summary(max_length=80, max_items=8)


def summarize(value: Any, *, max_length: int = 80, max_items: int = 8) -> str:
    """The capped text ``Logged`` shows for ``value``; never raises, never dumps big data.

    Strings over ``max_length`` and containers over ``max_items`` items are summarised
    with their type and length, objects with ``shape`` and ``dtype`` (tensors, arrays) by
    type, shape and dtype, and a ``repr`` that raises as ``'<unrepresentable T>'``.
    """
    if max_length == 80 and max_items == 8:
        return _DEFAULT_SUMMARY.summary(value)
    return _Summary(max_length, max_items).summary(value)


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


def _named_arguments(ctx: CallContext) -> dict[str, Any]:
    """The call's arguments by parameter name (``**kwargs`` flattened, ``#0`` for unnamed)."""
    args, kwargs = ctx._args, ctx.kwargs
    names, signature = _parameters(ctx)
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


# -- levels ------------------------------------------------------------------------------


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


def _level(option: str, value: object) -> tuple[str, int]:
    name = value.lower() if isinstance(value, str) else value
    for level_name, number in LEVELS.items():
        if name in (level_name, number):
            return level_name, number
    raise InvalidOptionError(
        f"{option}={value!r} is not a log level: use one of {', '.join(map(repr, LEVELS))}",
        option=option,
        value=value,
    )


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


# -- the aspect --------------------------------------------------------------------------


class Logged(Aspect):
    """Log one structlog event per call of the join points it is woven into.

    ``weave(target, Logged())`` or ``register(Logged(pointcut='json.*'))``. The event
    (``event=``, default ``'call'``) has ``joinpoint``, ``args`` (parameter name -> capped
    summary, see :func:`summarize`; names in ``redact`` show ``'***'``), ``result``,
    ``outcome`` (``'ok'`` or ``'error'``) and ``duration_ms``; a failure adds
    ``exc_info`` (the exception, so structlog renders its traceback) and is logged at
    ``error_level``, a success at ``level``. An ``async`` call is logged when it
    completes; a generator function's call when it returns the generator.

    Context variables ``joinpoint`` (this call) and ``joinpoint_stack`` (the Logged calls
    in progress, outermost first) are bound while the call runs, when ``level`` is
    enabled. With only ``error_level`` enabled, failures are still logged; with neither,
    the call costs a cached level check.

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
        **options: Any,
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
        self.logger = logger if logger is not None else log
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
            return self._log_async(ctx, proceed, mode)
        if mode == _ERRORS_ONLY:
            start = time.perf_counter()
            try:
                return proceed()
            except BaseException as exc:
                self._emit(ctx, self._emit_error, exc, start)
                raise
        return self._log_sync(ctx, proceed)

    def _layer(
        self, jp: JoinPoint, inner: Callable[..., Any] | None, guard: tuple[Any, Any] | None
    ) -> Callable[..., Any]:
        """``log_call`` as a dispatch layer: a ``CallContext`` is built only to log.

        Used when every advice at ``jp`` is a layer (``runs_as_layer``); ``inner`` and
        ``guard`` are explained in ``aspecthook._joinpoint._layered``. With the level
        disabled a call costs the cached level check and, when failures are logged, one
        clock reading.
        """
        checked = guard is not None
        chain, general = guard if guard is not None else (None, None)
        config, emitting, clock = _CONFIG, _EMITTING, time.perf_counter
        errors_only, full, ask = _ERRORS_ONLY, _FULL, _ASK  # closure cells: no global lookups

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
                        return wrapped(*args, **kwargs)
                    return inner(wrapped, instance, args, kwargs)
                except BaseException as exc:
                    # Read here, not before the call: a call made by our own emission is
                    # not logged, and the flag is the same before and after a call.
                    if not emitting.active:
                        ctx = new_context(jp, wrapped, instance, args, kwargs)
                        self._emit(ctx, self._emit_error, exc, start)
                    raise
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
        entered = self._safely(ctx, self._enter, ctx)
        try:
            start = time.perf_counter()
            try:
                result = proceed()
            except BaseException as exc:
                self._emit(ctx, self._emit_error, exc, start)
                raise
            self._emit(ctx, self._emit_ok, result, start)
            return result
        finally:
            if entered is not None:
                self._safely(ctx, self._exit, entered)

    async def _log_async(self, ctx: CallContext, proceed: Proceed, mode: int) -> Any:
        entered = self._safely(ctx, self._enter, ctx) if mode == _FULL else None
        try:
            start = time.perf_counter()
            try:
                result = await proceed()
            except BaseException as exc:
                self._emit(ctx, self._emit_error, exc, start)
                raise
            if mode == _FULL:
                self._emit(ctx, self._emit_ok, result, start)
            return result
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
        fields = self._fields(ctx, start)
        fields["outcome"] = "error"
        getattr(self.logger, self.error_level)(self.event, exc_info=exc, **fields)

    def _fields(self, ctx: CallContext, start: float) -> dict[str, Any]:
        duration_ms = round((time.perf_counter() - start) * 1e3, 3)
        fields: dict[str, Any] = {"joinpoint": ctx.joinpoint.name}
        if self.log_args:
            fields["args"] = self.summarize_arguments(ctx)
        fields["duration_ms"] = duration_ms
        return fields

    def summarize_arguments(self, ctx: CallContext) -> dict[str, str]:
        """Parameter name -> capped summary of this call's arguments, redaction applied."""
        redact, summary = self.redact, self._summary.summary
        # An argument no parameter names (``#2``: a call that does not fit the signature,
        # or a callable without one) may be any of them: masked whenever redact= is set.
        return {
            name: _REDACTED
            if name.lower() in redact or (redact and name.startswith("#"))
            else summary(value)
            for name, value in _named_arguments(ctx).items()
        }

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


# -- configuration -------------------------------------------------------------------------


def configure_logging(
    format: str = "console",
    level: str | int = "info",
    file: str | os.PathLike[str] | TextIO | None = None,
) -> Handle:
    """Configure structlog for humans (``'console'``) or machines (``'json'`` lines).

    Both use structlog's conventions: ``merge_contextvars`` (so ``Logged``'s context
    shows), ``add_log_level``, ``StackInfoRenderer``, a ``TimeStamper`` and
    ``make_filtering_bound_logger(level)``. ``'console'`` is what structlog does when
    unconfigured (local time, ``ConsoleRenderer``, colours on a terminal) plus the level;
    ``'json'`` writes one JSON object per line with an ISO UTC timestamp and the traceback
    as data (``dict_tracebacks``). Tracebacks leave out local variables, which would show
    the raw arguments ``redact=`` hides (and uncapped ones). Output goes to ``file`` (a
    path, opened for appending, or an open text stream) or to stderr.

    Returns a handle whose ``remove()`` restores the previous configuration and closes a
    file opened here. Handles may be removed in any order: the newest configuration still
    in place stays in force (the one from before them all once every one is removed).
    """
    level_name, _ = _level("level", level)
    if format not in ("console", "json"):
        raise InvalidOptionError(
            f"format={format!r} is not a log format: use 'console' for humans or 'json' for "
            "JSON lines",
            option="format",
            value=format,
        )
    opened: TextIO | None = None
    if file is None:
        stream: TextIO = sys.stderr
    elif isinstance(file, (str, os.PathLike)):
        stream = opened = open(file, "a", encoding="utf-8")  # noqa: SIM115 - the handle closes it
    else:
        stream = file
    config: dict[str, Any] = {
        **logger_settings(format, level_name, stream),
        "logger_factory": structlog.WriteLoggerFactory(file=stream),
        "cache_logger_on_first_use": False,
    }
    mine = _Configured(config, structlog.is_configured(), structlog.get_config())
    with _CONFIGURED_LOCK:
        _CONFIGURED.append(mine)
        structlog.configure(**config)

    def undo() -> None:
        # Each handle puts back what it replaced. Removed out of order, its place in the
        # chain is taken by what it replaced: the handle made after it, if it replaced
        # this one's configuration, restores that instead, so no configuration whose file
        # is closed ever comes back (and one the program set in between does).
        with _CONFIGURED_LOCK:
            index = _CONFIGURED.index(mine)
            if index == len(_CONFIGURED) - 1:
                if mine.was_configured:
                    structlog.configure(**mine.previous)
                else:
                    structlog.reset_defaults()
            else:
                # What the next handle replaced that was this one's goes back to what this
                # one replaced (all of it, or the parts the program left in between).
                after = _CONFIGURED[index + 1]
                shared = [k for k in _SPLICED if after.previous.get(k) is config[k]]
                if len(shared) == len(_SPLICED):
                    after.was_configured, after.previous = mine.was_configured, mine.previous
                elif shared:
                    after.previous = {**after.previous, **{k: mine.previous[k] for k in shared}}
            del _CONFIGURED[index]
        if opened is not None:
            opened.close()

    return Handle(undo, f"configure_logging({format!r}, {level_name!r})")


class _Configured:
    """One configure_logging handle's configuration and the one it replaced."""

    __slots__ = ("config", "previous", "was_configured")

    def __init__(self, config: dict[str, Any], was_configured: bool, previous: dict[str, Any]):
        self.config = config
        self.was_configured = was_configured
        self.previous = previous


# The configure_logging handles not yet removed, oldest first.
_CONFIGURED: list[_Configured] = []
# The settings of a configure_logging configuration that are objects of its own.
_SPLICED = ("processors", "wrapper_class", "logger_factory")
_CONFIGURED_LOCK = threading.Lock()


def logger_settings(format: str, level_name: str, stream: TextIO) -> dict[str, Any]:
    """The processors and level filter of ``configure_logging``'s structlog set-up for
    ``stream``; also for a logger of its own (``aspecthook run``'s ``Logged``)."""
    return {
        "processors": _processors(format, stream),
        "wrapper_class": structlog.make_filtering_bound_logger(level_name),
    }


def _processors(format: str, stream: TextIO) -> list[Any]:
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.StackInfoRenderer(),
    ]
    if format == "json":
        no_locals = structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
        return [
            *processors,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.ExceptionRenderer(no_locals),  # dict_tracebacks, no locals
            structlog.processors.JSONRenderer(),
        ]
    return [
        *processors,
        structlog.dev.set_exc_info,
        structlog.processors.TimeStamper(fmt="%Y-%m-%d %H:%M:%S", utc=False),
        _console_renderer(stream),
    ]


def _console_renderer(stream: TextIO) -> structlog.dev.ConsoleRenderer:
    """structlog's ConsoleRenderer, coloured by its own rule but judged on our stream, and
    with Rich tracebacks (when Rich is installed) that leave out local variables."""
    isatty = getattr(stream, "isatty", None)
    tty = bool(isatty and isatty())
    colors = not os.environ.get("NO_COLOR") and bool(tty or os.environ.get("FORCE_COLOR"))
    options: dict[str, Any] = {} if colors else {"colors": False}
    if importlib.util.find_spec("rich") is not None:
        options["exception_formatter"] = structlog.dev.RichTracebackFormatter(
            show_locals=False, color_system="truecolor" if colors else None
        )
    return structlog.dev.ConsoleRenderer(**options)
