"""weave(): advice woven into existing functions, methods, classes, modules and instances."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import functools
import gc
import importlib
import itertools
import json
import math
import operator
import pickle
import re
import sys
import textwrap
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Generic, TypeVar
from unittest import mock

import _weave_targets as targets
import pytest
import wrapt
from _weave_targets import Child, Model
from structlog.testing import capture_logs

import aspecthook as ah
from aspecthook.aspects import Timed
from aspecthook.errors import (
    AdviceSignatureError,
    AspectDefinitionError,
    InvalidOptionError,
    OrderingCycleError,
    WeaveTargetError,
)

MOD = "_weave_targets"
_T = TypeVar("_T")


@pytest.fixture(autouse=True)
def _originals_back() -> Iterator[None]:
    """After every test (and the default weaver's cleanup) the targets are the originals."""
    yield
    ah.default_weaver.clear()
    assert targets.changed() == []


def chain(obj: Any) -> list[Any]:
    """``obj`` and every object under it through ``__wrapped__``, outermost first."""
    return list(wrapt.wrapper_chain(obj))


def record(log: list[Any], tag: object) -> Callable[[ah.CallContext], None]:
    """Advice that appends ``tag`` to ``log``."""

    def advice(ctx: ah.CallContext) -> None:
        log.append(tag)

    return advice


def statuses(target: str) -> list[str]:
    """The statuses ``describe()`` shows for a weave target's rows."""
    return [row.status for row in ah.describe() if row.joinpoint == target]


# -- module functions --------------------------------------------------------------------


@pytest.mark.parametrize(
    "target",
    [targets.add_one, f"{MOD}.add_one", f"{MOD}:add_one"],
    ids=["object", "dotted", "colon"],
)
def test_weave_module_function(target: Any) -> None:
    """A module function woven by object or path runs its advice and is put back after."""
    original = targets.add_one
    log: list[Any] = []
    handle = ah.weave(target, before=lambda ctx: log.append(("before", tuple(ctx.args))))
    assert targets.add_one is not original
    assert targets.add_one(1) == 2
    assert log == [("before", (1,))]
    handle.remove()
    assert targets.add_one is original


def test_weave_function_under_functools_wraps() -> None:
    """A module function decorated with functools.wraps is woven by object where it lives."""
    original = targets.decorated
    log: list[Any] = []
    with ah.weave(targets.decorated, before=lambda ctx: log.append(ctx.args)):
        assert targets.decorated.__wrapped__ is original
        assert targets.decorated(1) == 101
    assert log == [[1]]
    assert targets.decorated is original


def test_woven_function_keeps_metadata() -> None:
    """The woven function still looks like the original: name, doc, __wrapped__."""
    original = targets.add_one
    with ah.weave(targets.add_one, before=lambda ctx: None):
        assert targets.add_one.__name__ == "add_one"
        assert targets.add_one.__qualname__ == "add_one"
        assert targets.add_one.__wrapped__ is original


def test_ctx_sees_target_args_and_result() -> None:
    """Advice sees the original callable, the arguments and the result of the call."""
    seen: list[Any] = []

    def after(ctx: ah.CallContext) -> None:
        seen.append((ctx.target, ctx.instance, ctx.args, ctx.kwargs, ctx.result))

    with ah.weave(targets.add_one, after=after):
        assert targets.add_one(x=4) == 5
    assert seen == [(targets.add_one, None, [], {"x": 4}, 5)]


# -- methods: the full matrix ---------------------------------------------------------------

METHODS = ["forward", "build", "helper"]


def _via(how: str, name: str) -> Any:
    if how == "attribute":
        return getattr(Model, name)  # a function, a bound classmethod, a function
    if how == "descriptor":
        return vars(Model)[name]  # the function, classmethod or staticmethod object
    if how == "dotted":
        return f"{MOD}.Model.{name}"
    return f"{MOD}:Model.{name}"


def _call(name: str) -> Any:
    return getattr(Model(), name)(1) if name == "forward" else getattr(Model, name)(1)


EXPECTED = {"forward": 11, "build": ("Model", 1), "helper": -1}


@pytest.mark.parametrize("how", ["attribute", "descriptor", "dotted", "colon"])
@pytest.mark.parametrize("name", METHODS)
def test_weave_method_in_class_dict(name: str, how: str) -> None:
    """Instance, class and static methods are woven in the class __dict__ however named."""
    original = vars(Model)[name]
    log: list[Any] = []
    handle = ah.weave(_via(how, name), before=lambda ctx: log.append(ctx.instance))
    proxy = vars(Model)[name]
    assert proxy is not original
    assert proxy.__wrapped__ is original
    assert _call(name) == EXPECTED[name]
    instance = log[0]
    if name == "forward":
        assert isinstance(instance, Model)
    elif name == "build":
        assert instance is Model
    else:
        assert instance is None
    handle.remove()
    assert vars(Model)[name] is original


def test_woven_instance_method_binds_like_the_original() -> None:
    """A woven instance method works through an instance, the class and a subclass."""
    log: list[Any] = []
    with ah.weave(f"{MOD}.Model.forward", before=lambda ctx: log.append((ctx.instance, ctx.args))):
        obj, child = Model(), Child()
        assert obj.forward(1) == 11
        assert Model.forward(obj, 2) == 12
        assert child.forward(3) == 13
    assert log == [(obj, [1]), (obj, [2]), (child, [3])]


def test_woven_classmethod_binds_like_the_original() -> None:
    """A woven classmethod gets the class it is called through, also from instances."""
    log: list[Any] = []
    with ah.weave(f"{MOD}.Model.build", before=lambda ctx: log.append(ctx.instance)):
        assert Model().build(1) == ("Model", 1)
        assert Model.build(2) == ("Model", 2)
        assert Child().build(3) == ("Child", 3)
        assert Child.build(4) == ("Child", 4)
    assert log == [Model, Model, Child, Child]


def test_woven_staticmethod_binds_like_the_original() -> None:
    """A woven staticmethod takes no self or cls wherever it is called from."""
    log: list[Any] = []
    with ah.weave(f"{MOD}.Model.helper", before=lambda ctx: log.append((ctx.instance, ctx.args))):
        assert Model().helper(1) == -1
        assert Model.helper(2) == -2
        assert Child.helper(3) == -3
    assert log == [(None, [1]), (None, [2]), (None, [3])]


def test_bound_method_of_instance_weaves_only_that_instance() -> None:
    """weave(obj.method) advises that object's method; other instances and the class not."""
    woven_obj, other = Model(), Model()
    log: list[Any] = []
    handle = ah.weave(woven_obj.forward, before=lambda ctx: log.append(ctx.instance))
    assert "forward" in vars(woven_obj)
    assert vars(Model)["forward"] is targets.ORIGINALS["Model.forward"]
    assert other.forward(1) == 11
    assert log == []
    assert woven_obj.forward(1) == 11
    assert log == [woven_obj]
    handle.remove()
    assert "forward" not in vars(woven_obj)


@pytest.mark.parametrize("name", METHODS)
def test_inherited_method_woven_on_subclass_only(name: str) -> None:
    """'mod.Child.method' advises Child, not Model, and leaves no shadow on Child after."""
    original = vars(Model)[name]
    log: list[Any] = []
    handle = ah.weave(f"{MOD}.Child.{name}", before=lambda ctx: log.append(ctx.instance))
    assert vars(Model)[name] is original
    assert name in vars(Child)
    obj = Model()
    assert getattr(obj, name)(1) == EXPECTED[name]
    assert log == []
    assert getattr(Child(), name)(1) is not None
    assert len(log) == 1
    handle.remove()
    assert name not in vars(Child)
    assert vars(Model)[name] is original


# -- whole classes, modules and instances -----------------------------------------------------


def test_weave_class_weaves_every_method() -> None:
    """weave(cls) advises its instance, class and static methods, once each."""
    log: list[Any] = []
    handle = ah.weave(Model, before=lambda ctx: log.append(ctx.joinpoint.name))
    assert Model().forward(1) == 11
    assert Model.build(1) == ("Model", 1)
    assert Model.helper(1) == -1
    assert Child().forward(1) == 11
    assert log == [
        f"{MOD}.Model.forward",
        f"{MOD}.Model.build",
        f"{MOD}.Model.helper",
        f"{MOD}.Model.forward",
    ]
    handle.remove()
    assert targets.changed() == []


def test_weave_module_weaves_its_own_functions() -> None:
    """weave(module) advises the functions defined there, not imported ones or classes."""
    log: list[Any] = []
    handle = ah.weave(targets, after=lambda ctx: log.append(ctx.joinpoint.name))
    assert targets.add_one(1) == 2
    assert targets.double(2) == 4
    assert targets.dumps is targets.ORIGINALS["dumps"]
    assert vars(Model)["forward"] is targets.ORIGINALS["Model.forward"]
    assert log == [f"{MOD}.add_one", f"{MOD}.double"]
    handle.remove()
    assert targets.changed() == []


def test_weave_module_by_path() -> None:
    """weave('pkg.mod') is the same as weave(module)."""
    log: list[Any] = []
    with ah.weave(MOD, before=record(log, "hit")):
        targets.train_step(1)
        targets.evaluate(1)
    assert log == ["hit", "hit"]


def test_weave_instance_affects_only_that_instance() -> None:
    """weave(obj) advises obj's methods; another instance and the class stay untouched."""
    obj, other = Model(), Model()
    log: list[Any] = []
    handle = ah.weave(obj, before=lambda ctx: log.append(ctx.instance))
    assert obj.forward(1) == 11
    assert other.forward(1) == 11
    assert Child().forward(1) == 11
    assert log == [obj]
    assert vars(Model)["forward"] is targets.ORIGINALS["Model.forward"]
    handle.remove()
    assert "forward" not in vars(obj)
    assert obj.forward(1) == 11
    assert log == [obj]


def test_an_instance_weave_leaves_data_that_shadows_a_method_alone() -> None:
    """An instance whose own attribute shadows a method with data (``obj.forward = 5``)
    keeps that value as it is: the weave put a proxy around the ``5``."""
    obj = Model()
    obj.forward = 5  # type: ignore[method-assign,assignment]
    with ah.weave(obj, before=lambda ctx: None):
        assert type(vars(obj)["forward"]) is int
    assert vars(obj) == {"forward": 5}


def test_weave_two_instances_separately() -> None:
    """Each instance gets its own advice; removing one leaves the other woven."""
    a, b = Model(), Model()
    log: list[Any] = []
    ha = ah.weave(a, before=record(log, "a"))
    hb = ah.weave(b, before=record(log, "b"))
    a.forward(1)
    b.forward(1)
    ha.remove()
    a.forward(1)
    b.forward(1)
    hb.remove()
    assert log == ["a", "b", "b"]
    assert "forward" not in vars(a)
    assert "forward" not in vars(b)


# -- dotted paths and globs ----------------------------------------------------------------


def test_glob_over_classes_weaves_every_match() -> None:
    """'mod.*.forward' weaves forward of every class in the module."""
    log: list[Any] = []
    handle = ah.weave(f"{MOD}.*.forward", before=lambda ctx: log.append(ctx.joinpoint.name))
    assert Model().forward(1) == 11
    assert targets.Encoder().forward(1) == ("encoder", 1)
    assert targets.Decoder().forward(1) == ("decoder", 1)
    assert Child().forward(1) == 11
    assert Model.build(1) == ("Model", 1)
    assert log == [
        f"{MOD}.Model.forward",
        f"{MOD}.Encoder.forward",
        f"{MOD}.Decoder.forward",
        f"{MOD}.Model.forward",
    ]
    for obj in (Model, targets.Encoder, targets.Decoder):
        assert len(chain(vars(obj)["forward"])) == 2
    handle.remove()
    assert targets.changed() == []


def test_glob_over_functions_weaves_matching_names() -> None:
    """'mod.train_*' weaves train_step and train_epoch and nothing else."""
    log: list[Any] = []
    with ah.weave(f"{MOD}.train_*", before=lambda ctx: log.append(ctx.joinpoint.name)):
        targets.train_step(1)
        targets.train_epoch(1)
        targets.evaluate(1)
        assert targets.evaluate is targets.ORIGINALS["evaluate"]
    assert log == [f"{MOD}.train_step", f"{MOD}.train_epoch"]


def test_glob_matching_nothing_is_skipped() -> None:
    """A glob with no match is skipped non-strict and an error with strict=True."""
    handle = ah.weave(f"{MOD}.nothing_*", before=lambda ctx: None)
    assert statuses(f"{MOD}.nothing_*") == ["skipped"]
    handle.remove()
    assert statuses(f"{MOD}.nothing_*") == []
    with pytest.raises(WeaveTargetError, match=r"nothing_\* matched nothing"):
        ah.weave(f"{MOD}.nothing_*", before=lambda ctx: None, strict=True)
    assert ah.default_weaver.registered == []


@pytest.mark.parametrize("target", [f"{MOD}.nothing_*", f"{MOD}.Model.nothing_*"])
def test_a_weave_that_matches_nothing_is_logged_as_skipped(target: str) -> None:
    """A weave that finds nothing to weave is logged, as a missing target is: a misspelt
    glob does not pass silently."""
    with capture_logs() as logs:
        handle = ah.weave(target, before=lambda ctx: None)
    assert [(e["event"], e["target"], e["reason"]) for e in logs] == [
        ("weave.skipped", target, "matched nothing")
    ]
    handle.remove()


def test_colon_path_says_where_the_module_ends() -> None:
    """'pkg.mod:Class.method' weaves the method of the class in that module."""
    log: list[Any] = []
    with ah.weave(f"{MOD}:Encoder.forward", after=lambda ctx: log.append(ctx.result)):
        targets.Encoder().forward(7)
    assert log == [("encoder", 7)]


# -- kinds of advice and aspects -------------------------------------------------------------


def test_keyword_advice_of_every_kind() -> None:
    """before=, after=, on_error= and around= functions all run at the woven target."""
    log: list[Any] = []

    def around(ctx: ah.CallContext, proceed: Callable[..., Any]) -> Any:
        log.append("around-in")
        result = proceed()
        log.append("around-out")
        return result

    def on_error(ctx: ah.CallContext) -> None:
        log.append(("error", type(ctx.exception).__name__))
        ctx.recover(-1)

    with ah.weave(
        f"{MOD}.fail",
        before=record(log, "before"),
        after=record(log, "after"),
        on_error=on_error,
        around=around,
    ):
        assert targets.fail(1) == -1
    assert log == ["before", "around-in", ("error", "ValueError"), "after"]


def test_keyword_advice_accepts_lists_and_options() -> None:
    """A list of functions per kind is accepted; options such as priority apply to them."""
    log: list[Any] = []
    with (
        ah.weave(targets.add_one, before=record(log, "late")),
        ah.weave(
            targets.add_one,
            before=[record(log, "early-1"), record(log, "early-2")],
            priority="HIGH",
        ),
    ):
        targets.add_one(1)
    assert log == ["early-1", "early-2", "late"]


def test_options_without_functions_are_refused() -> None:
    """Options with no before=/after=/... function to apply to raise InvalidOptionError."""
    with pytest.raises(InvalidOptionError, match="none were given"):
        ah.weave(targets.add_one, priority="HIGH")
    assert targets.changed() == []


def test_filter_options_given_with_only_an_aspect_say_where_they_apply() -> None:
    """weave(f, Logged(), every=2) is refused with where every= goes, not with advice to
    set it on the aspect, whose constructor refuses it in turn."""
    with pytest.raises(
        InvalidOptionError,
        match=r"options \['every'\] apply to .* none were given: an aspect takes priority=.* "
        r"when it is made .*; every=, window=, once=, when= and rank= filter advice functions",
    ):
        ah.weave(targets.add_one, Timed(), every=2)
    assert targets.changed() == []


def test_bad_advice_signature_is_refused_before_weaving() -> None:
    """A before= function that cannot take ctx is refused and nothing is woven."""
    with pytest.raises(AdviceSignatureError, match=r"cannot be called as"):
        ah.weave(targets.add_one, before=lambda: None)
    assert targets.add_one is targets.ORIGINALS["add_one"]
    assert ah.default_weaver.registered == []


@pytest.mark.parametrize("value", [5, "print", [print, 5]])
def test_keyword_advice_that_is_not_a_function_is_refused_naming_the_keyword(
    value: Any,
) -> None:
    """after=5 (or a string, or a list holding one) raises AdviceSignatureError naming
    after= and what it takes (it used to be "'int' object is not iterable"); nothing is
    woven."""
    with pytest.raises(AdviceSignatureError, match=r"weave\(after=\.\.\.\) takes a function"):
        ah.weave(targets.add_one, after=value)
    assert targets.add_one is targets.ORIGINALS["add_one"]
    assert ah.default_weaver.registered == []


def test_weave_of_an_aspect_class_says_to_pass_an_instance() -> None:
    """``weave(f, Timed)`` names the class and the instance to pass, as ``register(Timed)``
    does (it printed the class's repr and a general rule)."""
    with pytest.raises(
        AspectDefinitionError,
        match=r"weave\(\) got the class Timed, not an instance: pass Timed\(\)",
    ):
        ah.weave(targets.add_one, Timed)
    assert ah.default_weaver.registered == []


def test_weave_aspect_instance() -> None:
    """An Aspect's pointcut-less advice applies to the weave target."""
    log: list[Any] = []

    class Traced(ah.Aspect):
        @ah.before()
        def enter(self, ctx: ah.CallContext) -> None:
            log.append(("enter", ctx.joinpoint.name))

        @ah.around()
        def wrap(self, ctx: ah.CallContext, proceed: Callable[..., Any]) -> Any:
            return proceed() * 100

        @ah.after()
        def leave(self, ctx: ah.CallContext) -> None:
            log.append(("leave", ctx.result))

    with ah.weave(targets.add_one, Traced()):
        assert targets.add_one(1) == 200
    assert log == [("enter", f"{MOD}.add_one"), ("leave", 200)]


def test_weave_advice_object_positionally() -> None:
    """An Advice passed positionally is copied onto the weave target, options kept."""
    log: list[Any] = []
    advice = ah.Advice("before", record(log, "copy"), None, once=True)
    with ah.weave(targets.add_one, advice):
        targets.add_one(1)
        targets.add_one(1)
    assert log == ["copy"]
    assert not advice.active


def test_weave_advice_object_keeps_every_and_window() -> None:
    """every= and window= of an Advice passed positionally survive the copy."""
    seen: list[int] = []
    advice = ah.Advice("before", lambda ctx: seen.append(ctx.args[0]), None, every=5, window=2)
    with ah.weave(targets.add_one, advice):
        for i in range(1, 12):
            targets.add_one(i)
    assert seen == [4, 5, 9, 10]


def test_weave_rejects_a_function_as_aspect() -> None:
    """A plain function given positionally is refused with a hint to use before=/after=."""
    with pytest.raises(AspectDefinitionError, match=r"before=/after=/on_error=/around="):
        ah.weave(targets.add_one, record([], "x"))
    assert targets.changed() == []
    assert ah.default_weaver.registered == []


def test_aspect_woven_into_several_places_comes_off_with_one_remove() -> None:
    """One handle of one weave over many targets removes all of them."""
    log: list[Any] = []

    class Counted(ah.Aspect):
        @ah.before()
        def count(self, ctx: ah.CallContext) -> None:
            log.append(ctx.joinpoint.name)

    handle = ah.weave(f"{MOD}.*", Counted())
    targets.add_one(1)
    Model().forward(1)
    Model.build(1)
    targets.Encoder().forward(1)
    assert log == [
        f"{MOD}.add_one",
        f"{MOD}.Model.forward",
        f"{MOD}.Model.build",
        f"{MOD}.Encoder.forward",
    ]
    handle.remove()
    targets.add_one(1)
    Model().forward(1)
    assert len(log) == 4
    assert targets.changed() == []


def test_same_aspect_instance_woven_into_two_targets() -> None:
    """An aspect instance woven twice gets one handle each; each removes its own weave."""
    log: list[Any] = []

    class Tag(ah.Aspect):
        @ah.before()
        def tag(self, ctx: ah.CallContext) -> None:
            log.append(ctx.joinpoint.name)

    aspect = Tag()
    first = ah.weave(targets.add_one, aspect)
    second = ah.weave(targets.double, aspect)
    targets.add_one(1)
    targets.double(1)
    first.remove()
    targets.add_one(1)
    targets.double(1)
    second.remove()
    assert log == [f"{MOD}.add_one", f"{MOD}.double", f"{MOD}.double"]


def test_one_aspect_in_two_overlapping_weaves_runs_once_per_call() -> None:
    """A glob and a name inside it, both weaving the same aspect: each call runs it once;
    removing either weave keeps the aspect on what the other still covers."""
    log: list[Any] = []

    class Tag(ah.Aspect):
        @ah.before()
        def tag(self, ctx: ah.CallContext) -> None:
            log.append(ctx.joinpoint.name)

    aspect = Tag()
    broad = ah.weave(f"{MOD}.add_*", aspect)
    narrow = ah.weave(f"{MOD}.add_one", aspect)
    targets.add_one(1)
    broad.remove()
    targets.add_one(1)
    narrow.remove()
    targets.add_one(1)
    assert log == [f"{MOD}.add_one", f"{MOD}.add_one"]


def test_an_aspect_whose_when_comes_from_advice_options_runs_once_in_overlapping_weaves() -> None:
    """advice_options() hands out a new bound method each time: the same method of the
    same aspect all the same, so the two weaves' advice is one."""
    log: list[int] = []

    class Checked(ah.Aspect):
        def ok(self, ctx: ah.CallContext) -> bool:
            return True

        def advice_options(self, attr: str) -> dict[str, Any]:
            return {"when": self.ok}

        @ah.before()
        def note(self, ctx: ah.CallContext) -> None:
            log.append(ctx.args[0])

    aspect = Checked()
    with ah.weave(f"{MOD}.add_*", aspect), ah.weave(f"{MOD}.add_one", aspect):
        targets.add_one(1)
    assert log == [1]


def test_one_aspect_method_marked_twice_with_different_options_runs_for_each() -> None:
    """Two marks of one method at a join point (once=, and every=3) are two advice:
    only the same mark registered twice runs once."""
    log: list[int] = []

    class Both(ah.Aspect):
        @ah.before(once=True)
        @ah.before(every=3)
        def note(self, ctx: ah.CallContext) -> None:
            log.append(ctx.args[0])

    with ah.weave(targets.add_one, Both()):
        for i in range(1, 7):
            targets.add_one(i)
    assert log == [1, 3, 6]


# -- name= aliases --------------------------------------------------------------------------


def test_name_alias_reaches_module_level_advice() -> None:
    """weave(target, name='alias') lets @before('alias') advice run at the target."""
    log: list[Any] = []

    @ah.before("weave_alias_iter")
    def on_iter(ctx: ah.CallContext) -> None:
        log.append((ctx.joinpoint.name, tuple(ctx.args)))

    handle = ah.weave(f"{MOD}.train_step", name="weave_alias_iter")
    assert targets.train_step(3) == ("train_step", 3)
    assert log == [(f"{MOD}.train_step", (3,))]
    rows = ah.describe("weave_alias_iter")
    assert [(r.joinpoint, r.stage, r.advice) for r in rows] == [
        (f"{MOD}.train_step", "before", "on_iter")
    ]
    assert "weave_alias_iter" in rows[0].note
    handle.remove()
    assert targets.train_step is targets.ORIGINALS["train_step"]
    assert on_iter.active
    targets.train_step(4)
    assert len(log) == 1


def test_name_alias_before_advice_registered() -> None:
    """Advice registered after the alias weave also reaches the target."""
    log: list[Any] = []
    with ah.weave(targets.evaluate, name="weave_alias_eval"):

        @ah.after("weave_alias_eval")
        def done(ctx: ah.CallContext) -> None:
            log.append(ctx.result)

        targets.evaluate(2)
        done.remove()
        targets.evaluate(3)
    assert log == [("evaluate", 2)]


@pytest.mark.parametrize("name", [3, ("alias",), ""])
def test_a_name_alias_that_is_not_a_name_is_refused(name: Any) -> None:
    """weave(target, name=...) that is not a non-empty string raises InvalidOptionError
    and weaves nothing (describe() used to fail on it with a bare AttributeError)."""
    with pytest.raises(InvalidOptionError, match="is not a join point name") as info:
        ah.weave(targets.add_one, before=lambda ctx: None, name=name)
    assert info.value.option == "name"
    assert targets.add_one is targets.ORIGINALS["add_one"]
    assert ah.default_weaver.registered == []


def test_alias_of_one_weave_goes_with_it() -> None:
    """Removing the aliasing weave drops the alias while another weave stays."""
    log: list[Any] = []
    ah.before("weave_alias_gone")(record(log, "alias"))
    keep = ah.weave(targets.add_one, before=record(log, "keep"))
    alias = ah.weave(targets.add_one, name="weave_alias_gone")
    targets.add_one(1)
    alias.remove()
    targets.add_one(1)
    keep.remove()
    assert log == ["alias", "keep", "keep"]


# -- woven() ---------------------------------------------------------------------------------


def test_woven_context_manager() -> None:
    """with woven(target, ...): weaves for the block only, even when the block raises."""
    log: list[Any] = []
    with ah.woven(targets.double, after=lambda ctx: log.append(ctx.result)) as handle:
        assert targets.double(2) == 4
        assert handle.active
    assert not handle.active
    assert targets.double is targets.ORIGINALS["double"]
    with pytest.raises(RuntimeError, match="inside"), ah.woven(targets.double, after=len):
        raise RuntimeError("inside")
    assert targets.double is targets.ORIGINALS["double"]
    assert log == [4]


# -- exactly one proxy -------------------------------------------------------------------------


def test_one_proxy_however_many_weaves() -> None:
    """Weaving the same callable through many routes leaves one proxy over the original."""
    original = targets.ORIGINALS["Model.forward"]
    log: list[Any] = []

    class Tag(ah.Aspect):
        @ah.before()
        def tag(self, ctx: ah.CallContext) -> None:
            log.append("aspect")

    handles = [
        ah.weave(Model.forward, before=record(log, "object")),
        ah.weave(f"{MOD}.Model.forward", before=record(log, "dotted")),
        ah.weave(f"{MOD}:Model.forward", Tag()),
        ah.weave(Model, before=record(log, "class")),
        ah.weave(f"{MOD}.*.forward", before=record(log, "glob")),
        ah.weave(vars(Model)["forward"], after=record(log, "proxy")),
    ]
    proxy = vars(Model)["forward"]
    assert proxy.__wrapped__ is original
    assert chain(proxy) == [proxy, original]
    assert Model().forward(1) == 11
    assert log == ["object", "dotted", "aspect", "class", "glob", "proxy"]
    for handle in handles:
        handle.remove()
    assert vars(Model)["forward"] is original


def test_one_proxy_for_function_woven_repeatedly() -> None:
    """A module function woven five times has one proxy whose __wrapped__ is the original."""
    original = targets.add_one
    handles = [ah.weave(f"{MOD}.add_one", before=lambda ctx: None) for _ in range(5)]
    assert targets.add_one.__wrapped__ is original
    assert chain(targets.add_one) == [targets.add_one, original]
    for handle in handles:
        handle.remove()
    assert targets.add_one is original


def test_weave_declared_joinpoint_adds_no_proxy() -> None:
    """Weaving a declared join point adds advice to its own proxy and leaves it declared."""
    log: list[Any] = []

    @ah.joinpoint("weave_declared_point")
    def step(x: int) -> int:
        return x * 3

    handle = ah.weave(step, before=record(log, "woven"))
    assert chain(step) == [step, step.__wrapped__]
    assert step(2) == 6
    handle.remove()
    assert step(2) == 6
    assert log == ["woven"]
    assert [r.joinpoint for r in ah.describe("weave_declared_point")] == ["weave_declared_point"]


# -- stale references ---------------------------------------------------------------------


def test_weave_stale_reference_to_removed_proxy() -> None:
    """A proxy kept from an earlier, removed weave weaves its place again when woven."""
    log: list[Any] = []
    with ah.weave(targets.add_one, before=record(log, "first")):
        stale = targets.add_one
    assert targets.add_one is targets.ORIGINALS["add_one"]
    with ah.weave(stale, before=record(log, "again")):
        assert targets.add_one(1) == 2
        assert chain(targets.add_one)[-1] is targets.ORIGINALS["add_one"]
    assert log == ["again"]
    assert targets.add_one is targets.ORIGINALS["add_one"]


def test_weave_stale_bound_reference_to_removed_proxy() -> None:
    """Model.method taken while Model was woven still locates the method afterwards."""
    log: list[Any] = []
    with ah.weave(Model, before=record(log, "class")):
        stale = Model.forward
    with ah.weave(stale, before=record(log, "again")):
        assert Model().forward(1) == 11
    assert log == ["again"]
    assert vars(Model)["forward"] is targets.ORIGINALS["Model.forward"]


# -- removal -------------------------------------------------------------------------------


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_remove_in_any_order(order: tuple[int, ...]) -> None:
    """Each remove() takes off exactly its own advice; after the last the original is back."""
    original = targets.add_one
    log: list[Any] = []
    handles = [ah.weave(targets.add_one, before=record(log, i)) for i in range(3)]
    live = {0, 1, 2}
    for i in order:
        handles[i].remove()
        live.discard(i)
        log.clear()
        assert targets.add_one(1) == 2
        assert log == sorted(live)
    assert targets.add_one is original


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_remove_method_weaves_in_any_order(order: tuple[int, ...]) -> None:
    """Weaves of a method, of its class and of an inherited path come off in any order."""
    handles = [
        ah.weave(Model.build, before=lambda ctx: None),
        ah.weave(Model, after=lambda ctx: None),
        ah.weave(f"{MOD}.Child.forward", before=lambda ctx: None),
    ]
    for i in order:
        handles[i].remove()
    assert targets.changed() == []
    assert "forward" not in vars(Child)


def test_remove_twice_is_a_no_op() -> None:
    """A second remove() of a handle does nothing, even after the target was woven again."""
    log: list[Any] = []
    first = ah.weave(targets.add_one, before=record(log, "first"))
    first.remove()
    second = ah.weave(targets.add_one, before=record(log, "second"))
    first.remove()
    ah.unweave(first)
    targets.add_one(1)
    assert log == ["second"]
    second.remove()
    second.remove()
    assert targets.add_one is targets.ORIGINALS["add_one"]


def test_unweave_is_handle_remove() -> None:
    """unweave(handle) removes what the handle added."""
    handle = ah.weave(targets.double, before=lambda ctx: None)
    ah.unweave(handle)
    assert not handle.active
    assert targets.double is targets.ORIGINALS["double"]


@pytest.mark.parametrize("value", ["targets.double", targets.double, None])
def test_unweave_refuses_what_is_not_a_handle(value: Any) -> None:
    """unweave('json.dumps') or unweave(fn) said ``'str' object has no attribute
    'remove'``; it says to pass the Handle that weave() returned."""
    with pytest.raises(ah.errors.InvalidOptionError, match=r"Handle that weave\(\) returned"):
        ah.unweave(value)


def test_unweave_takes_an_advice_as_its_own_handle() -> None:
    """An advice is its own handle (``.remove()``): unweave(advice) unregisters it."""
    advice = ah.before(targets.JOINPOINT_NAME)(lambda ctx: None) if False else None
    del advice


def test_weaver_clear_unweaves(weaver: ah.Weaver) -> None:
    """clear() on a private weaver removes its weaves and puts the originals back."""
    log: list[Any] = []
    weaver.weave(targets.add_one, before=record(log, "private"))
    weaver.weave(Model, before=record(log, "private"))
    targets.add_one(1)
    weaver.clear()
    targets.add_one(1)
    assert log == ["private"]
    assert targets.changed() == []


def test_private_weaver_and_default_weaver_share_the_proxy(weaver: ah.Weaver) -> None:
    """Weaves through two weavers use one proxy; each removal leaves the other's advice."""
    log: list[Any] = []
    private = weaver.weave(targets.add_one, before=record(log, "private"))
    default = ah.weave(targets.add_one, before=record(log, "default"))
    assert len(chain(targets.add_one)) == 2
    targets.add_one(1)
    private.remove()
    targets.add_one(1)
    default.remove()
    assert log == ["private", "default", "default"]
    assert targets.add_one is targets.ORIGINALS["add_one"]


# -- foreign wrappers on top -------------------------------------------------------------------


def _foreign(log: list[Any]) -> Callable[..., Any]:
    def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        log.append("foreign")
        return wrapped(*args, **kwargs)

    return wrapper


def test_foreign_wrap_function_wrapper_survives_our_removal() -> None:
    """A wrapt wrapper another library adds on top stays; ours is spliced out from under it."""
    original = targets.add_one
    log: list[Any] = []
    ours = ah.weave(targets.add_one, before=record(log, "ours"))
    foreign = wrapt.wrap_function_wrapper(targets, "add_one", _foreign(log))
    assert targets.add_one(1) == 2
    assert log == ["foreign", "ours"]
    ours.remove()
    assert targets.add_one is foreign
    assert foreign.__wrapped__ is original
    log.clear()
    assert targets.add_one(1) == 2
    assert log == ["foreign"]
    wrapt.unwrap_object(targets, "add_one", foreign)
    assert targets.add_one is original


def test_weave_again_under_foreign_wrapper_finds_our_proxy() -> None:
    """Weaving through a foreign wrapper adds to our existing proxy instead of a new one."""
    original = targets.double
    log: list[Any] = []
    first = ah.weave(f"{MOD}.double", before=record(log, "first"))
    targets.double = wrapt.FunctionWrapper(targets.double, _foreign(log))  # type: ignore[assignment]
    foreign = targets.double
    second = ah.weave(f"{MOD}.double", before=record(log, "second"))
    assert [type(e).__name__ for e in chain(targets.double)] == [
        "FunctionWrapper",
        "JoinPointProxy",
        "function",
    ]
    assert targets.double(2) == 4
    assert log == ["foreign", "first", "second"]
    second.remove()
    first.remove()
    assert targets.double is foreign
    assert chain(foreign) == [foreign, original]
    targets.double = original  # type: ignore[assignment]


def test_foreign_wrapper_on_method_survives_our_removal() -> None:
    """A foreign wrapper on a woven method stays when ours goes, wrapping the original."""
    original = vars(Model)["forward"]
    log: list[Any] = []
    ours = ah.weave(f"{MOD}.Model.forward", after=record(log, "ours"))
    foreign = wrapt.wrap_function_wrapper(targets, "Model.forward", _foreign(log))
    assert Model().forward(1) == 11
    assert log == ["foreign", "ours"]
    ours.remove()
    assert vars(Model)["forward"] is foreign
    assert foreign.__wrapped__ is original
    wrapt.unwrap_object(targets, "Model.forward", foreign)
    assert vars(Model)["forward"] is original


def test_plain_wrapper_on_top_does_not_break_removal() -> None:
    """Under a non-wrapt wrapper our proxy cannot be spliced out; remove() still works.

    The advice comes off, nothing raises, the proxy left in place passes calls straight
    through, and weaving again through the plain wrapper reaches the same proxy.
    """
    original = targets.add_one
    log: list[Any] = []
    alias_advice = ah.before("weave_alias_plain")(record(log, "alias"))
    handle = ah.weave(targets.add_one, before=record(log, "ours"), name="weave_alias_plain")
    proxy = targets.add_one

    @functools.wraps(proxy)
    def plain(*args: Any, **kwargs: Any) -> Any:
        return proxy(*args, **kwargs)

    targets.add_one = plain
    try:
        assert targets.add_one(1) == 2
        assert log == ["alias", "ours"]
        with capture_logs() as logs:
            handle.remove()
        assert [entry["event"] for entry in logs] == ["weave.unwrap_failed"]
        assert targets.add_one(1) == 2
        assert log == ["alias", "ours"]
        assert ah.default_weaver.registered == [alias_advice]
        with ah.weave(f"{MOD}.add_one", after=record(log, "again")):
            assert chain(targets.add_one) == [plain, proxy, original]
            targets.add_one(1)
        assert log == ["alias", "ours", "again"]
    finally:
        targets.add_one = original


def test_plain_wrapper_on_a_method_taken_from_its_class_keeps_one_proxy() -> None:
    """``Cls.m = deco(Cls.m)`` on a woven method (what torch.optim.Optimizer does to each
    subclass's ``step``) holds our proxy bound: weaving again reaches the same proxy, advice
    by name runs once per call, and the last removal leaves the proxy in place, logged."""
    original = vars(Model)["forward"]
    log: list[Any] = []
    first = ah.weave(f"{MOD}.Model.forward", before=record(log, "first"))
    bound = Model.forward

    @functools.wraps(bound)
    def plain(*args: Any, **kwargs: Any) -> Any:
        return bound(*args, **kwargs)

    Model.forward = plain  # type: ignore[method-assign]
    try:
        by_name = ah.before(f"{MOD}.Model.forward")(record(log, "by name"))
        second = ah.weave(f"{MOD}.Model.forward", before=record(log, "second"))
        assert Model().forward(1) == 11
        assert sorted(log) == ["by name", "first", "second"]
        proxies = [e for e in chain(Model.forward) if type(e).__name__ == "JoinPointProxy"]
        assert len(proxies) <= 1
        with capture_logs() as logs:
            first.remove()
            second.remove()
        assert [entry["event"] for entry in logs] == ["weave.unwrap_failed"]
        log.clear()
        assert Model().forward(1) == 11
        assert log == ["by name"]
        by_name.remove()
    finally:
        Model.forward = original  # type: ignore[method-assign]


# -- modules imported later ------------------------------------------------------------------

_module_numbers = itertools.count()


@pytest.fixture
def new_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., str]]:
    """Write a module (or package) under tmp_path, importable but not imported; returns its name."""
    made: list[str] = []

    def make(source: str, *, package: bool = False, sub: str = "") -> str:
        name = f"ah_lazy_{next(_module_numbers)}"
        if package:
            (tmp_path / name).mkdir()
            (tmp_path / name / "__init__.py").write_text("")
            (tmp_path / name / f"{sub}.py").write_text(textwrap.dedent(source))
        else:
            (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        importlib.invalidate_caches()
        made.append(name)
        return name

    monkeypatch.syspath_prepend(str(tmp_path))
    yield make
    for module in list(sys.modules):
        if module.split(".")[0] in made:
            del sys.modules[module]


LAZY_SOURCE = """
    def func(x):
        return x * 10

    class Greeter:
        def hello(self, name):
            return "hello " + name
"""


def _import(name: str) -> types.ModuleType:
    __import__(name)
    return sys.modules[name]


def test_a_module_weave_takes_the_bound_methods_it_holds(
    new_module: Callable[..., str],
) -> None:
    """``weave(random)``: a module whose functions are a hidden instance's bound methods
    (``random.randint`` is ``random._inst.randint``) weaves those, as ``'random.*'`` and
    ``weave(random.randint)`` do; it wove nothing. A bound method of another module's
    object that it holds stays out, as an imported function does."""
    mod = _import(
        new_module(
            """
            import json

            class Dice:
                def roll(self, sides):
                    return sides

            _inst = Dice()
            roll = _inst.roll
            encode = json.JSONEncoder().encode
            """
        )
    )
    originals = dict(vars(mod))
    seen: list[str] = []
    with ah.weave(mod, before=lambda ctx: seen.append(ctx.joinpoint.name)):
        assert mod.roll(6) == 6
        assert mod.encode(1) == "1"
    assert seen == [f"{mod.__name__}.roll"]
    assert all(vars(mod)[name] is value for name, value in originals.items())


def test_advice_by_the_path_woven_reaches_a_callable_named_elsewhere() -> None:
    """A join point is named where its callable lives ('json.encoder.JSONEncoder.encode',
    'posixpath.join'); the path the weave was given ('json.JSONEncoder.encode',
    'os.path.join') is a name of it too, as long as the weave lasts."""
    import os.path

    seen: list[str] = []
    encoder = json.JSONEncoder()
    handles = [ah.weave("json.JSONEncoder.encode"), ah.weave("os.path.join")]
    advices = [
        ah.before(path)(lambda ctx, path=path: seen.append(path))
        for path in ("json.JSONEncoder.encode", "json.encoder.JSONEncoder.encode", "os.path.join")
    ]
    assert encoder.encode([1]) == "[1]"
    assert os.path.join("a", "b") == "a/b"
    assert seen == ["json.JSONEncoder.encode", "json.encoder.JSONEncoder.encode", "os.path.join"]
    for handle in handles:
        handle.remove()
    seen.clear()
    encoder.encode([1])
    os.path.join("a", "b")
    assert seen == []
    assert "__wrapped__" not in vars(json.JSONEncoder.encode)
    names = ("json.encoder.JSONEncoder.encode", "posixpath.join", "os.path.join")
    assert not [row for name in names for row in ah.describe(name) if row.status == "active"]
    for advice in advices:
        advice.remove()


def test_a_path_woven_on_import_through_a_re_export_answers_to_that_path(
    new_module: Callable[..., str], tmp_path: Path
) -> None:
    """The same for a path into a package not imported yet that re-exports the class."""
    name = new_module(LAZY_SOURCE, package=True, sub="impl")
    (tmp_path / name / "__init__.py").write_text("from .impl import Greeter\n")
    seen: list[str] = []
    handle = ah.weave(f"{name}.Greeter.hello")
    advice = ah.before(f"{name}.Greeter.hello")(lambda ctx: seen.append(ctx.args[-1]))
    greeter = _import(name).Greeter()
    assert greeter.hello("you") == "hello you"
    assert seen == ["you"]
    handle.remove()
    assert greeter.hello("again") == "hello again"
    assert seen == ["you"]
    advice.remove()


def test_weave_module_not_imported_yet(new_module: Callable[..., str]) -> None:
    """A path into a module not imported yet is pending, then woven on import."""
    name = new_module(LAZY_SOURCE)
    log: list[Any] = []
    handle = ah.weave(f"{name}.func", before=lambda ctx: log.append(tuple(ctx.args)))
    assert name not in sys.modules
    assert statuses(f"{name}.func") == ["pending import"]
    module = _import(name)
    original = module.func.__wrapped__
    assert module.func(2) == 20
    assert log == [(2,)]
    assert statuses(f"{name}.func") == ["active"]
    handle.remove()
    assert module.func is original
    assert module.func(3) == 30
    assert log == [(2,)]


def test_colon_path_into_module_not_imported_yet(new_module: Callable[..., str]) -> None:
    """'mod:Class.method' into a module imported later is woven when it is imported."""
    name = new_module(LAZY_SOURCE)
    log: list[Any] = []
    handle = ah.weave(f"{name}:Greeter.hello", after=lambda ctx: log.append(ctx.result))
    assert statuses(f"{name}:Greeter.hello") == ["pending import"]
    module = _import(name)
    original = vars(module.Greeter)["hello"].__wrapped__
    assert module.Greeter().hello("you") == "hello you"
    assert log == ["hello you"]
    handle.remove()
    assert vars(module.Greeter)["hello"] is original


def test_pending_weave_removed_before_import(new_module: Callable[..., str]) -> None:
    """A pending weave removed before the import never weaves anything."""
    name = new_module(LAZY_SOURCE)
    handle = ah.weave(f"{name}.func", before=lambda ctx: pytest.fail("advice ran"))
    handle.remove()
    assert statuses(f"{name}.func") == []
    module = _import(name)
    assert not isinstance(module.func, wrapt.FunctionWrapper)
    assert module.func(1) == 10


def test_glob_into_module_not_imported_yet(new_module: Callable[..., str]) -> None:
    """A glob in the last part of a path into a later module weaves its matches then."""
    name = new_module(LAZY_SOURCE)
    log: list[Any] = []
    with ah.weave(f"{name}.*.hello", before=lambda ctx: log.append(ctx.joinpoint.name)):
        module = _import(name)
        module.Greeter().hello("a")
        module.func(1)
    assert log == [f"{name}.Greeter.hello"]
    assert not isinstance(vars(module.Greeter)["hello"], wrapt.FunctionWrapper)


def test_submodule_not_imported_yet(new_module: Callable[..., str]) -> None:
    """'pkg.sub.func' with pkg imported but not pkg.sub stays pending until pkg.sub imports."""
    name = new_module(LAZY_SOURCE, package=True, sub="sub")
    _import(name)
    log: list[Any] = []
    with capture_logs() as logs:
        handle = ah.weave(f"{name}.sub.func", before=lambda ctx: log.append(ctx.args))
    assert logs == []
    assert statuses(f"{name}.sub.func") == ["pending import"]
    sub = _import(f"{name}.sub")
    assert sub.func(1) == 10
    assert log == [[1]]
    handle.remove()
    assert not isinstance(sub.func, wrapt.FunctionWrapper)


def nothing(ctx: ah.CallContext) -> None:
    """Advice that does nothing."""


def _package_tree(root: Path, files: dict[str, str]) -> str:
    """Write ``files`` (relative path -> source) as a new package under ``root``."""
    name = f"ah_tree_{next(_module_numbers)}"
    for relative, source in {"__init__.py": "", **files}.items():
        path = root / name / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    importlib.invalidate_caches()
    return name


def test_glob_over_submodules_weaves_each_one_as_it_is_imported(
    new_module: Callable[..., str], tmp_path: Path
) -> None:
    """'pkg.*.func': submodules imported before and after the weave are all woven, and a
    submodule without the name is no failure."""
    new_module("")  # puts tmp_path on sys.path and removes what is imported from it
    name = _package_tree(
        tmp_path,
        {
            "a.py": "def func(x):\n    return x + 1\n",
            "b.py": "def func(x):\n    return x + 2\n",
            "c.py": "def other(x):\n    return x\n",
            "deep/__init__.py": "",
            "deep/d.py": "def func(x):\n    return x + 4\n",
        },
    )
    pkg = _import(name)
    a = _import(f"{name}.a")  # imported before the weave
    seen: list[str] = []
    with capture_logs() as logs:
        handle = ah.weave(f"{name}.*.func", before=lambda ctx: seen.append(ctx.joinpoint.name))
        assert statuses(f"{name}.*.func") == []  # active: describe() shows its join points
        b = _import(f"{name}.b")  # imported after it
        _import(f"{name}.c")  # has no func
        d = _import(f"{name}.deep.d")  # one level deeper than the glob: not matched
    assert (a.func(0), b.func(0), d.func(0)) == (1, 2, 4)
    assert seen == [f"{name}.a.func", f"{name}.b.func"]
    assert [e for e in logs if e["log_level"] in ("warning", "error")] == []
    handle.remove()
    assert not isinstance(b.func, wrapt.FunctionWrapper)
    assert not isinstance(a.func, wrapt.FunctionWrapper)
    assert pkg.b is b


@pytest.mark.parametrize("nested", [False, True])
def test_glob_below_a_namespace_package_weaves_its_modules_as_they_are_imported(
    new_module: Callable[..., str], tmp_path: Path, nested: bool
) -> None:
    """'ns.*.func' where ``ns`` is a namespace package (no ``__init__.py``) not imported
    yet: wrapt's post-import hook on ``ns`` never runs (it has no loader to chain), so the
    weave stayed 'pending import' for ever while the program called ``ns.mod.func``. Its
    submodules are found on disk and woven as each is imported, also below a regular
    package imported later (``'pkg.ns.*.func'``)."""
    new_module("")  # puts tmp_path on sys.path
    seen: list[str] = []
    with (
        _namespace_package(tmp_path, nested) as (_, package),
        ah.woven(f"{package}.*.func", before=lambda ctx: seen.append(ctx.joinpoint.name)),
    ):
        assert statuses(f"{package}.*.func") == ["pending import"]
        a = _import(f"{package}.a")
        assert statuses(f"{package}.*.func") == []  # active
        b = _import(f"{package}.b")
        assert (a.func(0), b.func(0)) == (1, 2)
    assert seen == [f"{package}.a.func", f"{package}.b.func"]
    assert not isinstance(a.func, wrapt.FunctionWrapper)


@contextlib.contextmanager
def _namespace_package(tmp_path: Path, nested: bool) -> Iterator[tuple[str, str]]:
    """A namespace package (a folder without ``__init__.py``) holding ``a.py`` and
    ``b.py`` with ``func``, below a regular package when ``nested``: (its top-level name,
    its name); its modules are forgotten afterwards."""
    top = f"ah_ns_{next(_module_numbers)}"
    package = f"{top}.ns" if nested else top
    folder = tmp_path / package.replace(".", "/")
    folder.mkdir(parents=True)
    if nested:
        (tmp_path / top / "__init__.py").write_text("")
    (folder / "a.py").write_text("def func(x):\n    return x + 1\n")
    (folder / "b.py").write_text("def func(x):\n    return x + 2\n")
    importlib.invalidate_caches()
    try:
        yield top, package
    finally:
        for module in [m for m in sys.modules if m.split(".")[0] == top]:
            del sys.modules[module]


@pytest.mark.parametrize("imported", [False, True], ids=["not-imported", "imported"])
@pytest.mark.parametrize("spelling", ["{}.*", "{}:*"])
def test_glob_right_at_a_namespace_package_is_refused_saying_what_to_write(
    new_module: Callable[..., str], tmp_path: Path, imported: bool, spelling: str
) -> None:
    """'ns.*' names the functions of ``ns`` itself, as 'pkg.*' names what
    ``pkg/__init__.py`` defines; a namespace package has none, and the weave stayed
    'pending import' for ever while the program imported and called ``ns.a.func``. It
    is refused, saying to write 'ns.*.*', which weaves its modules' functions."""
    new_module("")  # puts tmp_path on sys.path
    seen: list[str] = []
    with _namespace_package(tmp_path, nested=False) as (_, package):
        target = spelling.format(package)
        if imported:
            _import(package)
        with pytest.raises(WeaveTargetError, match=rf"write '{package}\.\*\.\*' for") as info:
            ah.weave(target, before=lambda ctx: seen.append(ctx.joinpoint.name))
        assert info.value.target == target
        assert statuses(target) == []
        with ah.woven(f"{package}.*.*", before=lambda ctx: seen.append(ctx.joinpoint.name)):
            assert _import(f"{package}.a").func(0) == 1
        assert seen == [f"{package}.a.func"]


def test_glob_right_at_a_namespace_package_below_one_imported_later_fails(
    new_module: Callable[..., str], tmp_path: Path
) -> None:
    """'pkg.ns.*' with ``pkg`` not imported yet waits for ``pkg``; once it is imported
    ``ns`` is found to be a namespace package and the weave fails saying what to write
    (it stayed 'pending import' for ever)."""
    new_module("")  # puts tmp_path on sys.path
    with _namespace_package(tmp_path, nested=True) as (_, package):
        target = f"{package}.*"
        with capture_logs() as logs, ah.woven(target, before=lambda ctx: None):
            assert statuses(target) == ["pending import"]
            _import(package)
            rows = [r for r in ah.describe() if r.joinpoint == target]
            assert [r.status for r in rows] == ["failed"]
            assert f"write '{package}.*.*' for" in rows[0].note
        assert [entry["event"] for entry in logs] == ["weave.failed"]


def test_glob_over_submodules_of_a_package_imported_later(
    new_module: Callable[..., str], tmp_path: Path
) -> None:
    """'pkg.*.*.func' with nothing imported: each level is expanded as it is imported."""
    new_module("")
    name = _package_tree(
        tmp_path,
        {
            "x/__init__.py": "",
            "x/m.py": "def func(x):\n    return -x\n",
            "y/__init__.py": "",
            "y/n.py": "def func(x):\n    return 2 * x\n",
        },
    )
    seen: list[str] = []
    with ah.weave(f"{name}.*.*.func", before=lambda ctx: seen.append(ctx.joinpoint.name)):
        assert statuses(f"{name}.*.*.func") == ["pending import"]
        m = _import(f"{name}.x.m")
        n = _import(f"{name}.y.n")
        assert (m.func(1), n.func(1)) == (-1, 2)
        assert statuses(f"{name}.*.*.func") == []  # active
    assert seen == [f"{name}.x.m.func", f"{name}.y.n.func"]


def test_glob_over_submodules_that_matches_nothing_is_reported(
    new_module: Callable[..., str], tmp_path: Path
) -> None:
    """A misspelt glob waits for the modules not imported yet, then fails with a warning;
    with strict=True it is refused at once."""
    new_module("")
    name = _package_tree(tmp_path, {"a.py": "def func(x):\n    return x\n", "b.py": ""})
    _import(name)
    _import(f"{name}.a")
    with pytest.raises(WeaveTargetError, match="matched nothing in the modules imported so far"):
        ah.weave(f"{name}.*.fnuc", before=nothing, strict=True)
    with capture_logs() as logs:
        handle = ah.weave(f"{name}.*.fnuc", before=nothing)
        [row] = [r for r in ah.describe() if r.joinpoint == f"{name}.*.fnuc"]
        assert (row.status, row.note) == (
            "pending import",
            "matched nothing yet: waiting for 1 modules' imports",
        )
        _import(f"{name}.b")
        assert statuses(f"{name}.*.fnuc") == ["failed"]
    assert [(e["event"], e["target"]) for e in logs] == [("weave.failed", f"{name}.*.fnuc")]
    handle.remove()


def test_glob_over_submodules_weaves_a_reexported_callable_once(
    new_module: Callable[..., str], tmp_path: Path
) -> None:
    """A module imported later that re-exports a woven function does not weave it twice:
    removing the weave restores the original."""
    new_module("")
    name = _package_tree(
        tmp_path,
        {"a.py": "def func(x):\n    return x\n", "b.py": "from .a import func\n"},
    )
    _import(name)
    a = _import(f"{name}.a")
    original = a.func
    seen: list[str] = []
    handle = ah.weave(f"{name}.*.func", before=lambda ctx: seen.append(ctx.joinpoint.name))
    b = _import(f"{name}.b")
    assert b.func is a.func
    assert a.func(1) == 1
    assert seen == [f"{name}.a.func"]
    handle.remove()
    assert a.func is original


LAZY_PACKAGE = """\
import importlib

def __getattr__(name):
    if name in ("a", "heavy"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(name)
"""


def test_glob_over_a_lazily_loading_package_imports_nothing(
    new_module: Callable[..., str], tmp_path: Path
) -> None:
    """A package that imports submodules on attribute access (PEP 562) is not made to
    import them by the weave: each is woven when the program imports it."""
    new_module("")
    name = _package_tree(
        tmp_path,
        {
            "__init__.py": LAZY_PACKAGE,
            "a.py": "def func(x):\n    return x + 1\n",
            "heavy.py": "raise RuntimeError('imported heavy')\n",
        },
    )
    pkg = _import(name)
    seen: list[str] = []
    with ah.weave(f"{name}.*.func", before=lambda ctx: seen.append(ctx.joinpoint.name)):
        assert f"{name}.a" not in sys.modules
        assert f"{name}.heavy" not in sys.modules
        assert pkg.a.func(1) == 2  # the program's own (lazy) import
    assert seen == [f"{name}.a.func"]


def test_glob_below_a_submodule_not_imported_yet(
    new_module: Callable[..., str], tmp_path: Path
) -> None:
    """'pkg.sub.*.func' with pkg imported and pkg.sub not: woven when pkg.sub is."""
    new_module("")
    name = _package_tree(
        tmp_path, {"sub/__init__.py": "", "sub/m.py": "def func(x):\n    return x\n"}
    )
    _import(name)
    seen: list[str] = []
    with ah.weave(f"{name}.sub.*.func", before=lambda ctx: seen.append(ctx.joinpoint.name)):
        assert statuses(f"{name}.sub.*.func") == ["pending import"]
        assert _import(f"{name}.sub.m").func(3) == 3
    assert seen == [f"{name}.sub.m.func"]


def test_submodule_of_package_not_imported_yet(new_module: Callable[..., str]) -> None:
    """'pkg.sub.func' with neither imported is woven when pkg.sub is imported."""
    name = new_module(LAZY_SOURCE, package=True, sub="sub")
    log: list[Any] = []
    handle = ah.weave(f"{name}.sub.func", before=lambda ctx: log.append(ctx.args), strict=True)
    assert statuses(f"{name}.sub.func") == ["pending import"]
    sub = _import(f"{name}.sub")
    assert sub.func(2) == 20
    assert log == [[2]]
    handle.remove()
    assert not isinstance(sub.func, wrapt.FunctionWrapper)


def test_lazy_weave_of_missing_attribute_fails_on_import(new_module: Callable[..., str]) -> None:
    """A later module without the attribute shows the weave as failed, and logs it."""
    name = new_module(LAZY_SOURCE)
    handle = ah.weave(f"{name}.no_such_func", before=lambda ctx: None)
    with capture_logs() as logs:
        _import(name)
    assert statuses(f"{name}.no_such_func") == ["failed"]
    assert [entry["event"] for entry in logs] == ["weave.failed"]
    handle.remove()
    assert statuses(f"{name}.no_such_func") == []


def test_a_glob_into_a_module_imported_later_that_matches_nothing_fails_and_logs(
    new_module: Callable[..., str],
) -> None:
    """A misspelt glob into a later module is failed and logged when the module comes, as a
    missing name is; with strict=True that import raises."""
    name = new_module(LAZY_SOURCE)
    handle = ah.weave(f"{name}.fnuc*", before=nothing)
    with capture_logs() as logs:
        _import(name)
    assert statuses(f"{name}.fnuc*") == ["failed"]
    assert [(e["event"], e["target"]) for e in logs] == [("weave.failed", f"{name}.fnuc*")]
    handle.remove()
    strict = new_module(LAZY_SOURCE)
    ah.weave(f"{strict}.fnuc*", before=nothing, strict=True)
    with pytest.raises(WeaveTargetError, match=r"fnuc\* matched nothing"):
        _import(strict)


# -- version guards ----------------------------------------------------------------------------


def test_requires_met_weaves() -> None:
    """requires= satisfied by the installed distribution weaves as usual."""
    log: list[Any] = []
    with ah.weave(targets.add_one, before=record(log, "hit"), requires="pytest>=1"):
        targets.add_one(1)
    assert log == ["hit"]


@pytest.mark.parametrize(
    ("requires", "reason"),
    [
        ("pytest<1", r"pytest \S+ does not satisfy pytest<1"),
        ("aspecthook-no-such-dist>=1", "aspecthook-no-such-dist is not installed"),
        (
            "json>=1",
            r"json is part of the standard library, not an installed distribution, so it "
            r"has no version to compare: drop requires= \(it ships with Python \d+\.\d+\.\d+\), "
            r"or check sys.version_info before weaving",
        ),
    ],
    ids=["too-old", "missing", "stdlib"],
)
def test_requires_not_met_skips_and_logs(requires: str, reason: str) -> None:
    """An unmet version guard skips the weave, logs why and shows it as skipped."""
    with capture_logs() as logs:
        handle = ah.weave(targets.add_one, before=lambda ctx: None, requires=requires)
    assert targets.add_one is targets.ORIGINALS["add_one"]
    assert ah.default_weaver.registered == []
    assert [(entry["event"], entry["target"]) for entry in logs] == [
        ("weave.skipped", f"{MOD}.add_one")
    ]
    assert re.fullmatch(reason, logs[0]["reason"])
    rows = [r for r in ah.describe() if r.status == "skipped"]
    assert [(r.joinpoint, r.note) for r in rows] == [(f"{MOD}.add_one", logs[0]["reason"])]
    handle.remove()
    handle.remove()
    assert [r for r in ah.describe() if r.status == "skipped"] == []


def test_requires_not_met_with_strict_raises() -> None:
    """strict=True turns an unmet version guard into WeaveTargetError."""
    with pytest.raises(WeaveTargetError, match=r"pytest .* does not satisfy pytest<1.*strict"):
        ah.weave(targets.add_one, before=lambda ctx: None, requires="pytest<1", strict=True)
    assert targets.add_one is targets.ORIGINALS["add_one"]
    assert ah.default_weaver.registered == []


def test_requires_on_a_stdlib_module_with_strict_raises_saying_so() -> None:
    """strict=True with requires= naming a standard-library module raises WeaveTargetError
    saying it has no installed version, not that it is not installed."""
    with pytest.raises(WeaveTargetError, match=r"json is part of the standard library.*strict"):
        ah.weave(targets.add_one, before=lambda ctx: None, requires="json>=1", strict=True)
    assert targets.add_one is targets.ORIGINALS["add_one"]


@pytest.mark.parametrize("requires", ["not a requirement !!", "pytest>>1", ""])
def test_bad_requirement_is_an_invalid_option(requires: str) -> None:
    """A requires= string that is no requirement raises InvalidOptionError naming it."""
    with pytest.raises(InvalidOptionError, match=r"requires=.* is not a requirement") as info:
        ah.weave(targets.add_one, before=lambda ctx: None, requires=requires)
    assert info.value.option == "requires"
    assert targets.add_one is targets.ORIGINALS["add_one"]


@pytest.mark.parametrize("requires", [3, ["pytest>=1"], b"pytest>=1"])
def test_requirement_that_is_not_a_string_is_an_invalid_option(requires: Any) -> None:
    """requires= given something other than a string raises InvalidOptionError naming it
    and the form to write, not packaging's bare TypeError."""
    with pytest.raises(InvalidOptionError, match=r"requires=.* is not a requirement string"):
        ah.weave(targets.add_one, before=lambda ctx: None, requires=requires)
    with pytest.raises(InvalidOptionError, match=r"write it like 'skorch>=1\.0'") as info:
        ah.woven(targets.add_one, before=lambda ctx: None, requires=requires)
    assert info.value.option == "requires"
    assert targets.add_one is targets.ORIGINALS["add_one"]


def test_skipped_weave_of_private_weaver_goes_with_clear(weaver: ah.Weaver) -> None:
    """clear() of the weaver that made a skipped weave removes its describe() row too."""
    weaver.weave(targets.add_one, before=lambda ctx: None, requires="pytest<1")
    rows = [r for r in weaver.describe() if r.joinpoint == f"{MOD}.add_one" and not r.stage]
    assert "skipped" in [r.status for r in rows]
    weaver.clear()
    assert [r for r in ah.describe() if r.status == "skipped"] == []


# -- missing and unlocatable targets ------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("", "it has an empty part"),
        ("json.", "it has an empty part"),
        ("json:", "it has an empty part"),
        ("json..dumps", "it has an empty part"),
        ("nosuchmodule_xyz..f", "it has an empty part"),
        ("json.dumps()", "'dumps()' is neither a name nor a glob"),
        (" json.dumps", "' json' is neither a name nor a glob"),
        ("json:dumps:x", "more than one ':'"),
        ("json.dumps, json.loads", "weave('json.dumps', ...) and weave('json.loads', ...)"),
    ],
)
@pytest.mark.parametrize("strict", [False, True])
def test_a_string_that_is_no_dotted_path_is_refused(
    target: str, message: str, strict: bool
) -> None:
    """A target written wrongly is a mistake in the call, refused strict or not: skipped
    (or left waiting for an import) it could never match anything."""
    with pytest.raises(WeaveTargetError, match=re.escape(message)):
        ah.weave(target, before=lambda ctx: None, strict=strict)
    assert statuses(target) == []
    assert ah.default_weaver.registered == []


