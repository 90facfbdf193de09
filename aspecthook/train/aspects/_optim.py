"""Aspects around the optimisation step: ``GradClip``, ``GradAccumulation``, ``AMP``,
``NaNGuard`` and ``EmptyCache``. Each is a few lines of advice on the ``forward``,
``backward`` and ``optimizer_step`` join points of ``train_iter``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from ..._aspect import Aspect, AspectOptions
from ..._context import CallContext, Proceed
from ..._handle import Handle
from ..._log import get_logger
from ..._priority import Priority
from ..._typing import Unpack
from ...errors import InvalidOptionError, RunnerError
from .._data import planned_iters
from ._options import check_count, check_flags, is_real

__all__ = ["AMP", "EmptyCache", "GradAccumulation", "GradClip", "NaNGuard"]


def _positive(owner: str, option: str, value: Any) -> None:
    # NaN compares false with everything: refused by name, or it would pass ``value <= 0``.
    if not is_real(value) or math.isnan(value) or value <= 0:
        raise InvalidOptionError(
            f"{owner}({option}={value!r}) must be a positive number", option=option, value=value
        )


def _norm_type(value: Any) -> float:
    """``GradClip``'s ``norm_type``: a positive number, ``inf`` or ``'inf'`` (as torch's
    ``clip_grad_norm_`` takes it); 0 or a negative order is no norm to clip by."""
    if isinstance(value, str) and value == "inf":
        return float("inf")
    try:
        _positive("GradClip", "norm_type", value)
    except InvalidOptionError:
        raise InvalidOptionError(
            f"GradClip(norm_type={value!r}) must be a positive number or 'inf' (2.0: the "
            "Euclidean norm)",
            option="norm_type",
            value=value,
        ) from None
    return float(value)


def _amp_dtype(dtype: Any) -> torch.dtype | None:
    """``AMP``'s dtype: None (chosen by device), float16 or bfloat16, or their names."""
    if dtype is None:
        return None
    found = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
    if found is torch.float16 or found is torch.bfloat16:
        return found
    raise InvalidOptionError(
        f"AMP(dtype={dtype!r}): autocast computes in 'bfloat16' or 'float16'; give one "
        "of them, or None for bfloat16 on CPU and float16 on CUDA",
        option="dtype",
        value=dtype,
    )


class GradClip(Aspect):
    """Clips the gradient norm of the optimizer's parameters before each step
    (``clip_grad_norm_``).

    ``max_norm`` is a positive number; ``norm_type`` a positive order or ``'inf'``.

    The norm before clipping is reported as ``runner.outputs['grad_norm']``. Runs after
    ``AMP`` has unscaled the gradients (its priority is higher), and only before a step
    that happens: with ``GradAccumulation`` the accumulated gradient is clipped once.
    """

    name = "grad_clip"
    needs_runner = True
    priority = Priority.NORMAL

    def __init__(
        self, max_norm: float, norm_type: float | str = 2.0, **options: Unpack[AspectOptions]
    ) -> None:
        super().__init__(**options)
        _positive("GradClip", "max_norm", max_norm)
        self.max_norm = float(max_norm)
        self.norm_type = _norm_type(norm_type)

    def before_optimizer_step(self, ctx: CallContext) -> None:
        if ctx.skipped:  # no step this iteration (GradAccumulation, NaNGuard)
            return
        runner = ctx.runner
        # The optimizer's parameters (as AMP unscales them), not the model's: a parameter
        # it does not step would count in the norm, one outside the model go unclipped.
        params = [p for group in runner.optimizer.param_groups for p in group["params"]]
        norm = torch.nn.utils.clip_grad_norm_(params, self.max_norm, norm_type=self.norm_type)
        runner.outputs["grad_norm"] = norm


