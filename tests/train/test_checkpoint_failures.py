"""Checkpoint under failures a user meets: disk errors at each step of a save, damaged or
foreign manifests, checkpoints of a newer version, and two runs in one folder. Each leaves
the last good checkpoint readable, and says which file and what to do."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from _fixtures import make_dataset, make_loader, make_model, make_runner, one_thread
from structlog.testing import capture_logs

import aspecthook as ah
from aspecthook import Aspect, CallContext, Priority
from aspecthook.errors import InvalidOptionError, RunnerError
from aspecthook.train import Runner
from aspecthook.train.aspects import Checkpoint, Evaluate, _checkpoint

# 16 samples in batches of 4: 4 iterations per epoch.
N, BATCH = 16, 4


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    with one_thread():
        yield


def _manifest(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / "latest").read_text())
    return data


def _latest_iter(folder: Path) -> int:
    """The iteration of the checkpoint ``latest`` names, checked against its record."""
    manifest = _manifest(folder)
    record = manifest["checkpoints"][manifest["latest"]]
    data = (folder / manifest["latest"]).read_bytes()
    assert (len(data), hashlib.sha256(data).hexdigest()) == (record["size"], record["sha256"])
    payload = torch.load(folder / manifest["latest"], weights_only=True)
    return int(payload["runner"]["counters"]["iter"])


def _runner(folder: Path, max_iters: int, **options: Any) -> Runner:
    checkpoint = Checkpoint(2, by_epoch=False, **options)
    return make_runner(folder, n=N, batch_size=BATCH, max_iters=max_iters, aspects=[checkpoint])


# -- disk errors ---------------------------------------------------------------------------


def test_a_manifest_that_cannot_be_written_is_named_and_latest_keeps_the_last_good_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills up while ``latest`` is written for iter_4.pt: the error names the
    manifest (not iter_4.pt, which was written) and ``latest`` still names iter_2.pt."""
    real = _checkpoint._write_manifest

    def write_manifest(folder: Path, manifest: dict[str, Any]) -> bytes:
        if manifest["latest"] == "iter_4.pt":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(folder, manifest)

    monkeypatch.setattr(_checkpoint, "_write_manifest", write_manifest)
    with pytest.raises(RunnerError, match=r"could not write the manifest 'latest' for iter_4"):
        _runner(tmp_path, 8).run()
    assert _latest_iter(tmp_path) == 2


