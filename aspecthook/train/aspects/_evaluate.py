"""``Evaluate``: runs the validation loop on a schedule and computes metrics."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..._aspect import Aspect, AspectOptions
from ..._context import CallContext
from ..._priority import Priority
from ..._typing import Unpack
from ...errors import InvalidOptionError, RunnerError
from .._data import planned_iters
from .._steps import _as_float
from ._options import check_count, check_flags

__all__ = ["Evaluate"]

Metric = Callable[[Any, Any], Any]


class Evaluate(Aspect):
    """Validate every ``interval`` epochs (or iterations with ``by_epoch=False``), and at
    the end of a run that reaches its limits, so that ``run()`` returns the final model's
    metrics (as OpenMMLab's loops validate at ``max_epochs`` / ``max_iters``). A run cut by
    ``stop()`` is not validated again.

    ``metrics`` maps names to callables ``fn(outputs, targets) -> number``; each is averaged
    over the validation set weighted by batch size, as is the loss when the step returns
    one. In a distributed run the ranks' shards are added up, so every rank gets the
    metrics of the whole validation set. Results land in ``runner.metrics`` as
    ``'val/<name>'`` before lower-priority aspects (checkpoint, early stopping, plateau
    schedules) look at them. The test loop
    (``runner.test()``) is measured the same way, as ``'test/<name>'``.
    """

    name = "evaluate"
    needs_runner = True
    priority = Priority.ABOVE_NORMAL

    def __init__(
        self,
        interval: int = 1,
        *,
        by_epoch: bool = True,
        metrics: Mapping[str, Metric] | None = None,
        prefix: str = "val",
        **options: Unpack[AspectOptions],
    ) -> None:
        super().__init__(**options)
        interval = check_count("Evaluate", "interval", interval)
        check_flags("Evaluate", by_epoch=by_epoch)
        self.interval = interval
        self.by_epoch = by_epoch
        self.metrics = _checked_metrics(metrics)
        self.prefix = prefix
        self._sums: dict[str, float] = {}
        self._count = 0
        self._last: int | None = None  # the run's last iteration, when known (before_run)
        self._validated_at: int | None = None  # the iteration of the last validation
        self._warned: set[str] = set()  # loaders already reported as giving no batches

    def make_advice(self, target: Any = None) -> list[Any]:
        """Only the triggers this instance uses: epoch ends, and with ``by_epoch=False``
        iterations too (epoch ends still catch the end of a run whose length is unknown
        before it ends: ``max_epochs`` over a loader without ``len()``)."""
        unused = f"{self.name}.after_train_iter" if self.by_epoch else None
        return [a for a in super().make_advice(target) if a.name != unused]

    def advice_options(self, attr: str) -> dict[str, Any]:
        """The metrics are in place before any other ``after_val_epoch`` advice runs,
        whatever its priority (an OpenMMLab hook of priority HIGH reads them too)."""
        if attr in ("after_val_epoch", "after_test_epoch"):
            return {"priority": Priority.HIGHEST}
        return {}

    def before_run(self, ctx: CallContext) -> None:
        self._last = planned_iters(ctx.runner)

    def after_train_epoch(self, ctx: CallContext) -> None:
        runner = ctx.runner
        if getattr(runner, "val_loader", None) is None:
            return
        last = runner.finished and runner.stop_reason is None  # the run reached its limits
        if not self.by_epoch:  # the run's end, if no iteration knew it was the last
            if last and runner.iter != self._validated_at:
                self._validate(runner)
            return
        # An epoch that ended on the interval, or the run's end (max_iters may cut the last
        # epoch: its model is the final one all the same). An epoch cut by stop() is not.
        if last or (not runner.inner_iter and runner.epoch % self.interval == 0):
            self._validate(runner)

    def after_train_iter(self, ctx: CallContext) -> None:
        runner = ctx.runner
        if self.by_epoch or getattr(runner, "val_loader", None) is None:
            return
        if runner.iter % self.interval == 0 or runner.iter == self._last:
            self._validate(runner)

    def _validate(self, runner: Any) -> None:
        self._validated_at = runner.iter
        runner.val_epoch()

    def state_dict(self) -> dict[str, Any]:
        """The iteration last validated (part of checkpoints): a run resumed from a
        checkpoint of its last iteration does not validate that model again."""
        return {"validated_at": self._validated_at}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        at = state.get("validated_at")
        self._validated_at = None if at is None else int(at)

    def before_val_epoch(self, ctx: CallContext) -> None:
        self._sums = {}
        self._count = 0

    def after_val_iter(self, ctx: CallContext) -> None:
        result = ctx.result or {}
        outputs, targets = result.get("outputs"), result.get("targets")
        if targets is not None:
            size = _batch_size(targets)
        else:  # a model that takes the whole batch (and may return its own loss)
            leading = _leading_size(ctx.args[0]) if ctx.args else None
            size = leading or _batch_size(outputs)
        self._count += size
        values: dict[str, Any] = {}
        if "loss" in result:
            if "loss" in self.metrics:  # one name, two values: neither may win silently
                raise RunnerError(
                    "Evaluate: the step returns a 'loss' and metrics= has one named 'loss' "
                    "too; both would be reported as the same metric: rename the metric"
                )
            values["loss"] = result["loss"]
        for name, fn in self.metrics.items():
            values[name] = fn(outputs, targets)
        for name, value in values.items():
            self._sums[name] = self._sums.get(name, 0.0) + _number(name, value) * size

    def after_val_epoch(self, ctx: CallContext) -> None:
        self._publish(ctx.runner, self.prefix)

    before_test_epoch = before_val_epoch
    after_test_iter = after_val_iter

    def after_test_epoch(self, ctx: CallContext) -> None:
        self._publish(ctx.runner, "test")

    def _publish(self, runner: Any, prefix: str) -> None:
        sums, count = self._sums, self._count
        if getattr(runner, "world_size", 1) > 1:
            sums, count = _over_ranks(sums, count)
        if not count:
            # The metrics of the last validation would be judged again (early stopping,
            # the best checkpoint): say so, once per loader.
            loader = "test_loader" if prefix == "test" else "val_loader"
            if loader not in self._warned:
                self._warned.add(loader)
                warnings.warn(
                    f"Evaluate: {loader} gave no batches, so the {prefix}/* metrics were not "
                    "updated (is its dataset empty, smaller than a batch with drop_last=True, "
                    "or a generator already used up by an earlier pass?)",
                    RuntimeWarning,
                    stacklevel=2,
                )
            return
        runner.metrics.update({f"{prefix}/{k}": v / count for k, v in sums.items()})


def _number(name: str, value: Any) -> float:
    """A metric's (or the loss's) value for one batch as a float: a number, a numpy
    scalar or a one-element tensor. Anything else is refused naming the metric."""
    number = _as_float(value)
    if number is not None:
        return number
    shape = f" of shape {tuple(value.shape)}" if hasattr(value, "shape") else ""
    raise RunnerError(
        f"Evaluate: {name!r} gave {type(value).__name__}{shape} for a batch, not a number: "
        "a metric returns one number per batch (a float, a numpy scalar or a one-element "
        "tensor), e.g. (outputs.argmax(1) == targets).float().mean(); the step's 'loss' "
        "too (reduction='mean')"
    )


def _over_ranks(sums: dict[str, float], count: int) -> tuple[dict[str, float], int]:
    """The sums and sample count of every rank's shard added up, the same on each rank:
    every rank then holds the metrics of the whole validation set, so the decisions made
    on them (early stopping, a plateau schedule, the best checkpoint) agree across ranks."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return sums, count
    parts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(parts, (sums, count))
    total: dict[str, float] = {}
    for part_sums, _ in parts:  # rank order: the same float additions on every rank
        for key, value in part_sums.items():
            total[key] = total.get(key, 0.0) + value
    return total, sum(part_count for _, part_count in parts)


