"""Checkpoint: which files survive, the best one by a rule, crash-safe writes, resume checks."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import re
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy
import pytest
import torch
from _fixtures import make_dataset, make_loader, make_runner, one_thread, params
from structlog.testing import capture_logs

import aspecthook as ah
from aspecthook import Aspect, CallContext, Event, Priority
from aspecthook.errors import CheckpointNotFoundError, InvalidOptionError, RunnerError
from aspecthook.train import Runner, aspects
from aspecthook.train.aspects import Checkpoint, Evaluate, LRSchedule

# 16 samples in batches of 4: 4 iterations per epoch.
N, BATCH = 16, 4


def _files(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def _manifest(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / "latest").read_text())
    return data


def _load_latest(folder: Path) -> dict[str, Any]:
    """The checkpoint ``latest`` names, after checking its size and sha256 against it."""
    manifest = _manifest(folder)
    path = folder / manifest["latest"]
    record = manifest["checkpoints"][manifest["latest"]]
    data = path.read_bytes()
    assert len(data) == record["size"]
    assert hashlib.sha256(data).hexdigest() == record["sha256"]
    payload: dict[str, Any] = torch.load(path, weights_only=True)
    return payload


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    with one_thread():
        yield


@pytest.fixture
def saved() -> Iterator[list[Event]]:
    """Every ``checkpoint.saved`` event of the test."""
    events: list[Event] = []
    handle = ah.on("checkpoint.saved")(events.append)
    yield events
    handle.remove()


def _scripted(values: list[float]) -> Any:
    """A metric returning ``values`` in turn (one validation batch per validation)."""
    it = iter(values)
    return lambda outputs, targets: next(it)


# -- which files survive -----------------------------------------------------------------


@pytest.mark.parametrize("option", ["by_epoch", "save_last", "save_optimizer"])
@pytest.mark.parametrize("value", [None, "no", 0, 1.0])
def test_flags_that_are_not_bools_are_refused(option: str, value: Any) -> None:
    """by_epoch=None would save per iteration and save_last='no' save the last state: a
    flag that is not True or False is refused when the checkpoint is made."""
    with pytest.raises(InvalidOptionError, match=rf"Checkpoint\({option}=.*must be True or False"):
        Checkpoint(**{option: value})


@pytest.mark.parametrize(
    ("save_last", "expected"),
    [
        (True, {"epoch_4.pt", "epoch_5.pt", "latest"}),
        (False, {"epoch_2.pt", "epoch_4.pt", "latest"}),
    ],
)
def test_interval_two_of_five_epochs_keeps_the_newest_two(
    tmp_path: Path, save_last: bool, expected: set[str]
) -> None:
    """interval=2, 5 epochs, max_keep=2: epochs 2 and 4 are saved, 5 too with save_last."""
    checkpoint = Checkpoint(2, max_keep=2, save_last=save_last)
    make_runner(tmp_path, n=N, batch_size=BATCH, max_epochs=5, aspects=[checkpoint]).run()
    assert _files(tmp_path) == expected
    manifest = _manifest(tmp_path)
    assert set(manifest["checkpoints"]) == expected - {"latest"}
    assert manifest["latest"] == max(expected - {"latest"})
    assert checkpoint.kept == sorted(expected - {"latest"})


def test_saved_event_names_each_file_with_its_epoch_and_iteration(
    tmp_path: Path, saved: list[Event]
) -> None:
    """``checkpoint.saved`` carries the path, epoch and iteration of every file written."""
    checkpoint = Checkpoint(2, max_keep=2)
    make_runner(tmp_path, n=N, batch_size=BATCH, max_epochs=5, aspects=[checkpoint]).run()
    assert [(Path(e.path).name, e.epoch, e.iter) for e in saved] == [
        ("epoch_2.pt", 2, 8),
        ("epoch_4.pt", 4, 16),
        ("epoch_5.pt", 5, 20),
    ]


def test_by_iteration_saves_every_interval_and_the_last(tmp_path: Path) -> None:
    """by_epoch=False, interval=3, 10 iterations: iter_3, 6, 9 and the last, iter_10."""
    checkpoint = Checkpoint(3, by_epoch=False)
    make_runner(tmp_path, n=N, batch_size=BATCH, max_iters=10, aspects=[checkpoint]).run()
    assert _files(tmp_path) == {"iter_3.pt", "iter_6.pt", "iter_9.pt", "iter_10.pt", "latest"}
    assert _load_latest(tmp_path)["runner"]["counters"]["iter"] == 10


def test_a_resumed_run_keeps_saving_on_the_interval_of_the_whole_run(tmp_path: Path) -> None:
    """Resumed from iter_5 (interval 3), the next saves are iter_6 and iter_9, as they
    would have been without the interruption, not 3 and 6 iterations after the resume."""
    make_runner(
        tmp_path, n=N, batch_size=BATCH, max_iters=5, aspects=[Checkpoint(3, by_epoch=False)]
    ).run()
    assert _files(tmp_path) == {"iter_3.pt", "iter_5.pt", "latest"}
    resumed = Checkpoint(3, by_epoch=False, save_last=False, resume="auto")
    make_runner(tmp_path, n=N, batch_size=BATCH, max_iters=10, aspects=[resumed]).run()
    assert _files(tmp_path) == {"iter_3.pt", "iter_5.pt", "iter_6.pt", "iter_9.pt", "latest"}


def test_a_run_stopped_inside_an_epoch_saves_its_last_state_by_iteration(tmp_path: Path) -> None:
    """by_epoch with max_iters=6 (mid-epoch 2): the last file is iter_6, not a 2nd epoch_1."""
    make_runner(tmp_path, n=N, batch_size=BATCH, max_iters=6, aspects=[Checkpoint()]).run()
    assert _files(tmp_path) == {"epoch_1.pt", "iter_6.pt", "latest"}


# -- the best checkpoint -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "values", "best_epoch"),
    [
        ("acc", [0.2, 0.5, 0.4, 0.7, 0.6], 4),
        ("my_loss", [0.5, 0.3, 0.4, 0.35, 0.6], 2),
    ],
)
def test_save_best_keeps_only_the_best_by_the_inferred_rule(
    tmp_path: Path, name: str, values: list[float], best_epoch: int
) -> None:
    """'acc' is better when greater, '..loss' when less; max_keep=1 never prunes the best."""
    evaluate = Evaluate(metrics={name: _scripted(values)})
    checkpoint = Checkpoint(max_keep=1, save_best=f"val/{name}")
    runner = make_runner(
        tmp_path, n=8, batch_size=8, val=True, max_epochs=5, aspects=[evaluate, checkpoint]
    )
    runner.run()
    best = f"best_val_{name}_epoch_{best_epoch}.pt"
    assert _files(tmp_path) == {best, "epoch_5.pt", "latest"}
    payload = torch.load(tmp_path / best, weights_only=True)
    assert payload["runner"]["metrics"][f"val/{name}"] == values[best_epoch - 1]
    assert payload["runner"]["counters"]["epoch"] == best_epoch
    assert checkpoint.best_score == values[best_epoch - 1]
    assert _manifest(tmp_path)["best"] == best


@pytest.mark.parametrize(
    ("metric", "rule"),
    [
        ("val/acc", "greater"),
        ("val/top1", "greater"),
        ("val/AR@100", "greater"),
        ("val/auc", "greater"),
        ("val/precision", "greater"),
        ("val/mAP", "greater"),
        ("val/mIoU", "greater"),
        ("val/loss", "less"),
        ("val/accuracy", "greater"),
        ("val/mDice", "greater"),
        ("val/acc_terrain", "greater"),  # not an error because of "err" in "terrain"
        ("val/IoU.terrain", "greater"),
        ("val/loss_cls", "less"),
        ("val/loss/total", "less"),
        ("val/mape", "less"),
        ("val/err_rate", "less"),
        ("val/top1err", "less"),
        ("val/DiceLoss", "less"),
        ("mae_finetune/acc", "greater"),  # the last part decides
        ("val/prauc", "greater"),
        ("val/auroc", "greater"),
        ("val/auprc", "greater"),
        ("val/macroF1", "greater"),
    ],
)
def test_rule_is_inferred_from_the_metric_name(metric: str, rule: str) -> None:
    """acc/top/AR@/auc/precision/mAP/mIoU go up, loss goes down: by the words of the
    name, wherever they are in it, and by how each word starts."""
    assert Checkpoint(save_best=metric).rule == rule


def test_save_best_auto_asks_for_the_metrics_name() -> None:
    with pytest.raises(InvalidOptionError, match="'auto' is not a metric name"):
        Checkpoint(save_best="auto")


def test_an_unknown_metric_name_asks_for_a_rule() -> None:
    """A name that says nothing about its direction is an error that asks for rule=."""
    with pytest.raises(InvalidOptionError, match="rule='greater' or rule='less'"):
        Checkpoint(save_best="val/wobble")
    assert Checkpoint(save_best="val/wobble", rule="less").rule == "less"


def test_a_missing_best_metric_is_an_error_at_the_first_validation(tmp_path: Path) -> None:
    """save_best naming a metric validation does not produce says which ones it does."""
    runner = make_runner(
        tmp_path, val=True, max_epochs=2, aspects=[Checkpoint(save_best="val/acc")]
    )
    with pytest.raises(RunnerError, match=r"\['val/loss'\], not 'val/acc'"):
        runner.run()
    assert runner.epoch == 1


# -- crash safety --------------------------------------------------------------------------


def test_files_are_synced_and_in_place_before_latest_moves_and_pruning_comes_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each save: fsync + replace the file, fsync + replace ``latest`` (each rename made
    durable by a folder fsync before the next step), then delete old ones."""
    ops: list[str] = []
    real_replace, real_unlink, real_fsync = os.replace, os.unlink, os.fsync

    def replace(src: Any, dst: Any) -> None:
        ops.append(f"replace {Path(dst).name}")
        real_replace(src, dst)

    def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        ops.append(f"unlink {Path(path).name}")
        real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "unlink", unlink)
    monkeypatch.setattr(os, "fsync", lambda fd: ops.append("fsync") or real_fsync(fd))
    runner = make_runner(
        tmp_path, n=N, batch_size=BATCH, max_epochs=3, aspects=[Checkpoint(max_keep=1)]
    )
    runner.run()
    monkeypatch.undo()
    save = ["fsync", "replace {}", "fsync", "fsync", "replace latest", "fsync"]
    expected = [op.format("epoch_1.pt") for op in save]
    expected += [op.format("epoch_2.pt") for op in save] + ["unlink epoch_1.pt"]
    expected += [op.format("epoch_3.pt") for op in save] + ["unlink epoch_2.pt"]
    assert ops == expected


