"""Importing rich without moving Python's global ``random`` stream.

``rich.style`` draws 24 random bits when it is imported. The tables and the progress bar
import rich only when first shown, which may be in the middle of a seeded run: a run that
shows one would then draw other random numbers than the same run without it (and a
resumed run than the one it continues).
"""

from __future__ import annotations

import random
import sys

__all__ = ["import_rich"]


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
