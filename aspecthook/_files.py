"""File-system steps shared by the writers that replace a file whole: ``Timed``'s trace
files and ``Checkpoint``'s checkpoints and manifest.

Apart from both so that the training aspects and the core share one copy without the
core importing torch.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["fsync_dir"]


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (POSIX; skipped where folders cannot be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