def test_latest_always_names_a_readable_checkpoint(tmp_path: Path) -> None:
    """At every save the file ``latest`` names matches its size and sha256 and loads."""
    seen: list[int] = []

    def check(event: Event) -> None:
        payload = _load_latest(tmp_path)
        seen.append(payload["runner"]["counters"]["iter"])
        assert Path(event.path).name == _manifest(tmp_path)["latest"]

    with ah.on("checkpoint.saved")(check):
        checkpoint = Checkpoint(2, by_epoch=False, max_keep=1)
        make_runner(tmp_path, n=N, batch_size=BATCH, max_iters=7, aspects=[checkpoint]).run()
    assert seen == [2, 4, 6, 7]


def test_stale_temp_files_of_a_killed_write_are_removed_at_start(tmp_path: Path) -> None:
    """A temp file left by a write that died is deleted when the next run starts."""
    stale = tmp_path / ".epoch_3.pt.abc123.ckpt-tmp"
    stale.write_bytes(b"half a checkpoint")
    make_runner(tmp_path, n=N, batch_size=BATCH, aspects=[Checkpoint()]).run()
    assert not stale.exists()


# -- the background writer -----------------------------------------------------------------


def _hold_writes_of(
    monkeypatch: pytest.MonkeyPatch, name: str, action: Callable[[], None]
) -> threading.Event:
    """Run ``action`` on the writer thread just before ``name`` is given its name (its temp
    file whole); the returned event is set once the writer got there."""
    reached = threading.Event()
    real_replace = os.replace

    def replace(src: Any, dst: Any) -> None:
        if Path(dst).name == name:
            reached.set()
            action()
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    return reached


class _AtIteration(Aspect):
    """Calls ``fn(runner)`` after iteration ``at``, after every other after-advice."""

    priority = Priority.LOWEST

    def __init__(self, at: int, fn: Callable[[Any], None]) -> None:
        super().__init__()
        self.at = at
        self.fn = fn

    def after_train_iter(self, ctx: CallContext) -> None:
        if ctx.runner.iter == self.at:
            self.fn(ctx.runner)


def test_training_goes_on_while_a_write_is_in_flight_and_latest_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With iteration 6's write held, iterations 7 and 8 run while ``latest`` still names
    the complete iter_3.pt; released, iter_6.pt holds iteration 6's state, not a later one
    (and the save at 9 waited for it)."""
    release = threading.Event()
    reached = _hold_writes_of(monkeypatch, "iter_6.pt", lambda: release.wait(30))
    at_6: list[list[torch.Tensor]] = []
    seen: list[tuple[int, str, int]] = []

    def look(runner: Any) -> None:
        assert reached.wait(30)
        latest = _load_latest(tmp_path)["runner"]["counters"]["iter"]
        seen.append((runner.iter, _manifest(tmp_path)["latest"], latest))
        if runner.iter == 8:
            release.set()

    aspects = [
        Checkpoint(3, by_epoch=False, save_last=False),
        _AtIteration(6, lambda runner: at_6.append(params(runner))),
        _AtIteration(7, look),
        _AtIteration(8, look),
    ]
    runner = make_runner(tmp_path, n=N, batch_size=BATCH, max_iters=10, aspects=aspects)
    runner.run()
    assert seen == [(7, "iter_3.pt", 3), (8, "iter_3.pt", 3)]
    assert _manifest(tmp_path)["latest"] == "iter_9.pt"
    saved = torch.load(tmp_path / "iter_6.pt", weights_only=True)["runner"]
    assert saved["counters"]["iter"] == 6
    state = list(saved["model"].values())
    assert all(torch.equal(a, b) for a, b in zip(state, at_6[0], strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(state, params(runner), strict=True))


def test_a_failed_write_raises_on_the_training_thread_and_latest_keeps_the_last_good_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk error in the writer stops the run at the next check with a RunnerError that
    names the file and chains the OSError; ``latest`` still names iter_2.pt. The check is
    made after every iteration and epoch: iteration 4 ends an epoch here, so a write that
    failed fast is reported at that epoch's end, while ``runner.iter`` is still 4."""

    def disk_full() -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    _hold_writes_of(monkeypatch, "iter_4.pt", disk_full)
    runner = make_runner(
        tmp_path, n=N, batch_size=BATCH, max_iters=8, aspects=[Checkpoint(2, by_epoch=False)]
    )
    with pytest.raises(RunnerError, match=r"could not write iter_4\.pt .*No space left") as info:
        runner.run()
    assert isinstance(info.value.__cause__, OSError)
    assert 4 <= runner.iter < 8
    assert _manifest(tmp_path)["latest"] == "iter_2.pt"
    assert _load_latest(tmp_path)["runner"]["counters"]["iter"] == 2
    assert not any(p.name.endswith(".ckpt-tmp") for p in tmp_path.iterdir())


