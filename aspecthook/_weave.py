"""Weaving advice into existing code: functions, methods, classes, modules, instances and
dotted paths (globs allowed in the last parts), now or when the module is imported.

Each woven callable gets exactly one ``JoinPointProxy``; weaving it again finds that
proxy with ``wrapt.find_wrapper`` (even under a foreign wrapper) and adds to its join
point. When the last weave of a callable is removed, ``wrapt.unwrap_object`` puts the
original back, splicing our proxy out from under any wrapper another library added.
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import pkgutil
import sys
import types
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

import wrapt

from ._advice import KINDS, Advice
from ._aspect import Aspect
from ._handle import Handle
from ._joinpoint import JoinPoint, JoinPointProxy, find_proxy, make_proxy
from ._log import get_logger
from ._pointcut import Name
from ._registry import LOCK, REGISTRY
from ._torch_hooks import is_module, weave_module
from ._weaver import OPTIONS, Weaver, default_weaver
from .errors import AspectDefinitionError, InvalidOptionError, WeaveTargetError

__all__ = ["WEAVES", "WeaveRecord", "unweave", "weave", "woven"]

_tokens = itertools.count()
# The decorators' options; ``name=`` is weave()'s own (a join point alias).
WEAVE_OPTIONS = OPTIONS - {"name"}
_GLOB = frozenset("*?[")


@dataclass(eq=False)
class WeaveRecord:
    """One ``weave()`` call as ``describe()`` shows it."""

    target: str
    status: str  # 'active' | 'pending import' | 'skipped' | 'failed'
    reason: str = ""
    weaver: Weaver | None = None
    # Weakly held: a join point lives as long as its proxy, which lives as long as the
    # woven class, instance or module holds it; a weave record must not keep those alive.
    points: weakref.WeakSet[JoinPoint] = field(default_factory=weakref.WeakSet)
    names: tuple[str, ...] = ()
    cancelled: bool = False
    waiting: int = 0  # glob expansions into submodules not imported yet (see _defer)


WEAVES: list[WeaveRecord] = []


# -- the public functions ------------------------------------------------------------------


def weave(
    target: Any,
    *aspects: Aspect | Advice,
    before: Callable[..., Any] | Iterable[Callable[..., Any]] | None = None,
    after: Callable[..., Any] | Iterable[Callable[..., Any]] | None = None,
    on_error: Callable[..., Any] | Iterable[Callable[..., Any]] | None = None,
    around: Callable[..., Any] | Iterable[Callable[..., Any]] | None = None,
    name: str | None = None,
    requires: str | None = None,
    strict: bool = False,
    weaver: Weaver | None = None,
    **opts: Any,
) -> Handle:
    """Weave aspects and advice into ``target`` and return a ``Handle`` that undoes it.

    ``target`` is a function, method, classmethod, staticmethod, class (its methods),
    module (its functions), instance (its methods, for that instance only), a join point
    proxy, or a dotted path ``'pkg.mod.Class.method'`` (``'pkg.mod:Class.method'`` to
    say where the module ends; globs allowed after the module). A path whose module is
    not imported yet is woven when it is imported; so is each submodule a glob matches
    (``'pkg.*.func'``) that is imported later. ``name=`` makes the woven callables
    answer to that join point name too. ``requires='pkg>=1.0'`` skips the weave (logged,
    ``skipped`` in ``describe()``) when the installed version does not fit; a missing
    target is skipped the same way. ``strict=True`` raises ``WeaveTargetError`` instead.
    ``**opts`` (``priority=``, ``every=`` ...) apply to the ``before=``/``after=``/...
    functions. An ``nn.Module`` instance is woven through torch's own module hooks
    instead of a proxy (``forward`` / ``backward`` join points; see ``_torch_hooks``).
    """
    weaver = weaver or default_weaver
    if is_module(target):  # an nn.Module instance: through torch's own hooks
        kinds = {"before": before, "after": after, "on_error": on_error, "around": around}
        return weave_module(target, aspects, kinds, name, requires, strict, weaver, opts)
    token = f"@weave:{next(_tokens)}"
    names = (token,) if name is None else (token, name)
    advices = _advice_for(Name(token), aspects, before, after, on_error, around, opts)
    label = target if isinstance(target, str) else _label(target)
    record = WeaveRecord(label, "active", weaver=weaver, names=names)

    sites: list[Any] = []
    deferred = False
    reason = _version_problem(requires) if requires is not None else None
    if reason is None and isinstance(target, str):
        if not _imported(target):
            reason = _missing_module(target)
            deferred = reason is None
        else:
            try:
                sites = _resolve_path(target)
            except WeaveTargetError as exc:
                deferred = _submodule_pending(target)
                if not deferred:
                    reason = str(exc)
            else:  # 'pkg.sub.*.func' with pkg.sub not imported: a glob sees nothing yet
                deferred = not sites and _submodule_pending(target)
    elif reason is None:
        sites = _resolve_object(target)
    if reason is not None:
        return _skip(record, reason, strict)

    handle = weaver.add(*advices) if advices else None
    try:
        if deferred:
            _defer(record, target, names, weaver, strict)
        else:
            record.points.update(_install_all(sites, names, weaver))
            # A glob over a package's modules also covers those not imported yet.
            later = _unimported_matches(target) if isinstance(target, str) else []
            if later and not record.points and strict:
                raise WeaveTargetError(
                    f"{label} matched nothing in the modules imported so far ({len(later)} "
                    f"not imported yet might match, e.g. {_module_of(later[0])}): import "
                    "them before weaving, or weave without strict=True",
                    target=label,
                )
            for path in later:
                _defer(record, path, names, weaver, strict, quiet=True)
            deferred = bool(later)
    except BaseException:
        _undo(record, handle, weaver)
        raise
    if record.points and deferred:
        record.status = "active"
    elif deferred and record.waiting:
        record.reason = f"matched nothing yet: waiting for {record.waiting} modules' imports"
    if not record.points and not deferred:
        if strict:
            _undo(record, handle, weaver)
            raise WeaveTargetError(f"{label} matched nothing to weave", target=label)
        record.status, record.reason = "skipped", "matched nothing"
    with LOCK:
        WEAVES.append(record)

    def undo() -> None:
        weaver.forget(result)
        _undo(record, handle, weaver)

    result = Handle(undo, f"weave {label}", advices)
    if handle is not None:
        weaver.forget(handle)
        for advice in advices:
            advice._handle = result
    return weaver.track(result)


def unweave(handle: Handle) -> None:
    """Remove what ``handle`` added; the same as ``handle.remove()``."""
    handle.remove()


def woven(target: Any, *aspects: Aspect | Advice, **kwargs: Any) -> Handle:
    """``with woven(target, ...):`` weaves for the block and removes it afterwards."""
    return weave(target, *aspects, **kwargs)


# -- advice ------------------------------------------------------------------------------


def _advice_for(
    token: Name,
    aspects: tuple[Any, ...],
    before: Any,
    after: Any,
    on_error: Any,
    around: Any,
    opts: dict[str, Any],
) -> list[Advice]:
    unknown = sorted(set(opts) - WEAVE_OPTIONS)
    if unknown:
        raise InvalidOptionError(
            f"unknown option(s) {unknown} for weave(): valid options for its "
            f"before=/after=/on_error=/around= functions are {sorted(WEAVE_OPTIONS)}",
            option=unknown[0],
            value=opts[unknown[0]],
        )
    advices: list[Advice] = []
    for item in aspects:
        if isinstance(item, Aspect):
            advices.extend(item.make_advice(target=token))
        elif isinstance(item, Advice):
            advices.append(_rebind(item, token))
        else:
            raise AspectDefinitionError(
                f"weave() got {item!r} as an aspect: pass Aspect instances or Advice "
                "positionally, and functions as before=/after=/on_error=/around="
            )
    by_kind = {"before": before, "after": after, "on_error": on_error, "around": around}
    for kind in KINDS[:4]:
        fns = by_kind[kind]
        if fns is None:
            continue
        for fn in [fns] if callable(fns) else list(fns):
            func = fn.fn if isinstance(fn, Advice) else fn
            advices.append(Advice(kind, func, token, **opts))
    if opts and not any(v is not None for v in by_kind.values()):
        raise InvalidOptionError(
            f"options {sorted(opts)} apply to before=/after=/on_error=/around= functions, "
            "and none were given; set options on the aspect or advice instead",
            option=sorted(opts)[0],
            value=opts[sorted(opts)[0]],
        )
    return advices


def _rebind(advice: Advice, token: Name) -> Advice:
    """A copy of ``advice`` (same function and options) aimed at the weave target."""
    return Advice(
        advice.kind,
        advice.fn,
        token,
        priority=advice.priority,
        every=advice.every,
        window=advice.window if advice.every else None,
        once=advice.once,
        when=advice.when,
        rank=advice.rank,
        errors=advice.errors,
        name=advice.name,
        order_after=advice.order_after,
        order_before=advice.order_before,
        aspect=advice.aspect,
        aspect_name=advice.aspect_name,
    )


# -- installing and removing proxies ----------------------------------------------------------


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
    proxy = wrapt.wrap_object(parent, attr, factory, (jp,))
    jp.site = (_weak(parent), attr)
    jp.proxy_ref = weakref.ref(proxy)
    try:
        REGISTRY.add_joinpoint(jp)
    except BaseException:
        wrapt.unwrap_object(parent, attr, proxy, missing_ok=True)
        raise
    return jp


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
            wrapt.unwrap_object(parent, attr, proxy, missing_ok=True)
        except wrapt.WrapperNotOutermostError as exc:
            # A plain wrapper on top (functools.wraps) calls our proxy directly, so it cannot
            # be spliced out: it stays in place as a join point with whatever advice is left.
            get_logger().warning("weave.unwrap_failed", target=jp.name, reason=str(exc))
            REGISTRY.add_joinpoint(jp)


def _undo(record: WeaveRecord, handle: Handle | None, weaver: Weaver) -> None:
    with LOCK:
        record.cancelled = True
        if record in WEAVES:
            WEAVES.remove(record)
        points, record.points = list(record.points), weakref.WeakSet()
    for jp in points:
        _release(jp, record.names, weaver)
    if handle is not None:
        handle.remove()


def _skip(record: WeaveRecord, reason: str, strict: bool) -> Handle:
    if strict:
        raise WeaveTargetError(
            f"cannot weave {record.target}: {reason} (strict=True; drop strict to skip it)",
            target=record.target,
        )
    record.status, record.reason = "skipped", reason
    get_logger().warning("weave.skipped", target=record.target, reason=reason)
    with LOCK:
        WEAVES.append(record)

    def undo() -> None:
        with LOCK:
            if record in WEAVES:
                WEAVES.remove(record)
        if record.weaver is not None:
            record.weaver.forget(handle)

    handle = Handle(undo, f"weave {record.target} (skipped)")
    return record.weaver.track(handle) if record.weaver is not None else handle


# -- resolving targets -------------------------------------------------------------------


def _resolve_object(target: Any) -> list[tuple[Any, str]] | list[JoinPoint]:
    if type(target) is JoinPointProxy:
        return [target._self_joinpoint]
    if isinstance(target, types.ModuleType):
        return [
            (target, n)
            for n, v in vars(target).items()
            if not n.startswith("_")
            and (inspect.isfunction(v) or find_proxy(v) is not None)
            and getattr(v, "__module__", None) == target.__name__
        ]
    if inspect.isclass(target):
        return [(target, n) for n, v in vars(target).items() if _is_method(n, v)]
    if inspect.ismethod(target):
        owner = target.__self__
        return [(owner, target.__func__.__name__)]
    if inspect.isfunction(target) or isinstance(target, (classmethod, staticmethod)):
        return [_locate(getattr(target, "__func__", target))]
    if hasattr(target, "__dict__") and _is_instance(target):
        cls = type(target)
        return [
            (target, n)
            for n in dir(cls)
            if not n.startswith("_") and inspect.isfunction(inspect.getattr_static(cls, n))
        ]
    if not hasattr(target, "__dict__") and hasattr(type(target), "__slots__"):
        kind = type(target).__qualname__
        raise WeaveTargetError(
            f"cannot weave this {kind} instance: it has no __dict__ (its class uses "
            f"__slots__) to hold per-instance proxies; weave the class {kind} instead",
            target=repr(target),
        )
    raise WeaveTargetError(
        f"cannot weave {target!r} ({type(target).__name__}): give a function, method, class, "
        "module, instance or a dotted path such as 'pkg.module.Class.method'",
        target=repr(target),
    )


def _is_instance(target: Any) -> bool:
    """An instance of a user's class, callable ones included (their class defines
    ``__call__`` in Python); other callables (partials, builtins) are not instances here."""
    if not callable(target):
        return True
    return inspect.isfunction(inspect.getattr_static(type(target), "__call__", None))


def _is_method(name: str, value: Any) -> bool:
    if name.startswith("__") and name != "__call__":
        return False
    return (
        inspect.isfunction(value)
        or isinstance(value, (classmethod, staticmethod))
        or type(value) is JoinPointProxy
    )


def _locate(func: Any) -> tuple[Any, str]:
    """Where a function lives, from its ``__module__`` and ``__qualname__``."""
    qualname = getattr(func, "__qualname__", "")
    module = sys.modules.get(getattr(func, "__module__", "") or "")
    if module is not None and "<locals>" not in qualname:
        try:
            parent, attr, found = wrapt.resolve_path(module, qualname)
        except (AttributeError, wrapt.PathResolutionError):
            found = None
        original = wrapt.unwrapped(func)  # the function under functools.wraps or a proxy
        if found is not None and wrapt.unwrapped(getattr(found, "__func__", found)) is original:
            return parent, attr
        if found is not None and find_proxy(found) is not None:
            return parent, attr
    raise WeaveTargetError(
        f"cannot find where {qualname or func!r} is defined, so it cannot be replaced there "
        "(a local function or one removed from its module): weave the object that holds it "
        "and its name, e.g. weave('pkg.module.function') or weave(holder_class)",
        target=qualname,
    )


def _split(path: str) -> tuple[list[str], list[str]]:
    """Split a dotted path into module parts and attribute parts, if it can tell now."""
    if ":" in path:
        module, _, rest = path.partition(":")
        return module.split("."), rest.split(".") if rest else []
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in sys.modules:
            return parts[:i], parts[i:]
    return [], parts


def _imported(path: str) -> bool:
    """Whether the module part of ``path`` is imported already."""
    module, _ = _split(path)
    return bool(module) and ".".join(module) in sys.modules


def _findable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _missing_module(path: str) -> str | None:
    """Why ``path`` can never be woven (its top package does not exist), or None."""
    top = path.partition(":")[0].split(".")[0]
    return None if _findable(top) else f"no module named {top!r}"


def _submodule_pending(path: str) -> bool:
    """'pkg.sub.func' with pkg imported and pkg.sub importable but not imported yet."""
    module, attrs = _split(path)
    for i in range(1, len(attrs)):
        name = ".".join(module + attrs[:i])
        if _GLOB.intersection(name):
            return False
        if name not in sys.modules and _findable(name):
            return True
    return False


def _unimported_matches(path: str) -> list[str]:
    """Paths for the not yet imported submodules that a glob in ``path`` matches.

    ``'pkg.*.func'`` with ``pkg`` imported: a glob only sees the attributes a module has
    now, and a submodule is an attribute only once imported, so each importable submodule
    of ``pkg`` that matches and is not imported gives a concrete ``'pkg.sub.func'`` to
    weave when it is imported. Submodules are listed from the package's ``__path__``
    (``pkgutil.iter_modules``), without importing anything. Only the first glob that
    falls on module names is expanded here; a deeper one is when its package is imported.
    """
    if ":" in path:  # the module part is explicit and has no globs
        return []
    module_parts, attrs = _split(path)
    if not module_parts:
        return []
    name = ".".join(module_parts)
    for i, part in enumerate(attrs):
        search = getattr(sys.modules.get(name), "__path__", None)
        if search is None:
            return []  # not a package (or not imported): its attributes are what there is
        if _GLOB.intersection(part):
            subs = [info.name for info in pkgutil.iter_modules(search)]
            rest = attrs[i + 1 :]
            return [
                ".".join([name, sub, *rest])
                for sub in subs
                if fnmatchcase(sub, part) and f"{name}.{sub}" not in sys.modules and rest
            ]
        name = f"{name}.{part}"
    return []


def _module_of(path: str) -> str:
    """The submodule an expansion of ``_unimported_matches`` waits for."""
    module, attrs = _split(path)
    return ".".join([*module, attrs[0]]) if attrs else ".".join(module)


def _resolve_path(path: str) -> list[tuple[Any, str]]:
    module_parts, attrs = _split(path)
    module = sys.modules[".".join(module_parts)]
    if not attrs:
        return _resolve_object(module)  # type: ignore[return-value]
    sites: list[tuple[Any, str]] = []
    for parent, attr in _expand(module, attrs):
        value = _raw(parent, attr)
        if inspect.isclass(value) or isinstance(value, types.ModuleType):
            sites.extend(_resolve_object(value))  # type: ignore[arg-type]
        else:
            sites.append((parent, attr))
    glob = bool(_GLOB.intersection(path))
    patchable = [(parent, attr) for parent, attr in sites if not _immutable(parent)]
    if sites and not patchable and not glob:
        parent, attr = sites[0]
        raise WeaveTargetError(
            f"{path}: {parent.__qualname__} is a built-in type, whose attributes cannot be "
            f"replaced; weave the Python code that calls {attr} instead",
            target=path,
        )
    if not sites and not glob:
        found = _lookup(module, attrs)
        if found is not None:
            raise WeaveTargetError(
                f"{path} is a {type(found).__name__}, not a function or method: only "
                "callables can be woven (for a property, weave the function its getter calls)",
                target=path,
            )
        raise WeaveTargetError(
            f"{path}: {'.'.join(module_parts)} has no attribute path {'.'.join(attrs)!r}; "
            "check the spelling, or import the module that defines it first",
            target=path,
        )
    return patchable


def _immutable(parent: Any) -> bool:
    """A built-in or extension type: setting its attributes raises TypeError."""
    return isinstance(parent, type) and bool(parent.__flags__ & _IMMUTABLE_TYPE)


_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE (3.10+)


def _lookup(obj: Any, attrs: list[str]) -> Any:
    """The object at ``attrs`` below ``obj`` (class attributes as stored), or None."""
    for attr in attrs:
        if not _has(obj, attr):
            return None
        obj = _raw(obj, attr)
    return obj


def _expand(obj: Any, parts: list[str]) -> list[tuple[Any, str]]:
    head, rest = parts[0], parts[1:]
    if _GLOB.intersection(head):
        names = [n for n in _attribute_names(obj) if fnmatchcase(n, head)]
        if isinstance(obj, types.ModuleType):
            names = [n for n in names if not _imported_from_elsewhere(obj, getattr(obj, n))]
    else:
        names = [head] if _has(obj, head) else []
    if not rest:
        return [(obj, n) for n in names if _is_callable(_raw(obj, n))]
    found: list[tuple[Any, str]] = []
    for n in names:
        child = getattr(obj, n)
        if isinstance(child, types.ModuleType) and not child.__name__.startswith(
            getattr(obj, "__name__", "")
        ):
            continue  # do not follow re-exported foreign modules through a glob
        found.extend(_expand(child, rest))
    return found


def _imported_from_elsewhere(module: types.ModuleType, value: Any) -> bool:
    """A class or function that ``module`` imported from another public module.

    A glob over a module leaves these alone, as ``weave(module)`` does: weaving a class's
    methods reaches every user of that class, not only the module (``threading.Thread``
    imported by the user's own module). What comes from the module's own C part stays in
    (``heapq`` from ``_heapq``, ``os`` from ``posix``), as do a package's re-exports of its
    submodules (``json.*`` reaches ``json.decoder.JSONDecoder``) and functions taken from
    the module's own package (``torch.nn.functional.conv2d`` is ``torch.conv2d``).
    """
    if not (inspect.isclass(value) or inspect.isroutine(value)):
        return False
    owner = getattr(value, "__module__", None)
    if not isinstance(owner, str):
        return False
    name = module.__name__
    if owner == name or owner.startswith(f"{name}."):
        return False  # its own (a private module's too), or its submodules'
    if owner.lstrip("_") == name.lstrip("_") or (name == "os" and owner in ("posix", "nt")):
        return False  # its C part: heapq's _heapq, pickle's _pickle, os's posix
    home = _public_home(owner)
    # A function taken from the module's own package moves only at this attribute.
    return not (home and inspect.isroutine(value) and name.startswith(f"{home}."))


def _public_home(owner: str) -> str:
    """The public module an object's ``__module__`` belongs to: the dotted name up to its
    first private part ('torch._C._nn' -> 'torch'; '' for '_heapq')."""
    parts = itertools.takewhile(lambda part: not part.startswith("_"), owner.split("."))
    return ".".join(parts)


def _is_callable(value: Any) -> bool:
    return callable(value) or isinstance(value, (classmethod, staticmethod))


def _attribute_names(obj: Any) -> list[str]:
    if inspect.isclass(obj):
        return [n for n in dir(obj) if not n.startswith("__")]
    return [n for n in vars(obj) if not n.startswith("__")]


def _has(obj: Any, name: str) -> bool:
    try:
        _raw(obj, name)
    except AttributeError:
        return False
    return True


def _raw(obj: Any, name: str) -> Any:
    if inspect.isclass(obj):
        for klass in obj.__mro__:
            if name in vars(klass):
                return vars(klass)[name]
    return getattr(obj, name)


def _defer(
    record: WeaveRecord,
    path: str,
    names: tuple[str, ...],
    weaver: Weaver,
    strict: bool,
    *,
    quiet: bool = False,
) -> None:
    """Weave ``path`` when its module is imported (wrapt post-import hooks).

    ``quiet``: ``path`` is one expansion of a glob (``_unimported_matches``); that it
    matches nothing is no failure by itself. The weave fails ("matched nothing") when its
    last outstanding expansion finds nothing and nothing else matched. Hooks are put only
    on modules not imported yet, so that registering them imports nothing (a hook on an
    imported module runs at once, and resolving the path would ``getattr`` the submodule,
    which a lazily loading package answers by importing it). The hooks hold the record
    weakly: they cannot be unregistered, and must not keep a removed weave alive.
    """
    if not record.points:
        record.status = "pending import"
    if quiet:
        record.waiting += 1
    done = False
    record_ref = weakref.ref(record)
    module_parts, attrs = _split(path)
    parts = module_parts + attrs if ":" in path else path.split(".")
    candidates = [
        ".".join(parts[:i])
        for i in range(1, len(parts) + 1)
        if not _GLOB.intersection(".".join(parts[:i]))
    ]
    if ":" in path:
        candidates = [".".join(module_parts)]
    if quiet:
        candidates = [name for name in candidates if name not in sys.modules]

    def on_import(module: types.ModuleType) -> None:
        nonlocal done
        record = record_ref()
        with LOCK:
            if record is None or record.cancelled or done:
                return
            try:
                sites = _resolve_path(path)
                if not sites and _submodule_pending(path):
                    return  # a glob found nothing yet: the submodule's own hook comes later
                points = _install_all(sites, names, weaver)
            except Exception as exc:
                if _submodule_pending(path):
                    return  # a parent package was imported; the submodule's hook comes later
                done = True
                if quiet:
                    _expansion_done(record, path, strict)
                    return
                record.status, record.reason = "failed", str(exc)
                get_logger().warning("weave.failed", target=path, reason=str(exc))
                if strict:
                    raise
                return
            done = True
            for jp in points:
                if jp in record.points:  # re-exported by this module: already woven once
                    _release(jp, names, weaver)
            record.points.update(points)
            for deeper in _unimported_matches(path):
                _defer(record, deeper, names, weaver, strict, quiet=True)
            if record.points:
                record.status, record.reason = "active", ""
            if quiet:
                _expansion_done(record, path, strict)
            elif not record.points and not record.waiting:
                record.status, record.reason = "failed", f"{path} matched nothing"

    for name in candidates:
        wrapt.register_post_import_hook(on_import, name)


def _expansion_done(record: WeaveRecord, path: str, strict: bool) -> None:
    """One glob expansion resolved: the weave fails when it was the last and nothing matched."""
    record.waiting -= 1
    if record.points:
        return
    if record.waiting:
        record.reason = f"matched nothing yet: waiting for {record.waiting} modules' imports"
        return
    reason = f"{record.target} matched nothing"
    record.status, record.reason = "failed", reason
    get_logger().warning("weave.failed", target=record.target, reason=reason)
    if strict:
        raise WeaveTargetError(reason, target=record.target)


# -- names -----------------------------------------------------------------------------------


def _dotted(parent: Any, attr: str) -> str:
    if isinstance(parent, types.ModuleType):
        return f"{parent.__name__}.{attr}"
    cls = parent if inspect.isclass(parent) else type(parent)
    return f"{cls.__module__}.{cls.__qualname__}.{attr}"


def _label(target: Any) -> str:
    if isinstance(target, types.ModuleType):
        return target.__name__
    qualname = getattr(target, "__qualname__", None)
    if qualname is not None:
        return f"{getattr(target, '__module__', '?')}.{qualname}"
    return f"<{type(target).__name__} instance>"


def _weak(obj: Any) -> Callable[[], Any]:
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


def _version_problem(requires: str) -> str | None:
    """Why ``requires`` (a requirement such as ``'skorch>=1.0'``) is not met, or None."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import InvalidRequirement, Requirement

    try:
        req = Requirement(requires)
    except InvalidRequirement as exc:
        raise InvalidOptionError(
            f"requires={requires!r} is not a requirement ({exc}): write it like 'skorch>=1.0'",
            option="requires",
            value=requires,
        ) from None
    try:
        installed = version(req.name)
    except PackageNotFoundError:
        return f"{req.name} is not installed"
    if req.specifier and not req.specifier.contains(installed, prereleases=True):
        return f"{req.name} {installed} does not satisfy {req.name}{req.specifier}"
    return None
