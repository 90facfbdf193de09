"""Torch's own module hooks as join points: ``weave(module, before=..., after=...)``.

Weaving an ``nn.Module`` *instance* does not wrap anything. The module gets two join points,
``<name>.forward`` and ``<name>.backward`` (``<name>`` is ``weave(..., name=)``, else the
class's dotted path, e.g. ``torch.nn.modules.linear.Linear``), served by the hooks torch
itself offers, so the woven module keeps working under ``torch.compile`` (Dynamo traces
module hooks) and stays the same object, with the same ``forward``:

============================  =========================================================
advice                        torch hook (installed only while the stage has advice)
============================  =========================================================
before ``<name>.forward``     ``register_forward_pre_hook(with_kwargs=True)``
after ``<name>.forward``      ``register_forward_hook(with_kwargs=True)``
before ``<name>.backward``    ``register_full_backward_pre_hook``
after ``<name>.backward``     ``register_full_backward_hook``
============================  =========================================================

How advice reaches them:

* ``before=`` / ``after=`` functions of the weave, and positional ``Advice`` or aspect
  advice declared without a pointcut, go to ``forward``;
* aspect methods named ``before_forward`` / ``after_forward`` / ``before_backward`` /
  ``after_backward`` (or advice decorated ``@after('backward')`` ...) in an aspect given
  to this weave go to *this module's* forward / backward join point;
* advice registered anywhere whose pointcut matches the names, e.g. ``@after('enc.backward')``
  after ``weave(model.enc, name='enc')``, or a glob ``'*.forward'``.

The call context: for ``forward``, ``ctx.instance`` and ``ctx.target`` are the module,
``ctx.args`` / ``ctx.kwargs`` the inputs (before advice may edit them: the pre-hook
returns the new ones) and ``ctx.result`` the output (after advice may replace it, though
not with ``None``, which means "unchanged" to torch). Before and after advice of one
forward call share one context (and so ``ctx.data``), kept on a per-thread stack that a
third, ``always_call`` forward hook pops even when ``forward`` raises an ``Exception``; the
entry of a call that ``KeyboardInterrupt`` ended is dropped at the module's next call on
that thread (``_drop_stale``). For ``backward``, ``ctx.args`` is ``grad_output`` (the
gradients with respect to the module's outputs; before advice may replace them) and, for
after advice, ``ctx.result`` is ``grad_input`` (after advice may replace it); each stage
gets its own context.

Torch hooks run before and after ``forward`` / ``backward``, never around them, and do not
see their exceptions: ``around`` and ``on_error`` advice, and ``ctx.skip()``, raise
``UnsupportedAdviceError`` saying to weave the method instead (``weave(module.forward,
around=...)`` for one instance, ``weave('pkg.mod.Class.forward', ...)`` for all; an aspect
such as ``Timed`` whose advice has no pointcut: ``weave(module.forward, Timed())``). Such
advice reaching these join points through a registered pointcut is shown as ``failed`` in
``describe()`` and logged, never run.

Torch's own rules for these hooks apply, as to hooks registered by hand:

* ``torch.compile`` traces forward advice into the graph (advice that calls ``.item()``
  or ``float()`` on a tensor breaks the graph there), except ``every=`` / ``once=``
  advice, whose count is kept in Python where the graph breaks (a count Dynamo traced
  recompiled at each call); a module with backward hooks breaks the graph unless compiled
  autograd is on. Weave before the first compiled call: torch
  does not re-check hooks added to a module it already compiled
  (``torch._dynamo.config.skip_nnmodule_hook_guards``). A method woven instead
  (``weave(module.forward, ...)``) breaks the graph at each call, where its advice runs.
* A module with a backward hook of the old kind (``register_backward_hook``) cannot also
  take a full backward hook: after-``backward`` advice on it is shown as ``failed`` and
  not run. Removing our full backward hook resets torch's mark of it
  (``_is_full_backward_hook``), so the module takes an old-kind hook again.
* A module without a ``forward`` of its own (``ModuleList``, ``ModuleDict``) is never
  called, and a scripted one (``torch.jit.script``) takes no Python hooks: both are
  refused (``WeaveTargetError``); weave the modules it holds, or the Python module.
* A backward stage on a module none of whose inputs require gradients (a first layer)
  makes torch warn on every backward; its ``grad_input`` is then all ``None``.
* ``copy.deepcopy`` of a woven module (``AveragedModel`` for EMA does one) copies the
  hooks, so the copy's calls run the advice too, with the copy as ``ctx.instance``.
  Removing the handle stops that as well; the idle hook functions stay in the copy.

Nothing here imports torch: a module is recognised only when the program imported torch.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable, Iterable
from types import FrameType
from typing import TYPE_CHECKING, Any

from ._advice import Advice
from ._chain import Chain
from ._context import CallContext
from ._dispatch import _FastContext
from ._handle import Handle
from ._joinpoint import JoinPoint
from ._log import get_logger
from ._pointcut import Name, NormalizedName
from ._registry import LOCK, REGISTRY

if TYPE_CHECKING:
    from ._weaver import Weaver

__all__ = ["ModuleJoinPoint", "is_module", "weave_module"]

_UNSUPPORTED = ("around", "on_error")

# Module -> its (forward, backward) join points, so weaving one module twice shares one set
# of torch hooks, as weaving one callable twice shares one proxy.
_POINTS: weakref.WeakKeyDictionary[Any, tuple[ModuleJoinPoint, ModuleJoinPoint]] = (
    weakref.WeakKeyDictionary()
)


def is_module(target: object) -> bool:
    """Whether ``target`` is an ``nn.Module`` instance; never imports torch itself."""
    torch = sys.modules.get("torch")
    nn = getattr(torch, "nn", None)
    module_type = getattr(nn, "Module", None)
    return module_type is not None and isinstance(target, module_type)


class ModuleJoinPoint(JoinPoint):
    """The ``forward`` or ``backward`` join point of one module, run by torch's hooks.

    The registry hands it its chain as for any join point; ``set_chain`` then installs
    the torch hooks the chain's stages need and removes those it no longer needs, so a
    module without advice carries no hook at all.
    """

    __slots__ = ("full_flag", "hooks", "module_ref", "stage")

    def __init__(self, name: str, module: Any, stage: str) -> None:
        super().__init__(name, getattr(type(module), "forward", None), declared=False)
        self.module_ref = weakref.ref(module)  # the module owns the hooks, never the reverse
        self.stage = stage
        self.hooks: dict[str, list[Any]] = {}  # installed torch RemovableHandles, by key
        # The module's _is_full_backward_hook before our full backward hook set it to True:
        # put back when that hook goes, so the module takes register_backward_hook again.
        self.full_flag: bool | None = None

    def set_chain(self, chain: Chain) -> None:
        module = self.module_ref()
        chain = _runnable(self, chain, module)
        super().set_chain(chain)
        if module is None:
            return
        wanted = _wanted(self.stage, chain)
        for key in [k for k in self.hooks if k not in wanted]:
            for handle in self.hooks.pop(key):
                handle.remove()
            if key == "backward" and not module._backward_hooks:
                module._is_full_backward_hook = self.full_flag
        for key in wanted:
            if key not in self.hooks:
                self.hooks[key] = _INSTALL[key](self, module)


def _wanted(stage: str, chain: Chain) -> tuple[str, ...]:
    if stage == "forward":
        return ("forward",) if chain.before or chain.after else ()
    keys = ("backward_pre",) if chain.before else ()
    return (*keys, "backward") if chain.after else keys


def _runnable(jp: ModuleJoinPoint, chain: Chain, module: Any) -> Chain:
    """``chain`` without the advice torch's hooks cannot run, which is marked as failed
    instead: around / on_error advice, and after advice of ``backward`` on a module with a
    backward hook of the old kind (``register_backward_hook``), which torch does not mix
    with the full backward hook that advice needs."""
    reasons = {
        advice: f"{advice.kind} advice cannot run through torch module hooks; "
        "weave the forward method instead"
        for stage in _UNSUPPORTED
        for advice in chain.entries.get(stage, ())
    }
    after = chain.after
    if (
        jp.stage == "backward"
        and after
        and getattr(module, "_is_full_backward_hook", None) is False
    ):
        after = ()
        for advice in chain.entries.get("after", ()):
            reasons[advice] = (
                "the module has a backward hook registered with register_backward_hook, "
                "which torch does not mix with the full backward hook this advice needs: "
                "register that hook with register_full_backward_hook"
            )
    if not reasons:
        return chain
    skipped = {**reasons, **chain.skipped}
    for advice in reasons:
        if advice not in chain.skipped and advice not in jp.chain.skipped:
            get_logger().warning(
                "weave.unsupported_advice", joinpoint=jp.name, advice=advice.name, kind=advice.kind
            )
    return Chain(chain.entries, {"before": chain.before, "after": after}, skipped)


# -- the hooks -----------------------------------------------------------------------------
# Each hook reads the join point's chain once per call, as the wrapt dispatcher does, so a
# registration elsewhere swaps in a new chain without touching the installed hooks.


def _context(jp: JoinPoint, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    ctx = _FastContext()  # see _dispatch: C-level construction, then the seven slots
    ctx.joinpoint = jp
    ctx.target = module
    ctx.instance = module
    ctx._args = args
    ctx.kwargs = kwargs
    ctx.result = None
    ctx._skipped = False
    return ctx


class _Stacks(threading.local):
    """The contexts of a join point's forward calls running on each thread.

    The list is made as a thread first reads it (``threading.local`` runs ``__init__``
    then), never by the hook: a compiled graph guards on what its hooks read, and a
    stack made by the first compiled call failed that guard at the second (compiled twice).
    """

    def __init__(self) -> None:
        self.stack: list[CallContext] = []


def _drop_stale(stack: list[CallContext], module: Any) -> None:
    """Keep in ``stack`` only the entries of calls still running on this thread.

    The others belong to calls that a ``BaseException`` such as ``KeyboardInterrupt``
    ended: torch runs ``always_call`` hooks for an ``Exception`` only. A running call is a
    ``_call_impl`` frame of the entry's module; modules other than ``module`` count too, as
    a deep copy of a woven module shares its hooks and so this stack (the copy called
    inside the original's forward used to drop the original's entry). Looking at the frames
    costs a walk up the stack, paid only when a call finds the stack not empty, never by a
    plain call. A compiled graph leaves no entry behind (its list mutations are applied
    once it completes) and cannot walk frames, so it does not look.
    """
    torch = sys.modules["torch"]
    if torch.compiler.is_compiling():
        return
    call_impl = torch.nn.Module._call_impl.__code__
    running: dict[int, int] = {id(module): -1}  # this call's own _call_impl frame is no entry
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code is call_impl:
            key = id(frame.f_locals.get("self"))
            running[key] = running.get(key, 0) + 1
        frame = frame.f_back
    kept: list[CallContext] = []
    for ctx in stack:  # oldest first: an interrupted call's entry is above its callers'
        key = id(ctx.instance)
        if running.get(key, 0) > 0:
            running[key] -= 1
            kept.append(ctx)
    stack[:] = kept


class _Hook:
    """One of our torch hooks, as the module holds it.

    A woven module pickles (``torch.save(model)``, a spawned worker): the hook pickles as
    one that does nothing, since the weave belongs to this process, as a deep copy after
    the weave's removal has none. A deep copy (``AveragedModel``) shares the hook, as a
    plain function hook is shared, so the copy runs the advice too.
    """

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_inert, ())

    def __deepcopy__(self, memo: dict[int, Any]) -> _Hook:
        return self


def _inert() -> Callable[..., None]:
    """An unpickled hook of a weave: does nothing."""
    return _no_op


def _no_op(*args: Any, **kwargs: Any) -> None:
    return None


def _install_forward(jp: ModuleJoinPoint, module: Any) -> list[Any]:
    """Pre-hook, forward hook and the ``always_call`` hook that pops the shared context."""
    local = _Stacks()  # one per installation: a stale stack never outlives it

    def pre_hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        ctx = _context(jp, module, args, kwargs)
        stack = local.stack
        if stack:  # a nested call, or one after a call that Ctrl-C ended
            _drop_stale(stack, module)
        stack.append(ctx)  # before the advice: the cleanup hook pops it even if advice raises
        for fn in jp._chain.before:
            fn(ctx)
        if ctx._skipped:
            raise _skip_error(jp)
        if ctx._args is args and ctx.kwargs is kwargs:
            return None
        return tuple(ctx._args), ctx.kwargs

    def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> Any:
        stack = local.stack
        ctx = stack[-1] if stack else _context(jp, module, args, kwargs)
        ctx.result = output
        for fn in jp._chain.after:
            fn(ctx)
        return None if ctx.result is output else ctx.result

    def pop(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        stack = local.stack
        if stack:
            stack.pop()

    return [
        module.register_forward_pre_hook(_Hook(pre_hook), with_kwargs=True),
        module.register_forward_hook(_Hook(hook), with_kwargs=True),
        module.register_forward_hook(_Hook(pop), with_kwargs=True, always_call=True),
    ]


def _install_backward_pre(jp: ModuleJoinPoint, module: Any) -> list[Any]:
    def backward_pre_hook(module: Any, grad_output: tuple[Any, ...]) -> Any:
        ctx = _context(jp, module, grad_output, {})
        for fn in jp._chain.before:
            fn(ctx)
        if ctx._skipped:
            raise _skip_error(jp)
        return None if ctx._args is grad_output else tuple(ctx._args)

    return [module.register_full_backward_pre_hook(_Hook(backward_pre_hook))]


def _install_backward(jp: ModuleJoinPoint, module: Any) -> list[Any]:
    jp.full_flag = module._is_full_backward_hook

    def backward_hook(
        module: Any, grad_input: tuple[Any, ...], grad_output: tuple[Any, ...]
    ) -> Any:
        ctx = _context(jp, module, grad_output, {})
        ctx.result = grad_input
        for fn in jp._chain.after:
            fn(ctx)
        return None if ctx.result is grad_input else tuple(ctx.result)

    return [module.register_full_backward_hook(_Hook(backward_hook))]


_INSTALL: dict[str, Callable[[ModuleJoinPoint, Any], list[Any]]] = {
    "forward": _install_forward,
    "backward_pre": _install_backward_pre,
    "backward": _install_backward,
}


# -- weaving -------------------------------------------------------------------------------


def weave_module(
    module: Any,
    aspects: tuple[Any, ...],
    kinds: dict[str, Any],
    name: str | None,
    requires: str | None,
    strict: bool,
    weaver: Weaver,
    opts: dict[str, Any],
) -> Handle:
    """``weave()`` for an ``nn.Module`` instance (see the module docstring).

    ``kinds`` holds ``weave()``'s ``before`` / ``after`` / ``on_error`` / ``around``
    arguments; the rest are ``weave()``'s own.
    """
    from ._install import _attach
    from ._weave import (
        WEAVES,
        WeaveRecord,
        _skip,
        _tokens,
        _undo,
        _version_problem,
        _weave_handle,
    )

    token = f"@weave:{next(_tokens)}"
    label = name or _class_path(module)
    _refuse_unhookable(module, label)
    forward_names = (token, name, f"{name}.forward") if name else (token,)
    backward_names = (f"{token}.backward", f"{name}.backward") if name else (f"{token}.backward",)
    advices = _module_advice(module, label, token, aspects, kinds, opts)
    record = WeaveRecord(label, "active", weaver=weaver, names=forward_names + backward_names)
    reason = _version_problem(requires) if requires is not None else None
    if reason is not None:
        return _skip(record, reason, strict)

    handle = weaver.add(*advices) if advices else None
    try:
        with LOCK:
            forward, backward = _points_of(module, label)
            record.points.add(_attach(forward, forward_names, weaver))
            record.points.add(_attach(backward, backward_names, weaver))
            WEAVES.append(record)
    except BaseException:
        _undo(record, handle, weaver)
        with LOCK:  # a point made here that no weave holds (its attach never came)
            for jp in _POINTS.get(module, ()):
                if jp.weave_refs == 0 and jp in REGISTRY.joinpoints:
                    REGISTRY.drop_joinpoint(jp)
        raise
    return _weave_handle(record, handle, advices, weaver, f"weave {label} (torch module hooks)")


def _module_advice(
    module: Any,
    label: str,
    token: str,
    aspects: tuple[Any, ...],
    kinds: dict[str, Any],
    opts: dict[str, Any],
) -> list[Advice]:
    """The weave's advice, aspects' ``*_forward`` / ``*_backward`` aimed at this module;
    raises ``UnsupportedAdviceError`` for around / on_error advice aimed at it."""
    from ._weave import _advice_for

    found = _advice_for(
        Name(token),
        aspects,
        kinds["before"],
        kinds["after"],
        kinds["on_error"],
        kinds["around"],
        opts,
    )
    # Advice the aspect declared without a pointcut (Timed's) goes wherever it is woven.
    free = {id(a) for a in found if a.aspect is not None and a.pointcut == Name(token)}
    advices = [_retarget(a, token) for a in found]
    _refuse_unsupported(advices, token, module, label, free)
    return advices


def _points_of(module: Any, label: str) -> tuple[ModuleJoinPoint, ModuleJoinPoint]:
    """The module's join points, made (and made known to the registry) on first weave."""
    points = _POINTS.get(module)
    if points is not None and all(jp in REGISTRY.joinpoints for jp in points):
        return points
    points = (
        ModuleJoinPoint(f"{label}.forward", module, "forward"),
        ModuleJoinPoint(f"{label}.backward", module, "backward"),
    )
    for jp in points:
        REGISTRY.add_joinpoint(jp)
    _POINTS[module] = points
    return points