def test_a_failed_write_while_the_run_fails_is_logged_and_the_run_error_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The training error propagates unchanged; the writer's error is logged beside it."""

    def disk_full() -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    def crash(runner: Any) -> None:
        raise KeyError("the training error")

    _hold_writes_of(monkeypatch, "iter_2.pt", disk_full)
    runner = make_runner(
        tmp_path,
        n=N,
        batch_size=BATCH,
        max_iters=8,
        aspects=[Checkpoint(2, by_epoch=False), _AtIteration(2, crash)],
    )
    with capture_logs() as logs, pytest.raises(KeyError, match="the training error"):
        runner.run()
    failed = [log for log in logs if log["event"] == "checkpoint.write_failed"]
    assert len(failed) == 1
    assert "iter_2.pt" in failed[0]["error"]


def test_a_run_interrupted_while_a_write_is_in_flight_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KeyboardInterrupt right after a save: when run() raises, the file is complete and
    ``latest`` names it, so a run started next in this process resumes from it."""
    release = threading.Event()
    _hold_writes_of(monkeypatch, "iter_2.pt", lambda: release.wait(30))

    def interrupt(runner: Any) -> None:
        threading.Timer(0.2, release.set).start()  # the write finishes after the interrupt
        raise KeyboardInterrupt

    runner = make_runner(
        tmp_path,
        n=N,
        batch_size=BATCH,
        max_iters=8,
        aspects=[Checkpoint(2, by_epoch=False), _AtIteration(3, interrupt)],
    )
    with pytest.raises(KeyboardInterrupt):
        runner.run()
    assert release.is_set()
    assert _manifest(tmp_path)["latest"] == "iter_2.pt"
    assert _load_latest(tmp_path)["runner"]["counters"]["iter"] == 2


def test_saved_events_come_on_the_training_thread_and_save_returns_a_written_file(
    tmp_path: Path, saved: list[Event]
) -> None:
    """Subscribers run on the thread that trains; ``Checkpoint.save()`` returns once its
    file and ``latest`` are on disk."""
    threads: list[threading.Thread] = []
    checkpoint = Checkpoint(2, by_epoch=False)
    with ah.on("checkpoint.saved")(lambda event: threads.append(threading.current_thread())):
        runner = make_runner(tmp_path, n=N, batch_size=BATCH, max_iters=4, aspects=[checkpoint])
        runner.run()
        path = checkpoint.save(runner, "extra_4.pt")
    assert [Path(e.path).name for e in saved] == ["iter_2.pt", "iter_4.pt", "extra_4.pt"]
    assert threads == [threading.current_thread()] * 3
    assert path == tmp_path / "extra_4.pt"
    assert _manifest(tmp_path)["latest"] == "extra_4.pt"
    _load_latest(tmp_path)


# -- resume --------------------------------------------------------------------------------


def _damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    else:  # one flipped bit: same size, only the checksum can tell
        data[len(data) // 2] ^= 1
        path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["truncated", "bit-flipped"])
def test_a_damaged_latest_checkpoint_is_reported_and_the_previous_one_used(
    tmp_path: Path, how: str
) -> None:
    """The warning and the log name the damaged file; the run resumes from epoch 3 and ends
    where an uninterrupted run ends."""
    make_runner(tmp_path, n=N, batch_size=BATCH, max_epochs=4, aspects=[Checkpoint()]).run()
    damaged = tmp_path / "epoch_4.pt"
    _damage(damaged, how)
    resumed: list[Event] = []
    runner = make_runner(
        tmp_path, n=N, batch_size=BATCH, max_epochs=4, aspects=[Checkpoint(resume="auto")]
    )
    with (
        ah.on("checkpoint.resumed")(resumed.append),
        capture_logs() as logs,
        pytest.warns(RuntimeWarning, match=re.escape(str(damaged))),
    ):
        runner.run()
    assert [Path(e.path).name for e in resumed] == ["epoch_3.pt"]
    assert any(
        log["event"] == "checkpoint.unusable" and log["path"] == str(damaged) for log in logs
    )
    reference = make_runner(None, n=N, batch_size=BATCH, max_epochs=4)
    reference.run()
    for a, b in zip(params(runner), params(reference), strict=True):
        assert torch.equal(a, b)
    _load_latest(tmp_path)  # epoch_4.pt was written again, whole


def test_an_unreadable_manifest_is_reported_and_the_newest_loadable_file_used(
    tmp_path: Path,
) -> None:
    """Without a readable ``latest`` the checkpoint files are tried newest first."""
    make_runner(tmp_path, n=N, batch_size=BATCH, max_epochs=3, aspects=[Checkpoint()]).run()
    (tmp_path / "latest").write_text("{not json")
    for age, name in enumerate(["epoch_3.pt", "epoch_2.pt", "epoch_1.pt"]):
        os.utime(tmp_path / name, (1e9 - age, 1e9 - age))
    _damage(tmp_path / "epoch_3.pt", "truncated")
    resumed: list[Event] = []
    runner = make_runner(
        tmp_path, n=N, batch_size=BATCH, max_epochs=3, aspects=[Checkpoint(resume="auto")]
    )
    with (
        ah.on("checkpoint.resumed")(resumed.append),
        pytest.warns(RuntimeWarning, match=r"(latest|epoch_3\.pt) is unusable") as caught,
    ):
        runner.run()
    messages = [str(w.message) for w in caught]
    assert [m.split(" is unusable")[0].rsplit("/", 1)[1] for m in messages] == [
        "latest",
        "epoch_3.pt",
    ]
    assert [Path(e.path).name for e in resumed] == ["epoch_2.pt"]
    assert _load_latest(tmp_path)["runner"]["counters"]["epoch"] == 3


def test_resume_auto_in_an_empty_folder_starts_afresh(tmp_path: Path) -> None:
    """resume='auto' with no checkpoint yet trains from the start (the first run of a job)."""
    runner = make_runner(tmp_path, n=N, batch_size=BATCH, aspects=[Checkpoint(resume="auto")])
    runner.run()
    assert runner.iter == 4


def test_a_new_runner_that_only_tests_resumes_first(tmp_path: Path) -> None:
    """runner.test() on a new runner with resume='auto': it tests the trained weights
    (it used to test the initial ones, since the resume came only with run())."""
    test_loader = make_loader(make_dataset(16, seed=2), BATCH)
    trained = make_runner(
        tmp_path, n=N, batch_size=BATCH, max_epochs=2, test_loader=test_loader,
        aspects=[Checkpoint()],
    )  # fmt: skip
    trained.run()
    expected = trained.test()
    tester = make_runner(
        tmp_path, n=N, batch_size=BATCH, max_epochs=2, test_loader=test_loader,
        aspects=[Checkpoint(resume="auto")],
    )  # fmt: skip
    assert tester.test() == expected
    assert tester.iter == trained.iter


def test_a_finished_run_resumed_trains_no_further(tmp_path: Path) -> None:
    """Resuming the last checkpoint of a finished run restores it and runs no iteration."""
    first = make_runner(tmp_path, n=N, batch_size=BATCH, max_epochs=2, aspects=[Checkpoint()])
    first.run()
    again = make_runner(
        tmp_path, n=N, batch_size=BATCH, max_epochs=2, aspects=[Checkpoint(resume="auto")]
    )
    before = _files(tmp_path)
    again.run()
    assert (again.epoch, again.iter) == (2, 8)
    assert all(torch.equal(a, b) for a, b in zip(params(first), params(again), strict=True))
    assert _files(tmp_path) == before


def test_resume_from_an_explicit_file(tmp_path: Path) -> None:
    """resume=path loads that checkpoint even when newer ones exist."""
    make_runner(tmp_path, n=N, batch_size=BATCH, max_epochs=3, aspects=[Checkpoint()]).run()
    runner = make_runner(
        tmp_path,
        n=N,
        batch_size=BATCH,
        max_epochs=1,
        aspects=[Checkpoint(resume=tmp_path / "epoch_1.pt", save_last=False)],
    )
    resumed: list[Event] = []
    with ah.on("checkpoint.resumed")(resumed.append):
        runner.run()
    assert [(Path(e.path).name, e.epoch, e.iter) for e in resumed] == [("epoch_1.pt", 1, 4)]


def test_a_damaged_explicit_resume_file_is_an_error(tmp_path: Path) -> None:
    """An explicitly named checkpoint that fails its checksum stops the run before training."""
    make_runner(tmp_path, n=N, batch_size=BATCH, max_epochs=2, aspects=[Checkpoint()]).run()
    _damage(tmp_path / "epoch_1.pt", "bit-flipped")
    runner = make_runner(
        tmp_path, n=N, batch_size=BATCH, aspects=[Checkpoint(resume=tmp_path / "epoch_1.pt")]
    )
    with pytest.raises(RunnerError, match=r"cannot resume from .*epoch_1\.pt.*sha256"):
        runner.run()
    assert runner.iter == 0


def test_a_resume_path_that_does_not_exist_fails_at_construction(tmp_path: Path) -> None:
    """Before any runner or training exists, with what to do instead."""
    missing = tmp_path / "nope" / "epoch_3.pt"
    with pytest.raises(CheckpointNotFoundError, match="resume='auto'") as info:
        Checkpoint(resume=missing)
    assert isinstance(info.value, RunnerError)
    assert isinstance(info.value, FileNotFoundError)
    assert info.value.path == str(missing)


def test_checkpoints_load_with_weights_only(tmp_path: Path) -> None:
    """Model, optimizer, scheduler, counters, aspects, grad scaler and RNG states all load
    with torch.load(weights_only=True)."""
    runner = make_runner(tmp_path, n=N, batch_size=BATCH, dropout=0.5, aspects=[Checkpoint()])
    runner.scheduler = torch.optim.lr_scheduler.StepLR(runner.optimizer, step_size=2)
    runner.grad_scaler = torch.amp.GradScaler("cpu", init_scale=512.0)  # type: ignore[attr-defined]
    runner.run()
    payload = torch.load(tmp_path / "epoch_1.pt", weights_only=True)
    state = payload["runner"]
    assert set(state) >= {"model", "optimizer", "scheduler", "counters", "metrics", "aspects"}
    assert state["aspects"]["checkpoint"] == {
        "kept": ["epoch_1.pt"],
        "best_score": None,
        "best_file": None,
        "best_metric": None,
        "best_rule": None,
    }
    assert "base_seed" in state["aspects"]["dist_sampler_seed"]
    assert payload["grad_scaler"]["scale"] == 512.0
    assert set(payload["rng"][0]) >= {"python", "numpy", "torch"}


def test_save_optimizer_false_leaves_the_optimizer_out_and_still_resumes(tmp_path: Path) -> None:
    """Without the optimizer the file holds the rest; resuming keeps a fresh optimizer."""
    make_runner(tmp_path, n=N, batch_size=BATCH, aspects=[Checkpoint(save_optimizer=False)]).run()
    assert "optimizer" not in torch.load(tmp_path / "epoch_1.pt", weights_only=True)["runner"]
    runner = make_runner(
        tmp_path, n=N, batch_size=BATCH, max_epochs=2, aspects=[Checkpoint(resume="auto")]
    )
    runner.run()
    assert runner.epoch == 2


def test_save_optimizer_false_keeps_the_learning_rate_the_schedule_reached(
    tmp_path: Path,
) -> None:
    """The schedule goes on from the LR it reached (torch schedulers scale the current
    LR): only the momentum buffers are left out of the file."""

    def lrs(epochs: int, folder: Path, **ckpt: Any) -> list[float]:
        def step_lr(optimizer: torch.optim.Optimizer) -> Any:
            return torch.optim.lr_scheduler.StepLR(optimizer, 2, gamma=0.1)

        aspects = [LRSchedule(step_lr), Checkpoint(save_optimizer=False, **ckpt)]
        runner = make_runner(folder, n=N, batch_size=BATCH, max_epochs=epochs, aspects=aspects)
        seen: list[float] = []
        runner.weaver.after("train_epoch")(
            lambda ctx: seen.append(ctx.runner.optimizer.param_groups[0]["lr"])
        )
        runner.run()
        return seen

    whole = lrs(5, tmp_path / "whole")
    lrs(3, tmp_path / "parts")
    assert lrs(5, tmp_path / "parts", resume="auto") == whole[3:]


def test_save_optimizer_false_resumes_with_another_kind_of_optimizer(tmp_path: Path) -> None:
    """Without the optimizer's state, a resume may switch optimizers: AdamW keeps its own
    settings (betas ...) and takes the LR the run had reached."""
    make_runner(tmp_path, n=N, batch_size=BATCH, aspects=[Checkpoint(save_optimizer=False)]).run()
    model = make_runner(None, n=N, batch_size=BATCH).model
    adamw = torch.optim.AdamW(model.parameters(), lr=0.5)
    runner = Runner(
        model,
        adamw,
        make_loader(make_dataset(N), BATCH),
        loss_fn=torch.nn.functional.cross_entropy,
        max_epochs=2,
        work_dir=tmp_path,
        aspects=[Checkpoint(resume="auto")],
    )
    runner.run()
    assert runner.epoch == 2
    group = adamw.param_groups[0]
    assert (group["lr"], group["betas"]) == (0.1, (0.9, 0.999))


class _NumpyState(Aspect):
    """An aspect whose state holds a numpy scalar, which weights_only loading rejects."""

    def before_train_iter(self, ctx: CallContext) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {"ema_loss": numpy.float64(0.5)}


def test_state_that_weights_only_cannot_load_is_an_error_before_training(tmp_path: Path) -> None:
    """The error names where the value sits, and no iteration runs."""
    runner = make_runner(tmp_path, aspects=[_NumpyState(), Checkpoint()])
    with pytest.raises(RunnerError, match=r"\['_numpy_state'\]\['ema_loss'\].*numpy"):
        runner.run()
    assert runner.iter == 0


def test_checkpoint_without_work_dir_is_an_error_before_training() -> None:
    """Checkpoints need a folder; the error says to give work_dir."""
    runner = make_runner(None, aspects=[Checkpoint()])
    with pytest.raises(RunnerError, match="work_dir="):
        runner.run()
    assert runner.iter == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"interval": 0}, "interval=0"),
        ({"max_keep": 0}, "max_keep=0"),
        ({"max_keep": -1}, "max_keep=None keeps them all"),  # OpenMMLab's -1
        ({"filename_tmpl": "ckpt.pt"}, "one '{}'"),
        ({"filename_tmpl": "epoch_{}_{}.pt"}, "one '{}'"),
        ({"filename_tmpl": "{}_{epoch}.pt"}, "one '{}'"),
        ({"filename_tmpl": "{:03d}.pt"}, "one '{}'"),
        ({"rule": "greater"}, "only applies with save_best"),
        ({"save_best": "val/acc", "rule": "up"}, "rule='up'"),
        ({"resume": 3}, "'auto', a checkpoint path or None"),
    ],
)
def test_bad_options_fail_at_construction(kwargs: dict[str, Any], match: str) -> None:
    """Each bad option is named with what it should be."""
    with pytest.raises(InvalidOptionError, match=re.escape(match)):
        Checkpoint(**kwargs)


def test_openmmlab_name_is_an_alias() -> None:
    """``CheckpointHook`` is ``Checkpoint`` for configs written for OpenMMLab."""
    assert aspects.CheckpointHook is Checkpoint
    assert "Checkpoint" in aspects.__all__


@pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")
def test_checkpoint_files_get_the_usual_permissions(tmp_path: Path) -> None:
    """Checkpoints and ``latest`` are created as ``open()`` would (0o666 less the umask),
    not private to the owner as a temp file would leave them."""
    umask = os.umask(0o022)
    os.umask(umask)
    make_runner(tmp_path, n=N, batch_size=BATCH, max_epochs=1, aspects=[Checkpoint()]).run()
    for name in ("epoch_1.pt", "latest"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~umask


def test_an_unreadable_manifest_keeps_the_kept_and_best_files_of_the_resumed_state(
    tmp_path: Path,
) -> None:
    """Resumed past a broken ``latest``, max_keep still prunes the files saved before it
    and a worse score does not replace the best file."""
    per_epoch = [0.1, 0.9, 0.5, 0.3, 0.2, 0.1]
    scores = [s for s in per_epoch for _ in range(2)]  # two validation batches each

    def run(epochs: int, resume: str | None) -> None:
        make_runner(
            tmp_path,
            n=N,
            batch_size=BATCH,
            val=True,
            max_epochs=epochs,
            aspects=[
                Evaluate(metrics={"acc": _scripted(scores)}),
                Checkpoint(max_keep=2, save_best="val/acc", resume=resume),
            ],
        ).run()

    run(3, None)
    assert _files(tmp_path) == {"epoch_2.pt", "epoch_3.pt", "best_val_acc_epoch_2.pt", "latest"}
    (tmp_path / "latest").write_text("{not json")
    scores[:] = scores[6:]  # the resumed run validates epochs 4, 5 and 6
    with pytest.warns(RuntimeWarning, match="unreadable manifest"):
        run(6, "auto")
    assert _files(tmp_path) == {"epoch_5.pt", "epoch_6.pt", "best_val_acc_epoch_2.pt", "latest"}
    assert _manifest(tmp_path)["best"] == "best_val_acc_epoch_2.pt"


@pytest.mark.parametrize("template", ["ckpt_{}.pth", "model.pt.{}"])
def test_without_a_manifest_the_file_furthest_into_the_run_is_used(
    tmp_path: Path, template: str
) -> None:
    """The folder scan finds the template's files (whatever their suffix) and takes the one
    furthest into the run, not the newest on disk (a copy renews the times)."""
    make_runner(
        tmp_path, n=N, batch_size=BATCH, max_epochs=3, aspects=[Checkpoint(filename_tmpl=template)]
    ).run()
    (tmp_path / "latest").write_text("{not json")
    os.utime(tmp_path / template.format(1), (2e9, 2e9))  # the oldest save, newest on disk
    resumed: list[Event] = []
    runner = make_runner(
        tmp_path,
        n=N,
        batch_size=BATCH,
        max_epochs=3,
        aspects=[Checkpoint(filename_tmpl=template, resume="auto")],
    )
    with ah.on("checkpoint.resumed")(resumed.append), pytest.warns(RuntimeWarning):
        runner.run()
    assert [Path(e.path).name for e in resumed] == [template.format(3)]


class _Tally(Aspect):
    """An aspect with state: how many iterations it saw."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.seen = 0

    def after_train_iter(self, ctx: CallContext) -> None:
        self.seen += 1

    def state_dict(self) -> dict[str, Any]:
        return {"seen": self.seen, "per_class": {(0, "a"): 1.0}}  # tuple keys load too

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seen = state["seen"]


