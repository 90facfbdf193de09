"""Weaving advice into existing code: functions, methods, classes, modules, instances and
dotted paths (globs allowed in the last parts), now or when the module is imported.

Each woven callable gets exactly one ``JoinPointProxy``; weaving it again finds that
proxy with ``wrapt.find_wrapper`` (even under a foreign wrapper) and adds to its join
point. When the last weave of a callable is removed, ``wrapt.unwrap_object`` puts the
original back, splicing our proxy out from under any wrapper another library added.
Finding what a target names is ``_targets``' job, installing and removing the proxies
``_install``'s, weaving a path when its module is imported ``_pending``'s, and weaving
the subclasses a ``'pkg.Base+.method'`` path follows as they are created ``_subtypes``';
this module runs a weave through those steps and keeps its ``WeaveRecord``.
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import sys
import types
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ._advice import KINDS, Advice
from ._advice_checks import _EXPECTED
from ._aspect import Aspect
from ._handle import Handle
from ._install import _install_all, _path_alias, _release
from ._joinpoint import JoinPoint
from ._log import get_logger
from ._pending import _defer
from ._pointcut import Name
from ._registry import LOCK
from ._subtypes import unfollow, weave_subtypes
from ._targets import (
    _imported,
    _missing_module,
    _module_holding,
    _module_of,
    _namespace_glob,
    _resolve_object,
    _resolve_path,
    _submodule_pending,
    _subtype_base,
    _subtype_parts,
    _unimported_matches,
    _why_nothing,
    path_problem,
)
from ._torch_hooks import is_module, weave_module
from ._typing import AdviceFunctions
from ._weaver import OPTIONS, Weaver, check_weaver, default_weaver
from .errors import (
    AdviceSignatureError,
    AspectDefinitionError,
    InvalidOptionError,
    WeaveTargetError,
)

__all__ = ["WEAVES", "AdviceFunctions", "WeaveRecord", "unweave", "weave", "woven"]


_tokens = itertools.count()
# The decorators' options; ``name=`` is weave()'s own (a join point alias).
WEAVE_OPTIONS = OPTIONS - {"name"}


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
    waiting: int = 0  # glob expansions into submodules not imported yet (see _pending)

    def describe_status(self) -> str:
        """The status and why, as a weave's handle shows it: ``'skipped: <reason>'``."""
        return f"{self.status}: {self.reason}" if self.reason else self.status


WEAVES: list[WeaveRecord] = []


# -- the public functions ------------------------------------------------------------------


