"""The ``aspecthook run`` configuration file: read, check, and turn into aspects.

A file is YAML (``.yaml`` / ``.yml``, read with ``yaml.safe_load``'s loader only, so a file
can never build arbitrary Python objects; a key written twice in one mapping is refused) or
TOML (``.toml``, ``tomllib``). Every problem is a ``ConfigError`` that names the file, the
key path of the bad value (``weave[1].aspects[0].type``) and what is valid there, because
the person reading it is editing that file, not our code::

    strict: false            # a missing target is an error instead of a warning
    trace: trace.json        # write the Timed Chrome trace here at exit
    summary: true            # print the Timed summary table at exit (stderr)
    describe: false          # print every join point's advice, calls and time at exit
    logging: {format: console, level: info}   # how Logged writes (configure_logging)
    weave:
      - target: "json.*"     # or a list of targets
        aspects: [Timed, {type: Logged, level: debug}]
      - target: "torch.optim.Optimizer.step"
        requires: "torch>=2"
        aspects: [Timed]
"""

from __future__ import annotations

import difflib
import functools
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._targets import path_problem
from .errors import AspectHookError, AspectParameterError, ConfigError, UnknownAspectError

if TYPE_CHECKING:
    from .registry import Registry

__all__ = ["AspectSpec", "RunConfig", "WeaveSpec", "load_config", "parse_config"]

_TOP_KEYS = ("describe", "logging", "strict", "summary", "trace", "weave")
_WEAVE_KEYS = ("aspects", "name", "requires", "target")
_LOGGING_KEYS = ("file", "format", "level")
_SUFFIXES = {".yaml": "yaml", ".yml": "yaml", ".toml": "toml"}


@dataclass(frozen=True)
class AspectSpec:
    """One aspect of a weave: a registry type name and its parameters."""

    type: str
    params: Mapping[str, Any]
    key: str  # where it is in the file, e.g. "weave[0].aspects[1]"

    @property
    def identity(self) -> str:
        """Equal for specs that build equal aspects, which then share one instance."""
        return f"{self.type}{sorted(self.params.items())!r}"


@dataclass(frozen=True)
class WeaveSpec:
    """One entry of ``weave:``: what to weave into, and which aspects."""

    targets: tuple[str, ...]
    aspects: tuple[AspectSpec, ...]
    key: str
    requires: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class RunConfig:
    """A checked configuration file; ``file`` is its path as given."""

    file: str
    weaves: tuple[WeaveSpec, ...] = ()
    strict: bool = False
    trace: str | None = None
    summary: bool = True
    describe: bool = False
    logging: Mapping[str, Any] | None = None

    def error(self, key: str, message: str) -> ConfigError:
        """A ``ConfigError`` about ``key`` of this file."""
        return _error(self.file, key, message)

    def build_aspects(self, registry: Registry, *, trace: bool = False) -> list[list[Any]]:
        """The aspect instances of every weave, in order (one list per weave).

        Equal specs (same type, same parameters) share one instance, so a single ``Timed``
        times every weave that names it and one summary covers them all. With ``trace``
        a Timed-like type (one with a ``trace`` parameter and ``export_chrome_trace``)
        records trace events unless the file sets ``trace`` for it.
        """
        instances: dict[str, Any] = {}
        built: list[list[Any]] = []
        for weave in self.weaves:
            aspects = []
            for spec in weave.aspects:
                if spec.identity not in instances:
                    instances[spec.identity] = self._build(registry, spec, trace)
                aspects.append(instances[spec.identity])
            built.append(aspects)
        return built

    def _build(self, registry: Registry, spec: AspectSpec, trace: bool) -> Any:
        from .registry import Parameters

        try:
            factory = registry.get(spec.type)
        except UnknownAspectError as exc:
            raise self.error(f"{spec.key}.type", str(exc)) from None
        params = dict(spec.params)
        accepted = Parameters.of(factory)
        if (
            trace
            and hasattr(factory, "export_chrome_trace")
            and accepted is not None
            and "trace" in accepted.defaults
        ):
            params.setdefault("trace", True)
        try:
            return registry.build({"type": factory, **params})
        except AspectParameterError as exc:
            key = f"{spec.key}.{exc.parameters[0]}" if exc.parameters else spec.key
            raise self.error(key, f"{spec.type} {str(exc).partition(' ')[2]}") from None
        except (AspectHookError, TypeError, ValueError) as exc:
            raise self.error(spec.key, f"{spec.type}({_kwargs(params)}) failed: {exc}") from None
        except Exception as exc:  # a file it cannot open, a service it cannot reach
            raise self.error(
                spec.key, f"{spec.type}({_kwargs(params)}) failed: {type(exc).__name__}: {exc}"
            ) from exc


