"""Resolving what ``weave()`` was given to the places its callables live.

A target (a function, method, class, module, instance, join point proxy, a dotted path
with globs after the module, or ``'pkg.mod.Base+.method'`` for a class and its subclasses)
becomes a list of sites: ``(holder, attribute)`` pairs where a proxy is installed, or
join points woven already. Path helpers also say whether a path's module is imported,
importable, or a package whose matching submodules are not imported yet (``_weave`` and
``_pending`` defer those). Kept apart from installing proxies: nothing here changes the
objects it looks at.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import inspect
import itertools
import pkgutil
import re
import reprlib
import sys
import types
import typing
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

import wrapt

from ._joinpoint import JoinPointProxy, find_proxy
from .errors import WeaveTargetError

if TYPE_CHECKING:
    from ._joinpoint import JoinPoint

__all__: list[str] = []  # helpers of weave() only: nothing here is API

_GLOB = frozenset("*?[")


def _resolve_object(target: Any) -> list[tuple[Any, str]] | list[JoinPoint]:
    if type(target) is JoinPointProxy:
        return [target._self_joinpoint]
    if isinstance(target, types.ModuleType):
        # Its functions, and the bound methods it holds of its own code (random.randint).
        return [
            (target, n)
            for n, v in vars(target).items()
            if not n.startswith("_")
            and (_is_function(v) or inspect.ismethod(v) or find_proxy(v) is not None)
            and getattr(v, "__module__", None) == target.__name__
        ]
    if inspect.isclass(target):
        return [(target, n) for n, v in vars(target).items() if _is_method(n, v)]
    if typing.get_origin(target) is not None:  # Box[int], list[int], int | None
        raise _alias_error(target)
    if inspect.ismethod(target):
        held = _module_holding(target)
        if held is not None:
            return [held]
        owner, name = target.__self__, target.__func__.__name__
        _usable_site(owner, name)
        return [(owner, name)]
    if inspect.isfunction(target) or isinstance(target, (classmethod, staticmethod)):
        return [_locate(getattr(target, "__func__", target))]
    if isinstance(target, _PROPERTIES):
        raise WeaveTargetError(
            f"cannot weave a {type(target).__name__} object: only callables can be woven; "
            f"{_PROPERTY_HINT}",
            target=repr(target),
        )
    if hasattr(target, "__dict__") and _is_instance(target):
        return _instance_sites(target)
    if not hasattr(target, "__dict__") and hasattr(type(target), "__slots__"):
        kind = type(target).__qualname__
        raise WeaveTargetError(
            f"cannot weave this {kind} instance: it has no __dict__ (its class uses "
            f"__slots__) to hold per-instance proxies; weave the class {kind} instead",
            target=repr(target),
        )
    return _other_object(target)


def _alias_error(alias: Any) -> WeaveTargetError:
    """Why a parameterised type (``Box[int]``) or an annotation (``int | None``) is not
    woven, naming the class to weave instead: the alias object's own methods are typing's."""
    origin = typing.get_origin(alias)
    if not inspect.isclass(origin) or isinstance(alias, types.UnionType):
        message = f"{alias!r} is a type annotation, not code: weave the functions or classes "
        message += "it describes"
    elif _immutable(origin):
        message = (
            f"{alias!r} is a parameterised alias of the built-in type {origin.__qualname__}, "
            "whose methods cannot be replaced; weave the Python code that calls them instead"
        )
    else:
        name = origin.__qualname__
        message = (
            f"{alias!r} is a parameterised alias of the class {name}: weave {name} itself, "
            f"weave({name}) (every instance, whatever its type arguments)"
        )
    return WeaveTargetError(message, target=repr(alias))


def _module_holding(method: types.MethodType) -> tuple[types.ModuleType, str] | None:
    """Where the module that defines ``method``'s function holds this very bound method,
    or None. ``random.randint`` is ``random._inst.randint`` bound once at import: its
    callers call the module attribute, which a proxy on the instance would not reach, so
    it is woven there, as ``weave('random.randint')`` does. A bound method made by the
    attribute access that gave it (``obj.method``, ``Cls.classmethod``) is held nowhere."""
    module = sys.modules.get(getattr(method.__func__, "__module__", None) or "")
    if module is None:
        return None
    name = method.__func__.__name__
    if vars(module).get(name) is method:
        return module, name
    # A copy: another thread may be adding to the module (an import in progress).
    return next(((module, n) for n, v in list(vars(module).items()) if v is method), None)


def _other_object(target: Any) -> list[tuple[Any, str]]:
    """A function under a C wrapper (``functools.lru_cache``) is woven where it lives;
    anything else is refused, saying what to give instead."""
    if callable(target) and hasattr(target, "__wrapped__"):
        return [_locate(target)]
    if inspect.isbuiltin(target) or inspect.ismethoddescriptor(target):
        raise _built_in_error(target)
    if isinstance(target, (list, tuple, set, frozenset)):
        raise _many_targets_error(target)
    if isinstance(target, functools.partial):
        # Held by no name of its own: a proxy has nowhere to go but where it is held.
        func = getattr(target.func, "__qualname__", repr(target.func))
        raise WeaveTargetError(
            f"cannot weave this functools.partial of {func} as an object: a proxy must "
            "replace it where it is held; weave it there by its path "
            f"('pkg.mod.name'), or the function it calls (weave({func}))",
            target=repr(target),
        )
    raise WeaveTargetError(
        f"cannot weave {target!r} ({type(target).__name__}): give a function, method, class, "
        "module, instance or a dotted path such as 'pkg.module.Class.method'",
        target=repr(target),
    )


def _many_targets_error(targets: Any) -> WeaveTargetError:
    """Why a list, tuple or set of targets is refused: ``weave`` takes one target and
    gives one handle, so the way to weave several is one call each, or one glob."""
    return WeaveTargetError(
        f"cannot weave a {type(targets).__name__} of targets {_labels(targets)}: "
        "weave() takes one target; weave each (handles = [weave(t, ...) for t in "
        "targets]; one aspect instance may be woven into all of them), or give one dotted "
        "path with a glob matching them all ('pkg.module.*', 'pkg.module.Class.get_*')",
        target=repr(targets),
    )


def _labels(targets: Any) -> str:
    """The first few ``targets`` by name (a function as ``module.qualname``, which its
    repr, a proxy's or a function's address, would cut short), for an error message."""
    items = list(targets)
    shown = [_label(t) for t in items[:4]]
    more = f", ... {len(items)} in all" if len(items) > 4 else ""
    return f"[{', '.join(shown)}{more}]"


def _label(target: Any) -> str:
    qualname = getattr(target, "__qualname__", None)
    module = getattr(target, "__module__", None)
    if isinstance(target, str) or not isinstance(qualname, str):
        return reprlib.repr(target)
    return f"{module}.{qualname}" if isinstance(module, str) else qualname


def _built_in_error(target: Any) -> WeaveTargetError:
    """Why a built-in function or a C type's method is not woven by object."""
    name = getattr(target, "__name__", repr(target))
    bound = getattr(target, "__self__", None)  # the module of a function, or an object
    owner = getattr(target, "__objclass__", None)  # dict.get
    if owner is None and bound is not None and not isinstance(bound, types.ModuleType):
        owner = bound if isinstance(bound, type) else type(bound)  # {}.get, dict.fromkeys
    if owner is not None and _immutable(owner):  # the path's own message
        return WeaveTargetError(
            f"{owner.__qualname__}.{name} is a method of the built-in type "
            f"{owner.__qualname__}, whose attributes cannot be replaced; weave the Python "
            f"code that calls {name} instead",
            target=f"{owner.__qualname__}.{name}",
        )
    return WeaveTargetError(
        f"cannot weave the built-in function {name} by object: it does not say which module "
        "attribute its callers use (os.getpid is posix.getpid), so weave it by its dotted "
        "path, e.g. weave('math.sqrt') or weave('builtins.len')",
        target=name,
    )


