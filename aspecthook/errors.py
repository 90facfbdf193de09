"""Exceptions raised by aspecthook.

Every error derives from :class:`AspectHookError` and also from the builtin a caller would
naturally catch (``TypeError`` for a wrong kind of value, ``ValueError`` for a bad value,
``LookupError`` for something that cannot be found), so ``except TypeError`` keeps working
for code that does not know about aspecthook. Messages end with what to do.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AdviceSignatureError",
    "AspectDefinitionError",
    "AspectHookError",
    "AspectParameterError",
    "CheckpointNotFoundError",
    "ConfigError",
    "InvalidOptionError",
    "InvalidPointcutError",
    "OrderingCycleError",
    "RunnerError",
    "UnknownAspectError",
    "UnknownPriorityError",
    "UnsupportedAdviceError",
    "WeaveTargetError",
    "WeaverClosedError",
]


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement


class AspectHookError(Exception):
    """Base class of every error aspecthook raises on purpose."""

    def __reduce__(self) -> tuple[Any, ...]:
        # The default pickles ``cls(*args)``, which the keyword-only details of most
        # subclasses refuse: an error raised in a worker process would break the pool
        # instead of reaching the parent. Rebuilt without __init__, details and all.
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


def _rebuild(cls: type[AspectHookError], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    """An unpickled ``AspectHookError``: its message and attributes, as raised."""
    base: Any = cls
    while base.__flags__ & _HEAPTYPE:  # the builtin whose __new__ lays the object out
        base = base.__base__
    error = base.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


class AdviceSignatureError(AspectHookError, TypeError):
    """An advice function cannot be called the way its kind calls it.

    Raised at registration, never at the first call, so the mistake shows where it is made.
    """

    def __init__(self, message: str, *, advice: str, signature: str, expected: str) -> None:
        super().__init__(message)
        self.advice = advice
        self.signature = signature
        self.expected = expected


class UnknownPriorityError(AspectHookError, ValueError):
    """A priority is neither a ``Priority`` name nor an int in 0..100."""

    def __init__(self, message: str, *, value: object) -> None:
        super().__init__(message)
        self.value = value


class InvalidOptionError(AspectHookError, ValueError):
    """An advice option (``every=``, ``errors=``, ``when=`` ...) has a value it cannot take."""

    def __init__(self, message: str, *, option: str, value: object) -> None:
        super().__init__(message)
        self.option = option
        self.value = value


class InvalidPointcutError(AspectHookError, TypeError):
    """Something given as a pointcut is not a name, a glob, a pointcut or a predicate."""


class OrderingCycleError(AspectHookError, ValueError):
    """``order_after=`` / ``order_before=`` constraints contradict each other.

    ``cycle`` lists the advice or aspect names around the cycle, first name repeated last.
    """

    def __init__(self, message: str, *, cycle: tuple[str, ...]) -> None:
        super().__init__(message)
        self.cycle = cycle


class AspectDefinitionError(AspectHookError, TypeError):
    """An ``Aspect`` subclass or instance is used in a way its advice does not allow."""


class WeaveTargetError(AspectHookError, LookupError):
    """A weave target cannot be found, located or woven.

    Raised for a missing target only with ``strict=True``; otherwise the target is skipped,
    logged and shown as ``skipped`` by ``describe()``.
    """

    def __init__(self, message: str, *, target: str) -> None:
        super().__init__(message)
        self.target = target


class WeaverClosedError(AspectHookError, RuntimeError):
    """A closed ``Weaver`` was given a registration, or the default weaver was closed.

    ``close()`` removes everything a weaver holds and stops it reaching join points, so a
    registration on it afterwards (advice, an aspect, a weave, a join point) is refused
    rather than half-working. The default weaver is never closed: the module-level
    functions register on it for the life of the process. A ``RuntimeError``, as for
    other objects used after they were shut. ``weaver`` is the weaver's name and
    ``operation`` what was refused (``'register'``, ``'before'``, ``'weave'``, ``'close'``...).
    """

    def __init__(self, message: str, *, weaver: str, operation: str) -> None:
        super().__init__(message)
        self.weaver = weaver
        self.operation = operation


class UnsupportedAdviceError(AspectHookError, TypeError):
    """Advice of a kind, or a call-context operation, the join point cannot carry out.

    Raised for ``around`` / ``on_error`` advice and ``ctx.skip()`` on an ``nn.Module``
    woven through torch's module hooks, which run before and after ``forward`` and
    ``backward`` but never around them, and for ``ctx.proceed()`` at an async join point
    (around advice there calls the ``proceed`` it receives) or from advice that is not
    around advice (only around advice runs the target), ``ctx.skip()`` from error advice
    and ``ctx.recover()`` where no exception is being handled. ``kind`` is the advice kind
    (or ``'skip'`` / ``'proceed'`` / ``'recover'``) and ``target`` names the join point.
    """

    def __init__(self, message: str, *, kind: str, target: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.target = target


class RunnerError(AspectHookError, ValueError):
    """A training runner was given parts it cannot train with, or its run cannot go on.

    Raised before any training starts (limits, scheduler, work_dir, resume path), at the
    first step whose result is not a loss, or during the run when a part fails there (a
    metric that is not a number, a checkpoint write that failed, a training aspect called
    outside a run).
    """


class CheckpointNotFoundError(RunnerError, FileNotFoundError):
    """``Checkpoint(resume=path)`` names a file or folder that does not exist.

    Raised when the aspect is built, before any training starts; ``path`` is what was
    given. A ``RunnerError`` (the runner cannot start as configured) and a
    ``FileNotFoundError`` (what ``open()`` would have raised).
    """

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class UnknownAspectError(AspectHookError, LookupError):
    """An aspect type name is neither registered, nor a plugin, nor an importable path.

    ``name`` is what was asked for, ``known`` the registered names and ``suggestion`` the
    closest of them (or None).
    """

    def __init__(
        self, message: str, *, name: str, known: tuple[str, ...], suggestion: str | None
    ) -> None:
        super().__init__(message)
        self.name = name
        self.known = known
        self.suggestion = suggestion


class AspectParameterError(AspectHookError, TypeError):
    """An aspect type was given parameters its constructor does not take.

    Raised before the constructor runs; ``aspect`` names the type, ``parameters`` the
    offending names and ``valid`` the ones it accepts.
    """

    def __init__(
        self,
        message: str,
        *,
        aspect: str,
        parameters: tuple[str, ...],
        valid: tuple[str, ...],
    ) -> None:
        super().__init__(message)
        self.aspect = aspect
        self.parameters = parameters
        self.valid = valid


class ConfigError(AspectHookError, ValueError):
    """A config file (``aspecthook run --aspects FILE``, ``Runner.from_config``) cannot be used.

    ``file`` is the file, ``key`` the key path of the bad value (``weave[1].aspects[0].type``,
    empty for the whole file); the message says what is valid there.
    """

    def __init__(self, message: str, *, file: str, key: str) -> None:
        super().__init__(message)
        self.file = file
        self.key = key
