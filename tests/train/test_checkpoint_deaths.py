"""Checkpoint, killed at every step of a write: the next ``resume='auto'`` takes the newest
whole checkpoint (or the one being written, if its replace happened), never a partial file,
and calls no good file corrupt.

A process death is simulated in-process: the writer's ``os`` calls (``_checkpoint_files``'
``os``, and the deletions after a manifest) are counted, and the N-th one and every one
after it fail, as nothing more reaches the disk once a process is dead. The run then ends
in an error (``RunnerError``, or the ``OSError`` of a resume's deletions); a new runner
resumes from what is on disk.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import torch
from _fixtures import make_model, make_runner, one_thread, params
from hypothesis import given, settings
from hypothesis import strategies as st

from aspecthook import CallContext
from aspecthook.errors import RunnerError
from aspecthook.train import Runner
from aspecthook.train.aspects import (
    Checkpoint,
    Evaluate,
    _checkpoint,
    _checkpoint_files,
    _checkpoint_resume,
)

# 16 samples in batches of 4: 4 iterations per epoch.
N, BATCH = 16, 4
TMP = _checkpoint_files._TMP_SUFFIX


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    with one_thread():
        yield


@dataclass
class _Save:
    """One write the writer started: its names, the state it holds, how far it got."""

    iter: int
    names: list[str]
    params: list[torch.Tensor]
    replaced: set[str] = field(default_factory=set)
    completed: bool = False  # its last manifest is in place


@dataclass
class _History:
    """Every write of a scenario, across its processes, in order."""

    saves: list[_Save] = field(default_factory=list)
    gathered: list[torch.Tensor] = field(default_factory=list)  # the state being saved

    def replaced(self, name: str) -> None:
        save = self.saves[-1]
        if name in save.names:
            save.replaced.add(name)
        elif name == "latest" and save.replaced == set(save.names):
            save.completed = True

    def resumable(self) -> list[_Save | None]:
        """The states a resume may take: the newest completed save's (None: a fresh start)
        and those of the writes after it that got as far as replacing a file."""
        done = [i for i, save in enumerate(self.saves) if save.completed]
        start = done[-1] if done else -1
        newest: _Save | None = self.saves[start] if done else None
        return [newest, *(save for save in self.saves[start + 1 :] if save.replaced)]

    def orphans(self) -> set[str]:
        """Files replaced by writes that did not complete (a manifest may not list them),
        unless a write that completed wrote them since (a manifest then took them over)."""
        orphans: set[str] = set()
        for save in self.saves:
            if save.completed:
                orphans -= set(save.names)
            else:
                orphans |= save.replaced
        return orphans


class _DyingOs:
    """``os`` for the writer: its ``at``-th counted call and every later one fail."""

    def __init__(self, at: int | None, history: _History) -> None:
        self.at, self.history = at, history
        self.calls = 0
        self.dead = False
        self.died_deleting = False
        self.left: dict[str, Any] | None = None  # the manifest it left

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def _step(self) -> None:
        if self.dead or self.calls == self.at:
            self.dead = True
            raise OSError(errno.EIO, "the process died here")
        self.calls += 1

    def open(self, path: Any, flags: int, mode: int = 0o777) -> int:
        self._step()
        return os.open(path, flags, mode)

    def write(self, fd: int, data: Any) -> int:
        if not self.dead and self.calls == self.at:
            os.write(fd, memoryview(data)[: len(data) // 2])  # died inside the write
        self._step()
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        self._step()
        os.fsync(fd)

    def close(self, fd: int) -> None:
        if self.dead:
            os.close(fd)  # the kernel closes a dead process's files
        self._step()
        os.close(fd)

    def replace(self, src: Any, dst: Any) -> None:
        self._step()
        os.replace(src, dst)
        self.history.replaced(Path(dst).name)

    def unlink(self, path: Any) -> None:
        self._step()
        os.unlink(path)

    def delete(self, folder: Path, names: list[str]) -> None:
        """``_delete``, one counted step per file."""
        for name in names:
            self.died_deleting = self.calls == self.at
            self._step()
            (folder / name).unlink(missing_ok=True)


@dataclass
class _Scenario:
    interval: int
    max_keep: int
    scores: list[int] | None  # save_best's metric by iteration; None: no save_best
    processes: list[tuple[int, int | None, bool]]  # (max_iters, death at, save again)


@st.composite
def _scenarios(draw: st.DrawFn) -> _Scenario:
    best = draw(st.booleans())
    scores = draw(st.lists(st.integers(0, 3), min_size=12, max_size=12)) if best else None
    processes: list[tuple[int, int | None, bool]] = []
    max_iters = draw(st.integers(1, 3))
    for _ in range(draw(st.integers(1, 3))):
        max_iters += draw(st.integers(0, 2))
        death = draw(st.none() | st.integers(0, 60))
        processes.append((max_iters, death, draw(st.booleans())))
    return _Scenario(draw(st.integers(1, 2)), draw(st.integers(1, 3)), scores, processes)


def _process(folder: Path, scenario: _Scenario, max_iters: int, again: bool) -> None:
    """One process: resume, train to ``max_iters``, maybe ``save()`` again with the model
    changed."""
    checkpoint = Checkpoint(
        scenario.interval,
        by_epoch=False,
        max_keep=scenario.max_keep,
        save_best=None if scenario.scores is None else "val/score",
        rule=None if scenario.scores is None else "greater",
        resume="auto",
    )
    aspects: list[Any] = [checkpoint]
    runner: list[Runner] = []  # for the metric: its score is the iteration's, run after run
    if scenario.scores is not None:
        scores = scenario.scores
        metric = {"score": lambda outputs, targets: scores[runner[0].iter % len(scores)]}
        aspects.append(Evaluate(1, by_epoch=False, metrics=metric))
    runner.append(
        make_runner(
            folder,
            n=N,
            batch_size=BATCH,
            max_iters=max_iters,
            val=scenario.scores is not None,
            aspects=aspects,
        )
    )
    try:
        runner[0].run()
        if again:
            runner[0].model[0].bias.data += 1.0  # a state other than the one saved
            checkpoint.save(runner[0])
    finally:
        runner[0].close()


def _seen(runner: Runner) -> Any:
    folder = Path(runner.work_dir or ".")
    latest = folder / "latest"
    manifest = json.loads(latest.read_bytes()) if latest.is_file() else None
    return runner.iter, params(runner), {p.name for p in folder.iterdir()}, manifest


def _whole(folder: Path) -> dict[str, Any] | None:
    """The manifest, after checking it parses and every file it lists holds the bytes of
    its record (or of its ``next``)."""
    latest = folder / "latest"
    if not latest.is_file():
        return None
    manifest: dict[str, Any] = json.loads(latest.read_bytes())
    assert manifest["latest"] in manifest["checkpoints"]
    for name, record in manifest["checkpoints"].items():
        data = (folder / name).read_bytes()
        versions = [record, *([record["next"]] if "next" in record else [])]
        digest = (len(data), hashlib.sha256(data).hexdigest())
        assert digest in {(v["size"], v["sha256"]) for v in versions}, f"{name} is not whole"
    return manifest


def _assert_resumed(seen: Any, resumable: list[_Save | None], orphans: set[str]) -> None:
    """A process resumed from one of the ``resumable`` states, with no file beyond the
    manifest's and the ``orphans`` (no temp file, no deletion left pending)."""
    iteration, weights, files, manifest = seen
    states = [
        (0, _initial_params()) if save is None else (save.iter, save.params) for save in resumable
    ]
    assert any(
        iteration == it and all(torch.equal(a, b) for a, b in zip(weights, ps, strict=True))
        for it, ps in states
    ), f"resumed at iteration {iteration}, expected one of {[it for it, _ in states]}"
    listed = set(manifest["checkpoints"]) | {"latest"} if manifest else set()
    assert files <= listed | orphans, f"stray files {files - listed - orphans}"