def _metaclass_defining(owner: Any, name: str) -> type | None:
    """The metaclass that defines ``name`` when the class ``owner`` has it only from there
    (``MyABC.register`` is ``ABCMeta.register``), or None. A proxy in the class would bind
    such a method to that class for its subclasses too, and show it on its instances."""
    if not inspect.isclass(owner) or any(name in vars(cls) for cls in owner.__mro__):
        return None
    return next((meta for meta in type(owner).__mro__ if name in vars(meta)), None)


def _usable_site(owner: Any, name: str, *, glob: bool = False) -> bool:
    """Whether ``owner.name`` is a site of ``owner``'s own; a method it has only from its
    metaclass is refused (``WeaveTargetError``), or left out when a glob matched it."""
    meta = _metaclass_defining(owner, name)
    if meta is None:
        return True
    if glob:
        return False
    raise _metaclass_method_error(owner, name, meta)


def _metaclass_method_error(owner: Any, name: str, meta: type) -> WeaveTargetError:
    return WeaveTargetError(
        f"{owner.__qualname__}.{name} is a method of its metaclass {meta.__qualname__}, "
        f"which a proxy on {owner.__qualname__} would bind to {owner.__qualname__} for its "
        f"subclasses too: weave '{meta.__module__}.{meta.__qualname__}.{name}' instead "
        f"(every class made by {meta.__qualname__})",
        target=f"{owner.__module__}.{owner.__qualname__}.{name}",
    )


