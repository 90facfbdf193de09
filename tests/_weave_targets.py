"""Code the weaving tests weave into: functions, every kind of method, a subclass.

Tests change these attributes only through ``weave()`` and must leave the originals in
place; ``ORIGINALS`` lets them check that by identity.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from json import dumps  # imported, not defined here: weaving this module must skip it
from typing import Any

__all__ = [
    "Child",
    "Decoder",
    "Encoder",
    "Model",
    "add_one",
    "decorated",
    "double",
    "dumps",
    "evaluate",
    "fail",
    "train_epoch",
    "train_step",
]


def add_one(x: int) -> int:
    return x + 1


def double(x: int) -> int:
    return x * 2


def fail(x: int) -> int:
    raise ValueError(f"bad {x}")


def _passing(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


@_passing
def decorated(x: int) -> int:
    return x + 100


def train_step(x: int) -> tuple[str, int]:
    return ("train_step", x)


def train_epoch(x: int) -> tuple[str, int]:
    return ("train_epoch", x)


def evaluate(x: int) -> tuple[str, int]:
    return ("evaluate", x)


class Model:
    def forward(self, x: int) -> int:
        return x + 10

    @classmethod
    def build(cls, x: int) -> tuple[str, int]:
        return (cls.__name__, x)

    @staticmethod
    def helper(x: int) -> int:
        return -x


class Child(Model):
    pass


class Encoder:
    def forward(self, x: int) -> tuple[str, int]:
        return ("encoder", x)


class Decoder:
    def forward(self, x: int) -> tuple[str, int]:
        return ("decoder", x)


def snapshot() -> dict[str, object]:
    """Every attribute tests may weave, by name, as it is now."""
    found: dict[str, object] = {
        name: value
        for name, value in globals().items()
        if not name.startswith("_") and name not in ("ORIGINALS", "changed")
    }
    for cls in (Model, Child, Encoder, Decoder):
        for name, value in vars(cls).items():
            found[f"{cls.__name__}.{name}"] = value
    return found


ORIGINALS = snapshot()


def changed() -> list[str]:
    """Names whose value is no longer the original object (or that appeared or vanished)."""
    now = snapshot()
    names = set(now) | set(ORIGINALS)
    return sorted(n for n in names if now.get(n, None) is not ORIGINALS.get(n, None))
