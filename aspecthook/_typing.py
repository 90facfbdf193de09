"""Typing names newer than the oldest Python the package runs on (3.10), and aliases shared
by modules that cannot import each other.

Imported at run time, not only by type checkers, so that ``typing.get_type_hints`` (and
the tools built on it) can resolve the annotations that use them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

if sys.version_info >= (3, 11):
    from typing import Self, TypeAlias, Unpack
else:  # pragma: no cover - Python 3.10
    from typing import TypeAlias

    from typing_extensions import Self, Unpack

__all__ = ["AdviceFunctions", "Self", "Unpack"]

#: What ``weave()``'s ``before=`` / ``after=`` / ``on_error=`` / ``around=`` take: one
#: advice function, several, or None.
AdviceFunctions: TypeAlias = Callable[..., Any] | Iterable[Callable[..., Any]] | None
