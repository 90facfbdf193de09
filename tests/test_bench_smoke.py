"""bench/calls.py runs end to end; its timings are not judged here, only its output shape."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "calls.py"

VARIANTS = (
    "raw",
    "closure",
    "wrapt_passthrough",
    "wrapt_naive",
    "aspectlib",
    "pluggy",
    "blinker",
    "ah_idle",
    "ah_before_after",
    "ah_before_after_50_unrelated",
    "raw_method",
    "ah_method_idle",
    "ah_method",
    "ah_before_1",
    "ah_before_10",
    "ah_before_50",
    "ah_around",
    "perf_counter",
    "timed",
    "logged_disabled",
    "logged_off",
    "logged_enabled",
    "aspectlib_log",
    "aspectlib_log_nostack",
)

AUDIT_MODES = ("no_hook", "python_hook", "dispatcher", "dispatcher_no_subscription")


def run_quick(tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = tmp_path / "calls.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=BENCH.parents[1],
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, json.loads(out.read_text())


@pytest.fixture(scope="module")
def quick(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """One --quick run shared by the tests of this module."""
    return run_quick(tmp_path_factory.mktemp("bench"))


def test_quick_run_reports_every_variant(
    quick: tuple[subprocess.CompletedProcess[str], dict[str, Any]],
) -> None:
    """A --quick run exits 0 and its JSON has a positive ns/call for every variant."""
    proc, data = quick
    variants = data["variants"]
    assert set(VARIANTS) <= set(variants)
    for key in VARIANTS:
        value = variants[key]["ns_per_call"]
        assert isinstance(value, float), key
        assert value > 0, key
    assert "targets" in proc.stdout
    assert all(math.isfinite(v) for v in data["derived"].values())
    assert {t["target"] for t in data["targets"]}
    assert all(isinstance(t["pass"], bool) for t in data["targets"])
    imports = data["imports"]
    assert imports["aspecthook"]["min_ms"] > 0
    assert imports["wrapt"]["min_ms"] > 0
    assert imports["torch_imported"] in (True, False)


def test_quick_run_reports_timed_logged_and_audit_targets(
    quick: tuple[subprocess.CompletedProcess[str], dict[str, Any]],
) -> None:
    """The issue-3 rows and the audit-hook processes are in the JSON, with their targets."""
    _, data = quick
    audit = data["audit"]
    for mode in AUDIT_MODES:
        assert audit["modes"][mode]["ns_per_call"] > 0, mode
    assert math.isfinite(audit["dispatcher_over_python_hook_ns"])
    names = {t["target"] for t in data["targets"]}
    assert "Timed overhead (ns)" in names
    assert "Logged, level disabled, overhead (ns)" in names
    assert any(n.startswith("idle audit dispatcher") for n in names)