def _initial_params() -> list[torch.Tensor]:
    """The parameters of a run that starts from scratch."""
    return [p.detach().clone() for p in make_model().parameters()]


def _run_scenario(folder: Path, scenario: _Scenario) -> list[_DyingOs]:
    """Run its processes in turn, each resuming from what the one before left, and a last
    one that runs to the end undisturbed; check each resume and the folder after each
    process. The ``os`` each process had (how many calls, where it died)."""
    history = _History()
    processes: list[_DyingOs] = []
    real_payload, real_write = Checkpoint._payload, Checkpoint._write
    real_before_run = Checkpoint.before_run
    seen: list[Any] = []

    def before_run(self: Checkpoint, ctx: CallContext) -> None:
        real_before_run(self, ctx)
        seen.append(_seen(ctx.runner))  # resumed, nothing trained yet

    def payload(self: Checkpoint, runner: Any) -> dict[str, Any]:
        history.gathered = params(runner)
        return real_payload(self, runner)

    def write(self: Checkpoint, job: Any) -> None:
        history.saves.append(_Save(job.iter, list(job.names), history.gathered))
        real_write(self, job)

    final = scenario.processes[-1][0]
    with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings():
        warnings.simplefilter("error")  # an "unusable" RuntimeWarning fails the test
        patch.setattr(Checkpoint, "_payload", payload)
        patch.setattr(Checkpoint, "_write", write)
        patch.setattr(Checkpoint, "before_run", before_run)
        for max_iters, death, again in [*scenario.processes, (final, None, False)]:
            resumable, orphans = history.resumable(), history.orphans()
            dying = _DyingOs(death, history)
            processes.append(dying)
            patch.setattr(_checkpoint_files, "os", dying)
            patch.setattr(_checkpoint, "_delete", dying.delete)
            patch.setattr(_checkpoint_resume, "_delete", dying.delete)  # a resume's
            seen.clear()
            try:
                _process(folder, scenario, max_iters, again)
            except (RunnerError, OSError):
                if not dying.dead:
                    raise
            if seen:  # not dead before it resumed
                _assert_resumed(seen[0], resumable, orphans)
            dying.left = _whole(folder)
    files = {p.name for p in folder.iterdir()}
    manifest = _whole(folder)
    listed = {*manifest["checkpoints"], "latest"} if manifest else set()
    orphans = history.orphans()
    assert files <= listed | orphans, f"stray files {files - listed - orphans}"
    return processes


