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
from .._data import ShardPadding, planned_iters, shard_padding
from .._steps import _as_float, _step_scalars
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
    one, and any further scalar a ``val_step`` returns in its dict (``'acc'``). In a
    distributed run the ranks' shards are added up, so every rank gets the metrics of the
    whole validation set; the samples a ``DistributedSampler`` repeats to even out the
    shards are left out (a ``RuntimeWarning`` says which values could not leave them out,
    and what to do). Results land in ``runner.metrics`` as ``'val/<name>'`` before the
    lower-priority aspects (checkpoint, early stopping, plateau schedules) look at them.
    The test loop (``runner.test()``) is measured the same way, as ``'test/<name>'``.
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
        self._count = 0  # the samples in the sums (repeated ones are in _extra)
        # Per name: the samples a DistributedSampler repeated that its sum could not leave
        # out; the repeated samples not left out of any sum (still counted in _count); and
        # the iterations left until the batch that holds this rank's repeated samples
        # (negative while none does). See _start and _leave_out_padding.
        self._extra: dict[str, int] = {}
        self._repeated = 0
        self._left = -1
        self._padding: ShardPadding | None = None
        self._last: int | None = None  # the run's last iteration, when known (before_run)
        self._validated_at: int | None = None  # the iteration of the last validation
        self._warned: set[str] = set()  # loaders already reported as giving no batches
        # The overridden method that computed a loss left uncut ('MyRunner.compute_eval_step').
        self._loss_source: str | None = None

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
        self._start(ctx.runner, "val_loader")

    def before_test_epoch(self, ctx: CallContext) -> None:
        self._start(ctx.runner, "test_loader")

    def _start(self, runner: Any, loader: str) -> None:
        """Empty sums, and in a distributed run, where this rank's shard of ``loader`` has
        samples that its ``DistributedSampler`` repeated (``_data.shard_padding``)."""
        self._sums = {}
        self._count = 0
        self._extra = {}
        self._loss_source = None
        padding = None
        if getattr(runner, "world_size", 1) > 1:
            padding = shard_padding(getattr(runner, loader, None))
        self._padding = padding
        self._repeated = padding.repeated if padding else 0
        # A countdown to the padded batch: 0 never comes up when it is not known.
        self._left = padding.steps if padding else -1

    def after_val_iter(self, ctx: CallContext) -> None:
        result = ctx.result or {}
        outputs, targets = result.get("outputs"), result.get("targets")
        if targets is not None:
            size = _batch_size(targets)
        else:  # a model that takes the whole batch (and may return its own loss)
            leading = _leading_size(ctx.args[0]) if ctx.args else None
            size = leading or _batch_size(outputs)
        self._left -= 1
        if not self._left and self._leave_out_padding(ctx.runner, result, size):
            return
        self._count += size
        values: dict[str, Any] = {}
        if "loss" in result:
            if "loss" in self.metrics:  # one name, two values: neither may win silently
                raise _loss_named_twice()
            values["loss"] = result["loss"]
        for name, fn in self.metrics.items():
            values[name] = fn(outputs, targets)
        values.update(self._step_scalars(result))
        for name, value in values.items():
            self._sums[name] = self._sums.get(name, 0.0) + _number(name, value) * size

    def after_val_epoch(self, ctx: CallContext) -> None:
        self._publish(ctx.runner, self.prefix)

    after_test_iter = after_val_iter

    def _leave_out_padding(self, runner: Any, result: Mapping[str, Any], size: int) -> bool:
        """Add the batch that holds this rank's repeated samples without them; False (add
        it as it is) where its outputs and targets cannot be cut to the real samples."""
        padding = self._padding
        assert padding is not None  # the countdown runs only with padding
        keep = padding.last - padding.repeated
        if not keep:  # padding only: the step ran (ranks run alike), nothing is counted
            self._repeated = 0
            return True
        outputs = _head(result.get("outputs"), keep, padding.last)
        targets = _head(result.get("targets"), keep, padding.last)
        if size != padding.last or outputs is _UNCUT or targets is _UNCUT:
            return False
        weights: dict[str, int] = {}
        values: dict[str, Any] = {}
        if "loss" in result:
            if "loss" in self.metrics:
                raise _loss_named_twice()
            loss_fn = getattr(runner, "loss_fn", None)
            recompute = (
                loss_fn is not None
                and getattr(runner, "val_step", None) is None
                and targets is not None
            )
            if recompute and (overridden := _overridden_eval_step(runner)):
                self._loss_source = overridden  # its loss may not be loss_fn's: said below
                recompute = False
            if recompute and loss_fn is not None:  # (loss_fn: for the type checker)
                # What compute_eval_step computes. Half-precision outputs (the step ran
                # under AMP's autocast, which has ended) are taken up to float32, as
                # autocast computes losses: in their own precision the loss is coarser.
                values["loss"] = loss_fn(_at_least_float32(outputs), targets)
            else:  # a mean over the whole batch: the repeated samples stay in it
                values["loss"], weights["loss"] = result["loss"], size
                self._extra["loss"] = self._extra.get("loss", 0) + padding.repeated
        for name, fn in self.metrics.items():
            values[name] = fn(outputs, targets)
        for name, value in self._step_scalars(result).items():
            # A mean over the whole batch, as a step's own loss: the repeats stay in it.
            values[name], weights[name] = value, size
            self._extra[name] = self._extra.get(name, 0) + padding.repeated
        for name, value in values.items():
            weight = weights.get(name, keep)
            self._sums[name] = self._sums.get(name, 0.0) + _number(name, value) * weight
        self._count += keep
        self._repeated = 0
        return True

    def _step_scalars(self, result: Mapping[str, Any]) -> dict[str, Any]:
        """The further scalars a ``val_step`` returns in its dict beside ``outputs``,
        ``targets`` and ``loss`` (``{'loss': ..., 'acc': ...}``): metrics of the batch,
        averaged as the loss is. A name ``metrics=`` has too is refused, as the loss is."""
        found = _step_scalars(result, _STEP_PARTS)
        for name in found:
            if name in self.metrics:
                raise RunnerError(
                    f"Evaluate: the step returns {name!r} and metrics= has one named {name!r} "
                    "too; both would be reported as the same metric: rename one of them"
                )
        return found

    def after_test_epoch(self, ctx: CallContext) -> None:
        self._publish(ctx.runner, "test")

    def _publish(self, runner: Any, prefix: str) -> None:
        sums, count, extra = self._sums, self._count, self._extra
        if self._repeated:  # repeated samples left in every sum (a batch that was not cut)
            count -= self._repeated
            extra = {name: extra.get(name, 0) + self._repeated for name in sums}
        if getattr(runner, "world_size", 1) > 1:
            sums, count, extra = _over_ranks(sums, count, extra)
        loader = "test_loader" if prefix == "test" else "val_loader"
        if not count:
            # The metrics of the last validation would be judged again (early stopping,
            # the best checkpoint): say so, once per loader, on rank 0 (the count is the
            # ranks' total: every rank would say the same).
            if loader not in self._warned and getattr(runner, "rank", 0) == 0:
                self._warned.add(loader)
                warnings.warn(
                    f"Evaluate: {loader} gave no batches, so the {prefix}/* metrics were not "
                    "updated (is its dataset empty, smaller than a batch with drop_last=True, "
                    "or a generator already used up by an earlier pass?)",
                    RuntimeWarning,
                    stacklevel=2,
                )
            return
        runner.metrics.update(
            {f"{prefix}/{k}": v / (count + extra.get(k, 0)) for k, v in sums.items()}
        )
        if any(extra.values()) and getattr(runner, "rank", 0) == 0:
            self._warn_repeated(loader, prefix, extra)

    def _warn_repeated(self, loader: str, prefix: str, extra: Mapping[str, int]) -> None:
        """Say, once per loader, which values count samples that a ``DistributedSampler``
        repeated (the same on every rank: ``extra`` is the ranks' total), and what to do."""
        if f"{loader}:repeated" in self._warned:
            return
        self._warned.add(f"{loader}:repeated")
        names = [name for name, n in extra.items() if n]
        repeated = max(extra.values())
        them = "it" if repeated == 1 else "them"
        source = self._loss_source
        loss_fix = "give the Runner loss_fn= and no val_step"
        if source is not None:
            loss_fix = f"compute the loss in the Runner's loss_fn= rather than in {source}"
        if names == ["loss"]:
            came = (
                f"{source}, which is overridden: only Runner's own step, "
                "loss_fn(outputs, targets), is recomputed"
                if source is not None
                else "val_step or from the model, as a mean over the batch"
            )
            why = (
                f"the loss of the batch that holds {them} cannot be recomputed without {them} "
                f"(it comes from {came})"
            )
            fix = loss_fix
        elif not any(name in self.metrics for name in names):  # val_step's own scalars
            why = (
                f"what val_step returns for the batch that holds {them} is a mean over the "
                "whole batch"
            )
            fix = "compute those values with Evaluate(metrics=...) from outputs and targets"
            if "loss" in names:  # metrics= takes no 'loss' beside the step's
                fix = (
                    f"{loss_fix} for the loss, and compute the others with "
                    "Evaluate(metrics=...) from outputs and targets"
                )
        else:
            why = (
                f"the batch that holds {them} could not be cut to its other samples (its "
                "'outputs' and 'targets' must be tensors, or tuples, lists or dicts of "
                "tensors, with one row per sample, batched by torch's BatchSampler)"
            )
            fix = "return outputs and targets of that form"
        verb = "counts" if len(names) == 1 else "count"
        warnings.warn(
            f"Evaluate: {', '.join(f'{prefix}/{name}' for name in names)} {verb} {repeated} "
            f"sample{'s' if repeated > 1 else ''} twice: the DistributedSampler of {loader} "
            f"repeats {them} so that every rank gets as many samples, and {why}. For exact "
            f"values {fix}, make the dataset's length a multiple of the world size, or use "
            "DistributedSampler(drop_last=True), which leaves samples out instead",
            RuntimeWarning,
            stacklevel=3,
        )


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