def test_two_aspects_with_state_and_one_name_are_refused(tmp_path: Path) -> None:
    """Their states would share one slot in the checkpoint; named apart, each resumes its
    own (tuple keys in a state load with weights_only too)."""
    with pytest.raises(RunnerError, match=r"named '_tally'.*name="):
        make_runner(tmp_path, aspects=[_Tally(), _Tally()])
    runner = make_runner(tmp_path, aspects=[_Tally(), _Tally(name="other")])
    with pytest.raises(RunnerError, match="named 'other'"):
        runner.add_aspect(_Tally(name="other"))

    def tallies(start: int) -> list[_Tally]:
        one, other = _Tally(), _Tally(name="other")
        other.seen = start
        make_runner(
            tmp_path, n=N, batch_size=BATCH, aspects=[one, other, Checkpoint(resume="auto")]
        ).run()
        return [one, other]

    assert [t.seen for t in tallies(100)] == [4, 104]
    # A finished run resumed: each state comes back from its own slot, nothing more runs.
    assert [t.seen for t in tallies(0)] == [4, 104]
    assert _load_latest(tmp_path)["runner"]["aspects"]["other"]["per_class"] == {(0, "a"): 1.0}


class _Stream(torch.utils.data.IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    """An iterable dataset: no indices for a sampler to skip. Its noise comes from python's
    and numpy's global generators, which skipping by loading must leave as they were."""

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        g = torch.Generator().manual_seed(0)
        for _ in range(N):
            noise = random.random() + float(numpy.random.rand())
            yield torch.randn(4, generator=g) + noise, torch.randint(0, 3, (), generator=g)


class _Scaled(torch.utils.data.DataLoader[Any]):
    """A DataLoader subclass with its own per-batch work (inputs scaled at random)."""

    def __iter__(self) -> Any:
        for x, y in super().__iter__():
            yield x * (1 + random.random()), y


@pytest.mark.parametrize(
    "loader",
    [
        lambda: torch.utils.data.DataLoader(_Stream(), batch_size=BATCH),
        lambda: _Scaled(make_dataset(N), batch_size=BATCH),
    ],
    ids=["iterable-dataset", "dataloader-subclass"],
)
def test_loaders_without_a_sampler_to_skip_in_resume_by_iteration(
    tmp_path: Path, loader: Callable[[], Any]
) -> None:
    """An iterable dataset has no indices to skip, and a DataLoader subclass's __iter__ may
    change the batches: both are advanced by iteration, and the resumed run ends where an
    uninterrupted one does."""

    def runner(folder: Path, max_iters: int, resume: str | None = None) -> Any:
        model = make_runner(None).model
        random.seed(0)  # every run draws the same noise from the start
        numpy.random.seed(0)
        return ah.train.Runner(
            model,
            torch.optim.SGD(model.parameters(), lr=0.1),
            loader(),
            loss_fn=torch.nn.functional.cross_entropy,
            max_iters=max_iters,
            work_dir=folder,
            aspects=[Checkpoint(interval=1, by_epoch=False, resume=resume)],
        )

    whole = runner(tmp_path / "whole", 3)
    whole.run()
    runner(tmp_path / "cut", 2).run()
    resumed = runner(tmp_path / "cut", 3, resume="auto")
    resumed.run()
    assert resumed.iter == 3
    for a, b in zip(params(whole), params(resumed), strict=True):
        assert torch.equal(a, b)


def test_a_folder_without_latest_resumes_from_its_newest_file(tmp_path: Path) -> None:
    """Files copied without ``latest`` (or a first save cut short before it): resume uses
    the newest complete file instead of training from scratch over them."""
    make_runner(tmp_path / "run", n=N, batch_size=BATCH, max_epochs=3, aspects=[Checkpoint()]).run()
    copied = tmp_path / "copied"
    copied.mkdir()
    for name in ("epoch_2.pt", "epoch_3.pt"):
        (copied / name).write_bytes((tmp_path / "run" / name).read_bytes())
    resumed: list[Event] = []
    runner = make_runner(
        tmp_path / "new",
        n=N,
        batch_size=BATCH,
        max_epochs=4,
        aspects=[Checkpoint(resume=copied)],
    )
    with ah.on("checkpoint.resumed")(resumed.append):
        runner.run()
    assert [(Path(e.path).name, e.epoch) for e in resumed] == [("epoch_3.pt", 3)]
    assert runner.iter == 4 * N // BATCH


def test_an_explicit_file_beside_an_unreadable_manifest_says_it_is_loaded_unchecked(
    tmp_path: Path,
) -> None:
    """The warning says what happens: the named file is loaded without its checksum."""
    make_runner(tmp_path, n=N, batch_size=BATCH, max_epochs=2, aspects=[Checkpoint()]).run()
    (tmp_path / "latest").write_text("{not json")
    runner = make_runner(
        tmp_path,
        n=N,
        batch_size=BATCH,
        max_epochs=2,
        aspects=[Checkpoint(resume=tmp_path / "epoch_1.pt")],
    )
    with pytest.warns(RuntimeWarning, match="loading the named file without a size and checksum"):
        runner.run()
    assert runner.epoch == 2


def test_with_ema_the_best_checkpoint_holds_the_weights_its_score_was_measured_on(
    tmp_path: Path,
) -> None:
    """EMA validates on its average: the best file's model is that average (what a user
    loads for inference scores the best score), and a resume still gets the live weights."""
    from _fixtures import make_loader, make_model

    ema = aspects.EMA(decay=0.5)
    runner = make_runner(
        tmp_path,
        val=True,
        max_epochs=3,
        aspects=[ema, Checkpoint(save_best="val/loss", rule="less")],
    )
    runner.run()
    checkpoint = runner.get_aspect(Checkpoint)
    assert isinstance(checkpoint, Checkpoint)
    assert checkpoint.best_file is not None
    saved = torch.load(tmp_path / checkpoint.best_file, weights_only=True)
    model = make_model()
    model.load_state_dict(saved["runner"]["model"])
    model.eval()
    loader = make_loader(make_dataset(32, seed=1))
    with torch.no_grad():
        total = sum(
            float(torch.nn.functional.cross_entropy(model(x), y)) * len(y) for x, y in loader
        )
    assert total / 32 == pytest.approx(checkpoint.best_score, rel=1e-6)
    live = params(runner)
    average = [p.detach().clone() for p in ema.averaged.module.parameters()]  # type: ignore[union-attr]
    runner.load_state_dict(runner.state_dict())  # packed and unpacked: nothing moves
    for a, b in zip(params(runner), live, strict=True):
        assert torch.equal(a, b)
    for a, b in zip(ema.averaged.module.parameters(), average, strict=True):  # type: ignore[union-attr]
        assert torch.equal(a, b)


def _wrapped_runner(work_dir: Path, model: torch.nn.Module, **kwargs: Any) -> Runner:
    return Runner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        make_loader(make_dataset(N), BATCH),
        val_loader=make_loader(make_dataset(8, seed=1), BATCH),
        loss_fn=torch.nn.functional.cross_entropy,
        work_dir=work_dir,
        **kwargs,
    )


