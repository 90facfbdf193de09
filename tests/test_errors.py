"""Errors: one base class, and each error also the builtin a caller would naturally catch."""

from __future__ import annotations

import pytest

import aspecthook as ah
from aspecthook import errors
from aspecthook.errors import (
    AdviceSignatureError,
    AspectDefinitionError,
    AspectHookError,
    InvalidOptionError,
    InvalidPointcutError,
    OrderingCycleError,
    UnknownPriorityError,
    WeaveTargetError,
)

NATURAL_BUILTINS = [
    (AdviceSignatureError, TypeError),
    (UnknownPriorityError, ValueError),
    (InvalidOptionError, ValueError),
    (InvalidPointcutError, TypeError),
    (OrderingCycleError, ValueError),
    (AspectDefinitionError, TypeError),
    (WeaveTargetError, LookupError),
]


@pytest.mark.parametrize(("error", "builtin"), NATURAL_BUILTINS, ids=lambda v: v.__name__)
def test_error_subclasses_base_and_natural_builtin(
    error: type[Exception], builtin: type[Exception]
) -> None:
    """Each error is an AspectHookError and also its natural builtin."""
    assert issubclass(error, AspectHookError)
    assert issubclass(error, builtin)


def test_base_error_is_an_exception() -> None:
    """AspectHookError is an Exception, so `except Exception` catches every aspecthook error."""
    assert issubclass(AspectHookError, Exception)
    assert not issubclass(AspectHookError, (TypeError, ValueError, LookupError))


def test_errors_module_exports_every_error() -> None:
    """aspecthook.errors lists every error class in __all__, and ah.errors is that module."""
    assert ah.errors is errors
    for error, _ in NATURAL_BUILTINS:
        assert error.__name__ in errors.__all__
    assert "AspectHookError" in errors.__all__


@pytest.mark.parametrize(
    ("make", "attributes"),
    [
        (
            lambda: AdviceSignatureError("m", advice="f", signature="()", expected="(ctx)"),
            {"advice": "f", "signature": "()", "expected": "(ctx)"},
        ),
        (lambda: UnknownPriorityError("m", value="urgent"), {"value": "urgent"}),
        (lambda: InvalidOptionError("m", option="every", value=0), {"option": "every", "value": 0}),
        (lambda: OrderingCycleError("m", cycle=("a", "b", "a")), {"cycle": ("a", "b", "a")}),
        (lambda: WeaveTargetError("m", target="pkg.mod.f"), {"target": "pkg.mod.f"}),
    ],
    ids=["signature", "priority", "option", "cycle", "weave"],
)
def test_errors_carry_structured_fields(make: object, attributes: dict[str, object]) -> None:
    """Errors carry what went wrong as attributes, besides the message."""
    error = make()  # type: ignore[operator]
    assert str(error) == "m"
    for name, value in attributes.items():
        assert getattr(error, name) == value


def test_caught_as_builtin_from_a_real_mistake(weaver: ah.Weaver) -> None:
    """Code that knows nothing of aspecthook can catch its errors as builtins."""
    with pytest.raises(TypeError, match="cannot be called as"):
        weaver.before("test_errors.builtin")(lambda: None)
    with pytest.raises(ValueError, match="unknown priority"):
        weaver.before("test_errors.builtin", priority="urgent")(lambda ctx: None)
    with pytest.raises(ValueError, match="positive int"):
        weaver.before("test_errors.builtin", every=0)(lambda ctx: None)


def test_real_errors_are_aspecthook_errors(weaver: ah.Weaver) -> None:
    """Every error aspecthook raises on purpose can be caught as AspectHookError."""
    with pytest.raises(AspectHookError, match="not a pointcut"):
        weaver.after(42)  # type: ignore[arg-type]
    with pytest.raises(AspectHookError, match="not an instance"):
        weaver.register(ah.Aspect)  # type: ignore[arg-type]