def weave(
    target: Any,
    *aspects: Aspect | Advice,
    before: AdviceFunctions = None,
    after: AdviceFunctions = None,
    on_error: AdviceFunctions = None,
    around: AdviceFunctions = None,
    name: str | None = None,
    requires: str | None = None,
    strict: bool = False,
    weaver: Weaver | None = None,
    **opts: Any,
) -> Handle:
    """Weave aspects and advice into ``target`` and return a ``Handle`` that undoes it.

    ``target`` is a function, method, classmethod, staticmethod, class (its methods),
    module (its functions, and bound methods of its own objects such as ``random.randint``),
    instance (its methods, for that instance only), a join point proxy, or a dotted path
    ``'pkg.mod.Class.method'`` (``'pkg.mod:Class.method'`` to say where the module ends;
    globs allowed after the module), or
    ``'pkg.mod.Base+.method'``: ``Base.method`` and each subclass's own ``method``, those
    of subclasses created later included (a malformed ``+`` raises ``WeaveTargetError``).
    A path whose module is not imported yet is woven when it is imported; so is each
    submodule a glob matches (``'pkg.*.func'``) that is imported later. ``name=`` makes
    the woven callables answer to that join point name too. ``requires='pkg>=1.0'`` skips
    the weave (logged, ``skipped`` in ``describe()``) when the installed version does not
    fit; a missing target is skipped the same way. ``strict=True`` raises
    ``WeaveTargetError`` instead.
    ``**opts`` (``priority=``, ``every=`` ...) apply to the ``before=``/``after=``/...
    functions. An ``nn.Module`` instance is woven through torch's own module hooks
    instead of a proxy (``forward`` / ``backward`` join points; see ``_torch_hooks``).
    """
    check_weaver(weaver)
    weaver = weaver or default_weaver
    weaver._check_open("weave")
    _check_alias(name)
    if type(strict) is not bool:  # 'no' or 0.0 would pass a truth test and mean the opposite
        raise InvalidOptionError(
            f"strict={strict!r} is not a bool: give strict=True (a missing target raises) or "
            "strict=False (it is skipped and logged)",
            option="strict",
            value=strict,
        )
    if is_module(target):  # an nn.Module instance: through torch's own hooks
        kinds = {"before": before, "after": after, "on_error": on_error, "around": around}
        return weave_module(target, aspects, kinds, name, requires, strict, weaver, opts)
    token = f"@weave:{next(_tokens)}"
    names = (token,) if name is None else (token, name)
    advices = _advice_for(Name(token), aspects, before, after, on_error, around, opts)
    label = target if isinstance(target, str) else _label(target)
    record = WeaveRecord(label, "active", weaver=weaver, names=names)
    sites, deferred, reason = _find_sites(target, requires)
    if reason is not None:
        return _skip(record, reason, strict)
    if isinstance(target, str):  # advice by the path as typed reaches it too
        record.names = names = (*names, *_path_alias(target, sites))

    handle = weaver.add(*advices) if advices else None
    try:
        if deferred:
            _defer(record, target, names, weaver, strict)
        else:
            deferred = _weave_now(record, target, sites, weaver, strict)
    except BaseException:
        _undo(record, handle, weaver)
        raise
    _settle(record, handle, weaver, deferred, strict)
    with LOCK:
        WEAVES.append(record)
    return _weave_handle(record, handle, advices, weaver)


def unweave(handle: Handle) -> None:
    """Remove what ``handle`` added; the same as ``handle.remove()``."""
    if not isinstance(handle, (Handle, Advice)):
        raise InvalidOptionError(
            f"unweave({handle!r}) is not given a Handle: pass the Handle that weave() "
            "returned (or an advice, which is its own handle)",
            option="handle",
            value=handle,
        )
    handle.remove()


def woven(
    target: Any,
    *aspects: Aspect | Advice,
    before: AdviceFunctions = None,
    after: AdviceFunctions = None,
    on_error: AdviceFunctions = None,
    around: AdviceFunctions = None,
    name: str | None = None,
    requires: str | None = None,
    strict: bool = False,
    weaver: Weaver | None = None,
    **opts: Any,
) -> Handle:
    """``with woven(target, ...):`` weaves for the block and removes it afterwards; it takes
    what ``weave`` takes (spelled out, so that type checkers check them as they do there)."""
    return weave(
        target,
        *aspects,
        before=before,
        after=after,
        on_error=on_error,
        around=around,
        name=name,
        requires=requires,
        strict=strict,
        weaver=weaver,
        **opts,
    )


# -- the steps of weave() ------------------------------------------------------------------


def _check_alias(name: object) -> None:
    """Refuse a ``name=`` that no pointcut could select: it must be a non-empty string."""
    if name is not None and not (isinstance(name, str) and name):
        raise InvalidOptionError(
            f"name={name!r} is not a join point name: give the woven callables another name "
            "as a string, e.g. name='train_iter'",
            option="name",
            value=name,
        )


def _find_sites(target: Any, requires: str | None) -> tuple[list[Any], bool, str | None]:
    """Where ``target`` is woven now: its sites, whether it waits for an import instead,
    and why it is skipped (``None`` when it is not)."""
    sites: list[Any] = []
    deferred = False
    if isinstance(target, str) and _subtype_parts(target) is not None and _imported(target):
        # A misplaced '+' raised just now, one after what is not a class raises here: both
        # are mistakes in the path, refused strict or not (a missing class is skipped).
        _subtype_base(target)
    if isinstance(target, str) and (problem := path_problem(target)) is not None:
        raise WeaveTargetError(problem, target=target)  # so is a path no module could match
    if isinstance(target, str) and (problem := _namespace_glob(target)) is not None:
        raise WeaveTargetError(problem, target=target)  # and one that matches nothing, ever
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
        if not sites:  # a class, module or instance with no method or function of its own
            reason = _why_nothing(_label(target), target)
    return sites, deferred, reason