def _instance_sites(target: Any) -> list[tuple[Any, str]]:
    """The methods of one instance (``weave(obj)``): its class's public functions, but for
    data of the instance's own that shadows one."""
    cls = type(target)
    own = vars(target)
    return [
        (target, n)
        for n in dir(cls)
        if not n.startswith("_")
        and _is_function(inspect.getattr_static(cls, n))
        and (n not in own or callable(own[n]))
    ]


def _is_function(value: Any) -> bool:
    """A function, or a function under a C wrapper that names it (a method decorated with
    ``functools.cache`` / ``lru_cache``): what a class weave takes as a method, as a glob
    over the class does."""
    if inspect.isfunction(value):
        return True
    try:
        return callable(value) and inspect.isfunction(getattr(value, "__wrapped__", None))
    except Exception:  # an attribute of a class, any object: its lookup may raise
        return False


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
        _is_function(value)
        or isinstance(value, (classmethod, staticmethod))
        or type(value) is JoinPointProxy
    )


#: Attributes whose functions run through them (``obj.p`` calls ``fget``), never as
#: attributes a proxy could replace.
_PROPERTIES = (property, functools.cached_property)
_PROPERTY_HINT = "for a property, weave the function its getter calls"


def _accessor_of(found: Any, func: Any) -> bool:
    """Whether ``func`` is the getter, setter or deleter of the property ``found`` (or the
    function of a ``functools.cached_property``): the function ``weave(C.p.fget)`` gets."""
    if isinstance(found, property):
        return any(func is f for f in (found.fget, found.fset, found.fdel))
    return isinstance(found, functools.cached_property) and found.func is func


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
        if found is not None and _wraps(func, found):
            raise WeaveTargetError(
                f"this {type(func).__name__} of {module.__name__}.{qualname} is not "
                f"{module.__name__}.{qualname} itself, which it calls directly, so a proxy "
                "there would not see its calls: weave it where it is held, by its path "
                "('pkg.mod.cached')",
                target=qualname,
            )
        if found is not None and wrapt.unwrapped(getattr(found, "__func__", found)) is original:
            return parent, attr
        if found is not None and find_proxy(found) is not None:
            return parent, attr
        if found is not None and _accessor_of(found, original):
            raise WeaveTargetError(
                f"this function is an accessor of the {type(found).__name__} "
                f"{module.__name__}.{qualname}, which holds it where no proxy can replace "
                f"it; {_PROPERTY_HINT}",
                target=qualname,
            )
    raise WeaveTargetError(
        f"cannot find where {qualname or func!r} is defined, so it cannot be replaced there "
        "(a local function or one removed from its module): weave the object that holds it "
        "and its name, e.g. weave('pkg.module.function') or weave(holder_class)",
        target=qualname,
    )


