"""Importing rich without moving Python's global ``random`` stream.

``rich.style`` draws 24 random bits when it is imported. The tables and the progress bar
import rich only when first shown, which may be in the middle of a seeded run: a run that
shows one would then draw other random numbers than the same run without it (and a
resumed run than the one it continues).
"""

from __future__ import annotations

import io
import random
import sys
from typing import Any

__all__ = ["import_rich", "render"]

#: A width no table reaches, to measure how wide one must be.
_UNBOUNDED = 1_000_000
#: Columns ``render`` adds for folding text to a table its names made wider than asked.
_SLACK = 40


def import_rich() -> None:
    """Import rich (if it is installed), leaving ``random``'s state as it was."""
    if "rich.style" in sys.modules:
        return
    state = random.getstate()
    try:
        import rich.style  # noqa: F401
    except ImportError:
        pass
    finally:
        random.setstate(state)


def render(table: Any, width: int) -> str:
    """``table`` (a rich ``Table``) as plain text, ``width`` columns wide, or wider where
    its columns that do not wrap (names, numbers) need it, with up to ``_SLACK`` more for
    the columns that fold (notes).

    At a fixed width rich cuts such a column with an ellipsis, so two long names with one
    stem read the same, or squeezes the other columns to nothing.
    """
    from rich.console import Console
    from rich.measure import Measurement

    console = Console(width=width, file=io.StringIO())
    needed = Measurement.get(console, console.options.update_width(_UNBOUNDED), table)
    if needed.minimum > width:
        width = min(needed.maximum, needed.minimum + _SLACK)
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(table)
    return console.export_text().rstrip()