def _weave_now(
    record: WeaveRecord, target: Any, sites: list[Any], weaver: Weaver, strict: bool
) -> bool:
    """Weave the sites found now; whether the weave waits for more: a glob for modules
    not imported yet, a ``'pkg.Base+.method'`` for subclasses created later."""
    if isinstance(target, str) and "+" in target:
        weave_subtypes(record, target, weaver, strict)
        return True
    record.points.update(_install_all(sites, record.names, weaver))
    # A glob over a package's modules also covers those not imported yet.
    later = _unimported_matches(target) if isinstance(target, str) else []
    if later and not record.points and strict:
        raise WeaveTargetError(
            f"{record.target} matched nothing in the modules imported so far ({len(later)} "
            f"not imported yet might match, e.g. {_module_of(later[0])}): import "
            "them before weaving, or weave without strict=True",
            target=record.target,
        )
    for path in later:
        _defer(record, path, record.names, weaver, strict, quiet=True)
    return bool(later)


def _settle(
    record: WeaveRecord, handle: Handle | None, weaver: Weaver, deferred: bool, strict: bool
) -> None:
    """The record's status once weaving is done; a strict weave of nothing is undone."""
    if record.points and deferred:
        record.status = "active"
    elif deferred and record.waiting:
        record.reason = f"matched nothing yet: waiting for {record.waiting} modules' imports"
    if not record.points and not deferred:
        if strict:
            _undo(record, handle, weaver)
            raise WeaveTargetError(
                f"{record.target} matched nothing to weave", target=record.target
            )
        record.status, record.reason = "skipped", "matched nothing"
        get_logger().warning("weave.skipped", target=record.target, reason=record.reason)


def _weave_handle(
    record: WeaveRecord,
    handle: Handle | None,
    advices: list[Advice],
    weaver: Weaver,
    description: str | None = None,
) -> Handle:
    """The handle ``weave()`` returns: it undoes the weave and stands for its advice.

    ``description`` is its ``repr``'s text (``weave <target>`` when not given)."""

    def undo() -> None:
        weaver.forget(result)
        _undo(record, handle, weaver)

    result = Handle(
        undo, description or f"weave {record.target}", advices, state=record.describe_status
    )
    if handle is not None:
        weaver.forget(handle)
        for advice in advices:
            advice._handle = result
    return weaver.track(result)


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
    """The advice a weave registers: the aspects' and advice's, aimed at ``token``, then
    an ``Advice`` per ``before=``/``after=``/``on_error=``/``around=`` function."""
    _refuse_unknown(opts)
    advices = _from_aspects(token, aspects)
    by_kind = {"before": before, "after": after, "on_error": on_error, "around": around}
    for kind in KINDS[:4]:
        fns = by_kind[kind]
        if fns is None:
            continue
        for fn in _functions(kind, fns):
            func = fn.fn if isinstance(fn, Advice) else fn
            advices.append(Advice(kind, func, token, **opts))
    if opts and not any(v is not None for v in by_kind.values()):
        raise InvalidOptionError(
            f"options {sorted(opts)} apply to before=/after=/on_error=/around= functions, "
            "and none were given: an aspect takes priority=, errors=, name=, order_after= "
            "and order_before= when it is made (Timed(priority='HIGH')); every=, window=, "
            "once=, when= and rank= filter advice functions (weave(target, after=fn, "
            "every=2), or @after(every=2) on an Aspect's method)",
            option=sorted(opts)[0],
            value=opts[sorted(opts)[0]],
        )
    return advices


