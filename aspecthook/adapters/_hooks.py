"""Existing hook objects as aspects: OpenMMLab-style hooks and Keras-style callbacks.

Teams arrive with hooks already written for another trainer. Rather than asking them to
rewrite those as ``Aspect`` subclasses, ``MMHook`` and ``KerasCallback`` turn such an
object into an aspect whose advice calls its methods with the arguments that trainer would
pass, built from the call context and the runner protocol (``ctx.runner``,
``runner.inner_iter``, ``runner.outputs``, ``runner.metrics``, ``runner.stop()``). They
work on any runner that speaks that protocol, not only ``aspecthook.train.Runner``.

Only methods the object really defines become advice, so a hook that overrides two
methods costs two advice calls and nothing at the other join points: when a base class
named ``Hook`` (OpenMMLab) or ``Callback`` (Keras) is in the object's class hierarchy, a
method counts only if it is not the root-most such base's own (no-op) method (a project's
own ``Hook`` subclassing OpenMMLab's defines real ones); otherwise any callable attribute
with the name counts. Signatures are checked when the adapter is made, and an object none
of whose methods would ever be called (a PyTorch Lightning callback, a hook overriding
only checkpoint methods) is refused then.

Nothing here imports torch.
"""

from __future__ import annotations

import enum
import inspect
import sys
from collections.abc import Callable, Mapping, Sized
from typing import Any

from .._advice import Advice, AdviceKind
from .._aspect import Aspect, snake_case
from .._context import CallContext
from .._pointcut import Name
from .._priority import Priority, PriorityLike, resolve_priority
from ..errors import AdviceSignatureError, AspectDefinitionError

__all__ = [
    "KERAS_METHODS",
    "MM_METHODS",
    "KerasCallback",
    "MMHook",
    "as_aspect",
    "from_keras_callback",
    "from_mmengine_hook",
]

AdviceFn = Callable[[CallContext], None]
#: One advice an adapter registers: (label, kind, join point, function).
Plan = list[tuple[str, AdviceKind, str, AdviceFn]]

_INDEX = "aspecthook.adapters.batch_idx"  # ctx.data keys shared by before and after advice
_EPOCH = "aspecthook.adapters.epoch"


class _HookAdapter(Aspect):
    """An aspect whose advice calls the methods of a wrapped object.

    Subclasses say which advice to make in ``_plan()``; every piece shares the adapter's
    name, priority, ``errors`` policy and ordering constraints.
    """

    _base_name = ""  # the no-op base class whose methods do not count as defined

    def __init__(self, target: Any, *, name: str | None = None, **options: Any) -> None:
        if isinstance(target, type):
            raise AspectDefinitionError(
                f"{type(self).__name__}() got the class {target.__name__}, not an instance: "
                f"use {type(self).__name__}({target.__name__}())"
            )
        super().__init__(name=name or snake_case(type(target).__name__), **options)
        self.target = target
        self._counts: dict[str, int] = {}

    def make_advice(self, target: Any = None) -> list[Advice]:
        """One ``Advice`` per planned call; their pointcuts are the runner join points."""
        options: dict[str, Any] = {
            "aspect": self,
            "aspect_name": self.name,
            "priority": self.priority,
            "errors": self.errors,
            "order_after": self.order_after,
            "order_before": self.order_before,
        }
        stages = self._stage_priorities()
        return [
            Advice(
                kind,
                fn,
                Name(point),
                name=f"{self.name}.{label}",
                **{**options, "priority": stages.get(label, self.priority)},
            )
            for label, kind, point, fn in self._plan()
        ]

    def _stage_priorities(self) -> dict[str, int]:
        """Priorities of advice that must run at a stage's edge, not at the aspect's own."""
        return {}

    def _plan(self) -> Plan:
        raise NotImplementedError

    def _method(self, name: str) -> Callable[..., Any] | None:
        """The target's method ``name`` if it defines or overrides one (see module doc)."""
        return defined_method(self.target, name, self._base_name)

    def _counting(self, mode: str) -> Plan:
        """Batch-index bookkeeping for ``mode`` (``'train'``, ``'val'``, ``'test'``).

        The index is kept in ``ctx.data`` so before and after advice of one iteration see
        the same value. Training uses ``runner.inner_iter`` (right after a resume too);
        validation and test count their own batches from the start of each epoch.
        """
        if mode == "train":

            def train_index(ctx: CallContext) -> None:
                ctx.data[_INDEX] = getattr(ctx.runner, "inner_iter", 0)

            return [("batch_index", "before", "train_iter", train_index)]

        def reset(ctx: CallContext) -> None:
            self._counts[mode] = 0

        def index(ctx: CallContext) -> None:
            ctx.data[_INDEX] = n = self._counts.get(mode, 0)
            self._counts[mode] = n + 1

        return [
            ("batch_index_reset", "before", f"{mode}_epoch", reset),
            ("batch_index", "before", f"{mode}_iter", index),
        ]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} of {self.target!r}>"


