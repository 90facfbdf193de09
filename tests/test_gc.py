"""Handles, advice and join points never keep a woven or declared target alive."""

from __future__ import annotations

import gc
import sys
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import aspecthook as ah


def _make_class() -> type:
    class Local:
        def method(self, x: int) -> int:
            return x + 1

        @classmethod
        def build(cls, x: int) -> int:
            return x + 2

        @staticmethod
        def helper(x: int) -> int:
            return x + 3

    return Local


def _collect() -> None:
    for _ in range(3):
        gc.collect()


def _advice_of(handle: ah.Handle) -> list[ah.Advice]:
    advices = [item for item in handle.items if isinstance(item, ah.Advice)]
    assert advices
    return advices


@pytest.fixture
def log() -> list[Any]:
    """Where test advice records calls."""
    return []


@pytest.fixture
def before(log: list[Any]) -> Callable[[ah.CallContext], None]:
    """Before advice that records the join point name."""

    def advice(ctx: ah.CallContext) -> None:
        log.append(ctx.joinpoint.name)

    return advice


def test_woven_class_is_collected(before: Any, log: list[Any]) -> None:
    """A class woven whole dies with its last reference while the handle lives on."""
    cls = _make_class()
    handle = ah.weave(cls, before=before)
    assert cls().method(1) == 2
    assert log
    ref = weakref.ref(cls)
    method_ref = weakref.ref(vars(cls)["method"])
    original_ref = weakref.ref(vars(cls)["method"].__wrapped__)
    advices = _advice_of(handle)
    del cls
    _collect()
    assert ref() is None
    assert method_ref() is None
    assert original_ref() is None
    assert handle.active
    assert all(advice.active for advice in advices)
    handle.remove()
    assert not handle.active


def test_class_woven_through_a_classmethod_is_collected(before: Any) -> None:
    """Weaving cls.build (bound to the class) does not keep the class alive."""
    cls = _make_class()
    handle = ah.weave(cls.build, before=before)
    assert cls.build(1) == 3
    ref = weakref.ref(cls)
    del cls
    _collect()
    assert ref() is None
    assert handle.active
    handle.remove()


def test_woven_instance_is_collected(before: Any, log: list[Any]) -> None:
    """An instance woven with weave(obj) dies with its last reference."""
    obj = _make_class()()
    handle = ah.weave(obj, before=before)
    assert obj.method(1) == 2
    assert len(log) == 1
    ref = weakref.ref(obj)
    advices = _advice_of(handle)
    del obj
    _collect()
    assert ref() is None
    assert handle.active
    assert all(advice.active for advice in advices)
    handle.remove()


def test_instance_woven_through_a_bound_method_is_collected(before: Any) -> None:
    """weave(obj.method) does not keep obj alive."""
    obj = _make_class()()
    handle = ah.weave(obj.method, before=before)
    assert obj.method(1) == 2
    ref = weakref.ref(obj)
    del obj
    _collect()
    assert ref() is None
    handle.remove()


@pytest.fixture
def module() -> Iterator[types.ModuleType]:
    """A module registered in sys.modules for the test, removed afterwards."""
    mod = types.ModuleType("ah_gc_module")
    exec(
        "def func(x):\n    return x * 2\n\nclass Holder:\n    def run(self):\n        return 1\n",
        mod.__dict__,
    )
    sys.modules[mod.__name__] = mod
    yield mod
    sys.modules.pop(mod.__name__, None)


def test_function_woven_by_path_is_collected(module: types.ModuleType, before: Any) -> None:
    """A function woven by dotted path dies when its module lets go of it."""
    handle = ah.weave("ah_gc_module.func", before=before)
    assert module.func(2) == 4
    ref = weakref.ref(module.func.__wrapped__)
    proxy_ref = weakref.ref(module.func)
    del module.func
    _collect()
    assert ref() is None
    assert proxy_ref() is None
    assert handle.active
    handle.remove()


def test_class_woven_by_path_is_collected(module: types.ModuleType, before: Any) -> None:
    """A class woven by dotted path dies when its module lets go of it."""
    handle = ah.weave("ah_gc_module.Holder.run", before=before)
    assert module.Holder().run() == 1
    ref = weakref.ref(module.Holder)
    del module.Holder
    _collect()
    assert ref() is None
    handle.remove()


def test_removed_weave_keeps_nothing(before: Any) -> None:
    """After remove() the handle and advice still exist and the target can go."""
    cls = _make_class()
    handle = ah.weave(cls, before=before)
    handle.remove()
    ref = weakref.ref(cls)
    del cls
    _collect()
    assert ref() is None
    assert not handle.active


def test_declared_joinpoint_proxy_is_collected(weaver: ah.Weaver, log: list[Any]) -> None:
    """A declared join point with advice on it can be collected; the advice stays."""

    @weaver.before("gc_declared")
    def seen(ctx: ah.CallContext) -> None:
        log.append(ctx.args)

    def declare() -> Any:
        @weaver.joinpoint("gc_declared")
        def step(x: int) -> int:
            return x

        return step

    step = declare()
    assert step(5) == 5
    assert log == [[5]]
    proxy_ref = weakref.ref(step)
    target_ref = weakref.ref(step.__wrapped__)
    del step
    _collect()
    assert proxy_ref() is None
    assert target_ref() is None
    assert seen.active
    assert not seen.points
    assert [(r.joinpoint, r.status) for r in weaver.describe("gc_declared")] == [("", "unmatched")]


def test_declared_method_joinpoint_is_collected(weaver: ah.Weaver, log: list[Any]) -> None:
    """A class with a declared join point method can be collected while advice stays."""

    @weaver.after("gc_declared_method")
    def seen(ctx: ah.CallContext) -> None:
        log.append(ctx.result)

    def declare() -> type:
        class Runner:
            @weaver.joinpoint("gc_declared_method")
            def step(self) -> str:
                return "stepped"

        return Runner

    cls = declare()
    assert cls().step() == "stepped"
    assert log == ["stepped"]
    ref = weakref.ref(cls)
    del cls
    _collect()
    assert ref() is None
    assert seen.active
    assert not seen.points


def test_aspect_does_not_keep_targets_alive(log: list[Any]) -> None:
    """An aspect woven into several local targets lets all of them go."""

    class Tag(ah.Aspect):
        @ah.before()
        def tag(self, ctx: ah.CallContext) -> None:
            log.append(ctx.joinpoint.name)

    aspect = Tag()
    classes = [_make_class() for _ in range(3)]
    handles = [ah.weave(cls, aspect) for cls in classes]
    refs = [weakref.ref(cls) for cls in classes]
    for cls in classes:
        cls().method(1)
    assert len(log) == 3
    del classes, cls
    _collect()
    assert [ref() for ref in refs] == [None, None, None]
    for handle in handles:
        handle.remove()
    aspect_ref = weakref.ref(aspect)
    del aspect, handles, handle
    _collect()
    assert aspect_ref() is None
