"""``ProgressBar``: a rich progress bar over the training iterations (rank 0)."""

from __future__ import annotations

from typing import Any

from ..._aspect import Aspect, AspectOptions
from ..._context import CallContext, Proceed
from ..._priority import Priority
from ..._rich import import_rich
from ..._typing import Unpack
from .._data import planned_iters
from ._options import check_flags

__all__ = ["ProgressBar"]


class ProgressBar(Aspect):
    """Shows training progress with ``rich.progress``; ``errors='log'``, never stops a run."""

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

    def around_run(self, ctx: CallContext, proceed: Proceed) -> Any:
        """The bar is shown for the run itself: started once every ``before_run`` advice
        has passed (one that refuses the run leaves no bar behind) and stopped however the
        run ends."""
        self._start(ctx.runner)
        try:
            return proceed()
        finally:
            self._stop()

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

    def before_train_epoch(self, ctx: CallContext) -> None:
        # The first epoch starts after every before_run advice, a checkpoint's resume
        # included (whatever the order of the two aspects): the bar starts where it is.
        if self._progress is not None and not self._resumed:
            self._resumed = True
            self._progress.reset(self._task, completed=ctx.runner.iter)

    def after_train_iter(self, ctx: CallContext) -> None:
        if self._progress is None:
            return
        loss = ctx.runner.outputs.get("loss")
        shown = _Shown(loss.detach()) if loss is not None else "-"
        self._progress.update(self._task, completed=ctx.runner.iter, loss=shown)

    def _stop(self) -> None:
        if self._progress is not None:
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
