"""Weaves waiting for an import: a dotted path whose module is not imported yet, and each
submodule a glob matches that is imported later, are woven by wrapt post-import hooks.

Separate from ``_weave`` because this part runs later, inside the program's own
``import`` statements, and keeps the weave's record up to date as the hooks fire.
"""

from __future__ import annotations

import sys
import types
import weakref
from typing import TYPE_CHECKING

import wrapt

from ._install import _install_all, _path_alias, _release
from ._log import get_logger
from ._registry import LOCK
from ._subtypes import following, weave_subtypes
from ._targets import (
    _GLOB,
    _namespace_glob,
    _namespace_matches,
    _resolve_path,
    _split,
    _submodule_pending,
    _unimported_matches,
)
from .errors import WeaveTargetError

if TYPE_CHECKING:
    from ._joinpoint import JoinPoint
    from ._weave import WeaveRecord
    from ._weaver import Weaver

__all__: list[str] = []  # helpers of weave() only: nothing here is API


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
    candidates = _hook_modules(path, quiet)

    def on_namespace(record: WeaveRecord) -> bool:
        """Defer the submodules of a namespace package the glob falls below, whose own
        hook never runs (``_namespace_matches``); whether there were any. A glob right at
        one (``'pkg.ns.*'``, found once ``pkg`` is imported) fails: it can match nothing."""
        nonlocal done
        problem = None if done or quiet else _namespace_glob(path)
        if problem is not None:
            done = True
            _fail(record, path, problem)
            if strict:
                raise WeaveTargetError(problem, target=path)
            return True
        matches = [] if done else _namespace_matches(path)
        for match in matches:
            _defer(record, match, names, weaver, strict, quiet=True)
        if matches and quiet:  # this expansion is now those, counted in their place
            done = True
            _expansion_done(record, path, strict)
        return bool(matches)

    def on_import(module: types.ModuleType) -> None:
        nonlocal done
        record = record_ref()
        with LOCK:
            if record is None or record.cancelled or done:
                return
            try:
                sites = _resolve_path(path)
                if not sites and _submodule_pending(path):
                    on_namespace(record)
                    return  # a glob found nothing yet: the submodule's own hook comes later
                named = names if quiet else (*names, *_path_alias(path, sites))
                if "+" in path:  # Base+.method: Base and its subclasses, now and later
                    record.names = named
                    weave_subtypes(record, path, weaver, strict)
                    points = []
                else:
                    points = _install_all(sites, named, weaver)
            except Exception as exc:
                if _submodule_pending(path):
                    on_namespace(record)
                    return  # a parent package was imported; the submodule's hook comes later
                done = True
                if quiet:
                    _expansion_done(record, path, strict)
                    return
                _fail(record, path, str(exc))
                if strict:
                    raise
                return
            done = True
            record.names = named  # what undoing the weave takes off again
            _woven_on_import(record, path, points, named, weaver, strict, quiet)

    for name in candidates:
        wrapt.register_post_import_hook(on_import, name)
    with LOCK:
        on_namespace(record)


def _hook_modules(path: str, quiet: bool) -> list[str]:
    """The modules whose import runs ``path``'s hook: each dotted prefix without a glob
    (of the part before a ``'+'``; only the module part when ``':'`` says where it ends);
    for a glob's expansion (``quiet``), only those not imported yet."""
    module_parts, attrs = _split(path)
    parts = module_parts + attrs if ":" in path else path.partition("+")[0].split(".")
    candidates = [
        ".".join(parts[:i])
        for i in range(1, len(parts) + 1)
        if not _GLOB.intersection(".".join(parts[:i]))
    ]
    if ":" in path:
        candidates = [".".join(module_parts)]
    if quiet:
        candidates = [name for name in candidates if name not in sys.modules]
    return candidates


def _woven_on_import(
    record: WeaveRecord,
    path: str,
    points: list[JoinPoint],
    names: tuple[str, ...],
    weaver: Weaver,
    strict: bool,
    quiet: bool,
) -> None:
    """Add what a hook wove to the record, defer the deeper glob matches, update its status."""
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
    elif not record.points and not record.waiting and not following(record):
        reason = f"{path} matched nothing"
        _fail(record, path, reason)
        if strict:
            raise WeaveTargetError(reason, target=path)


def _expansion_done(record: WeaveRecord, path: str, strict: bool) -> None:
    """One glob expansion resolved: the weave fails when it was the last and nothing matched."""
    record.waiting -= 1
    if record.points:
        return
    if record.waiting:
        record.reason = f"matched nothing yet: waiting for {record.waiting} modules' imports"
        return
    reason = f"{record.target} matched nothing"
    _fail(record, record.target, reason)
    if strict:
        raise WeaveTargetError(reason, target=record.target)


def _fail(record: WeaveRecord, target: str, reason: str) -> None:
    """Mark the weave failed and log it (``weave.failed``)."""
    record.status, record.reason = "failed", reason
    get_logger().warning("weave.failed", target=target, reason=reason)
