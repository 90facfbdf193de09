"""The one wrapt proxy per intercepted callable, bound and unbound, and how it pickles and copies.

Kept apart from ``_joinpoint``: the proxy is what users hold (the woven function, a
method looked up on a class or an instance), so this module is about behaving as the
original would (binding, ``inspect``, pickling, copying), not about the join point itself.

Construction notes (measured in bench/calls.py):

* ``wrapt.FunctionWrapper.__call__`` on a wrapped plain function with no bound instance
  looks up ``wrapped.__self__`` on every call to detect a pre-bound method. For a plain
  function that lookup raises and clears an AttributeError, which is most of the cost of
  a pass-through wrapper. We initialise the unbound proxy with a sentinel instance
  (``_UNBOUND``) instead of ``None``: the C ``__call__`` then skips the lookup. Binding is
  untouched, because ``__get__`` of an unbound wrapper never reads its own instance (it
  builds a fresh bound wrapper from the descriptor protocol), so methods, classmethods and
  staticmethods behave as before. The dispatcher maps the sentinel back to ``None``.
* ``enabled=`` is a list that holds one item while the join point has advice. wrapt
  tests a non-callable ``enabled`` for truth in C; while it is empty the wrapper is
  skipped and the target is called directly, so an idle join point costs no call at all.

Neither proxy pickles by a reference to its own class: each stands for the function or
bound method it wraps (``getattr(owner, name)`` or the target's qualified name), and a
callable object without a name (a partial, an instance with ``__call__``) pickles as itself.
"""

from __future__ import annotations

import copy
import importlib
import types
import weakref
from typing import TYPE_CHECKING, Any

import wrapt

from ._dispatch import _UNBOUND, _make_async_dispatch, _make_dispatch

if TYPE_CHECKING:
    from ._joinpoint import JoinPoint

__all__ = ["JoinPointProxy", "_FunctionWrapperBase", "find_proxy", "make_proxy"]

_FunctionWrapperBase = wrapt.FunctionWrapper.__mro__[1]

# Why torch.compile leaves a woven callable to Python (shown in its graph-break report).
_COMPILE_NOTE = (
    "aspecthook runs the advice of a woven function or method outside the compiled graph; "
    "to keep a module's forward in the graph, weave the nn.Module instance "
    "(weave(module, before=..., after=...)), whose torch hooks Dynamo traces"
)


class _BoundJoinPointProxy(wrapt.BoundFunctionWrapper[..., Any]):
    """A join point proxy bound by attribute access (``obj.method``, ``Class.method``).

    wrapt's bound wrappers refuse to pickle; the bound method or function they stand for
    pickles by reference, so this one does too: as ``getattr(instance_or_class, name)``.
    """

    _torchdynamo_disable = True  # see JoinPointProxy
    _torchdynamo_disable_msg = _COMPILE_NOTE

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
    # torch.compile: Dynamo takes a proxy for the function it wraps (its __class__ and
    # __code__ are the original's) and traced the original's code, so the advice silently
    # never ran in a compiled model. Marked as torch.compiler.disable() marks a function,
    # which Dynamo reads from the class (inspect.getattr_static), the call breaks the graph
    # and runs here, advice included. Nothing is read at a call: no cost outside Dynamo.
    _torchdynamo_disable = True
    _torchdynamo_disable_msg = _COMPILE_NOTE

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

    def __reduce_ex__(self, protocol: object) -> str | tuple[Any, ...]:
        wrapped: Any = self.__wrapped__
        if not hasattr(wrapped, "__qualname__"):
            # A callable object held by a module or class (a ``functools.partial``, an
            # instance with ``__call__``) has no name to pickle by: as before the weave,
            # it pickles as itself, by its own reduction.
            reduced: str | tuple[Any, ...] = wrapped.__reduce_ex__(protocol)
            return reduced
        instance = _bound_instance(self)
        if instance is not None:  # woven on one instance: the method of the unpickled one
            return getattr, (instance, str(self.__wrapped__.__name__))
        holder, attr = self._self_joinpoint.site or (lambda: None, "")
        module = holder()
        if isinstance(module, types.ModuleType) and (module.__name__, attr) != (
            self.__module__,
            self.__qualname__,
        ):
            # Woven where another module imported it (``from a import f``) or under an
            # alias: its qualified name finds the original there, not this proxy.
            return getattr, (_ModuleByName(module.__name__), attr)
        return str(self.__qualname__)

    def __reduce__(self) -> str | tuple[Any, ...]:
        return self.__reduce_ex__(2)

    def __copy__(self) -> Any:
        # A function is its own copy; a partial or callable instance is copied as itself
        # (a plain one: the weave was for the original), as it was before the weave.
        if not hasattr(self.__wrapped__, "__qualname__"):
            return copy.copy(self.__wrapped__)
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        # A proxy woven on one instance (``weave(obj)``) sits in that instance's __dict__;
        # a deep copy of the instance gets its own, plain bound method (the weave was for
        # the original only), not this proxy, which would act on the original. So does a
        # partial or callable instance (see ``__copy__``).
        if _bound_instance(self) is not None or not hasattr(self.__wrapped__, "__qualname__"):
            return copy.deepcopy(self.__wrapped__, memo)
        return self


class _ModuleByName:
    """Pickles as ``importlib.import_module(name)``: a module by reference, which plain
    pickle refuses; unpickling needs only the module, not aspecthook."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return importlib.import_module, (self.name,)


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
    """Our proxy in ``obj``'s wrapper chain (under foreign wrappers too), or ``None``.

    A plain wrapper put on a woven method taken from its class (``Cls.m =
    deco(Cls.m)``, as ``torch.optim.Optimizer`` does to each subclass's ``step`` when the
    first one is made) holds the proxy bound to no instance, not the proxy itself: that
    stands for the proxy too, or weaving again would stack a second one.
    """
    if type(obj) is JoinPointProxy:
        return obj
    found = wrapt.find_wrapper(obj, predicate=_ours)
    if type(found) is _BoundJoinPointProxy:
        parent: JoinPointProxy = found._self_parent
        return parent
    return found if type(found) is JoinPointProxy else None


def _ours(entry: object) -> bool:
    """Our proxy, or our proxy bound by a class's attribute access (no instance)."""
    if type(entry) is _BoundJoinPointProxy:
        return entry._self_instance is None and type(entry._self_parent) is JoinPointProxy
    return type(entry) is JoinPointProxy


def make_proxy(wrapped: Any, jp: JoinPoint) -> JoinPointProxy:
    return JoinPointProxy(wrapped, jp)
