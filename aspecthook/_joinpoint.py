"""Join points, the one wrapt proxy per intercepted callable, and the dispatch loop.

Construction notes (measured in bench/calls.py):

* ``wrapt.FunctionWrapper.__call__`` on a wrapped plain function with no bound instance
  looks up ``wrapped.__self__`` on every call to detect a pre-bound method. For a plain
  function that lookup raises and clears an AttributeError, which is most of the cost of
  a pass-through wrapper. We initialise the unbound proxy with a sentinel instance
  (``_UNBOUND``) instead of ``None``: the C ``__call__`` then skips the lookup. Binding is
  untouched, because ``__get__`` of an unbound wrapper never reads its own instance (it
  builds a fresh bound wrapper from the descriptor protocol), so methods, classmethods and
  staticmethods behave as before. The dispatcher maps the sentinel back to ``None``.
* ``enabled=`` is the bound ``__len__`` of a list that holds one item while the join
  point has advice. wrapt calls it from C; when it returns 0 the wrapper is skipped and
  the target is called directly, so an idle join point costs one C call.
* The dispatcher reads the join point's ``Chain`` once per call. Registrations replace
  the chain object whole, so concurrent weaving never exposes a half-built chain.
* Each chain gets the cheapest dispatcher its shape allows (``_specialise``): a chain of
  nothing but *layers* (around advice that its aspect also offers as a plain wrapper,
  ``runs_as_layer``: ``Timed``, ``Logged``) runs those wrappers directly, with no
  ``CallContext`` built; a chain of a few before/after/around callables gets generated
  code with the callables bound as constants; anything else runs the general loop.
"""

from __future__ import annotations

import copy
import functools
import inspect
import re
import types
import weakref
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import wrapt

from ._chain import EMPTY_CHAIN, Chain
from ._context import CallContext, RunnerOnRead

if TYPE_CHECKING:
    from ._advice import Advice
    from ._weaver import Weaver

__all__ = ["JoinPoint", "JoinPointProxy", "make_proxy"]

_FunctionWrapperBase = wrapt.FunctionWrapper.__mro__[1]


class _Unbound:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<unbound>"


_UNBOUND = _Unbound()