def _undeletable(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Deleting ``name`` fails as a file the user may not delete does."""
    real = os.unlink

    def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        if Path(path).name == name:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        real(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)


def test_an_old_checkpoint_that_cannot_be_deleted_is_named_and_the_new_one_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pruning fails after ``latest`` moved to iter_4.pt: the error says so (not that
    ``latest`` still names the one before), names iter_2.pt, and iter_4.pt loads."""
    _undeletable(monkeypatch, "iter_2.pt")
    with pytest.raises(RunnerError, match=r"wrote iter_4\.pt .*'latest' names it, but could not"):
        _runner(tmp_path, 4, max_keep=1).run()
    assert _latest_iter(tmp_path) == 4
    assert _manifest(tmp_path)["delete"] == ["iter_2.pt"]


def test_a_resume_that_cannot_finish_a_deletion_says_which_file_and_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume deletes what the manifest dropped; when it cannot, a RunnerError names the
    file (not a bare PermissionError); once it can, the run resumes and deletes it."""
    _undeletable(monkeypatch, "iter_2.pt")
    with pytest.raises(RunnerError):
        _runner(tmp_path, 4, max_keep=1).run()
    with pytest.raises(RunnerError, match=r"could not delete '.*iter_2\.pt'.*permissions"):
        _runner(tmp_path, 6, max_keep=1, resume="auto").run()
    monkeypatch.undo()
    runner = _runner(tmp_path, 6, max_keep=1, resume="auto")
    runner.run()
    assert runner.iter == 6
    assert not (tmp_path / "iter_2.pt").exists()


# -- manifests and checkpoints it must not trust -------------------------------------------


def test_a_manifest_of_a_newer_format_is_an_error_not_a_fresh_start(tmp_path: Path) -> None:
    """A folder a newer aspecthook wrote is refused with what to do; it is left as it was."""
    _runner(tmp_path, 4).run()
    manifest = _manifest(tmp_path)
    (tmp_path / "latest").write_text(json.dumps({**manifest, "format": 2}))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(RunnerError, match=r"format 2, written by a newer aspecthook.*upgrade"):
        _runner(tmp_path, 8, resume="auto").run()
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_checkpoint_of_a_newer_format_is_an_error_not_overwritten(tmp_path: Path) -> None:
    """Without a manifest, checkpoint files of a newer format are refused, not skipped: a
    fresh start would write its own iter_2.pt over the newer version's."""
    _runner(tmp_path, 4).run()
    (tmp_path / "latest").unlink()
    for path in tmp_path.glob("*.pt"):
        payload = torch.load(path, weights_only=True)
        torch.save({**payload, "format": 2}, path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(RunnerError, match=r"'.*iter_\d\.pt' is of format 2.*upgrade aspecthook"):
        _runner(tmp_path, 8, resume="auto").run()
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"delete": ["../outside.txt"]}, "'../outside.txt' is not the name of a file"),
        ({"delete": "iter_2.pt"}, "'delete' is 'iter_2.pt', not a list"),
        ({"checkpoints": {"iter_4.pt": "whole"}}, "the record of 'iter_4.pt' is not a size"),
        ({"checkpoints": {"iter_4.pt": {"size": 1, "sha256": "0", "iter": None}}}, "record"),
        ({"checkpoints": {"../outside.txt": {"size": 1, "sha256": "0", "iter": 9}}}, "outside"),
    ],
    ids=["delete-outside", "delete-not-a-list", "record-not-a-dict", "iter-none", "name-outside"],
)
def test_a_manifest_that_parses_but_is_malformed_is_reported_and_the_files_used(
    tmp_path: Path, change: dict[str, Any], reason: str
) -> None:
    """A manifest whose names or records are not what a Checkpoint writes is reported as
    unreadable (saying what is wrong) and the files themselves are resumed from; a name
    outside the folder is neither deleted nor loaded."""
    _runner(tmp_path, 4).run()
    outside = tmp_path.parent / "outside.txt"
    outside.write_text("the user's own file")
    (tmp_path / "latest").write_text(json.dumps({**_manifest(tmp_path), **change}))
    runner = _runner(tmp_path, 6, resume="auto")
    with pytest.warns(RuntimeWarning, match=rf"unreadable manifest: .*{reason}"):
        runner.run()
    assert outside.read_text() == "the user's own file"
    assert runner.iter == 6
    assert _latest_iter(tmp_path) == 6


# -- two runs, one folder ------------------------------------------------------------------


class _AtIteration(Aspect):
    """Calls ``fn()`` after iteration ``at``, after every other after-advice."""

    priority = Priority.LOWEST

    def __init__(self, at: int, fn: Any) -> None:
        super().__init__()
        self.at, self.fn = at, fn

    def after_train_iter(self, ctx: CallContext) -> None:
        if ctx.runner.iter == self.at:
            self.fn()


def test_another_run_writing_to_the_folder_stops_this_one_at_its_next_save(
    tmp_path: Path,
) -> None:
    """A second run in the same work_dir (a user mistake) writes its own ``latest``
    while the first still trains: the first run's next save refuses to overwrite it,
    saying why, and the second run's checkpoints stay as it left them."""
    other = _runner(tmp_path, 3)
    checkpoint = Checkpoint(2, by_epoch=False)
    first = make_runner(tmp_path, n=N, batch_size=BATCH, max_iters=8, aspects=[checkpoint])

    def other_run() -> None:
        checkpoint.wait()  # the first run's iter_2.pt and its manifest are on disk
        other.run()

    first.add_aspect(_AtIteration(3, other_run))
    with pytest.raises(RunnerError, match=r"another run writes checkpoints to this folder"):
        first.run()
    assert _manifest(tmp_path)["latest"] == "iter_3.pt"
    assert _latest_iter(tmp_path) == 3


