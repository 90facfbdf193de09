"""``KerasCallback``: a Keras-style callback (``on_epoch_end(epoch, logs)`` ...) as an aspect.

Its methods run at the runner join points Keras's ``fit`` and ``evaluate`` would call
them at, with 0-based indices and Keras-shaped ``logs``. Nothing here imports torch or
keras.
"""

from __future__ import annotations

import sys
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from .._context import CallContext
from .._priority import Priority, resolve_priority
from .._typing import Unpack
from ..errors import AspectDefinitionError
from ._base import (
    _EPOCH,
    _INDEX,
    AdviceFn,
    Plan,
    _AdapterOptions,
    _check_call,
    _HookAdapter,
    _loader_length,
    _metrics_prefix,
    _NamedAdapterOptions,
    _nothing_to_call,
    _refuse,
    _spanned_epochs,
)
from ._methods import KERAS_METHODS

__all__ = ["KerasCallback", "from_keras_callback"]

#: Keras callback methods with no join point here (see ``KerasCallback._warn_unsupported``).
_UNSUPPORTED = (
    "on_predict_begin",
    "on_predict_end",
    "on_predict_batch_begin",
    "on_predict_batch_end",
)
#: What the evaluation step returns beside its loss (``Runner.compute_eval_step``): the
#: batch's predictions and targets, data rather than metrics, so never in ``logs``.
_BATCH_DATA = ("outputs", "targets")
#: The key that marks the adapter's own checkpoint state (the epoch's means, the callback's
#: state under ``'callback'``): a checkpoint without it holds the callback's state as it
#: is, whatever its keys (``{'epoch': 3}`` of a callback that tracks its best epoch).
_STATE_MARK = "keras_adapter"