def test_a_checkpoint_of_a_wrapped_model_loads_into_the_bare_one_and_back(tmp_path: Path) -> None:
    """A model in a data-parallel wrapper (DataParallel here, DistributedDataParallel
    alike) is saved without its ``module.`` prefix, the EMA average too: the file loads
    into the bare model for inference and resumes a run without the wrapper, and back."""
    from _fixtures import make_model

    wrapped = torch.nn.DataParallel(make_model())
    first = _wrapped_runner(
        tmp_path, wrapped, max_epochs=1, aspects=[aspects.EMA(0.5), Checkpoint()]
    )
    first.run()
    saved = torch.load(tmp_path / "epoch_1.pt", weights_only=True)["runner"]
    assert not any(key.startswith("module.") for key in saved["model"])
    make_model().load_state_dict(saved["model"])  # the EMA weights, ready for inference
    bare = make_model()
    second = _wrapped_runner(
        tmp_path, bare, max_epochs=2, aspects=[aspects.EMA(0.5), Checkpoint(resume="auto")]
    )
    second.run()
    assert second.epoch == 2
    third = _wrapped_runner(
        tmp_path,
        torch.nn.DataParallel(make_model()),
        max_epochs=3,
        aspects=[aspects.EMA(0.5), Checkpoint(resume="auto")],
    )
    third.run()
    assert third.epoch == 3