class JoinPoint:
    """A named place where calls are intercepted.

    ``names`` holds its name and every alias (``weave(..., name=)``); pointcuts match
    against it. ``advice`` is what currently matches, ``chain`` what dispatch runs.
    """

    __slots__ = (
        "__weakref__",
        "_active",
        "_chain",
        "_name_counts",
        "_sinks",
        "advice",
        "counter",
        "declared",
        "general",
        "is_async",
        "is_generator",
        "local_weavers",
        "location",
        "name",
        "names",
        "proxy_ref",
        "site",
        "status",
        "target",
        "weave_refs",
    )

    def __init__(
        self,
        name: str,
        target: Any,
        *,
        declared: bool,
        local_weaver: Weaver | None = None,
        counter: str | None = None,
    ) -> None:
        self.name = name
        #: The attribute of the bound instance that counts the calls completed so far
        #: (a runner's ``iter`` for ``train_iter``), or None. When set, a call's number is
        #: that count plus one, read as the call starts, and ``every=`` filters use it: a
        #: restored counter (a resumed run) keeps every schedule where it was.
        self.counter = counter
        self._name_counts: Counter[str] = Counter({name: 1})
        self.names: frozenset[str] = frozenset((name,))
        self.target = target
        func = getattr(target, "__func__", target)
        self.is_async = inspect.iscoroutinefunction(func)
        #: Whether the target is a generator function: each call makes a generator of its
        #: own (one returned by another callable may be shared, e.g. by a getter).
        self.is_generator = inspect.isgeneratorfunction(func) or _wraps_a_generator(func)
        self.declared = declared
        # Local weavers whose advice reaches this join point, counted per weave.
        self.local_weavers: Counter[Weaver] = Counter()
        if local_weaver is not None:
            self.local_weavers[local_weaver] += 1
        self.advice: list[Advice] = []
        self._chain: Chain = EMPTY_CHAIN
        self._active: list[bool] = []
        self.location = _location(func)
        self.status = "active"
        self.site: tuple[Any, str] | None = None
        self.weave_refs = 0
        self.proxy_ref: Callable[[], Any] | None = None
        self.general: Callable[..., Any] | None = None  # the chain-agnostic dispatcher
        self._sinks: list[Callable[[Callable[..., Any]], None]] = []

    @property
    def chain(self) -> Chain:
        return self._chain

    @property
    def aliases(self) -> tuple[str, ...]:
        """Names besides ``name`` that users gave this join point (internal tokens hidden)."""
        return tuple(sorted(n for n in self.names if n != self.name and not n.startswith("@")))

    def set_chain(self, chain: Chain) -> None:
        # Order matters for concurrent callers: publish the chain before enabling dispatch,
        # and disable dispatch before dropping the chain.
        if chain:
            self._chain = chain
            self._rewire(chain)
            if not self._active:
                self._active.append(True)
        else:
            self._active.clear()
            self._chain = chain
        if self._sinks:
            direct = self.direct()
            for sink in self._sinks:
                sink(direct)

    def publish(self, sink: Callable[[Callable[..., Any]], None]) -> None:
        """Hand ``sink`` this join point's cheapest callable now and after every change.

        For a caller that holds the join point in a place of its own and always calls it
        from there, as a ``Runner`` does with its loop's join points (instance attributes):
        it then calls the target itself while there is no advice (an idle join point costs
        nothing) and a dispatcher generated for the chain otherwise (see ``direct``).
        """
        self._sinks.append(sink)
        sink(self.direct())

    def direct(self) -> Callable[..., Any]:
        """A plain callable that runs this join point's current chain around the target.

        The target itself while the chain is empty; otherwise a function with the target
        and its bound instance as constants, called as the target is, with no wrapt proxy
        in between. Like every specialised dispatcher it checks that the chain it was made
        for is still current and otherwise runs the current one, so a reference kept
        across a change still runs the current advice, except a reference to the bare
        target kept from an idle period: that is why it is for callers that look it up
        each time.
        """
        chain = self._chain
        if not chain:
            return self.target  # type: ignore[no-any-return]
        if self.is_async or self.general is None:  # async: the proxy's coroutine dispatch
            proxy = self.proxy_ref() if self.proxy_ref is not None else None
            return proxy if proxy is not None else self.target  # type: ignore[no-any-return]
        return _direct(self, chain)

    def _rewire(self, chain: Chain) -> None:
        """Give the proxy the dispatcher made for this chain's shape (see ``_specialise``)."""
        proxy = self.proxy_ref() if self.proxy_ref is not None else None
        if proxy is None or self.general is None:
            return
        dispatch = _specialise(self, chain) or self.general
        # wrapt's C wrapper may be re-initialised while other threads call it (it holds
        # its own references for the duration of a call); every other field is kept.
        init: Any = getattr(_FunctionWrapperBase, "__init__")  # noqa: B009
        init(
            proxy,
            proxy.__wrapped__,
            proxy._self_instance,
            dispatch,
            proxy._self_enabled,
            proxy._self_binding,
        )

    def add_names(self, names: tuple[str, ...]) -> None:
        self._name_counts.update(names)
        self.names = frozenset(self._name_counts)

    def remove_names(self, names: tuple[str, ...]) -> None:
        self._name_counts.subtract(names)
        self._name_counts[self.name] = max(self._name_counts[self.name], 1)
        self._name_counts = +self._name_counts
        self.names = frozenset(self._name_counts)

    def __repr__(self) -> str:
        return f"<JoinPoint {self.name}>"


def _location(func: Any) -> str:
    code = getattr(inspect.unwrap(func), "__code__", None) if callable(func) else None
    if code is None:
        return "?"
    return f"{code.co_filename}:{code.co_firstlineno}"


# -- dispatch ----------------------------------------------------------------------------


