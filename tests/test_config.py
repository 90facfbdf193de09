"""The ``aspecthook run`` config file: YAML and TOML, checked with file and key in errors."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from aspecthook._config import AspectSpec, RunConfig, WeaveSpec, load_config, parse_config
from aspecthook.errors import AspectHookError, ConfigError
from aspecthook.registry import ASPECTS, Registry

YAML = """\
strict: false
trace: trace.json
summary: true
weave:
  - target: "json.*"
    aspects: [Timed, {type: Logged, level: debug}]
  - target: "torch.optim.Optimizer.step"
    requires: "torch>=2"
    aspects: [Timed]
"""

TOML = """\
strict = false
trace = "trace.json"
summary = true

[[weave]]
target = "json.*"
aspects = ["Timed", {type = "Logged", level = "debug"}]

[[weave]]
target = "torch.optim.Optimizer.step"
requires = "torch>=2"
aspects = ["Timed"]
"""


class Clock:
    """A Timed-like aspect type: a ``trace`` parameter and ``export_chrome_trace``."""

    def __init__(self, *, trace: bool = False, unit: str = "s") -> None:
        if unit not in ("s", "ms"):
            raise ValueError(f"unit must be 's' or 'ms', not {unit!r}")
        self.trace = trace
        self.unit = unit

    def export_chrome_trace(self, path: str) -> None:
        """Unused here."""


class Note:
    """An aspect type with one option."""

    def __init__(self, *, level: str = "info") -> None:
        self.level = level


@pytest.fixture
def registry() -> Registry:
    """A private registry holding Clock and Note."""
    reg = Registry("aspect")
    reg.register(Clock)
    reg.register(Note)
    return reg


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def config_error(data: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "cfg.yaml")
    return info.value


# -- reading files -----------------------------------------------------------------------------


def test_yaml_file_is_read(tmp_path: Path) -> None:
    """The documented YAML example reads into weaves with targets, aspects and guards."""
    config = load_config(write(tmp_path, "a.yaml", YAML))
    assert config.file.endswith("a.yaml")
    assert (config.strict, config.trace, config.summary) == (False, "trace.json", True)
    assert config.weaves == (
        WeaveSpec(
            targets=("json.*",),
            aspects=(
                AspectSpec("Timed", {}, "weave[0].aspects[0]"),
                AspectSpec("Logged", {"level": "debug"}, "weave[0].aspects[1]"),
            ),
            key="weave[0]",
        ),
        WeaveSpec(
            targets=("torch.optim.Optimizer.step",),
            aspects=(AspectSpec("Timed", {}, "weave[1].aspects[0]"),),
            key="weave[1]",
            requires="torch>=2",
        ),
    )


def test_toml_file_reads_the_same(tmp_path: Path) -> None:
    """The TOML form of the example gives the same config as the YAML one."""
    from_yaml = load_config(write(tmp_path, "a.yml", YAML))
    from_toml = load_config(write(tmp_path, "a.toml", TOML))
    assert from_toml.weaves == from_yaml.weaves
    assert (from_toml.strict, from_toml.trace, from_toml.summary) == (False, "trace.json", True)


def test_empty_file_is_an_empty_config(tmp_path: Path) -> None:
    """An empty YAML file weaves nothing and keeps the defaults."""
    config = load_config(write(tmp_path, "empty.yaml", ""))
    assert config == RunConfig(file=str(tmp_path / "empty.yaml"))
    assert config.summary


def test_unknown_extension_is_refused(tmp_path: Path) -> None:
    """Only .yaml, .yml and .toml are read."""
    with pytest.raises(ConfigError, match=r"a.json: unknown file type.*\.toml"):
        load_config(write(tmp_path, "a.json", "{}"))


def test_missing_file(tmp_path: Path) -> None:
    """A file that does not exist is a ConfigError naming it."""
    with pytest.raises(ConfigError, match=r"nope\.yaml: cannot read it"):
        load_config(tmp_path / "nope.yaml")


def test_invalid_yaml_names_the_file_and_line(tmp_path: Path) -> None:
    """A YAML syntax error names the file and where in it."""
    path = write(tmp_path, "bad.yaml", "weave:\n  - target: [json\n")
    with pytest.raises(
        ConfigError, match=r"bad\.yaml: is not valid YAML: line 3, column 1: expected ',' or ']'"
    ):
        load_config(path)


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    """A TOML syntax error names the file and where in it."""
    with pytest.raises(ConfigError, match=r"bad\.toml: is not valid TOML: .*line 1"):
        load_config(write(tmp_path, "bad.toml", "weave = ]\n"))


@pytest.mark.parametrize("tag", ["!!python/object/apply:os.getcwd", "!Timed"])
def test_yaml_python_tags_are_refused(tmp_path: Path, tag: str) -> None:
    """YAML is read with safe_load: an object tag is an error, never executed, that says
    why and what to write instead (the YAML itself is valid: the message does not say not)."""
    path = write(tmp_path, "evil.yaml", f"weave: {tag} []\n")
    with pytest.raises(
        ConfigError,
        match=r"evil\.yaml: cannot be read: line 1, column 8: .*tag.*safe_load.*remove the tag",
    ):
        load_config(path)


def test_yaml_key_written_twice_is_refused(tmp_path: Path) -> None:
    """A key written twice in one mapping is an error naming both lines, not the last one
    silently kept (safe_load's behaviour)."""
    path = write(
        tmp_path,
        "twice.yaml",
        """\
        weave:
          - target: json.dumps
            aspects: [Timed]
            target: json.loads
        """,
    )
    with pytest.raises(
        ConfigError,
        match=r"twice\.yaml: is not valid YAML: line 4, column 5: the key 'target' is written "
        r"twice \(first on line 2\)",
    ):
        load_config(path)


def test_yaml_merge_keys_may_be_written_again(tmp_path: Path) -> None:
    """Anchors and merge keys work, and a key the merge brought in may be set again."""
    path = write(
        tmp_path,
        "merge.yaml",
        """\
        weave:
          - &base {target: json.dumps, aspects: [Timed]}
          - {<<: *base, target: json.loads}
        """,
    )
    config = load_config(path)
    assert [w.targets for w in config.weaves] == [("json.dumps",), ("json.loads",)]


def test_top_level_x_keys_hold_anchors_and_are_left_alone(tmp_path: Path) -> None:
    """A top-level key starting with 'x-' is the file's own (a block to anchor from): not
    refused, not read as a setting; any other unknown top-level key says where such a
    block goes."""
    path = write(
        tmp_path,
        "anchors.yaml",
        """\
        x-timed: &timed {aspects: [Timed]}
        weave:
          - {<<: *timed, target: json.dumps}
        """,
    )
    config = load_config(path)
    assert [(w.targets, len(w.aspects)) for w in config.weaves] == [(("json.dumps",), 1)]
    assert "a key starting with 'x-'" in str(config_error({"timed": {}}))


# -- checking the structure ----------------------------------------------------------------------


def test_config_error_is_a_value_error() -> None:
    """ConfigError is caught as ValueError and AspectHookError and carries file and key."""
    error = config_error({"weave": "json.*"})
    assert isinstance(error, ValueError)
    assert isinstance(error, AspectHookError)
    assert (error.file, error.key) == ("cfg.yaml", "weave")


def test_top_level_must_be_a_mapping() -> None:
    """A list at the top names the keys a file may have."""
    assert "must be a mapping with the keys" in str(config_error(["json.*"]))


def test_unknown_key_suggests_and_lists_valid_ones() -> None:
    """A misspelt key is named with the closest valid key and the list of valid keys."""
    error = config_error({"waeve": []})
    assert error.key == "waeve"
    assert str(error) == (
        "cfg.yaml: waeve: is not a known key (did you mean 'weave'?); "
        "valid keys: describe, logging, strict, summary, trace, weave"
    )


def test_unknown_key_in_a_weave_entry() -> None:
    """A bad key inside a weave entry is reported with its index."""
    error = config_error({"weave": [{"target": "json.*", "aspects": ["Timed"], "require": "x"}]})
    assert error.key == "weave[0].require"
    assert "did you mean 'requires'?" in str(error)


def test_weave_entry_needs_target_and_aspects() -> None:
    """A weave entry without aspects names the missing key."""
    error = config_error({"weave": [{"target": "json.*"}, {"aspects": ["Timed"]}]})
    assert error.key == "weave[0].aspects"
    assert "every weave entry needs target:" in str(error)


def test_target_must_be_a_path_or_list_of_paths() -> None:
    """A target that is not a string (or list of strings) says what is valid."""
    error = config_error({"weave": [{"target": 3, "aspects": ["Timed"]}]})
    assert error.key == "weave[0].target"
    assert "must be a dotted path such as 'json.*'" in str(error)


@pytest.mark.parametrize(
    ("target", "key", "says"),
    [
        ("json.dumps, json.loads", "weave[0].target", "a list: target: [json.dumps, json.loads]"),
        ("json/dumps", "weave[0].target", "'json/dumps' is not a dotted path"),
        ("json..dumps", "weave[0].target", "an empty part"),
        (".json.dumps", "weave[0].target", "an empty part"),
        ("json.dumps()", "weave[0].target", "'json.dumps()' is not a dotted path"),
        ("json::dumps", "weave[0].target", "one ':'"),
        (":dumps", "weave[0].target", "an empty part"),
        ("json:", "weave[0].target", "an empty part"),
        (["json.*", "json dumps"], "weave[0].target[1]", "'json dumps' is not a dotted path"),
    ],
)
def test_a_target_that_is_no_dotted_path_is_refused(target: Any, key: str, says: str) -> None:
    """A target no module path can be (a comma-separated string, a slash, an empty part,
    call parentheses) is refused at its key, before anything runs; it was woven, failed
    when the program imported the module, and was reported as a warning at exit."""
    error = config_error({"weave": [{"target": target, "aspects": ["Timed"]}]})
    assert error.key == key
    assert says in str(error)


def test_targets_with_globs_colons_and_subclass_marks_are_accepted() -> None:
    """Globs, a ':' where the module ends and a '+' for subclasses are dotted paths."""
    targets = ["json.*", "pkg.models.*.forward", "pkg.mod:Class.method", "a.[!_]?b", "t.Base+.step"]
    config = parse_config({"weave": [{"target": targets, "aspects": ["Timed"]}]})
    assert config.weaves[0].targets == tuple(targets)


def test_target_list_and_single_aspect_forms() -> None:
    """target: may be a list, and aspects: a single name or mapping."""
    config = parse_config(
        {"weave": [{"target": ["json.dumps", "json.loads"], "aspects": "Timed"}]}, "c.yaml"
    )
    assert config.weaves[0].targets == ("json.dumps", "json.loads")
    assert config.weaves[0].aspects == (AspectSpec("Timed", {}, "weave[0].aspects[0]"),)


def test_aspect_mapping_needs_a_type() -> None:
    """An aspect mapping without type: points at weave[i].aspects[j].type."""
    error = config_error({"weave": [{"target": "x.y", "aspects": ["Timed", {"level": "debug"}]}]})
    assert error.key == "weave[0].aspects[1].type"
    assert "must name the aspect type" in str(error)


def test_aspect_type_written_as_a_key_says_to_write_type() -> None:
    """{Logged: {level: debug}} (the type as the mapping's key) is shown the mapping to write."""
    error = config_error(
        {"weave": [{"target": "x.y", "aspects": [{"Logged": {"level": "debug"}}]}]}
    )
    assert error.key == "weave[0].aspects[0].type"
    assert "write {type: Logged, level: 'debug'}" in str(error)
    error = config_error({"weave": [{"target": "x.y", "aspects": [{"Timed": None}]}]})
    assert "write {type: Timed}" in str(error)


def test_scalar_options_are_type_checked() -> None:
    """strict/summary must be booleans and trace a string."""
    assert config_error({"strict": "yes"}).key == "strict"
    assert config_error({"summary": 1}).key == "summary"
    assert config_error({"trace": 5}).key == "trace"


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"trace": " "}, "trace"),
        ({"logging": {"file": ""}}, "logging.file"),
        (
            {"weave": [{"target": "json.*", "aspects": ["Timed"], "requires": ""}]},
            "weave[0].requires",
        ),
        ({"weave": [{"target": "json.*", "aspects": ["Timed"], "name": ""}]}, "weave[0].name"),
    ],
)
def test_an_empty_string_option_says_it_is_empty(data: dict[str, Any], key: str) -> None:
    """An option given as an empty string is refused as empty (remove it or fill it in),
    not as "must be a string, not str ''", which reads as a contradiction."""
    error = config_error(data)
    assert error.key == key
    assert str(error).endswith(f"{key}: is empty: give a value, or remove the key")


