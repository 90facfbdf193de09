"""How a ``Checkpoint`` resumes a run: find the checkpoint, load it into the runner, take
over the folder's records, and put the RNG states back at the right moment.

Separate from ``_checkpoint`` (the aspect: when to save and what a checkpoint holds)
because resuming happens once per runner and reads what saving wrote; the folder's files
themselves are ``_checkpoint_files``'. The helpers both halves use (the folder, the
private generators, sending an event) live here too, as this module does not import the
aspect's.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..._context import Event
from ..._log import get_logger, log_safely
from ..._weaver import default_weaver
from ...errors import RunnerError
from .._rng import restore_own_rank
from ._checkpoint_files import (
    LATEST,
    _checkpoint_names,
    _delete,
    _find,
    _record,
    _undeletable_error,
)

if TYPE_CHECKING:
    from ._checkpoint import Checkpoint

__all__ = [
    "EVENT_RESUMED",
    "_emit",
    "_folder",
    "_generators",
    "_log_failures",
    "_raise_first",
    "_restore_rng",
    "_resume",
]

#: Emitted on every rank after a resume: ``path``, ``epoch``, ``iter``.
EVENT_RESUMED = "checkpoint.resumed"
#: Keys torch's schedulers add to an optimizer's groups (kept with save_optimizer=False).
_LR_KEYS = frozenset(("initial_lr", "max_lr", "min_lr", "base_momentum", "max_momentum"))


def _resume(checkpoint: Checkpoint, runner: Any, folder: Path) -> None:
    """Load the checkpoint ``checkpoint.resume`` names (or the newest good one) into
    ``runner``; nothing found is a fresh start."""
    resume = checkpoint.resume
    source = folder if resume == "auto" else Path(resume or folder)
    if source.name == LATEST and source.is_file():  # the manifest: its folder is meant
        source = source.parent
    rank0 = runner.rank == 0  # logs and warns; every rank resumes alike
    names = _checkpoint_names(checkpoint.filename_tmpl)
    unusable: list[Path] = []
    found = _find(source, names, quiet=not rank0, unusable=unusable)
    # Reported as damaged checkpoints: saves may write over them (see _check_unlisted).
    here = folder.resolve()
    checkpoint._damaged = frozenset(p.name for p in unusable if p.parent.resolve() == here)
    if found is None:
        if rank0:
            get_logger().info("checkpoint.none_found", folder=str(source))
        return
    path, payload, manifest = found
    try:  # the aspect's kept/best come back through it too
        runner.load_state_dict(_runner_state(runner, payload))
    except (RuntimeError, KeyError, ValueError, TypeError) as exc:
        raise RunnerError(
            f"Checkpoint(resume={str(resume)!r}) found {str(path)!r}, which does not "
            f"fit this run ({type(exc).__name__}: {exc}); resume from a checkpoint of this "
            "model and optimizer, or give another work_dir or resume=None"
        ) from exc
    scaler = getattr(runner, "grad_scaler", None)
    if scaler is not None and "grad_scaler" in payload:
        scaler.load_state_dict(payload["grad_scaler"])
    same_folder = path.parent.resolve() == folder.resolve()
    _adopt(checkpoint, folder, manifest if same_folder else None, path, rank0)
    checkpoint._saved_at = runner.iter
    if rank0:
        get_logger().info(EVENT_RESUMED, path=str(path), epoch=runner.epoch, iter=runner.iter)
    failures = _emit(runner, EVENT_RESUMED, path, runner.epoch, runner.iter)
    # The RNGs come back last, once nothing of the resume itself can draw from them.
    # Resumed inside an epoch, the loop replays that epoch's start (before_train_epoch
    # advice, which may draw random numbers or import modules that do) although the
    # interrupted run had done it before the checkpoint: they come back after it.
    checkpoint._pending_rng = list(payload.get("rng", []))
    if runner.inner_iter == 0 or runner.finished:
        _restore_rng(checkpoint, runner)
    _raise_first(failures)  # a subscriber's error, once the resume is whole


def _restore_rng(checkpoint: Checkpoint, runner: Any) -> None:
    """Put back this rank's RNG states the resumed checkpoint holds (pending till now)."""
    states, checkpoint._pending_rng = checkpoint._pending_rng or [], None
    restore_own_rank(states, runner.rank, _generators(runner))
    # Said once, by rank 0, for every rank the checkpoint holds no RNG state for (they
    # keep their own generators): the ranks from len(states) on.
    world_size = runner.world_size
    if runner.rank == 0 and len(states) < world_size:
        get_logger().warning(
            "checkpoint.no_rng_state",
            ranks=list(range(len(states), world_size)),
            saved=len(states),
        )