def _make_dispatch(jp: JoinPoint) -> Callable[..., Any]:
    """The wrapt wrapper function of ``jp``: runs the chain around one call.

    This is the hot loop; it is written out flat on purpose (no helper calls on the
    common path, one chain read, locals for everything used twice).
    """

    context = _FastContext
    unbound = _UNBOUND
    counter = jp.counter

    def dispatch(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        chain = jp._chain  # one read: a concurrent rebuild swaps the whole object
        # CallContext.__init__ inlined: a Python-level __init__ call is the largest single
        # cost of building the context, and these seven stores are all a call needs.
        ctx = context()
        ctx.joinpoint = jp
        ctx.target = wrapped
        ctx.instance = None if instance is unbound else instance
        ctx._args = args
        ctx.kwargs = kwargs
        ctx.result = None
        ctx._skipped = False
        if counter is not None:
            ctx._number = getattr(instance, counter) + 1
        for fn in chain.before:
            fn(ctx)
        if not ctx._skipped:
            try:
                if chain.around:
                    ctx._arounds = chain.around
                    ctx._level = 0
                    ctx.result = ctx.proceed()
                elif ctx.kwargs:
                    ctx.result = wrapped(*ctx._args, **ctx.kwargs)
                else:
                    ctx.result = wrapped(*ctx._args)
            except Exception as exc:
                if not chain.on_error or not _handle_error(chain.on_error, ctx, exc):
                    raise  # the original exception, unchanged
        for fn in chain.after:
            fn(ctx)
        return ctx.result

    return dispatch


def _wraps_a_generator(func: Any) -> bool:
    """Whether ``func`` is a ``functools.wraps`` decorator's wrapper of a generator
    function (each call makes a fresh generator, as the function's own would)."""
    if not inspect.isfunction(func):  # lru_cache and other objects may hand out one shared
        return False
    try:
        inner = inspect.unwrap(func)
    except ValueError:  # a __wrapped__ cycle
        return False
    return inner is not func and inspect.isgeneratorfunction(inner)


class _FastContext(RunnerOnRead):
    """``CallContext`` built without a Python ``__init__``.

    With ``object.__init__`` as its initialiser, calling the class runs only C code; the
    dispatcher then fills the seven slots a call needs. Measured: faster than both
    ``CallContext(...)`` and ``object.__new__(CallContext)``. ``runner`` is worked out
    on first read (``RunnerOnRead``).
    """

    __slots__ = ()
    __init__ = object.__init__


class _FastRunnerContext(CallContext):
    """``_FastContext`` for a runner's own join points, whose dispatchers fill ``runner``:
    no ``__getattr__``, so the interpreter specialises every read of it (see
    ``RunnerOnRead``), in the dispatcher and in the advice alike."""

    __slots__ = ()
    __init__ = object.__init__


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
    params = _plain_parameters(target) if direct is not None else None
    if direct is None:  # called by wrapt
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
    if chain.around:
        call = _CALL_AROUND
    elif nb and params is not None:
        call = _CALL_CHECKED_PLAIN.format(call=f"target({', '.join(params)})")
    elif nb:
        call = _CALL_CHECKED.format(wrapped=parts["wrapped"])
    elif params is not None:
        call = _CALL_STRAIGHT.format(call=f"target({', '.join(params)})")
    else:
        w, a, k = parts["wrapped"], parts["args"], parts["kwargs"]
        call = _CALL_STRAIGHT.format(call=f"{w}(*{a}, **kw) if (kw := {k}) else {w}(*{a})")
    is_runner = getattr(self_, "__aspecthook_runner__", False)
    number = ""
    if jp.counter is not None:
        owner = "instance" if direct is None else "self_"
        number = _NUMBER.format(owner=owner, counter=jp.counter)
    before, before_fns = _stage_calls(jp, chain, "before")
    after, after_fns = _stage_calls(jp, chain, "after")
    factory = _dispatch_factory(
        advice="".join(f", b{i}, b{i}_every" for i in range(nb))
        + "".join(f", a{i}, a{i}_every" for i in range(na)),
        number=number,
        runner="        ctx.runner = runner\n" if is_runner else "",
        before=before,
        after=after,
        call=call,
        **parts,
    )
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
        *before_fns,
        *after_fns,
    )
    # Tracebacks and argument errors name the join point and the target, not the factory.
    func = getattr(target, "__func__", target)
    name = getattr(func, "__name__", "dispatch")
    dispatch.__name__ = name
    dispatch.__qualname__ = getattr(func, "__qualname__", name)
    dispatch.__code__ = dispatch.__code__.replace(
        co_filename=f"<aspecthook dispatch {jp.name}>", co_name=name, co_qualname=name
    )
    return dispatch  # type: ignore[no-any-return]


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
    # ``__self__``, else the sentinel for "none" (see the module docstring).
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
    factories = [advice.layer_factory() for advice in chain.entries["around"]]
    if not all(factories) or len(factories) != len(chain.around):
        return None
    layer: Callable[..., Any] | None = None
    for i in reversed(range(len(factories))):
        factory = factories[i]
        assert factory is not None
        layer = factory(jp, layer, (chain, jp.general) if i == 0 else None)
    return layer


