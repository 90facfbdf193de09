"""Installing and removing the proxies of woven callables, counting weaves per join point.

``_attach`` finds the ``JoinPointProxy`` at a site (even under a foreign wrapper) or
installs one, and counts one more weave on its join point; ``_release`` counts one less
and, at the last, puts the original back with ``wrapt.unwrap_object``. Separate from
``_weave``, which decides what to weave and keeps the records ``describe()`` shows.
"""

from __future__ import annotations

import inspect
import types
import weakref
from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import wrapt

from ._joinpoint import JoinPoint, find_proxy, make_proxy
from ._log import get_logger
from ._registry import LOCK, REGISTRY
from ._targets import _GLOB, _immutable
from ._torch_hooks import is_module
from .errors import WeaveTargetError

if TYPE_CHECKING:
    from ._weaver import Weaver

__all__: list[str] = []  # helpers of weave() only: nothing here is API


def _install_all(
    sites: list[tuple[Any, str]] | list[JoinPoint], names: tuple[str, ...], weaver: Weaver
) -> list[JoinPoint]:
    done: list[JoinPoint] = []
    try:
        for site in sites:
            jp = _attach(site, names, weaver)
            if jp not in done:
                done.append(jp)
            else:
                _release(jp, names, weaver)
    except BaseException:
        for jp in done:
            _release(jp, names, weaver)
        raise
    return done


def _attach(site: tuple[Any, str] | JoinPoint, names: tuple[str, ...], weaver: Weaver) -> JoinPoint:
    """Find or install the proxy at ``site`` and count one more weave on its join point."""
    with LOCK:
        if isinstance(site, JoinPoint) and site.site and site not in REGISTRY.joinpoints:
            site = _former_place(site.name, site.site)  # a stale proxy: its weaves were removed
        if isinstance(site, JoinPoint):
            jp = site
        else:
            parent, attr = site
            _, _, current = wrapt.resolve_path(parent, attr)
            proxy = find_proxy(current)
            if proxy is not None:
                jp = proxy._self_joinpoint
                if jp not in REGISTRY.joinpoints:
                    _revive(jp, parent, attr)
            else:
                jp = _new_proxy(parent, attr, current, weaver)
        local = () if weaver.is_global else (weaver,)
        jp.local_weavers.update(local)
        try:
            REGISTRY.rename(jp, add=names)
        except BaseException:
            jp.local_weavers.subtract(local)
            jp.local_weavers = +jp.local_weavers
            if jp.weave_refs == 0 and not jp.declared:
                _remove_proxy(jp)
            raise
        jp.weave_refs += 1
        return jp


def _former_place(name: str, site: tuple[Any, str]) -> tuple[Any, str]:
    """Where a removed proxy was installed, to weave a stale reference to it again."""
    parent_ref, attr = site
    parent = parent_ref()
    if parent is None:
        raise WeaveTargetError(
            f"{name} was woven once, but what held it is gone: weave the live object",
            target=name,
        )
    return parent, attr


def _revive(jp: JoinPoint, parent: Any, attr: str) -> None:
    """Register again the join point of an idle proxy found at ``parent.attr``.

    Its last weave was removed while something else held the attribute (``mock.patch``,
    pytest's ``monkeypatch``), so it could not be unwrapped; the patch then put the proxy
    back. Unregistered, it would take later weaves but never run their advice. It is
    named for where it sits now, as a fresh weave there would name it: another module
    may have taken it (``from a import f`` while ``a.f`` was woven).
    """
    name, former = _dotted(parent, attr), jp.name
    if name != former:
        jp.name = name
        jp.add_names((name,))
        jp.remove_names((former,))
    jp.site = (_weak(parent), attr)
    REGISTRY.add_joinpoint(jp)


def _new_proxy(parent: Any, attr: str, current: Any, weaver: Weaver) -> JoinPoint:
    jp = JoinPoint(_dotted(parent, attr), current, declared=False)
    factory: Any = make_proxy
    try:
        proxy = wrapt.wrap_object(parent, attr, factory, (jp,))
    except (AttributeError, TypeError) as exc:  # the holder refuses the new attribute
        raise _unsettable(parent, attr, exc) from exc
    if not _owned(parent, attr):
        setattr(parent, attr, current)
        raise _served_dynamically(parent, attr, current)
    jp.site = (_weak(parent), attr)
    jp.proxy_ref = weakref.ref(proxy)
    try:
        REGISTRY.add_joinpoint(jp)
    except BaseException:
        wrapt.unwrap_object(parent, attr, proxy, missing_ok=True)
        raise
    return jp


def _owned(parent: Any, attr: str) -> bool:
    """Whether ``parent.attr`` now lives in a ``__dict__`` (the holder's, or a class's in
    its MRO), where removing the weave can put the original back. A holder whose
    ``__setattr__`` keeps it elsewhere and serves it from ``__getattr__`` (an
    ``nn.Module``'s submodules, in ``_modules``) would keep our proxy for good."""
    try:
        wrapt.resolve_owner(parent, attr)
    except wrapt.PathResolutionError:
        return False
    return True


