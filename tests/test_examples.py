"""The runnable examples work as a user runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(script: Path) -> None:
    """Every script in examples/ exits 0 when run directly."""
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr


def test_weave_json_prints_describe_table_and_restores_originals() -> None:
    """The json example weaves json, prints the describe() table, and unweaves cleanly."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "weave_json.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert "json.dumps" in done.stdout
    assert "timing.time_call" in done.stdout
    assert "calls= 1000" in done.stdout
    assert "original functions again" in done.stdout