def _wraps(func: Any, found: Any) -> bool:
    """Whether ``func`` is a wrapper around ``found`` made somewhere else than where
    ``found`` is held (``functools.lru_cache(mod.f)`` kept by another name); never one of
    our proxies (a stale reference to a removed one is woven where it was)."""
    if found is func or find_proxy(func) is not None:
        return False
    return any(inner is found for inner in itertools.islice(wrapt.wrapper_chain(func), 1, None))


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


#: One part of a target's dotted path: a name or a glob ('*', '?', '[!_]'), and a '+'
#: at its end for a class and its subclasses ('torch.optim.Optimizer+.step').
_PATH_PART = re.compile(r"[\w*?\[\]!-]+\+?")
_PATH_EXAMPLES = "write it like 'pkg.mod.Class.method', 'pkg.mod:Class.method' or 'json.*'"


def path_problem(target: str, *, in_config: bool = False) -> str | None:
    """Why ``target`` cannot be a dotted path to weave, or None: a mistake in how it is
    written, refused at once (by ``weave()`` and at a config's key) rather than skipped
    or left waiting for an import that could never match it."""
    nopath = f"{target!r} is not a dotted path"
    if "," in target:
        listed = [t.strip() for t in target.split(",") if t.strip()]
        if in_config:
            return f"{nopath}: several targets go in a list: target: [{', '.join(listed)}]"
        each = " and ".join(f"weave({t!r}, ...)" for t in listed)
        return f"{nopath}: weave several targets one by one: {each}"
    module, _, attrs = target.partition(":")
    if ":" in attrs:
        return (
            f"{nopath}: it has more than one ':' (one ':' says where the module ends: "
            "'pkg.mod:Class.method')"
        )
    # A ':' with nothing after it ('json:') is an empty part too, not the whole module.
    parts = module.split(".") + (attrs.split(".") if ":" in target else [])
    if not all(parts):
        return (
            f"{nopath}: it has an empty part (two dots in a row, or a '.' or ':' at an "
            f"end); {_PATH_EXAMPLES}"
        )
    bad = next((part for part in parts if not _PATH_PART.fullmatch(part)), None)
    if bad is not None:
        return f"{nopath}: {bad!r} is neither a name nor a glob; {_PATH_EXAMPLES}"
    return None


def _imported(path: str) -> bool:
    """Whether the module part of ``path`` is imported already (for ``'json+.x'``,
    ``json``'s: the module part ends before a ``'+'``)."""
    module, _ = _split(path.partition("+")[0])
    return bool(module) and ".".join(module) in sys.modules


def _findable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _missing_module(path: str) -> str | None:
    """Why ``path`` can never be woven (its top package does not exist), or None."""
    top = path.partition("+")[0].partition(":")[0].split(".")[0]
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


def _namespace_matches(path: str) -> list[str]:
    """Paths for the submodules that a glob right below a namespace package not imported
    yet matches (``'ns.*.func'`` gives ``'ns.mod.func'``), found on disk.

    A namespace package (a folder without ``__init__.py``) has no loader for wrapt's
    post-import hooks to chain, so a hook on it never runs, and the glob would wait for
    ever; its submodules are plain modules, whose hooks do. Only where finding the package
    imports nothing (a top-level one, or one whose parent is imported): below a parent not
    imported yet, this is asked again when the parent's hook runs.
    """
    if ":" in path:
        return []
    parts = path.split(".")
    at = next((i for i, part in enumerate(parts) if _GLOB.intersection(part)), 0)
    package, rest = ".".join(parts[:at]), parts[at + 1 :]
    if not at or not rest or package in sys.modules:
        return []
    spec = _namespace_spec(package)
    if spec is None:
        return []
    subs = [info.name for info in pkgutil.iter_modules(spec.submodule_search_locations)]
    return [".".join([package, sub, *rest]) for sub in subs if fnmatchcase(sub, parts[at])]