def test_a_checkpoint_of_a_compiled_model_loads_into_the_bare_one_and_back(
    tmp_path: Path,
) -> None:
    """A ``torch.compile``d model is saved without the ``_orig_mod.`` prefix its wrapper
    adds (the EMA average too), as a data-parallel one is: its file loads into the bare
    model (for inference) and resumes a run of the plain model, and that one's a compiled
    run again. It held the prefix, which the plain model refused ("does not fit"); keys
    saved with it lose it on loading."""
    from _fixtures import make_model

    from aspecthook.train._wrappers import without_wrapper_prefix

    torch._dynamo.reset()
    compiled = torch.compile(make_model(), backend="eager")
    first = _wrapped_runner(
        tmp_path, compiled, max_epochs=1, aspects=[aspects.EMA(0.5), Checkpoint()]
    )
    first.run()
    torch._dynamo.reset()
    saved = torch.load(tmp_path / "epoch_1.pt", weights_only=True)["runner"]
    assert not any("_orig_mod." in key for key in saved["model"])
    assert not any("_orig_mod." in key for key in saved["aspects"]["ema"]["averaged"])
    make_model().load_state_dict(saved["model"])  # the EMA weights, ready for inference
    second = _wrapped_runner(
        tmp_path, make_model(), max_epochs=2, aspects=[aspects.EMA(0.5), Checkpoint(resume="auto")]
    )
    second.run()
    assert second.epoch == 2
    third = _wrapped_runner(
        tmp_path,
        torch.compile(make_model(), backend="eager"),
        max_epochs=3,
        aspects=[aspects.EMA(0.5), Checkpoint(resume="auto")],
    )
    third.run()
    assert third.epoch == 3
    bare = make_model().state_dict()
    for prefix in ("_orig_mod.", "module._orig_mod.", "_orig_mod.module."):
        prefixed = {f"{prefix}{key}": value for key, value in bare.items()}
        assert without_wrapper_prefix(prefixed, make_model()) == bare