def test_logging_section_is_checked() -> None:
    """logging: accepts format console/json, level and file, nothing else."""
    assert parse_config({"logging": {"format": "json", "level": "debug"}}).logging == {
        "format": "json",
        "level": "debug",
    }
    assert "valid: 'console', 'json'" in str(config_error({"logging": {"format": "xml"}}))
    assert config_error({"logging": {"colour": True}}).key == "logging.colour"


# -- building aspects ----------------------------------------------------------------------------


def test_build_aspects_shares_equal_specs(registry: Registry) -> None:
    """Equal aspect specs across weaves build one shared instance; different ones do not."""
    config = parse_config(
        {
            "weave": [
                {"target": "a.b", "aspects": ["Clock", {"type": "Note", "level": "debug"}]},
                {"target": "c.d", "aspects": [{"type": "Clock"}, {"type": "Note"}]},
            ]
        }
    )
    (clock1, note1), (clock2, note2) = config.build_aspects(registry)
    assert clock1 is clock2
    assert note1 is not note2
    assert (note1.level, note2.level) == ("debug", "info")


def test_build_aspects_turns_on_tracing_for_timers(registry: Registry) -> None:
    """With trace=True a Timed-like type records events unless the file says otherwise."""
    config = parse_config(
        {"weave": [{"target": "a.b", "aspects": ["Clock", {"type": "Clock", "trace": False}]}]}
    )
    ((traced, untraced),) = config.build_aspects(registry, trace=True)
    assert traced.trace is True
    assert untraced.trace is False
    ((plain, _),) = config.build_aspects(registry)
    assert plain.trace is False