def _retarget(advice: Advice, token: str) -> Advice:
    """Aim an aspect's ``*_forward`` / ``*_backward`` advice at this module's join points."""
    pointcut = advice.pointcut
    stage = pointcut.name if isinstance(pointcut, (Name, NormalizedName)) else None
    if stage == "forward":
        advice.pointcut = Name(token)
    elif stage == "backward":
        advice.pointcut = Name(f"{token}.backward")
    return advice


def _refuse_unsupported(
    advices: Iterable[Advice], token: str, module: Any, label: str, free: set[int]
) -> None:
    """``UnsupportedAdviceError`` for around / on_error advice aimed at the module, saying
    how to weave the method instead: an aspect whose advice has no pointcut (``free``)
    whole, other advice by its keyword."""
    from .errors import UnsupportedAdviceError

    ours = {Name(token), Name(f"{token}.backward")}
    for advice in advices:
        if advice.kind in _UNSUPPORTED and advice.pointcut in ours:
            path = _class_path(module)
            if id(advice) in free:  # weave(module, Timed()): the aspect goes to the method
                fix = "Weave the method instead"
                given = f"{type(advice.aspect).__name__}(...)"
            else:
                fix = "Use before=/after= here, or weave the method"
                given = f"{advice.kind}=..."
            raise UnsupportedAdviceError(
                f"{advice.kind} advice {advice.name} cannot be woven into the nn.Module "
                f"{label}: torch's module hooks run before and after forward and backward, "
                f"never around them, and do not see their exceptions. {fix}: "
                f"weave(module.forward, {given}) for this instance, or "
                f"weave('{path}.forward', {given}) for every {type(module).__name__}",
                kind=advice.kind,
                target=label,
            )


