"""Durations written for people (``describe()``'s time column, ``Timed``'s tables)."""

from __future__ import annotations

__all__ = ["format_seconds"]


def format_seconds(seconds: float) -> str:
    """A duration for people, three significant digits: ``'812 ns'``, ``'15.2 µs'``,
    ``'3.4 ms'``, ``'2.5 s'``."""
    # Rounded first, so a value that rounds up to the next unit is shown in it
    # (0.9996 s as '1 s', not '1000 ms').
    rounded = float(f"{seconds:.3g}")
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if rounded >= scale:
            value = seconds / scale
            return f"{value:.3g} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{seconds * 1e9:.0f} ns"