def _namespace_spec(package: str) -> importlib.machinery.ModuleSpec | None:
    """The spec of ``package`` if it is a namespace package (no ``__init__.py``: no origin,
    a search path), found without importing anything (it is imported, top-level, or its
    parent is); else None."""
    module = sys.modules.get(package)
    spec: importlib.machinery.ModuleSpec | None
    if module is not None:
        spec = getattr(module, "__spec__", None)
    elif "." in package and package.rpartition(".")[0] not in sys.modules:
        return None
    else:
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            return None
    if spec is None or spec.origin is not None or not spec.submodule_search_locations:
        return None
    return spec


def _namespace_glob(path: str) -> str | None:
    """Why ``path``, a glob right at a namespace package (``'ns.*'``), can match nothing,
    or None: a glob at a package names the package's own functions (``'pkg.*'`` weaves
    what ``pkg/__init__.py`` defines, not its modules'), and a namespace package (a
    folder without ``__init__.py``) has none; the weave would wait for ever. Only where
    finding the package imports nothing (it is imported, top-level, or its parent is):
    below a parent not imported yet, this is asked again when the parent's hook runs.
    """
    if "+" in path:
        return None
    *head, last = path.replace(":", ".").split(".")
    if not head or not _GLOB.intersection(last) or _GLOB.intersection(".".join(head)):
        return None
    package = ".".join(head)
    if _namespace_spec(package) is None:
        return None
    modules = "its modules" if last == "*" else f"its modules matching {last!r}"
    return (
        f"{path!r} names the functions of {package!r} itself, a namespace package (a folder "
        f"without __init__.py), which has none: write '{package}.{last}.*' for the "
        f"functions of {modules}, or '{package}.<module>.*' for one module's"
    )


def _module_of(path: str) -> str:
    """The submodule an expansion of ``_unimported_matches`` waits for."""
    module, attrs = _split(path)
    return ".".join([*module, attrs[0]]) if attrs else ".".join(module)


def _resolve_path(path: str) -> list[tuple[Any, str]]:
    if "+" in path:
        return _subtype_sites(path)
    module_parts, attrs = _split(path)
    module = sys.modules[".".join(module_parts)]
    if not attrs:
        found_sites: list[tuple[Any, str]] = _resolve_object(module)  # type: ignore[assignment]
        if not found_sites:
            raise WeaveTargetError(_holds_nothing(path, module), target=path)
        return found_sites
    glob = bool(_GLOB.intersection(path))
    sites: list[tuple[Any, str]] = []
    for parent, attr in _expand(module, attrs):
        if _looked_up_on_type(parent, attr):
            if glob:
                continue
            raise _looked_up_on_type_error(path, parent, attr)
        value = _raw(parent, attr)
        if inspect.isclass(value) or isinstance(value, types.ModuleType):
            sites.extend(_resolve_object(value))  # type: ignore[arg-type]
        elif _usable_site(parent, attr, glob=glob):
            sites.append((parent, attr))
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
            if inspect.isclass(found) or isinstance(found, types.ModuleType):
                raise WeaveTargetError(_holds_nothing(path, found), target=path)
            kind = type(found).__name__
            if (
                not callable(found)
                and hasattr(type(found), "__get__")
                and not hasattr(type(found), "__set__")  # data: a slot, a property
                and not isinstance(found, _PROPERTIES)
            ):
                # A singledispatchmethod or partialmethod: its class's attribute makes a
                # new callable at each access; its own methods ('register') are not it.
                raise WeaveTargetError(
                    f"{path} is {_a(kind)}, a descriptor that makes a new callable each "
                    "time it is looked up, not a function or method, which are what can be "
                    "woven; weave the function it calls where that function is held, or the "
                    "methods that call it",
                    target=path,
                )
            instance = hasattr(found, "__dict__") and _is_instance(found)
            methods = _instance_sites(found) if instance else []
            if methods:
                raise WeaveTargetError(
                    f"{path} is {_a(type(found).__qualname__)} instance, not a function or method: "
                    "to weave its methods for it alone, weave the object itself "
                    f"(weave(obj)), or one method by its path ('{path}.{methods[0][1]}')",
                    target=path,
                )
            raise WeaveTargetError(
                f"{path} is {_a(kind)}, not a function or "
                "method: only callables can be woven (for a property, weave the function its "
                "getter calls)",
                target=path,
            )
        raise WeaveTargetError(
            f"{path}: {'.'.join(module_parts)} has no attribute path {'.'.join(attrs)!r}"
            f"{_meant(module, module_parts, attrs)}; check the spelling, or import the module "
            "that defines it first",
            target=path,
        )
    return patchable