def load_config(path: str | Path) -> RunConfig:
    """Read and check the configuration file at ``path`` (YAML or TOML by extension)."""
    file = str(path)
    kind = _SUFFIXES.get(Path(file).suffix.lower())
    if kind is None:
        raise _error(file, "", "unknown file type: name it *.yaml, *.yml or *.toml")
    try:
        text = Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _error(file, "", f"cannot read it: {exc}") from None
    data = _parse_yaml(file, text) if kind == "yaml" else _parse_toml(file, text)
    return parse_config(data, file)


def _parse_yaml(file: str, text: str) -> Any:
    try:
        import yaml
    except ImportError:
        raise _error(
            file, "", "reading YAML needs PyYAML: pip install 'aspecthook[yaml]', or use TOML"
        ) from None
    try:
        # safe_load with one check more: a SafeLoader, which builds no Python object
        return yaml.load(text, Loader=_unique_keys_loader(yaml))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None)
        if mark is not None and problem:
            where = f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
            context = getattr(exc, "context", None)
            detail = f"{where} ({context})" if context else where
        else:
            detail = str(exc)
        if str(problem).startswith("could not determine a constructor for the tag"):
            raise _error(file, "", f"cannot be read: {detail}: {_TAGS}") from None
        raise _error(file, "", f"is not valid YAML: {detail}") from None


#: What to do about a YAML tag (``!!python/object:...``, ``!Custom``) that safe_load refuses.
_TAGS = (
    "YAML is read with safe_load, which builds no Python object from a tag: remove the tag "
    "and write the value itself (a part as {type: Name, ...})"
)


@functools.cache
def _unique_keys_loader(yaml: Any) -> type[Any]:
    """PyYAML's ``SafeLoader`` (the one ``safe_load`` uses) refusing a key written twice
    in one mapping, which ``safe_load`` silently reads as the last one (``lr:`` twice, two
    ``optimizer:`` blocks). Keys a merge (``<<: *base``) brings in may be written again."""

    class UniqueKeySafeLoader(yaml.SafeLoader):  # type: ignore[misc]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: dict[Any, Any] = {}
            for key_node, _ in getattr(node, "value", ()):
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                    continue
                key = self.construct_object(key_node)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        f"in the mapping starting on line {node.start_mark.line + 1}",
                        node.start_mark,
                        f"the key {key!r} is written twice (first on line "
                        f"{seen[key].line + 1}): YAML would keep only the last; remove one",
                        key_node.start_mark,
                    )
                seen[key] = key_node.start_mark
            return super().construct_mapping(node, deep=deep)

    return UniqueKeySafeLoader


def _parse_toml(file: str, text: str) -> Any:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            raise _error(file, "", "reading TOML on Python 3.10 needs: pip install tomli") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _error(file, "", f"is not valid TOML: {exc}") from None