@pytest.mark.parametrize("strict", ["yes", "no", 1, None])
def test_strict_that_is_not_a_bool_is_refused(strict: Any) -> None:
    """strict='no' would be taken as True; the error says what each value does."""
    with pytest.raises(InvalidOptionError, match=r"strict=.* is not a bool: give strict=True"):
        ah.weave(f"{MOD}.add_one", before=lambda ctx: None, strict=strict)
    assert ah.default_weaver.registered == []


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("nosuchmodule_xyz.f", "no module named 'nosuchmodule_xyz'"),
        ("json.no_such_function", "json has no attribute path 'no_such_function'"),
        (f"{MOD}.Model.no_such_method", "has no attribute path 'Model.no_such_method'"),
    ],
)
def test_missing_target_is_skipped(target: str, reason: str) -> None:
    """A missing module or attribute is skipped (not raised), logged and described."""
    with capture_logs() as logs:
        handle = ah.weave(target, before=lambda ctx: None)
    assert handle.active
    assert [entry["event"] for entry in logs] == ["weave.skipped"]
    rows = [r for r in ah.describe() if r.joinpoint == target]
    assert [r.status for r in rows] == ["skipped"]
    assert reason in rows[0].note
    assert ah.default_weaver.registered == []
    # The handle says the weave was skipped and why; it read "..., skipped: ... (active)"
    # although nothing is woven.
    assert repr(handle) == f"<Handle weave {target} (skipped: {rows[0].note})>"
    handle.remove()
    assert repr(handle) == f"<Handle weave {target} (removed)>"
    assert statuses(target) == []