def _a(name: str) -> str:
    """``name`` with its article: ``'an int'``, ``'an Engine'``, ``'a Client'``."""
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _why_nothing(label: str, target: Any) -> str | None:
    """Why the class, module or instance ``target`` (named ``label``) gave no site to
    weave, saying what to weave instead; None for anything else."""
    if inspect.isclass(target) or isinstance(target, types.ModuleType):
        return _holds_nothing(label, target)
    if not _is_instance(target):
        return None
    cls = type(target)
    name = f"{cls.__module__}.{cls.__qualname__}"
    message = f"this {name} instance has no public method to weave for it alone"
    if not callable(target):
        return f"{message}: weave the functions it calls, or its class's methods by path"
    return (
        f"{message}; calling it runs {name}.__call__, which Python looks up on its class, "
        "not on the instance: weave it where it is held to advise the calls made through "
        f"there (weave('pkg.mod.handler')), or '{name}.__call__' for every instance"
    )


def _looked_up_on_type(parent: Any, attr: str) -> bool:
    """Whether ``attr`` is a ``__dunder__`` attribute of an object that is not a class or
    a module: Python looks special methods up on the object's type, and the others
    (``__wrapped__``) are only read, so a proxy in the object's own ``__dict__`` would
    never run when the object is called (``f.__call__``)."""
    dunder = attr.startswith("__") and attr.endswith("__")
    return dunder and not (inspect.isclass(parent) or isinstance(parent, types.ModuleType))


def _looked_up_on_type_error(path: str, parent: Any, attr: str) -> WeaveTargetError:
    holder = path.replace(":", ".").rpartition(".")[0]
    cls = type(parent)
    for_all = f"'{cls.__module__}.{cls.__qualname__}.{attr}'"
    if inspect.isroutine(parent):
        fix = f"weave '{holder}' itself"
    elif attr == "__call__":
        fix = f"weave '{holder}' itself (where it is held), or {for_all} for every instance"
    else:
        fix = f"weave {for_all} (every instance of {cls.__qualname__})"
    return WeaveTargetError(
        f"{path}: a proxy in {holder}'s own {attr} would never run (Python looks special "
        "methods up on the type, not on the object, and a wrapper calls what it holds, not "
        f"its __wrapped__): {fix}",
        target=path,
    )


def _holds_nothing(label: str, found: type | types.ModuleType) -> str:
    """Why the class or module ``label`` names has no site to weave, saying what to weave
    instead."""
    if inspect.isclass(found) and _immutable(found):
        return (
            f"{label} is a built-in type, whose attributes cannot be replaced; weave the "
            "Python code that calls it instead"
        )
    if inspect.isclass(found):
        return (
            f"{label} is a class with no methods of its own to weave (weaving a class weaves "
            "the functions, classmethods and staticmethods in its __dict__, leaving out "
            f"__dunder__ methods other than __call__): weave one by its path, e.g. "
            f"'{label}.__init__', or '{label}.method' for a method it inherits"
        )
    return (
        f"{label} is a module with no functions of its own to weave (weaving a module "
        "weaves the public functions defined in it, not those it imports): weave a "
        f"callable it holds by its path, '{label}.name'"
    )


