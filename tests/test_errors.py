"""Errors: one base class, and each error also the builtin a caller would naturally catch."""

from __future__ import annotations

import builtins
import multiprocessing
import pickle
import re
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

import aspecthook as ah
from aspecthook import errors
from aspecthook.errors import (
    AdviceSignatureError,
    AspectDefinitionError,
    AspectHookError,
    CheckpointNotFoundError,
    InvalidOptionError,
    InvalidPointcutError,
    OrderingCycleError,
    UnknownPriorityError,
    WeaverClosedError,
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
    (WeaverClosedError, RuntimeError),
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


def test_the_api_page_has_one_row_per_error_naming_its_builtins() -> None:
    """docs/api.md's errors table lists every error of aspecthook.errors once, with the
    builtins a caller can catch it as (the table is what users read to choose an except)."""
    page = Path(__file__).resolve().parents[1] / "docs" / "api.md"
    rows = [
        [cell.strip() for cell in line.split("|")[1:-1]]
        for line in page.read_text().splitlines()
        if line.startswith("| `") and line.split("`")[1] in errors.__all__
    ]
    names = [row[0].strip("`") for row in rows]
    assert sorted(names) == sorted(errors.__all__)
    for name, bases, _ in rows:
        error = getattr(errors, name.strip("`"))
        for base in re.findall(r"`(\w+)`", bases):
            assert issubclass(error, getattr(errors, base, None) or getattr(builtins, base))


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
        (
            lambda: WeaverClosedError("m", weaver="mine", operation="before"),
            {"weaver": "mine", "operation": "before"},
        ),
    ],
    ids=["signature", "priority", "option", "cycle", "weave", "closed"],
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


def _raise_in_worker(path: str) -> None:
    raise CheckpointNotFoundError(f"no checkpoint at {path}", path=path)


ALL_ERRORS = [
    AdviceSignatureError("m", advice="f", signature="()", expected="(ctx)"),
    errors.AspectDefinitionError("m"),
    AspectHookError("m"),
    errors.AspectParameterError("m", aspect="Timed", parameters=("x",), valid=("name",)),
    CheckpointNotFoundError("m", path="ckpt/latest.pt"),
    errors.ConfigError("m", file="a.yaml", key="weave[0]"),
    InvalidOptionError("m", option="every", value=0),
    InvalidPointcutError("m"),
    OrderingCycleError("m", cycle=("a", "b", "a")),
    errors.RunnerError("m"),
    errors.UnknownAspectError("m", name="Timd", known=("Timed",), suggestion="Timed"),
    UnknownPriorityError("m", value="urgent"),
    errors.UnsupportedAdviceError("m", kind="around", target="net"),
    WeaveTargetError("m", target="pkg.mod.f"),
    WeaverClosedError("m", weaver="mine", operation="register"),
]


def test_the_pickling_test_covers_every_error() -> None:
    assert sorted(type(e).__name__ for e in ALL_ERRORS) == sorted(errors.__all__)


@pytest.mark.parametrize("error", ALL_ERRORS, ids=lambda e: type(e).__name__)
def test_every_error_survives_pickling_with_its_details(error: AspectHookError) -> None:
    """An error raised in a worker process reaches the parent as itself: every class
    pickles, whatever keyword-only details its constructor takes."""
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert copy.args == error.args == ("m",)
    assert vars(copy) == vars(error)


def test_an_error_raised_in_a_worker_process_reaches_the_parent() -> None:
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        future = pool.submit(_raise_in_worker, "ckpt/latest.pt")
        with pytest.raises(CheckpointNotFoundError, match="no checkpoint at") as caught:
            future.result(timeout=120)
    assert caught.value.path == "ckpt/latest.pt"