def test_another_run_starting_while_a_write_is_in_flight_is_named_as_the_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run starting in the folder deletes temp files it takes for a killed run's,
    among them the one the first run is writing: the first run's error says why."""
    reached, release = threading.Event(), threading.Event()
    real_replace = os.replace

    def replace(src: Any, dst: Any) -> None:
        if not reached.is_set():  # the first run's iter_2.pt: held until released
            reached.set()
            assert release.wait(30)
        real_replace(src, dst)

    def other_run() -> None:
        assert reached.wait(30)
        _runner(tmp_path, 1, save_last=False).run()  # starts, deletes the temp file
        release.set()

    monkeypatch.setattr(os, "replace", replace)
    first = _runner(tmp_path, 8)
    first.add_aspect(_AtIteration(3, other_run))
    with pytest.raises(RunnerError, match=r"temp file was deleted .*another run writes"):
        first.run()


def test_a_run_after_another_in_the_same_folder_is_no_conflict(tmp_path: Path) -> None:
    """Runs one after the other in one folder (a resume, or a fresh start over it) each
    read ``latest`` when they start: nothing is refused."""
    _runner(tmp_path, 4).run()
    _runner(tmp_path, 2).run()
    resumed = _runner(tmp_path, 6, resume="auto")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resumed.run()
    assert _latest_iter(tmp_path) == 6


def test_a_second_checkpoint_on_one_runner_is_refused_before_training(tmp_path: Path) -> None:
    """Two ``Checkpoint`` aspects would write one ``latest``, each dropping the other's
    files from it: refused when the run starts, saying to keep one."""
    runner = make_runner(
        tmp_path,
        n=N,
        batch_size=BATCH,
        aspects=[Checkpoint(), Checkpoint(2, by_epoch=False, name="by_iter")],
    )
    with pytest.raises(RunnerError, match=r"two Checkpoint aspects .*'by_iter'.*keep one"):
        runner.run()
    assert runner.iter == 0
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("manifest", [True, False], ids=["with-latest", "without-latest"])
def test_a_folder_whose_checkpoints_are_all_unusable_is_an_error_not_a_fresh_start(
    tmp_path: Path, manifest: bool
) -> None:
    """Every checkpoint damaged (or the one ``latest`` names deleted, with no other): each
    is reported, and the run stops before a fresh start writes over them."""
    _runner(tmp_path, 4, max_keep=1).run()
    (tmp_path / "iter_4.pt").write_bytes(b"half a checkpoint")
    if not manifest:
        (tmp_path / "latest").unlink()
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    runner = _runner(tmp_path, 8, resume="auto")
    with (
        pytest.warns(RuntimeWarning, match=r"iter_4\.pt is unusable"),
        pytest.raises(RunnerError, match=r"holds checkpoints, but none is usable.*out of the"),
    ):
        runner.run()
    assert runner.iter == 0
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_latest_naming_a_deleted_file_resumes_from_the_one_before(tmp_path: Path) -> None:
    """The file ``latest`` names was deleted by hand: reported by name, and the run
    resumes from the newest file it still lists."""
    _runner(tmp_path, 4).run()
    (tmp_path / "iter_4.pt").unlink()
    runner = _runner(tmp_path, 4, resume="auto")
    with pytest.warns(RuntimeWarning, match=r"iter_4\.pt is unusable \(the file is missing\)"):
        runner.run()
    assert _latest_iter(tmp_path) == 4  # resumed at 2, trained to 4 and saved it again