def _meant(module: types.ModuleType, module_parts: list[str], attrs: list[str]) -> str:
    """`` (did you mean 'pkg.mod.Cls.name'?)`` for the first of ``attrs`` that is missing:
    its mangled name (``__open`` in class ``Vault`` is stored as ``_Vault__open``), or a
    close spelling among its holder's attributes; ``""`` when there is none."""
    holder: Any = module
    for i, attr in enumerate(attrs):
        if _has(holder, attr):
            holder = _raw(holder, attr)
            continue
        names = (
            _attribute_names(holder) if inspect.isclass(holder) or inspect.ismodule(holder) else []
        )
        mangled = f"_{getattr(holder, '__name__', '').lstrip('_')}{attr}"
        if inspect.isclass(holder) and attr.startswith("__") and mangled in names:
            close = [mangled]
        else:
            close = difflib.get_close_matches(attr, names, n=1)
        if not close:
            return ""
        return f" (did you mean {'.'.join([*module_parts, *attrs[:i], close[0]])!r}?)"
    return ""


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


# -- 'pkg.mod.Base+.method': a class and its subclasses ------------------------------------

_SUBTYPE_FORM = "'pkg.mod.Base+.method' (a glob such as 'pkg.mod.Base+.*' for every method)"


def _subtype_parts(path: str) -> tuple[str, str] | None:
    """``('pkg.mod.Base', 'method')`` for ``'pkg.mod.Base+.method'``, None for a path
    without ``+``; a ``+`` anywhere else is refused, saying where it goes."""
    if "+" not in path:
        return None
    base, _, rest = path.partition("+")
    method = rest[1:]
    if not rest or rest == ".":
        raise _subtype_error(path, "nothing follows the '+'", _no_method_hint(base))
    if "+" in rest:
        raise _subtype_error(path, "it has more than one '+'")
    if not base or base[-1] in ".:" or not rest.startswith("."):
        raise _subtype_error(path, "a '+' goes right after a class name, then '.method'")
    if "." in method or ":" in method:
        raise _subtype_error(path, f"only a method name may follow '+.', not {method!r}")
    if _GLOB.intersection(base):
        raise _subtype_error(path, "the class before the '+' must be named without globs")
    return base, method


def _no_method_hint(base: str) -> str:
    """For ``'pkg.Base.method+'``: where the ``+`` goes, unless ``base`` is a class or a
    module as far as the modules imported tell."""
    head, _, last = base.rpartition(".")
    module_parts, attrs = _split(base)
    module = sys.modules.get(".".join(module_parts))
    known = module is not None and (not attrs or inspect.isclass(_lookup(module, attrs)))
    if not head or known:  # 'pkg.mod.Base+' or 'pkg.mod+': no method moved before the '+'
        return ""
    return f"; if {last} is the method, the '+' goes after its class: '{head}+.{last}'"


def _subtype_error(path: str, problem: str, hint: str = "") -> WeaveTargetError:
    return WeaveTargetError(
        f"{path!r}: {problem}{hint}. '+' selects a class and its subclasses: write {_SUBTYPE_FORM}",
        target=path,
    )