def test_a_model_state_saved_with_the_wrapper_prefix_still_loads(tmp_path: Path) -> None:
    """A state whose keys all start with ``module.`` (saved from a wrapped model) loads
    into the bare model, and the EMA state saved around the wrapper too."""
    from _fixtures import make_model

    runner = _wrapped_runner(tmp_path, make_model(), max_epochs=1, aspects=[aspects.EMA(0.5)])
    runner.run()
    state = runner.state_dict()
    ema = state["aspects"]["ema"]
    prefixed = {
        **state,
        "model": {f"module.{k}": v for k, v in state["model"].items()},
        "aspects": {
            **state["aspects"],
            "ema": {
                **ema,
                "averaged": {
                    k.replace("module.", "module.module.", 1): v for k, v in ema["averaged"].items()
                },
                "swapped": [f"module.{k}" for k in ema["swapped"]],
            },
        },
    }
    live = [p.detach().clone() for p in params(runner)]
    runner.load_state_dict(prefixed)
    for a, b in zip(params(runner), live, strict=True):
        assert torch.equal(a, b)


def test_resume_auto_names_a_checkpoint_of_another_model_it_found(tmp_path: Path) -> None:
    """A work_dir reused with a changed model: the error names the file resume='auto'
    picked up and says what to do, instead of torch's bare state-dict mismatch."""
    make_runner(tmp_path, n=N, batch_size=BATCH, aspects=[Checkpoint()]).run()
    model = torch.nn.Sequential(torch.nn.Linear(4, 3))
    runner = Runner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        make_loader(make_dataset(N), BATCH),
        loss_fn=torch.nn.functional.cross_entropy,
        max_epochs=2,
        work_dir=tmp_path,
        aspects=[Checkpoint(resume="auto")],
    )
    with pytest.raises(RunnerError, match=r"found '.*epoch_1\.pt', which does not fit this run"):
        runner.run()
    assert runner.iter == 0


# -- resuming once, and state judged by its own metric ------------------------------------


class _CtrlCAt(Aspect):
    """Ctrl-C once, before iteration ``at``."""

    name = "ctrl_c_at"

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.fired = at, False

    def before_train_iter(self, ctx: CallContext) -> None:
        if ctx.runner.iter == self.at and not self.fired:
            self.fired = True
            raise KeyboardInterrupt


def test_a_runner_resumes_once_then_goes_on_from_where_it_is(tmp_path: Path) -> None:
    """Checkpoint(resume='auto') loads the folder's checkpoint for the first run() only:
    run() again after Ctrl-C goes on from runner.iter (it used to roll back to the last
    checkpoint), and a change made between runs (the LR) stays."""
    make_runner(tmp_path, aspects=[Checkpoint(interval=1)], max_epochs=1).run()  # epoch 1
    runner = make_runner(
        tmp_path, aspects=[Checkpoint(interval=1, resume="auto"), _CtrlCAt(13)], max_epochs=3
    )
    with pytest.raises(KeyboardInterrupt):
        runner.run()
    assert runner.iter == 13
    runner.optimizer.param_groups[0]["lr"] = 0.001
    trained: list[float] = []
    runner.weaver.after("optimizer_step")(
        lambda ctx: trained.append(ctx.runner.optimizer.param_groups[0]["lr"])
    )
    runner.run()
    assert runner.iter == 24
    assert trained == [0.001] * 11


def test_resume_from_the_latest_file_takes_its_folder(tmp_path: Path) -> None:
    """resume='<work_dir>/latest' (the manifest, not a checkpoint) resumes from its folder."""
    make_runner(tmp_path, aspects=[Checkpoint()], max_epochs=1).run()
    runner = make_runner(tmp_path, aspects=[Checkpoint(resume=tmp_path / "latest")], max_epochs=2)
    runner.run()
    assert (runner.epoch, runner.iter) == (2, 16)


def test_a_best_score_of_another_metric_is_not_carried_over(tmp_path: Path) -> None:
    """A run resumed with save_best='val/acc' from checkpoints that kept the best val/loss
    looks for the best accuracy afresh (it used to compare accuracies with a loss)."""
    losses = Evaluate(metrics={"loss_metric": lambda outputs, targets: 0.5})
    first = Checkpoint(save_best="val/loss_metric")
    make_runner(tmp_path, aspects=[first, losses], val=True, max_epochs=1).run()
    assert first.best_score == 0.5
    accuracy = Evaluate(metrics={"acc": lambda outputs, targets: 0.2})
    second = Checkpoint(save_best="val/acc", resume="auto")
    make_runner(tmp_path, aspects=[second, accuracy], val=True, max_epochs=2).run()
    assert (second.best_score, second.best_file) == (0.2, "best_val_acc_epoch_2.pt")