class KerasCallback(_HookAdapter):
    """A Keras-style callback (``on_epoch_end(epoch, logs)`` ...) as an aspect.

    ``on_train_begin`` / ``on_train_end`` run at ``run``, ``on_epoch_*`` at
    ``train_epoch``, ``on_train_batch_*`` (or Keras 2's ``on_batch_*``) at ``train_iter``,
    and ``on_test_*`` at ``val_epoch`` / ``val_iter`` (validation during training, as
    Keras's ``fit`` does) and at ``test_epoch`` / ``test_iter``. ``epoch`` and ``batch``
    are 0-based indices. ``logs`` are Keras-shaped dicts of floats: at a batch's end the
    running mean of each scalar the steps returned since the epoch began, this batch
    included, each batch weighed by its samples (``{'loss': 0.31}``; since the pass
    began for ``on_test_batch_end``; not the
    evaluation step's ``outputs`` / ``targets``, which are the batch's data), as Keras's
    metrics aggregate; at epoch end the same means over the whole epoch (``loss`` ...; a
    checkpoint taken inside an epoch holds its means so far, so a run resumed there logs
    what the uninterrupted run logs), after the epoch's validation
    whatever the callback's priority, plus, when the epoch validated, that validation's
    metrics named as Keras's ``fit`` names them
    (``'val/loss'`` -> ``'val_loss'``, whatever prefix the runner's ``Evaluate`` uses, so a
    callback monitoring ``'val_loss'`` finds it; no ``test/`` metrics); at test end the
    metrics of that pass without their prefix (``'val/acc'`` -> ``'acc'``, whatever prefix
    the runner's ``Evaluate`` uses); at train end the last epoch's logs.

    When the run starts, the callback gets the runner's model as ``callback.model``
    (through ``set_model`` when it has one, or when it has a ``model`` attribute) and
    ``params`` through ``set_params``; a callback with ``on_test_*`` methods gets them also
    before a test or validation pass outside a run (``runner.test()``), with one epoch of
    that loader's steps, as Keras's ``evaluate()`` gives them. A callback that sets
    ``self.model.stop_training = True``, as Keras's ``EarlyStopping`` does, stops the run
    through ``runner.stop()`` after the current iteration (in a run: a test pass by itself
    ignores it, as Keras's ``evaluate()`` does); as in Keras's ``fit``, a stop asked for in
    ``on_train_begin`` comes after the first batch, and an epoch stopped inside is
    validated (when the runner's ``Evaluate`` validates that epoch) before
    ``on_epoch_end``. ``on_predict_*`` have no join
    point here: a callback that defines them is warned about when adapted.
    """

    _base_name = "Callback"

    def __init__(
        self, callback: Any, *, name: str | None = None, **options: Unpack[_AdapterOptions]
    ) -> None:
        super().__init__(callback, name=name, **options)
        if not any(callable(getattr(callback, m, None)) for m in KERAS_METHODS):
            raise AspectDefinitionError(
                f"KerasCallback({callback!r}): the object has none of the Keras callback "
                f"methods ({', '.join(KERAS_METHODS[:4])} ...); give a callback object, or "
                "use MMHook for an OpenMMLab-style hook"
            )
        self._model: Any = None
        # The running means batch and epoch logs hold, by mode ('train', 'val', 'test'):
        # a validation inside a training epoch keeps its own.
        self._means = {mode: _RunningMeans() for mode in ("train", "val", "test")}
        self._epoch_logs: dict[str, float] = {}
        self._val_this_epoch = False
        self._in_run = False  # between the run's start and its end (see _start_alone)
        # The callback's own state (self._own_state, from the base class) is kept inside
        # this adapter's (state_dict below), beside the epoch's running means.
        self._runner: Any = None  # the run's runner (before each epoch): where it stands
        self._resumed_in_epoch = False  # means loaded from a checkpoint taken in an epoch
        self._calls = self._bind_methods()
        if not self._calls:
            raise _nothing_to_call(self, KERAS_METHODS)
        self._warn_unsupported()

    def _warn_unsupported(self) -> None:
        """Say which of the callback's own methods have no join point here (prediction's),
        rather than leave them silently uncalled next to the ones that run."""
        unsupported = [m for m in _UNSUPPORTED if self._method(m) is not None]
        if unsupported:
            warnings.warn(
                f"KerasCallback({type(self.target).__name__}): {', '.join(unsupported)} will "
                "not be called: the runner has no predict loop. Call them yourself around "
                "your own inference, or write an Aspect for it",
                UserWarning,
                stacklevel=3,
            )

    def _bind_methods(self) -> dict[str, Callable[..., Any]]:
        calls: dict[str, Callable[..., Any]] = {}
        for name in KERAS_METHODS:
            method = self._method(name)
            if method is None:
                continue
            index = "epoch" if "epoch" in name else "batch" if "batch" in name else None
            args: tuple[Any, ...] = (0, {}) if index else ({},)
            if not _check_call(method, *args):
                _refuse(self.target, name, method, f"({index}, logs)" if index else "(logs)")
            calls[name] = method
        for name in ("on_batch_begin", "on_batch_end"):  # Keras 2 names, when not overridden
            if f"on_train_{name[3:]}" in calls:
                calls.pop(name, None)
        return calls

    def _plan(self) -> Plan:
        plan: Plan = [("set_model", "before", "run", self._start_run)]
        c = self._calls
        if "on_train_begin" in c:
            # As Keras's fit: a stop asked for here is seen at the end of the first batch
            # (so that batch trains, as in Keras), not before the run has begun.
            call = self._call("on_train_begin", check_stop=False)
            plan.append(("on_train_begin", "before", "run", call))
            plan.append(("train_begin_stop", "before", "train_epoch", self._stop_if_asked))
        # The epoch's logs feed on_epoch_end, and on_train_end gets the last epoch's; the
        # batch logs are the same running means, so one sum serves both.
        epoch_logs = "on_epoch_end" in c or "on_train_end" in c
        means = epoch_logs or "on_train_batch_end" in c or "on_batch_end" in c
        if "on_epoch_begin" in c or means:
            plan.append(("epoch_index", "before", "train_epoch", self._begin_epoch))
        if any(k in c for k in KERAS_METHODS[4:8]):  # on_train_batch_* / on_batch_*
            plan.extend(self._counting("train"))
        if means:  # after advice of one aspect runs in plan order: before on_*batch_end
            plan.append(("batch_means", "after", "train_iter", self._add_outputs("train")))
        plan.extend(self._train_batches())
        # Keras's fit validates the epoch a callback stopped, then calls on_epoch_end.
        plan.append(("stopped_epoch_val", "after", "train_epoch", self._validate_stopped))
        if epoch_logs:
            plan.append(("validated", "after", "val_epoch", self._validated))
            plan.append(("on_epoch_end", "after", "train_epoch", self._end_epoch))
        tests = [advice for mode in ("val", "test") for advice in self._test_plan(mode)]
        if tests:  # a test pass outside a run gives the model first: run() ending says so
            plan.extend(tests)
            plan.append(("run_end", "after", "run", self._end_run))
            plan.append(("run_failed", "on_error", "run", self._end_run))
        if "on_train_end" in c:
            plan.append(("on_train_end", "after", "run", self._train_end))
        return plan

    def _stage_priorities(self) -> dict[str, int]:
        # Keras's fit validates before on_epoch_end; here the Evaluate aspect validates at
        # the epoch's end (ABOVE_NORMAL), so on_epoch_end never runs ahead of it.
        after_evaluate = int(Priority.ABOVE_NORMAL) + 1
        return {
            "stopped_epoch_val": after_evaluate,  # before every callback's on_epoch_end
            "on_epoch_end": max(resolve_priority(self.priority), after_evaluate),
        }

    def _train_batches(self) -> Plan:
        plan: Plan = []
        for name in ("on_train_batch_begin", "on_batch_begin"):
            if name in self._calls:
                plan.append((name, "before", "train_iter", self._batch_begin(name)))
        for name in ("on_train_batch_end", "on_batch_end"):
            if name in self._calls:
                plan.append((name, "after", "train_iter", self._batch_end(name, "train")))
        return plan

    def _test_plan(self, mode: str) -> Plan:
        c = self._calls
        if not any(name in c for name in KERAS_METHODS[8:]):  # on_test_*
            return []
        # As Keras's evaluate(): the callback gets the model before a test pass run
        # by itself (runner.test()), not in the middle of a run.
        plan: Plan = [(f"set_model_{mode}", "before", f"{mode}_epoch", self._start_alone(mode))]
        if "on_test_batch_begin" in c or "on_test_batch_end" in c:
            plan.extend(self._counting(mode))
        if "on_test_begin" in c:
            plan.append(("on_test_begin", "before", f"{mode}_epoch", self._call("on_test_begin")))
        if "on_test_batch_begin" in c:
            fn = self._batch_begin("on_test_batch_begin")
            plan.append(("on_test_batch_begin", "before", f"{mode}_iter", fn))
        if "on_test_batch_end" in c:  # its logs: running means since the pass began
            reset = self._reset_means(mode)
            plan.append(("batch_means_reset", "before", f"{mode}_epoch", reset))
            plan.append(("batch_means", "after", f"{mode}_iter", self._add_outputs(mode)))
            fn = self._batch_end("on_test_batch_end", mode)
            plan.append(("on_test_batch_end", "after", f"{mode}_iter", fn))
        if "on_test_end" in c:
            plan.append(("on_test_end", "after", f"{mode}_epoch", self._test_end(mode)))
        return plan

    # -- the advice -----------------------------------------------------------------------

    def _start_run(self, ctx: CallContext) -> None:
        self._in_run = True
        self._start(ctx.runner, _params(ctx.runner))

    def _end_run(self, ctx: CallContext) -> None:
        self._in_run = False

    def _start_alone(self, mode: str) -> AdviceFn:
        """Start a ``mode`` pass run by itself (no run in progress), as Keras's evaluate()."""

        def start(ctx: CallContext) -> None:
            if not self._in_run:
                self._start(ctx.runner, _eval_params(ctx.runner, f"{mode}_loader"))

        return start

    def _start(self, runner: Any, params: dict[str, Any]) -> None:
        """Give the callback the model and params, and clear a stale stop request."""
        callback = self.target
        model = getattr(runner, "model", None)
        if callable(getattr(callback, "set_model", None)):
            callback.set_model(model)
        elif hasattr(callback, "model"):
            callback.model = model
        else:
            model = None
        self._model = model
        if model is not None and getattr(model, "stop_training", False):
            model.stop_training = False
        if callable(getattr(callback, "set_params", None)):
            callback.set_params(params)

    def _call(self, name: str, *, check_stop: bool = True) -> AdviceFn:
        method = self._calls[name]

        def call(ctx: CallContext) -> None:
            method({})
            if check_stop:
                self._check_stop(ctx.runner)

        return call

    def _stop_if_asked(self, ctx: CallContext) -> None:
        """Before an epoch: a stop asked for in ``on_train_begin`` (or before) ends the run
        after this epoch's first batch, as Keras's fit sees it at that batch's end."""
        self._check_stop(ctx.runner)

    def _validate_stopped(self, ctx: CallContext) -> None:
        """Validate the epoch a callback stopped inside, as Keras's fit does (when the
        runner's ``Evaluate`` would have validated that epoch at its end); the runner
        leaves an epoch cut by ``stop()`` unvalidated. Once, whichever callback asked."""
        runner = ctx.runner
        model = self._model
        if not (
            model is not None
            and getattr(model, "stop_training", False)
            and getattr(runner, "stop_reason", None) is not None
            and getattr(runner, "inner_iter", 0) > 0  # cut: an ended epoch was judged
            and getattr(runner, "val_loader", None) is not None
            and _STOPPED_VALIDATED.get(runner) != runner.iter
        ):
            return
        evaluate = _evaluate_aspect(runner)
        interval = getattr(evaluate, "interval", 0)
        if getattr(evaluate, "by_epoch", False) and (runner.epoch + 1) % interval == 0:
            _STOPPED_VALIDATED[runner] = runner.iter
            runner.val_epoch()

    def _batch_begin(self, name: str) -> AdviceFn:
        method = self._calls[name]

        def call(ctx: CallContext) -> None:
            method(ctx.data[_INDEX], {})
            self._check_stop(ctx.runner)

        return call

    def _batch_end(self, name: str, mode: str) -> AdviceFn:
        """Call ``name`` with the running means of ``mode``'s pass, this batch included
        (the ``batch_means`` advice before it added the batch)."""
        method, means = self._calls[name], self._means[mode]

        def call(ctx: CallContext) -> None:
            method(ctx.data[_INDEX], means.means())
            self._check_stop(ctx.runner)

        return call

    def _reset_means(self, mode: str) -> AdviceFn:
        means = self._means[mode]
        return lambda ctx: means.reset()

    def _add_outputs(self, mode: str) -> AdviceFn:
        """Add the step's scalar outputs to ``mode``'s running means, weighed by the
        batch's samples (as Keras's fit and evaluate weigh them)."""
        means = self._means[mode]
        return lambda ctx: means.add(ctx.result, _samples(ctx.args[0] if ctx.args else None))

    def _begin_epoch(self, ctx: CallContext) -> None:
        runner = ctx.runner
        ctx.data[_EPOCH] = getattr(runner, "epoch", 0)
        # The epoch goes on (a checkpoint taken inside it, or run() again on a runner whose
        # last run ended inside it): so do its means. Otherwise it starts: so do they.
        goes_on = self._resumed_in_epoch or runner is self._runner
        self._runner, self._resumed_in_epoch = runner, False
        if not (goes_on and getattr(runner, "inner_iter", 0) > 0):
            self._means["train"].reset()
            self._val_this_epoch = False
        method = self._calls.get("on_epoch_begin")
        if method is not None:
            method(ctx.data[_EPOCH], {})
            self._check_stop(ctx.runner)

    def _validated(self, ctx: CallContext) -> None:
        self._val_this_epoch = True

    def _end_epoch(self, ctx: CallContext) -> None:
        logs = self._means["train"].means()  # the last batch's logs, as Keras's fit has them
        if self._val_this_epoch:  # as Keras: no val_* on an epoch that did not validate
            # This validation's metrics only (not a test pass's still in runner.metrics),
            # named as Keras's fit names them: 'val_' and the metric's name.
            metrics = _scalars(getattr(ctx.runner, "metrics", None) or {})
            prefix = _metrics_prefix(ctx.runner, "val")
            logs.update(
                {f"val_{k[len(prefix) :]}": v for k, v in metrics.items() if k.startswith(prefix)}
            )
        self._epoch_logs = logs
        method = self._calls.get("on_epoch_end")
        if method is not None:
            method(ctx.data.get(_EPOCH, 0), dict(logs))
            self._check_stop(ctx.runner)

    def _test_end(self, mode: str) -> AdviceFn:
        method = self._calls["on_test_end"]

        def call(ctx: CallContext) -> None:
            metrics = _scalars(getattr(ctx.runner, "metrics", None) or {})
            prefix = _metrics_prefix(ctx.runner, mode)
            method({k[len(prefix) :]: v for k, v in metrics.items() if k.startswith(prefix)})
            self._check_stop(ctx.runner)

        return call

    def _train_end(self, ctx: CallContext) -> None:
        self._calls["on_train_end"](dict(self._epoch_logs))

    # -- checkpoints ----------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The callback's own state (``'callback'``, when it has a ``state_dict()``) and,
        saved inside an epoch, that epoch's running means so far (``'epoch'``): a run
        resumed there gives the batch and epoch logs the uninterrupted run gives."""
        state: dict[str, Any] = {_STATE_MARK: 1, "epoch": None}
        runner = self._runner
        if runner is not None and getattr(runner, "inner_iter", 0) > 0:
            state["epoch"] = {
                "means": self._means["train"].state_dict(),
                "validated": self._val_this_epoch,
            }
        if self._own_state is not None:
            state["callback"] = self._own_state[0]()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Put back what :meth:`state_dict` gave; a checkpoint that holds the callback's
        own state as it is (from before the adapter kept the means) restores that."""
        ours = isinstance(state, Mapping) and _STATE_MARK in state
        if not ours:
            if self._own_state is not None:
                self._own_state[1](state)
        elif self._own_state is not None and "callback" in state:
            self._own_state[1](state["callback"])
        epoch = state["epoch"] if ours else None
        # A checkpoint without means (taken at an epoch's start, or by the previous format)
        # leaves none of an earlier run's or load's behind.
        self._means["train"].reset()
        self._val_this_epoch = self._resumed_in_epoch = False
        if epoch is not None:
            self._means["train"].load_state_dict(epoch["means"])
            self._val_this_epoch = bool(epoch["validated"])
            self._resumed_in_epoch = True

    def _check_stop(self, runner: Any) -> None:
        # Only a run has training to stop: as Keras's evaluate(), a test pass by itself
        # ignores the flag (the runner would stay stopped, and the next run() do nothing).
        model = self._model
        if not self._in_run or runner is None:
            return
        if model is not None and getattr(model, "stop_training", False):
            runner.stop(f"{self.name}: {type(self.target).__name__} set model.stop_training")