def defined_method(obj: object, name: str, base_name: str) -> Callable[..., Any] | None:
    """``obj.name`` when callable and not merely inherited from a base named ``base_name``.

    An inherited method also counts when the object overrides a generic method the base's
    own implementation hands the call to: OpenMMLab's ``Hook.after_train_iter`` calls
    ``self._after_iter(..., mode='train')`` (mmengine; ``after_iter`` in mmcv 1.x), and
    hooks such as ``IterTimerHook`` override only those.
    """
    method: Callable[..., Any] | None = getattr(obj, name, None)
    if not callable(method):
        return None
    if name in getattr(obj, "__dict__", {}):
        return method  # set on the instance itself
    base = _no_op_base(obj, base_name)
    if base is None or not _inherits(obj, base, name):
        return method
    generic = _GENERIC.get(name, ()) if base_name == "Hook" else ()
    return method if any(_overrides(obj, base, g) for g in generic) else None


def _no_op_base(obj: object, base_name: str) -> type | None:
    """The root-most base class of ``obj`` named ``base_name`` (its own class is no base,
    whatever its name): a project's own ``Hook`` subclassing OpenMMLab's is not it."""
    bases = [k for k in type(obj).__mro__[1:] if k.__name__ == base_name]
    return bases[-1] if bases else None


def _nothing_to_call(adapter: _HookAdapter, supported: tuple[str, ...]) -> AspectDefinitionError:
    """The error for an object none of whose methods the adapter would ever call."""
    kind, target = type(adapter).__name__, adapter.target
    base = _no_op_base(target, adapter._base_name)
    own = _own_methods(target, base)
    what = (
        f"the methods it defines ({', '.join(own)}) are not among those {kind} calls"
        if own
        else f"it defines none of the methods {kind} calls"
    )
    where = f" {base.__module__}.{base.__qualname__}" if base is not None else ""
    return AspectDefinitionError(
        f"{kind}({type(target).__name__}): none of its methods would ever be called: {what}, "
        f"and the ones it has are the no-ops of its base class{where}. {kind} calls "
        f"{', '.join(supported)}: override those (with their arguments), or write an "
        "Aspect subclass"
    )


def _own_methods(obj: object, base: type | None) -> list[str]:
    """The public methods ``obj``'s classes below ``base`` define (all but ``object``'s)."""
    names: list[str] = []
    for klass in type(obj).__mro__:
        if klass is base or klass is object:
            break
        for name, value in vars(klass).items():
            if not name.startswith("_") and callable(value) and name not in names:
                names.append(name)
    return names


def _inherits(obj: object, base: type, name: str) -> bool:
    """Whether ``obj``'s class has ``base``'s own ``name`` (inherited, not replaced)."""
    return inspect.getattr_static(type(obj), name, None) is inspect.getattr_static(base, name, None)


