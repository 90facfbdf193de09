"""The checks an advice's options and function pass when the advice is made.

Separate from ``_advice`` because none of this runs per call: each check runs once, at
registration, so that a mistake surfaces where it is made, with a message that names the
option (or prints the function's signature) and says what to give instead.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .errors import AdviceSignatureError, InvalidOptionError

if TYPE_CHECKING:
    from ._advice import AdviceKind

__all__ = [
    "_EXPECTED",
    "_check_callable",
    "_check_errors",
    "_check_every",
    "_check_name",
    "_check_once",
    "_check_order_self",
    "_check_rank",
    "_check_window",
    "_names",
    "check_signature",
    "is_coroutine_function",
]

_EXPECTED = {
    "before": "(ctx)",
    "after": "(ctx)",
    "on_error": "(ctx)",
    "around": "(ctx, proceed)",
    "on": "(event)",
}
_ERRORS = ("raise", "log")


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


def _check_once(once: object) -> bool:
    if isinstance(once, bool):
        return once
    raise InvalidOptionError(
        f"once={once!r} is not a bool: give once=True to run the advice on the first call "
        "its other filters let by (with every=n, the n-th call) only, or leave it out",
        option="once",
        value=once,
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


def _check_name(option: str, name: object) -> str | None:
    """``name=`` of advice or an aspect: a string (or None, for the default)."""
    if name is None or isinstance(name, str):
        return name
    raise InvalidOptionError(
        f"{option}={name!r} is not a string: give a name such as {option}='warmup', by "
        "which describe() shows it and order_after / order_before refer to it",
        option=option,
        value=name,
    )


def _check_callable(option: str, value: object) -> Any:
    """A ``when=``-style predicate: a plain callable. It is tested synchronously before the
    advice runs (at async join points too), so a coroutine function is refused: its
    coroutine, never awaited, would count as true on every call."""
    if is_coroutine_function(value):
        raise InvalidOptionError(
            f"{option}={value!r} is a coroutine function, but it is tested synchronously "
            "before the advice runs, so its coroutine would count as true on every call: "
            "give a plain function taking ctx and returning a bool, and await inside the "
            "advice instead",
            option=option,
            value=value,
        )
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
            f"{option}={names!r} must be a name or a tuple, list or set of aspect/advice names",
            option=option,
            value=names,
        )
    return tuple(str(n) for n in result)


def _check_order_self(
    name: str, aspect_name: str | None, order_after: tuple[str, ...], order_before: tuple[str, ...]
) -> None:
    """Refuse ``order_after=`` / ``order_before=`` naming the advice itself (its name or
    its aspect's): ordering never compares advice with itself, so the name did nothing."""
    for option, names in (("order_after", order_after), ("order_before", order_before)):
        own = [n for n in names if n in (name, aspect_name)]
        if not own:
            continue
        whose = f"its aspect {aspect_name!r}" if own[0] == aspect_name else "the advice itself"
        hint = (
            f"; to order it among its aspect's other advice, name that advice "
            f"({option}='{aspect_name}.<method>')"
            if aspect_name
            else "; if you mean other advice of that name, give this one another name="
        )
        raise InvalidOptionError(
            f"{option}={names!r} of advice {name!r} names {whose}, which it cannot run "
            f"before or after: remove {own[0]!r} from {option}{hint}",
            option=option,
            value=names,
        )


def is_coroutine_function(fn: Any) -> bool:
    """Whether ``fn`` is a coroutine function: an ``async def`` function or method, or an
    object whose class's ``__call__`` is one. (One behind a plain decorator cannot be told
    from a synchronous wrapper that runs it to completion; its coroutine is handled when
    it is returned, see ``_advice_wrappers``.)"""
    if inspect.iscoroutinefunction(fn):
        return True
    if not callable(fn) or inspect.isroutine(fn) or isinstance(fn, type):
        return False
    return inspect.iscoroutinefunction(type(fn).__call__)


def check_signature(fn: Callable[..., Any], kind: AdviceKind, target: str) -> None:
    """Refuse, at registration, a function that cannot be called as its kind calls it."""
    if not callable(fn):
        raise AdviceSignatureError(
            f"{kind} advice for {target} must be callable, got {fn!r}",
            advice=repr(fn),
            signature="",
            expected=_EXPECTED[kind],
        )
    if kind == "on" and is_coroutine_function(fn):
        name = getattr(fn, "__qualname__", repr(fn))
        raise AdviceSignatureError(
            f"on advice {name} for {target} is a coroutine function, but emit() calls its "
            "subscribers synchronously and would only create the coroutine, never run it: "
            f"define it with def (and start async work from it, e.g. with "
            "asyncio.get_running_loop().create_task(...))",
            advice=name,
            signature="async",
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
            f"{name}{expected}: define it as {_definition(fn, expected)}",
            advice=name,
            signature=str(signature),
            expected=expected,
        ) from None


def _definition(fn: Any, expected: str) -> str:
    """The ``def`` line to write for ``fn``: ``def name(ctx)``, or ``def name(self, ctx)``
    for a method bound to an instance (an aspect's) and ``def name(cls, ctx)`` for a
    classmethod, whose signature as checked leaves that first parameter out."""
    name = getattr(fn, "__name__", "fn")
    if not inspect.ismethod(fn):
        return f"def {name}{expected}"
    first = "cls" if isinstance(fn.__self__, type) else "self"
    return f"def {name}({first}, {expected[1:]}"


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
