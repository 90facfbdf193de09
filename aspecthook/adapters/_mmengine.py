"""``MMHook``: an OpenMMLab-style hook object (mmengine ``Hook`` or alike) as an aspect.

Its methods run at the runner join points of the same names, with the keyword arguments
OpenMMLab passes, or with ``runner`` only for a hook written for mmcv 1.x. Nothing here
imports torch or mmengine.
"""

from __future__ import annotations

import enum
import warnings
from collections.abc import Callable
from typing import Any

import wrapt

from .._advice import AdviceKind
from .._context import CallContext
from .._priority import Priority, PriorityLike, resolve_priority
from .._typing import Unpack
from ..errors import AspectDefinitionError, RunnerError
from ._base import (
    _EPOCH,
    _INDEX,
    _ITER,
    AdviceFn,
    Plan,
    _check_call,
    _HookAdapter,
    _HookOptions,
    _loader_length,
    _metrics_prefix,
    _NamedAdapterOptions,
    _nothing_to_call,
    _refuse,
    _spanned_epochs,
)
from ._methods import _MM, MM_METHODS

__all__ = ["MMHook", "from_mmengine_hook"]

#: OpenMMLab hook methods with no join point here (see ``MMHook._warn_unsupported``).
_UNSUPPORTED = ("before_save_checkpoint", "after_load_checkpoint")

#: Attributes of OpenMMLab's runner that aspecthook's has not, and what to read instead
#: (see ``_MMRunner.__getattr__``).
_INSTEAD = {
    "message_hub": "the step's outputs are runner.outputs (after_train_iter's outputs=), the "
    "metrics runner.metrics, the counters runner.iter / runner.epoch",
    "optim_wrapper": "the optimizer is runner.optimizer (its learning rates in "
    "runner.optimizer.param_groups[i]['lr'])",
    "param_schedulers": "the scheduler is runner.scheduler (None without one)",
    "logger": "log with Python's logging (logging.getLogger(__name__)); the Logger aspect "
    "writes the run's metrics",
    "visualizer": "the Logger aspect writes the run's scalars (Logger(tensorboard=True))",
    "val_loop": "validation is runner.val_epoch() over runner.val_loader",
    "test_loop": "testing is runner.test_epoch() over runner.test_loader",
    "val_evaluator": "metrics come from the Evaluate aspect, their values in runner.metrics",
    "test_evaluator": "metrics come from the Evaluate aspect, their values in runner.metrics",
    "log_dir": "the run's files go under runner.work_dir",
    "timestamp": "the run has no name or timestamp; its files go under runner.work_dir",
    "experiment_name": "the run has no name or timestamp; its files go under runner.work_dir",
    "cfg": "the runner keeps no config: read its attributes (runner.max_epochs ...)",
    "distributed": "runner.world_size > 1 says whether the run is distributed",
    "launcher": "runner.world_size > 1 says whether the run is distributed",
}

#: Keyword arguments (as OpenMMLab passes them) each argument style adds to ``runner``.
_MM_KWARGS: dict[str, dict[str, Any]] = {
    "runner": {},
    "iter": {"batch_idx": 0, "data_batch": None},
    "outputs": {"batch_idx": 0, "data_batch": None, "outputs": None},
    "metrics": {"metrics": None},
}


