"""``EarlyStopping``: stop when a validation metric stops improving."""

from __future__ import annotations

import math
import warnings
from typing import Any

from ..._aspect import Aspect, AspectOptions
from ..._context import CallContext
from ..._log import get_logger
from ..._priority import Priority
from ..._typing import Unpack
from ...errors import InvalidOptionError
from ._options import check_count, check_flags, is_real
from ._rules import infer_rule

__all__ = ["EarlyStopping"]


class EarlyStopping(Aspect):
    """After each validation, compare ``runner.metrics[monitor]`` with the best so far.

    ``rule`` is ``'greater'`` or ``'less'`` (inferred from the metric name when omitted);
    an improvement must beat the best by more than ``min_delta``. After ``patience``
    validations without one, ``runner.stop()`` ends the run. With ``check_finite`` a NaN
    or infinite metric stops at once; without it, a NaN counts as no improvement.
    """

    name = "early_stopping"
    needs_runner = True
    priority = Priority.LOWEST

    def __init__(
        self,
        monitor: str = "val/loss",
        *,
        rule: str | None = None,
        patience: int = 5,
        min_delta: float = 0.0,
        check_finite: bool = True,
        **options: Unpack[AspectOptions],
    ) -> None:
        super().__init__(**options)
        patience = check_count("EarlyStopping", "patience", patience)
        if not is_real(min_delta) or not 0 <= float(min_delta) < math.inf:
            raise InvalidOptionError(
                f"EarlyStopping(min_delta={min_delta!r}) must be a finite number >= 0",
                option="min_delta",
                value=min_delta,
            )
        if not isinstance(monitor, str) or not monitor:
            raise InvalidOptionError(
                f"EarlyStopping(monitor={monitor!r}) must name a metric, such as 'val/loss'",
                option="monitor",
                value=monitor,
            )
        check_flags("EarlyStopping", check_finite=check_finite)
        self.monitor = monitor
        self.rule = infer_rule(monitor, rule)
        self.patience = patience
        self.min_delta = float(min_delta)
        self.check_finite = check_finite
        self.best: float | None = None
        self.wait = 0
        self._run_start: int | None = None  # the run's first iteration (before_run)
        self._checked = False  # whether a validation ran in this run

    def before_run(self, ctx: CallContext) -> None:
        self._run_start = getattr(ctx.runner, "iter", None)
        self._checked = False

    def after_run(self, ctx: CallContext) -> None:
        # It acts after validations only: a run that trained and never validated (no
        # val_loader, or no Evaluate) could not stop early, and nothing else would say so.
        # A run stopped before a validation came (NaNGuard, stop()) may well validate:
        # the advice below would be wrong for it.
        start = self._run_start
        stopped = getattr(ctx.runner, "stop_reason", None) is not None
        trained = start is not None and getattr(ctx.runner, "iter", start) > start
        rank0 = getattr(ctx.runner, "rank", 0) == 0  # said once, not by every rank
        if not self._checked and trained and not stopped and rank0:
            warnings.warn(
                f"EarlyStopping never checked {self.monitor!r}: no validation ran in this "
                "run; give the runner a val_loader and add Evaluate()",
                RuntimeWarning,
                stacklevel=2,
            )

    def after_val_epoch(self, ctx: CallContext) -> None:
        runner = ctx.runner
        self._checked = True
        if self.monitor not in runner.metrics:
            get_logger().warning(
                "early_stopping.missing_metric", monitor=self.monitor, known=sorted(runner.metrics)
            )
            return
        value = float(runner.metrics[self.monitor])
        if self.check_finite and not math.isfinite(value):
            # Counted from 1: at an epoch's end it is counted already, inside one it is not.
            epoch = runner.epoch + 1 if getattr(runner, "inner_iter", 0) else runner.epoch
            runner.stop(f"{self.monitor} is {value} at epoch {epoch}")
            return
        if self._improved(value):
            self.best, self.wait = value, 0
            return
        self.wait += 1
        if self.wait >= self.patience:
            runner.stop(
                f"{self.monitor} did not improve on {self.best} for {self.wait} validations"
            )

    def _improved(self, value: float) -> bool:
        # NaN never improves (with check_finite=False): as a first best, no later value
        # would beat it, and a run that recovered would be stopped after ``patience``.
        if math.isnan(value):
            return False
        if self.best is None:
            return True
        if self.rule == "greater":
            return value > self.best + self.min_delta
        return value < self.best - self.min_delta

    def state_dict(self) -> dict[str, Any]:
        """The best value and the validations waited, with the metric and rule they are of."""
        return {"best": self.best, "wait": self.wait, "monitor": self.monitor, "rule": self.rule}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best = state.get("best")
        self.wait = int(state.get("wait", 0))
        if (state.get("monitor", self.monitor), state.get("rule", self.rule)) != (
            self.monitor,
            self.rule,
        ):  # another metric's best and patience mean nothing for this one: start afresh
            self.best, self.wait = None, 0
