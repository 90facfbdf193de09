"""The generic steps of ``Runner.from_config``: one part built from its registry entry.

A config value names a type (a registered name, a plugin, a ``'package.module:Name'``
path, or a class or function given in code) with its keyword parameters; ``_PartBuilder``
finds the factory, checks the parameters against its signature and calls it, and words
every failure as a ``ConfigError`` at the key path of the value. ``_config._Builder``
builds each part of a run (model, optimizer, loaders, aspects ...) on these steps.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from typing import Any

from .._config import _EXTENSION_HINT, type_as_key_hint
from ..errors import AspectHookError, AspectParameterError, ConfigError, UnknownAspectError
from ..registry import Parameters, Registry
from ._config_messages import (
    _OPENMMLAB_KEYS,
    _a,
    _error,
    _kind,
    _number_hint,
    _openmmlab_hint,
    _option_key,
    _string_problem,
    _user,
)
from ._config_values import _is_factory

__all__ = ["_PartBuilder"]

#: Parameters from_config fills in itself, and what it fills them with (for the error).
_GIVEN = {"params": "the model's parameters", "optimizer": "the runner's optimizer"}


class _PartBuilder:
    """Builds parts from registry entries; every error names ``file`` and the key path."""

    def __init__(self, file: str, *, overridden: frozenset[str] = frozenset()) -> None:
        self.file = file
        self.overridden = overridden  # top-level keys an override replaced in the file

    def error(self, key: str, message: str) -> ConfigError:
        return _error(self.file, key, message)

    def build(self, registry: Registry, key: str, cfg: Any, **given: Any) -> Any:
        """``registry``'s type named by ``cfg``, called with its parameters and ``given``."""
        factory, label, params = self.resolve(registry, key, cfg, **given)
        return self.call(key, label, factory, params, shown=_user(cfg))

    def resolve(
        self, registry: Registry, key: str, cfg: Any, **given: Any
    ) -> tuple[Callable[..., Any], str, dict[str, Any]]:
        """``(factory, its name, parameters)`` for ``cfg``: a name or ``{type: name, ...}``.

        ``given`` are parameters the runner supplies (the optimizer's ``params``); a config
        that sets one too is an error.
        """
        kind, params, type_key = self.split_type(registry, key, cfg)
        factory, label = self.find_factory(registry, type_key, kind, params)
        for name in given:
            if name in params:
                raise self.error(
                    f"{key}.{name}",
                    f"is filled in by from_config ({_GIVEN.get(name, name)}); remove it",
                )
        return factory, label, {**given, **params}

    def split_type(self, registry: Registry, key: str, cfg: Any) -> tuple[Any, dict[str, Any], str]:
        """``(type, parameters, key of the type)``: a name (or a class or function given
        in code) has no parameters; a mapping's ``type`` is taken out of the rest."""
        if isinstance(cfg, str) or _is_factory(cfg):
            kind, params, type_key = cfg, {}, key
        elif isinstance(cfg, Mapping):
            params = dict(cfg)
            kind, type_key = params.pop("type", None), f"{key}.type"
        else:
            raise self.error(
                key,
                f"must be {_a(registry.kind)} {registry.kind} type name or a mapping "
                "{type: Name, ...}, "
                f"not {_kind(cfg)}",
            )
        return kind, params, type_key

    def find_factory(
        self, registry: Registry, type_key: str, kind: Any, params: Mapping[Any, Any]
    ) -> tuple[Callable[..., Any], str]:
        """``(factory, its name)``: a class or function given in code as it is, a name
        looked up in ``registry``; anything else is an error at ``type_key``."""
        if _is_factory(kind):
            factory: Callable[..., Any] = kind
            label = str(getattr(kind, "__name__", kind))
        elif isinstance(kind, str) and kind.strip():
            try:
                factory = registry.get(kind.strip())
            except UnknownAspectError as exc:
                raise self.error(type_key, str(exc)) from exc
            label = kind.strip()
        else:
            top = type_key.partition(".")[0].partition("[")[0]
            replaced = (
                f" (the override {top}= replaces the file's {top}: whole, it is not merged "
                "into it: give the type too)"
                if kind is None and top in self.overridden
                else ""
            )
            raise self.error(
                type_key,
                f"must name the {registry.kind} type, e.g. {{type: Name}}, not "
                f"{_kind(kind)}{replaced}{type_as_key_hint(kind, params)}",
            )
        return factory, label

    def check(
        self, key: str, label: str, accepted: Parameters, params: dict[str, Any]
    ) -> dict[str, Any]:
        try:
            checked = accepted.check(label, params)
        except AspectParameterError as exc:
            where = f"{key}.{exc.parameters[0]}" if exc.parameters else key
            raise self.error(where, f"{exc}{_openmmlab_hint(label, params, exc)}") from exc
        for name, value in checked.items():  # torch's schedulers and losses do not check
            problem = _string_problem(accepted, name, value)
            if problem is not None:
                raise self.error(f"{key}.{name}", problem)
        return checked

    def call(
        self,
        key: str,
        label: str,
        factory: Callable[..., Any],
        params: dict[str, Any],
        *,
        shown: Mapping[str, Any] | None = None,
    ) -> Any:
        """``factory(**params)`` after checking the names; failures name ``key``."""
        accepted = Parameters.of(factory)
        if accepted is not None:
            params = self.check(key, label, accepted, params)
        try:
            return factory(**params)
        except (AspectHookError, TypeError, ValueError, RuntimeError) as exc:
            # torch reports bad argument values as RuntimeError too; the cause stays chained
            shown = params if shown is None else shown
            args = ", ".join(f"{k}={v!r}" for k, v in shown.items())
            where = _option_key(key, exc, shown)
            raise self.error(where, f"{label}({args}) failed: {exc}{_number_hint(shown)}") from exc

    def check_keys(self, key: str, data: Mapping[Any, Any], valid: tuple[str, ...]) -> None:
        for name in data:
            if name not in valid:
                close = difflib.get_close_matches(str(name), valid, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                openmmlab = not key and name in _OPENMMLAB_KEYS
                if openmmlab:  # not the look-alike: train_cfg
                    hint = f" ({_OPENMMLAB_KEYS[name]})"
                where = f"{key}.{name}" if key else str(name)
                # Not a typo nor OpenMMLab's (its hint says where it goes): a block?
                more = "" if key or close or openmmlab else _EXTENSION_HINT
                raise self.error(
                    where, f"is not a known key{hint}; valid keys: {', '.join(valid)}{more}"
                )
