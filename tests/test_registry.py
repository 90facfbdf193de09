"""aspecthook.registry: aspect types by name, lazy paths, plugins, checked parameters."""

from __future__ import annotations

import importlib.metadata
import inspect
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aspecthook.errors import (
    AspectHookError,
    AspectParameterError,
    InvalidOptionError,
    UnknownAspectError,
)
from aspecthook.registry import ASPECTS, ENTRY_POINT_GROUP, Parameters, Registry


class Base:
    """Stands in for ``Aspect``: keyword options every subclass passes on."""

    def __init__(self, *, priority: int | None = None, name: str | None = None) -> None:
        self.priority = priority
        self.name = name


class Stopwatch(Base):
    """A configurable aspect-like class that forwards ``**kwargs`` to its base."""

    def __init__(self, *, unit: str = "s", labels: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.unit = unit
        self.labels = labels


class Needy:
    """A class with a required parameter."""

    def __init__(self, target: str, *, level: str = "info") -> None:
        self.target = target
        self.level = level


@pytest.fixture
def registry() -> Registry:
    """A private registry with no plugin group."""
    return Registry("aspect")


@pytest.fixture
def plugin_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An importable module ``ah_plugin_mod`` defining ``Plugged``; yields its name."""
    (tmp_path / "ah_plugin_mod.py").write_text(
        textwrap.dedent(
            """
            class Plugged:
                def __init__(self, *, size=1):
                    self.size = size
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "ah_plugin_mod"
    sys.modules.pop("ah_plugin_mod", None)


def _fake_entry_points(
    monkeypatch: pytest.MonkeyPatch, *points: importlib.metadata.EntryPoint
) -> list[str]:
    """Make ``importlib.metadata.entry_points`` return ``points``; returns a call log."""
    calls: list[str] = []

    def entry_points(*, group: str) -> list[importlib.metadata.EntryPoint]:
        calls.append(group)
        return [ep for ep in points if ep.group == group]

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    return calls


# -- register and get ------------------------------------------------------------------------


def test_register_as_bare_decorator_uses_class_name(registry: Registry) -> None:
    """@registry.register registers a class under its own name and returns it unchanged."""

    @registry.register
    class Probe:
        pass

    assert registry.get("Probe") is Probe
    assert "Probe" in registry


def test_register_decorator_with_name(registry: Registry) -> None:
    """@registry.register(name=...) registers under that name only."""

    @registry.register(name="probe")
    class Probe:
        pass

    assert registry.get("probe") is Probe
    assert registry.names() == ["probe"]


def test_register_call_form_and_aliases(registry: Registry) -> None:
    """register(cls, name=...) can give one class several names (OpenMMLab-style aliases)."""
    registry.register(Stopwatch)
    registry.register(Stopwatch, name="StopwatchHook")
    assert registry.get("Stopwatch") is registry.get("StopwatchHook") is Stopwatch


def test_register_same_thing_twice_is_a_no_op(registry: Registry) -> None:
    """Registering the same class under the same name again changes nothing."""
    registry.register(Stopwatch)
    registry.register(Stopwatch)
    assert registry.names() == ["Stopwatch"]


def test_register_taken_name_is_refused_unless_replace(registry: Registry) -> None:
    """A name taken by another class raises, and replace=True overrides it."""
    registry.register(Stopwatch, name="Clock")
    with pytest.raises(InvalidOptionError, match=r"'Clock' is already registered.*replace=True"):
        registry.register(Needy, name="Clock")
    registry.register(Needy, name="Clock", replace=True)
    assert registry.get("Clock") is Needy


def test_register_string_without_colon_is_refused(registry: Registry) -> None:
    """A plain string is not a lazy path; the error shows the name= form instead."""
    with pytest.raises(InvalidOptionError, match=r"register\(name='Timed'\)"):
        registry.register("Timed")


def test_register_lazy_path_imports_on_first_get(registry: Registry, plugin_module: str) -> None:
    """register('pkg.mod:Name') imports nothing until the name is looked up."""
    registry.register(f"{plugin_module}:Plugged")
    assert plugin_module not in sys.modules
    cls = registry.get("Plugged")
    assert cls.__name__ == "Plugged"
    assert plugin_module in sys.modules
    assert registry.get("Plugged") is cls


def test_get_explicit_module_path(registry: Registry, plugin_module: str) -> None:
    """An unregistered 'package.module:Name' resolves by importing it."""
    cls = registry.get(f"{plugin_module}:Plugged")
    assert cls is sys.modules[plugin_module].Plugged


def test_get_path_that_cannot_be_imported(registry: Registry) -> None:
    """A path to a missing module says so and how to fix it."""
    with pytest.raises(UnknownAspectError, match=r"cannot be loaded.*install the package"):
        registry.get("no_such_module_xyz:Thing")


def test_get_path_to_non_callable(registry: Registry) -> None:
    """A path to something that cannot be called is refused."""
    with pytest.raises(UnknownAspectError, match="cannot be called"):
        registry.get("sys:version")


def test_unknown_name_lists_known_and_closest(registry: Registry) -> None:
    """An unknown type names the closest registered one and lists them all."""
    registry.register(Stopwatch)
    registry.register(Needy)
    with pytest.raises(UnknownAspectError) as info:
        registry.get("Stopwach")
    assert info.value.suggestion == "Stopwatch"
    assert info.value.known == ("Needy", "Stopwatch")
    assert "did you mean 'Stopwatch'?" in str(info.value)
    assert "Known types: Needy, Stopwatch" in str(info.value)
    assert isinstance(info.value, LookupError)
    assert isinstance(info.value, AspectHookError)


def test_unknown_name_matches_case_insensitively(registry: Registry) -> None:
    """A name differing only in case suggests the registered spelling."""
    registry.register(Stopwatch)
    with pytest.raises(UnknownAspectError, match="did you mean 'Stopwatch'"):
        registry.get("STOPWATCH")


def test_unknown_name_prefers_the_same_name_in_another_case_to_a_close_one(
    registry: Registry,
) -> None:
    """'adamw' suggests 'AdamW', not the closer-spelt 'Adam' (another type)."""

    class Adam: ...

    class AdamW: ...

    registry.register(Adam)
    registry.register(AdamW)
    with pytest.raises(UnknownAspectError, match="did you mean 'AdamW'") as info:
        registry.get("adamw")
    assert info.value.suggestion == "AdamW"


def test_a_dotted_path_without_its_colon_is_told_the_name_or_the_path(registry: Registry) -> None:
    """'pkg.mod.Stopwatch' suggests the registered 'Stopwatch'; a dotted path to a name the
    registry does not know suggests it written with the colon ('pkg.mod:Name')."""
    registry.register(Stopwatch)
    with pytest.raises(UnknownAspectError, match=r"did you mean 'Stopwatch'\?") as info:
        registry.get("tests.test_registry.Stopwatch")
    assert info.value.suggestion == "Stopwatch"
    with pytest.raises(UnknownAspectError, match=r"did you mean 'mypkg\.hooks:Traced'\?"):
        registry.get("mypkg.hooks.Traced")


def test_an_unknown_name_without_a_close_one_ends_its_sentence(registry: Registry) -> None:
    """Without a suggestion the message reads 'unknown aspect type 'X'. Known types: ...'."""
    registry.register(Stopwatch)
    with pytest.raises(UnknownAspectError, match=r"^unknown aspect type 'Zzz'\. Known types: "):
        registry.get("Zzz")


# -- build -----------------------------------------------------------------------------------


def test_build_from_mapping(registry: Registry) -> None:
    """build({'type': name, **params}) calls the class with the params."""
    registry.register(Stopwatch)
    sw = registry.build({"type": "Stopwatch", "unit": "ms", "priority": 10})
    assert isinstance(sw, Stopwatch)
    assert (sw.unit, sw.priority) == ("ms", 10)


def test_build_from_name_or_class(registry: Registry) -> None:
    """A bare name builds with defaults; a class as 'type' is used directly."""
    registry.register(Stopwatch)
    assert registry.build("Stopwatch").unit == "s"
    assert registry.build({"type": Needy, "target": "x"}).target == "x"


def test_build_parameter_in_another_case_suggests_it(registry: Registry) -> None:
    """A parameter written in another case ('Unit', a one-letter 'N') is offered as it is
    spelt; difflib alone finds no one-letter match."""
    registry.register(Stopwatch)
    with pytest.raises(
        AspectParameterError, match=r"does not take 'UNIT' \(did you mean 'unit'\?\)"
    ):
        registry.build({"type": "Stopwatch", "UNIT": "ms"})

    class Sized(Base):
        def __init__(self, *, n: int = 1, **kwargs: Any) -> None:
            super().__init__(**kwargs)

    registry.register(Sized)
    with pytest.raises(AspectParameterError, match=r"does not take 'N' \(did you mean 'n'\?\)"):
        registry.build({"type": "Sized", "N": 3})


def test_build_turns_lists_into_tuples_where_default_is_tuple(registry: Registry) -> None:
    """YAML lists become tuples for parameters whose default is a tuple."""
    registry.register(Stopwatch)
    assert registry.build({"type": "Stopwatch", "labels": ["a", "b"]}).labels == ("a", "b")


def test_build_wrong_parameter_lists_valid_ones(registry: Registry) -> None:
    """A misspelt parameter names the aspect, the closest name and every valid one."""
    registry.register(Stopwatch)
    with pytest.raises(AspectParameterError) as info:
        registry.build({"type": "Stopwatch", "unti": "ms"})
    message = str(info.value)
    assert "Stopwatch does not take 'unti' (did you mean 'unit'?)" in message
    assert "its parameters are: unit, labels, priority, name" in message
    assert info.value.valid == ("unit", "labels", "priority", "name")
    assert info.value.parameters == ("unti",)
    assert isinstance(info.value, TypeError)


def test_build_parameter_name_read_as_a_boolean_says_to_quote_it(registry: Registry) -> None:
    """A YAML key like a bare `on:` arrives as True: the error explains it."""
    registry.register(Stopwatch)
    with pytest.raises(
        AspectParameterError,
        match=r"Stopwatch parameter names must be text, not True \(YAML reads a bare on",
    ):
        registry.build({"type": "Stopwatch", True: "ms"})


def test_build_missing_required_parameter(registry: Registry) -> None:
    """A required parameter left out is named before the constructor runs."""
    registry.register(Needy)
    with pytest.raises(AspectParameterError, match="Needy needs 'target'"):
        registry.build({"type": "Needy"})


def test_build_without_type(registry: Registry) -> None:
    """A mapping with no 'type' says so and lists the known types."""
    registry.register(Needy)
    with pytest.raises(UnknownAspectError, match=r"has no 'type' key.*Known types: Needy"):
        registry.build({"level": "debug"})


def test_build_propagates_constructor_errors(registry: Registry) -> None:
    """An error raised by the constructor itself reaches the caller unchanged."""

    @registry.register
    class Picky:
        def __init__(self, *, level: str = "info") -> None:
            raise ValueError(f"bad level {level}")

    with pytest.raises(ValueError, match="bad level loud"):
        registry.build({"type": "Picky", "level": "loud"})


def test_parameters_follow_kwargs_into_base_classes() -> None:
    """Parameters.of walks **kwargs up the MRO; a factory with bare **kwargs is open."""
    params = Parameters.of(Stopwatch)
    assert params is not None
    assert list(params.defaults) == ["unit", "labels", "priority", "name"]
    assert not params.open

    def anything(**kwargs: Any) -> None:
        return None

    loose = Parameters.of(anything)
    assert loose is not None
    assert loose.open
    assert loose.check("anything", {"x": 1}) == {"x": 1}


# -- plugins ---------------------------------------------------------------------------------


def test_plugins_are_read_once_on_first_miss(
    monkeypatch: pytest.MonkeyPatch, plugin_module: str
) -> None:
    """Entry points are listed on the first unknown name only, and imported on use."""
    ep = importlib.metadata.EntryPoint("Plugged", f"{plugin_module}:Plugged", "test.group")
    calls = _fake_entry_points(monkeypatch, ep)
    registry = Registry("aspect", group="test.group")
    registry.register(Stopwatch)

    assert registry.get("Stopwatch") is Stopwatch
    assert calls == []  # a hit never reads the plugins
    assert plugin_module not in sys.modules
    assert registry.build({"type": "Plugged", "size": 3}).size == 3
    assert calls == ["test.group"]
    with pytest.raises(UnknownAspectError, match="Known types: Plugged, Stopwatch"):
        registry.get("Nope")
    assert calls == ["test.group"]  # read once


def test_registered_name_wins_over_plugin(
    monkeypatch: pytest.MonkeyPatch, plugin_module: str
) -> None:
    """A name registered in code shadows a plugin of the same name."""
    ep = importlib.metadata.EntryPoint("Stopwatch", f"{plugin_module}:Plugged", "test.group")
    _fake_entry_points(monkeypatch, ep)
    registry = Registry("aspect", group="test.group")
    registry.names()  # plugins read first
    registry.register(Stopwatch)
    assert registry.get("Stopwatch") is Stopwatch


def test_broken_plugin_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plugin whose module cannot be imported names the plugin and its group."""
    ep = importlib.metadata.EntryPoint("Broken", "no_such_module_xyz:Thing", "test.group")
    _fake_entry_points(monkeypatch, ep)
    registry = Registry("aspect", group="test.group")
    with pytest.raises(UnknownAspectError, match=r"plugin 'no_such_module_xyz:Thing'.*test.group"):
        registry.get("Broken")


def test_a_plugin_that_needs_a_missing_module_says_to_install_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A plugin whose own module imports but needs another that is not installed: the
    message names the missing module to install, not the plugin's (which is installed)."""
    (tmp_path / "ah_needy_plugin.py").write_text("import no_such_dependency_xyz\nThing = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = importlib.metadata.EntryPoint("Needy", "ah_needy_plugin:Thing", "test.group")
    _fake_entry_points(monkeypatch, ep)
    registry = Registry("aspect", group="test.group")
    try:
        with pytest.raises(
            UnknownAspectError,
            match=r"needs 'no_such_dependency_xyz', which is not installed: install it$",
        ):
            registry.get("Needy")
    finally:
        sys.modules.pop("ah_needy_plugin", None)


def test_a_plugin_whose_entry_point_leads_nowhere_says_its_package_is_broken(
    monkeypatch: pytest.MonkeyPatch, plugin_module: str
) -> None:
    """An installed package declaring an entry point to a module or name it does not have:
    reinstall or uninstall that package (installing it again under its name is no help)."""
    nowhere = importlib.metadata.EntryPoint("Gone", "no_such_module_xyz:Thing", "test.group")
    wrong = importlib.metadata.EntryPoint("Wrong", f"{plugin_module}:NoSuchName", "test.group")
    _fake_entry_points(monkeypatch, nowhere, wrong)
    registry = Registry("aspect", group="test.group")
    for name in ("Gone", "Wrong"):
        with pytest.raises(UnknownAspectError, match=r"is installed but .* reinstall or upgrade"):
            registry.get(name)


def test_a_plugin_missing_a_module_of_its_own_package_says_the_package_is_broken(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A plugin module that imports a module of its own package which is not there: the
    installed package is broken (reinstall it), as the docstring of _load_advice says;
    the message said to install 'ah_own_plugin._impl', which no installer offers."""
    package = tmp_path / "ah_own_plugin"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "aspects.py").write_text("import ah_own_plugin._impl\nThing = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = importlib.metadata.EntryPoint("Own", "ah_own_plugin.aspects:Thing", "test.group")
    _fake_entry_points(monkeypatch, ep)
    registry = Registry("aspect", group="test.group")
    try:
        with pytest.raises(UnknownAspectError, match=r"is installed but .* reinstall or upgrade"):
            registry.get("Own")
    finally:
        for name in ("ah_own_plugin", "ah_own_plugin.aspects"):
            sys.modules.pop(name, None)


def test_a_plugin_in_a_namespace_package_needing_another_of_it_says_to_install_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A namespace package (no __init__.py: google.*, azure.*) spans distributions, so a
    missing module of it beside the plugin's is a dependency to install, not the plugin's
    own."""
    (tmp_path / "ah_ns_pkg").mkdir()
    (tmp_path / "ah_ns_pkg" / "plugin.py").write_text("import ah_ns_pkg.other_dist\nThing = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = importlib.metadata.EntryPoint("Spread", "ah_ns_pkg.plugin:Thing", "test.group")
    _fake_entry_points(monkeypatch, ep)
    registry = Registry("aspect", group="test.group")
    try:
        with pytest.raises(UnknownAspectError, match=r"needs 'ah_ns_pkg.other_dist'.*install it$"):
            registry.get("Spread")
    finally:
        for name in ("ah_ns_pkg", "ah_ns_pkg.plugin"):
            sys.modules.pop(name, None)


def test_a_path_that_needs_a_missing_module_says_to_install_it(
    registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 'package.module:Name' path whose module imports a missing one names that one."""
    (tmp_path / "ah_needy_path.py").write_text("import no_such_dependency_xyz\nThing = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(UnknownAspectError, match=r"needs 'no_such_dependency_xyz'"):
            registry.get("ah_needy_path:Thing")
        with pytest.raises(UnknownAspectError, match=r"check the path"):
            registry.get("ah_no_such_module_xyz:Thing")
    finally:
        sys.modules.pop("ah_needy_path", None)


def test_a_plugin_name_two_packages_give_is_refused_on_use(
    monkeypatch: pytest.MonkeyPatch, plugin_module: str
) -> None:
    """Two installed packages giving one name for different objects: using the name is an
    error naming both, not whichever ``sys.path`` lists first; registering the one meant
    in code settles it. One package seen twice (the same object) is no conflict."""
    first = importlib.metadata.EntryPoint("Twin", f"{plugin_module}:Plugged", "test.group")
    second = importlib.metadata.EntryPoint("Twin", "other_pkg.aspects:Twin", "test.group")
    again = importlib.metadata.EntryPoint("Plugged", f"{plugin_module}:Plugged", "test.group")
    _fake_entry_points(monkeypatch, first, second, again, again)
    registry = Registry("aspect", group="test.group")
    with pytest.raises(UnknownAspectError, match=r"'Twin' is ambiguous.*other_pkg\.aspects:Twin"):
        registry.get("Twin")
    assert registry.build({"type": "Plugged"}).size == 1
    registry.register(f"{plugin_module}:Plugged", name="Twin")
    assert registry.get("Twin") is registry.get("Plugged")


# -- the shipped registry ----------------------------------------------------------------------


def test_aspects_registry_knows_the_shipped_aspects() -> None:
    """ASPECTS has Timed, Logged, Retry, Counted and Recorder, and reads plugins."""
    assert {"Counted", "Logged", "Recorder", "Retry", "Timed"} <= set(ASPECTS.names())
    assert ASPECTS.group == ENTRY_POINT_GROUP == "aspecthook.aspects"


def test_aspects_registry_resolves_to_the_real_classes() -> None:
    """Each shipped name resolves to the class aspecthook.aspects (or .testing) exports."""
    import aspecthook.aspects as aspects
    import aspecthook.testing as testing

    for name in ("Counted", "Logged", "Retry", "Timed"):
        assert ASPECTS.get(name) is getattr(aspects, name)
    assert ASPECTS.get("Recorder") is testing.Recorder
    timed = ASPECTS.build({"type": "Timed", "trace": True})
    assert timed.trace is True


def test_importing_the_registry_imports_no_aspect() -> None:
    """The shipped entries are lazy: importing the registry loads none of them."""
    code = (
        "import sys, aspecthook.registry\n"
        "print(sorted(m for m in sys.modules if m.startswith('aspecthook.aspects.')"
        " or m == 'aspecthook.testing' or m == 'torch'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


def test_a_class_taking_kwargs_itself_is_not_refused_any_parameter() -> None:
    """``def __init__(self, **cfg)`` with no base that closes it: any name may be given."""

    class Settings:
        def __init__(self, **cfg: Any) -> None:
            self.cfg = cfg

    params = Parameters.of(Settings)
    assert params is not None
    assert params.open
    registry = Registry("thing")
    registry.register(Settings)
    assert registry.build({"type": "Settings", "depth": 3}).cfg == {"depth": 3}


def test_registering_the_class_a_lazy_path_names_is_a_no_op(registry: Registry) -> None:
    """'pkg.mod:Name' registered, then the class itself under that name: the same thing."""
    registry.register(f"{Stopwatch.__module__}:{Stopwatch.__qualname__}")
    registry.register(Stopwatch)
    assert registry.get("Stopwatch") is Stopwatch


def test_an_explicit_path_must_name_a_class_the_registry_accepts() -> None:
    """A config cannot reach an arbitrary callable: the check comes before any call."""
    registry = Registry("stopwatch", accepts=(lambda v: v is Stopwatch, "a Stopwatch class"))
    assert registry.get(f"{Stopwatch.__module__}:Stopwatch") is Stopwatch
    with pytest.raises(UnknownAspectError, match=r"'os:getcwd' is .*getcwd, not a Stopwatch"):
        registry.get("os:getcwd")
    with pytest.raises(UnknownAspectError, match="not an Aspect"):
        ASPECTS.get("subprocess:Popen")


def test_a_path_to_a_registered_object_it_does_not_accept_names_its_registered_name() -> None:
    """'torch.nn.functional:cross_entropy' as a loss is refused as a path (only loss classes
    are), and the error gives the name it is registered under, which works."""
    registry = Registry("timer", accepts=(inspect.isclass, "a class"))
    registry.register(_timer_factory, name="timer")
    with pytest.raises(UnknownAspectError, match=r"it is registered as 'timer': give that name"):
        registry.get(f"{__name__}:_timer_factory")
    assert registry.get("timer") is _timer_factory
    with pytest.raises(UnknownAspectError, match=r"register anything else in code"):
        registry.get("os:getcwd")


def _timer_factory() -> Stopwatch:
    return Stopwatch()


def test_registering_a_shipped_aspect_class_again_is_a_no_op() -> None:
    """Shipped names are lazy strings of the re-exporting package; the class is the same
    thing whether or not the name was looked up yet."""
    from aspecthook.aspects import Timed

    assert ASPECTS.register(Timed) is Timed
    assert ASPECTS.get("Timed") is Timed


def test_a_lazily_registered_class_may_register_itself_as_its_module_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """'pkg.mod:Traced' registered, then ``@registry.register`` inside pkg.mod itself (the
    module still importing when it runs): the same thing, not a clash."""
    (tmp_path / "selfreg_mod.py").write_text(
        textwrap.dedent(
            """
            from aspecthook.registry import Registry
            import selfreg_registry
            @selfreg_registry.REGISTRY.register
            class Traced:
                pass
            """
        )
    )
    (tmp_path / "selfreg_registry.py").write_text(
        "from aspecthook.registry import Registry\nREGISTRY = Registry('thing')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import selfreg_registry

    selfreg_registry.REGISTRY.register("selfreg_mod:Traced")
    assert selfreg_registry.REGISTRY.get("Traced").__name__ == "Traced"


def test_plugin_failing_at_import_is_reported_and_others_still_load(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, plugin_module: str
) -> None:
    """A plugin whose module raises while importing (not an ImportError) is an
    UnknownAspectError naming the plugin and the exception; the other plugins still load."""
    (tmp_path / "ah_raising_mod.py").write_text("raise RuntimeError('boom at import')\n")
    bad = importlib.metadata.EntryPoint("Bad", "ah_raising_mod:Thing", "test.group")
    good = importlib.metadata.EntryPoint("Plugged", f"{plugin_module}:Plugged", "test.group")
    _fake_entry_points(monkeypatch, bad, good)
    registry = Registry("aspect", group="test.group")
    with pytest.raises(
        UnknownAspectError,
        match=r"'Bad' \(plugin 'ah_raising_mod:Thing' of entry-point group 'test.group'\) "
        r"cannot be loaded: importing it raised RuntimeError: boom at import",
    ) as caught:
        registry.get("Bad")
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert registry.get("Plugged") is sys.modules[plugin_module].Plugged
    sys.modules.pop("ah_raising_mod", None)


def test_path_whose_module_raises_at_import_is_reported(
    registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An explicit 'package.module:Name' whose module raises (a SyntaxError, say) is an
    UnknownAspectError naming the path, not the module's bare exception."""
    (tmp_path / "ah_syntax_mod.py").write_text("def broken(:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UnknownAspectError, match=r"'ah_syntax_mod:X' cannot be loaded: .*Syntax"):
        registry.get("ah_syntax_mod:X")


def test_a_name_that_is_not_a_string_is_refused_by_register() -> None:
    """register(obj, name=5) is refused (it registered, and names() then failed sorting)."""
    registry = Registry("thing")
    with pytest.raises(InvalidOptionError, match=r"register\(name=5\): a name is a string"):
        registry.register(dict, name=5)  # type: ignore[call-overload]
    assert registry.names() == []


@pytest.mark.parametrize("cfg", [5, None, ["Timed"]])
def test_build_and_get_refuse_what_is_not_a_name_or_a_mapping(cfg: Any) -> None:
    """build() / get() of something that is neither a name nor a mapping say so (they were
    a TypeError: "'int' object is not iterable")."""
    with pytest.raises(UnknownAspectError, match="is not a type name or a"):
        ASPECTS.build(cfg)
    with pytest.raises(UnknownAspectError, match="is not a name: give a string"):
        ASPECTS.get(cfg)


def test_parameters_numbers_are_those_that_take_a_number_and_no_text() -> None:
    """.numbers: a parameter annotated with a number type and nothing that takes text or
    a function (a string for a function of floats is no number mistyped)."""

    def factory(
        a: float,
        b: float | list[float] = 0.0,
        c: float | str = 1.0,
        d: Callable[[float], float] | None = None,
        e: Any = 0,
        f: int | None = None,
    ) -> None: ...

    accepted = Parameters.of(factory)
    assert accepted is not None
    assert accepted.numbers == {"a", "b", "f"}