def test_a_weave_handle_repr_says_the_weave_status(new_module: Callable[..., str]) -> None:
    """A weave's handle shows its weave's status, as describe() does: a glob that matched
    nothing, a path waiting for its module's import; it read "(active)" for both."""
    with capture_logs():
        nothing = ah.weave("json.no_such_*", before=lambda ctx: None)
    name = new_module(LAZY_SOURCE)
    with nothing, ah.weave(f"{name}.func", before=lambda ctx: None) as waiting:
        assert repr(nothing) == "<Handle weave json.no_such_* (skipped: matched nothing)>"
        assert repr(waiting) == f"<Handle weave {name}.func (pending import)>"
        _import(name)
        assert repr(waiting) == f"<Handle weave {name}.func (active)>"
    assert repr(waiting) == f"<Handle weave {name}.func (removed)>"


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("nosuchmodule_xyz.f", r"cannot weave nosuchmodule_xyz\.f: no module named"),
        ("json.no_such_function", r"json has no attribute path 'no_such_function'.*strict"),
    ],
)
def test_missing_target_with_strict_raises(target: str, message: str) -> None:
    """strict=True raises WeaveTargetError (a LookupError) naming the target."""
    with pytest.raises(WeaveTargetError, match=message) as info:
        ah.weave(target, before=lambda ctx: None, strict=True)
    assert info.value.target == target
    assert isinstance(info.value, LookupError)
    assert statuses(target) == []
    assert ah.default_weaver.registered == []


