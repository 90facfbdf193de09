"""Dispatchers generated for one chain's shape, and chains run as nested layers.

``_specialise`` gives each chain the cheapest dispatcher its shape allows: a chain of
nothing but *layers* (around advice that its aspect also offers as a plain wrapper,
``runs_as_layer``: ``Timed``, ``Logged``) runs those wrappers directly, with no
``CallContext`` built; a chain of a few before/after/around callables gets generated code
with the callables bound as constants; anything else gets ``None``, and the join point
keeps its general dispatcher (``_dispatch``). Separate from ``_dispatch`` because most of
this runs when a chain is built, not per call: only the generated code does.
"""

from __future__ import annotations

import functools
import inspect
import re
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._dispatch import _UNBOUND, _FastContext, _FastRunnerContext

if TYPE_CHECKING:
    from ._chain import Chain
    from ._joinpoint import JoinPoint

__all__ = ["_direct", "_specialise"]


# The shape-specialised dispatcher. A chain with no around and no error advice, and only a
# few before/after callables, gets a dispatcher with those callables bound as closure
# constants and the loops unrolled. Generated source (as attrs does for __init__) because
# the point is to have no loop and no tuple reads at all; the guard sends a call to the
# general dispatcher whenever the join point's chain is no longer the one this was made
# for (a bound method captured before a rebuild, or a call racing a rebuild). The source
# is compiled once per shape into a factory (a compile costs ~0.3 ms) and the factory is
# called per chain: free variables read faster than a namespace's globals.
_MAX_UNROLLED = 6
_FACTORY = """\
def factory(jp, chain, general, context, unbound, arounds, r0, runner, target, self_, inst{advice}):
    def dispatch({params}):
        if jp._chain is not chain:
            return general({general_args})
        ctx = context()
        ctx.joinpoint = jp
        ctx.target = {wrapped}
        ctx.instance = {instance}
        ctx._args = {args}
        ctx.kwargs = {kwargs}
        ctx.result = None
        ctx._skipped = False
{number}{runner}{before}{call}{after}        return ctx.result
    return dispatch
"""
# At a join point with a counter (``JoinPoint.counter``) the call is numbered as it starts,
# and advice whose only filter is ``every=`` is called only on the calls it runs on: the
# test is made in the dispatcher (``_stage_calls``), so the other calls cost no call at all.
_NUMBER = """\
        n = ctx._number = {owner}.{counter} + 1
"""
# How the target is called: after before advice (which may skip the call or change the
# arguments), through around advice (the first one directly; ``CallContext.proceed`` then
# starts at level 1, as in the general dispatcher), or straight with the call's own
# arguments when no advice runs before it.
_CALL_CHECKED = """\
        if not ctx._skipped:
            kw = ctx.kwargs
            ctx.result = {wrapped}(*ctx._args, **kw) if kw else {wrapped}(*ctx._args)
"""
# The same with the target's own parameters: while before advice left the arguments as
# they came (the same tuple, no keyword added), the target is called with them directly.
_CALL_CHECKED_PLAIN = """\
        if not ctx._skipped:
            if ctx._args is packed and not ctx.kwargs:
                ctx.result = {call}
            else:
                kw = ctx.kwargs
                ctx.result = target(*ctx._args, **kw) if kw else target(*ctx._args)
"""
_CALL_AROUND = """\
        if not ctx._skipped:
            ctx._arounds = arounds
            ctx._level = 1
            ctx.result = r0(ctx, ctx.proceed)
"""
_CALL_STRAIGHT = """\
        ctx.result = {call}
"""
_RESERVED = frozenset(
    [
        "jp",
        "chain",
        "general",
        "context",
        "unbound",
        "arounds",
        "r0",
        "runner",
        "target",
        "self_",
        "inst",
        "ctx",
        "kw",
        "dispatch",
        "factory",
        "wrapped",
        "instance",
        "args",
        "kwargs",
        "n",
        "packed",
    ]
)
_GENERATED = re.compile(r"[ab]\d+(_every)?")