def _functions(kind: str, fns: Any) -> list[Any]:
    """What ``weave(<kind>=fns)`` gives: one function or an iterable of them, each callable."""
    listed = isinstance(fns, Iterable) and not callable(fns) and not isinstance(fns, str)
    items = list(fns) if listed else [fns]
    for fn in items:
        if not callable(fn):
            expected = _EXPECTED[kind]
            raise AdviceSignatureError(
                f"weave({kind}=...) takes a function fn{expected} or a list of them, got "
                f"{fn!r} ({type(fn).__name__}): pass the function itself, e.g. "
                f"{kind}=lambda {expected[1:-1]}: ...",
                advice=repr(fn),
                signature="",
                expected=expected,
            )
    return items


def _refuse_unknown(opts: dict[str, Any]) -> None:
    unknown = sorted(set(opts) - WEAVE_OPTIONS)
    if unknown:
        raise InvalidOptionError(
            f"unknown option(s) {unknown} for weave(): valid options for its "
            f"before=/after=/on_error=/around= functions are {sorted(WEAVE_OPTIONS)}",
            option=unknown[0],
            value=opts[unknown[0]],
        )


def _from_aspects(token: Name, aspects: tuple[Any, ...]) -> list[Advice]:
    advices: list[Advice] = []
    for item in aspects:
        if isinstance(item, Aspect):
            advices.extend(item.make_advice(target=token))
        elif isinstance(item, Advice):
            advices.append(_rebind(item, token))
        elif isinstance(item, type) and issubclass(item, Aspect):
            raise AspectDefinitionError(
                f"weave() got the class {item.__name__}, not an instance: pass "
                f"{item.__name__}(), with its parameters if it takes any"
            )
        else:
            raise AspectDefinitionError(
                f"weave() got {item!r} as an aspect: pass Aspect instances or Advice "
                "positionally, and functions as before=/after=/on_error=/around="
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


# -- undoing and skipping ------------------------------------------------------------------


def _undo(record: WeaveRecord, handle: Handle | None, weaver: Weaver) -> None:
    with LOCK:
        record.cancelled = True  # a class created from now on is not woven for it
        if record in WEAVES:
            WEAVES.remove(record)
        points, record.points = list(record.points), weakref.WeakSet()
    try:
        for jp in points:
            _release(jp, record.names, weaver)
    finally:
        # After the proxies: one on Base.__init_subclass__ itself ('Base+.__init_subclass__')
        # is around the hook following Base, which then comes off as it was put.
        unfollow(record)
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

    handle = Handle(undo, f"weave {record.target}", state=record.describe_status)
    return record.weaver.track(handle) if record.weaver is not None else handle


# -- names -----------------------------------------------------------------------------------


def _label(target: Any) -> str:
    if isinstance(target, types.ModuleType):
        return target.__name__
    held = _module_holding(target) if inspect.ismethod(target) else None
    if held is not None:  # random.randint, not random.Random.randint
        return f"{held[0].__name__}.{held[1]}"
    qualname = getattr(target, "__qualname__", None)
    if qualname is not None:
        return f"{getattr(target, '__module__', '?')}.{qualname}"
    return f"<{type(target).__name__} instance>"


def _version_problem(requires: str) -> str | None:
    """Why ``requires`` (a requirement such as ``'skorch>=1.0'``) is not met, or None."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import InvalidRequirement, Requirement

    if not isinstance(requires, str):  # packaging's own TypeError does not say what to give
        raise InvalidOptionError(
            f"requires={requires!r} is not a requirement string: write it like 'skorch>=1.0'",
            option="requires",
            value=requires,
        )
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
        return _stdlib_problem(req.name) or f"{req.name} is not installed"
    if req.specifier and not req.specifier.contains(installed, prereleases=True):
        return f"{req.name} {installed} does not satisfy {req.name}{req.specifier}"
    return None


def _stdlib_problem(name: str) -> str | None:
    """Why ``requires=`` cannot name ``name`` when it is a standard-library module rather
    than an installed distribution, or None when it is not one."""
    if name not in sys.stdlib_module_names or importlib.util.find_spec(name) is None:
        return None
    return (
        f"{name} is part of the standard library, not an installed distribution, so it has "
        f"no version to compare: drop requires= (it ships with Python "
        f"{'.'.join(map(str, sys.version_info[:3]))}), or check sys.version_info before "
        "weaving"
    )