def _overrides(obj: object, base: type, name: str) -> bool:
    """Whether ``obj``'s class replaces ``base``'s own method ``name``."""
    theirs = inspect.getattr_static(base, name, None)
    return theirs is not None and inspect.getattr_static(type(obj), name, None) is not theirs


def _generic(method: str) -> tuple[str, ...]:
    """The generic methods OpenMMLab's base ``Hook.<method>`` hands its call to."""
    stage, _, where = method.partition("_")
    kind = where.rpartition("_")[2]
    if kind not in ("iter", "epoch") or stage not in ("before", "after"):
        return ()
    return (f"_{stage}_{kind}", f"{stage}_{kind}")  # mmengine, mmcv 1.x


def _batch(ctx: CallContext) -> Any:
    args = ctx.args
    return args[0] if args else ctx.kwargs.get("batch")


def _check_call(method: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
    """Whether ``method`` can be called with these arguments (True when unknown)."""
    try:
        signature = inspect.signature(method)
    except (TypeError, ValueError):  # no signature to check (some builtins): let it through
        return True
    try:
        signature.bind(*args, **kwargs)
    except TypeError:
        return False
    return True


def _refuse(owner: object, name: str, method: Callable[..., Any], expected: str) -> None:
    try:
        signature = str(inspect.signature(method))
    except (TypeError, ValueError):
        signature = "(...)"
    cls = type(owner).__name__
    raise AdviceSignatureError(
        f"{cls}.{name}{signature} cannot be called as {name}{expected}: define it as "
        f"def {name}(self, {expected[1:]}",
        advice=f"{cls}.{name}",
        signature=signature,
        expected=expected,
    )


# -- OpenMMLab-style hooks ---------------------------------------------------------------

#: (method, advice kind, join point, arguments) in the order OpenMMLab calls them; methods
#: at the same join point and stage run in this order.
_MM: tuple[tuple[str, AdviceKind, str, str], ...] = (
    ("before_run", "before", "run", "runner"),
    ("before_train", "before", "run", "runner"),
    ("before_train_epoch", "before", "train_epoch", "runner"),
    ("before_train_iter", "before", "train_iter", "iter"),
    ("after_train_iter", "after", "train_iter", "outputs"),
    ("after_train_epoch", "after", "train_epoch", "runner"),
    ("before_val", "before", "val_epoch", "runner"),
    ("before_val_epoch", "before", "val_epoch", "runner"),
    ("before_val_iter", "before", "val_iter", "iter"),
    ("after_val_iter", "after", "val_iter", "outputs"),
    ("after_val_epoch", "after", "val_epoch", "metrics"),
    ("after_val", "after", "val_epoch", "runner"),
    ("before_test", "before", "test_epoch", "runner"),
    ("before_test_epoch", "before", "test_epoch", "runner"),
    ("before_test_iter", "before", "test_iter", "iter"),
    ("after_test_iter", "after", "test_iter", "outputs"),
    ("after_test_epoch", "after", "test_epoch", "metrics"),
    ("after_test", "after", "test_epoch", "runner"),
    ("after_train", "after", "run", "runner"),
    ("after_run", "after", "run", "runner"),
)
MM_METHODS: tuple[str, ...] = tuple(m for m, *_ in _MM)
#: Each hook method and the generic methods its OpenMMLab base implementation calls.
_GENERIC: dict[str, tuple[str, ...]] = {m: g for m in MM_METHODS if (g := _generic(m))}

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
    (priority // 10; ties in the order given). ``metrics`` are those under the runner's
    ``Evaluate`` prefix (``'val/'`` by default; ``'test/'`` in a test pass).

    ``runner`` is the aspecthook runner: its ``epoch`` / ``iter`` count completed epochs
    and iterations, so in ``after_train_iter`` / ``after_train_epoch`` they are already one
    higher than OpenMMLab's (which increments after those hooks); validation runs inside
    ``after_train_epoch`` (the ``Evaluate`` aspect, ahead of NORMAL priority) rather than
    after it. Checkpoint hooks (``before_save_checkpoint`` ...) have no join point here.
    """

    _base_name = "Hook"

    def __init__(
        self,
        hook: Any,
        *,
        priority: PriorityLike | None = None,
        name: str | None = None,
        **options: Any,
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
        rank = min(resolve_priority(self.priority) // 10, 9)  # 0..9, in the hooks' order
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
        return plan + list(self._calls)


def _hook_priority(hook: Any, given: PriorityLike | None) -> PriorityLike:
    if given is not None:
        return given
    value = getattr(hook, "priority", Priority.NORMAL)
    if isinstance(value, enum.Enum) and not isinstance(value, Priority):
        value = value.value  # e.g. mmengine's own Priority enum
    return value  # type: ignore[no-any-return]


def _mm_call(hook: Any, name: str, method: Callable[..., Any], style: str) -> AdviceFn:
    """The advice that calls ``method`` as OpenMMLab would, or with ``runner`` only."""
    kwargs = _MM_KWARGS[style]
    if not _check_call(method, None, **kwargs):
        if not kwargs or not _check_call(method, None):
            expected = ", ".join(["runner", *(f"{k}=None" for k in kwargs)])
            _refuse(hook, name, method, f"({expected})")
        style = "runner"  # an mmcv 1.x hook: runner only

    if style == "runner":
        return lambda ctx: method(ctx.runner)
    if style == "iter":
        return lambda ctx: method(ctx.runner, batch_idx=ctx.data[_INDEX], data_batch=_batch(ctx))
    if style == "outputs":
        return lambda ctx: method(
            ctx.runner, batch_idx=ctx.data[_INDEX], data_batch=_batch(ctx), outputs=ctx.result
        )
    # A fresh dict of this loop's metrics (as OpenMMLab passes its evaluator's results),
    # not runner.metrics itself: a hook that keeps it keeps this epoch's values.
    mode = "test" if "test" in name else "val"

    def with_metrics(ctx: CallContext) -> Any:
        metrics = getattr(ctx.runner, "metrics", None) or {}
        prefix = _metrics_prefix(ctx.runner, mode)
        return method(
            ctx.runner, metrics={k: v for k, v in metrics.items() if k.startswith(prefix)}
        )

    return with_metrics


def _metrics_prefix(runner: Any, mode: str) -> str:
    """The prefix of the metrics a validation (``mode='val'``) or test pass publishes:
    ``'test/'``, or the prefix of the runner's ``Evaluate`` aspect (``'val/'`` without one).

    Its class is looked up in ``sys.modules``: not loaded means no runner has one, and
    this module never imports torch.
    """
    evaluate = sys.modules.get("aspecthook.train.aspects._evaluate")
    get_aspect = getattr(runner, "get_aspect", None)
    if mode == "test" or evaluate is None or not callable(get_aspect):
        return f"{mode}/"
    return f"{getattr(get_aspect(evaluate.Evaluate), 'prefix', mode)}/"


def from_mmengine_hook(hook: Any, **options: Any) -> MMHook:
    """``MMHook(hook, **options)``: an OpenMMLab-style hook object as an aspect."""
    return MMHook(hook, **options)


# -- Keras-style callbacks ---------------------------------------------------------------

KERAS_METHODS: tuple[str, ...] = (
    "on_train_begin",
    "on_train_end",
    "on_epoch_begin",
    "on_epoch_end",
    "on_train_batch_begin",
    "on_train_batch_end",
    "on_batch_begin",
    "on_batch_end",
    "on_test_begin",
    "on_test_end",
    "on_test_batch_begin",
    "on_test_batch_end",
)


class KerasCallback(_HookAdapter):
    """A Keras-style callback (``on_epoch_end(epoch, logs)`` ...) as an aspect.

    ``on_train_begin`` / ``on_train_end`` run at ``run``, ``on_epoch_*`` at
    ``train_epoch``, ``on_train_batch_*`` (or Keras 2's ``on_batch_*``) at ``train_iter``,
    and ``on_test_*`` at ``val_epoch`` / ``val_iter`` (validation during training, as
    Keras's ``fit`` does) and at ``test_epoch`` / ``test_iter``. ``epoch`` and ``batch``
    are 0-based indices. ``logs`` are Keras-shaped dicts of floats: a batch's scalar
    outputs (``{'loss': 0.31}``); at epoch end the epoch's mean training ``loss`` plus, when
    the epoch validated, ``runner.metrics`` with ``'/'`` as ``'_'`` (``'val/loss'`` ->
    ``'val_loss'``, so a callback monitoring ``'val_loss'`` finds it); at test end the
    metrics of that pass without their prefix (``'val/acc'`` -> ``'acc'``, whatever prefix
    the runner's ``Evaluate`` uses); at train end the last epoch's logs.

    When the run starts, the callback gets the runner's model as ``callback.model``
    (through ``set_model`` when it has one, or when it has a ``model`` attribute) and
    ``params`` through ``set_params``; a callback with ``on_test_*`` methods gets them also
    before a test or validation pass outside a run (``runner.test()``), with one epoch of
    that loader's steps, as Keras's ``evaluate()`` gives them. A callback that sets
    ``self.model.stop_training = True``, as Keras's ``EarlyStopping`` does, stops the run
    through ``runner.stop()`` after the current iteration.
    """

    _base_name = "Callback"

    def __init__(self, callback: Any, *, name: str | None = None, **options: Any) -> None:
        super().__init__(callback, name=name, **options)
        if not any(callable(getattr(callback, m, None)) for m in KERAS_METHODS):
            raise AspectDefinitionError(
                f"KerasCallback({callback!r}): the object has none of the Keras callback "
                f"methods ({', '.join(KERAS_METHODS[:4])} ...); give a callback object, or "
                "use MMHook for an OpenMMLab-style hook"
            )
        self._model: Any = None
        self._loss_sum: Any = None
        self._loss_count = 0
        self._epoch_logs: dict[str, float] = {}
        self._val_this_epoch = False
        self._in_run = False  # between the run's start and its end (see _start_alone)
        self._calls = self._bind_methods()
        if not self._calls:
            raise _nothing_to_call(self, KERAS_METHODS)

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
            plan.append(("on_train_begin", "before", "run", self._call("on_train_begin")))
        # The epoch's logs feed on_epoch_end, and on_train_end gets the last epoch's.
        epoch_logs = "on_epoch_end" in c or "on_train_end" in c
        if "on_epoch_begin" in c or epoch_logs:
            plan.append(("epoch_index", "before", "train_epoch", self._begin_epoch))
        if any(k in c for k in KERAS_METHODS[4:8]):  # on_train_batch_* / on_batch_*
            plan.extend(self._counting("train"))
        plan.extend(self._train_batches())
        if epoch_logs:
            plan.append(("loss_mean", "after", "train_iter", self._add_loss))
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

    def _train_batches(self) -> Plan:
        plan: Plan = []
        for name in ("on_train_batch_begin", "on_batch_begin"):
            if name in self._calls:
                plan.append((name, "before", "train_iter", self._batch_call(name, False)))
        for name in ("on_train_batch_end", "on_batch_end"):
            if name in self._calls:
                plan.append((name, "after", "train_iter", self._batch_call(name, True)))
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
            fn = self._batch_call("on_test_batch_begin", False)
            plan.append(("on_test_batch_begin", "before", f"{mode}_iter", fn))
        if "on_test_batch_end" in c:
            fn = self._batch_call("on_test_batch_end", True)
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

    def _call(self, name: str) -> AdviceFn:
        method = self._calls[name]

        def call(ctx: CallContext) -> None:
            method({})
            self._check_stop(ctx.runner)

        return call

    def _batch_call(self, name: str, end: bool) -> AdviceFn:
        method = self._calls[name]

        def call(ctx: CallContext) -> None:
            method(ctx.data[_INDEX], _scalars(ctx.result) if end else {})
            self._check_stop(ctx.runner)

        return call

    def _begin_epoch(self, ctx: CallContext) -> None:
        ctx.data[_EPOCH] = getattr(ctx.runner, "epoch", 0)
        self._loss_sum, self._loss_count = None, 0
        self._val_this_epoch = False
        method = self._calls.get("on_epoch_begin")
        if method is not None:
            method(ctx.data[_EPOCH], {})
            self._check_stop(ctx.runner)

    def _add_loss(self, ctx: CallContext) -> None:
        loss = ctx.result.get("loss") if isinstance(ctx.result, Mapping) else None
        if loss is None:
            return
        loss = loss.detach() if hasattr(loss, "detach") else loss  # no sync per iteration
        self._loss_sum = loss if self._loss_sum is None else self._loss_sum + loss
        self._loss_count += 1

    def _validated(self, ctx: CallContext) -> None:
        self._val_this_epoch = True

    def _end_epoch(self, ctx: CallContext) -> None:
        logs: dict[str, float] = {}
        if self._loss_count:
            logs["loss"] = float(self._loss_sum) / self._loss_count
        if self._val_this_epoch:  # as Keras: no val_* on an epoch that did not validate
            metrics = getattr(ctx.runner, "metrics", None) or {}
            logs.update({k.replace("/", "_"): v for k, v in _scalars(metrics).items()})
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

    def _check_stop(self, runner: Any) -> None:
        model = self._model
        if model is not None and getattr(model, "stop_training", False) and runner is not None:
            runner.stop(f"{self.name}: {type(self.target).__name__} set model.stop_training")


def _params(runner: Any) -> dict[str, Any]:
    steps = _steps(getattr(runner, "train_loader", None))
    return {"epochs": getattr(runner, "max_epochs", None), "steps": steps, "verbose": 0}


def _eval_params(runner: Any, loader: str) -> dict[str, Any]:
    """A test pass's params, as Keras's ``evaluate()`` gives them: one epoch."""
    return {"epochs": 1, "steps": _steps(getattr(runner, loader, None)), "verbose": 0}


def _steps(loader: Any) -> int | None:
    return len(loader) if isinstance(loader, Sized) else None


def _scalars(values: Any) -> dict[str, float]:
    """The entries of a mapping that are numbers or one-element tensors, as floats."""
    if not isinstance(values, Mapping):
        return {}
    found: dict[str, float] = {}
    for key, value in values.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            found[str(key)] = float(value)
        elif callable(getattr(value, "numel", None)) and value.numel() == 1:
            found[str(key)] = float(value.item())
    return found


def from_keras_callback(callback: Any, **options: Any) -> KerasCallback:
    """``KerasCallback(callback, **options)``: a Keras-style callback as an aspect."""
    return KerasCallback(callback, **options)


# -- auto-detection ------------------------------------------------------------------------


def as_aspect(obj: object, **options: Any) -> Aspect | None:
    """``obj`` as an aspect: itself, an ``MMHook``, a ``KerasCallback``, or None.

    An object with any OpenMMLab hook method becomes an ``MMHook``, else one with any
    Keras callback method a ``KerasCallback``; anything else (classes included) is None.
    ``options`` (``priority=`` ...) go to the adapter made; an aspect is returned as it is.
    ``AspectDefinitionError`` when the adapter would never call any of its methods.
    """
    if isinstance(obj, Aspect):
        return obj
    if isinstance(obj, type):
        return None
    if any(callable(getattr(obj, m, None)) for m in MM_METHODS):
        return MMHook(obj, **options)
    if any(callable(getattr(obj, m, None)) for m in KERAS_METHODS):
        return KerasCallback(obj, **options)
    return None
