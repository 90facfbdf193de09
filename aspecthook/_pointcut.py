"""Pointcuts: small immutable values that select join points (or event names).

A join point answers to one or more names (its declared name, its dotted path, aliases
given with ``weave(..., name=)``). A pointcut is an exact name, a glob, a predicate, or
``&`` / ``|`` / ``~`` of those. Strings become ``Name`` or ``Glob`` through ``as_pointcut``.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable
from fnmatch import fnmatchcase
from typing import Any, Protocol, TypeAlias

from .errors import InvalidPointcutError

__all__ = [
    "Glob",
    "Name",
    "NormalizedName",
    "Pointcut",
    "PointcutLike",
    "Predicate",
    "PredicateFn",
    "as_pointcut",
]

_GLOB_CHARS = frozenset("*?[")
_NOT_IDENTIFIER = re.compile(r"\W")


class Point(Protocol):
    """What a pointcut looks at: a join point or an event, through its names."""

    @property
    def names(self) -> frozenset[str]: ...


class Pointcut:
    """Base of all pointcuts; combine with ``&``, ``|`` and ``~``."""

    __slots__ = ()

    def matches(self, point: Point) -> bool:
        """Whether this pointcut selects ``point``."""
        raise NotImplementedError

    def literal_names(self) -> Iterable[str]:
        """Exact names this pointcut can only match (for did-you-mean hints)."""
        return ()

    def _globs(self) -> Iterable[str]:
        """Glob patterns this pointcut matches through (``describe()`` lists advice whose
        globs match no join point, as it does for ``literal_names``)."""
        return ()

    def __and__(self, other: PointcutLike) -> Pointcut:
        return _And(self, as_pointcut(other))

    def __or__(self, other: PointcutLike) -> Pointcut:
        return _Or(self, as_pointcut(other))

    def __rand__(self, other: PointcutLike) -> Pointcut:
        return _And(as_pointcut(other), self)

    def __ror__(self, other: PointcutLike) -> Pointcut:
        return _Or(as_pointcut(other), self)

    def __invert__(self) -> Pointcut:
        return _Not(self)

    # Values: ours compare and hash by kind and fields (``Glob('a*') == Glob('a*')``,
    # ``Name('a') | Name('b')`` equal to another such ``|``); a user's subclass keeps
    # identity unless it defines its own.
    def __eq__(self, other: object) -> bool:
        if type(self).__module__ != __name__:
            return self is other
        return type(other) is type(self) and self._values() == other._values()

    def __hash__(self) -> int:
        if type(self).__module__ != __name__:
            return object.__hash__(self)
        try:
            return hash((type(self), self._values()))
        except TypeError:  # a Predicate over an unhashable callable: still a set member
            return hash(type(self))

    def _values(self) -> tuple[object, ...]:
        slots: tuple[str, ...] = type(self).__slots__
        return tuple(getattr(self, slot) for slot in slots)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def _init(self, **fields: object) -> None:
        for key, value in fields.items():
            object.__setattr__(self, key, value)

    # Immutable values: a copy is the value itself, and a pickle rebuilds it past
    # ``__setattr__``, which refuses the default way of restoring fields.
    def __copy__(self) -> Pointcut:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> Pointcut:
        return self

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        cls = type(self)
        if cls.__module__ == __name__:  # ours: each takes its slots, in order, in __init__
            slots: tuple[str, ...] = cls.__slots__
            return cls, tuple(getattr(self, slot) for slot in slots)
        return _rebuild, (cls, _fields(self))  # a user's subclass: its fields as they are


def _fields(pointcut: Pointcut) -> dict[str, object]:
    """The fields of a pointcut: its ``__dict__`` and the slots set, of every class."""
    fields = dict(getattr(pointcut, "__dict__", {}))
    for cls in type(pointcut).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            if slot not in ("__dict__", "__weakref__") and hasattr(pointcut, slot):
                fields[slot] = getattr(pointcut, slot)
    return fields


def _rebuild(cls: type[Pointcut], fields: dict[str, object]) -> Pointcut:
    """A pickled pointcut of a user's subclass, its fields set as ``_init`` sets them."""
    pointcut = cls.__new__(cls)
    pointcut._init(**fields)
    return pointcut


class Name(Pointcut):
    """Selects join points that answer to exactly ``name``."""

    __slots__ = ("name",)
    name: str

    def __init__(self, name: str) -> None:
        self._init(name=_text("Name", name))

    def matches(self, point: Point) -> bool:
        return self.name in point.names

    def literal_names(self) -> Iterable[str]:
        return (self.name,)

    def __repr__(self) -> str:
        return f"Name({self.name!r})"


class NormalizedName(Pointcut):
    """Selects names equal to ``name`` once every non-identifier character becomes ``_``.

    This is how a method ``before_train_iter`` of an ``Aspect`` names its join point, so a
    method ``after_torch_optim_Optimizer_step`` reaches ``'torch.optim.Optimizer.step'``.
    """

    __slots__ = ("name",)
    name: str

    def __init__(self, name: str) -> None:
        self._init(name=name)

    def matches(self, point: Point) -> bool:
        target = self.name
        return any(_NOT_IDENTIFIER.sub("_", n) == target for n in point.names)

    def literal_names(self) -> Iterable[str]:
        return (self.name,)

    def __repr__(self) -> str:
        return f"NormalizedName({self.name!r})"