def _refuse_unhookable(module: Any, label: str) -> None:
    """``WeaveTargetError`` for a module without a ``forward`` of its own (a ``ModuleList``
    or ``ModuleDict``): nothing calls it, so its hooks, and the advice, would never run;
    and for a scripted module, which refuses hooks (torch's ``RuntimeError`` left a join
    point behind)."""
    from .errors import WeaveTargetError

    torch = sys.modules["torch"]
    kind = type(module).__name__
    if isinstance(module, torch.jit.ScriptModule):
        raise WeaveTargetError(
            f"{label}: a {kind} takes no Python hooks (torch refuses them on scripted "
            "modules). Weave the Python module instead, the one given to torch.jit.script, "
            "and call that one",
            target=label,
        )
    # Read on the instance: torch.compile's OptimizedModule sets its forward there.
    forward = getattr(getattr(module, "forward", None), "__func__", None)
    if forward is not torch.nn.Module.forward:
        return
    raise WeaveTargetError(
        f"{label}: a {kind} has no forward of its own, so it is never called and advice "
        f"woven into it would never run. Weave the modules it holds instead "
        f"(for layer in container: weave(layer, ...)), or the module that calls them",
        target=label,
    )


def _skip_error(jp: JoinPoint) -> Exception:
    from .errors import UnsupportedAdviceError

    return UnsupportedAdviceError(
        f"ctx.skip() cannot skip {jp.name}: it is woven through torch's module hooks, which "
        "cannot stop forward or backward from running. Weave the method instead, e.g. "
        "weave(module.forward, before=...), to skip the call",
        kind="skip",
        target=jp.name,
    )


def _class_path(module: Any) -> str:
    cls = type(module)
    return f"{cls.__module__}.{cls.__qualname__}"
