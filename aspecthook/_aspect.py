"""Aspects: classes that bundle the advice of one concern.

Advice inside an ``Aspect`` is either a method marked with a decorator (``@before(...)``
in the class body only marks it) or a method named ``<kind>_<join point>``
(``before_train_iter``, ``after_run``, ``on_error_train_iter``, ``around_val_epoch``).
Advice objects are made per aspect instance, bound to it, when the instance is registered.
"""

from __future__ import annotations

import inspect
import re
from typing import Any, Never, TypedDict

from ._advice import Advice, AdviceKind, OrderNames
from ._advice_checks import _check_errors, _check_name, _names
from ._pointcut import NormalizedName, Pointcut, PointcutLike, as_pointcut
from ._priority import Priority, PriorityLike, resolve_priority
from .errors import AspectDefinitionError, AspectParameterError

__all__ = ["MARK", "Aspect", "AspectOptions", "snake_case"]

MARK = "__aspecthook_advice__"
_PREFIXES: tuple[tuple[str, AdviceKind], ...] = (
    ("on_error_", "on_error"),
    ("before_", "before"),
    ("after_", "after"),
    ("around_", "around"),
)


def snake_case(name: str) -> str:
    """``'EarlyStoppingHook'`` -> ``'early_stopping_hook'``."""
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


class AspectOptions(TypedDict, total=False):
    """The options every ``Aspect`` takes, for a subclass that passes them on: with
    ``def __init__(self, size: int = 1, **options: Unpack[AspectOptions])`` a type
    checker refuses a misspelt option or a wrong type, as ``Aspect.__init__`` would."""

    pointcut: PointcutLike | None
    priority: PriorityLike | None
    name: str | None
    errors: str | None
    order_after: OrderNames | None
    order_before: OrderNames | None


class Aspect:
    """Base class for a bundle of advice about one concern.

    Class attributes apply to all its advice unless a method's decorator says otherwise:
    ``name`` (default: the class name in snake case), ``priority`` (default ``NORMAL``),
    ``order_after`` / ``order_before`` (names of other aspects), ``errors``
    (``'raise'`` or ``'log'``) and ``pointcut`` (for advice declared without one). Any of
    them can also be given per instance to ``__init__``.

    ``needs_runner = True`` says the advice reads the run through ``ctx.runner`` (the
    training aspects do): at a join point that is not a runner's own, a call made outside
    a run then gets a ``RunnerError`` that says so (under ``errors='log'``, logged) instead
    of the advice failing on ``None``. A runner's own join points run such advice as it
    is, with no check.
    """

    name: str = "aspect"
    priority: PriorityLike = Priority.NORMAL
    order_after: OrderNames = ()
    order_before: OrderNames = ()
    errors: str = "raise"
    pointcut: PointcutLike | None = None
    needs_runner: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = snake_case(cls.__name__)

    def __init__(
        self,
        *,
        pointcut: PointcutLike | None = None,
        priority: PriorityLike | None = None,
        name: str | None = None,
        errors: str | None = None,
        order_after: OrderNames | None = None,
        order_before: OrderNames | None = None,
        **unknown: Never,
    ) -> None:
        if unknown:  # a misspelt option, passed on by a subclass's **options
            raise _unknown_options(type(self), tuple(unknown))
        if pointcut is not None:
            self.pointcut = pointcut
        if priority is not None:
            resolve_priority(priority)
            self.priority = priority
        if name is not None:
            _check_name("name", name)
            self.name = name
        if errors is not None:
            self.errors = _check_errors(errors)  # refused here, not when it is registered
        # Refused here too, not when registered; kept as the tuple of names they give.
        if order_after is not None:
            self.order_after = _names("order_after", order_after)
        if order_before is not None:
            self.order_before = _names("order_before", order_before)

    def make_advice(self, target: Pointcut | None = None) -> list[Advice]:
        """Bound ``Advice`` objects for every advice method of this instance.

        Advice declared without a pointcut uses ``target`` (a weave target) when given,
        else this aspect's ``pointcut``; with neither it is an ``AspectDefinitionError``.
        """
        own = as_pointcut(self.pointcut) if self.pointcut is not None else None
        result: list[Advice] = []
        for attr, func in _advice_methods(type(self)):
            bound = getattr(self, attr)
            marks = getattr(func, MARK, None)
            if marks:
                for kind, pointcut, opts in marks:
                    pc = pointcut if pointcut is not None else (target or own)
                    if pc is None:
                        raise AspectDefinitionError(
                            f"{type(self).__name__}.{attr} is {kind} advice without a "
                            f"pointcut: give {type(self).__name__}(pointcut='name or glob') "
                            "before register(), or weave it into a target with "
                            f"weave(target, {type(self).__name__}())"
                        )
                    result.append(self._advice(kind, bound, pc, attr, opts))
            else:
                kind_name = _convention(attr)
                if kind_name is not None:
                    kind, point = kind_name
                    result.append(self._advice(kind, bound, NormalizedName(point), attr, {}))
        return result

    def _advice(
        self,
        kind: AdviceKind,
        bound: Any,
        pointcut: Pointcut,
        attr: str,
        opts: dict[str, Any],
    ) -> Advice:
        options: dict[str, Any] = {
            "priority": self.priority,
            "errors": self.errors,
            "order_after": self.order_after,
            "order_before": self.order_before,
            "name": f"{self.name}.{attr}",
        }
        options.update(self.advice_options(attr))
        options.update(opts)
        return Advice(kind, bound, pointcut, aspect=self, aspect_name=self.name, **options)

    def advice_options(self, attr: str) -> dict[str, Any]:
        """Options for the advice of method ``attr`` that depend on this instance's
        settings, e.g. ``{'every': self.interval}``; a decorator's own options win.

        Called when the aspect is registered. The base class adds none.
        """
        return {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


# inspect.signature(Aspect) and from_config's parameter check see the options only: the
# ``**unknown`` above is there to word the error, not to take more keywords.
_SIGNATURE = inspect.signature(Aspect.__init__)
setattr(  # mypy knows no __signature__ on a function
    Aspect.__init__,
    "__signature__",
    _SIGNATURE.replace(
        parameters=[p for p in _SIGNATURE.parameters.values() if p.kind is not p.VAR_KEYWORD]
    ),
)


def _unknown_options(cls: type, unknown: tuple[str, ...]) -> AspectParameterError:
    """``AspectParameterError`` naming ``cls`` (not ``Aspect.__init__``, where Python's
    ``TypeError`` would point), the unknown keywords, a close valid one and the valid ones."""
    from .registry import Parameters  # only on this error; keeps ``import aspecthook`` light

    accepted = Parameters.of(cls) or Parameters.of(Aspect)
    assert accepted is not None  # Aspect's own signature is always readable
    return accepted.refuse(cls.__name__, unknown)


def _convention(attr: str) -> tuple[AdviceKind, str] | None:
    for prefix, kind in _PREFIXES:
        if attr.startswith(prefix) and len(attr) > len(prefix):
            return kind, attr[len(prefix) :]
    return None


def _advice_methods(cls: type) -> list[tuple[str, Any]]:
    """(name, function) of advice methods, base classes first, definition order within."""
    seen: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or klass is Aspect:
            continue
        for attr, value in vars(klass).items():
            if attr.startswith("_"):
                continue
            func = getattr(value, "__func__", value)
            if not callable(func):
                continue
            if getattr(func, MARK, None) or _convention(attr) is not None:
                seen.pop(attr, None)
                seen[attr] = func
            else:
                seen.pop(attr, None)
    return list(seen.items())