class MMHook(_HookAdapter):
    """An OpenMMLab-style hook object (mmengine ``Hook`` or alike) as an aspect.

    ``before_run(runner)`` ... ``after_run(runner)`` run at the runner join points of the
    same names (``*_val`` / ``*_val_epoch`` at ``val_epoch``, ``*_train`` at ``run``, as
    OpenMMLab orders them), with OpenMMLab's keyword arguments: ``batch_idx`` (the batch's
    index in its epoch), ``data_batch`` (the batch), ``outputs`` (what the step returned)
    and ``metrics`` (``runner.metrics``). Hooks written for mmcv 1.x, whose methods take
    only ``runner``, are called that way. The hook's ``priority`` (a name such as
    ``'NORMAL'``, an int or an enum member) orders it among the other aspects unless
    ``priority=`` is given; ``name`` defaults to the hook class's name in snake case.

    ``before_train`` runs after a checkpoint's resume and after the ``before_run`` advice
    of priority up to VERY_LOW (every shipped aspect's), and ``after_train`` before the
    ``after_run`` advice of priority VERY_HIGH and lower, as OpenMMLab runs those stages
    for all hooks in turn; so do ``before_val`` / ``before_test`` (before the other
    advice of priority VERY_HIGH and lower at their join point, every hook's
    ``before_*_epoch`` included) and ``after_val`` / ``after_test`` (after the advice of
    priority up to VERY_LOW). Among hooks they keep the hooks' priority order in ten bands
    (the tens up to 79, then 80 to 99, then 100: each named level in a band of its own;
    ties in the order given). ``metrics`` are that pass's metrics without
    their prefix (``'val/acc'`` -> ``'acc'``; the runner's ``Evaluate`` prefix, ``'test/'``
    in a test pass), as OpenMMLab's evaluator returns them.

    ``runner`` is the aspecthook runner as OpenMMLab's hooks read it (``_MMRunner``): in
    ``after_train_iter`` / ``after_train_epoch`` its ``iter`` / ``epoch`` are the index of
    the iteration / epoch that just ran, as in OpenMMLab (which counts it after those
    hooks; aspecthook's own counters have counted it already), so ``every_n_train_iters``,
    ``every_n_epochs``, ``is_last_train_iter`` and ``is_last_train_epoch`` hold where they
    would there; ``max_iters`` of a run by epochs is ``max_epochs`` times the training
    loader's length, as OpenMMLab's epoch loop gives it, and ``max_epochs`` of a run by
    ``max_iters`` alone the passes over the loader it spans (1 when it fits in one, as
    OpenMMLab's iteration loop gives it; 1 for a loader without a length), so
    ``is_last_train_epoch`` holds at the pass that ends the run. Validation runs inside
    ``after_train_epoch`` (the ``Evaluate`` aspect, ahead of NORMAL priority) rather than
    after it. The checkpoint hooks (``before_save_checkpoint``, ``after_load_checkpoint``)
    have no join point here: a hook that defines them is warned about when adapted.
    """

    _base_name = "Hook"

    def __init__(
        self,
        hook: Any,
        *,
        priority: PriorityLike | None = None,
        name: str | None = None,
        **options: Unpack[_HookOptions],
    ) -> None:
        super().__init__(hook, name=name, priority=_hook_priority(hook, priority), **options)
        if not any(callable(getattr(hook, m, None)) for m in MM_METHODS):
            raise AspectDefinitionError(
                f"MMHook({hook!r}): the object has none of the OpenMMLab hook methods "
                f"({', '.join(MM_METHODS[:4])} ...); give a hook object, or use "
                "KerasCallback for a Keras-style callback"
            )
        self._calls = self._bind_methods()
        if not self._calls:
            raise _nothing_to_call(self, MM_METHODS)
        self._warn_unsupported()

    def _warn_unsupported(self) -> None:
        """Say which of the hook's own methods have no join point here (the checkpoint
        hooks), rather than leave them silently uncalled next to the ones that run."""
        unsupported = [m for m in _UNSUPPORTED if self._method(m) is not None]
        if unsupported:
            warnings.warn(
                f"MMHook({type(self.target).__name__}): {', '.join(unsupported)} will not be "
                "called: aspecthook's Checkpoint has no such stage. Give the hook a "
                "state_dict() / load_state_dict(state) for what it keeps in checkpoints "
                "(an aspect's state is saved with the run's), or subscribe to "
                "'checkpoint.saved' / 'checkpoint.resumed'",
                UserWarning,
                stacklevel=3,
            )

    def _bind_methods(self) -> list[tuple[str, AdviceKind, str, AdviceFn]]:
        calls = []
        for method_name, kind, point, style in _MM:
            method = self._method(method_name)
            if method is not None:
                fn = _mm_call(self.target, method_name, method, style)
                calls.append((method_name, kind, point, fn))
        return calls

    def _stage_priorities(self) -> dict[str, int]:
        # OpenMMLab runs before_run for every hook, then loads or resumes the checkpoint,
        # then before_train for every hook (and after_train for every hook before any
        # after_run); its loops call before_val for every hook before any before_val_epoch
        # (after_val after every after_val_epoch, the same for test). Here the stage that
        # must come last takes a priority above VERY_LOW (where Checkpoint resumes), the
        # one that must come first one below VERY_HIGH, each keeping the hooks' own order.
        rank = _band(resolve_priority(self.priority))  # 0..9, in the hooks' order
        first, last = int(Priority.HIGHEST) + rank, int(Priority.VERY_LOW) + 1 + rank
        return {
            "before_train": last,
            "after_train": first,
            **{f"before_{mode}": first for mode in ("val", "test")},
            **{f"after_{mode}": last for mode in ("val", "test")},
        }

    def _plan(self) -> Plan:
        plan: Plan = []
        for mode in ("train", "val", "test"):
            if any(label.endswith(f"_{mode}_iter") for label, *_ in self._calls):
                plan.extend(self._counting(mode))
        if any(label == "after_train_epoch" for label, *_ in self._calls):
            plan.append(("epoch_index", "before", "train_epoch", _epoch_index))
        return plan + list(self._calls)


