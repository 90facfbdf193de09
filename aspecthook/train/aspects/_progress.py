"""``ProgressBar``: a rich progress bar over the training iterations (rank 0)."""

from __future__ import annotations

import time
from typing import Any

from ..._aspect import Aspect, AspectOptions
from ..._context import CallContext, Proceed
from ..._priority import Priority
from ..._rich import import_rich
from ..._typing import Unpack
from .._data import EpochLength, iters_left, planned_iters
from ._options import check_flags

__all__ = ["ProgressBar"]

_clock = time.perf_counter


class ProgressBar(Aspect):
    """Shows training progress with ``rich.progress``; ``errors='log'``, never stops a run.

    The bar is drawn about ten times a second, so it is moved at most that often too (and
    at the end of the run): moving it costs more than a small model's iteration can spare
    (a loss to detach, a locked update of rich's task, about 10 µs), and a move between two
    draws is never seen.
    """

    name = "progress_bar"
    needs_runner = True
    priority = Priority.VERY_LOW
    errors = "log"

    def __init__(
        self, *, transient: bool = False, console: Any = None, **options: Unpack[AspectOptions]
    ) -> None:
        super().__init__(**options)
        check_flags("ProgressBar", transient=transient)
        self.transient = transient
        self.console = console
        self._progress: Any = None
        self._task: Any = None
        self._resumed = False  # the bar moved to the (possibly resumed) first iteration
        self._period = 0.1  # seconds between draws: rich's (set when the bar starts)
        self._next_move = 0.0  # the clock's time from which after_train_iter moves the bar
        self._moved_to = -1  # the iteration the bar was last moved to
        self._epoch = EpochLength()  # the total of a run over a loader without a length
        self._sized = True  # the bar's total is known (planned_iters)

    def around_run(self, ctx: CallContext, proceed: Proceed) -> Any:
        """The bar is shown for the run itself: started once every ``before_run`` advice
        has passed (one that refuses the run leaves no bar behind) and stopped however the
        run ends."""
        runner = ctx.runner
        self._start(runner)
        try:
            return proceed()
        finally:
            self._stop(runner)

    def _start(self, runner: Any) -> None:
        if runner.rank != 0:
            return
        import_rich()  # first, so that importing it leaves a seeded run's ``random`` as it was
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        total = planned_iters(runner)
        self._sized = total is not None
        self._progress = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"),
            TimeRemainingColumn(),
            transient=self.transient,
            console=self.console,
        )
        self._progress.start()
        self._task = self._progress.add_task("train", total=total, completed=runner.iter, loss="-")
        self._resumed = False
        self._period = 1 / self._progress.live.refresh_per_second
        self._next_move, self._moved_to = 0.0, runner.iter

    def before_train_epoch(self, ctx: CallContext) -> None:
        # The first epoch starts after every before_run advice, a checkpoint's resume
        # included (whatever the order of the two aspects): the bar starts where it is.
        self._epoch.start(ctx.runner)
        if self._progress is not None and not self._resumed:
            self._resumed = True
            self._progress.reset(self._task, completed=ctx.runner.iter)

    def after_train_epoch(self, ctx: CallContext) -> None:
        """Over a loader without a length: the total, once a whole epoch has run."""
        self._epoch.end(ctx.runner)
        if self._progress is None or self._sized:
            return
        runner = ctx.runner
        left = iters_left(runner, self._epoch.value)
        if left is not None:
            self._progress.update(self._task, total=runner.iter + left)

    def after_train_iter(self, ctx: CallContext) -> None:
        now = _clock()
        if now < self._next_move or self._progress is None:
            return
        self._next_move = now + self._period
        self._move(ctx.runner)

    def _move(self, runner: Any) -> None:
        """Move the bar to the runner's iteration, with that iteration's loss."""
        self._moved_to = runner.iter
        loss = runner.outputs.get("loss")
        shown = _Shown(loss.detach()) if loss is not None else "-"
        self._progress.update(self._task, completed=runner.iter, loss=shown)

    def _stop(self, runner: Any) -> None:
        if self._progress is None:
            return
        try:
            if self._moved_to != runner.iter:  # the iterations since the last move
                self._move(runner)
        finally:
            self._progress.stop()
            self._progress = None


class _Shown:
    """A loss read when the bar draws it (about ten times a second), not every iteration:
    reading a tensor on an accelerator waits for the device."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __format__(self, spec: str) -> str:
        return f"{float(self.value):.4f}"

    def __str__(self) -> str:
        return format(self, "")
