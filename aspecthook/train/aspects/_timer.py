"""``IterTimer``: data time, iteration time and ETA of a run."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from ..._aspect import Aspect, AspectOptions
from ..._context import CallContext
from ..._priority import Priority
from ..._typing import Unpack
from .._data import EpochLength, iters_left
from ._options import check_count

__all__ = ["IterTimer"]

_clock = time.perf_counter


class IterTimer(Aspect):
    """Measures, per training iteration, the time waiting for data and the whole iteration.

    ``runner.outputs['data_time']`` and ``['time']`` hold the latest values (seconds);
    ``eta(runner)`` estimates the time left from the mean over the last ``window``
    iterations of the time each took from the end of the one before (the wait for its
    batch included, a validation in between left out). A run by ``max_epochs`` over a
    loader without a length (an ``IterableDataset``) has an ETA from the end of its first
    whole epoch on, each epoch left taken to be as long as the latest whole one. Its
    priority is the highest: its ``before`` starts the clock after nothing else and its
    ``after`` stops it before any other after advice runs, so the figures are there for
    ``Logger`` and the other aspects to read.
    """

    name = "iter_timer"
    needs_runner = True
    priority = Priority.HIGHEST

    def __init__(self, window: int = 50, **options: Unpack[AspectOptions]) -> None:
        super().__init__(**options)
        self.window = check_count("IterTimer", "window", window)
        self.times: deque[float] = deque(maxlen=self.window)
        self._last_end: float | None = None
        self._start = 0.0
        self._epoch = EpochLength()  # for the ETA over a loader without a length

    def before_train_epoch(self, ctx: CallContext) -> None:
        self._last_end = _clock()
        self._epoch.start(ctx.runner)

    def after_train_epoch(self, ctx: CallContext) -> None:
        self._epoch.end(ctx.runner)

    def before_train_iter(self, ctx: CallContext) -> None:
        self._start = _clock()

    def after_val_epoch(self, ctx: CallContext) -> None:
        # A validation between two iterations (Evaluate by iteration) is not data time.
        if self._last_end is not None:
            self._last_end = _clock()

    after_test_epoch = after_val_epoch

    def after_train_iter(self, ctx: CallContext) -> None:
        # Per iteration: two clock readings, one append, two stores; nothing allocated
        # but the floats. The data time comes from the same readings (start - last end),
        # and the ETA from the whole period (data and iteration): a run waiting on its
        # loader spends that wait on every iteration left too.
        now = _clock()
        start = self._start
        elapsed = now - start
        outputs = ctx.runner.outputs  # this iteration's dict (train_iter makes a new one)
        outputs["time"] = elapsed
        last_end = self._last_end
        if last_end is not None:
            outputs["data_time"] = start - last_end
            elapsed = now - last_end
        self.times.append(elapsed)
        self._last_end = now

    def eta(self, runner: Any) -> float | None:
        """Seconds left, from the recent mean iteration time; None before any iteration, and
        while the run's length is not known (``iters_left``)."""
        if not self.times:
            return None
        left = iters_left(runner, self._epoch.value)
        if left is None:
            return None
        return float(left * sum(self.times) / len(self.times))