def test_local_function_cannot_be_located() -> None:
    """A local function has no place to be replaced: the error says what to weave instead."""

    def local(x: int) -> int:
        return x

    with pytest.raises(WeaveTargetError, match=r"cannot find where .*<locals>.local.*weave the"):
        ah.weave(local, before=lambda ctx: None)
    assert ah.default_weaver.registered == []


class _Dice:
    def roll(self, sides: int) -> int:
        return sides


#: A bound method held by a module attribute, as ``random.randint`` is ``random._inst``'s.
roll = _Dice().roll


def test_a_bound_method_a_module_holds_is_woven_where_it_is_held() -> None:
    """``weave(random.randint)`` weaves the module attribute its callers call, as
    ``weave('random.randint')`` does: weaving the hidden instance's ``randint`` reached no
    call made through ``random.randint``. Removal puts the same bound method back."""
    module = sys.modules[__name__]
    original = module.roll
    seen: list[Any] = []
    with ah.weave(roll, before=lambda ctx: seen.append((ctx.joinpoint.name, ctx.args))) as h:
        assert repr(h) == f"<Handle weave {__name__}.roll (active)>"
        assert module.roll(6) == 6
        assert "roll" not in vars(original.__self__)
    assert seen == [(f"{__name__}.roll", [6])]
    assert module.roll is original


