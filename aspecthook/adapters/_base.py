"""The shared base of the adapters: ``_HookAdapter`` and the helpers both adapters use.

``_HookAdapter`` is an aspect whose advice calls a wrapped object's methods; the helpers
find which methods the object defines, check their signatures, and read the runner's
metrics prefix.

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

import inspect
import sys
from collections.abc import Callable
from typing import Any, TypedDict

from .._advice import Advice, AdviceKind, OrderNames
from .._aspect import Aspect, snake_case
from .._context import CallContext
from .._pointcut import Name
from .._priority import PriorityLike
from .._typing import Unpack
from ..errors import AdviceSignatureError, AspectDefinitionError
from ._methods import _GENERIC

__all__ = ["AdviceFn", "Plan", "defined_method"]

AdviceFn = Callable[[CallContext], None]
#: One advice an adapter registers: (label, kind, join point, function).
Plan = list[tuple[str, AdviceKind, str, AdviceFn]]

_INDEX = "aspecthook.adapters.batch_idx"  # ctx.data keys shared by before and after advice
_EPOCH = "aspecthook.adapters.epoch"
_ITER = "aspecthook.adapters.iter"


class _HookOptions(TypedDict, total=False):
    """The ``Aspect`` options an adapter passes on besides ``name`` and ``priority``, for
    type checkers (``AspectOptions`` less those). No ``pointcut``: an adapter's advice goes
    to the runner join points its object's methods name, whatever pointcut it is given."""

    errors: str | None
    order_after: OrderNames | None
    order_before: OrderNames | None


class _AdapterOptions(_HookOptions, total=False):
    """``_HookOptions`` and ``priority``: what ``_HookAdapter`` and ``KerasCallback``
    take besides their own ``name`` (``MMHook`` works the priority out itself)."""

    priority: PriorityLike | None


class _NamedAdapterOptions(_AdapterOptions, total=False):
    """``_AdapterOptions`` and ``name``: what ``from_mmengine_hook`` and
    ``from_keras_callback`` hand to the adapter they make."""

    name: str | None


class _HookAdapter(Aspect):
    """An aspect whose advice calls the methods of a wrapped object.

    Subclasses say which advice to make in ``_plan()``; every piece shares the adapter's
    name, priority, ``errors`` policy and ordering constraints.
    """

    _base_name = ""  # the no-op base class whose methods do not count as defined

    def __init__(
        self, target: Any, *, name: str | None = None, **options: Unpack[_AdapterOptions]
    ) -> None:
        if isinstance(target, type):
            raise AspectDefinitionError(
                f"{type(self).__name__}() got the class {target.__name__}, not an instance: "
                f"use {type(self).__name__}({target.__name__}())"
            )
        super().__init__(name=name or snake_case(type(target).__name__), **options)
        self.target = target
        self._counts: dict[str, int] = {}
        # A hook or callback with state of its own keeps it in checkpoints as an aspect
        # does: the runner saves and restores what its state_dict() / load_state_dict() do.
        # An adapter class with a state_dict() of its own keeps the target's inside it.
        save, load = getattr(target, "state_dict", None), getattr(target, "load_state_dict", None)
        self._own_state = (save, load) if callable(save) and callable(load) else None
        if self._own_state is not None and getattr(type(self), "state_dict", None) is None:
            self.state_dict, self.load_state_dict = self._own_state

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
                ctx.data[_ITER] = getattr(ctx.runner, "iter", 0)  # before the loop counts it

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


def _spanned_epochs(runner: Any) -> Any:
    """The run's ``max_epochs``; for a run by ``max_iters`` alone, the passes over the
    training loader it spans (``ceil(max_iters / len(loader))``), or 1 when the loader has
    no length: the whole run as one epoch, as OpenMMLab's iteration loop counts it."""
    epochs = getattr(runner, "max_epochs", None)
    limit = getattr(runner, "max_iters", None)
    if epochs is not None or not isinstance(limit, int):
        return epochs
    steps = _loader_length(getattr(runner, "train_loader", None))
    return -(-limit // steps) if steps else 1


def _loader_length(loader: Any) -> int | None:
    """``len(loader)`` in batches, or None when it has none: no ``__len__``, or one that
    raises (a ``DataLoader`` over an ``IterableDataset`` without a length: ``TypeError``;
    some streaming loaders: ``NotImplementedError``), as the runner's own ``loader_length``
    (``aspecthook.train._data``, which this module does not import: it imports torch)."""
    try:
        return len(loader)
    except (TypeError, NotImplementedError):
        return None


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