def _over_ranks(
    sums: dict[str, float], count: int, extra: dict[str, int]
) -> tuple[dict[str, float], int, dict[str, int]]:
    """The sums, sample count and repeated samples of every rank's shard added up, the
    same on each rank: every rank then holds the metrics of the whole validation set, so
    the decisions made on them (early stopping, a plateau schedule, the best checkpoint)
    agree across ranks, and so does the warning about repeated samples."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return sums, count, extra
    parts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(parts, (sums, count, extra))
    total: dict[str, float] = {}
    repeated: dict[str, int] = {}
    for part_sums, _, part_extra in parts:  # rank order: the same additions on every rank
        for key, value in part_sums.items():
            total[key] = total.get(key, 0.0) + value
        for key, n in part_extra.items():
            repeated[key] = repeated.get(key, 0) + n
    return total, sum(part[1] for part in parts), repeated


def _overridden_eval_step(runner: Any) -> str | None:
    """The method of ``runner``'s class that may compute its evaluation loss otherwise than
    ``Runner`` does (``loss_fn(model(inputs), targets)``), so that the loss cannot be
    recomputed from outputs and targets: an override of ``compute_eval_step`` (or of
    ``_eval_result``, which it calls), as ``'MyRunner.compute_eval_step'``; None if none."""
    from .._runner import Runner  # here: the runner module imports the aspects

    kind = type(runner)
    for method in ("compute_eval_step", "_eval_result"):
        if getattr(kind, method, None) is not getattr(Runner, method):
            return f"{kind.__qualname__}.{method}"
    return None


def _at_least_float32(value: Any) -> Any:
    """A bfloat16 / float16 tensor as float32; anything else as it is."""
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.element_size() < 4:
        return value.float()
    return value


#: What a step's dict holds that is not a further metric of its own.
_STEP_PARTS = frozenset(["outputs", "targets", "loss"])


def _loss_named_twice() -> RunnerError:
    return RunnerError(
        "Evaluate: the step returns a 'loss' and metrics= has one named 'loss' "
        "too; both would be reported as the same metric: rename the metric"
    )


#: What ``_head`` gives for a value it cannot cut.
_UNCUT: Any = object()


def _head(value: Any, keep: int, size: int) -> Any:
    """The first ``keep`` samples of ``value``: a tensor of ``size`` rows, or a tuple,
    list or mapping of such (None stays None); ``_UNCUT`` for anything else, and for a
    tuple or list of ``size`` entries (which may hold one entry per sample: cutting each
    entry's rows would keep the repeated sample and cut real ones)."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        return value[:keep] if value.dim() and value.shape[0] == size else _UNCUT
    if isinstance(value, Mapping):
        cut = {key: _head(v, keep, size) for key, v in value.items()}
        return _UNCUT if not cut or any(v is _UNCUT for v in cut.values()) else cut
    if isinstance(value, (tuple, list)):
        if len(value) == size:  # one entry per sample, or a batch's parts: cannot tell
            return _UNCUT
        items = [_head(v, keep, size) for v in value]
        if not items or any(item is _UNCUT for item in items):
            return _UNCUT
        if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
            return type(value)(*items)
        return type(value)(items)
    return _UNCUT


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