def test_function_removed_from_its_module_cannot_be_located() -> None:
    """A function no longer reachable where it was defined cannot be woven."""
    stray = types.FunctionType(targets.add_one.__code__, targets.__dict__, "stray")
    stray.__qualname__ = "stray"
    with pytest.raises(WeaveTargetError, match=r"cannot find where 'stray' is defined"):
        ah.weave(stray, before=lambda ctx: None)


@functools.lru_cache
def _cached(x: int) -> int:
    return x * 3


def test_an_lru_cache_function_is_woven_by_object_as_by_path() -> None:
    """``weave(f)`` of a ``functools.lru_cache`` function weaves it where it lives, as
    ``weave('mod.f')`` does: the cache still answers, and removal puts it back."""
    original = _cached
    seen: list[Any] = []
    with ah.weave(_cached, before=lambda ctx: seen.append(ctx.args)):
        woven = sys.modules[__name__]._cached
        assert woven is not original
        assert (woven(2), woven(2)) == (6, 6)
        assert woven.cache_info().hits == 1
    assert seen == [[2], [2]]
    assert sys.modules[__name__]._cached is original


def test_a_wrapper_made_elsewhere_of_a_module_function_is_refused() -> None:
    """``weave(functools.lru_cache(mod.f))`` of a cache that ``mod`` does not hold: it wove
    ``mod.f``, which the cache calls directly, so no call through the cache was advised
    (and every other caller of ``mod.f`` was): refused, saying to weave it where it is held."""
    cached = functools.lru_cache(targets.add_one)
    with pytest.raises(WeaveTargetError, match=rf"not {MOD}\.add_one.*where it is held"):
        ah.weave(cached, before=lambda ctx: None)
    assert ah.default_weaver.registered == []


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (math.sqrt, r"built-in function sqrt.*by its dotted path.*weave\('math\.sqrt'\)"),
        (dict.get, r"dict\.get is a method of the built-in type dict"),
        ({}.get, r"dict\.get is a method of the built-in type dict"),
    ],
)
def test_a_built_in_given_as_an_object_says_what_to_weave(target: Any, message: str) -> None:
    """A built-in function has no place of its own to weave it (``os.getpid`` is
    ``posix.getpid``): the error asks for the dotted path; a C type's method says it
    cannot be replaced."""
    with pytest.raises(WeaveTargetError, match=message):
        ah.weave(target, before=lambda ctx: None)
    assert ah.default_weaver.registered == []