class GradAccumulation(Aspect):
    """Steps the optimizer every ``steps`` iterations, averaging the gradients between.

    The loss is divided by ``steps`` before ``backward`` so the accumulated gradient is the
    mean over the group, and ``optimizer_step`` is skipped until the group is complete.
    Groups are counted by the run's iterations (a group may span two epochs). When the
    run's length is known (``max_iters``, or ``max_epochs`` with a sized loader), its last
    group may be shorter: its loss is divided by its own size and it steps on the run's
    last iteration, so no gradient is left unapplied. Its priority is above ``AMP`` and
    ``GradClip``, which then see that the step is skipped and leave the gradients alone.
    A checkpoint taken inside a group holds the group's gradients so far (its state), and
    a run resumed from it adds the rest of the group to them, as the uninterrupted run does.
    Groups follow on from where the last one ended, so a run continued past its end (a
    second ``run()`` with a larger ``max_iters``, or a resume with larger limits) starts
    whole groups after its shortened last one.

    With a ``DistributedDataParallel`` model, the iterations that do not step run inside
    its ``no_sync()`` (forward and backward: DDP decides in the forward whether the
    backward all-reduces), so the ranks all-reduce the gradients once a group, in the
    iteration that steps, as Lightning and mmengine do.
    """

    name = "grad_accumulation"
    needs_runner = True
    priority = Priority.VERY_HIGH

    def __init__(self, steps: int, **options: Unpack[AspectOptions]) -> None:
        super().__init__(**options)
        steps = check_count("GradAccumulation", "steps", steps)
        self.steps = steps
        self._total: int | None = None  # the run's iterations, when known (before_run)
        self._model: torch.nn.Module | None = None  # whose gradients a checkpoint keeps
        self._runner: Any = None  # the run's runner (before_run): where iterations stand
        self._resumed: list[torch.Tensor | None] | None = None  # to put back (resume)
        # The iteration the current group began at; None: not known (a new aspect, or a
        # checkpoint without it), taken as the last multiple of steps (``_start``).
        self._group_start: int | None = None
        self._drop_grads = False  # a loaded state holds no gradients: the model's go
        self._backward_at = -1  # the iteration of the latest backward
        # The run's DistributedDataParallel model and the handle of around_train_iter,
        # registered for such a model only (around_run), so a run without one has no
        # advice on train_iter and pays nothing for it.
        self._ddp: DistributedDataParallel | None = None
        self._no_sync: Handle | None = None

    def make_advice(self, target: Any = None) -> list[Any]:
        """All but ``around_train_iter``, which ``around_run`` adds for a DDP model only."""
        return [a for a in super().make_advice(target) if a.name != self._no_sync_name]

    @property
    def _no_sync_name(self) -> str:
        return f"{self.name}.around_train_iter"

    def before_run(self, ctx: CallContext) -> None:
        runner = ctx.runner
        self._total = planned_iters(runner)
        self._model = runner.model
        self._runner = runner

    def around_run(self, ctx: CallContext, proceed: Proceed) -> Any:
        # The no_sync advice is put on for the run's body (every before_run advice passed)
        # and taken off however it ends: left after a run that raised (Ctrl-C included),
        # or one a later before_run advice refused, it would outlive even the aspect's
        # removal, and keep later runs of this runner from all-reducing on the iterations
        # it took for a group's.
        runner = ctx.runner
        model = runner.model
        if isinstance(model, DistributedDataParallel) and self.steps > 1:
            self._ddp = model
            name = self._no_sync_name
            advice = [a for a in super().make_advice() if a.name == name]
            self._no_sync = runner.weaver.register(advice)
        try:
            return proceed()
        finally:
            self._end_no_sync()

    def _end_no_sync(self) -> None:
        handle, self._no_sync, self._ddp = self._no_sync, None, None
        if handle is not None:
            handle.remove()

    def around_train_iter(self, ctx: CallContext, proceed: Proceed) -> Any:
        # Registered by around_run for a DistributedDataParallel model only. The forward
        # must be inside no_sync() too: DDP prepares the all-reduce there.
        ddp = self._ddp
        if ddp is None or self.steps_after(ctx.runner.iter):
            return proceed()
        with ddp.no_sync():
            return proceed()

    def before_backward(self, ctx: CallContext) -> None:
        if self._resumed is not None:  # the first backward after a resume inside a group
            self._restore_grads(ctx.runner.model)
        elif self._drop_grads:  # resumed at a group's start: nothing accumulated yet
            self._drop_grads = False
            for parameter in ctx.runner.model.parameters():
                parameter.grad = None
        self._backward_at = ctx.runner.iter
        size = self._group_size(ctx.runner.iter)
        if size > 1:
            ctx.args[0] = ctx.args[0] / size

    def before_optimizer_step(self, ctx: CallContext) -> None:
        if not self.steps_after(ctx.runner.iter):
            ctx.skip()

    def after_optimizer_step(self, ctx: CallContext) -> None:
        # After every other aspect's before_optimizer_step has asked steps_after (NaNGuard
        # ends a group without a step): the next group begins after this iteration.
        iteration = ctx.runner.iter
        if self.steps_after(iteration):
            self._group_start = iteration + 1

    def stepped_at(self, iterations: int) -> bool:
        """Whether the iteration that made ``runner.iter`` reach ``iterations`` ended a
        group (its optimizer step): read once the iteration is over, by ``LRSchedule``."""
        return self._group_start == iterations

    def steps_left(self, iteration: int) -> int | None:
        """The optimizer steps from the start of the group of ``iteration`` to the run's
        end (its last group may be shorter), read when a run starts by ``LRSchedule``;
        None when the run's length is not known."""
        total = self._total
        if total is None:
            return None
        return max(0, -(-(total - self._start(iteration)) // self.steps))

    def steps_after(self, iteration: int) -> bool:
        """Whether the optimizer steps at the end of ``iteration`` (0-based): the end of a
        group, or the run's last iteration."""
        done = iteration + 1  # iterations done once this one ends
        return done - self._start(iteration) >= self.steps or done == self._total

    def state_dict(self) -> dict[str, Any]:
        """Where the current group began, and the gradients it accumulated so far."""
        state: dict[str, Any] = {"group_start": self._group_start}
        model = self._model
        grads = [] if model is None else [p.grad for p in model.parameters()]
        if any(g is not None for g in grads) and not self._mixed_in():
            state["grads"] = [None if g is None else g.detach().clone() for g in grads]
        return state

    def _mixed_in(self) -> bool:
        """Whether the gradients hold a part of an iteration that has not ended (a save
        after a break between its backward and its step): they cannot be taken apart, so
        they are not saved, and a warning says the resumed group is not exact."""
        runner = self._runner
        if runner is None or self._backward_at != runner.iter:
            return False
        if runner.iter <= self._start(runner.iter):
            return True  # the group's first iteration: no gradient of the group is lost
        if getattr(runner, "rank", 0) != 0:  # every rank drops alike; rank 0 says it
            return True
        get_logger().warning(
            "grad_accumulation.group_dropped",
            iteration=runner.iter,
            group_start=self._start(runner.iter),
            reason="saved after iteration's backward and before its step: the group's "
            "gradients are saved without it, so a run resumed from this file is not exact",
        )
        return True

    def load_state_dict(self, state: dict[str, Any]) -> None:
        grads = state.get("grads")
        self._resumed = None if grads is None else list(grads)
        self._drop_grads = grads is None
        start = state.get("group_start")
        self._group_start = None if start is None else int(start)

    def _restore_grads(self, model: torch.nn.Module) -> None:
        grads, self._resumed = self._resumed, None
        assert grads is not None
        parameters = list(model.parameters())
        if len(grads) != len(parameters):
            raise RunnerError(
                f"GradAccumulation: the checkpoint holds gradients of {len(grads)} "
                f"parameters, the model has {len(parameters)}; resume with the model it saved"
            )
        for parameter, grad in zip(parameters, grads, strict=True):
            parameter.grad = None if grad is None else grad.to(parameter.device)

    def keeps_gradients(self, runner: Any) -> bool:
        """Asked by a runner whose last ``run()`` raised: whether the gradients are the
        current group's so far, to keep. Not when the iteration that broke off had already
        back-propagated: its part cannot be taken out again, so the group's gradients are
        dropped with it (a warning says so; a resume from a checkpoint is exact)."""
        if runner.iter <= self._start(runner.iter):
            return False  # at a group boundary: nothing accumulated to keep
        if self._backward_at != runner.iter:
            return True
        if getattr(runner, "rank", 0) != 0:  # every rank drops alike; rank 0 says it
            return False
        get_logger().warning(
            "grad_accumulation.group_dropped",
            iteration=runner.iter,
            group_start=self._start(runner.iter),
            reason="the interrupted iteration's gradients are mixed into the group's",
        )
        return False

    def _start(self, iteration: int) -> int:
        """Where the group of ``iteration`` began: as recorded, else (a new aspect, a
        checkpoint from before it was recorded) the last multiple of ``steps``."""
        start = self._group_start
        return iteration - iteration % self.steps if start is None else start

    def _group_size(self, iteration: int) -> int:
        """``steps``, or fewer for the run's last, shorter group."""
        total = self._total
        if total is None:
            return self.steps
        return max(1, min(self.steps, total - self._start(iteration)))


# AMP's advice on evaluation, left out with autocast_eval=False.
_EVAL_ADVICE = frozenset(
    ("before_val_epoch", "before_test_epoch", "around_val_iter", "around_test_iter")
)


class AMP(Aspect):
    """Mixed precision: ``torch.autocast`` around ``forward``, a ``GradScaler`` for float16.

    On CPU the default dtype is bfloat16 (no scaling needed); on CUDA float16 with
    ``torch.amp.GradScaler``, which then also performs the step (unscale, skip on inf/NaN,
    update). The scaler is ``runner.grad_scaler``, so checkpoints save and restore it.

    With ``autocast_eval=True`` (the default) the validation and test steps (``val_iter``,
    ``test_iter``) run under the same autocast, so the model is evaluated at the precision
    it trains at, as Lightning's ``precision='bf16-mixed'`` does; that holds for
    ``runner.test()`` and ``runner.val_epoch()`` outside a run too. ``False`` evaluates in
    the model's own precision, and then no advice runs in evaluation.
    """

    name = "amp"
    needs_runner = True
    priority = Priority.HIGH

    def __init__(
        self,
        dtype: torch.dtype | str | None = None,
        autocast_eval: bool = True,
        **options: Unpack[AspectOptions],
    ) -> None:
        super().__init__(**options)
        check_flags("AMP", autocast_eval=autocast_eval)
        self.dtype = _amp_dtype(dtype)
        self.autocast_eval = autocast_eval
        self.scaler: torch.amp.GradScaler | None = None
        self._device = "cpu"
        self._pending: dict[str, Any] | None = None  # a scaler state loaded before it exists
        # The device type and dtype of the evaluation in progress (before_val_epoch, also
        # outside a run, where before_run has not chosen them).
        self._eval: tuple[str, torch.dtype] | None = None

    def make_advice(self, target: Any = None) -> list[Any]:
        """Without ``autocast_eval`` nothing advises evaluation (no cost per batch)."""
        advice = super().make_advice(target)
        if self.autocast_eval:
            return advice
        return [a for a in advice if a.name.rpartition(".")[2] not in _EVAL_ADVICE]

    def _autocast(self, model: torch.nn.Module) -> tuple[str, torch.dtype]:
        """The device type of ``model`` (of its first parameter; CPU without one) and the
        dtype: the one given, else float16 on CUDA and bfloat16 elsewhere."""
        param = next(model.parameters(), None)
        device = param.device.type if param is not None else "cpu"
        dtype = self.dtype
        if dtype is None:
            dtype = torch.float16 if device == "cuda" else torch.bfloat16
        return device, dtype

    def before_run(self, ctx: CallContext) -> None:
        runner = ctx.runner
        self._device, self.dtype = self._autocast(runner.model)
        if self.dtype == torch.float16:
            # A second run() goes on with the scale the first one calibrated, in a scaler
            # of its own: one left mid-step by an interrupted run (unscaled, not updated)
            # would refuse the next unscale_.
            previous = self.scaler.state_dict() if self.scaler is not None else self._pending
            self.scaler = torch.amp.GradScaler(self._device)
            if previous is not None:
                self.scaler.load_state_dict(previous)
            self._pending = None
        if self.scaler is not None:
            runner.grad_scaler = self.scaler

    def around_forward(self, ctx: CallContext, proceed: Proceed) -> Any:
        with torch.autocast(self._device, dtype=self.dtype):
            return proceed()

    def before_val_epoch(self, ctx: CallContext) -> None:
        self._eval = self._autocast(ctx.runner.model)

    def before_test_epoch(self, ctx: CallContext) -> None:
        self._eval = self._autocast(ctx.runner.model)

    def around_val_iter(self, ctx: CallContext, proceed: Proceed) -> Any:
        # No GradScaler here: evaluation computes no gradients.
        device, dtype = self._eval or self._autocast(ctx.runner.model)
        with torch.autocast(device, dtype=dtype):
            return proceed()

    def around_test_iter(self, ctx: CallContext, proceed: Proceed) -> Any:
        device, dtype = self._eval or self._autocast(ctx.runner.model)
        with torch.autocast(device, dtype=dtype):
            return proceed()

    def before_backward(self, ctx: CallContext) -> None:
        if self.scaler is not None:
            ctx.args[0] = self.scaler.scale(ctx.args[0])

    def before_optimizer_step(self, ctx: CallContext) -> None:
        # Unscale first so GradClip (lower priority, same stage) clips true gradients; not
        # when the step is skipped (GradAccumulation, NaNGuard): the scaler allows one
        # unscale_ per update(), and update() comes with the step.
        if self.scaler is not None and not ctx.skipped:
            self.scaler.unscale_(ctx.runner.optimizer)

    def around_optimizer_step(self, ctx: CallContext, proceed: Proceed) -> Any:
        scaler = self.scaler
        if scaler is None:
            return proceed()
        # With a scaler the step is the scaler's: it skips steps whose gradients overflowed.
        optimizer = ctx.runner.optimizer
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return None

    def state_dict(self) -> dict[str, Any]:
        if self.scaler is None:  # not built yet: a loaded state is kept as it came
            return {"scaler": self._pending}
        return {"scaler": self.scaler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        scaler_state = state.get("scaler")
        if scaler_state is None:
            return
        if self.scaler is None:  # loaded before the first run(): applied when it is built
            self._pending = dict(scaler_state)
        else:
            self.scaler.load_state_dict(scaler_state)


class NaNGuard(Aspect):
    """Watches the loss for NaN/inf: ``action='skip'`` drops that step, ``'stop'`` ends the run.

    Either way the iteration is named in a warning (and in ``runner.stop_reason``);
    ``skipped`` lists those iterations. Iterations and epochs are counted from 1, as
    ``Logger``'s lines and ``metrics.jsonl`` count them. The bad
    loss is never back-propagated. In a distributed run a bad loss on any rank counts for
    all of them, so the ranks skip (or stop) together. With ``GradAccumulation`` the step
    dropped is that of the whole group the bad batch is in: the group's gradients are
    cleared when it would have stepped, so no group steps on part of its batches and none
    leaks into the next.
    """

    name = "nan_guard"
    needs_runner = True
    priority = Priority.VERY_HIGH

    def __init__(self, action: str = "skip", **options: Unpack[AspectOptions]) -> None:
        super().__init__(**options)
        if action not in ("skip", "stop"):
            raise InvalidOptionError(
                f"NaNGuard(action={action!r}): use 'skip' (drop the step) or 'stop' (end the run)",
                option="action",
                value=action,
            )
        self.action = action
        self.skipped: list[int] = []
        self._bad = False  # a bad loss since the last step (kept to the end of its group)
        self._accumulation: GradAccumulation | None = None
        # Whether the run has other ranks, read once a run (before_run): ``world_size``
        # asks the process group each time, and before_backward runs every iteration.
        self._distributed: bool | None = None

    def before_run(self, ctx: CallContext) -> None:
        runner = ctx.runner
        accumulation = runner.get_aspect(GradAccumulation)
        self._accumulation = accumulation if isinstance(accumulation, GradAccumulation) else None
        self._distributed = getattr(runner, "world_size", 1) > 1

    def before_backward(self, ctx: CallContext) -> None:
        loss = ctx.args[0]
        runner = ctx.runner
        bad = ~torch.isfinite(loss.detach()).all()
        distributed = self._distributed
        if distributed is None:  # added to a run already going: no before_run yet
            distributed = self._distributed = getattr(runner, "world_size", 1) > 1
        if distributed:
            bad = _any_rank(bad)
        if not bool(bad):
            return
        self._bad = True
        # Counted from 1, as Logger's lines and metrics.jsonl count them (``runner.iter``
        # is the number of iterations done before this one).
        iteration, epoch = runner.iter + 1, runner.epoch + 1
        if getattr(runner, "rank", 0) == 0:  # every rank skips or stops; rank 0 says so
            get_logger().warning(
                "nan_guard.non_finite_loss", iteration=iteration, epoch=epoch, action=self.action
            )
        self.skipped.append(iteration)
        if self.action == "stop":
            runner.stop(f"non-finite loss in iteration {iteration} (epoch {epoch})")
        ctx.skip()

    def before_optimizer_step(self, ctx: CallContext) -> None:
        if not self._bad:
            return
        ctx.skip()
        accumulation = self._accumulation
        if accumulation is None or accumulation.steps_after(ctx.runner.iter):
            ctx.runner.optimizer.zero_grad(set_to_none=True)
            self._bad = False

    def state_dict(self) -> dict[str, Any]:
        return {"skipped": list(self.skipped), "bad": self._bad}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.skipped = list(state.get("skipped", []))
        self._bad = bool(state.get("bad", False))


def _any_rank(flag: torch.Tensor) -> torch.Tensor:
    """Whether ``flag`` is set on any rank: ranks skip a backward (and its gradient
    all-reduce) together or not at all, or their collectives would fall out of step."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return flag
    value = flag.to(torch.int32).reshape(1)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return value[0].bool()


class EmptyCache(Aspect):
    """Releases cached accelerator memory after every epoch (and every ``interval`` iterations).

    A no-op on machines without CUDA.
    """

    name = "empty_cache"
    needs_runner = True
    priority = Priority.LOWEST

    def __init__(self, interval: int | None = None, **options: Unpack[AspectOptions]) -> None:
        super().__init__(**options)
        if interval is not None and (
            not isinstance(interval, int) or isinstance(interval, bool) or interval < 1
        ):
            raise InvalidOptionError(
                f"EmptyCache(interval={interval!r}): give a number of iterations >= 1, or "
                "None to empty the cache only after each epoch",
                option="interval",
                value=interval,
            )
        self.interval = interval

    def after_train_epoch(self, ctx: CallContext) -> None:
        _empty()

    def after_train_iter(self, ctx: CallContext) -> None:
        if self.interval and ctx.runner.iter % self.interval == 0:
            _empty()


def _empty() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