def _specialise(
    jp: JoinPoint, chain: Chain, direct: tuple[Any, Any] | None = None
) -> Callable[..., Any] | None:
    """The generated dispatcher for ``chain``, or None when its shape has none.

    ``direct=(target, instance)`` makes one called as the target itself (see
    ``JoinPoint.direct``), with the target's own parameters where it has plain ones; a
    runner's join point then also fills ``ctx.runner``.
    """
    if jp.is_async:
        return None
    if chain.around and not (chain.before or chain.after or chain.on_error):
        layered = _layered(jp, chain)
        if layered is not None:
            return _called_directly(layered, direct) if direct is not None else layered
    if chain.on_error:
        return None
    nb, na = len(chain.before), len(chain.after)
    if not 0 < nb + na + len(chain.around) <= _MAX_UNROLLED:
        return None
    target, self_ = direct if direct is not None else (None, None)
    is_runner = getattr(self_, "__aspecthook_runner__", False)
    source, advice = _source_parts(jp, chain, direct, is_runner=is_runner)
    factory = _dispatch_factory(**source)
    dispatch = factory(
        jp,
        chain,
        jp.general,
        _FastRunnerContext if is_runner else _FastContext,
        _UNBOUND,
        chain.around,
        chain.around[0] if chain.around else None,
        self_ if is_runner else None,
        target,
        self_,
        None if self_ is _UNBOUND else self_,
        *advice,
    )
    _name_after_target(dispatch, jp, target)
    return dispatch  # type: ignore[no-any-return]


def _source_parts(
    jp: JoinPoint, chain: Chain, direct: tuple[Any, Any] | None, *, is_runner: bool
) -> tuple[dict[str, str], list[Any]]:
    """The pieces of ``_FACTORY``'s source for this chain and way of being called, and the
    advice values its factory takes after the fixed arguments (``b0, b0_every, ...``)."""
    nb, na = len(chain.before), len(chain.after)
    params = _plain_parameters(direct[0]) if direct is not None else None
    parts = _signature_parts(params, direct=direct is not None)
    call = _target_call(chain, parts, params)
    number = ""
    if jp.counter is not None:
        owner = "instance" if direct is None else "self_"
        number = _NUMBER.format(owner=owner, counter=jp.counter)
    before, before_fns = _stage_calls(jp, chain, "before")
    after, after_fns = _stage_calls(jp, chain, "after")
    source = {
        "advice": "".join(f", b{i}, b{i}_every" for i in range(nb))
        + "".join(f", a{i}, a{i}_every" for i in range(na)),
        "number": number,
        "runner": "        ctx.runner = runner\n" if is_runner else "",
        "before": before,
        "after": after,
        "call": call,
        **parts,
    }
    return source, [*before_fns, *after_fns]


def _signature_parts(params: list[str] | None, *, direct: bool) -> dict[str, str]:
    """How the generated dispatcher is called and names the call's pieces: as wrapt calls
    a wrapper, or (``direct``) as the target, with its own parameter names (``params``)
    where it has plain ones."""
    if not direct:  # called by wrapt
        parts = {"params": "wrapped, instance, args, kwargs", "wrapped": "wrapped"}
        parts |= {"general_args": "wrapped, instance, args, kwargs", "args": "args"}
        parts |= {"instance": "None if instance is unbound else instance", "kwargs": "kwargs"}
    elif params is None:  # called as the target, whatever its parameters
        parts = {"params": "*args, **kwargs", "wrapped": "target", "instance": "inst"}
        parts |= {"general_args": "target, self_, args, kwargs", "args": "args"}
        parts |= {"kwargs": "kwargs"}
    else:  # called as the target, with its own parameter names
        packed = f"({', '.join(params)}{',' if params else ''})"
        parts = {"params": ", ".join(params), "wrapped": "target", "instance": "inst"}
        parts |= {"general_args": f"target, self_, {packed}, {{}}"}
        parts |= {"args": f"(packed := {packed})", "kwargs": "{}"}
    return parts


def _target_call(chain: Chain, parts: dict[str, str], params: list[str] | None) -> str:
    """The generated lines that call the target (see ``_CALL_CHECKED`` and the others)."""
    if chain.around:
        return _CALL_AROUND
    if chain.before and params is not None:
        return _CALL_CHECKED_PLAIN.format(call=f"target({', '.join(params)})")
    if chain.before:
        return _CALL_CHECKED.format(wrapped=parts["wrapped"])
    if params is not None:
        return _CALL_STRAIGHT.format(call=f"target({', '.join(params)})")
    w, a, k = parts["wrapped"], parts["args"], parts["kwargs"]
    return _CALL_STRAIGHT.format(call=f"{w}(*{a}, **kw) if (kw := {k}) else {w}(*{a})")


def _name_after_target(dispatch: Any, jp: JoinPoint, target: Any) -> None:
    """Tracebacks and argument errors name the join point and the target, not the factory."""
    func = getattr(target, "__func__", target)
    name = getattr(func, "__name__", "dispatch")
    dispatch.__name__ = name
    dispatch.__qualname__ = getattr(func, "__qualname__", name)
    dispatch.__code__ = dispatch.__code__.replace(
        co_filename=f"<aspecthook dispatch {jp.name}>", co_name=name, co_qualname=name
    )