def _adopt(checkpoint: Checkpoint, folder: Path, manifest: Any, path: Path, writer: bool) -> None:
    """Reconcile the restored kept/best lists with what the folder really holds."""
    records = (manifest or {}).get("checkpoints") or {}
    wanted = {*checkpoint.kept, checkpoint.best_file}
    if manifest == {}:  # unreadable: the files as found (the next manifest lists them)
        records = {
            name: _record(folder / name)
            for name in wanted
            if name is not None and (folder / name).is_file()
        }
    checkpoint._records = {
        name: dict(record)
        for name, record in records.items()
        if name in wanted and (folder / name).is_file()
    }
    checkpoint.kept = [name for name in checkpoint.kept if name in checkpoint._records]
    if checkpoint.best_file not in checkpoint._records:
        checkpoint.best_file = checkpoint.best_score = None  # its file is gone: track afresh
    checkpoint._latest = path.name if path.name in checkpoint._records else None
    checkpoint._listed_best = checkpoint.best_file
    if writer:  # finish deletions a killed run decided on but did not get to
        pending = (manifest or {}).get("delete") or []
        try:
            _delete(folder, [name for name in pending if name not in checkpoint._records])
        except OSError as exc:
            raise _undeletable_error(exc, path) from exc


def _runner_state(runner: Any, payload: dict[str, Any]) -> dict[str, Any]:
    """The runner state to load from ``payload``, with an optimizer state in any case."""
    state = dict(payload["runner"])
    if "optimizer" not in state:  # saved with save_optimizer=False: a fresh optimizer
        fresh = runner.optimizer.state_dict()
        groups = state.pop("optimizer_groups", None)  # with the saved groups' settings
        if groups is not None and len(groups) != len(fresh["param_groups"]):
            # The LR each group reached (and a scheduler's per-group state) would not fit.
            raise ValueError(
                f"it was saved with save_optimizer=False from an optimizer with {len(groups)} "
                f"param group(s), this one has {len(fresh['param_groups'])}: the learning "
                "rates reached cannot be carried over group by group; build the optimizer "
                "with the same groups"
            )
        if groups is not None:
            # The settings this optimizer has (another kind keeps its own: AdamW's
            # betas), and the schedulers' initial_lr.
            fresh["param_groups"] = [
                {**group, **{k: v for k, v in saved.items() if k in group or k in _LR_KEYS}}
                for saved, group in zip(groups, fresh["param_groups"], strict=True)
            ]
        state["optimizer"] = fresh
    return state


# -- helpers of saving and resuming -----------------------------------------------------------


def _folder(runner: Any) -> Path:
    work_dir = getattr(runner, "work_dir", None)
    if work_dir is None:
        raise RunnerError("Checkpoint needs a folder to write to: give the runner work_dir='...'")
    return Path(work_dir)


def _generators(runner: Any) -> dict[str, torch.Generator]:
    """Private generators whose state is part of the run: the train loader's, if it has one."""
    generator = getattr(getattr(runner, "train_loader", None), "generator", None)
    return {"train_loader": generator} if isinstance(generator, torch.Generator) else {}


def _emit(runner: Any, event: str, path: Path, epoch: int, iteration: int) -> list[Exception]:
    """Send ``event`` through the runner's weaver (its subscribers and global ones), else
    the default one, in priority order, to every subscriber even after one raises: a
    checkpoint's bookkeeping and its other events must not stop half-way. Returns what the
    subscribers raised, for the caller to raise once it is done (``_raise_first``)."""
    weaver = getattr(runner, "weaver", None) or default_weaver
    sent = Event(event, {"path": str(path), "epoch": epoch, "iter": iteration}, runner)
    failures: list[Exception] = []
    for subscriber in weaver._subscribers(event):
        try:
            subscriber(sent)
        except Exception as failure:
            failures.append(failure)
    return failures


def _raise_first(failures: list[Exception]) -> None:
    """Raise the first exception an event's subscriber raised (as ``emit`` would have);
    the others go to the log (``checkpoint.subscriber_failed``)."""
    _log_failures(failures[1:])
    if failures:
        raise failures[0]


def _log_failures(failures: list[Exception]) -> None:
    """Log what event subscribers raised where something else is already raised."""
    for failure in failures:
        log_safely(
            "error",
            "checkpoint.subscriber_failed",
            error=f"{type(failure).__name__}: {failure}",
            exc_info=failure,
        )