#: The iteration at which each runner's stopped epoch was validated (by the first of its
#: callbacks' adapters to get there: the others then leave it).
_STOPPED_VALIDATED: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def _evaluate_aspect(runner: Any) -> Any:
    """The runner's ``Evaluate`` aspect, or None (looked up in ``sys.modules``, as
    ``_metrics_prefix`` does: this module never imports torch)."""
    module = sys.modules.get("aspecthook.train.aspects._evaluate")
    get_aspect = getattr(runner, "get_aspect", None)
    if module is None or not callable(get_aspect):
        return None
    return get_aspect(module.Evaluate)


class _RunningMeans:
    """The running mean of each scalar output of the steps since ``reset()``: what Keras's
    logs hold (its metrics aggregate from the start of the epoch, or of an evaluation).
    Each step counts for the samples of its batch, as Keras weighs its loss by the batch
    size, so a short last batch counts for what it holds (``counts`` are samples).

    A step's outputs that are no scalar, and the evaluation step's ``outputs`` /
    ``targets`` (the batch's data), are left out. Sums stay tensors as the steps return
    them (in float32 at least: a half-precision sum stops growing, or overflows, long
    before an epoch ends), so adding costs no device sync; ``means()`` reads them.
    """

    __slots__ = ("_counts", "_sums")

    def __init__(self) -> None:
        self._sums: dict[str, Any] = {}
        self._counts: dict[str, int] = {}

    def reset(self) -> None:
        self._sums, self._counts = {}, {}

    def add(self, outputs: Any, samples: int = 1) -> None:
        if not isinstance(outputs, Mapping):
            return
        sums, counts = self._sums, self._counts
        for key, value in outputs.items():
            if key in _BATCH_DATA or not _is_scalar(value):
                continue
            if hasattr(value, "detach"):  # a tensor: summed where it is, no sync
                value = value.detach()
                if value.is_floating_point() and value.element_size() < 4:
                    # bfloat16 / float16 sums stop growing (or overflow) within an epoch
                    value = value.float()
            else:  # a number, numpy's float16 included
                value = float(value)
            if samples != 1:
                value = value * samples
            name = str(key)
            sums[name] = value + sums[name] if name in sums else value
            counts[name] = counts.get(name, 0) + samples

    def means(self) -> dict[str, float]:
        """Each output's mean so far, as a float (a fresh dict); 0.0 for one that only
        batches of no samples gave, as Keras's ``Mean`` divides (``divide_no_nan``)."""
        counts = self._counts
        try:  # no work per call in Python 3.11: the empty case is the exception's path
            return {name: _float(total) / counts[name] for name, total in self._sums.items()}
        except ZeroDivisionError:
            return {
                name: _float(total) / counts[name] if counts[name] else 0.0
                for name, total in self._sums.items()
            }

    def state_dict(self) -> dict[str, Any]:
        """The sums as floats (exactly the float32 or float64 sums) and the counts."""
        return {
            "sums": {name: _float(total) for name, total in self._sums.items()},
            "counts": dict(self._counts),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        # A float sum goes on as a tensor sum: tensor + float keeps the tensor's dtype,
        # and the float is exactly a value of it, so the sums are those of the run saved.
        self._sums = {str(name): float(total) for name, total in state["sums"].items()}
        self._counts = {str(name): int(n) for name, n in state["counts"].items()}


def _samples(batch: Any) -> int:
    """The samples in ``batch``: the first dimension of its first array (Keras's
    ``tree.flatten(x)[0].shape[0]``), through tuples, lists and mappings; 1 without one."""
    while isinstance(batch, (tuple, list, Mapping)) and batch:
        batch = next(iter(batch.values())) if isinstance(batch, Mapping) else batch[0]
    shape = getattr(batch, "shape", None)
    return int(shape[0]) if shape else 1


def _params(runner: Any) -> dict[str, Any]:
    """The run's params, as Keras's ``fit`` gives them; a run by ``max_iters`` has the
    epochs it spans (Keras's ``epochs`` is an int), when the loader has a length."""
    steps = _loader_length(getattr(runner, "train_loader", None))
    epochs = _spanned_epochs(runner) if steps else getattr(runner, "max_epochs", None)
    return {"epochs": epochs, "steps": steps, "verbose": 0}


def _eval_params(runner: Any, loader: str) -> dict[str, Any]:
    """A test pass's params, as Keras's ``evaluate()`` gives them: one epoch."""
    return {"epochs": 1, "steps": _loader_length(getattr(runner, loader, None)), "verbose": 0}


def _is_scalar(value: Any) -> bool:
    """Whether ``value`` is a number or a one-element tensor (read without a sync)."""
    if isinstance(value, (int, float)):
        return not isinstance(value, bool)
    return callable(getattr(value, "numel", None)) and value.numel() == 1


def _scalars(values: Any) -> dict[str, float]:
    """The entries of a mapping that are numbers or one-element tensors, as floats."""
    if not isinstance(values, Mapping):
        return {}
    found: dict[str, float] = {}
    for key, value in values.items():
        if _is_scalar(value):
            found[str(key)] = _float(value)
    return found


def _float(value: Any) -> float:
    """A number or one-element tensor (or numpy value) as a float."""
    return float(value.item() if hasattr(value, "item") else value)


def from_keras_callback(callback: Any, **options: Unpack[_NamedAdapterOptions]) -> KerasCallback:
    """``KerasCallback(callback, **options)``: a Keras-style callback as an aspect."""
    return KerasCallback(callback, **options)
