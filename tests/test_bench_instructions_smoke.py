"""bench/instructions.py runs end to end under valgrind; its counts are not judged here,
only that both runs of each variant were counted and the report has the expected shape."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("ignite")

BENCH = Path(__file__).resolve().parents[1] / "bench" / "instructions.py"

needs_valgrind = pytest.mark.skipif(
    shutil.which("valgrind") is None or shutil.which("callgrind_control") is None,
    reason="bench/instructions.py counts instructions with valgrind, which is not installed",
)


@needs_valgrind
def test_a_short_count_reports_each_variant_beside_the_hand_written_loop(tmp_path: Path) -> None:
    out = tmp_path / "counts.json"
    proc = subprocess.run(
        [
            *(sys.executable, str(BENCH), "--iters", "6", "--short", "3"),
            *("--variants", "aspecthook", "--json", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=BENCH.parents[1],
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "aspecthook Runner" in proc.stdout
    data = json.loads(out.read_text())
    assert set(data["variants"]) == {"hand", "aspecthook"}
    for key, row in data["variants"].items():
        # Counted, not empty: a run of a few iterations is still well over 10M instructions,
        # and an iteration of this model is over 100k.
        assert row["run"] > 10_000_000, key
        assert row["per_iter"] > 100_000, key


def test_a_short_run_not_below_the_long_one_is_refused() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--iters", "5", "--short", "5"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=BENCH.parents[1],
    )
    assert "--short must be at least 1 and below --iters" in proc.stderr
    assert proc.returncode == 2
