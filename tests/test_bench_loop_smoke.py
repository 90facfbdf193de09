"""bench/loop.py runs end to end; its timings are not judged here, only that every variant
did the same work and that the output has the expected shape."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("ignite")
pytest.importorskip("lightning")

BENCH = Path(__file__).resolve().parents[1] / "bench" / "loop.py"
VARIANTS = ("hand", "ignite", "lightning", "aspecthook")
QUICK_ITERS = 60


def test_quick_run_reports_every_variant_with_equal_work(tmp_path: Path) -> None:
    """A --quick run exits 0; its JSON has all four variants, each with the same steps."""
    out = tmp_path / "loop.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=BENCH.parents[1],
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "targets" in proc.stdout
    data = json.loads(out.read_text())
    variants = data["variants"]
    assert set(variants) == set(VARIANTS)
    steps = {key: variants[key]["steps"] for key in VARIANTS}
    assert set(steps.values()) == {QUICK_ITERS}, steps
    for what in ("scheduler_steps", "records", "checkpoints", "eval_loss", "last_lr"):
        values = {key: variants[key][what] for key in VARIANTS}
        assert len(set(values.values())) == 1, (what, values)
    assert variants["hand"]["checkpoints"] > 0  # the quick run does exercise checkpoints
    assert variants["hand"]["records"] > 0
    for key in VARIANTS:
        assert math.isfinite(variants[key]["median_s"]), key
        assert variants[key]["median_s"] > 0, key
    assert data["meta"]["iters"] == QUICK_ITERS
    assert all(isinstance(t["pass"], bool) for t in data["targets"])
    lockstep = data["lockstep"]  # run once per variant in --quick, the A/A control included
    assert set(lockstep) == set(VARIANTS)
    for key in VARIANTS:
        assert math.isfinite(lockstep[key]["corrected"]), key
        assert lockstep[key]["hand_us_per_iter"] > 0, key


def test_a_runner_with_fewer_aspects_does_less_but_ends_where_the_loop_ends(
    tmp_path: Path,
) -> None:
    """--aspects lr: the Runner writes no records or checkpoints, takes the same steps."""
    out = tmp_path / "loop.json"
    proc = subprocess.run(
        [
            *(sys.executable, str(BENCH), "--quick", "--variants", "aspecthook"),
            *("--aspects", "lr", "--json", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=BENCH.parents[1],
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    variants = json.loads(out.read_text())["variants"]
    assert (variants["aspecthook"]["records"], variants["aspecthook"]["checkpoints"]) == (0, 0)
    assert variants["aspecthook"]["eval_loss"] == variants["hand"]["eval_loss"]
    bad = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--aspects", "timer"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=BENCH.parents[1],
    )
    assert bad.returncode == 2
    assert "lr must be one of them" in bad.stderr


def test_overhead_script_reports_each_configuration(tmp_path: Path) -> None:
    """bench/overhead.py runs a hand-written loop and the Runner configurations it is given,
    and prints a line for each with its time per iteration."""
    script = BENCH.parent / "overhead.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--iters", "60", "--rounds", "1", "--configs", "lr;lr,timer"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=BENCH.parents[1],
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {line.split()[0]: line.split()[1:] for line in proc.stdout.splitlines()[2:]}
    assert set(rows) == {"hand-written", "lr", "lr,timer"}
    for values in rows.values():
        assert all(math.isfinite(float(v)) for v in values[-3:])


def test_the_median_interval_holds_the_median_as_often_as_it_says() -> None:
    """The interval printed beside the paired median: order statistics x(2)..x(9) for ten
    rounds, the whole range for too few, and over many samples of a known distribution it
    holds the true median at least 90% of the time."""
    import random

    sys.path.insert(0, str(BENCH.parent))
    try:
        from loop import median_interval
    finally:
        sys.path.remove(str(BENCH.parent))
    assert median_interval([float(v) for v in range(10, 0, -1)]) == (2.0, 9.0)
    assert median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)
    rng = random.Random(0)
    samples = [[rng.expovariate(1.0) for _ in range(10)] for _ in range(2000)]
    held = sum(low <= math.log(2) <= high for low, high in map(median_interval, samples))
    assert held / len(samples) >= 0.9