@settings(max_examples=30, deadline=None)
@given(_scenarios())
def test_a_death_at_any_step_of_a_write_leaves_the_last_checkpoint_resumable(
    scenario: _Scenario,
) -> None:
    """Killed at any step of any write (interval and best files, a listed name saved
    again, deletions a manifest left pending), then resumed, in turn: each resume takes
    the newest whole checkpoint with its parameters, or the newer one being written if
    its replace happened, never warning about a file, and leaves no stray file."""
    with tempfile.TemporaryDirectory() as folder:
        _run_scenario(Path(folder), scenario)


@pytest.mark.parametrize(
    "scenario",
    [
        _Scenario(1, 1, [0, 2, 1, 3, 1, 0, 3, 2, 1, 2, 3, 0], [(2, None, False), (4, None, True)]),
        _Scenario(2, 2, None, [(3, None, False), (6, None, True)]),
    ],
    ids=["best-keep-1", "interval-2-keep-2"],
)
def test_a_death_at_each_step_of_a_run_leaves_it_resumable(scenario: _Scenario) -> None:
    """The second of two runs (background saves, the last one, then ``save()`` again onto
    its listed name) killed at each of its writer's steps in turn, and resumed. Killed
    while deleting what its manifest dropped, the next run is killed while finishing those
    deletions too; killed after replacing the listed file (its record admits the new bytes
    by ``next``), the next run resumes and saves it again, killed at each of its steps."""
    first, (max_iters, _, again) = scenario.processes
    steps = _sweep(scenario, [first, (max_iters, None, again)])[1].calls
    next_left = False
    for at in range(steps + 1):
        died = _sweep(scenario, [first, (max_iters, at, again)])[1]
        if died.died_deleting:
            _sweep(scenario, [first, (max_iters, at, again), (max_iters, 0, False)])
        if not next_left and _replaced_a_listed_file(died):
            next_left = True
            then = _sweep(scenario, [first, (max_iters, at, again), (max_iters, None, True)])
            for again_at in range(then[2].calls + 1):
                dying_again = [first, (max_iters, at, again), (max_iters, again_at, True)]
                _sweep(scenario, dying_again)
    assert next_left


def _sweep(scenario: _Scenario, processes: list[tuple[int, int | None, bool]]) -> list[_DyingOs]:
    with tempfile.TemporaryDirectory() as folder:
        return _run_scenario(Path(folder), replace(scenario, processes=processes))


def _replaced_a_listed_file(died: _DyingOs) -> bool:
    """Whether it died after replacing a file its manifest lists with a ``next``."""
    records = (died.left or {}).get("checkpoints", {})
    cut_short = died.history.saves[-1:]
    replaced = {n for save in cut_short if not save.completed for n in save.replaced}
    return any("next" in records[name] for name in replaced & set(records))