class _Box(Generic[_T]):
    def get(self) -> int:
        return 1


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (_Box[int], r"_Box\[int\] is a parameterised alias of the class _Box: weave _Box"),
        (list[int], r"list\[int\] is a parameterised alias of the built-in type list"),
        (typing.Literal["a"], r"Literal\['a'\] is a type annotation, not code"),
        (int | None, r"int \| None is a type annotation, not code"),
    ],
)
def test_a_parameterised_type_alias_is_refused_saying_what_to_weave(
    target: Any, message: str
) -> None:
    """``weave(Box[int])`` wove the methods of typing's alias object (or failed saying to
    weave ``_GenericAlias``), and advised no call of ``Box``: an alias is refused, naming
    the class to weave."""
    before = dict(vars(target)) if hasattr(target, "__dict__") else None
    with pytest.raises(WeaveTargetError, match=message):
        ah.weave(target, before=lambda ctx: None)
    assert ah.default_weaver.registered == []
    assert (dict(vars(target)) if before is not None else None) == before
    assert "get" in vars(_Box)
    assert not isinstance(vars(_Box)["get"], wrapt.ObjectProxy)


class _Handler:
    def __call__(self, event: str) -> str:
        return event


def test_an_instance_with_only_call_says_where_to_weave_it() -> None:
    """An instance's calls run its class's ``__call__`` (Python looks it up on the class),
    so a weave of that one instance has nothing to take: the message says to weave it
    where it is held or the class's ``__call__``; it said only 'matched nothing'."""
    handler = _Handler()
    message = (
        rf"this {__name__}\._Handler instance has no public method.*calling it runs "
        rf"{__name__}\._Handler\.__call__.*weave\('pkg\.mod\.handler'\).*"
        rf"'{__name__}\._Handler\.__call__'"
    )
    with pytest.raises(WeaveTargetError, match=message):
        ah.weave(handler, before=lambda ctx: None, strict=True)
    with capture_logs() as logs:
        ah.weave(handler, before=lambda ctx: None).remove()
    [entry] = [e for e in logs if e["event"] == "weave.skipped"]
    assert re.search(message, entry["reason"])
    assert vars(handler) == {}


@pytest.mark.parametrize("target", [42, None, 1.5])
def test_unweavable_object_is_refused(target: Any) -> None:
    """Something that is neither code, a holder of code nor a path is refused."""
    with pytest.raises(WeaveTargetError, match=r"give a function, method, class, module"):
        ah.weave(target, before=lambda ctx: None)
    assert ah.default_weaver.registered == []


@pytest.mark.parametrize(
    "targets",
    [["json.dumps", "json.loads"], ("json.dumps",), {"json.dumps"}],
    ids=["list", "tuple", "set"],
)
def test_several_targets_at_once_are_refused_saying_to_weave_each(targets: Any) -> None:
    """``weave(['a', 'b'], ...)`` got the refusal of an object of no known kind ("give a
    function, method, class ..."); it says that weave takes one target, and to weave each
    or give one glob."""
    kind = type(targets).__name__
    message = rf"cannot weave a {kind} of targets .*weave each .*for t in targets.*glob"
    with pytest.raises(WeaveTargetError, match=message):
        ah.weave(targets, before=lambda ctx: None)
    assert ah.default_weaver.registered == []


def test_several_woven_functions_at_once_are_named_in_the_refusal() -> None:
    """The refusal of a list of functions names them (``module.qualname``): it showed their
    reprs cut short, ``[<JoinPointPro...x7f...>]`` for a woven one."""
    with ah.weave(_plain_function, before=lambda ctx: None):
        names = re.escape(f"[{__name__}._plain_function, json.dumps]")
        with pytest.raises(WeaveTargetError, match=names):
            ah.weave([_plain_function, json.dumps], before=lambda ctx: None)


def _plain_function(x: int) -> int:
    return x


# -- failures leave nothing half-patched -------------------------------------------------------


def test_ordering_cycle_while_weaving_leaves_nothing_behind() -> None:
    """A weave refused for an ordering cycle patches nothing and registers nothing."""

    class First(ah.Aspect):
        order_after = ("second",)

        @ah.before()
        def go(self, ctx: ah.CallContext) -> None: ...

    class Second(ah.Aspect):
        order_after = ("first",)

        @ah.before()
        def go(self, ctx: ah.CallContext) -> None: ...

    with pytest.raises(OrderingCycleError, match="cycle"):
        ah.weave(f"{MOD}.*", First(), Second())
    assert targets.changed() == []
    assert ah.default_weaver.registered == []
    gc.collect()  # join points that earlier tests left in reference cycles
    assert [r for r in ah.describe() if r.joinpoint.startswith(MOD)] == []


def test_failure_on_a_later_target_unwinds_the_earlier_ones() -> None:
    """When the n-th target of a glob cannot be woven, the ones before it are put back."""

    class Early(ah.Aspect):
        order_after = ("late",)

        @ah.before(f"{MOD}.train_epoch")
        def go(self, ctx: ah.CallContext) -> None: ...

    class Late(ah.Aspect):
        order_after = ("early",)

        @ah.before(f"{MOD}.train_epoch")
        def go(self, ctx: ah.CallContext) -> None: ...

    # Matches no join point yet, so the cycle only shows when train_epoch is woven, after
    # train_step (defined first) already was.
    registered = ah.register([Early(), Late()])
    with pytest.raises(OrderingCycleError, match=r"early -> late|late -> early"):
        ah.weave(f"{MOD}.train_*", before=lambda ctx: None)
    assert targets.changed() == []
    gc.collect()  # join points that earlier tests left in reference cycles
    assert [r for r in ah.describe() if r.joinpoint.startswith(MOD)] == []
    registered.remove()
    assert ah.default_weaver.registered == []


# -- review regressions: woven instances copied and pickled, callable instances, built-ins --


class Tally:
    """A plain class whose instances are woven one at a time."""

    def __init__(self) -> None:
        self.n = 0

    def inc(self) -> int:
        self.n += 1
        return self.n


class Service:
    """A callable instance: weaving it weaves its methods, as for any instance."""

    def __call__(self, x: int) -> int:
        return self.handle(x)

    def handle(self, x: int) -> int:
        return x * 2


def test_a_deep_copy_of_a_woven_instance_acts_on_itself() -> None:
    """The weave was for the original; its deep copy is a separate, plain object."""
    calls: list[str] = []
    original = Tally()
    with ah.weave(original, before=lambda ctx: calls.append("advice")):
        original.inc()
        clone = copy.deepcopy(original)
        clone.inc()
        clone.inc()
        assert (original.n, clone.n) == (1, 3)
        assert calls == ["advice"]


def test_a_woven_instance_pickles_and_the_copy_acts_on_itself() -> None:
    """Pickling keeps working while an instance is woven (by reference to its method)."""
    original = Tally()
    with ah.weave(original, before=lambda ctx: None):
        original.inc()
        restored = pickle.loads(pickle.dumps(original))
    assert restored.inc() == 2
    assert original.n == 1


def test_a_function_woven_where_it_was_imported_pickles_by_that_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A function woven in a module that imported it, or under an alias, pickles as the
    attribute it was woven at (its qualified name there finds the original, not it)."""
    monkeypatch.setattr(targets, "alias_of_add_one", targets.add_one, raising=False)
    with ah.woven(f"{MOD}.dumps", before=lambda ctx: None):
        assert pickle.loads(pickle.dumps(targets.dumps)) is targets.dumps
    with ah.woven(f"{MOD}.alias_of_add_one", before=lambda ctx: None):
        woven = targets.alias_of_add_one  # type: ignore[attr-defined]
        assert pickle.loads(pickle.dumps(woven)) is woven
        assert pickle.loads(pickle.dumps(targets.add_one)) is targets.add_one


@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_a_woven_partial_or_callable_instance_pickles_as_itself(
    monkeypatch: pytest.MonkeyPatch, protocol: int
) -> None:
    """A partial or a callable instance held by a module, woven there, has no name to
    pickle by: it pickles by value, as before the weave (a process pool can still be
    handed it), instead of failing on its missing ``__qualname__``."""
    monkeypatch.setattr(targets, "add_ten", functools.partial(operator.add, 10), raising=False)
    service = Service()
    service.scale = 3  # type: ignore[attr-defined]
    monkeypatch.setattr(targets, "service", service, raising=False)
    seen: list[str] = []
    with (
        ah.woven(f"{MOD}.add_ten", before=lambda ctx: seen.append("add_ten")),
        ah.woven(f"{MOD}.service", before=lambda ctx: seen.append("service")),
    ):
        partial = pickle.loads(pickle.dumps(targets.add_ten, protocol))  # type: ignore[attr-defined]
        restored = pickle.loads(pickle.dumps(targets.service, protocol))  # type: ignore[attr-defined]
    assert type(partial) is functools.partial
    assert (partial.func, partial.args, partial(5)) == (operator.add, (10,), 15)
    assert type(restored) is Service
    assert (restored(4), vars(restored)) == (8, {"scale": 3})
    assert seen == []


class _Cached:
    """A class whose one method is cached (``functools.cache``: a C wrapper, no function)."""

    @functools.cache  # noqa: B019 - the test needs a cached method
    def square(self, x: int) -> int:
        return x * x


@pytest.mark.parametrize("how", ["class", "instance"])
def test_a_cached_method_is_woven_with_its_class_or_instance(how: str) -> None:
    """``weave(Cls)`` skipped a ``functools.cache`` method ("no methods of its own"), and so
    did ``weave(obj)``, while ``'mod.Cls.*'`` and its path wove it: it is a method too."""
    seen: list[str] = []
    obj = _Cached()
    target: Any = _Cached if how == "class" else obj
    with ah.weave(target, before=lambda ctx: seen.append(ctx.joinpoint.name)):
        assert obj.square(3) == 9
    assert seen == [f"{__name__}._Cached.square"]
    assert type(vars(_Cached)["square"]) is type(functools.cache(len))
    assert "square" not in vars(obj)


def test_a_cached_function_is_woven_with_its_module(new_module: Callable[..., str]) -> None:
    """``weave(module)`` left out a ``functools.cache`` function, which ``'mod.*'`` weaves."""
    name = new_module(
        """
        import functools

        @functools.cache
        def square(x):
            return x * x
        """
    )
    module = _import(name)
    seen: list[str] = []
    with ah.weave(module, before=lambda ctx: seen.append(ctx.joinpoint.name)):
        assert module.square(3) == 9
    assert seen == [f"{name}.square"]
    assert type(module.square) is type(functools.cache(len))


def test_a_partial_given_as_an_object_says_to_weave_it_by_path_or_its_function() -> None:
    """A partial object got the generic list of what weave() takes, which it seemed to be
    (a callable); the error says where a proxy for it can go."""
    with pytest.raises(WeaveTargetError) as caught:
        ah.weave(functools.partial(targets.add_one, 1), before=lambda ctx: None)
    message = str(caught.value)
    assert "functools.partial of add_one" in message
    assert "weave it there by its path" in message
    assert "(weave(add_one))" in message
    assert ah.default_weaver.registered == []


def test_a_woven_callable_instance_copies_as_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of a callable instance woven where a module holds it is a plain copy of the
    instance, as before the weave: it was the proxy itself, so the copy's state was the
    original's (a deep copy of a config holding it shared the instance)."""
    service = Service()
    service.scale = [3]  # type: ignore[attr-defined]
    monkeypatch.setattr(targets, "service", service, raising=False)
    seen: list[str] = []
    with ah.woven(f"{MOD}.service", before=lambda ctx: seen.append("service")):
        woven = targets.service  # type: ignore[attr-defined]
        shallow, deep = copy.copy(woven), copy.deepcopy(woven)
    for clone in (shallow, deep):
        assert type(clone) is Service
        assert clone is not service
    assert shallow.scale is service.scale  # type: ignore[attr-defined]
    deep.scale.append(4)  # type: ignore[attr-defined]
    assert service.scale == [3]  # type: ignore[attr-defined]
    assert seen == []