def _subtype_base(path: str) -> type | None:
    """The class before the ``+`` of ``path``, whose module is imported; None when the
    module does not have it (yet). Anything but a class defined in Python is refused."""
    base_path, method = _subtype_parts(path) or (path, "")
    module_parts, attrs = _split(base_path)
    module = sys.modules.get(".".join(module_parts))
    found = _lookup(module, attrs) if module is not None else None
    if found is None or (inspect.isclass(found) and not _immutable(found)):
        return found
    typed = base_path.replace(":", ".")
    if inspect.isclass(found):
        problem = "a built-in type, whose subclasses' creation cannot be followed"
        fix = f"weave a class of yours and its subclasses, e.g. 'pkg.mod.MyClass+.{method}'"
    else:
        kind = "module" if isinstance(found, types.ModuleType) else type(found).__name__
        problem = f"a {kind}, not a class: '+' selects a class and its subclasses"
        fix = f"to weave {method} there, write '{typed}.{method}'"
        if inspect.isroutine(found):  # a function has no methods to weave
            fix = f"name a class before the '+', e.g. 'pkg.mod.MyClass+.{method}'"
    raise WeaveTargetError(f"{path}: {typed} is {problem}; {fix}", target=path)


def _subtype_class(path: str) -> type:
    """The class before the ``+`` of ``path``, which must be there."""
    base = _subtype_base(path)
    if base is None:
        base_path = path.partition("+")[0]
        module_parts, attrs = _split(base_path)
        module = sys.modules.get(".".join(module_parts))
        meant = _meant(module, module_parts, attrs) if module is not None else ""
        raise WeaveTargetError(
            f"{path}: there is no {base_path.replace(':', '.')}{meant}; check the spelling, "
            "or import the module that defines it first",
            target=path,
        )
    return base


def _subtype_sites(path: str) -> list[tuple[Any, str]]:
    """The sites of ``'pkg.mod.Base+.method'``: ``Base.method`` (where ``Base``'s own
    method or the one it inherits is found, as for ``'pkg.mod.Base.method'``), and each
    subclass's own ``method`` (in its ``__dict__``: a subclass that inherits it reaches
    the proxy through its MRO)."""
    _, pattern = _subtype_parts(path) or (path, "")
    base = _subtype_class(path)
    sites = _base_sites(base, pattern)
    for cls in _subclasses(base):
        sites.extend(_own_sites(cls, pattern))
    return sites


def _base_sites(base: type, pattern: str) -> list[tuple[Any, str]]:
    glob = bool(_GLOB.intersection(pattern))
    sites: list[tuple[Any, str]] = []
    for parent, attr in _expand(base, [pattern]):
        if inspect.isclass(_raw(parent, attr)):
            continue  # a nested class: not a method
        if _usable_site(parent, attr, glob=glob):
            sites.append((parent, attr))
    return sites


def _own_sites(cls: type, pattern: str) -> list[tuple[Any, str]]:
    """``(cls, name)`` for each method ``cls`` defines itself whose name ``pattern``
    matches (a glob leaves out dunder names, as globs over a class do)."""
    if _GLOB.intersection(pattern):
        names = [n for n in vars(cls) if fnmatchcase(n, pattern) and not n.startswith("__")]
    else:
        names = [pattern] if pattern in vars(cls) else []
    return [
        (cls, n)
        for n in names
        if _is_callable(value := vars(cls)[n])
        and not inspect.isclass(value)
        and not _stands_in(value)
    ]


def _stands_in(value: Any) -> bool:
    """Whether ``value`` is the hook that a ``'pkg.Cls+...'`` weave put in ``Cls.__dict__``
    in place of the ``__init_subclass__`` that ``Cls`` inherits: not a method of its own
    (a proxy on it would outlive the hook's removal as an ``__init_subclass__`` of Cls),
    also under the proxy a ``'pkg.Cls+.__init_subclass__'`` weave put on it."""
    while type(value) is JoinPointProxy:
        value = value.__wrapped__
    if not isinstance(value, wrapt.FunctionWrapper):
        return False
    return getattr(value._self_wrapper, "stands_in", False) is True


def _subclasses(base: type) -> list[type]:
    """Every subclass of ``base``, transitively, each once (built-in types left out)."""
    found: list[type] = []
    seen = {id(base)}
    todo = [base]
    while todo:
        subs: list[type] = type.__subclasses__(todo.pop(0))
        for sub in subs:
            if id(sub) not in seen and not _immutable(sub):
                seen.add(id(sub))
                found.append(sub)
                todo.append(sub)
    return found