def new_context(
    jp: JoinPoint, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> CallContext:
    """A ``CallContext`` for a call a layer is handling (when it needs one)."""
    return RunnerOnRead(jp, wrapped, None if instance is _UNBOUND else instance, args, kwargs)


def _handle_error(
    handlers: tuple[Callable[..., Any], ...], ctx: CallContext, exc: Exception
) -> bool:
    """Run error advice; True when one recovered. A raising handler replaces ``exc``."""
    ctx.exception = exc
    for fn in handlers:
        try:
            fn(ctx)
        except Exception as new:
            if new is not exc and new.__cause__ is None:
                new.__cause__ = exc
            raise
        if ctx.recovered:
            return True
    return False


def _make_async_dispatch(jp: JoinPoint) -> Callable[..., Any]:
    """Dispatch for ``async def`` targets: returns a coroutine that awaits async advice."""

    def dispatch(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return _dispatch_async(
            jp, wrapped, None if instance is _UNBOUND else instance, args, kwargs
        )

    return dispatch


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


async def _dispatch_async(
    jp: JoinPoint, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    chain = jp._chain
    ctx = RunnerOnRead(jp, wrapped, instance, args, kwargs)
    for fn in chain.before:
        await _maybe_await(fn(ctx))
    if not ctx._skipped:
        try:
            if chain.around:
                ctx.result = await _run_around_async(chain.around, 0, ctx, wrapped)
            else:
                ctx.result = await wrapped(*ctx._args, **ctx.kwargs)
        except Exception as exc:
            if not chain.on_error or not await _handle_error_async(chain.on_error, ctx, exc):
                raise
    for fn in chain.after:
        await _maybe_await(fn(ctx))
    return ctx.result


async def _run_around_async(
    arounds: tuple[Callable[..., Any], ...], index: int, ctx: CallContext, wrapped: Any
) -> Any:
    nxt = index + 1

    async def proceed(*args: Any, **kwargs: Any) -> Any:
        if args or kwargs:  # for this nested call only, as CallContext.proceed
            saved = ctx._args, ctx.kwargs
            ctx._args = list(args)
            ctx.kwargs = kwargs
            try:
                return await proceed()
            finally:
                ctx._args, ctx.kwargs = saved
        if nxt < len(arounds):
            return await _run_around_async(arounds, nxt, ctx, wrapped)
        return await wrapped(*ctx._args, **ctx.kwargs)

    return await _maybe_await(arounds[index](ctx, proceed))


async def _handle_error_async(
    handlers: tuple[Callable[..., Any], ...], ctx: CallContext, exc: Exception
) -> bool:
    ctx.exception = exc
    for fn in handlers:
        try:
            await _maybe_await(fn(ctx))
        except Exception as new:
            if new is not exc and new.__cause__ is None:
                new.__cause__ = exc
            raise
        if ctx.recovered:
            return True
    return False


# -- the proxy ---------------------------------------------------------------------------


class _BoundJoinPointProxy(wrapt.BoundFunctionWrapper[..., Any]):
    """A join point proxy bound by attribute access (``obj.method``, ``Class.method``).

    wrapt's bound wrappers refuse to pickle; the bound method or function they stand for
    pickles by reference, so this one does too: as ``getattr(instance_or_class, name)``.
    """

    def __reduce_ex__(self, protocol: object) -> tuple[Any, tuple[Any, str]]:
        owner = self._self_owner
        if self._self_binding == "function" and self._self_instance is not None:
            owner = self._self_instance
        elif owner is None:
            owner = type(self._self_instance)
        return getattr, (owner, str(self.__name__))

    def __reduce__(self) -> tuple[Any, tuple[Any, str]]:
        return self.__reduce_ex__(2)

    def __copy__(self) -> _BoundJoinPointProxy:
        return self  # as a bound method's copy: the same method of the same object

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        # As a bound method's deep copy: the same function bound to the copied object (a
        # class is its own deep copy), so the copy of an object that keeps ``self.step``
        # calls its own. Bound again from our proxy, not looked up by name: a private,
        # aliased or ``super()`` method is the same one on the copy.
        instance = self._self_instance
        if instance is None or isinstance(instance, type):
            return self
        parent: Any = self._self_parent
        return parent.__get__(copy.deepcopy(instance, memo), self._self_owner)


class JoinPointProxy(wrapt.FunctionWrapper[..., Any]):
    """The wrapt proxy that stands in for an intercepted callable.

    It behaves as the original for signature, docstring, ``__wrapped__``, ``inspect``,
    descriptor binding and pickling (by reference, like the function it replaces).
    """

    __bound_function_wrapper__ = _BoundJoinPointProxy

    def __init__(self, wrapped: Any, jp: JoinPoint) -> None:
        dispatch = _make_async_dispatch(jp) if jp.is_async else _make_dispatch(jp)
        # ``enabled`` is the join point's list that holds one item while it has advice:
        # wrapt tests a non-callable for truth in C, so an idle call costs no call at all.
        enabled: Any = jp._active
        super().__init__(wrapped, dispatch, enabled)
        if self._self_binding == "function" and getattr(wrapped, "__self__", None) is None:
            # See the module docstring: a sentinel instance skips wrapt's per-call
            # ``__self__`` probe on plain functions without changing how binding works.
            # A wrapped object that is already bound (a bound wrapt proxy keeps the
            # "function" binding) needs that probe: it is how its instance reaches us.
            init: Any = getattr(_FunctionWrapperBase, "__init__")  # noqa: B009
            init(self, wrapped, _UNBOUND, dispatch, enabled, "function")
        self._self_joinpoint = jp
        jp.general = dispatch
        jp.proxy_ref = weakref.ref(self)
        if jp._chain:
            jp._rewire(jp._chain)

    def __reduce_ex__(self, protocol: object) -> str | tuple[Any, tuple[Any, str]]:
        instance = _bound_instance(self)
        if instance is not None:  # woven on one instance: the method of the unpickled one
            return getattr, (instance, str(self.__wrapped__.__name__))
        return str(self.__qualname__)

    def __reduce__(self) -> str | tuple[Any, tuple[Any, str]]:
        return self.__reduce_ex__(2)

    def __copy__(self) -> JoinPointProxy:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        # A proxy woven on one instance (``weave(obj)``) sits in that instance's __dict__;
        # a deep copy of the instance gets its own, plain bound method (the weave was for
        # the original only), not this proxy, which would act on the original.
        if _bound_instance(self) is not None:
            return copy.deepcopy(self.__wrapped__, memo)
        return self


def _bound_instance(proxy: JoinPointProxy) -> Any:
    """The instance whose ``__dict__`` holds ``proxy`` around one of its own methods (a
    weave of that instance), or None (functions, class methods, a bound method woven
    where another object keeps it)."""
    wrapped = proxy.__wrapped__
    if type(wrapped) is types.MethodType:
        instance = wrapped.__self__
    elif isinstance(wrapped, _BoundJoinPointProxy):  # the instance's class is woven too
        instance = wrapped._self_instance
    else:
        return None
    if instance is None or isinstance(instance, type):
        return None
    try:
        held = vars(instance).get(wrapped.__name__)
    except TypeError:  # no __dict__
        return None
    return instance if held is proxy else None


def find_proxy(obj: object) -> JoinPointProxy | None:
    """Our proxy in ``obj``'s wrapper chain (under foreign wrappers too), or ``None``."""
    if type(obj) is JoinPointProxy:
        return obj
    found: JoinPointProxy | None = wrapt.find_wrapper(
        obj, predicate=lambda e: type(e) is JoinPointProxy
    )
    return found


def make_proxy(wrapped: Any, jp: JoinPoint) -> JoinPointProxy:
    return JoinPointProxy(wrapped, jp)