class Glob(Pointcut):
    """Selects names matching a shell-style pattern (``'train_*'``, ``'*.forward'``)."""

    __slots__ = ("pattern",)
    pattern: str

    def __init__(self, pattern: str) -> None:
        self._init(pattern=_text("Glob", pattern))

    def matches(self, point: Point) -> bool:
        pattern = self.pattern
        return any(fnmatchcase(n, pattern) for n in point.names)

    def _globs(self) -> Iterable[str]:
        return (self.pattern,)

    def __repr__(self) -> str:
        return f"Glob({self.pattern!r})"


#: A predicate pointcut's function. It is given a ``JoinPoint``, an ``Event`` (for event
#: subscriptions) or a recorded call's join point that also reads as its ``testing.Call``
#: (``Recorder.calls_to``), so its parameter is
#: typed ``Any``: ``def mine(jp: JoinPoint) -> bool`` and ``lambda jp: jp.name ...`` both
#: fit. Its result is read for truth, so any object will do.
PredicateFn: TypeAlias = Callable[[Any], object]


class Predicate(Pointcut):
    """Selects the points for which ``fn(point)`` is true."""

    __slots__ = ("fn",)
    fn: PredicateFn

    def __init__(self, fn: PredicateFn) -> None:
        if not callable(fn):
            raise InvalidPointcutError(
                f"Predicate({fn!r}) needs a callable taking the join point and returning a bool"
            )
        _check_takes_one(fn)
        self._init(fn=fn)

    def matches(self, point: Point) -> bool:
        return bool(self.fn(point))

    def __repr__(self) -> str:
        return f"Predicate({getattr(self.fn, '__qualname__', self.fn)!r})"


class _And(Pointcut):
    __slots__ = ("left", "right")
    left: Pointcut
    right: Pointcut

    def __init__(self, left: Pointcut, right: Pointcut) -> None:
        self._init(left=left, right=right)

    def matches(self, point: Point) -> bool:
        return self.left.matches(point) and self.right.matches(point)

    def __repr__(self) -> str:
        return f"({self.left!r} & {self.right!r})"


class _Or(Pointcut):
    __slots__ = ("left", "right")
    left: Pointcut
    right: Pointcut

    def __init__(self, left: Pointcut, right: Pointcut) -> None:
        self._init(left=left, right=right)

    def matches(self, point: Point) -> bool:
        return self.left.matches(point) or self.right.matches(point)

    def literal_names(self) -> Iterable[str]:
        return (*self.left.literal_names(), *self.right.literal_names())

    def _globs(self) -> Iterable[str]:
        return (*self.left._globs(), *self.right._globs())

    def __repr__(self) -> str:
        return f"({self.left!r} | {self.right!r})"


class _Not(Pointcut):
    __slots__ = ("inner",)
    inner: Pointcut

    def __init__(self, inner: Pointcut) -> None:
        self._init(inner=inner)

    def matches(self, point: Point) -> bool:
        return not self.inner.matches(point)

    def __repr__(self) -> str:
        return f"~{self.inner!r}"


PointcutLike: TypeAlias = Pointcut | str | PredicateFn


def _text(kind: str, value: object) -> str:
    if isinstance(value, str):
        return value
    raise InvalidPointcutError(
        f"{kind}({value!r}) needs a string ({type(value).__name__} given): "
        "e.g. Name('train_iter') or Glob('train_*')"
    )


def as_pointcut(value: object) -> Pointcut:
    """Turn a name, glob, pointcut or predicate into a ``Pointcut``."""
    if isinstance(value, Pointcut):
        return value
    if isinstance(value, str):
        if not value or value != value.strip():
            raise InvalidPointcutError(
                f"pointcut {value!r} is empty or has surrounding spaces: "
                "give a join point name such as 'train_iter' or a glob such as 'train_*'"
            )
        if _GLOB_CHARS.intersection(value):
            return Glob(value)
        return Name(value)
    if callable(value):
        woven = _woven_name(value)
        return Name(woven) if woven is not None else Predicate(value)
    raise InvalidPointcutError(
        f"{value!r} ({type(value).__name__}) is not a pointcut: give a join point name, "
        "a glob ('train_*'), a Pointcut, or a predicate taking the join point"
    )


def _woven_name(value: object) -> str | None:
    """The join point name of a woven callable (``before(f)`` after ``weave(f)`` means the
    advice goes where ``f`` is woven), or None for any other callable, a predicate.

    Without this a woven function was taken for a predicate: called with every join point
    (its advice running at registration) and matching wherever it returned something true.
    """
    from ._proxy import _BoundJoinPointProxy, find_proxy  # the proxy module needs this one

    if type(value) is _BoundJoinPointProxy:  # ``obj.method`` of a woven method
        value = value._self_parent
    proxy = find_proxy(value)
    if proxy is None:
        return None
    name: str = proxy._self_joinpoint.name
    return name


def _check_takes_one(fn: Callable[..., object]) -> None:
    """Refuse, at registration, a predicate that cannot be called with one argument."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins and C callables have none: trust them
        return
    try:
        signature.bind(None)
    except TypeError:
        name = getattr(fn, "__name__", repr(fn))
        params = signature.replace(return_annotation=inspect.Signature.empty)
        raise InvalidPointcutError(
            f"{name}{params} cannot be a pointcut: a callable given as a pointcut is a "
            "predicate, called with one argument (the join point) and returning a bool; to "
            "select a function's own calls, weave it (weave(f) or weave('module.f')) and "
            "give it or its name"
        ) from None