def test_save_best_in_a_run_that_never_validated_warns(tmp_path: Path) -> None:
    """save_best with no validation in the run (no val_loader, or no Evaluate) kept no best
    checkpoint without a word, where EarlyStopping warns. It now warns at the run's end,
    naming the metric and what to add; a run that validated, or trained nothing (resumed
    at its end), does not."""
    runner = make_runner(tmp_path / "unvalidated", aspects=[Checkpoint(save_best="val/loss")])
    with pytest.warns(RuntimeWarning, match=r"save_best='val/loss'.*no validation ran"):
        runner.run()
    assert not list((tmp_path / "unvalidated").glob("best_*"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        runner.run()  # at its end already: nothing trained, nothing to say
        validated = make_runner(
            tmp_path / "validated", aspects=[Checkpoint(save_best="val/loss")], val=True
        )
        validated.run()
    assert list((tmp_path / "validated").glob("best_*"))


def test_save_best_in_a_run_stopped_before_its_first_validation_does_not_warn(
    tmp_path: Path,
) -> None:
    """A run stopped (NaNGuard, stop()) before its first validation has a val_loader and
    Evaluate: the warning's advice to add them would be wrong, so it is not given."""
    runner = make_runner(tmp_path, aspects=[Checkpoint(save_best="val/loss")], val=True)
    runner.weaver.after("train_iter")(lambda ctx: ctx.runner.stop("enough"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        runner.run()
    assert runner.iter == 1


def test_a_resume_of_a_stopped_run_says_why_it_returns_at_once(tmp_path: Path) -> None:
    """Resumed from a run that stop() ended, with larger limits: run() returns at once and
    says why (the reason comes back with the checkpoint)."""
    first = make_runner(tmp_path, aspects=[Checkpoint()], max_epochs=1)
    first.weaver.after("train_epoch")(lambda ctx: ctx.runner.stop("manual stop"))
    first.run()
    runner = make_runner(tmp_path, aspects=[Checkpoint(resume="auto")], max_epochs=3)
    with capture_logs() as logs:
        runner.run()
    assert runner.epoch == 1
    [finished] = [e for e in logs if e["event"] == "runner.finished"]
    assert finished["reason"] == "manual stop"


def test_a_checkpoint_given_to_a_new_runner_resumes_it(tmp_path: Path) -> None:
    """The same Checkpoint(resume='auto') instance given to a second runner (a notebook
    cell run again) resumes that runner too: resuming is once per runner."""
    checkpoint = Checkpoint(resume="auto")
    first = make_runner(tmp_path, aspects=[checkpoint], max_epochs=2)
    first.run()
    first.close()
    epochs: list[int] = []
    second = make_runner(tmp_path, aspects=[checkpoint], max_epochs=4)
    second.weaver.before("train_epoch")(lambda ctx: epochs.append(ctx.runner.epoch))
    second.run()
    assert epochs == [2, 3]


def test_a_break_in_the_first_iteration_after_a_resume_is_no_unfinished_stage(
    tmp_path: Path,
) -> None:
    """Resumed, then Ctrl-C inside the first iteration, then run() again: that iteration is
    simply trained again, and no runner.stage_unfinished is reported."""
    make_runner(tmp_path, aspects=[Checkpoint()], max_epochs=2).run()
    runner = make_runner(tmp_path, aspects=[Checkpoint(resume="auto")], max_epochs=3)
    fired: list[bool] = []

    def ctrl_c(ctx: CallContext) -> None:
        if not fired:
            fired.append(True)
            raise KeyboardInterrupt

    runner.weaver.before("forward")(ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        runner.run()
    with capture_logs() as logs:
        runner.run()
    assert [e for e in logs if e["event"] == "runner.stage_unfinished"] == []
    assert runner.epoch == 3


@pytest.mark.parametrize("replaced", [False, True], ids=["dies-before", "dies-after"])
def test_a_write_that_replaces_a_listed_file_and_dies_leaves_it_resumable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replaced: bool
) -> None:
    """Saving a name the manifest already lists (``save()`` again at the same iteration, or
    the last save of a run resumed where it had ended) replaces that file: a write cut
    short on either side of the replace leaves the old or the new file, and the next
    resume takes whichever it finds without calling it corrupt, even when it is the only
    checkpoint kept (``max_keep=1``)."""
    checkpoint = Checkpoint(interval=2, by_epoch=False, max_keep=1)
    runner = make_runner(tmp_path, n=N, batch_size=BATCH, max_iters=4, aspects=[checkpoint])
    runner.run()
    assert _manifest(tmp_path)["latest"] == "iter_4.pt"
    old = params(runner)
    runner.model[0].bias.data += 1.0  # the state the second save holds differs from the first
    new = params(runner)
    _save_cut_short(checkpoint, runner, monkeypatch, replaced=replaced)
    _resumes_cleanly_from_iter_4(tmp_path, new if replaced else old)


def _resumes_cleanly_from_iter_4(folder: Path, expected: list[torch.Tensor]) -> None:
    """A new runner resumes from ``iter_4.pt`` with no "unusable" warning, and its
    parameters are ``expected``."""
    resumed: list[Event] = []
    again = make_runner(
        folder, n=N, batch_size=BATCH, max_iters=4, aspects=[Checkpoint(resume="auto")]
    )
    with ah.on("checkpoint.resumed")(resumed.append), warnings.catch_warnings():
        warnings.simplefilter("error")  # no "unusable" warning: the file is whole
        again.run()
    assert [Path(e.path).name for e in resumed] == ["iter_4.pt"]
    for a, b in zip(params(again), expected, strict=True):
        assert torch.equal(a, b)


def _save_cut_short(
    checkpoint: Checkpoint, runner: Runner, monkeypatch: pytest.MonkeyPatch, *, replaced: bool
) -> None:
    """``checkpoint.save(runner)`` onto ``iter_4.pt``, the process 'dying' just before the
    file's replace or just after it (before the manifest that would list it)."""
    from aspecthook.train.aspects import _checkpoint

    real_replace, real_manifest = os.replace, _checkpoint._write_manifest
    done: list[str] = []

    def replace(src: Any, dst: Any) -> None:
        if Path(dst).name == "iter_4.pt":
            if not replaced:
                raise OSError(errno.EIO, "the process died here")
            done.append(Path(dst).name)
        real_replace(src, dst)

    def write_manifest(folder: Path, manifest: dict[str, Any]) -> bytes:
        if done:
            raise OSError(errno.EIO, "the process died here")
        return real_manifest(folder, manifest)

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", replace)
        patch.setattr(_checkpoint, "_write_manifest", write_manifest)
        with pytest.raises(RunnerError, match=r"could not write .*iter_4\.pt"):
            checkpoint.save(runner)


def test_a_file_resumed_in_its_new_form_and_cut_short_again_stays_resumable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write cut short after its replace leaves the new bytes, admitted by the record's
    ``next``; the run resumed from them adopts that record. Saving the name again, cut
    short before the replace, must still admit the bytes on disk: the record first
    settles on them, so the new ``next`` does not push them out."""
    checkpoint = Checkpoint(interval=2, by_epoch=False, max_keep=1)
    runner = make_runner(tmp_path, n=N, batch_size=BATCH, max_iters=4, aspects=[checkpoint])
    runner.run()
    runner.model[0].bias.data += 1.0
    _save_cut_short(checkpoint, runner, monkeypatch, replaced=True)
    checkpoint = Checkpoint(interval=2, by_epoch=False, max_keep=1, resume="auto")
    runner = make_runner(tmp_path, n=N, batch_size=BATCH, max_iters=4, aspects=[checkpoint])
    runner.run()  # resumed from the new bytes, at the end of the run
    on_disk = params(runner)
    runner.model[0].bias.data += 1.0
    _save_cut_short(checkpoint, runner, monkeypatch, replaced=False)
    _resumes_cleanly_from_iter_4(tmp_path, on_disk)


def test_the_manifest_written_before_a_replace_names_only_files_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save that writes a listed interval file again and a new best file: a kill right
    after the manifest written before the replace leaves a ``latest`` whose ``best`` is the
    previous best file, which is on disk, not the new one, which is not written yet."""
    evaluate = Evaluate(interval=2, by_epoch=False)
    checkpoint = Checkpoint(interval=2, by_epoch=False, save_best="val/loss")
    runner = make_runner(
        tmp_path, n=N, batch_size=BATCH, max_iters=4, val=True, aspects=[evaluate, checkpoint]
    )
    runner.run()
    before = _manifest(tmp_path)["best"]
    assert before is not None
    assert (tmp_path / before).is_file()
    runner.metrics["val/loss"] = -1.0  # validated again at iteration 4: a better score
    checkpoint._fresh = True
    # As if the best so far were another file: the save then writes the best anew, under
    # a name the manifest on disk does not list as its best.
    checkpoint.best_file = before.replace("iter_4", "iter_2")
    real_replace = os.replace

    def replace(src: Any, dst: Any) -> None:
        if Path(dst).name == "iter_4.pt":
            raise OSError(errno.EIO, "the process died here")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(RunnerError):
        checkpoint.save(runner)
    monkeypatch.undo()
    manifest = _manifest(tmp_path)
    assert manifest["best"] in manifest["checkpoints"]
    assert (tmp_path / manifest["best"]).is_file()


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("save_best", 5, r"Checkpoint\(save_best=5\) is not a metric name: .*save_best='val/acc'"),
        ("save_best", ["val/acc"], r"Checkpoint\(save_best=\['val/acc'\]\) is not a metric name"),
        (
            "filename_tmpl",
            5,
            r"Checkpoint\(filename_tmpl=5\) is not a file name: .*'epoch_\{\}",
        ),
    ],
)
def test_checkpoint_refuses_a_name_that_is_not_a_string(
    option: str, value: Any, message: str
) -> None:
    """save_best= and filename_tmpl= of another type are refused by name (they were an
    AttributeError from str methods)."""
    with pytest.raises(InvalidOptionError, match=message):
        Checkpoint(**{option: value})
