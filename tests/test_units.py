"""Durations shown to people: three significant digits in the unit that fits."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aspecthook._units import format_seconds


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (812e-9, "812 ns"),
        (15.23e-6, "15.2 µs"),
        (3.4e-3, "3.4 ms"),
        (2.5, "2.5 s"),
        (250e-3, "250 ms"),
        (1234.0, "1234 s"),
        (0.9996, "1 s"),
        (999.7e-9, "1 µs"),
        (0.0, "0 ns"),
    ],
)
def test_durations_are_shown_with_three_digits_in_their_unit(seconds: float, shown: str) -> None:
    assert format_seconds(seconds) == shown


@given(st.floats(min_value=1e-9, max_value=1e4, allow_nan=False))
def test_a_shown_duration_never_reaches_a_thousand_of_its_unit_below_seconds(
    seconds: float,
) -> None:
    number, unit = format_seconds(seconds).split(" ")
    assert unit in {"ns", "µs", "ms", "s"}
    if unit != "s":
        assert float(number) < 1000
    scale = {"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1.0}[unit]
    # three significant digits (whole nanoseconds below a microsecond)
    assert float(number) * scale == pytest.approx(seconds, rel=5.01e-3, abs=0.5e-9)
