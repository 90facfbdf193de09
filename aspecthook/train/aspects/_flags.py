"""The check the training aspects make of their on/off options (at construction)."""

from __future__ import annotations

from ...errors import InvalidOptionError

__all__ = ["check_flags"]


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