def test_unknown_type_error_names_key_and_closest(registry: Registry) -> None:
    """An unknown aspect type points at its .type key and suggests the closest name."""
    config = parse_config(
        {"weave": [{"target": "a.b", "aspects": ["Clock"]}, {"target": "c", "aspects": ["Clok"]}]},
        "run.yaml",
    )
    with pytest.raises(ConfigError) as info:
        config.build_aspects(registry)
    assert info.value.key == "weave[1].aspects[0].type"
    assert str(info.value).startswith(
        "run.yaml: weave[1].aspects[0].type: unknown aspect type 'Clok'; did you mean 'Clock'?"
    )
    assert "Known types: Clock, Note" in str(info.value)


def test_wrong_parameter_error_names_key_and_valid_ones(registry: Registry) -> None:
    """A misspelt parameter points at its own key and lists the valid parameters."""
    config = parse_config({"weave": [{"target": "a", "aspects": [{"type": "Note", "levle": 1}]}]})
    with pytest.raises(ConfigError) as info:
        config.build_aspects(registry)
    assert info.value.key == "weave[0].aspects[0].levle"
    assert "Note does not take 'levle' (did you mean 'level'?); its parameters are: level" in str(
        info.value
    )


def test_constructor_error_names_the_aspect_key(registry: Registry) -> None:
    """A value the aspect's constructor refuses is reported at the aspect's key."""
    config = parse_config({"weave": [{"target": "a", "aspects": [{"type": "Clock", "unit": "h"}]}]})
    with pytest.raises(ConfigError, match=r"weave\[0\].aspects\[0\]: Clock\(unit='h'\) failed"):
        config.build_aspects(registry)