def _served_dynamically(parent: Any, attr: str, current: Any) -> WeaveTargetError:
    kind = type(parent).__qualname__
    if is_module(current):
        hint = (
            "weave the submodule object itself (weave(submodule), through torch's module "
            "hooks), or its forward method by path (the same path and '.forward')"
        )
    else:
        hint = "weave the object itself (weave(obj)), or one of its methods by path"
    return WeaveTargetError(
        f"cannot weave {attr!r} of this {kind} instance: it keeps that attribute outside its "
        f"__dict__ and serves it through __getattr__, so a proxy put there could never be "
        f"taken off again; {hint}",
        target=f"{type(parent).__module__}.{kind}.{attr}",
    )


def _release(jp: JoinPoint, names: tuple[str, ...], weaver: Weaver) -> None:
    with LOCK:
        if not weaver.is_global:
            jp.local_weavers.subtract((weaver,))
            jp.local_weavers = +jp.local_weavers
        jp.weave_refs -= 1
        if jp.weave_refs == 0 and not jp.declared:
            jp.remove_names(names)
            _remove_proxy(jp)
        else:
            REGISTRY.rename(jp, remove=names)


def _remove_proxy(jp: JoinPoint) -> None:
    REGISTRY.drop_joinpoint(jp)
    if jp.site is None or jp.proxy_ref is None:
        return
    parent_ref, attr = jp.site
    parent = parent_ref()
    proxy = jp.proxy_ref()
    if parent is not None and proxy is not None:
        try:
            removed = wrapt.unwrap_object(parent, attr, proxy, missing_ok=True)
        except wrapt.WrapperNotOutermostError as exc:
            # A plain wrapper on top (functools.wraps) calls our proxy directly, so it cannot
            # be spliced out: it stays in place as a join point with whatever advice is left.
            _keep(jp, str(exc))
        else:
            if removed is None and _held_bound(parent, attr, proxy):
                _keep(jp, f"a plain wrapper at {attr} holds it bound (Class.{attr})")


#: Set while weaves are removed at the end of a process (``aspecthook run``): a proxy left
#: idle under a plain wrapper then changes nothing, so it goes unreported.
ENDING: ContextVar[bool] = ContextVar("aspecthook_ending", default=False)


def _keep(jp: JoinPoint, reason: str) -> None:
    if not ENDING.get():
        get_logger().warning("weave.unwrap_failed", target=jp.name, reason=reason)
    REGISTRY.add_joinpoint(jp)


def _held_bound(parent: Any, attr: str, proxy: Any) -> bool:
    """Whether a plain wrapper at ``parent.attr`` calls ``proxy`` bound by a class's
    attribute access (``Cls.m = deco(Cls.m)``), where ``unwrap_object`` cannot see it."""
    try:
        _, _, current = wrapt.resolve_path(parent, attr)
        return find_proxy(current) is proxy
    except Exception:  # removal must not fail on whatever a patch put there
        return False


# -- names -----------------------------------------------------------------------------------


def _path_alias(path: str, sites: list[Any]) -> tuple[str, ...]:
    """``path`` as typed, as a further name of the one callable it names, when the join
    point's own name differs: a join point is named where its callable lives
    (``'torch.optim.optimizer.Optimizer.step'``, ``'posixpath.join'``), and advice by the
    name the weave was given (``'torch.optim.Optimizer.step'``, ``'os.path.join'``) must
    reach it too. None for a glob, or a path to a class or module (several callables).
    ``'pkg.mod.Base+.method'`` is a name of every callable it weaves (not with a glob)."""
    typed = path.replace(":", ".")
    if "+" in path and not _GLOB.intersection(path):
        return (typed,)
    if _GLOB.intersection(path) or len(sites) != 1 or not isinstance(sites[0], tuple):
        return ()
    parent, attr = sites[0]
    if not typed.endswith(f".{attr}") or _dotted(parent, attr) == typed:
        return ()
    return (typed,)


def _dotted(parent: Any, attr: str) -> str:
    if isinstance(parent, types.ModuleType):
        return f"{parent.__name__}.{attr}"
    cls = parent if inspect.isclass(parent) else type(parent)
    return f"{cls.__module__}.{cls.__qualname__}.{attr}"


def _weak(obj: Any) -> Callable[[], Any]:
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


def _unsettable(parent: Any, attr: str, exc: BaseException) -> WeaveTargetError:
    """The error for a holder that refuses our proxy in ``attr`` (a frozen dataclass
    instance, a builtin type, a ``__setattr__`` that raises)."""
    if inspect.isclass(parent) or inspect.ismodule(parent):
        where = f"{getattr(parent, '__qualname__', parent.__name__)}.{attr}"
        hint = "weave the callers' reference to it, or a subclass you own"
    elif _immutable(type(parent)):  # a property's fget, a classmethod's __func__
        where = f"this {type(parent).__qualname__}'s {attr}"
        hint = f"a {type(parent).__qualname__} cannot hold one: " + (
            "weave the function its getter calls"
            if isinstance(parent, property)
            else "weave the method that holds it by its path"
        )
    else:
        where = f"this {type(parent).__qualname__} instance's {attr}"
        hint = f"weave the class {type(parent).__qualname__} instead (all its instances)"
    return WeaveTargetError(
        f"cannot put a proxy in {where}: {type(exc).__name__}: {exc}; {hint}",
        target=f"{type(parent).__qualname__}.{attr}",
    )
