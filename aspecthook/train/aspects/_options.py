"""The checks the training aspects make of their on/off and count options (at
construction), so that each says the same thing the same way."""

from __future__ import annotations

import numbers
from typing import Any

from ...errors import InvalidOptionError

__all__ = ["check_count", "check_flags", "is_integer", "is_real"]


def check_flags(aspect: str, **flags: object) -> None:
    """Refuse a flag that is not a ``bool``: ``'no'`` would count as true and ``None`` as
    false, each changing what the aspect does without a word."""
    for option, value in flags.items():
        if not isinstance(value, bool):
            raise InvalidOptionError(
                f"{aspect}({option}={value!r}) must be True or False: pass a bool (a "
                "string, a number or None would silently count as one or the other)",
                option=option,
                value=value,
            )


def is_real(value: object) -> bool:
    """A real number, numpy's scalars (``np.float32``) included, but not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_integer(value: object) -> bool:
    """An integer, numpy's (``np.int64``) included, but not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_count(aspect: str, option: str, value: Any, lowest: int | None = None) -> int:
    """``value`` as an ``int`` if it is an integer (numpy's too; not a bool) of at least
    ``lowest`` (1 when not given, and then said as "a positive int"), else the error."""
    least = 1 if lowest is None else lowest
    if not is_integer(value) or value < least:
        what = "a positive int" if lowest is None else f"an int >= {lowest}"
        raise InvalidOptionError(
            f"{aspect}({option}={value!r}) must be {what}", option=option, value=value
        )
    return int(value)