def _stage_calls(jp: JoinPoint, chain: Chain, stage: str) -> tuple[str, list[Any]]:
    """The generated lines that call one stage's advice, and the values they name
    (``b0, b0_every, b1, ...``): at a numbered join point, advice whose only filter is
    ``every=`` (with its ``window=`` w) is called behind ``if (n + w - 1) % b0_every <= w - 1:``,
    the test ``_filter`` makes (see ``_NUMBER``)."""
    compiled: tuple[Callable[..., Any], ...] = getattr(chain, stage)
    letter = stage[0]
    lines: list[str] = []
    values: list[Any] = []
    usable = [a for a in chain.entries.get(stage, ()) if a not in chain.skipped]
    inlined = [a.inlined_every(jp) for a in usable] if len(usable) == len(compiled) else []
    for i, fn in enumerate(compiled):
        test = inlined[i] if inlined else None
        if test is None:
            lines.append(f"        {letter}{i}(ctx)\n")
            values += [fn, None]
        else:
            every, window, call = test
            name, lead = f"{letter}{i}", window - 1
            lines.append(f"        if (n + {lead}) % {name}_every <= {lead}:\n")
            lines.append(f"            {name}(ctx)\n")
            values += [call, every]
    return "".join(lines), values


def _plain_parameters(target: Any) -> list[str] | None:
    """The parameter names of a target called with plain parameters only (no defaults,
    ``*args``, keyword-only or positional-only ones), else None."""
    func = getattr(target, "__func__", target)
    if type(func) is not types.FunctionType:
        return None
    code = func.__code__
    varargs = inspect.CO_VARARGS | inspect.CO_VARKEYWORDS
    if code.co_flags & varargs or code.co_kwonlyargcount or code.co_posonlyargcount:
        return None
    if func.__defaults__:
        return None
    names = list(code.co_varnames[: code.co_argcount])
    if inspect.ismethod(target):
        names = names[1:]
    if _RESERVED.intersection(names) or any(_GENERATED.fullmatch(n) for n in names):
        return None
    return names


@functools.lru_cache(maxsize=256)
def _dispatch_factory(**parts: str) -> Callable[..., Any]:
    """The factory of dispatchers of one shape (compiled once per shape)."""
    names: dict[str, Any] = {}
    exec(compile(_FACTORY.format(**parts), "<aspecthook dispatch>", "exec"), names)
    return names["factory"]  # type: ignore[no-any-return]


def _direct(jp: JoinPoint, chain: Chain) -> Callable[..., Any]:
    """``JoinPoint.direct`` for a chain with advice (see there)."""
    target = jp.target
    # What wrapt hands the dispatcher as the instance for this target: a bound method's
    # ``__self__``, else the sentinel for "none" (see the docstring of ``_proxy``).
    instance = getattr(target, "__self__", None)
    if instance is None:
        instance = _UNBOUND
    specialised = _specialise(jp, chain, (target, instance))
    if specialised is not None:
        return specialised
    assert jp.general is not None
    return _called_directly(jp.general, (target, instance))


def _called_directly(dispatch: Callable[..., Any], direct: tuple[Any, Any]) -> Callable[..., Any]:
    """``dispatch`` (called as wrapt calls a wrapper) as a callable with the target's call."""
    wrapped, instance = direct

    def call(*args: Any, **kwargs: Any) -> Any:
        return dispatch(wrapped, instance, args, kwargs)

    return call


def _layered(jp: JoinPoint, chain: Chain) -> Callable[..., Any] | None:
    """The chain as nested layers, when every advice in it is one (see ``runs_as_layer``).

    A layer factory is the aspect's method ``(jp, inner, guard) -> layer``; ``layer`` is
    called as wrapt calls a wrapper, ``layer(wrapped, instance, args, kwargs)`` (instance
    may be the ``_UNBOUND`` sentinel: ``new_context`` maps it), and must do what its
    around advice does. ``inner`` is the next layer inward, called the same way, or
    ``None`` for the innermost, which calls ``wrapped(*args, **kwargs)`` itself. ``guard``
    is ``(chain, general)`` for the outermost layer, ``None`` for the others: the
    outermost starts with ``if jp._chain is not chain: return general(wrapped, instance,
    args, kwargs)``, the stale-chain check of every specialised dispatcher, so that a
    bound method captured before a rebuild runs the current advice.
    """
    if chain.skipped:
        return None
    factories = [advice.layer_factory(jp) for advice in chain.entries["around"]]
    if not all(factories) or len(factories) != len(chain.around):
        return None
    layer: Callable[..., Any] | None = None
    for i in reversed(range(len(factories))):
        factory = factories[i]
        assert factory is not None
        layer = factory(jp, layer, (chain, jp.general) if i == 0 else None)
    return layer