def _band(priority: int) -> int:
    """The hooks' order in the stages OpenMMLab runs for all hooks in turn, as one of the
    ten priorities free there (0..9): the tens up to 79, then 80-99, then 100 (LOWEST). Each
    named level has a band of its own (``priority // 10`` put VERY_LOW and LOWEST in one);
    only ints between LOW and VERY_LOW share VERY_LOW's."""
    if priority < 80:
        return priority // 10
    return 8 if priority < int(Priority.LOWEST) else 9


class _MMRunner(wrapt.ObjectProxy[Any]):
    """The runner as OpenMMLab's hooks read it; everything but these counters is its own.

    ``iter`` / ``epoch`` are ``at_iter`` / ``at_epoch`` when given: the index of the
    iteration / epoch whose ``after_*`` hooks run, which OpenMMLab counts only after them
    (aspecthook's loop has counted it already). ``max_iters`` of a run by epochs is
    ``max_epochs`` x the training loader's length, as OpenMMLab's epoch loop sets it;
    ``max_epochs`` of a run by ``max_iters`` alone is the passes over the loader it spans
    (1 when it fits in one, as its ``IterBasedTrainLoop`` sets it; the runner's own stays
    None). Read-only, as OpenMMLab's runner has them. An attribute the runner has not
    (OpenMMLab's ``message_hub``, ``optim_wrapper`` ...) raises ``AttributeError`` naming
    the hook method that read it and, for OpenMMLab's, what to read instead.
    """

    def __init__(
        self,
        runner: Any,
        at_iter: int | None = None,
        at_epoch: int | None = None,
        reader: str = "the hook",
    ):
        super().__init__(runner)
        self._self_at_iter = at_iter
        self._self_at_epoch = at_epoch
        self._self_reader = reader

    def __getattr__(self, attr: str) -> Any:
        try:
            return super().__getattr__(attr)
        except AttributeError:
            if attr.startswith("_"):  # probes of private and special names: as they were
                raise
            instead = _INSTEAD.get(attr)
            hint = f": {instead}" if instead else ""
            raise AttributeError(
                f"{self._self_reader} read runner.{attr}, which aspecthook's Runner does not "
                f"have{hint}"
            ) from None

    @property
    def iter(self) -> Any:
        at = self._self_at_iter
        return self.__wrapped__.iter if at is None else at

    @property
    def epoch(self) -> Any:
        at = self._self_at_epoch
        return self.__wrapped__.epoch if at is None else at

    @property
    def max_iters(self) -> Any:
        runner = self.__wrapped__
        limit = getattr(runner, "max_iters", None)
        epochs = getattr(runner, "max_epochs", None)
        if limit is None and isinstance(epochs, int):
            per_epoch = _loader_length(getattr(runner, "train_loader", None))
            return None if per_epoch is None else epochs * per_epoch
        return limit

    @property
    def max_epochs(self) -> Any:
        # A run by max_iters: the loader's passes it spans (1 when it fits in one, as
        # OpenMMLab's IterBasedTrainLoop has it), so that is_last_train_epoch holds at
        # the pass that ends the run, where this runner calls after_train_epoch last.
        return _spanned_epochs(self.__wrapped__)

    @property
    def train_loop(self) -> Any:
        """The runner's own ``train_loop`` if it has one, else a view of the run as
        OpenMMLab's training loop (hooks such as its ``EarlyStoppingHook`` stop the run
        through ``runner.train_loop.stop_training``)."""
        own = getattr(self.__wrapped__, "train_loop", None)
        return own if own is not None else _MMTrainLoop(self)


class _MMTrainLoop:
    """``runner.train_loop`` as OpenMMLab's hooks read it: the run's counters and limits
    (the ``_MMRunner``'s), its loader, and ``stop_training``; setting that True stops the
    run after the current iteration (``runner.stop()``), as OpenMMLab's loop stops."""

    def __init__(self, runner: _MMRunner) -> None:
        self.runner = runner

    @property
    def iter(self) -> Any:
        return self.runner.iter

    @property
    def epoch(self) -> Any:
        return self.runner.epoch

    @property
    def max_iters(self) -> Any:
        return self.runner.max_iters

    @property
    def max_epochs(self) -> Any:
        return self.runner.max_epochs

    @property
    def dataloader(self) -> Any:
        return getattr(self.runner, "train_loader", None)

    @property
    def stop_training(self) -> bool:
        return getattr(self.runner, "stop_reason", None) is not None

    @stop_training.setter
    def stop_training(self, value: bool) -> None:
        if value:  # False (a loop's start) has nothing to undo: a stopped run is stopped
            self.runner.stop("an OpenMMLab-style hook set runner.train_loop.stop_training")