def test_save_optimizer_false_into_other_param_groups_says_what_differs(tmp_path: Path) -> None:
    """A checkpoint without the optimizer, resumed into an optimizer with other param
    groups: the LR each group reached cannot be carried over, so the resume stops saying
    how many groups each has; it went on with the new groups' initial LRs."""
    make_runner(tmp_path, n=N, batch_size=BATCH, aspects=[Checkpoint(save_optimizer=False)]).run()
    model = make_model()
    groups = [{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": 0.05}]
    runner = Runner(
        model,
        torch.optim.SGD(groups, lr=0.1),
        make_loader(make_dataset(N), BATCH),
        loss_fn=torch.nn.functional.cross_entropy,
        work_dir=tmp_path,
        max_epochs=2,
        aspects=[Checkpoint(resume="auto")],
    )
    with pytest.raises(
        RunnerError, match=r"save_optimizer=False .*1 param group\(s\), this one has 2"
    ):
        runner.run()
    assert runner.iter == 0


@pytest.mark.parametrize("name", ["latest", "sub/extra.pt", "../extra.pt"])
def test_save_refuses_a_name_that_is_not_a_file_of_work_dir(tmp_path: Path, name: str) -> None:
    """``save(runner, 'latest')`` would write the checkpoint over the manifest (and the
    manifest over it), and a name with a folder is one no manifest may list: refused,
    saying what to give; the folder is left as it was."""
    checkpoint = Checkpoint()
    runner = make_runner(tmp_path, n=N, batch_size=BATCH, aspects=[checkpoint])
    runner.run()
    (tmp_path / "sub").mkdir()
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    with pytest.raises(InvalidOptionError, match=r"give the name of a file to write in work_dir"):
        checkpoint.save(runner, name)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
    assert not any((tmp_path / "sub").iterdir())


# -- interrupted while a write is in flight --------------------------------------------------


def test_ctrl_c_while_waiting_for_a_write_lets_it_finish_and_run_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C arrives while the training thread waits for the write in flight (the next
    save): ``run()`` raises it once that write is complete, with no writer left running,
    no temp file, and ``latest`` naming the file, which a new run resumes from."""
    real_join, real_replace = threading.Thread.join, os.replace
    interrupted = threading.Event()

    def replace(src: Any, dst: Any) -> None:
        if Path(dst).name == "iter_2.pt":  # still in flight when the next save waits
            assert interrupted.wait(30)
        real_replace(src, dst)

    def join(self: threading.Thread, timeout: float | None = None) -> None:
        if self.name == "aspecthook-checkpoint-writer" and not interrupted.is_set():
            interrupted.set()
            raise KeyboardInterrupt  # as a signal does, while join() blocks
        real_join(self, timeout)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(threading.Thread, "join", join)
    with pytest.raises(KeyboardInterrupt):
        _runner(tmp_path, 8).run()
    monkeypatch.undo()
    assert interrupted.is_set()
    assert not [t for t in threading.enumerate() if t.name == "aspecthook-checkpoint-writer"]
    assert not list(tmp_path.glob(".*.ckpt-tmp"))
    assert _latest_iter(tmp_path) == 2
    resumed = _runner(tmp_path, 8, resume="auto")
    resumed.run()
    assert resumed.iter == 8


# -- files of the user's in work_dir ---------------------------------------------------------


@pytest.mark.parametrize("kind", ["bytes", "torch-file"])
def test_a_file_of_the_users_under_a_checkpoints_name_is_not_written_over(
    tmp_path: Path, kind: str
) -> None:
    """``iter_4.pt`` left in work_dir by something else (no manifest lists it, and it is
    not a checkpoint of this format): the save onto its name stops the run, naming the
    file and saying to move it; the file is as it was and ``latest`` names ``iter_2.pt``."""
    theirs = tmp_path / "iter_4.pt"
    if kind == "bytes":
        theirs.write_bytes(b"results of another tool")
    else:
        torch.save({"state_dict": make_model().state_dict()}, theirs)
    before = theirs.read_bytes()
    with pytest.raises(RunnerError, match=r"will not write over '.*iter_4\.pt'.*move it out"):
        _runner(tmp_path, 4).run()
    assert theirs.read_bytes() == before
    assert _manifest(tmp_path)["latest"] == "iter_2.pt"
    assert set(_manifest(tmp_path)["checkpoints"]) == {"iter_2.pt"}


def test_an_unlisted_checkpoint_a_killed_write_left_is_written_over_on_resume(
    tmp_path: Path,
) -> None:
    """A checkpoint file the manifest does not list (a write killed after its replace,
    before its manifest) is this run's to write again: the resumed run replaces it, and
    says so in the log."""
    _runner(tmp_path, 4).run()
    (tmp_path / "iter_6.pt").write_bytes((tmp_path / "iter_4.pt").read_bytes())
    with capture_logs() as logs:
        _runner(tmp_path, 8, resume="auto").run()
    assert _latest_iter(tmp_path) == 8
    payload = torch.load(tmp_path / "iter_6.pt", weights_only=True)
    assert payload["runner"]["counters"]["iter"] == 6
    replaced = [log["path"] for log in logs if log["event"] == "checkpoint.unlisted_replaced"]
    assert replaced == [str(tmp_path / "iter_6.pt")]


def test_another_tools_file_a_resume_tried_without_a_manifest_is_not_written_over(
    tmp_path: Path,
) -> None:
    """Checkpoints copied without ``latest`` beside another tool's ``iter_6.pt`` (a torch
    file, no checkpoint of this format): the resume warns that it is unusable and goes on
    from ``iter_4.pt``, but the file is not taken for a damaged checkpoint of ours: the
    save onto its name stops the run and the file is as it was."""
    _runner(tmp_path, 4).run()
    (tmp_path / "latest").unlink()
    theirs = tmp_path / "iter_6.pt"
    torch.save({"state_dict": make_model().state_dict()}, theirs)
    before = theirs.read_bytes()
    runner = _runner(tmp_path, 8, resume="auto")
    with (
        pytest.warns(RuntimeWarning, match=r"iter_6\.pt is unusable"),
        pytest.raises(RunnerError, match=r"will not write over '.*iter_6\.pt'.*move it out"),
    ):
        runner.run()
    assert theirs.read_bytes() == before


# -- a checkpoint of another model ---------------------------------------------------------


def test_a_checkpoint_of_another_model_says_which_keys_and_shapes_differ(tmp_path: Path) -> None:
    """The error names the file and each difference: the keys one side lacks and the
    shapes that differ, from both sides, so the user sees which change broke it."""
    _runner(tmp_path, 4).run()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    model.add_module("3", torch.nn.Linear(3, 3))
    runner = Runner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        make_loader(make_dataset(N), BATCH),
        loss_fn=torch.nn.functional.cross_entropy,
        work_dir=tmp_path,
        max_iters=8,
        aspects=[Checkpoint(2, by_epoch=False, resume="auto")],
    )
    with pytest.raises(RunnerError) as info:
        runner.run()
    message = str(info.value)
    assert "iter_4.pt" in message
    assert 'Missing key(s) in state_dict: "3.weight", "3.bias"' in message
    assert "size mismatch for 0.weight" in message
    assert "torch.Size([16, 4]) from checkpoint" in message
    assert "torch.Size([8, 4])" in message


def test_a_newer_manifest_whose_fields_differ_is_still_refused_as_newer(tmp_path: Path) -> None:
    """A newer format may lay its records out otherwise: it is refused as newer, not
    reported unreadable and skipped for the files."""
    _runner(tmp_path, 4).run()
    (tmp_path / "latest").write_text(json.dumps({"format": 2, "checkpoints": {"a": [1]}}))
    with pytest.raises(RunnerError, match=r"format 2, written by a newer aspecthook"):
        _runner(tmp_path, 8, resume="auto").run()


def test_one_checkpoint_given_to_runners_in_two_folders_refuses_to_mix_them(
    tmp_path: Path,
) -> None:
    """A ``Checkpoint`` keeps the records of the folder it last saved to: saving another
    runner's folder with it would write a manifest of the wrong files, so it is refused,
    saying to give each runner its own; the first folder is left as it was."""
    first, second = tmp_path / "first", tmp_path / "second"
    checkpoint = Checkpoint()
    runner = make_runner(first, n=N, batch_size=BATCH, aspects=[checkpoint])
    runner.run()
    make_runner(second, n=N, batch_size=BATCH, lr=0.5, aspects=[checkpoint]).run()
    before = {p.name: p.read_bytes() for p in first.iterdir()}
    with pytest.raises(RunnerError, match=r"last saved to '.*second'.*its own Checkpoint"):
        checkpoint.save(runner, "extra_4.pt")
    assert {p.name: p.read_bytes() for p in first.iterdir()} == before


class _Meta:
    """A class of a file's own, such as another trainer's checkpoint holds."""


def test_a_file_holding_objects_weights_only_refuses_is_named_with_what_to_do(
    tmp_path: Path,
) -> None:
    """resume= a file of weights saved with an object of its own class: the error names
    the file and the class and says to re-save a state dict, in place of torch's page-long
    message (which it was, with advice to load with weights_only=False)."""
    path = tmp_path / "weights.pt"
    torch.save({"state_dict": make_model().state_dict(), "meta": _Meta()}, path)
    runner = _runner(tmp_path / "run", 4, resume=path)
    with pytest.raises(RunnerError) as info:
        runner.run()
    message = str(info.value)
    assert message.startswith(f"cannot resume from {str(path)!r}: it holds objects that ")
    assert f"({_Meta.__module__}._Meta)" in message
    assert "torch.save(model.state_dict(), path)" in message
    assert "weights_only=False" not in message
    assert len(message) < 600


# -- event subscribers that raise --------------------------------------------------------------


def test_a_saved_subscriber_that_raises_lets_every_event_of_the_save_through(
    tmp_path: Path,
) -> None:
    """A ``checkpoint.saved`` subscriber raising at a save of an interval and a best file:
    both events reach every subscriber, then the subscriber's error stops the run (the
    one after it logged); the manifest names both files."""
    delivered: list[str] = []

    def failing(event: Any) -> None:
        raise ValueError(f"upload of {Path(event.path).name} failed")

    evaluate = Evaluate(metrics={"acc": lambda outputs, targets: 0.5})
    checkpoint = Checkpoint(save_best="val/acc")
    runner = make_runner(
        tmp_path, n=8, batch_size=4, val=True, max_epochs=1, aspects=[evaluate, checkpoint]
    )
    with (
        ah.on("checkpoint.saved", priority="HIGH")(failing),
        ah.on("checkpoint.saved")(lambda event: delivered.append(Path(event.path).name)),
        capture_logs() as logs,
        pytest.raises(ValueError, match=r"upload of epoch_1\.pt failed"),
    ):
        runner.run()
    assert delivered == ["epoch_1.pt", "best_val_acc_epoch_1.pt"]
    assert set(_manifest(tmp_path)["checkpoints"]) == {"epoch_1.pt", "best_val_acc_epoch_1.pt"}
    logged = [log["error"] for log in logs if log["event"] == "checkpoint.subscriber_failed"]
    assert logged == ["ValueError: upload of best_val_acc_epoch_1.pt failed"]


def test_a_saved_subscriber_that_raises_does_not_cost_the_run_the_save_that_was_due(
    tmp_path: Path,
) -> None:
    """A subscriber raising at ``iter_2.pt``'s event, sent when ``iter_4.pt`` is due: the
    run stops with the subscriber's error once ``iter_4.pt`` is saved, and a resume goes
    on from there."""

    def failing(event: Any) -> None:
        if Path(event.path).name == "iter_2.pt":
            raise ValueError("the subscriber's error")

    with (
        ah.on("checkpoint.saved")(failing),
        pytest.raises(ValueError, match="the subscriber's error"),
    ):
        _runner(tmp_path, 8).run()
    assert _latest_iter(tmp_path) == 4


def test_a_resumed_subscriber_that_raises_lets_the_others_have_the_event(
    tmp_path: Path,
) -> None:
    """A ``checkpoint.resumed`` subscriber that raises: the ones after it still get the
    event, then its error stops the run."""
    _runner(tmp_path, 4).run()
    delivered: list[int] = []

    def failing(event: Any) -> None:
        raise ValueError("the subscriber's error")

    with (
        ah.on("checkpoint.resumed", priority="HIGH")(failing),
        ah.on("checkpoint.resumed")(lambda event: delivered.append(event.iter)),
        pytest.raises(ValueError, match="the subscriber's error"),
    ):
        _runner(tmp_path, 8, resume="auto").run()
    assert delivered == [4]