def _checked_metrics(metrics: Mapping[str, Metric] | None) -> dict[str, Metric]:
    """``metrics`` as a dict, if it maps names to callables: a name given as text (from a
    config file) would fail only at the first validation, after a whole epoch."""
    if metrics is not None and not isinstance(metrics, Mapping):
        raise InvalidOptionError(
            f"Evaluate(metrics={metrics!r}) must map names to functions "
            "fn(outputs, targets) -> number, e.g. {'acc': accuracy}",
            option="metrics",
            value=metrics,
        )
    for name, fn in (metrics or {}).items():
        if not callable(fn):
            raise InvalidOptionError(
                f"Evaluate(metrics=...): metric {name!r} is {fn!r}, not a function: give the "
                "function itself, fn(outputs, targets) -> number, in code. A config file "
                "cannot name one: leave it out of the file, then add it to the runner built "
                f"from it: runner.get_aspect(Evaluate).metrics[{name!r}] = fn",
                option="metrics",
                value=metrics,
            )
    return dict(metrics or {})


def _batch_size(value: Any) -> int:
    """The number of samples ``value`` (targets or outputs) holds: a tensor's first
    dimension, a list's length (one entry per sample), a mapping's first value's."""
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        return int(value.shape[0])
    if isinstance(value, (list, tuple)):
        return len(value)
    if isinstance(value, Mapping) and value:
        return _batch_size(next(iter(value.values())))
    return 1


def _leading_size(batch: Any) -> int | None:
    """The first dimension of the first tensor in ``batch`` (a tensor, mapping or
    sequence), or None when it holds none."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else None
    if isinstance(batch, (Mapping, tuple, list)):
        for value in batch.values() if isinstance(batch, Mapping) else batch:
            size = _leading_size(value)
            if size is not None:
                return size
    return None
