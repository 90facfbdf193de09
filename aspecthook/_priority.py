"""Priorities: the nine named levels shared with OpenMMLab's hooks, and ints 0..100."""

from __future__ import annotations

import enum

from .errors import UnknownPriorityError

__all__ = ["Priority", "PriorityLike", "resolve_priority"]


class Priority(enum.IntEnum):
    """Named priority levels; lower values run first within a stage."""

    HIGHEST = 0
    VERY_HIGH = 10
    HIGH = 30
    ABOVE_NORMAL = 40
    NORMAL = 50
    BELOW_NORMAL = 60
    LOW = 70
    VERY_LOW = 90
    LOWEST = 100


PriorityLike = Priority | int | str


def resolve_priority(value: object) -> int:
    """Return the int value of a ``Priority``, a level name (any case) or an int 0..100."""
    if isinstance(value, Priority):
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        if 0 <= value <= 100:
            return value
        raise UnknownPriorityError(
            f"priority {value} is out of range: give an int from 0 (runs first) to 100 "
            f"(runs last), or one of {_names()}",
            value=value,
        )
    if isinstance(value, str):
        member = Priority.__members__.get(value.strip().upper())
        if member is not None:
            return int(member)
    raise UnknownPriorityError(
        f"unknown priority {value!r}: use one of {_names()} or an int from 0 to 100",
        value=value,
    )


def _names() -> str:
    return ", ".join(f"{m.name} ({m.value})" for m in Priority)