class Reader:
    """An aspect type whose constructor opens the file it is given."""

    def __init__(self, *, path: str = "rules.txt") -> None:
        with open(path, encoding="utf-8") as f:
            self.rules = f.read()


def test_any_constructor_error_is_a_config_error_at_the_aspect(tmp_path: Path) -> None:
    """A constructor that fails with another exception than TypeError / ValueError (a
    file it cannot open) is a ConfigError at the aspect's key naming the exception, so
    that ``aspecthook run`` says which entry of the file is wrong and exits 2, rather
    than ending with a traceback."""
    registry = Registry("aspect")
    registry.register(Reader)
    missing = str(tmp_path / "nope.txt")
    config = parse_config(
        {"weave": [{"target": "a", "aspects": [{"type": "Reader", "path": missing}]}]}, "r.yaml"
    )
    with pytest.raises(ConfigError) as info:
        config.build_aspects(registry)
    assert info.value.key == "weave[0].aspects[0]"
    assert f"Reader(path={missing!r}) failed: FileNotFoundError: [Errno 2]" in str(info.value)


def test_build_with_the_shipped_registry(tmp_path: Path) -> None:
    """The documented example builds real Timed and Logged aspects, one Timed shared."""
    from aspecthook.aspects import Logged, Timed

    config = load_config(write(tmp_path, "a.yaml", YAML))
    (timed, logged), (timed2,) = config.build_aspects(ASPECTS, trace=True)
    assert isinstance(timed, Timed)
    assert isinstance(logged, Logged)
    assert timed2 is timed
    assert timed.trace is True