def test_a_callable_instance_is_woven_like_any_instance() -> None:
    """An instance whose class defines __call__ is still an instance: its methods are woven."""
    seen: list[str] = []
    service = Service()
    with ah.weave(service, before=lambda ctx: seen.append(ctx.joinpoint.name)):
        assert service(1) == 2
    assert seen == [f"{__name__}.Service.handle"]
    assert "handle" not in vars(service)


class AsyncService:
    """A callable instance whose ``__call__`` is a coroutine function (an ASGI app, say)."""

    async def __call__(self, x: int) -> int:
        await asyncio.sleep(0)
        if x < 0:
            raise ValueError(x)
        return x * 2


def test_an_instance_with_an_async_call_woven_where_it_is_held_is_an_async_join_point(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Woven by the path that holds it, an instance whose ``__call__`` is ``async def`` is
    an async join point: async advice runs, after advice sees the awaited result and
    on_error advice the exception raised when the call is awaited."""
    monkeypatch.setattr(targets, "service", AsyncService(), raising=False)
    seen: list[tuple[str, object]] = []

    async def before(ctx: ah.CallContext) -> None:
        await asyncio.sleep(0)
        seen.append(("before", ctx.args[0]))

    with ah.woven(
        f"{MOD}.service",
        before=before,
        after=lambda ctx: seen.append(("after", ctx.result)),
        on_error=lambda ctx: ctx.recover(type(ctx.exception).__name__),
    ):
        assert asyncio.run(targets.service(2)) == 4  # type: ignore[attr-defined]
        assert asyncio.run(targets.service(-1)) == "ValueError"  # type: ignore[attr-defined]
    assert seen == [("before", 2), ("after", 4), ("before", -1), ("after", "ValueError")]


def test_an_instance_with_an_async_call_makes_coroutines_named_after_its_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Woven where it is held, an instance with an async ``__call__`` makes coroutines
    named as that ``__call__``'s own, as the instance does unwoven."""
    monkeypatch.setattr(targets, "service", AsyncService(), raising=False)
    with ah.woven(f"{MOD}.service", before=lambda ctx: None):
        coro = targets.service(2)  # type: ignore[attr-defined]
        assert (coro.__name__, coro.__qualname__) == ("__call__", "AsyncService.__call__")
        assert asyncio.run(coro) == 4


def test_a_method_of_a_built_in_type_is_skipped_with_the_reason() -> None:
    """Built-in types cannot have their attributes replaced: a clear skip (or error under
    strict=True), not a raw TypeError."""
    with capture_logs() as logs:
        handle = ah.weave("datetime.datetime.now", before=lambda ctx: None)
    assert handle.active
    [record] = [e for e in logs if e["event"] == "weave.skipped"]
    assert "built-in type" in record["reason"]
    handle.remove()
    with pytest.raises(WeaveTargetError, match="weave the Python code that calls now"):
        ah.weave("datetime.datetime.now", before=lambda ctx: None, strict=True)


class _Vault:
    def __open(self) -> int:  # stored as _Vault__open
        return 1

    def close(self) -> int:
        return self.__open()


@pytest.mark.parametrize(
    ("path", "suggestion"),
    [
        (f"{__name__}._Vault.__open", f"did you mean '{__name__}._Vault._Vault__open'"),
        ("json.JSONDecoder.raw_decod", "did you mean 'json.JSONDecoder.raw_decode'"),
        ("json.JSONEncoder.encdoe", "did you mean 'json.JSONEncoder.encode'"),
    ],
)
def test_a_missing_attribute_suggests_the_name_meant(path: str, suggestion: str) -> None:
    """A method named with two leading underscores is stored under its mangled name, and a
    misspelt one is close to the real one: the error names the path to weave instead of
    only 'check the spelling'."""
    with pytest.raises(WeaveTargetError, match=re.escape(suggestion)):
        ah.weave(path, before=lambda ctx: None, strict=True)


def test_a_path_to_an_instance_says_how_to_weave_its_methods() -> None:
    """A path to an instance (not callable): the message says to weave the object itself or
    a method by its path; it said only that a Tally is not a function or method."""
    with pytest.raises(
        WeaveTargetError,
        match=rf"{__name__}\.SINGLETON is a Tally instance.*weave the object itself.*"
        rf"'{__name__}\.SINGLETON\.inc'",
    ):
        ah.weave(f"{__name__}.SINGLETON", before=lambda ctx: None, strict=True)


class Engine:
    """A class whose name starts with a capital vowel: its instances are 'an Engine'."""

    def start(self) -> int:
        return 1


class Inert:
    """No method at all."""


ENGINE = Engine()
INERT = Inert()


@pytest.mark.parametrize(
    ("path", "said"),
    [
        pytest.param(f"{__name__}.ENGINE", "is an Engine instance", id="instance"),
        pytest.param(f"{__name__}.INERT", "is an Inert, not a function", id="object"),
    ],
)
def test_a_path_to_an_object_names_its_kind_with_the_right_article(path: str, said: str) -> None:
    """'an' before a class name that starts with a capital vowel, as before 'int': it read
    'is a Engine instance', 'is a Inert'."""
    with pytest.raises(WeaveTargetError, match=rf"{re.escape(path)} {said}"):
        ah.weave(path, before=lambda ctx: None, strict=True)


def test_what_a_config_type_builds_is_named_with_the_right_article() -> None:
    """aspecthook run's refusal of a type that builds no Aspect: 'builds an
    app.hooks.PrintIter' (it read 'a app.hooks.PrintIter'), 'a hooks.PrintIter'."""
    from aspecthook._cli_session import _what

    kind = type("PrintIter", (), {"__module__": "app.hooks"})
    assert _what(kind()) == "an app.hooks.PrintIter"
    kind.__module__ = "hooks"
    assert _what(kind()) == "a hooks.PrintIter"


def test_a_path_to_a_property_says_it_is_not_callable() -> None:
    """A property exists but cannot be woven: the message says that, not 'no attribute'."""
    with pytest.raises(WeaveTargetError, match="is a property, not a function or method"):
        ah.weave("fractions.Fraction.numerator", before=lambda ctx: None, strict=True)


@dataclasses.dataclass
class _Record:
    """A class whose only methods are dunders (the dataclass's ``__init__``...)."""

    value: int = 0


@pytest.mark.parametrize("target", [f"{__name__}._Record", "json.JSONDecodeError", _Record])
def test_a_class_with_no_methods_of_its_own_says_so(target: Any) -> None:
    """A class whose methods are all dunders (a dataclass, an exception) has nothing a class
    weave takes: the message says that and which path to weave, not that a class is 'a
    type, not a function or method' (a class is callable), nor only 'matched nothing'."""
    label = target if isinstance(target, str) else f"{__name__}._Record"
    message = rf"{re.escape(label)} is a class with no methods of its own.*'{label}.__init__'"
    with pytest.raises(WeaveTargetError, match=message):
        ah.weave(target, before=lambda ctx: None, strict=True)
    with capture_logs() as logs:
        handle = ah.weave(target, before=lambda ctx: None)
    [entry] = [e for e in logs if e["event"] == "weave.skipped"]
    assert re.search(message, entry["reason"])
    handle.remove()


def test_a_module_with_no_functions_of_its_own_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module that holds no function defined in it: the message says so (it said the
    module is 'a module, not a function or method')."""
    package = types.ModuleType("_weave_empty_pkg")
    package.__path__ = []
    empty = types.ModuleType("_weave_empty_pkg.consts")
    empty.LIMIT = 3  # type: ignore[attr-defined]
    empty.dumps = json.dumps  # type: ignore[attr-defined]  # imported, not its own
    package.consts = empty  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "_weave_empty_pkg", package)
    monkeypatch.setitem(sys.modules, "_weave_empty_pkg.consts", empty)
    for target in ("_weave_empty_pkg:consts", "_weave_empty_pkg.consts", empty):
        with pytest.raises(WeaveTargetError, match=r"is a module with no functions of its own"):
            ah.weave(target, before=lambda ctx: None, strict=True)


class _Meta(type):
    def who(cls) -> str:
        return cls.__name__


class _Made(metaclass=_Meta):
    pass


class _MadeSub(_Made):
    pass


@pytest.mark.parametrize("target", [f"{__name__}._Made.who", _Made.who], ids=["path", "object"])
def test_a_metaclass_method_seen_on_a_class_is_refused_naming_the_metaclass(target: Any) -> None:
    """``_Made.who`` comes from the metaclass: a proxy on ``_Made`` would bind it to
    ``_Made`` for its subclasses and show it on instances, so it is refused, naming
    the metaclass method to weave; the metaclass method itself weaves every class."""
    match = rf"who is a method of its metaclass _Meta.*weave '{__name__}\._Meta\.who'"
    with pytest.raises(WeaveTargetError, match=match):
        ah.weave(target, before=lambda ctx: None, strict=True)
    assert "who" not in vars(_Made)
    assert (_Made.who(), _MadeSub.who()) == ("_Made", "_MadeSub")
    with pytest.raises(WeaveTargetError, match="matched nothing"):  # a glob leaves it out
        ah.weave(f"{__name__}._Made*.who", before=lambda ctx: None, strict=True)
    seen: list[str] = []
    with ah.weave(f"{__name__}._Meta.who", before=lambda ctx: seen.append(ctx.joinpoint.name)):
        assert (_Made.who(), _MadeSub.who()) == ("_Made", "_MadeSub")
        assert not hasattr(_Made(), "who")
    assert seen == [f"{__name__}._Meta.who"] * 2


class Slotted:
    __slots__ = ("n",)

    def inc(self) -> None: ...


def test_an_instance_without_a_dict_is_refused_with_the_class_to_weave() -> None:
    """A __slots__ instance has nowhere to hold per-instance proxies: weave the class."""
    with pytest.raises(WeaveTargetError, match=r"uses __slots__.*weave the class Slotted"):
        ah.weave(Slotted(), before=lambda ctx: None)


@dataclasses.dataclass(frozen=True)
class Frozen:
    n: int

    def total(self) -> int:
        return self.n


def test_an_instance_that_refuses_new_attributes_is_refused_with_the_class_to_weave() -> None:
    """A frozen dataclass instance cannot hold a proxy: a WeaveTargetError that says to
    weave the class, not the dataclass's own error, and nothing is left registered."""
    frozen = Frozen(1)
    with pytest.raises(WeaveTargetError, match=r"FrozenInstanceError.*weave the class Frozen"):
        ah.weave(frozen, before=lambda ctx: None)
    assert vars(frozen) == {"n": 1}
    assert ah.describe(ah.Glob("*Frozen*")) == []


def test_a_property_getter_by_path_is_refused_saying_what_to_weave() -> None:
    """'mod.Cls.prop.fget' reaches a property, which cannot take a proxy: the message says
    to weave the function the getter calls; it said to weave the class ``property``."""
    with pytest.raises(WeaveTargetError, match=r"property.*fget.*") as caught:
        ah.weave("fractions.Fraction.numerator.fget", before=lambda ctx: None)
    assert "weave the class property" not in str(caught.value)
    assert "weave the function its getter calls" in str(caught.value)
    assert ah.default_weaver.registered == []


class _WithDescriptors:
    """A class whose attributes are descriptors that make a callable at each lookup."""

    @functools.singledispatchmethod
    def handle(self, x: object) -> str:
        return "object"

    shifted = functools.partialmethod(operator.add)


@pytest.mark.parametrize(
    ("attr", "kind"), [("handle", "singledispatchmethod"), ("shifted", "partialmethod")]
)
def test_a_path_to_a_method_making_descriptor_says_what_to_weave(attr: str, kind: str) -> None:
    """A singledispatchmethod by its path was taken for an instance whose methods could be
    woven "for it alone", and the error suggested weaving its ``register`` method."""
    with pytest.raises(WeaveTargetError) as caught:
        ah.weave(f"{__name__}._WithDescriptors.{attr}", before=lambda ctx: None, strict=True)
    message = str(caught.value)
    assert f"is a {kind}, a descriptor that makes a new callable each time" in message
    assert "weave the function it calls" in message
    assert "register" not in message
    assert ah.default_weaver.registered == []


class _Slotted:
    __slots__ = ("size",)


def test_a_path_to_a_slot_is_data_not_a_method_making_descriptor() -> None:
    """A slot is a descriptor too, but of data: it is told apart from those above."""
    with pytest.raises(WeaveTargetError) as caught:
        ah.weave(f"{__name__}._Slotted.size", before=lambda ctx: None, strict=True)
    assert "is a member_descriptor, not a function or method" in str(caught.value)
    assert "makes a new callable" not in str(caught.value)


class _WithProperties:
    """A class whose computed attributes are a property and a cached_property."""

    @property
    def size(self) -> int:
        return 1

    @functools.cached_property
    def total(self) -> int:
        return 2


@pytest.mark.parametrize(
    ("target", "says"),
    [
        (_WithProperties.size.fget, f"accessor of the property {__name__}._WithProperties.size"),
        (
            vars(_WithProperties)["total"].func,
            f"accessor of the cached_property {__name__}._WithProperties.total",
        ),
        (vars(_WithProperties)["size"], "cannot weave a property object"),
        (vars(_WithProperties)["total"], "cannot weave a cached_property object"),
    ],
)
def test_a_property_or_its_getter_given_as_an_object_says_what_to_weave(
    target: Any, says: str
) -> None:
    """``weave(Cls.prop.fget)`` said it could not find where the getter is defined, "a
    local function or one removed from its module", and to weave its holder; a property
    object got the generic list of what weave() takes. Both say what a property needs."""
    with pytest.raises(WeaveTargetError) as caught:
        ah.weave(target, before=lambda ctx: None)
    assert says in str(caught.value)
    assert "weave the function its getter calls" in str(caught.value)
    assert ah.default_weaver.registered == []


@pytest.mark.parametrize(
    ("path", "advice"),
    [
        (f"{MOD}.add_one.__call__", rf"weave '{MOD}\.add_one' itself"),
        (f"{__name__}.SINGLETON.__init__", rf"weave '{__name__}\.Tally\.__init__'"),
        (f"{MOD}.decorated.__wrapped__", rf"weave '{MOD}\.decorated' itself"),
    ],
)
def test_a_dunder_method_of_an_object_is_refused_saying_what_to_weave(
    path: str, advice: str
) -> None:
    """Python looks ``__call__`` (any ``__dunder__`` method) up on an object's type, so a
    proxy put in one function's or instance's ``__dict__`` never ran: the weave is refused
    (skipped unless strict) saying what to weave, and puts nothing there."""
    holder = path.rpartition(".")[0].rpartition(".")[2]
    with pytest.raises(WeaveTargetError, match=rf"would never run.*up on the type.*{advice}"):
        ah.weave(path, before=lambda ctx: None, strict=True)
    with capture_logs() as logs:
        ah.weave(path, before=lambda ctx: None).remove()
    assert [e["event"] for e in logs] == ["weave.skipped"]
    obj = getattr(sys.modules[path.partition(".")[0]], holder)
    assert not isinstance(vars(obj).get(path.rpartition(".")[2]), wrapt.ObjectProxy)


SINGLETON = Tally()
bump = SINGLETON.inc  # a module-level alias of one instance's bound method


class _KeepsItsCallback:
    def __init__(self) -> None:
        self.count = 0
        self.callback = self.on_step  # a bound method of a join point, kept

    @ah.joinpoint("test_weave.keeps_its_callback")
    def on_step(self) -> int:
        self.count += 1
        return self.count


def test_an_object_keeping_a_bound_join_point_method_copies_like_a_plain_one() -> None:
    """copy keeps the same method of the same object; deepcopy gives the copy's own
    method (as for a plain bound method), and the copy's calls run the advice too."""
    seen: list[int] = []
    original = _KeepsItsCallback()
    with ah.before("test_weave.keeps_its_callback")(lambda ctx: seen.append(id(ctx.instance))):
        shallow = copy.copy(original)
        deep = copy.deepcopy(original)
        assert shallow.callback() == 1  # the original's method
        assert deep.callback() == 1  # the copy's own
        assert (original.count, deep.count) == (1, 1)
    assert seen == [id(original), id(deep)]


class _Keeper:
    def __init__(self) -> None:
        self.count = 0
        self.private = self.__step  # a private method, kept
        self.base = super().__repr__  # not ours: copied as usual

    @ah.joinpoint("test_weave.keeper_private")
    def __step(self) -> int:
        self.count += 1
        return self.count


class _Base:
    def __init__(self) -> None:
        self.count = 0

    @ah.joinpoint("test_weave.base_step")
    def step(self) -> str:
        self.count += 1
        return "base"


class _Sub(_Base):
    def __init__(self) -> None:
        super().__init__()
        self.callback = super().step  # the base's method, not _Sub.step

    def step(self) -> str:
        return "sub"


def test_a_deep_copy_rebinds_the_same_method_not_one_of_the_same_name() -> None:
    """A private method and a super() method kept by an object: the copy keeps the very
    same method, bound to the copy, with its advice."""
    seen: list[str] = []
    with ah.before("test_weave.*")(lambda ctx: seen.append(ctx.joinpoint.name)):
        keeper = copy.deepcopy(_Keeper())
        assert keeper.private() == 1
        assert keeper.count == 1
        sub = copy.deepcopy(_Sub())
        assert sub.callback() == "base"
        assert sub.count == 1
    assert seen == ["test_weave.keeper_private", "test_weave.base_step"]


class _Partial:
    """A callable descriptor used as a method, as some decorators make them."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        return self if instance is None else functools.partial(self.fn, instance)


class _Bumps:
    def __init__(self) -> None:
        self.n = 0
        self.callback = self.bump

    @_Partial
    def bump(self) -> int:
        self.n += 1
        return self.n


def test_a_deep_copy_of_a_callable_descriptor_method_acts_on_the_copy() -> None:
    """wrapt binds such a method as a callable: the copy's kept method still acts on the
    copy, as without the weave."""
    with ah.weave(f"{__name__}._Bumps.bump", before=lambda ctx: None):
        original = _Bumps()
        clone = copy.deepcopy(original)
        clone.callback()
    assert (original.n, clone.n) == (0, 1)


def test_a_deep_copy_of_an_instance_woven_twice_acts_on_itself() -> None:
    """Woven through its class and on its own: the copy's calls act on the copy (with the
    class's advice; the instance weave is the original's)."""
    seen: list[tuple[str, int]] = []
    with ah.weave(
        f"{__name__}._Base.step", before=lambda ctx: seen.append(("class", id(ctx.instance)))
    ):
        original = _Base()
        with ah.weave(original, before=lambda ctx: seen.append(("own", id(ctx.instance)))):
            clone = copy.deepcopy(original)
            clone.step()
            assert (original.count, clone.count) == (0, 1)
    assert seen == [("class", id(clone))]


def test_a_deep_copy_of_a_bound_method_woven_by_path_keeps_the_advice() -> None:
    """Only a proxy held in its own instance's __dict__ is a per-instance weave; a bound
    method woven where another object keeps it is copied as the proxy it is."""
    seen: list[str] = []
    with ah.weave(f"{__name__}.bump", before=lambda ctx: seen.append("advice")):
        callback = copy.deepcopy({"on_step": globals()["bump"]})["on_step"]
        callback()
    assert seen == ["advice"]


# -- review fixes -----------------------------------------------------------------------------


def test_a_weave_removed_while_patched_leaves_the_target_weavable() -> None:
    """A weave removed while mock.patch holds the attribute: the idle proxy the patch puts
    back takes later weaves (their advice runs), and their removal restores the original."""

    class Service:
        def fetch(self, x: int) -> int:
            return x

    original = vars(Service)["fetch"]
    log: list[Any] = []
    first = ah.weave(Service, before=record(log, "first"))
    with mock.patch.object(Service, "fetch"):
        first.remove()
    idle = vars(Service)["fetch"]
    with ah.weave(idle, before=record(log, "second")):  # the proxy itself, as a target
        with ah.weave(Service, before=record(log, "third")):
            assert Service().fetch(1) == 1
        assert [r.advice for r in ah.describe(f"*.{Service.__qualname__}.fetch")] == ["advice"]
    assert log == ["second", "third"]
    assert vars(Service)["fetch"] is original


def test_a_stale_proxy_woven_where_it_now_sits_takes_that_name(
    new_module: Callable[..., str],
) -> None:
    """A proxy another module took ('from a import f') while a.f was woven, woven again by
    that module's path: its join point is named by that path, and advice for 'a.f' does
    not run at its calls."""
    first, second = _import(new_module("def f():\n    return 1\n")), types.ModuleType("b")
    second.__name__ = f"{first.__name__}_b"
    woven = ah.weave(f"{first.__name__}.f", before=lambda ctx: None)
    second.f = first.f  # as 'from a import f' in b, while woven
    woven.remove()
    seen: list[str] = []
    by_old_name = ah.before(f"{first.__name__}.f")(lambda ctx: seen.append("a.f advice"))
    try:
        with (
            mock.patch.dict(sys.modules, {second.__name__: second}),
            ah.weave(f"{second.__name__}.f", before=lambda ctx: seen.append(ctx.joinpoint.name)),
        ):
            assert second.f() == 1
            [row] = ah.describe(f"{second.__name__}.f")
    finally:
        by_old_name.remove()
    assert seen == [f"{second.__name__}.f"]
    assert row.aliases == ()


def test_a_module_glob_leaves_what_the_module_imported_alone(
    new_module: Callable[..., str],
) -> None:
    """'mod.*' weaves the module's own functions and classes, not the classes and functions
    it imported from elsewhere (weaving those would reach every user of them)."""
    name = new_module(
        """
        from string import Template
        from textwrap import dedent
        from os import getpid
        from pickle import dumps
        from functools import reduce

        def own(x):
            return x

        class Mine:
            def work(self):
                return 1
        """
    )
    _import(name)

    def mark(ctx: ah.CallContext) -> None:
        pass

    with ah.weave(f"{name}.*", before=mark):
        woven = {r.joinpoint for r in ah.describe() if r.advice == "mark"}
        assert woven == {f"{name}.own", f"{name}.Mine.work"}
        assert not isinstance(vars(__import__("string").Template)["substitute"], wrapt.ObjectProxy)


def test_a_glob_over_a_private_module_weaves_what_it_defines(
    new_module: Callable[..., str],
) -> None:
    """An implementation module with a private name ('pkg._impl.*'): its own classes and
    functions are its own, and a glob over it weaves them."""
    package = new_module(
        """
        def helper(x):
            return x

        class Model:
            def forward(self, x):
                return x
        """,
        package=True,
        sub="_impl",
    )
    name = f"{package}._impl"
    _import(name)

    def mark(ctx: ah.CallContext) -> None:
        pass

    with ah.weave(f"{name}.*", before=mark):
        woven = {r.joinpoint for r in ah.describe() if r.advice == "mark"}
    assert woven == {f"{name}.helper", f"{name}.Model.forward"}


def test_a_package_glob_reaches_what_the_package_defines_in_its_submodules() -> None:
    """'json.*' reaches json's own re-exports from its submodules (JSONDecoder.decode)."""

    def mark(ctx: ah.CallContext) -> None:
        pass

    with ah.weave("json.*", before=mark):
        woven = {r.joinpoint for r in ah.describe() if r.advice == "mark"}
    assert {"json.dumps", "json.decoder.JSONDecoder.decode"} <= woven
    assert "codecs.lookup" not in woven