def parse_config(data: Any, file: str = "<config>") -> RunConfig:
    """Check the data read from a configuration file and return it as a ``RunConfig``."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise _error(file, "", f"must be a mapping with the keys {_TOP_KEYS}, not {_kind(data)}")
    data = _without_extensions(data)
    _check_keys(file, "", data, _TOP_KEYS)
    weave = data.get("weave", [])
    if not isinstance(weave, list):
        raise _error(
            file, "weave", f"must be a list of {{target:, aspects:}} entries, not {_kind(weave)}"
        )
    return RunConfig(
        file=file,
        weaves=tuple(_weave(file, f"weave[{i}]", entry) for i, entry in enumerate(weave)),
        strict=_bool(file, "strict", data.get("strict", False)),
        trace=_optional_str(file, "trace", data.get("trace")),
        summary=_bool(file, "summary", data.get("summary", True)),
        describe=_bool(file, "describe", data.get("describe", False)),
        logging=_logging(file, data.get("logging")),
    )


def _weave(file: str, key: str, entry: Any) -> WeaveSpec:
    if not isinstance(entry, Mapping):
        raise _error(file, key, f"must be a mapping with target: and aspects:, not {_kind(entry)}")
    _check_keys(file, key, entry, _WEAVE_KEYS)
    for required in ("target", "aspects"):
        if required not in entry:
            raise _error(
                file,
                f"{key}.{required}",
                "is missing: every weave entry needs "
                "target: (a dotted path, globs allowed) and aspects: (a list)",
            )
    targets = entry["target"]
    if isinstance(targets, str):
        targets = [targets]
    if not (isinstance(targets, list) and targets and all(_is_text(t) for t in targets)):
        raise _error(
            file,
            f"{key}.target",
            "must be a dotted path such as 'json.*' or "
            f"'pkg.mod.Class.method', or a list of them, not {_kind(entry['target'])}",
        )
    for i, target in enumerate(targets):
        problem = path_problem(target.strip(), in_config=True)
        if problem is not None:
            where = f"{key}.target" if isinstance(entry["target"], str) else f"{key}.target[{i}]"
            raise _error(file, where, problem)
    aspects = entry["aspects"]
    if isinstance(aspects, (str, Mapping)):
        aspects = [aspects]
    if not isinstance(aspects, list) or not aspects:
        raise _error(
            file,
            f"{key}.aspects",
            "must be a non-empty list of aspect names or "
            f"{{type: Name, parameter: value}} mappings, not {_kind(entry['aspects'])}",
        )
    return WeaveSpec(
        targets=tuple(t.strip() for t in targets),
        aspects=tuple(_aspect(file, f"{key}.aspects[{i}]", a) for i, a in enumerate(aspects)),
        key=key,
        requires=_optional_str(file, f"{key}.requires", entry.get("requires")),
        name=_optional_str(file, f"{key}.name", entry.get("name")),
    )


def _aspect(file: str, key: str, item: Any) -> AspectSpec:
    if _is_text(item):
        return AspectSpec(item.strip(), {}, key)
    if not isinstance(item, Mapping):
        raise _error(
            file,
            key,
            "must be an aspect name such as Timed, or a mapping "
            f"{{type: Timed, parameter: value}}, not {_kind(item)}",
        )
    params = dict(item)
    kind = params.pop("type", None)
    for name in params:
        if not isinstance(name, str):
            from .registry import _YAML_BOOLEANS

            raise _error(
                file,
                f"{key}.{name!r}",
                "a parameter name must be text"
                + (_YAML_BOOLEANS if isinstance(name, bool) else f", not {_kind(name)}"),
            )
    if not _is_text(kind):
        raise _error(
            file,
            f"{key}.type",
            f"must name the aspect type, e.g. {{type: Logged, level: debug}}, not {_kind(kind)}"
            + type_as_key_hint(kind, params),
        )
    return AspectSpec(kind.strip(), params, key)


def type_as_key_hint(kind: Any, params: Mapping[Any, Any]) -> str:
    """What to write for ``{Logged: {level: debug}}``, a type given as the only key of a
    mapping (``''`` for anything else)."""
    if kind is not None or len(params) != 1:
        return ""
    ((name, value),) = params.items()
    if not _is_text(name) or not (value is None or isinstance(value, Mapping)):
        return ""
    inner = "".join(f", {k}: {v!r}" for k, v in (value or {}).items())
    return f" (the type is not a key: write {{type: {name}{inner}}})"


def _logging(file: str, value: Any) -> Mapping[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _error(
            file, "logging", f"must be a mapping with the keys {_LOGGING_KEYS}, not {_kind(value)}"
        )
    _check_keys(file, "logging", value, _LOGGING_KEYS)
    if value.get("format", "console") not in ("console", "json"):
        raise _error(file, "logging.format", f"is {value['format']!r}; valid: 'console', 'json'")
    for k in ("level", "file"):
        _optional_str(file, f"logging.{k}", value.get(k))
    return dict(value)


# -- small checks ---------------------------------------------------------------------------


#: Top-level keys that start with this are left for the file's own use (YAML anchors to
#: merge from, notes), as compose files treat their extension fields.
_EXTENSION_PREFIX = "x-"
#: What the error about an unknown top-level key adds.
_EXTENSION_HINT = (
    f"; a block kept only to anchor from goes under a key starting with {_EXTENSION_PREFIX!r}"
)


def _without_extensions(data: Mapping[Any, Any]) -> dict[Any, Any]:
    """``data`` less its top-level ``x-...`` keys (see ``_EXTENSION_PREFIX``)."""
    prefix = _EXTENSION_PREFIX
    return {k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith(prefix))}


def _check_keys(file: str, key: str, data: Mapping[Any, Any], valid: tuple[str, ...]) -> None:
    for name in data:
        if name not in valid:
            close = difflib.get_close_matches(str(name), valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            where = f"{key}.{name}" if key else str(name)
            more = "" if key or close else _EXTENSION_HINT  # not a typo: a block?
            raise _error(
                file, where, f"is not a known key{hint}; valid keys: {', '.join(valid)}{more}"
            )


def _bool(file: str, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _error(file, key, f"must be true or false, not {_kind(value)}")
    return value


def _optional_str(file: str, key: str, value: Any) -> str | None:
    if isinstance(value, str) and not value.strip():
        raise _error(file, key, "is empty: give a value, or remove the key")
    if value is not None and not _is_text(value):
        raise _error(file, key, f"must be a string, not {_kind(value)}")
    return None if value is None else str(value).strip()


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _kind(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _kwargs(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in params.items())


def _error(file: str, key: str, message: str) -> ConfigError:
    where = f"{file}: {key}" if key else file
    return ConfigError(f"{where}: {message}", file=file, key=key)
