"""Join points: the named places where calls are intercepted, and what each one holds.

A ``JoinPoint`` keeps its names, its advice and the ``Chain`` that dispatch runs, and
gives its proxy the dispatcher made for that chain's shape. The pieces it uses live in
modules of their own: the wrapt proxy that stands in for the intercepted callable
(``_proxy``), the general dispatchers that run any chain per call (``_dispatch``), and the
dispatchers generated for one chain's shape (``_specialised``). The proxy and
``new_context`` are also importable from here, where the weaving modules, the aspects and
the tests import them.

* Registrations replace a join point's chain object whole (``set_chain``) and dispatch
  reads it once per call, so concurrent weaving never exposes a half-built chain.
* Each chain gets the cheapest dispatcher its shape allows (``_specialised._specialise``).
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._advice_checks import is_coroutine_function
from ._chain import EMPTY_CHAIN, Chain
from ._dispatch import new_context
from ._proxy import JoinPointProxy, _FunctionWrapperBase, find_proxy, make_proxy
from ._specialised import _direct, _specialise

if TYPE_CHECKING:
    from ._advice import Advice
    from ._weaver import Weaver

__all__ = ["JoinPoint", "JoinPointProxy", "find_proxy", "make_proxy", "new_context"]


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
        # As for advice: an instance whose class's ``__call__`` is ``async def`` (woven
        # where it is held) is async too, though ``inspect`` says it is not a function.
        self.is_async = is_coroutine_function(func)
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
