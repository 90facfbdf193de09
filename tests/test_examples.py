"""The runnable examples work as a user runs them, and do what their docstrings say."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
# Scripts with a test of their own below, which also checks what they print and write.
CHECKED = {
    "demo.py",
    "train.py",
    "train_custom_hook.py",
    "train_keras_callback.py",
    "forward_hook.py",
    "weave_json.py",
    "instrument_third_party.py",
}
OTHERS = sorted(p for p in EXAMPLES.glob("*.py") if p.name not in CHECKED)
JOINPOINTS = {"run", "train_epoch", "train_iter", "forward", "backward", "optimizer_step"}


def run_example(name: str, *args: str, timeout: int = 600) -> str:
    """Run ``examples/<name>`` as a user does; its stdout, once it exited 0."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    return done.stdout


def check_checkpoints(folder: Path) -> None:
    """The work folder keeps the last 3 epoch checkpoints, one best, and ``latest``."""
    assert sorted(p.name for p in folder.glob("epoch_*.pt")) == [
        "epoch_6.pt",
        "epoch_7.pt",
        "epoch_8.pt",
    ]
    assert len(list(folder.glob("best_*.pt"))) == 1
    assert len(list(folder.glob("*.pt"))) == 4
    assert json.loads((folder / "latest").read_text())["latest"] == "epoch_8.pt"


def trace_names(path: Path) -> list[str]:
    """The span names of a Chrome trace file (which must be valid JSON)."""
    return [event["name"] for event in json.loads(path.read_text())["traceEvents"]]


def check_curves(folder: Path) -> None:
    """curves.png is written where matplotlib (the ``plot`` extra) is installed."""
    if importlib.util.find_spec("matplotlib") is not None:
        assert (folder / "curves.png").read_bytes().startswith(b"\x89PNG")


def test_other_examples_run() -> None:
    """Every other script in examples/ (none at present) exits 0 when run directly."""
    for script in OTHERS:
        run_example(script.name)


def test_demo_resumes_bit_for_bit_and_names_its_files(tmp_path: Path) -> None:
    """The demo is killed, resumes equal to an uninterrupted run, and leaves its files."""
    out = run_example("demo.py", "--work-dir", str(tmp_path))
    run = tmp_path / "run"
    assert "died (exit code -9)" in out  # a real SIGKILL of the child
    assert "bit for bit: True" in out
    assert "loss/LR/validation records, equal: True" in out
    assert out.count("aspecthook: join points and advice") == 1
    check_checkpoints(run)
    assert set(trace_names(tmp_path / "uninterrupted" / "trace.json")) >= JOINPOINTS
    assert trace_names(run / "trace.json").count("train_epoch") == 6  # resumed after epoch 2
    assert all(json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines())
    check_curves(run)
    for name in ("metrics.jsonl", "trace.json"):
        assert f"  {name}" in out  # named in the output, with the work folder
    assert f"work folder: {run}" in out


def test_train_script_stops_resumes_and_writes_what_the_demo_does(tmp_path: Path) -> None:
    """train.py runs half the epochs, resumes in a new runner and leaves the demo's files."""
    out = run_example("train.py", str(tmp_path))
    assert "checkpoint.resumed" in out
    assert "stopped after 8 epochs" in out
    check_checkpoints(tmp_path)
    names = trace_names(tmp_path / "trace.json")
    assert set(names) >= JOINPOINTS
    assert (names.count("run"), names.count("train_epoch")) == (2, 8)  # both runners
    assert (tmp_path / "metrics.jsonl").exists()
    check_curves(tmp_path)


def test_custom_hook_is_advised_only_where_it_overrides() -> None:
    """The OpenMMLab-style hook's overridden methods are advice; its no-op ones are not."""
    out = run_example("train_custom_hook.py")
    for advice in ("before_train_epoch", "after_train_iter", "after_val_epoch"):
        assert f"loss_spike_hook.{advice}" in out
    assert "loss_spike_hook.before_run" not in out
    assert "loss_spike_hook.after_run" not in out
    assert "priority=70" in out  # "LOW", as mmengine numbers it
    assert "loss spikes (epoch, batch_idx, loss): [" in out


def test_keras_callback_stops_training_early() -> None:
    """The Keras-style callback's model.stop_training ends the run before max_epochs."""
    out = run_example("train_keras_callback.py")
    stopped = re.search(r"stopped after (\d+) of 40 epochs: .*set model.stop_training", out)
    assert stopped is not None, out
    assert int(stopped.group(1)) < 40
    assert f"history has {stopped.group(1)} epochs" in out


def test_forward_hook_example_weaves_submodules_and_unweaves() -> None:
    """forward_hook.py advises encoder.forward and head.backward, then removes every hook."""
    out = run_example("forward_hook.py")
    assert "encoder.forward" in out
    assert "gradient_probe.after_backward" in out
    assert re.search(r"gradient norm at the encoder output: \[[0-9., ]+\]", out)
    assert "after one compiled forward: 6 forwards observed" in out
    assert "unwoven: the encoder has no hooks left" in out


def test_weave_json_prints_describe_table_and_restores_originals() -> None:
    """The json example weaves json, prints the describe() table, and unweaves cleanly."""
    out = run_example("weave_json.py", timeout=120)
    assert "json.dumps" in out
    assert "timing.time_call" in out
    assert "calls= 1000" in out
    assert "original functions again" in out


def test_instrument_third_party_counts_one_trace_event_per_call() -> None:
    """The trace's complete events are the calls the summary counts, metadata apart."""
    out = run_example("instrument_third_party.py", timeout=120)
    assert 'saved: {"apple": 6, "pear": 6, "plum": 6}' in out
    assert "loaded back: True" in out
    stated = re.search(r"(\d+) complete events \('ph': 'X'\), one per call:\n((?:  .*\n)+)", out)
    assert stated is not None, out
    listed = {
        name: int(count)
        for count, name in re.findall(r"^ +(\d+) x (\S+)$", stated.group(2), re.MULTILINE)
    }
    assert listed["inventory.Inventory.add"] == 9  # 3 restocks x 3 fruits
    assert "json.dumps" in listed
    assert all(name.startswith(("inventory.", "json.")) for name in listed)  # calls only
    assert sum(listed.values()) == int(stated.group(1))
    assert "process_name: app.py" in out
