"""``Checkpoint``: crash-safe checkpoints on a schedule, the best one by a metric, exact resume.

Files in ``runner.work_dir``:

- ``epoch_<n>.pt`` / ``iter_<n>.pt`` every ``interval`` epochs or iterations, and one at
  the end of the run (``save_last``); with ``max_keep`` only the newest that many stay;
- ``best_<metric>_<epoch|iter>_<n>.pt`` with ``save_best``: only the best one stays;
- ``latest``: a small JSON manifest naming the newest checkpoint and giving the size and
  sha256 of every checkpoint it keeps.

A save has two halves. On the training thread, at the iteration it belongs to, the state
is gathered and serialized (``torch.save`` into memory): the bytes are final before the
next step changes anything. A background writer thread then puts them on disk, in this
order: (1) write them into a temp file in the same folder, ``os.fsync``, and sum their
sha256; (2) ``os.replace`` it onto its name, fsync the folder; (3) write the manifest the
same way; (4) only then delete what the new manifest dropped (old interval checkpoints,
the previous best). The manifest lists those under ``delete``, so a run killed between (3)
and (4) has them deleted when it resumes. A kill at any moment thus leaves ``latest``
naming a complete, verifiable file: the newest one whose write had finished (a kill while
a write is in flight loses that save, not the one before). A save onto a name the manifest
already lists (saved again at the same step) first writes a manifest that admits the new
bytes too (``next`` in its record), so a kill after the replace leaves a file it accepts.
Before a write's first file and before each manifest, the writer checks that ``latest``
holds what this run last wrote or found there: another run writing checkpoints to the
folder (a user's mistake) stops this run at its next save, before it writes over that run's.
Nor does it write over a file of the user's: one that ``latest`` did not list when the run
started is replaced only if it is a checkpoint (``_check_unlisted``).

At most one write is in flight: the next save, the end of the run (``after_run``, whose
last save is written before ``run()`` returns), a run ending in an exception and
:meth:`Checkpoint.wait` all wait for it first. A write that failed raises on the training
thread there (``RunnerError`` naming the files, the cause chained), or is logged when the
run is already failing. ``checkpoint.saved`` is emitted on the training thread once the
write is complete: at the next epoch end after it (with ``save_best``, also at the next
iteration end), or at one of those waits, whichever comes first. Every subscriber gets
every event of a save; what one raised is raised after them, and after the save due then.

A checkpoint holds ``runner.state_dict()`` (model, optimizer unless
``save_optimizer=False``, scheduler, counters, metrics, stop reason and every aspect's own
state, this one's best score and kept files included), the runner's ``grad_scaler`` when
it has one, and every rank's RNG states: tensors and plain containers only, so it loads
with ``torch.load(weights_only=True)``, which runs no code from the file.

Resume is exact (bit for bit) when batches load in the main process or deterministically
(DataLoader workers are seeded per epoch, so random augmentation inside workers does not
replay), and every rank sees ``work_dir``.
"""

from __future__ import annotations

import io
import os
import threading
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..._aspect import Aspect, AspectOptions
from ..._context import CallContext
from ..._log import get_logger
from ..._priority import Priority
from ..._typing import Unpack
from ...errors import RunnerError
from .._rng import capture_all_ranks
from ._checkpoint_best import _new_best
from ._checkpoint_checks import (
    _check_alone,
    _check_storable,
    _max_keep,
    _positive,
    _resume_option,
    _rule,
    _save_name,
    _template,
)
from ._checkpoint_files import (
    _FORMAT,
    _TMP_SUFFIX,
    LATEST,
    _atomic_write,
    _check_unlisted,
    _delete,
    _digest,
    _listed,
    _other_folder_error,
    _other_run_error,
    _read_latest,
    _settled,
    _write_error,
    _write_manifest,
    _WriteJob,
)
from ._checkpoint_resume import (
    EVENT_RESUMED,
    _emit,
    _folder,
    _generators,
    _log_failures,
    _raise_first,
    _restore_rng,
    _resume,
)
from ._options import check_flags

