"""Aspect types by name, so configuration files can say ``{type: Timed, trace: true}``.

A ``Registry`` maps names to classes (or any factory). Names resolve in this order:

1. what was registered with ``register`` — a class, or a ``'package.module:Name'`` string
   that is imported only when the name is first used (so listing the shipped aspects costs
   nothing at import time);
2. plugins: entry points of the group ``aspecthook.aspects`` that installed packages
   declare, e.g. in their ``pyproject.toml``::

       [project.entry-points."aspecthook.aspects"]
       Traced = "mypkg.aspects:Traced"

   The entry-point list is read once, on the first name the registry does not know, and a
   plugin is imported only when its name is used;
3. the registry's ``fallback`` names, if it has one (``aspecthook.train.MODELS`` falls back
   to the classes of ``torch.nn``), read on first use;
4. an explicit ``'package.module:Name'`` path, imported on the spot; a registry made with
   ``accepts=`` takes only what that test accepts (``ASPECTS``: aspect, hook and callback
   classes), checked before anything is called, so a config file cannot call an arbitrary
   function. Anything else is registered in code and named.

``build({'type': 'Timed', **params})`` checks the parameter names against the
constructor's signature before calling it, so a typo in a config file is reported with
the aspect's valid parameters instead of a bare ``TypeError`` from deep inside.
``ASPECTS`` is the registry of aspect types that ``aspecthook run`` and
``Runner.from_config`` read.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import inspect
import re
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from ._fork import OwnsLock
from .errors import AspectParameterError, InvalidOptionError, UnknownAspectError

__all__ = ["ASPECTS", "ENTRY_POINT_GROUP", "Parameters", "Registry"]

ENTRY_POINT_GROUP = "aspecthook.aspects"

F = TypeVar("F", bound=Callable[..., Any])


class _Ambiguous:
    """A plugin name that installed packages give for different objects (see
    ``Registry._read_plugins``)."""

    def __init__(self, points: list[importlib.metadata.EntryPoint]) -> None:
        self.points = points


class Registry(OwnsLock):
    """Names of aspect types (or of any other kind of factory) for configuration files.

    ``kind`` only words the error messages (``"unknown aspect type 'Timd'"``); ``group`` is
    the entry-point group whose plugins extend the registry (None: no plugins);
    ``fallback`` returns names to resolve when neither a registered name nor a plugin fits
    (called once, on first use, so it may import what it needs).

    A copy (``copy.copy`` or ``copy.deepcopy``), or an unpickled registry, has names of
    its own, starting from this one's: registering in either leaves the other as it
    was. Even a deep copy names the same classes and factories (a copied class would be
    another type). Its lock is its own too, made anew in a forked child (``OwnsLock``).
    """

    def __init__(
        self,
        kind: str = "aspect",
        *,
        group: str | None = None,
        fallback: Callable[[], Mapping[str, Callable[..., Any]]] | None = None,
        accepts: tuple[Callable[[Any], bool], str] | None = None,
    ) -> None:
        self.kind = kind
        self.group = group
        # (test, what it wants): what an explicit 'package.module:Name' path (not a name
        # registered in code) may name, checked before anything is called, so a config
        # file cannot run an arbitrary callable ('os:system').
        self._accepts = accepts
        # Called once, on first use: names it returns resolve after registered names and
        # plugins, so registering a name it also has shadows it instead of clashing.
        self._fallback_source = fallback
        self._fallback: dict[str, Callable[..., Any]] | None = None if fallback else {}
        # name -> a factory, a 'module:Name' string, or an importlib EntryPoint (plugins);
        # what strings and entry points load is cached in _loaded on first use.
        self._entries: dict[str, Any] = {}
        self._loaded: dict[str, Callable[..., Any]] = {}
        self._plugins_read = group is None
        # A fork while another thread builds from a config (this lock is held while a
        # plugin or torch is imported): the child gets the lock back unlocked.
        self._own_lock()

    def _reset_locks(self) -> None:
        """A new lock (also in a forked child, where another thread may have held it)."""
        self._lock = threading.RLock()

    def _copied_data(self, memo: dict[int, Any] | None) -> dict[str, Any]:
        """The names, for a copy that registers apart (``OwnsLock``): mappings of its own
        to the same factories, which even a deep copy keeps as they are."""
        entries, loaded = dict(self._entries), dict(self._loaded)
        fallback = None if self._fallback is None else dict(self._fallback)
        if memo is not None:
            kept = [*entries.values(), *loaded.values(), *(fallback or {}).values()]
            memo.update((id(value), value) for value in kept)
        return {"_entries": entries, "_loaded": loaded, "_fallback": fallback}

    # -- registering -------------------------------------------------------------------

    @overload
    def register(
        self, obj: None = None, /, *, name: str | None = None, replace: bool = False
    ) -> Callable[[F], F]: ...

    @overload
    def register(self, obj: str, /, *, name: str | None = None, replace: bool = False) -> str: ...

    @overload
    def register(self, obj: F, /, *, name: str | None = None, replace: bool = False) -> F: ...

    def register(
        self, obj: Any = None, /, *, name: str | None = None, replace: bool = False
    ) -> Any:
        """Register a class under ``name`` (default: its ``__name__``) and return it.

        Three forms: ``@registry.register`` or ``@registry.register(name='Alias')`` on a
        class; ``registry.register(cls, name='Alias')``; and
        ``registry.register('package.module:Name')``, which imports the module only when
        the name is first looked up. A name already taken by something else is refused
        unless ``replace=True``; registering the same thing again is a no-op.
        """
        if obj is None:

            def decorator(cls: F) -> F:
                return self.register(cls, name=name, replace=replace)

            return decorator
        key = _registered_name(obj, name)
        with self._lock:
            old = self._entries.get(key)
            if isinstance(old, (importlib.metadata.EntryPoint, _Ambiguous)):
                old = None  # what is registered in code wins over a plugin of that name
            if old is not None and not replace and not _same(old, obj, self._loaded.get(key)):
                raise InvalidOptionError(
                    f"{self.kind} name {key!r} is already registered for {_describe(old)}; "
                    "give another name= or pass replace=True",
                    option="name",
                    value=key,
                )
            self._entries[key] = obj
            self._loaded.pop(key, None)
        return obj

    # -- looking up ----------------------------------------------------------------------

    def get(self, name: str) -> Callable[..., Any]:
        """The class registered as ``name``, a plugin's, or the one a ``'pkg.mod:Name'``
        path names; ``UnknownAspectError`` (listing the known names and the closest one)
        when none fits."""
        if not isinstance(name, str):
            raise self._unknown("", f"{self.kind} type {name!r} is not a name: give a string.")
        with self._lock:
            if name not in self._entries and not self._plugins_read:
                self._read_plugins()
            if name in self._loaded:
                return self._loaded[name]
            if name in self._entries:
                entry = self._entries[name]
                if isinstance(entry, _Ambiguous):
                    raise self._ambiguous(name, entry)
                if isinstance(entry, (str, importlib.metadata.EntryPoint)):
                    entry = self._loaded[name] = self._load(name, entry)
                return entry  # type: ignore[no-any-return]
            fallback = self._fallbacks().get(name)
            if fallback is not None:
                return fallback
        if ":" in name:
            return self._checked(name, self._load(name, name))
        raise self._unknown(name)

    def _checked(self, name: str, value: Callable[..., Any]) -> Callable[..., Any]:
        if self._accepts is None or self._accepts[0](value):
            return value
        with self._lock:  # a registered object is named by its name, which get() accepts
            named = {**self._fallbacks(), **self._loaded, **self._entries}
        known = next((k for k, v in named.items() if v is value), None)
        fix = (
            f"it is registered as {known!r}: give that name"
            if known is not None
            else "register anything else in code (registry.register) and give its name"
        )
        raise self._unusable(
            name,
            f"{self.kind} type {name!r} is {_describe(value)}, not {self._accepts[1]}: a path "
            f"in a config must name one; {fix}",
        )

    def names(self) -> list[str]:
        """Every name this registry knows, plugins included, sorted."""
        with self._lock:
            if not self._plugins_read:
                self._read_plugins()
            return sorted({*self._entries, *self._fallbacks()})

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.names()

    def __repr__(self) -> str:
        return f"<Registry {self.kind!r}: {', '.join(self.names())}>"

    # -- building ------------------------------------------------------------------------

    def build(self, cfg: Mapping[str, Any] | str, /) -> Any:
        """An instance from ``{'type': name_or_class, **params}`` (or just a name).

        The parameter names are checked against the constructor's signature first, so a
        wrong one raises ``AspectParameterError`` naming the type and its parameters.
        Lists given where the parameter's default is a tuple become tuples (YAML and TOML
        have no tuples). Errors the constructor itself raises propagate unchanged.
        """
        if isinstance(cfg, str):
            kind, params = cfg, {}
        elif not isinstance(cfg, Mapping):
            raise self._unknown(
                "", f"{self.kind} config {cfg!r} is not a type name or a {{'type': name}} mapping."
            )
        else:
            params = dict(cfg)
            if "type" not in params:
                raise self._unknown("", f"{self.kind} config {dict(cfg)!r} has no 'type' key")
            kind = params.pop("type")
        factory = kind if callable(kind) else self.get(str(kind))
        label = kind if isinstance(kind, str) else getattr(kind, "__name__", repr(kind))
        accepted = Parameters.of(factory)
        if accepted is not None:
            params = accepted.check(label, params)
        return factory(**params)

    # -- internals -------------------------------------------------------------------------

    def _read_plugins(self) -> None:
        """Add the entry points of ``group`` (not imported yet); registered names win.

        Two installed packages naming different objects under one name make that name
        ambiguous: using it is an error listing both (which one would win depends on the
        order of ``sys.path``), not a silent pick.
        """
        self._plugins_read = True
        assert self.group is not None
        found: dict[str, list[importlib.metadata.EntryPoint]] = {}
        for ep in importlib.metadata.entry_points(group=self.group):
            same = found.setdefault(ep.name, [])
            if all(other.value != ep.value for other in same):  # one package seen twice
                same.append(ep)
        for name, points in found.items():
            self._entries.setdefault(name, points[0] if len(points) == 1 else _Ambiguous(points))

    def _ambiguous(self, name: str, entry: _Ambiguous) -> UnknownAspectError:
        values = ", ".join(repr(ep.value) for ep in entry.points)
        return self._unusable(
            name,
            f"{self.kind} type {name!r} is ambiguous: installed packages give it as {values} "
            f"(entry-point group {self.group!r}); register the one you mean in code "
            f"(registry.register('package.module:Name', name={name!r})), which wins over "
            "plugins, or uninstall one of them",
        )

    def _unusable(self, name: str, message: str) -> UnknownAspectError:
        """The error for a name this registry has but cannot give (no close match to offer)."""
        return UnknownAspectError(message, name=name, known=tuple(self.names()), suggestion=None)

    def _fallbacks(self) -> dict[str, Callable[..., Any]]:
        if self._fallback is None:
            assert self._fallback_source is not None
            self._fallback = dict(self._fallback_source())
        return self._fallback

    def _load(self, name: str, entry: str | importlib.metadata.EntryPoint) -> Callable[..., Any]:
        if isinstance(entry, str):
            what = f"{entry!r}" if entry == name else f"{name!r} ({entry!r})"
        else:
            what = f"{name!r} (plugin {entry.value!r} of entry-point group {self.group!r})"
        try:
            value = _import(entry) if isinstance(entry, str) else entry.load()
        except (ImportError, AttributeError) as exc:
            advice = _load_advice(entry, exc)
            detail = f"{exc}; {advice}" if advice else str(exc)
            message = f"{self.kind} type {what} cannot be loaded: {detail}"
            raise self._unusable(name, message) from exc
        except Exception as exc:  # the module's own top-level code failed (a plugin's bug)
            raise self._unusable(
                name,
                f"{self.kind} type {what} cannot be loaded: importing it raised "
                f"{type(exc).__name__}: {exc}; fix that module, or uninstall the package "
                "that provides it",
            ) from exc
        if not callable(value):
            raise self._unusable(
                name,
                f"{self.kind} type {what} is {value!r}, which cannot be called; "
                "point it at a class",
            )
        factory: Callable[..., Any] = value
        return factory

    def _unknown(self, name: str, problem: str | None = None) -> UnknownAspectError:
        known = tuple(self.names())
        suggestion = _closest(name, known)
        message = problem or f"unknown {self.kind} type {name!r}"
        if suggestion:
            message += f"; did you mean {suggestion!r}?"
        elif not message.endswith("."):
            message += "."
        message += (
            f" Known types: {', '.join(known) or '(none)'}; or give a "
            f"'package.module:Name' path, or install a plugin (entry-point group "
            f"{self.group!r})"
            if self.group
            else f" Known types: {', '.join(known) or '(none)'}; or give a "
            "'package.module:Name' path"
        )
        return UnknownAspectError(message, name=name, known=known, suggestion=suggestion)


def _closest(name: str, known: tuple[str, ...]) -> str | None:
    """The known name ``name`` most likely meant, or the path it meant to write."""
    if not name:
        return None
    if "." in name and ":" not in name:  # 'pkg.mod.Name': a path without its colon
        module, _, attr = name.rpartition(".")
        return attr if attr in known else f"{module}:{attr}"
    # The same name in another case first ('adamw' is 'AdamW', not the closer 'Adam').
    same = [k for k in known if k.lower() == name.lower()]
    close = same or difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    return close[0] if close else None


@dataclass(frozen=True)
class Parameters:
    """The keyword parameters a factory accepts, as ``build`` checks them.

    ``defaults`` maps each name to its default (``inspect.Parameter.empty`` if none);
    ``required`` are those without a default; ``open`` is True when the factory takes any
    keyword (a ``**kwargs`` that leads nowhere checkable), so unknown names are let through.
    ``ints`` are the factory's own parameters annotated ``int`` (or ``'int'``), ``bools``
    those annotated ``bool`` or ``bool | None``, ``numbers`` those whose annotation names
    ``int`` or ``float`` and no ``str``, ``Any`` or ``Callable`` (``float | Tensor``).
    """

    defaults: dict[str, Any]
    required: tuple[str, ...]
    open: bool
    ints: frozenset[str] = frozenset()
    bools: frozenset[str] = frozenset()
    numbers: frozenset[str] = frozenset()

    @classmethod
    def of(cls, factory: Callable[..., Any]) -> Parameters | None:
        """The parameters of ``factory``, or None when it has no readable signature.

        A class whose ``__init__`` passes ``**kwargs`` on gets its base classes' parameters
        too, walking the MRO until an ``__init__`` without ``**kwargs`` (``Timed(**kw)`` →
        ``Aspect.__init__(pointcut=, priority=, ...)``).
        """
        try:
            signature = inspect.signature(factory)
        except (TypeError, ValueError):
            return None
        defaults: dict[str, Any] = {}
        required: list[str] = []
        open_ended = _collect(signature, defaults, required)
        if open_ended and inspect.isclass(factory):
            open_ended = _collect_bases(factory, defaults)
        own = signature.parameters.values()
        ints = frozenset(p.name for p in own if p.annotation in _INT)
        bools = frozenset(p.name for p in own if p.annotation in _BOOL)
        numbers = frozenset(p.name for p in own if _names_a_number(p.annotation))
        return cls(defaults, tuple(required), open_ended, ints, bools, numbers)

    def check(self, label: str, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` if every name is accepted and every required one given (lists become
        tuples where the default is a tuple); else ``AspectParameterError``."""
        valid = tuple(self.defaults)
        odd = tuple(k for k in params if not isinstance(k, str))
        if odd:
            raise AspectParameterError(
                f"{label} parameter names must be text, not {', '.join(map(repr, odd))}"
                f"{_YAML_BOOLEANS if any(isinstance(k, bool) for k in odd) else ''}; "
                f"its parameters are: {', '.join(valid) or '(none)'}",
                aspect=label,
                parameters=tuple(map(str, odd)),
                valid=valid,
            )
        unknown = () if self.open else tuple(k for k in params if k not in self.defaults)
        missing = tuple(k for k in self.required if k not in params)
        if unknown:
            raise self.refuse(label, unknown)
        if missing:
            raise AspectParameterError(
                f"{label} needs {', '.join(map(repr, missing))}; its parameters are: "
                f"{', '.join(valid) or '(none)'}",
                aspect=label,
                parameters=missing,
                valid=valid,
            )
        return {k: _tuple_if(v, self.defaults.get(k)) for k, v in params.items()}

    def refuse(self, label: str, unknown: tuple[str, ...]) -> AspectParameterError:
        """The error for keywords ``unknown`` that ``label`` does not take: it names them,
        the closest valid one to the first, and the valid ones."""
        valid = tuple(self.defaults)
        # The same name in another case first ('N' is 'n', which difflib never offers).
        same = [name for name in valid if name.lower() == unknown[0].lower()]
        close = same or difflib.get_close_matches(unknown[0], valid, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return AspectParameterError(
            f"{label} does not take {', '.join(map(repr, unknown))}{hint}; its parameters "
            f"are: {', '.join(valid) or '(none)'}",
            aspect=label,
            parameters=unknown,
            valid=valid,
        )


#: A parameter annotation that asks for an int (as written, or as a string annotation).
_INT: tuple[Any, ...] = (int, "int")
#: A parameter annotation that asks for a boolean (``DataLoader(shuffle: 'bool | None')``).
_BOOL: tuple[Any, ...] = (bool, "bool", bool | None, "bool | None", "Optional[bool]")

#: What to say about a parameter name YAML turned into a boolean.
_YAML_BOOLEANS = " (YAML reads a bare on, off, yes or no as a boolean: quote it, e.g. 'on':)"


def _names_a_number(annotation: Any) -> bool:
    """Whether an annotation asks for a number and cannot take text: ``float``, ``'float'``,
    ``float | Tensor``; not ``float | str`` (``norm_type='inf'``), ``Any`` or a function."""
    if annotation is inspect.Parameter.empty:
        return False
    text = annotation if isinstance(annotation, str) else str(annotation)
    return bool(_NUMBER.search(text)) and not _TEXT.search(text)


_NUMBER = re.compile(r"\b(int|float)\b")
_TEXT = re.compile(r"\b(str|Any|object|Callable)\b")


def _tuple_if(value: Any, default: Any) -> Any:
    return tuple(value) if isinstance(value, list) and isinstance(default, tuple) else value


def _collect(signature: inspect.Signature, defaults: dict[str, Any], required: list[str]) -> bool:
    """Add keyword-capable parameters to ``defaults``; True when it also takes ``**kwargs``."""
    open_ended = False
    for p in signature.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            open_ended = True
        elif p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in defaults:
            defaults[p.name] = p.default
            if p.default is p.empty:
                required.append(p.name)
    return open_ended


def _same(old: Any, new: Any, loaded: Any) -> bool:
    """Whether registering ``new`` where ``old`` is (``loaded``: what a lazy ``old`` string
    resolved to, if it was looked up) registers the same thing again."""
    if old is new or old == new or (loaded is not None and loaded is new):
        return True
    if isinstance(old, str) and not isinstance(new, str):  # 'pkg.mod:Name' vs the class
        module, _, attr = old.partition(":")
        if (getattr(new, "__module__", None), getattr(new, "__qualname__", None)) == (
            module.strip(),
            attr.strip(),
        ):
            return True  # the class the path names (its module may still be importing)
        try:  # a re-export ('pkg:Name' of 'pkg._mod.Name'); registered in code, so safe
            return _import(old) is new
        except Exception:
            return False
    return False


def _collect_bases(cls: type, defaults: dict[str, Any]) -> bool:
    """Follow ``**kwargs`` into base classes' ``__init__``; True if it stays open-ended
    (no base closes it: the class may take the keywords itself, ``def __init__(self,
    **cfg)``, so none is refused)."""
    for klass in cls.__mro__[1:]:
        init = vars(klass).get("__init__")
        if init is None or klass is object:
            continue
        try:
            signature = inspect.signature(init)
        except (TypeError, ValueError):
            return True
        params = list(signature.parameters.values())[1:]  # drop self
        if not _collect(signature.replace(parameters=params), defaults, []):
            return False
    return True


def _registered_name(obj: Any, name: str | None) -> str:
    """The name ``register(obj, name=name)`` registers ``obj`` under: ``name``, else a
    class's ``__name__`` or the last part of a ``'package.module:Name'`` path;
    ``InvalidOptionError`` for anything else, or when no name results."""
    if name is not None and not isinstance(name, str):
        raise InvalidOptionError(
            f"register(name={name!r}): a name is a string, e.g. name='MyModel'",
            option="name",
            value=name,
        )
    if isinstance(obj, str):
        if ":" not in obj:
            raise InvalidOptionError(
                f"register({obj!r}): a string must be a 'package.module:Name' path "
                f"to import lazily; to name a class, write @register(name={obj!r})",
                option="obj",
                value=obj,
            )
        key: str = name or obj.rpartition(":")[2].rpartition(".")[2]
    elif callable(obj):
        key = name or str(getattr(obj, "__name__", ""))
    else:
        raise InvalidOptionError(
            f"register({obj!r}): give a class, a factory function or a "
            "'package.module:Name' string",
            option="obj",
            value=obj,
        )
    if not key:
        raise InvalidOptionError(f"register({obj!r}) needs name=", option="name", value=name)
    return key


def _import(path: str) -> Any:
    """The object a ``'package.module:Attr.attr'`` path names."""
    module, _, attr = path.partition(":")
    value: Any = importlib.import_module(module.strip())
    for part in attr.strip().split(".") if attr.strip() else ():
        value = getattr(value, part)
    return value


def _load_advice(entry: str | importlib.metadata.EntryPoint, exc: Exception) -> str:
    """What to do about an entry that failed to import: install what is missing, or fix
    the path; for a plugin, its package is installed (it declared the entry point), so a
    missing module of its own or a missing name means that package is broken."""
    path = entry if isinstance(entry, str) else entry.value
    module = path.partition(":")[0].strip()
    missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    if missing and not _own_module(missing, module):
        if "pip install" in str(exc):  # the module said what to install (aspecthook.train)
            return ""
        return f"it needs {missing!r}, which is not installed: install it"
    if isinstance(entry, str):
        return "check the path ('package.module:Name') or install the package that provides it"
    dist = getattr(entry, "dist", None)
    package = f"the package {dist.name!r}" if dist is not None else "the package that declares it"
    return (
        f"{package} is installed but its entry point {entry.value!r} does not lead to an "
        "object: reinstall or upgrade that package, or uninstall it"
    )


def _own_module(missing: str, module: str) -> bool:
    """Whether ``missing`` is ``module``, a package above it, or another module of its
    top-level package: no dependency to install (the path is wrong, or the installed
    package is broken). A namespace package (``google``) spans distributions: a missing
    module of it may be another one's, to install."""
    if module == missing or module.startswith(f"{missing}."):
        return True
    top = module.partition(".")[0]
    if missing.partition(".")[0] != top:
        return False
    return getattr(sys.modules.get(top), "__file__", None) is not None


def _describe(entry: Any) -> str:
    if isinstance(entry, str):
        return repr(entry)
    if isinstance(entry, importlib.metadata.EntryPoint):
        return f"plugin {entry.value!r}"
    return f"{getattr(entry, '__module__', '?')}.{getattr(entry, '__qualname__', entry)!s}"


def _aspect_class(value: Any) -> bool:
    """An ``Aspect`` subclass, or a hook / callback class the adapters take."""
    from ._aspect import Aspect
    from .adapters import KERAS_METHODS, MM_METHODS

    if not isinstance(value, type):
        return False
    return issubclass(value, Aspect) or any(
        callable(getattr(value, m, None)) for m in (*MM_METHODS, *KERAS_METHODS)
    )


ASPECTS = Registry(
    "aspect",
    group=ENTRY_POINT_GROUP,
    accepts=(
        _aspect_class,
        "an Aspect, OpenMMLab-style hook or Keras-style callback class",
    ),
)
"""The aspect types ``aspecthook run`` and ``Runner.from_config`` know by name."""

for _name in ("Counted", "Logged", "Retry", "Timed"):
    ASPECTS.register(f"aspecthook.aspects:{_name}")
ASPECTS.register("aspecthook.testing:Recorder")

# The training aspects and their OpenMMLab names, as aspecthook.train.aspects has them
# (its ALIASES; tests/train/test_from_config.py keeps the lists equal). Strings, because that
# package needs torch: it is imported only when one of these names is used.
_TRAINING = (
    "AMP",
    "Checkpoint",
    "DistSamplerSeed",
    "EMA",
    "EarlyStopping",
    "EmptyCache",
    "Evaluate",
    "GradAccumulation",
    "GradClip",
    "IterTimer",
    "LRSchedule",
    "Logger",
    "NaNGuard",
    "ProgressBar",
    "SyncBuffers",
)
_OPENMMLAB = {
    "AmpOptimWrapperHook": "AMP",
    "CheckpointHook": "Checkpoint",
    "DistSamplerSeedHook": "DistSamplerSeed",
    "EMAHook": "EMA",
    "EarlyStoppingHook": "EarlyStopping",
    "EmptyCacheHook": "EmptyCache",
    "GradientCumulativeOptimizerHook": "GradAccumulation",
    "IterTimerHook": "IterTimer",
    "LoggerHook": "Logger",
    "LrUpdaterHook": "LRSchedule",
    "ParamSchedulerHook": "LRSchedule",
    "ProgressBarHook": "ProgressBar",
    "SyncBuffersHook": "SyncBuffers",
}
for _name in _TRAINING:
    ASPECTS.register(f"aspecthook.train.aspects:{_name}")
for _alias, _name in _OPENMMLAB.items():
    ASPECTS.register(f"aspecthook.train.aspects:{_name}", name=_alias)
del _name, _alias, _TRAINING, _OPENMMLAB