@pytest.mark.parametrize(
    ("glob", "expected"),
    [
        ("heapq.heap*", {"heapq.heappush", "heapq.heappop"}),  # from _heapq
        ("os.*stat", {"os.stat", "os.lstat"}),  # from posix / nt
        ("operator.ad*", {"operator.add"}),  # from _operator
        ("pickle.dump*", {"pickle.dumps", "pickle.dump"}),  # from _pickle
        ("torch.nn.functional.conv*", {"torch.nn.functional.conv2d"}),  # from torch's C part
    ],
)
def test_a_module_glob_reaches_the_functions_of_its_accelerator(
    glob: str, expected: set[str]
) -> None:
    """A module glob weaves the functions the module takes from its own C part (heapq's
    from _heapq, os's from posix, torch.nn.functional's from torch): they are its own."""
    if glob.startswith("torch"):
        pytest.importorskip("torch.nn.functional")

    def mark(ctx: ah.CallContext) -> None:
        pass

    with capture_logs(), ah.weave(glob, before=mark):
        woven = {r.joinpoint for r in ah.describe() if r.advice == "mark"}
    assert expected <= woven


def test_a_module_glob_leaves_classes_imported_from_a_public_module_alone(
    new_module: Callable[..., str],
) -> None:
    """'mod.*' leaves alone classes that another public module defines, even through
    that module's private part or a C module of the interpreter (weaving them would
    reach every user of them)."""
    name = new_module(
        """
        from threading import Thread
        from collections import OrderedDict
        from os import error

        def own(x):
            return x
        """
    )
    _import(name)

    def mark(ctx: ah.CallContext) -> None:
        pass

    with capture_logs(), ah.weave(f"{name}.*", before=mark):
        woven = {r.joinpoint for r in ah.describe() if r.advice == "mark"}
    assert woven == {f"{name}.own"}


def test_weave_refuses_a_misspelt_option_naming_the_valid_ones() -> None:
    """weave(..., evry=2) raises InvalidOptionError listing the options, as decorators do."""
    with pytest.raises(InvalidOptionError, match=r"evry.*valid options.*every") as info:
        ah.weave(targets.add_one, after=lambda ctx: None, evry=2)
    assert info.value.option == "evry"
    assert targets.changed() == []


def test_an_advice_function_that_is_not_callable_is_refused() -> None:
    """weave(target, before=5) names the value (it was "'int' object is not iterable")."""
    with pytest.raises(
        AdviceSignatureError, match=r"weave\(before=\.\.\.\) takes a function .* got 5"
    ):
        ah.weave(targets.add_one, before=5)  # type: ignore[arg-type]


def test_a_weaver_that_is_not_a_weaver_is_refused() -> None:
    """weave(..., weaver=5) is refused by name before anything is woven (it was an
    AttributeError from inside)."""
    with pytest.raises(InvalidOptionError, match=r"weaver=5 is not a Weaver"):
        ah.weave(targets.add_one, before=lambda ctx: None, weaver=5)  # type: ignore[arg-type]