__all__ = ["EVENT_RESUMED", "EVENT_SAVED", "LATEST", "Checkpoint"]

#: Emitted on rank 0 after each file is written: ``path``, ``epoch``, ``iter``.
EVENT_SAVED = "checkpoint.saved"


class Checkpoint(Aspect):
    """Save the run every ``interval`` epochs (``by_epoch``) or iterations; resume it.

    ``max_keep`` keeps only the newest interval checkpoints (never the best one, never
    the one ``latest`` names); ``save_last`` also saves at the end of the run;
    ``save_best='val/acc'`` keeps the checkpoint with the best value of that metric by
    ``rule`` (``'greater'`` / ``'less'``, inferred from the name when omitted).
    ``resume='auto'`` continues from the newest good checkpoint in ``work_dir`` (if any),
    a path from that file (or the newest good one in that folder). A truncated or corrupt
    checkpoint is reported (structlog and ``warnings.warn``, naming the file) and the
    previous good one is used. Rank 0 writes; every rank resumes. A runner that tests
    before it ever runs (``runner.test()`` on a new runner) resumes before the test, so
    it tests the weights trained so far, not its initial ones.

    Saving during training blocks it only to gather and serialize the state; the file,
    its sha256 and fsync, the manifest and the pruning are done by a background thread,
    one save at a time (see the module docstring); ``wait()`` waits for it. ``save()``
    and the save at the end of the run write before they return.

    Priority ``VERY_LOW``: it saves after evaluation, LR steps and EMA updates of the same
    join point, so a checkpoint holds the state the next iteration starts from.
    """

    name = "checkpoint"
    needs_runner = True
    priority = Priority.VERY_LOW

    def __init__(
        self,
        interval: int = 1,
        *,
        by_epoch: bool = True,
        max_keep: int | None = None,
        save_last: bool = True,
        save_best: str | None = None,
        rule: str | None = None,
        save_optimizer: bool = True,
        resume: str | os.PathLike[str] | None = None,
        filename_tmpl: str | None = None,
        **options: Unpack[AspectOptions],
    ) -> None:
        super().__init__(**options)
        check_flags(
            "Checkpoint", by_epoch=by_epoch, save_last=save_last, save_optimizer=save_optimizer
        )
        self.interval = _positive("interval", interval)
        self.max_keep = _max_keep(max_keep)
        self.by_epoch = by_epoch
        self.save_last = save_last
        self.save_best = save_best
        self.rule = _rule(save_best, rule)
        self.save_optimizer = save_optimizer
        self.filename_tmpl = _template(filename_tmpl, by_epoch)
        self.resume = _resume_option(resume)
        # Saved in checkpoints (state_dict): which interval files are kept, the best one.
        self.kept: list[str] = []
        self.best_score: float | None = None
        self.best_file: str | None = None
        # Rank 0's view of the folder: manifest records and the newest file.
        self._records: dict[str, dict[str, Any]] = {}
        self._latest: str | None = None
        self._listed_best: str | None = None  # the best file the manifest on disk names
        self._fresh = False  # a validation ran since the last best check
        # The iteration this run started at, and whether it validated: a run that trained
        # and never did keeps no best checkpoint, which after_run says.
        self._run_start: int | None = None
        self._validated = False
        self._saved_at: int | None = None  # runner.iter of the last interval/last save
        self._pending_rng: list[Any] | None = None  # RNG states to restore (see _resume)
        # The runners this aspect has resumed (by their first run(), or a test() before
        # it): weakly, so a runner closed and dropped is let go.
        self._resumed: weakref.WeakSet[Any] = weakref.WeakSet()
        # The write in flight on the background thread (rank 0), at most one.
        self._write_job: _WriteJob | None = None
        # The folder this aspect last wrote to or started a run in, and the bytes of its
        # 'latest' then (None: no file): another run writing there changes them.
        self._latest_folder: Path | None = None
        self._latest_bytes: bytes | None = None
        # The files that folder's manifest listed then, and those its resume reported
        # damaged: a run over a finished one (or a resumed one) writes over those, never
        # over a file of the user's.
        self._listed: frozenset[str] = frozenset()
        self._damaged: frozenset[str] = frozenset()

    def make_advice(self, target: Any = None) -> list[Any]:
        """Register only the triggers this configuration uses (keeps idle iterations free)."""
        unused = {"after_val_epoch"} if self.save_best is None else set()
        if self.save_best is None and self.by_epoch:
            unused.add("after_train_iter")
        return [a for a in super().make_advice(target) if a.name.rpartition(".")[2] not in unused]

    def advice_options(self, attr: str) -> dict[str, Any]:
        """Saving every ``interval`` iterations and nothing else per iteration (no
        ``save_best``): ``after_train_iter`` runs only on those iterations (``every=``,
        numbered by ``runner.iter``, so a resumed run keeps the schedule)."""
        if attr == "after_train_iter" and not self.by_epoch and self.save_best is None:
            return {"every": self.interval}
        return {}

    # -- advice -------------------------------------------------------------------------

    def before_run(self, ctx: CallContext) -> None:
        runner = ctx.runner
        folder = _folder(runner)
        # Logged first, in every run: a process's first log call can import modules that
        # draw from python's random as they load (rich does). Done here, that draw comes
        # before any RNG state is restored, so it cannot shift a resumed run's numbers.
        # Only rank 0 logs; the others build the logger all the same (bind() does what a
        # first record would, without writing one), so their draws stay where rank 0's are.
        logger = get_logger()
        if runner.rank == 0:
            logger.info("checkpoint.start", folder=str(folder), resume=str(self.resume))
        else:
            logger.bind()
        self._validated = False
        if runner.rank == 0:
            for stale in folder.glob(f".*{_TMP_SUFFIX}"):  # left by a write that was killed
                stale.unlink(missing_ok=True)
        _check_storable(runner.state_dict(), "runner.state_dict()")  # fail now, not at save
        _check_alone(self, runner, Checkpoint)
        # Resumed once, by the first run() (or a test() before it): a later run() of the
        # same runner (after Ctrl-C, or with larger limits) goes on from where it is.
        if self.resume is not None and runner not in self._resumed:
            _resume(self, runner, folder)
        self._resumed.add(runner)
        if runner.rank == 0:
            self._latest_folder, self._latest_bytes = folder.resolve(), _read_latest(folder)
            self._listed = _listed(self._latest_bytes) | self._damaged
        self._run_start = runner.iter  # after a resume: where this run's training starts

    def before_test_epoch(self, ctx: CallContext) -> None:
        runner = ctx.runner
        if self.resume is not None and runner not in self._resumed:  # a test before run()
            _resume(self, runner, _folder(runner))
            self._resumed.add(runner)

    def before_train_epoch(self, ctx: CallContext) -> None:
        if self._pending_rng is not None:
            _restore_rng(self, ctx.runner)

    def after_train_iter(self, ctx: CallContext) -> None:
        if self._write_job is not None and self._write_job.done.is_set():
            # Its checkpoint.saved events (or its error) now, then this advice again.
            self._after_write(Checkpoint.after_train_iter, ctx)
            return
        runner = ctx.runner
        due = not self.by_epoch and runner.iter % self.interval == 0
        if not (due or self._fresh) or runner.finished:
            # A finished run is saved by after_run instead, once the epoch-end advice of
            # this last iteration has run too: its checkpoint then has nothing to replay.
            return
        self._save(runner, self.filename_tmpl.format(runner.iter) if due else None)

    def after_train_epoch(self, ctx: CallContext) -> None:
        if self._write_job is not None and self._write_job.done.is_set():
            # Also for by_epoch=False: its checkpoint.saved events, then this advice again.
            self._after_write(Checkpoint.after_train_epoch, ctx)
            return
        runner = ctx.runner
        # inner_iter == 0: the epoch really ended (it was not cut short by max_iters/stop).
        due = self.by_epoch and runner.inner_iter == 0 and runner.epoch % self.interval == 0
        if due or self._fresh:
            self._save(runner, self.filename_tmpl.format(runner.epoch) if due else None)

    def after_val_epoch(self, ctx: CallContext) -> None:
        metrics = ctx.runner.metrics
        if self.save_best not in metrics:
            raise RunnerError(
                f"Checkpoint(save_best={self.save_best!r}): validation produced "
                f"{sorted(metrics)}, not {self.save_best!r}; name one of those"
            )
        self._fresh = self._validated = True

    def after_run(self, ctx: CallContext) -> None:
        runner = ctx.runner
        due = self.save_last or (not self.by_epoch and runner.iter % self.interval == 0)
        fresh = runner.iter != self._saved_at  # not saved yet in this state
        # Written before run() returns: nothing is left to overlap the write with. What a
        # checkpoint.saved subscriber raised comes after the warning below.
        last = self._last_name(runner) if due and fresh else None
        failures = self._save_all(runner, last, background=False)
        # It trained to its end (not stopped before a validation came) and no validation
        # judged any of it: there is no best to keep, and nothing in the run to judge by.
        start = self._run_start
        unjudged = start is not None and runner.iter > start and not self._validated
        unjudged = unjudged and runner.stop_reason is None
        if self.save_best is not None and unjudged and runner.rank == 0:  # said once
            warnings.warn(
                f"Checkpoint(save_best={self.save_best!r}) kept no best checkpoint: no "
                "validation ran in this run; give the runner a val_loader and add Evaluate()",
                RuntimeWarning,
                stacklevel=2,
            )
        _raise_first(failures)

    def around_run(self, ctx: CallContext, proceed: Callable[[], Any]) -> Any:
        """A run ending in any exception (KeyboardInterrupt too) waits for the write in
        flight, so a new run in this process never reads a folder still being written."""
        try:
            return proceed()
        except BaseException:
            self._abandon_write()
            raise

    # -- state ----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The kept interval checkpoints, and the best score and file with the metric and
        rule they were judged by (part of checkpoints)."""
        return {
            "kept": list(self.kept),
            "best_score": self.best_score,
            "best_file": self.best_file,
            "best_metric": self.save_best,
            "best_rule": self.rule,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.kept = [str(name) for name in state.get("kept", [])]
        score = state.get("best_score")
        self.best_score = None if score is None else float(score)
        self.best_file = state.get("best_file")
        judged_by = (state.get("best_metric", self.save_best), state.get("best_rule", self.rule))
        if judged_by != (self.save_best, self.rule):
            # A best score of another metric (or rule) means nothing for this one: the best
            # is looked for afresh, and the old best file stays on disk as it was.
            self.best_score = self.best_file = None

    # -- saving ---------------------------------------------------------------------------

    def save(self, runner: Any, name: str | None = None) -> Path | None:
        """Save ``runner`` now as an interval checkpoint (``name`` or the usual one).

        Returns the file on rank 0 (written when this returns), None elsewhere. Training
        saves through the same path, without waiting for the write.
        """
        name = _save_name(name) or self._last_name(runner)
        self._save(runner, name, background=False)
        return _folder(runner) / name if runner.rank == 0 else None

    def wait(self) -> None:
        """Wait until the checkpoint being written in the background (if any) is on disk.

        Emits its ``checkpoint.saved`` events; raises ``RunnerError`` if the write failed,
        or what a subscriber of those events raised once each event was sent.
        """
        _raise_first(self._join())

    def _join(self) -> list[Exception]:
        """Wait for the write in flight, if any: its error raised, its events sent; returns
        what their subscribers raised."""
        if self._write_job is None:
            return []
        self._write_job.thread.join()
        return self._finish_write()

    def _after_write(self, advice: Callable[[Checkpoint, CallContext], None], ctx: Any) -> None:
        """The events (or the error) of the write that just finished, then ``advice`` (this
        join point's save), then what those events' subscribers raised: a subscriber's
        error does not cost the run its next checkpoint."""
        failures = self._finish_write()
        try:
            advice(self, ctx)
        except BaseException:
            _log_failures(failures)  # the save's own error goes first
            raise
        _raise_first(failures)

    def _save(self, runner: Any, name: str | None, *, background: bool = True) -> None:
        """Write ``name`` (if given) and a new best checkpoint (if the metric improved),
        on the writer thread or, with ``background=False``, before returning. What a
        ``checkpoint.saved`` subscriber raises is raised once the save is under way."""
        _raise_first(self._save_all(runner, name, background=background))

    def _save_all(self, runner: Any, name: str | None, *, background: bool) -> list[Exception]:
        """``_save``, returning what the subscribers of the events it sent raised."""
        failures = self._join()  # one write at a time; a failed one raises before anything
        try:
            failures += self._start_save(runner, name, background)
        except BaseException:
            _log_failures(failures)  # the save's own error goes first
            raise
        return failures

    def _start_save(self, runner: Any, name: str | None, background: bool) -> list[Exception]:
        """Gather and serialize the state, and hand it to the writer (or write it now);
        returns what the subscribers of its events raised (written now: sent now)."""
        doomed: list[str] = []
        best = _new_best(self, runner, doomed)
        if name is None and best is None:
            return []
        if name is not None:
            doomed += self._keep(name)
            self._saved_at = runner.iter
        payload = self._payload(runner)  # every rank: gathering RNG states is a collective
        if runner.rank == 0:
            buffer = io.BytesIO()
            torch.save(payload, buffer)  # now: the tensors change with the next step
            job = _WriteJob(
                runner=runner,
                folder=_folder(runner),
                names=[n for n in (name, best) if n is not None],
                data=buffer.getbuffer(),
                doomed=doomed,
                best=self.best_file,
                epoch=runner.epoch,
                iter=runner.iter,
            )
            if not background:  # the same steps, on this thread (no thread to start)
                self._write_job = job
                self._write(job)
                return self._finish_write()
            job.thread = threading.Thread(
                target=self._write, args=(job,), name="aspecthook-checkpoint-writer"
            )
            job.thread.start()
            self._write_job = job
        return []

    def _keep(self, name: str) -> list[str]:
        """Add ``name`` to the kept interval files; return those that fall out of max_keep."""
        if name in self.kept:
            self.kept.remove(name)
        self.kept.append(name)
        dropped: list[str] = []
        while self.max_keep is not None and len(self.kept) > self.max_keep:
            dropped.append(self.kept.pop(0))
        return [n for n in dropped if n not in (self.best_file, name)]

    def _payload(self, runner: Any) -> dict[str, Any]:
        state = runner.state_dict()
        if not self.save_optimizer:
            optimizer = state.pop("optimizer", None)
            if optimizer is not None:
                # Only the per-parameter state (momentum, Adam's moments) is left out: the
                # groups' LR and the rest stay, as torch's schedulers go on from the LR.
                groups = optimizer.get("param_groups", [])
                state["optimizer_groups"] = [
                    {k: v for k, v in group.items() if k != "params"} for group in groups
                ]
        payload: dict[str, Any] = {
            "format": _FORMAT,
            "runner": state,
            "rng": capture_all_ranks(_generators(runner)),
        }
        scaler = getattr(runner, "grad_scaler", None)
        if scaler is not None:
            payload["grad_scaler"] = scaler.state_dict()
        _check_storable(payload, "checkpoint")
        return payload

    def _write(self, job: _WriteJob) -> None:
        """On the writer thread: files, then the manifest, then deletions (never delete
        before ``latest`` moved). Only this thread touches ``_records`` / ``_latest`` /
        ``_listed_best`` while a write is in flight; the training thread waits for it
        before using them."""
        try:
            folder = job.folder
            here = folder.resolve()  # once a write: it stats every part of the path
            self._check_latest(folder, here)  # before any file: another run's may have this name
            for name in job.names:  # nor a file of the user's
                if name not in self._records:
                    _check_unlisted(folder / name, self._listed)
            digest = _digest(job.data)
            for name in job.names:
                listed = self._records.get(name)
                if listed is not None:  # its record as the file is (a 'next' settled)
                    listed = self._records[name] = _settled(folder / name, listed)
                if listed is not None and listed.get("sha256") != digest["sha256"]:
                    # Replacing a file the manifest lists (saved again at the same step):
                    # first the manifest admits the new bytes too, so a write cut short
                    # after the replace leaves a file it accepts, not one it calls corrupt.
                    following = {**digest, "epoch": job.epoch, "iter": job.iter}
                    self._records[name] = {**listed, "next": following}
                    job.step = LATEST
                    self._write_latest(folder, here, self._manifest(self._listed_best, []))
                job.step = name
                _atomic_write(folder / name, job.data)
                self._records[name] = {**digest, "epoch": job.epoch, "iter": job.iter}
                self._latest = name
            for name in job.doomed:
                self._records.pop(name, None)
            job.step = LATEST
            self._write_latest(folder, here, self._manifest(job.best, job.doomed))
            job.moved = True
            self._listed_best = job.best
            _delete(folder, job.doomed)
        except BaseException as exc:  # handed to the training thread (_finish_write)
            job.error = exc
        finally:
            job.data.release()
            job.done.set()

    def _check_latest(self, folder: Path, here: Path) -> None:
        """Raise if ``latest`` is not as this aspect last wrote or found it: another run
        writes checkpoints to the folder (a user mistake), which must not go unnoticed; or
        if the aspect's records are another folder's (one aspect given to two runners).
        ``here``: ``folder`` resolved, so one folder however it is spelt."""
        if self._latest_folder is None:
            return
        if here != self._latest_folder:
            raise _other_folder_error(folder, self._latest_folder)
        if _read_latest(folder) != self._latest_bytes:
            raise _other_run_error(folder)

    def _write_latest(self, folder: Path, here: Path, manifest: dict[str, Any]) -> None:
        """Write the manifest, once ``_check_latest`` finds no other run's in its place."""
        self._check_latest(folder, here)
        self._latest_bytes = _write_manifest(folder, manifest)
        self._latest_folder = here

    def _manifest(self, best: str | None, delete: list[str]) -> dict[str, Any]:
        """The ``latest`` manifest of the files written so far; ``delete``: the files it
        drops, deleted once it is on disk (a resume finishes what a kill cut short)."""
        return {
            "format": _FORMAT,
            "latest": self._latest,
            "best": best,
            "checkpoints": self._records,
            "delete": delete,
        }

    def _finish_write(self) -> list[Exception]:
        """On the training thread, once the write is done: its error raised, or its events
        sent, each of them; returns what their subscribers raised (``_raise_first``)."""
        job, self._write_job = self._write_job, None
        if job is None:
            return []
        if job.error is not None:
            if not isinstance(job.error, Exception) or isinstance(job.error, RunnerError):
                raise job.error  # KeyboardInterrupt during a write, or another run's folder
            raise _write_error(job) from job.error
        failures: list[Exception] = []
        for name in job.names:
            failures += _emit(job.runner, EVENT_SAVED, job.folder / name, job.epoch, job.iter)
        return failures

    def _abandon_write(self) -> None:
        """Wait for the write in flight while the run fails; report, never raise."""
        if self._write_job is None:
            return
        try:
            failures = self._join()
        except Exception as exc:
            get_logger().error("checkpoint.write_failed", error=str(exc), exc_info=True)
            return
        _log_failures(failures)

    def _last_name(self, runner: Any) -> str:
        if not self.by_epoch:
            return self.filename_tmpl.format(runner.iter)
        if runner.inner_iter == 0:
            return self.filename_tmpl.format(runner.epoch)
        return f"iter_{runner.iter}.pt"  # stopped inside an epoch: an epoch name would clash

    def _stamp(self, runner: Any) -> str:
        if self.by_epoch and runner.inner_iter == 0:
            return f"epoch_{runner.epoch}"
        return f"iter_{runner.iter}"
