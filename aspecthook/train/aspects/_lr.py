"""``LRSchedule``: drives torch's own LR schedulers from the training join points.

No LR formula is written here: warm-up is torch's ``ConstantLR`` / ``LinearLR`` /
``LambdaLR`` (for the exponential ramp) and is composed with the main scheduler by
torch's ``SequentialLR`` (when both step per iteration) or by chaining (a per-iteration
warm-up in front of a per-epoch schedule, as torch's chainable schedulers allow; there the
exponential ramp is ``LinearLR`` for its first factor and ``MultiplicativeLR`` for the
rest, since ``LambdaLR`` sets the LR outright and would undo the epoch schedule's steps:
the same values to the last few bits), so the LR at every step is what torch computes
for the same schedule.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.optim import lr_scheduler

from ..._aspect import Aspect, AspectOptions
from ..._context import CallContext
from ..._priority import Priority
from ..._typing import Unpack
from ...errors import InvalidOptionError, RunnerError
from .._data import iters_left
from ._optim import GradAccumulation
from ._options import check_flags, is_integer, is_real
from ._rules import infer_rule

__all__ = ["LRSchedule"]

_WARMUPS = ("constant", "linear", "exp")
SchedulerLike = Any  # a torch scheduler, or a callable optimizer -> scheduler


class LRSchedule(Aspect):
    """Steps the runner's scheduler per iteration (``by_epoch=False``) or per epoch.

    ``scheduler`` is a torch scheduler, a callable ``optimizer -> scheduler``, or None for
    the runner's own ``scheduler``. ``warmup='linear'|'constant'|'exp'`` ramps the LR from
    ``warmup_ratio`` times its value to its value over the first ``warmup_iters``
    iterations. ``ReduceLROnPlateau`` steps after each validation, with
    ``runner.metrics[monitor]`` (so patience counts validations, whatever their interval).
    The composed scheduler becomes ``runner.scheduler``, so checkpoints save and restore it.
    With ``GradAccumulation``, a per-iteration schedule (and the warm-up) steps once per
    optimizer step, after it, as torch's schedulers expect and Lightning's
    ``interval='step'`` does: ``warmup_iters`` and a scheduler's own length (``OneCycleLR``'s
    ``total_steps``) count optimizer steps then. (OpenMMLab steps its per-iteration
    schedulers every iteration, accumulating or not.)
    It is built once: a later ``run()`` of the same runner goes on with it, and a state
    loaded before the first ``run()`` (``runner.load_state_dict``) is applied to it then.
    """

    name = "lr_schedule"
    needs_runner = True
    priority = Priority.LOW

    def __init__(
        self,
        scheduler: SchedulerLike = None,
        *,
        by_epoch: bool = True,
        warmup: str | None = None,
        warmup_iters: int = 0,
        warmup_ratio: float = 0.1,
        monitor: str = "val/loss",
        **options: Unpack[AspectOptions],
    ) -> None:
        super().__init__(**options)
        check_flags("LRSchedule", by_epoch=by_epoch)
        _check_options(scheduler, warmup, warmup_iters, warmup_ratio)
        self.scheduler = scheduler
        self.by_epoch = by_epoch
        self.warmup = warmup
        self.warmup_iters = int(warmup_iters) if is_integer(warmup_iters) else warmup_iters
        self.warmup_ratio = float(warmup_ratio)
        self.monitor = monitor
        self._main: Any = None
        self._warmup: Any = None
        self._plateau = False
        # (iteration, plateau steps) when this run's training began (after a resume): a
        # plateau that never stepped while the run trained is reported.
        self._plateau_start: tuple[int, int] | None = None
        # What after_train_iter calls when it is all an iteration does (set by before_run):
        # the main scheduler's step, or with GradAccumulation _group_step.
        self._iter_step: Callable[[], Any] | None = None
        # What an iteration steps without GradAccumulation (the main scheduler's step, or
        # None when after_train_iter works it out); with it, the run's GradAccumulation
        # and the optimizer steps it let through (what the warm-up counts then).
        self._plain_step: Callable[[], Any] | None = None
        self._accumulation: Any = None
        self._runner: Any = None
        self._optimizer_steps = 0
        # What before_run made runner.scheduler (built once), and the scheduler states a
        # runner.load_state_dict() gave before it was built (applied once it is).
        self._installed: Any = None
        self._pending: dict[str, Any] | None = None

    def make_advice(self, target: Any = None) -> list[Any]:
        """Register only the triggers this configuration uses (keeps idle iterations free)."""
        unused = {"after_train_iter", "after_train_epoch"}
        if not self.by_epoch or self.warmup is not None:
            unused.discard("after_train_iter")
        if self.by_epoch:
            unused.discard("after_train_epoch")
        return [a for a in super().make_advice(target) if a.name.rpartition(".")[2] not in unused]

    def before_run(self, ctx: CallContext) -> None:
        runner = ctx.runner
        self._plateau_start = None
        # A later run() of this runner: the schedule goes on where it is.
        if self._installed is None or runner.scheduler is not self._installed:
            self._install(runner)
        # ``aspects`` is the Runner's, not the runner protocol's: a runner without it has
        # no GradAccumulation to find.
        self._accumulation = next(
            (
                a
                for a in getattr(runner, "aspects", ())
                if isinstance(a, GradAccumulation) and a.steps > 1
            ),
            None,
        )
        # Per-iteration work goes once per optimizer step under GradAccumulation.
        per_iteration = self._plain_step is not None or self._warmup is not None
        accumulating = self._accumulation is not None and per_iteration
        self._iter_step = self._group_step if accumulating else self._plain_step
        self._runner = runner if accumulating else None  # what _group_step reads
        self._check_cycle_length(runner)

    def _check_cycle_length(self, runner: Any) -> None:
        """A ``OneCycleLR`` shorter than the run is refused when the run starts: torch
        refuses to step it past ``total_steps``, so the run would fail in its last steps,
        after all its training. Its steps are counted as this schedule makes them: one per
        optimizer step (per iteration), or one per epoch in a run by ``max_epochs``."""
        cycle = self._main
        if not isinstance(cycle, lr_scheduler.OneCycleLR):
            return
        accumulation = self._accumulation
        if self._plain_step is not None:  # per iteration (a warm-up makes it a SequentialLR)
            if accumulation is not None:
                left = accumulation.steps_left(runner.iter)
                how = (
                    f"once per optimizer step: GradAccumulation({accumulation.steps}) steps "
                    "after each group of its iterations, counted across epoch ends, and at "
                    "the run's last one"
                )
            else:
                left, how = iters_left(runner), "once per iteration"
        elif self.by_epoch and runner.max_epochs is not None:
            left, how = max(0, runner.max_epochs - runner.epoch), "once per epoch"
        else:
            return
        if left is None:  # the run's length is not known
            return
        needed = cycle.last_epoch + left
        if needed > cycle.total_steps:
            raise RunnerError(
                f"LRSchedule: OneCycleLR(total_steps={cycle.total_steps}) is too short for "
                f"this run, which steps it {needed} times ({cycle.last_epoch} so far, {left} "
                f"to come, {how}); torch refuses a step past total_steps, so the run would "
                f"fail in its last steps: build it with total_steps={needed}"
            )

    def _install(self, runner: Any) -> None:
        """Build the schedule (once) and apply a state loaded before it was built."""
        # Building schedulers sets the LR (their step 0), and some the momentum too
        # (OneCycleLR), in place when they are tensors; a loaded state's values are the
        # optimizer's, already loaded, and come back once the schedule is built.
        groups = runner.optimizer.param_groups
        loaded = None
        if self._pending is not None:
            loaded = [{k: _copied(v) for k, v in g.items() if k != "params"} for g in groups]
        self._compose(runner)  # may refuse the configuration: the pending state is kept
        self._installed = runner.scheduler
        pending, self._pending = self._pending, None
        if pending is not None and loaded is not None:
            if pending.get("scheduler") is not None:
                runner.scheduler.load_state_dict(pending["scheduler"])
            self.load_state_dict(pending)
            for group, values in zip(groups, loaded, strict=True):
                for key, value in values.items():
                    current = group.get(key)
                    if isinstance(current, torch.Tensor) and isinstance(value, torch.Tensor):
                        current.copy_(value)  # the optimizer's own tensor, kept
                    else:
                        group[key] = value

    def _compose(self, runner: Any) -> None:
        main = self._resolve(runner)
        self._plateau = isinstance(main, lr_scheduler.ReduceLROnPlateau)
        if self._plateau and runner.val_loader is None:
            raise RunnerError(
                f"ReduceLROnPlateau steps on the validation metric {self.monitor!r}, but the "
                "runner has no val_loader: pass Runner(val_loader=...) or use another scheduler"
            )
        if self._plateau and getattr(runner, "rank", 0) == 0:  # every rank would say it
            _check_plateau_mode(main, self.monitor)
        self._plain_step = None
        if self.warmup is None:
            self._main = main
            runner.scheduler = main
            if not self.by_epoch and not self._plateau:
                self._plain_step = main.step
            return
        chained = self.by_epoch or self._plateau
        warm = _warmup_scheduler(
            runner.optimizer, self.warmup, self.warmup_iters, self.warmup_ratio, chained=chained
        )
        if not chained:
            composed = lr_scheduler.SequentialLR(
                runner.optimizer, [warm, main], milestones=[self.warmup_iters]
            )
            self._main, self._warmup = composed, None
            runner.scheduler = composed
            self._plain_step = composed.step
        else:
            self._main, self._warmup = main, warm
            runner.scheduler = main

    def before_train_epoch(self, ctx: CallContext) -> None:
        if self._plateau and self._plateau_start is None:
            self._plateau_start = (ctx.runner.iter, self._main.last_epoch)

    def after_train_iter(self, ctx: CallContext) -> None:
        step = self._iter_step
        if step is not None:  # the common case: one scheduler stepping per iteration
            step()
            return
        if self._warmup is not None and ctx.runner.iter <= self.warmup_iters:
            self._warmup.step()
        if not self.by_epoch and self._main is not None and not self._plateau:
            self._main.step()

    def _group_step(self) -> None:
        """An iteration's work under GradAccumulation: only in one that stepped the
        optimizer, and the warm-up counted in optimizer steps."""
        if not self._accumulation.stepped_at(self._runner.iter):
            return
        self._optimizer_steps += 1
        step = self._plain_step
        if step is not None:
            step()
        elif self._warmup is not None and self._optimizer_steps <= self.warmup_iters:
            self._warmup.step()

    def after_train_epoch(self, ctx: CallContext) -> None:
        # Only an epoch that ended: a run cut inside one (max_iters) resumes it later.
        if self._main is not None and not self._plateau and not ctx.runner.inner_iter:
            self._main.step()

    def after_val_epoch(self, ctx: CallContext) -> None:
        # After Evaluate (higher priority) has put this validation's metrics in place.
        if self._plateau and self._main is not None:
            self._main.step(self._metric(ctx.runner))

    def after_run(self, ctx: CallContext) -> None:
        start = self._plateau_start
        # Stopped before a validation came (NaNGuard, stop()): the advice would be wrong.
        stopped = getattr(ctx.runner, "stop_reason", None) is not None
        if (
            start is not None
            and getattr(ctx.runner, "rank", 0) == 0  # said once, not by every rank
            and not stopped
            and ctx.runner.iter > start[0]
            and self._main.last_epoch == start[1]
        ):
            warnings.warn(
                f"ReduceLROnPlateau never stepped: no validation ran in this run, so "
                f"{self.monitor!r} was never seen; add Evaluate() (or validate yourself)",
                RuntimeWarning,
                stacklevel=2,
            )

    def state_dict(self) -> dict[str, Any]:
        if self._installed is None and self._pending is not None:  # loaded, not yet built
            pending = self._pending
            return {"warmup": pending.get("warmup"), "optimizer_steps": _steps_in(pending)}
        warmup = self._warmup.state_dict() if self._warmup is not None else None
        return {"warmup": warmup, "optimizer_steps": self._optimizer_steps}

    def pack_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """A state loaded before the schedule was built holds the schedule's progress
        until then: saved again as it came, not as the unbuilt runner.scheduler's."""
        pending = self._pending if self._installed is None else None
        if pending is None or "scheduler" not in pending:
            return state
        return {**state, "scheduler": pending["scheduler"]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self._installed is None:  # not built yet: applied by before_run
            self._pending = {**(self._pending or {}), **state}
        else:
            if self._warmup is not None and state.get("warmup") is not None:
                self._warmup.load_state_dict(state["warmup"])
            self._optimizer_steps = _steps_in(state)

    def unpack_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """Before the schedule is built, the runner's scheduler is not yet the one whose
        state a checkpoint holds: keep that state for before_run to load into it."""
        if self._installed is not None or "scheduler" not in state:
            return state
        state = dict(state)
        self._pending = {**(self._pending or {}), "scheduler": state.pop("scheduler")}
        return state

    def _resolve(self, runner: Any) -> Any:
        given = self.scheduler if self.scheduler is not None else runner.scheduler
        if given is None:
            raise RunnerError(
                "LRSchedule has no scheduler: pass one to LRSchedule(scheduler) or to "
                "Runner(scheduler=), or a callable optimizer -> scheduler"
            )
        if isinstance(given, type):  # a scheduler class: built with the optimizer alone
            try:
                given = given(runner.optimizer)
            except TypeError as exc:
                name = given.__name__
                raise RunnerError(
                    f"LRSchedule could not build {name}(optimizer) ({exc}): a class is called "
                    f"with the optimizer alone; give a function that builds it, e.g. "
                    f"LRSchedule(lambda optimizer: {name}(optimizer, ...)), or the scheduler "
                    "built on the runner's optimizer"
                ) from exc
        elif callable(given) and not hasattr(given, "step"):
            given = given(runner.optimizer)  # a factory
        if getattr(given, "optimizer", runner.optimizer) is not runner.optimizer:
            raise RunnerError(
                f"LRSchedule's {type(given).__name__} drives a different optimizer than the "
                "runner's: build it on runner.optimizer"
            )
        return given

    def _metric(self, runner: Any) -> float:
        try:
            value = runner.metrics[self.monitor]
        except KeyError:
            raise RunnerError(
                f"ReduceLROnPlateau watches {self.monitor!r}, which is not in runner.metrics "
                f"({sorted(runner.metrics)}): add Evaluate() or set LRSchedule(monitor=...)"
            ) from None
        return float(value)


def _steps_in(state: Mapping[str, Any]) -> int:
    """The optimizer steps a saved state counted (0 in one saved before they were)."""
    return int(state.get("optimizer_steps") or 0)


def _check_options(
    scheduler: SchedulerLike, warmup: str | None, warmup_iters: int, warmup_ratio: float
) -> None:
    """Refuse, at construction, options that are not a scheduler or a warm-up."""
    if warmup is not None and warmup not in _WARMUPS:
        raise InvalidOptionError(
            f"LRSchedule(warmup={warmup!r}): use one of {', '.join(_WARMUPS)} or None",
            option="warmup",
            value=warmup,
        )
    if isinstance(scheduler, (str, Mapping)) or (
        scheduler is not None and not callable(scheduler) and not hasattr(scheduler, "step")
    ):
        raise InvalidOptionError(
            f"LRSchedule(scheduler={scheduler!r}) is not a scheduler: give a torch "
            "scheduler, its class, or a function optimizer -> scheduler (in a config, "
            "the runner's top-level scheduler: key builds one from a name)",
            option="scheduler",
            value=scheduler,
        )
    if warmup is None and warmup_iters is not None and (warmup_iters is True or warmup_iters != 0):
        # Given alone it would be ignored: the run would have no warm-up, and say nothing.
        raise InvalidOptionError(
            f"LRSchedule(warmup_iters={warmup_iters!r}) needs warmup='linear' (or 'constant', "
            "'exp') to ramp the LR over those iterations; give one, or leave warmup_iters out",
            option="warmup_iters",
            value=warmup_iters,
        )
    if warmup is not None and (not is_integer(warmup_iters) or warmup_iters < 1):
        raise InvalidOptionError(
            f"LRSchedule(warmup_iters={warmup_iters!r}) must be a positive int with warmup=",
            option="warmup_iters",
            value=warmup_iters,
        )
    if not is_real(warmup_ratio) or not 0 < warmup_ratio <= 1:
        raise InvalidOptionError(
            f"LRSchedule(warmup_ratio={warmup_ratio!r}) must be in (0, 1]",
            option="warmup_ratio",
            value=warmup_ratio,
        )


def _check_plateau_mode(plateau: Any, monitor: str) -> None:
    """Warn when the plateau's ``mode`` goes against the way ``monitor`` improves (as its
    name tells, the rule checkpoints and early stopping infer): torch's default ``'min'``
    on an accuracy cuts the LR while the accuracy rises. Said only, since a name can
    mislead; an uninformative name says nothing."""
    try:
        rule = infer_rule(monitor, None)
    except InvalidOptionError:
        return
    expected = "max" if rule == "greater" else "min"
    mode = getattr(plateau, "mode", expected)
    if mode != expected:
        warnings.warn(
            f"ReduceLROnPlateau(mode={mode!r}) watches {monitor!r}, which by its "
            f"name is better when {rule}: build it with mode={expected!r}, or it lowers the "
            "LR while the metric improves",
            RuntimeWarning,
            stacklevel=2,
        )


def _copied(value: Any) -> Any:
    return value.clone() if isinstance(value, torch.Tensor) else value


def _warmup_scheduler(
    optimizer: torch.optim.Optimizer, kind: str, iters: int, ratio: float, *, chained: bool
) -> Any:
    if kind == "constant":
        return lr_scheduler.ConstantLR(optimizer, factor=ratio, total_iters=iters)
    if kind == "linear":
        return lr_scheduler.LinearLR(
            optimizer, start_factor=ratio, end_factor=1.0, total_iters=iters
        )
    if chained:
        # The same ramp as factors on the LR in place: times ratio now, then times
        # ratio ** (-1 / iters) on each of the next ``iters`` steps.
        start = lr_scheduler.LinearLR(
            optimizer, start_factor=ratio, end_factor=ratio, total_iters=1
        )
        growth = ratio ** (-1 / iters)
        grow = lr_scheduler.MultiplicativeLR(optimizer, lambda i: growth if i <= iters else 1.0)
        return lr_scheduler.ChainedScheduler([start, grow])
    ramp: Callable[[int], float] = lambda i: ratio ** (1 - i / iters) if i < iters else 1.0  # noqa: E731
    return lr_scheduler.LambdaLR(optimizer, ramp)