def _epoch_index(ctx: CallContext) -> None:
    ctx.data[_EPOCH] = getattr(ctx.runner, "epoch", 0)  # before the loop counts it


class _NoRunner:
    """What a hook gets as ``runner`` at a call outside a run (``ctx.runner`` is None).

    OpenMMLab always passes a runner, so a hook reads it without a check; here the first
    read raises ``RunnerError`` saying what to do, instead of ``AttributeError`` on None
    deep inside the hook. A hook that never reads its runner runs as it is.
    """

    __slots__ = ("_hook", "_joinpoint", "_method")

    def __init__(self, hook: Any, method: str, joinpoint: str) -> None:
        self._hook = hook
        self._method = method
        self._joinpoint = joinpoint

    def __getattr__(self, attr: str) -> Any:
        hook = type(self._hook).__name__
        raise RunnerError(
            f"{hook}.{self._method} read runner.{attr}, but {self._joinpoint!r} was called "
            "outside a run, so there is no runner: give the hook to "
            f"aspecthook.train.Runner(aspects=[MMHook({hook}(...))]), or call "
            f"{self._joinpoint!r} from within runner.run() (a function of the run, e.g. "
            "declared with @runner.joinpoint)"
        )

    def __repr__(self) -> str:
        return f"<no runner: {self._joinpoint!r} called outside a run>"


def _mm_runner(ctx: CallContext, name: str, hook: Any) -> Any:
    """``ctx.runner`` for hook method ``name`` (see ``_MMRunner``); outside a run, a
    ``_NoRunner`` that says so when the hook reads it."""
    runner = ctx.runner
    if runner is None:
        return _NoRunner(hook, name, ctx.joinpoint.name)
    reader = f"{type(hook).__name__}.{name}"
    if name == "after_train_iter":
        return _MMRunner(runner, at_iter=ctx.data.get(_ITER), reader=reader)
    if name == "after_train_epoch":
        return _MMRunner(runner, at_epoch=ctx.data.get(_EPOCH), reader=reader)
    return _MMRunner(runner, reader=reader)


def _hook_priority(hook: Any, given: PriorityLike | None) -> PriorityLike:
    if given is not None:
        return given
    value = getattr(hook, "priority", None)
    if isinstance(value, enum.Enum) and not isinstance(value, Priority):
        value = value.value  # e.g. mmengine's own Priority enum
    # None (or no attribute, as an mmcv 1.x hook has) is OpenMMLab's Hook default: mmengine's
    # get_priority() would raise TypeError for a None it found on a hook, but a None here
    # is taken, as MMHook(priority=None) is, to mean "no priority of its own".
    return Priority.NORMAL if value is None else value


def _batch(ctx: CallContext) -> Any:
    args = ctx.args
    return args[0] if args else ctx.kwargs.get("batch")


def _mm_call(hook: Any, name: str, method: Callable[..., Any], style: str) -> AdviceFn:
    """The advice that calls ``method`` as OpenMMLab would, or with ``runner`` only."""
    kwargs = _MM_KWARGS[style]
    if not _check_call(method, None, **kwargs):
        if not kwargs or not _check_call(method, None):
            expected = ", ".join(["runner", *(f"{k}=None" for k in kwargs)])
            _refuse(hook, name, method, f"({expected})")
        style = "runner"  # an mmcv 1.x hook: runner only

    if style == "runner":
        return lambda ctx: method(_mm_runner(ctx, name, hook))
    if style == "iter":
        return lambda ctx: method(
            _mm_runner(ctx, name, hook), batch_idx=ctx.data[_INDEX], data_batch=_batch(ctx)
        )
    if style == "outputs":
        return lambda ctx: method(
            _mm_runner(ctx, name, hook),
            batch_idx=ctx.data[_INDEX],
            data_batch=_batch(ctx),
            outputs=ctx.result,
        )
    # A fresh dict of this loop's metrics (as OpenMMLab passes its evaluator's results),
    # not runner.metrics itself: a hook that keeps it keeps this epoch's values.
    mode = "test" if "test" in name else "val"

    def with_metrics(ctx: CallContext) -> Any:
        metrics = getattr(ctx.runner, "metrics", None) or {}
        prefix = _metrics_prefix(ctx.runner, mode)
        mine = {k[len(prefix) :]: v for k, v in metrics.items() if k.startswith(prefix)}
        return method(_mm_runner(ctx, name, hook), metrics=mine)

    return with_metrics


def from_mmengine_hook(hook: Any, **options: Unpack[_NamedAdapterOptions]) -> MMHook:
    """``MMHook(hook, **options)``: an OpenMMLab-style hook object as an aspect."""
    return MMHook(hook, **options)
