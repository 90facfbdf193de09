"""What the runner tells the user about a run as it starts: advice one typo away from a
join point, a run with nothing left to do, and a stage a previous run broke off in.

Warnings and log events only; kept out of ``_runner`` so the runner module holds the run
itself (the input checks, which refuse a run, are in ``_checks``).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .._log import get_logger

if TYPE_CHECKING:
    from ._runner import Runner

__all__ = ["report_finished", "report_near_misses", "report_unfinished_stage"]


def report_finished(runner: Runner) -> None:
    """``run()`` with nothing left to do (called by the loop once ``before_run`` advice,
    a resume included, has run): after the end, after ``stop()``, or resumed from a
    checkpoint of a finished or stopped run. Say why it returns at once (rank 0 says it
    for every rank, as it logs)."""
    if runner.rank != 0:
        return
    # Only what would let it go on: a stopped run stays stopped with larger limits, and
    # one at its limits gains nothing from clearing stop_reason.
    stopped = runner.stop_reason is not None
    limits = (runner.max_iters is not None and runner.iter >= runner.max_iters) or (
        runner.max_epochs is not None and runner.epoch >= runner.max_epochs
    )
    steps = (["set runner.stop_reason = None"] if stopped else []) + (
        ["raise max_epochs / max_iters"] if limits or not stopped else []
    )
    get_logger().warning(
        "runner.finished",
        reason=runner.stop_reason or "max_epochs / max_iters reached",
        epoch=runner.epoch,
        iter=runner.iter,
        hint=f"{' and '.join(steps)}, then call run() again to go on",
    )


def report_unfinished_stage(runner: Runner) -> None:
    """After a run() that raised in the advice that follows an iteration or an epoch
    (Ctrl-C during validation at an epoch's end, say): the counters had moved on, so
    that iteration or epoch is not trained again, and the advice after the one that
    raised (an LR step, a checkpoint, a log line) never ran for it. Say so, with the
    way to an exact continuation (rank 0 says it for every rank)."""
    if runner.rank != 0:
        return
    for stage, done, settled in (
        ("train_iter", runner.iter, runner.settled_iter),
        ("train_epoch", runner.epoch, runner.settled_epoch),
    ):
        if done != settled:
            get_logger().warning(
                "runner.stage_unfinished",
                stage=stage,
                iter=runner.iter,
                epoch=runner.epoch,
                reason=f"the last run() stopped in the advice after {stage}, whose "
                "later advice (LR step, checkpoint, log...) did not run for it",
                hint="resume from the last checkpoint for a run identical to an uninterrupted one",
            )
            return


def report_near_misses(runner: Runner, joinpoints: Iterable[str]) -> None:
    """Warn about advice (this runner's or module-level) for a name that is one typo away
    from a join point of the run (``after_trian_epoch``): it would never be called.
    ``joinpoints`` are the runner's own join point names."""
    from .._describe import near_misses
    from .._registry import REGISTRY
    from .._weaver import default_weaver

    own = {n for jp in REGISTRY.points_of(runner.weaver) for n in jp.names}
    known = sorted({*joinpoints, *(n for n in own if not n.startswith("@"))})
    for advice, name, hint in near_misses([runner.weaver, default_weaver], known):
        if name in tuple(advice.pointcut._globs()):  # not a Name('eval[val]') with a bracket
            miss, meant = f"no join point name matches {name!r}", f"a pattern that matches {hint!r}"
        else:
            miss, meant = f"no join point is named {name!r}", repr(hint)
        warnings.warn(
            f"{advice.name}: {miss}, so this {advice.kind} advice is never called; "
            f"did you mean {meant}?",
            UserWarning,
            stacklevel=3,
        )
