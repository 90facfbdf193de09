"""Advice: before / after / on_error / around semantics, the Advice handle, and options."""

from __future__ import annotations

import asyncio
import functools
import gc
import inspect
import re
import traceback
import types
import weakref
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

import aspecthook as ah
from aspecthook.errors import (
    AdviceSignatureError,
    AspectDefinitionError,
    InvalidOptionError,
    UnsupportedAdviceError,
)


@pytest.fixture
def point(request: pytest.FixtureRequest) -> str:
    """A join point name that no other test uses."""
    return "test_advice." + re.sub(r"\W", "_", request.node.name)


def _declare(weaver: ah.Weaver, name: str, fail: BaseException | None = None) -> Any:
    """Declare a join point ``add(x, y=1)`` named ``name``; it raises ``fail`` when given.

    ``add.calls`` records the arguments the target itself received.
    """
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    @weaver.joinpoint(name)
    def add(x: int, y: int = 1) -> int:
        calls.append(((x,), {"y": y}))
        if fail is not None:
            raise fail
        return x + y

    add.calls = calls
    return add


def test_advice_made_in_a_comprehension_is_registered(weaver: ah.Weaver, point: str) -> None:
    """A lambda made in a comprehension (qualname '...<listcomp>.<lambda>') is advice to
    register at once, not a method in a class body that the decorator only marks."""
    add = _declare(weaver, point)
    seen: list[int] = []
    advices = [weaver.before(point, name=f"b{i}")(lambda ctx, i=i: seen.append(i)) for i in (1, 2)]
    advices.append(next(weaver.after(point, name="a")(lambda ctx: seen.append(3)) for _ in (1,)))
    assert all(isinstance(advice, ah.Advice) for advice in advices)
    assert add(1) == 2
    assert seen == [1, 2, 3]


# -- before ------------------------------------------------------------------------------------


def test_before_runs_before_the_target_and_sees_the_call(weaver: ah.Weaver, point: str) -> None:
    """Before advice gets ctx with the join point, target, args (list) and kwargs (dict)."""
    add = _declare(weaver, point)
    seen: list[Any] = []

    @weaver.before(point)
    def look(ctx: Any) -> None:
        seen.append(
            (ctx.joinpoint.name, ctx.target, ctx.instance, ctx.args, ctx.kwargs, ctx.result)
        )
        assert add.calls == []

    assert add(2, y=3) == 5
    assert seen == [(point, add.__wrapped__, None, [2], {"y": 3}, None)]
    assert type(seen[0][3]) is list


def test_before_rewrites_args_and_kwargs(weaver: ah.Weaver, point: str) -> None:
    """Before advice may edit ctx.args in place, assign it, and edit ctx.kwargs."""
    add = _declare(weaver, point)

    @weaver.before(point)
    def edit(ctx: Any) -> None:
        ctx.args[0] = 10
        ctx.kwargs["y"] = 20

    assert add(1, y=2) == 30
    edit.remove()

    @weaver.before(point)
    def assign(ctx: Any) -> None:
        ctx.args = (100,)

    assert add(1) == 101
    assert add.calls[-1] == ((100,), {"y": 1})


def test_skip_short_circuits_target_and_around_but_not_after(weaver: ah.Weaver, point: str) -> None:
    """ctx.skip(value): target and around advice do not run, after advice does, value returns."""
    add = _declare(weaver, point)
    ran: list[str] = []

    @weaver.before(point)
    def short(ctx: Any) -> None:
        ctx.skip("cached")

    @weaver.around(point)
    def wrap(ctx: Any, proceed: Callable[..., Any]) -> Any:
        ran.append("around")
        return proceed()

    @weaver.after(point)
    def later(ctx: Any) -> None:
        ran.append(f"after:{ctx.result}:{ctx.skipped}")

    assert add(1) == "cached"
    assert add.calls == []
    assert ran == ["after:cached:True"]


def test_skip_without_value_returns_none(weaver: ah.Weaver, point: str) -> None:
    """ctx.skip() with no value makes the call return None."""
    add = _declare(weaver, point)
    weaver.before(point)(lambda ctx: ctx.skip())
    assert add(1) is None
    assert add.calls == []


def test_before_raising_stops_the_call(weaver: ah.Weaver, point: str) -> None:
    """A failing before advice (errors='raise', the default) propagates; the target never runs."""
    add = _declare(weaver, point)

    @weaver.before(point)
    def fail(ctx: Any) -> None:
        raise RuntimeError("advice broke")

    with pytest.raises(RuntimeError, match="advice broke"):
        add(1)
    assert add.calls == []


# -- after -------------------------------------------------------------------------------------


def test_after_reads_and_replaces_the_result(weaver: ah.Weaver, point: str) -> None:
    """After advice reads ctx.result and may replace it by assigning ctx.result."""
    add = _declare(weaver, point)
    seen: list[Any] = []

    @weaver.after(point)
    def replace(ctx: Any) -> None:
        seen.append(ctx.result)
        ctx.result = ctx.result * 100

    assert add(1, y=2) == 300
    assert seen == [3]


def test_after_does_not_run_when_the_target_raises(weaver: ah.Weaver, point: str) -> None:
    """After advice runs after a return, a skip or a recovery, never after an exception."""
    add = _declare(weaver, point, fail=KeyError("k"))
    ran: list[str] = []
    weaver.after(point)(lambda ctx: ran.append("after"))
    with pytest.raises(KeyError, match="k"):
        add(1)
    assert ran == []


# -- on_error ----------------------------------------------------------------------------------


def test_on_error_sees_the_exception_and_it_propagates_unchanged(
    weaver: ah.Weaver, point: str
) -> None:
    """Without recover or raise, the original exception object propagates with its traceback."""
    original = KeyError("the original")
    add = _declare(weaver, point, fail=original)
    seen: list[Any] = []

    @weaver.on_error(point)
    def look(ctx: Any) -> None:
        seen.append(ctx.exception)

    with pytest.raises(KeyError, match="the original") as info:
        add(1)
    assert info.value is original
    assert seen == [original]
    frames = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
    assert "add" in frames
    assert info.value.__cause__ is None


def test_on_error_does_not_run_on_success(weaver: ah.Weaver, point: str) -> None:
    """On-error advice runs only when the target raised."""
    add = _declare(weaver, point)
    ran: list[str] = []
    weaver.on_error(point)(lambda ctx: ran.append("on_error"))
    assert add(1) == 2
    assert ran == []


def test_recover_suppresses_and_after_sees_the_value(weaver: ah.Weaver, point: str) -> None:
    """ctx.recover(value) suppresses the exception; value is the result and after advice runs."""
    add = _declare(weaver, point, fail=ValueError("bad"))
    ran: list[Any] = []

    @weaver.on_error(point)
    def fallback(ctx: Any) -> None:
        ctx.recover(-1)

    @weaver.after(point)
    def later(ctx: Any) -> None:
        ran.append((ctx.result, ctx.recovered))

    assert add(1) == -1
    assert ran == [(-1, True)]


@pytest.mark.parametrize("stage", ["before", "after", "around"])
def test_recover_outside_error_advice_is_refused(weaver: ah.Weaver, point: str, stage: str) -> None:
    """ctx.recover() where no exception is being handled raises UnsupportedAdviceError
    saying what to call instead; it did nothing there (after advice: it set the result)."""
    add = _declare(weaver, point)

    def advice(ctx: Any, proceed: Any = None) -> Any:
        ctx.recover(-1)
        return proceed() if proceed is not None else None

    getattr(weaver, stage)(point)(advice)
    with pytest.raises(UnsupportedAdviceError, match=r"ctx\.recover\(\) was called .*error advice"):
        add(1)


def test_recover_in_around_advice_that_caught_the_exception_says_to_return_the_value(
    weaver: ah.Weaver, point: str
) -> None:
    """Around advice that catches the exception ``proceed()`` raised and calls
    ctx.recover() is told its own way to give a value: return it."""
    add = _declare(weaver, point, fail=KeyError("missing"))

    @weaver.around(point)
    def fallback(ctx: Any, proceed: Any) -> Any:
        try:
            return proceed()
        except KeyError:
            ctx.recover(-1)
            return -1

    with pytest.raises(UnsupportedAdviceError, match=r"around advice .* returns the value"):
        add(1)


def test_recover_in_before_advice_does_not_swallow_a_later_exception(
    weaver: ah.Weaver, point: str
) -> None:
    """recover() in before advice armed the recovery: a target that then raised returned
    the before advice's value once any error advice ran, though none recovered. Now the
    before advice's call is refused and the target never runs."""
    add = _declare(weaver, point, fail=KeyError("missing"))
    weaver.before(point)(lambda ctx: ctx.recover("early"))
    weaver.on_error(point)(lambda ctx: None)
    with pytest.raises(UnsupportedAdviceError):
        add(1)
    assert add.calls == []


def test_recover_in_after_advice_of_a_recovered_call_sets_the_result(
    weaver: ah.Weaver, point: str
) -> None:
    """Where an exception was handled (error advice recovered it), recover() in after
    advice is not refused: it sets the result."""
    add = _declare(weaver, point, fail=KeyError("missing"))
    weaver.on_error(point)(lambda ctx: ctx.recover(1))
    weaver.after(point)(lambda ctx: ctx.recover(ctx.result + 1))
    assert add(1) == 2


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_skip_in_error_advice_is_refused_chained_to_the_exception(
    weaver: ah.Weaver, point: str, is_async: bool
) -> None:
    """ctx.skip(value) in error advice did nothing: the exception propagated, the value was
    dropped. It raises UnsupportedAdviceError saying to call recover(), chained to the
    call's exception."""
    original = KeyError("missing")

    if is_async:

        @weaver.joinpoint(point)
        async def target(x: int) -> int:
            raise original

    else:

        @weaver.joinpoint(point)
        def target(x: int) -> int:
            raise original

    weaver.on_error(point)(lambda ctx: ctx.skip(0))
    message = r"ctx\.skip\(\) was called by error advice .*raised KeyError.*ctx\.recover\(value\)"
    with pytest.raises(UnsupportedAdviceError, match=message) as raised:
        asyncio.run(target(1)) if is_async else target(1)
    assert raised.value.__cause__ is original
    assert raised.value.kind == "skip"


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_skip_in_around_advice_is_not_blamed_on_error_advice(
    weaver: ah.Weaver, point: str, is_async: bool
) -> None:
    """Around advice that called ctx.skip() before a proceed() that raised: error advice
    that recovers nothing lets the call's own exception through. It was replaced by an
    UnsupportedAdviceError saying the error advice had called skip()."""
    original = KeyError("missing")

    if is_async:

        @weaver.joinpoint(point)
        async def target(x: int) -> int:
            raise original

        @weaver.around(point)
        async def marks(ctx: Any, proceed: Any) -> Any:
            ctx.skip(0)
            return await proceed()

    else:

        @weaver.joinpoint(point)
        def target(x: int) -> int:
            raise original

        @weaver.around(point)
        def marks(ctx: Any, proceed: Any) -> Any:
            ctx.skip(0)
            return proceed()

    weaver.on_error(point)(lambda ctx: None)
    with pytest.raises(KeyError) as raised:
        asyncio.run(target(1)) if is_async else target(1)
    assert raised.value is original


def test_on_error_raising_replaces_the_exception_chained(weaver: ah.Weaver, point: str) -> None:
    """An on_error advice that raises replaces the exception, with __cause__ the original."""
    original = KeyError("missing")
    add = _declare(weaver, point, fail=original)

    @weaver.on_error(point)
    def translate(ctx: Any) -> None:
        raise LookupError("translated")

    with pytest.raises(LookupError, match="translated") as info:
        add(1)
    assert info.value is not original
    assert info.value.__cause__ is original


def test_on_error_explicit_cause_is_kept(weaver: ah.Weaver, point: str) -> None:
    """A replacement raised `from` something else keeps that cause."""
    add = _declare(weaver, point, fail=KeyError("k"))
    other = OSError("disk")

    @weaver.on_error(point)
    def translate(ctx: Any) -> None:
        raise RuntimeError("replaced") from other

    with pytest.raises(RuntimeError, match="replaced") as info:
        add(1)
    assert info.value.__cause__ is other


@pytest.mark.parametrize("is_async", [False, True])
def test_on_error_raise_from_none_is_kept(weaver: ah.Weaver, point: str, is_async: bool) -> None:
    """A replacement raised ``from None`` keeps its chain suppressed, as in plain Python:
    the advice said the original is an implementation detail, so the traceback must not
    show it as the direct cause."""
    original = KeyError("internal")

    if is_async:

        @weaver.joinpoint(point)
        async def target() -> None:
            raise original

        def call() -> None:
            asyncio.run(target())

    else:

        @weaver.joinpoint(point)
        def target() -> None:
            raise original

        call = target

    @weaver.on_error(point)
    def hide(ctx: Any) -> None:
        raise LookupError("public") from None

    with pytest.raises(LookupError, match="public") as info:
        call()
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__
    assert "internal" not in "".join(traceback.format_exception(info.value))


# -- around ------------------------------------------------------------------------------------


def test_around_proceeds_and_returns_the_result(weaver: ah.Weaver, point: str) -> None:
    """Around advice calls proceed() to run the target and returns the (changed) result."""
    add = _declare(weaver, point)
    ran: list[str] = []

    @weaver.around(point)
    def wrap(ctx: Any, proceed: Callable[..., Any]) -> Any:
        ran.append("enter")
        result = proceed()
        ran.append(f"exit:{result}")
        return result * 10

    assert add(1, y=2) == 30
    assert ran == ["enter", "exit:3"]
    assert len(add.calls) == 1


def test_around_proceeds_with_new_arguments(weaver: ah.Weaver, point: str) -> None:
    """proceed(*args, **kwargs) calls the rest of the chain with those arguments instead."""
    add = _declare(weaver, point)

    @weaver.around(point)
    def wrap(ctx: Any, proceed: Callable[..., Any]) -> Any:
        return proceed(100, y=5)

    assert add(1, y=2) == 105
    assert add.calls == [((100,), {"y": 5})]


def test_around_advice_nest(weaver: ah.Weaver, point: str) -> None:
    """Several around advice nest: each proceed() enters the next, the innermost the target."""
    add = _declare(weaver, point)
    ran: list[str] = []

    def make(label: str) -> Callable[..., Any]:
        def wrap(ctx: Any, proceed: Callable[..., Any]) -> Any:
            ran.append(f"{label}>")
            result = proceed(ctx.args[0] + 1)
            ran.append(f"<{label}")
            return result

        return wrap

    weaver.around(point, name="outer")(make("outer"))
    weaver.around(point, name="inner")(make("inner"))
    assert add(0) == 3  # two increments, then + y
    assert ran == ["outer>", "inner>", "<inner", "<outer"]


def test_around_exception_reaches_on_error(weaver: ah.Weaver, point: str) -> None:
    """An exception raised through around advice is handled by on_error advice."""
    add = _declare(weaver, point, fail=ValueError("inner"))
    weaver.around(point)(lambda ctx, proceed: proceed())
    weaver.on_error(point)(lambda ctx: ctx.recover(type(ctx.exception).__name__))
    assert add(1) == "ValueError"


# -- ctx.data ----------------------------------------------------------------------------------


def test_ctx_data_is_shared_within_a_call_and_fresh_per_call(weaver: ah.Weaver, point: str) -> None:
    """ctx.data is one dict for all advice of a call, and a new empty dict for the next call."""
    add = _declare(weaver, point)
    seen: list[dict[str, Any]] = []

    @weaver.before(point)
    def start(ctx: Any) -> None:
        seen.append(dict(ctx.data))
        ctx.data["started"] = ctx.args[0]

    @weaver.around(point)
    def wrap(ctx: Any, proceed: Callable[..., Any]) -> Any:
        ctx.data["around"] = True
        return proceed()

    @weaver.after(point)
    def finish(ctx: Any) -> None:
        seen.append(dict(ctx.data))

    add(1)
    add(2)
    assert seen == [
        {},
        {"started": 1, "around": True},
        {},
        {"started": 2, "around": True},
    ]


# -- async join points -------------------------------------------------------------------------


def _declare_async(weaver: ah.Weaver, name: str, fail: BaseException | None = None) -> Any:
    calls: list[tuple[Any, ...]] = []

    @weaver.joinpoint(name)
    async def fetch(x: int, y: int = 1) -> int:
        await asyncio.sleep(0)
        calls.append((x, y))
        if fail is not None:
            raise fail
        return x + y

    fetch.calls = calls
    return fetch


def test_async_advice_is_awaited_on_async_joinpoints(weaver: ah.Weaver, point: str) -> None:
    """async before/around/after advice is awaited, in order, around an async target."""
    fetch = _declare_async(weaver, point)
    ran: list[str] = []

    @weaver.before(point)
    async def before(ctx: Any) -> None:
        await asyncio.sleep(0)
        ran.append("before")
        ctx.args[0] += 1

    @weaver.around(point)
    async def around(ctx: Any, proceed: Callable[..., Any]) -> Any:
        ran.append("around>")
        result = await proceed()
        ran.append("<around")
        return result * 10

    @weaver.after(point)
    async def after(ctx: Any) -> None:
        await asyncio.sleep(0)
        ran.append("after")
        ctx.result += 1

    assert asyncio.run(fetch(1)) == 31
    assert ran == ["before", "around>", "<around", "after"]


def test_sync_advice_works_on_async_joinpoints(weaver: ah.Weaver, point: str) -> None:
    """Plain (sync) advice runs on async join points too, around included."""
    fetch = _declare_async(weaver, point)
    weaver.before(point)(lambda ctx: ctx.kwargs.update(y=10))
    weaver.around(point)(lambda ctx, proceed: proceed())
    weaver.after(point)(lambda ctx: setattr(ctx, "result", ctx.result * 2))
    assert asyncio.run(fetch(1)) == 22


def test_async_on_error_recovers_async_target(weaver: ah.Weaver, point: str) -> None:
    """async on_error advice is awaited and can recover an async target's exception."""
    fetch = _declare_async(weaver, point, fail=TimeoutError("slow"))

    @weaver.on_error(point)
    async def fallback(ctx: Any) -> None:
        await asyncio.sleep(0)
        ctx.recover(f"recovered from {type(ctx.exception).__name__}")

    assert asyncio.run(fetch(1)) == "recovered from TimeoutError"


def test_async_target_exception_propagates_unchanged(weaver: ah.Weaver, point: str) -> None:
    """An async target's exception propagates as the same object when nothing recovers."""
    original = ConnectionError("down")
    fetch = _declare_async(weaver, point, fail=original)
    weaver.on_error(point)(lambda ctx: None)
    with pytest.raises(ConnectionError, match="down") as info:
        asyncio.run(fetch(1))
    assert info.value is original


def test_async_skip_and_proceed_with_new_arguments(weaver: ah.Weaver, point: str) -> None:
    """On async join points, proceed(new args) and ctx.skip(value) behave as on sync ones."""
    fetch = _declare_async(weaver, point)

    @weaver.around(point)
    async def wrap(ctx: Any, proceed: Callable[..., Any]) -> Any:
        return await proceed(40, y=2)

    assert asyncio.run(fetch(1)) == 42
    assert fetch.calls == [(40, 2)]
    weaver.before(point)(lambda ctx: ctx.skip("skipped"))
    assert asyncio.run(fetch(1)) == "skipped"
    assert fetch.calls == [(40, 2)]


# -- the Advice object: callable, its own handle -----------------------------------------------


def test_decorator_returns_a_callable_advice(weaver: ah.Weaver, point: str) -> None:
    """A module-level advice decorator registers at once and returns a callable Advice."""

    def log_call(ctx: Any) -> str:
        """Log a call."""
        return f"called with {ctx}"

    advice = weaver.before(point)(log_call)
    assert isinstance(advice, ah.Advice)
    assert advice in weaver.registered
    assert advice.active
    assert advice("ctx") == "called with ctx"
    assert advice.__name__ == "log_call"
    assert advice.__doc__ == "Log a call."
    assert advice.__wrapped__ is log_call


def test_advice_takes_type_parameters_for_annotations() -> None:
    """Advice[[CallContext], None] is a valid annotation at run time (the decorators'
    result as type checkers see it), and subscripting it changes nothing about Advice."""
    alias = ah.Advice[[ah.CallContext], None]
    assert alias.__origin__ is ah.Advice
    assert isinstance(ah.before("test_advice.generic")(lambda ctx: None), ah.Advice)
    ah.default_weaver.clear()


class Recorder:
    """Collects the arguments of each call it sees."""

    def __init__(self) -> None:
        self.seen: list[list[Any]] = []

    def record(self, ctx: Any) -> None:
        self.seen.append(list(ctx.args))


def test_bound_method_and_builtin_register_at_once(weaver: ah.Weaver, point: str) -> None:
    """A bound method or a builtin given to an advice decorator is registered, not just marked."""
    add = _declare(weaver, point)
    recorder = Recorder()
    results: list[Any] = []
    from_method = weaver.before(point)(recorder.record)
    from_builtin = weaver.after(point)(results.append)
    assert isinstance(from_method, ah.Advice)
    assert isinstance(from_builtin, ah.Advice)
    add(4)
    assert recorder.seen == [[4]]
    assert len(results) == 1


def test_advice_remove_is_idempotent(weaver: ah.Weaver, point: str) -> None:
    """advice.remove() unregisters it; removing again does nothing."""
    add = _declare(weaver, point)
    ran: list[int] = []
    advice = weaver.before(point)(lambda ctx: ran.append(1))
    add(1)
    advice.remove()
    advice.remove()
    add(1)
    assert ran == [1]
    assert not advice.active
    assert advice not in weaver.registered


def test_advice_is_a_context_manager(weaver: ah.Weaver, point: str) -> None:
    """`with advice:` keeps it registered for the block and removes it afterwards."""
    add = _declare(weaver, point)
    ran: list[int] = []
    with weaver.after(point)(lambda ctx: ran.append(ctx.result)) as advice:
        add(1)
    add(5)
    assert ran == [2]
    assert not advice.active


def test_default_weaver_decorators(point: str) -> None:
    """aspecthook.before & co. register on the default weaver and return removable Advice."""
    ran: list[str] = []

    @ah.joinpoint(point)
    def work() -> str:
        return "done"

    @ah.before(point)
    def first(ctx: Any) -> None:
        ran.append("before")

    @ah.after(point)
    def then(ctx: Any) -> None:
        ran.append("after")

    assert work() == "done"
    assert ran == ["before", "after"]
    assert first in ah.default_weaver.registered
    first.remove()
    then.remove()
    assert work() == "done"
    assert ran == ["before", "after"]


def test_advice_registered_before_the_joinpoint_exists(weaver: ah.Weaver, point: str) -> None:
    """Advice for a name not declared yet applies once a join point with that name appears."""
    ran: list[int] = []
    weaver.before(point)(lambda ctx: ran.append(ctx.args[0]))
    add = _declare(weaver, point)
    add(7)
    assert ran == [7]


def test_advice_registered_for_a_glob_reaches_each_match(weaver: ah.Weaver, point: str) -> None:
    """A glob pointcut reaches every matching join point, declared before or after it."""
    first = _declare(weaver, f"{point}.one")
    ran: list[str] = []
    weaver.before(f"{point}.*")(lambda ctx: ran.append(ctx.joinpoint.name))
    second = _declare(weaver, f"{point}.two")
    first(1)
    second(1)
    assert ran == [f"{point}.one", f"{point}.two"]


def test_module_level_decorator_without_pointcut_is_refused(weaver: ah.Weaver) -> None:
    """@before() without a pointcut outside an Aspect body says to give a pointcut."""

    def advice(ctx: Any) -> None:
        pass

    with pytest.raises(AspectDefinitionError, match=r"give a pointcut"):
        weaver.before()(advice)


def test_registering_the_same_advice_twice_is_refused(weaver: ah.Weaver, point: str) -> None:
    """An Advice registered already cannot be added again until removed."""
    advice = weaver.before(point)(lambda ctx: None)
    with pytest.raises(AspectDefinitionError, match="registered already"):
        weaver.add(advice)


def test_stacked_decorators_are_removed_together(weaver: ah.Weaver, point: str) -> None:
    """@before('a') over @before('b') on one function: its handle removes both registrations."""
    first = _declare(weaver, f"{point}.a")
    second = _declare(weaver, f"{point}.b")
    ran: list[str] = []

    @weaver.before(f"{point}.a")
    @weaver.after(f"{point}.b")
    def note(ctx: Any) -> None:
        ran.append(ctx.joinpoint.name)

    first(1)
    second(1)
    assert ran == [f"{point}.a", f"{point}.b"]
    assert note.active
    note.remove()
    assert not note.active
    first(1)
    second(1)
    assert ran == [f"{point}.a", f"{point}.b"]
    assert weaver.registered == []


def test_clear_removes_stacked_decorators(weaver: ah.Weaver, point: str) -> None:
    """weaver.clear() removes both registrations of stacked decorators, and the advice
    says it is no longer active."""

    @weaver.before(f"{point}.a")
    @weaver.before(f"{point}.b")
    @weaver.before(f"{point}.c")
    def note(ctx: Any) -> None:
        pass

    assert len(weaver.registered) == 3
    weaver.clear()
    assert weaver.registered == []
    assert not note.active


def test_removed_stacked_decorators_are_let_go(weaver: ah.Weaver, point: str) -> None:
    """Once stacked decorators are removed, the weaver keeps no handle of theirs, so it
    keeps neither the advice nor its function alive (as for one decorator)."""

    def note(ctx: Any) -> None:
        pass

    advice = weaver.after(f"{point}.a")(weaver.before(f"{point}.b")(note))
    alive = weakref.ref(note)
    advice.remove()
    del note, advice
    gc.collect()
    assert weaver._handles == []
    assert alive() is None


def test_stacking_decorators_of_two_weavers_is_refused(weaver: ah.Weaver, point: str) -> None:
    """Advice of one weaver cannot be stacked on advice of another: one handle could not
    remove both; the message says to give one pointcut instead."""
    other = ah.Weaver("other")
    try:
        inner = other.before(f"{point}.b")(lambda ctx: None)
        with pytest.raises(AspectDefinitionError, match=r"Name\('a'\) \| Name\('b'\)"):
            weaver.before(f"{point}.a")(inner)
        assert weaver.registered == []
        assert inner.active
    finally:
        other.close()


# -- options: every / once / when / rank -------------------------------------------------------


def test_every_runs_on_every_nth_call(weaver: ah.Weaver, point: str) -> None:
    """every=n runs the advice on the n-th, 2n-th ... matching call."""
    add = _declare(weaver, point)
    ran: list[int] = []
    weaver.before(point, every=3)(lambda ctx: ran.append(ctx.args[0]))
    for i in range(1, 8):
        add(i)
    assert ran == [3, 6]


@pytest.mark.parametrize("kind", ["before", "after"])
def test_window_runs_on_the_calls_ending_at_every_nth(
    weaver: ah.Weaver, point: str, kind: str
) -> None:
    """every=5, window=2 runs on calls 4, 5, 9, 10, ... (the 2 calls ending at each 5th)."""
    add = _declare(weaver, point)
    ran: list[int] = []
    getattr(weaver, kind)(point, every=5, window=2)(lambda ctx: ran.append(ctx.args[0]))
    for i in range(1, 12):
        add(i)
    assert ran == [4, 5, 9, 10]


def test_window_is_shown_with_every_in_describe(weaver: ah.Weaver, point: str) -> None:
    """describe() lists window= beside every=; a window of 1 is every= alone."""
    _declare(weaver, point)
    weaver.after(point, every=5, window=2, name="smooth")(lambda ctx: None)
    weaver.after(point, every=5, window=1, name="plain")(lambda ctx: None)
    filters = {row.advice: row.filters for row in weaver.describe(point)}
    assert filters == {"smooth": "every=5, window=2", "plain": "every=5"}


def test_every_counts_each_joinpoint_separately(weaver: ah.Weaver, point: str) -> None:
    """every= counts calls per join point, not across all join points of a glob."""
    one = _declare(weaver, f"{point}.one")
    two = _declare(weaver, f"{point}.two")
    ran: list[str] = []
    weaver.before(f"{point}.*", every=2)(lambda ctx: ran.append(ctx.joinpoint.name))
    one(1)
    two(1)
    one(1)
    two(1)
    assert ran == [f"{point}.one", f"{point}.two"]


def test_once_runs_only_on_the_first_call(weaver: ah.Weaver, point: str) -> None:
    """once=True runs the advice on the first matching call only."""
    add = _declare(weaver, point)
    ran: list[int] = []
    weaver.after(point, once=True)(lambda ctx: ran.append(ctx.result))
    add(1)
    add(2)
    add(3)
    assert ran == [2]


def test_once_runs_on_the_first_call_the_other_filters_let_by_at_each_join_point(
    weaver: ah.Weaver, point: str
) -> None:
    """once=True with every= and when= runs on the first call both let by, per join point
    (as documented): when= lets the odd calls by, every=3 counts those (calls 1, 3, 5),
    so the advice runs on each join point's 5th call, and never again."""
    one, two = _declare(weaver, f"{point}.one"), _declare(weaver, f"{point}.two")
    ran: list[tuple[str, int]] = []
    weaver.before(f"{point}.*", every=3, once=True, when=lambda ctx: ctx.args[0] % 2 == 1)(
        lambda ctx: ran.append((ctx.joinpoint.name, ctx.args[0]))
    )
    for i in range(1, 12):
        one(i)
    for i in range(1, 5):
        two(i)
    assert ran == [(f"{point}.one", 5)]
    two(5)
    assert ran == [(f"{point}.one", 5), (f"{point}.two", 5)]


def test_when_filters_calls_by_predicate(weaver: ah.Weaver, point: str) -> None:
    """when=predicate(ctx) runs the advice only on calls where it returns true."""
    add = _declare(weaver, point)
    ran: list[int] = []
    weaver.before(point, when=lambda ctx: ctx.args[0] % 2 == 0)(lambda ctx: ran.append(ctx.args[0]))
    for i in range(5):
        add(i)
    assert ran == [0, 2, 4]


def test_an_async_when_predicate_is_refused(weaver: ah.Weaver, point: str) -> None:
    """when= is tested synchronously, before the advice runs: a coroutine function there
    (whose coroutine would count as true on every call) is refused at registration."""

    async def ready(ctx: Any) -> bool:
        return False

    with pytest.raises(InvalidOptionError, match=r"when=.*coroutine function.*plain") as info:
        weaver.before(point, when=ready)(lambda ctx: None)
    assert info.value.option == "when"
    assert info.value.value is ready
    assert weaver.registered == []


def test_filtered_around_still_runs_the_target(weaver: ah.Weaver, point: str) -> None:
    """Around advice filtered out of a call is bypassed; the target still runs."""
    add = _declare(weaver, point)
    weaver.around(point, when=lambda ctx: ctx.args[0] > 10)(lambda ctx, proceed: -proceed())
    assert add(1) == 2
    assert add(20) == -21
    assert len(add.calls) == 2


@pytest.mark.parametrize(
    ("env", "advice_rank", "runs"),
    [("0", 0, True), ("1", 0, False), ("1", 1, True), (None, 0, True), (None, 1, False)],
)
def test_rank_runs_only_on_that_process_rank(
    weaver: ah.Weaver,
    point: str,
    monkeypatch: pytest.MonkeyPatch,
    env: str | None,
    advice_rank: int,
    runs: bool,
) -> None:
    """rank=r runs the advice only when this process's rank ($RANK, default 0) is r."""
    if env is None:
        monkeypatch.delenv("RANK", raising=False)
    else:
        monkeypatch.setenv("RANK", env)
    add = _declare(weaver, point)
    ran: list[int] = []
    weaver.before(point, rank=advice_rank)(lambda ctx: ran.append(1))
    add(1)
    assert ran == ([1] if runs else [])


def test_rank_is_read_at_call_time(
    weaver: ah.Weaver, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rank filter looks at the rank when the call happens, not at registration."""
    monkeypatch.setenv("RANK", "3")
    add = _declare(weaver, point)
    ran: list[int] = []
    weaver.before(point, rank=0)(lambda ctx: ran.append(1))
    add(1)
    monkeypatch.setenv("RANK", "0")
    add(1)
    assert ran == [1]


# -- options: errors= --------------------------------------------------------------------------


def _failing(kind: str) -> Callable[..., Any]:
    if kind == "around":

        def fail_around(ctx: Any, proceed: Callable[..., Any]) -> Any:
            raise RuntimeError("advice failed")

        return fail_around

    def fail(ctx: Any) -> None:
        raise RuntimeError("advice failed")

    return fail


@pytest.mark.parametrize("kind", ["before", "after", "around"])
def test_errors_log_logs_the_failure_and_the_call_continues(
    weaver: ah.Weaver, point: str, kind: str
) -> None:
    """errors='log': the advice's exception is logged via structlog, counted, the call goes on."""
    add = _declare(weaver, point)
    advice = getattr(weaver, kind)(point, errors="log", name="flaky")(_failing(kind))
    with capture_logs() as logs:
        assert add(1) == 2
        assert add(2) == 3
    assert len(add.calls) == 2
    assert advice.failures == 2
    assert [entry["event"] for entry in logs] == ["advice.failed", "advice.failed"]
    entry = logs[0]
    assert entry["log_level"] == "error"
    assert entry["advice"] == "flaky"
    assert entry["joinpoint"] == point
    assert entry["kind"] == kind
    assert entry["exc_info"]


def test_errors_log_on_error_advice_lets_the_original_exception_through(
    weaver: ah.Weaver, point: str
) -> None:
    """A failing on_error advice with errors='log' is logged; the target's exception stands."""
    original = KeyError("k")
    add = _declare(weaver, point, fail=original)
    advice = weaver.on_error(point, errors="log")(_failing("on_error"))
    with capture_logs() as logs, pytest.raises(KeyError, match="k") as info:
        add(1)
    assert info.value is original
    assert advice.failures == 1
    assert logs[0]["event"] == "advice.failed"


def test_errors_log_around_failing_after_proceed_keeps_the_result(
    weaver: ah.Weaver, point: str
) -> None:
    """errors='log' around advice failing after proceed(): the target ran once, result stands."""
    add = _declare(weaver, point)

    @weaver.around(point, errors="log")
    def flaky(ctx: Any, proceed: Callable[..., Any]) -> Any:
        proceed()
        raise RuntimeError("after proceed")

    with capture_logs() as logs:
        assert add(1) == 2
    assert len(add.calls) == 1
    assert flaky.failures == 1
    assert len(logs) == 1


def test_errors_log_does_not_swallow_the_targets_exception(weaver: ah.Weaver, point: str) -> None:
    """errors='log' around advice: an exception of the target itself still propagates."""
    add = _declare(weaver, point, fail=ValueError("target"))
    advice = weaver.around(point, errors="log")(lambda ctx, proceed: proceed())
    with capture_logs() as logs, pytest.raises(ValueError, match="target"):
        add(1)
    assert logs == []
    assert advice.failures == 0


def test_errors_raise_propagates_the_advice_failure(weaver: ah.Weaver, point: str) -> None:
    """errors='raise' (the default) propagates a failing advice's exception to the caller."""
    add = _declare(weaver, point)
    weaver.after(point, errors="raise")(_failing("after"))
    with pytest.raises(RuntimeError, match="advice failed"):
        add(1)


def test_async_errors_log(weaver: ah.Weaver, point: str) -> None:
    """errors='log' works for async advice on async join points."""
    fetch = _declare_async(weaver, point)

    @weaver.before(point, errors="log")
    async def flaky(ctx: Any) -> None:
        raise RuntimeError("async advice failed")

    with capture_logs() as logs:
        assert asyncio.run(fetch(1)) == 2
    assert flaky.failures == 1
    assert logs[0]["event"] == "advice.failed"


class _AsyncCall:
    """An advice object whose ``__call__`` is a coroutine function."""

    def __init__(self, stage: str) -> None:
        self.stage = stage

    async def __call__(self, ctx: Any) -> None:
        raise RuntimeError(f"{self.stage} failed")


def _behind_a_plain_decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A synchronous wrapper (functools.wraps) that returns ``fn``'s coroutine."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return call


async def _failing_async(ctx: Any) -> None:
    raise RuntimeError("decorated failed")


async def _failing_async_around(ctx: Any, proceed: Any) -> Any:
    await proceed()
    raise RuntimeError("decorated around failed")


@pytest.mark.parametrize("kind", ["before", "after"])
@pytest.mark.parametrize("make", [_AsyncCall, lambda _: _behind_a_plain_decorator(_failing_async)])
def test_errors_log_covers_advice_that_returns_a_coroutine(
    weaver: ah.Weaver, point: str, kind: str, make: Callable[[str], Any]
) -> None:
    """At an async join point, errors='log' also covers advice that is not an async def
    but returns a coroutine (an object with an async __call__, an async function behind
    a plain decorator): its failure is logged and the call goes on."""
    fetch = _declare_async(weaver, point)
    advice = getattr(weaver, kind)(point, errors="log")(make(kind))
    with capture_logs() as logs:
        assert asyncio.run(fetch(1)) == 2
    assert advice.failures == 1
    assert [e["event"] for e in logs] == ["advice.failed"]


def test_errors_log_covers_around_advice_that_returns_a_coroutine(
    weaver: ah.Weaver, point: str
) -> None:
    """A sync around advice returning a coroutine that fails after proceed: the target ran
    once and its result stands."""
    fetch = _declare_async(weaver, point)
    advice = weaver.around(point, errors="log")(_behind_a_plain_decorator(_failing_async_around))
    with capture_logs() as logs:
        assert asyncio.run(fetch(1)) == 2
    assert fetch.calls == [(1, 1)]
    assert advice.failures == 1
    assert [e["event"] for e in logs] == ["advice.failed"]


def test_errors_log_around_failing_before_proceed_in_its_coroutine_runs_the_target_once(
    weaver: ah.Weaver, point: str
) -> None:
    """A sync around advice returning a coroutine that fails before proceeding, inside
    another around advice: the guard proceeds for it from its own place (it used to
    re-enter the chain at the advice itself, until RecursionError)."""
    calls: list[int] = []

    @weaver.joinpoint(point)
    @_behind_a_plain_decorator
    async def fetch(x: int) -> int:
        calls.append(x)
        return x * 2

    weaver.around(point, priority="HIGH")(lambda ctx, proceed: proceed())

    async def fails_first(ctx: Any, proceed: Any) -> Any:
        raise RuntimeError("advice failed before proceeding")

    advice = weaver.around(point, errors="log")(_behind_a_plain_decorator(fails_first))
    with capture_logs():
        assert asyncio.run(fetch(21)) == 42
    assert calls == [21]
    assert advice.failures == 1


def test_an_object_with_an_async_call_is_async_advice(weaver: ah.Weaver, point: str) -> None:
    """An advice object whose __call__ is async is async advice: at a sync join point it is
    left out and shown as failed in describe(), as an async def is."""
    add = _declare(weaver, point)
    weaver.before(point)(_AsyncCall("before"))
    assert add(1) == 2
    [row] = [r for r in weaver.describe(point) if r.stage == "before"]
    assert row.status == "failed"


# -- options: name= ----------------------------------------------------------------------------


def test_name_option_names_the_advice(weaver: ah.Weaver, point: str) -> None:
    """name= names the advice for introspection; the default is the function's name."""
    add = _declare(weaver, point)
    named = weaver.before(point, name="warmup")(lambda ctx: None)

    def plain(ctx: Any) -> None:
        pass

    unnamed = weaver.before(point)(plain)
    assert named.name == "warmup"
    assert unnamed.name == "plain"
    assert weaver.describe(point).advice_names(point, "before") == ["warmup", "plain"]
    assert add(1) == 2


# -- signatures are checked at registration ----------------------------------------------------


def _no_args() -> None:
    pass


def _two_required(ctx: Any, extra: Any) -> None:
    pass


def _keyword_only(*, ctx: Any) -> None:
    pass


def _only_ctx(ctx: Any) -> None:
    pass


@pytest.mark.parametrize(
    ("kind", "fn"),
    [
        ("before", _no_args),
        ("after", _two_required),
        ("on_error", _keyword_only),
        ("around", _only_ctx),
        ("around", _no_args),
    ],
)
def test_bad_signature_is_refused_at_registration(
    weaver: ah.Weaver, point: str, kind: str, fn: Callable[..., Any]
) -> None:
    """Advice whose signature cannot take ctx (ctx, proceed) is refused, printing it."""
    expected = "(ctx, proceed)" if kind == "around" else "(ctx)"
    shown = f"{fn.__name__}{inspect.signature(fn)}"
    with pytest.raises(AdviceSignatureError, match=re.escape(shown)) as info:
        getattr(weaver, kind)(point)(fn)
    assert re.escape(expected) in re.escape(str(info.value))
    assert info.value.expected == expected
    assert weaver.registered == []


def test_bad_signature_is_refused_before_any_call(weaver: ah.Weaver, point: str) -> None:
    """The signature error comes at registration even when no join point exists yet."""
    with pytest.raises(AdviceSignatureError, match=r"define it as def _no_args\(ctx\)"):
        weaver.after(f"{point}.never_declared")(_no_args)


def test_bad_method_signature_suggests_a_def_with_self_or_cls(
    weaver: ah.Weaver, point: str
) -> None:
    """An aspect's method that cannot take ctx is told to take (self, ctx), or (cls, ctx)
    for a classmethod: the signature checked is the bound one, without self or cls."""
    before, around = f"before_{point.replace('.', '_')}", f"around_{point.replace('.', '_')}"

    def no_ctx(self: Any) -> None: ...

    def no_proceed(self: Any, ctx: ah.CallContext) -> None: ...

    def by_class(cls: type) -> None: ...

    for attrs, fix in [
        ({before: no_ctx}, "def no_ctx(self, ctx)"),
        ({around: no_proceed}, "def no_proceed(self, ctx, proceed)"),
        ({before: classmethod(by_class)}, "def by_class(cls, ctx)"),
    ]:
        aspect = type("Probe", (ah.Aspect,), attrs)()
        with pytest.raises(AdviceSignatureError, match=re.escape(f"define it as {fix}")):
            weaver.register(aspect)
    assert weaver.registered == []


def test_non_callable_advice_is_refused(weaver: ah.Weaver, point: str) -> None:
    """Something that is not callable cannot be advice."""
    with pytest.raises(AdviceSignatureError, match="must be callable"):
        weaver.before(point)(42)


@pytest.mark.parametrize(
    "fn",
    [
        lambda ctx, extra=None: None,
        lambda *args: None,
        lambda ctx, *rest, **options: None,
    ],
    ids=["default", "varargs", "extras"],
)
def test_compatible_signatures_are_accepted(
    weaver: ah.Weaver, point: str, fn: Callable[..., Any]
) -> None:
    """Any signature that can be called as fn(ctx) is accepted for before advice."""
    add = _declare(weaver, point)
    weaver.before(point)(fn)
    assert add(1) == 2


# -- bad option values -------------------------------------------------------------------------


@pytest.mark.parametrize("once", ["yes", "no", 1, None])
def test_once_that_is_not_a_bool_is_refused(weaver: ah.Weaver, point: str, once: Any) -> None:
    """``once='no'`` ran the advice once (a non-empty string is true); only a bool is taken."""
    with pytest.raises(InvalidOptionError, match=rf"once={once!r} is not a bool: give once=True"):
        weaver.before(point, once=once)(lambda ctx: None)


def test_a_window_longer_than_every_is_refused(weaver: ah.Weaver, point: str) -> None:
    """window= must be from 1 to every=; the message says so."""
    for window in (0, 4, 1.5):
        with pytest.raises(InvalidOptionError, match=r"from 1 to every=3"):
            weaver.before(point, every=3, window=window)(lambda ctx: None)
    assert weaver.registered == []


@pytest.mark.parametrize(
    ("option", "value", "match"),
    [
        ("every", 0, "positive int"),
        ("every", -3, "positive int"),
        ("every", 1.5, "positive int"),
        ("every", True, "positive int"),
        ("every", "10", "positive int"),
        ("window", 2, "needs every=n"),
        ("rank", -1, "int >= 0"),
        ("rank", "0", "int >= 0"),
        ("rank", False, "int >= 0"),
        ("errors", "ignore", "errors='raise'.*errors='log'"),
        ("errors", None, "not a policy"),
        ("when", 5, "not callable"),
        ("order_after", 5, "tuple, list or set of aspect/advice names"),
        ("order_before", [1], "tuple, list or set of aspect/advice names"),
        ("name", 3, "is not a string"),
        ("name", ("warmup",), "is not a string"),
        ("priority_level", 1, r"unknown option.*valid options are"),
    ],
)
def test_bad_option_values_are_refused(
    weaver: ah.Weaver, point: str, option: str, value: object, match: str
) -> None:
    """A bad option value raises InvalidOptionError naming the option and saying what to give."""
    with pytest.raises(InvalidOptionError, match=match) as info:
        weaver.before(point, **{option: value})(lambda ctx: None)
    assert info.value.option == option
    assert info.value.value == value
    assert weaver.registered == []


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 3),
    st.integers(0, 3),
    st.booleans(),
    st.integers(0, 2),
    st.integers(0, 2),
    st.booleans(),
    st.integers(1, 2),
)
def test_the_quick_signature_check_never_accepts_what_inspect_refuses(
    positional: int,
    defaults: int,
    varargs: bool,
    kwonly: int,
    kwonly_defaults: int,
    as_method: bool,
    arity: int,
) -> None:
    """The code-object check used at registration agrees with ``inspect`` whenever it says
    yes (when unsure it defers to ``inspect``), for functions and bound methods."""
    from aspecthook._advice_checks import _takes_positional

    defaults = min(defaults, positional)
    kwonly_defaults = min(kwonly_defaults, kwonly)
    params = [f"p{i}" + ("=0" if i >= positional - defaults else "") for i in range(positional)]
    if as_method:
        params.insert(0, "self")
    if varargs:
        params.append("*args")
    elif kwonly:
        params.append("*")
    params += [f"k{i}" + ("=0" if i < kwonly_defaults else "") for i in range(kwonly)]
    namespace: dict[str, Any] = {}
    exec(f"def fn({', '.join(params)}): pass", namespace)
    fn = namespace["fn"]
    if as_method:
        fn = types.MethodType(fn, object())
    try:
        inspect.signature(fn).bind(*range(arity))
        binds = True
    except TypeError:
        binds = False
    quick = _takes_positional(fn, arity)
    assert not quick or binds
    assert quick == binds  # exact for plain functions and methods


# -- review regressions: proceed's arguments, once with every, errors='log' edges ----------


def test_proceed_with_new_arguments_changes_only_that_nested_call(weaver: ah.Weaver) -> None:
    """After ``proceed(other args)`` raised, a plain ``proceed()`` (a fallback, a retry)
    runs with the call's own arguments; outer advice sees them too."""
    seen: list[tuple[Any, ...]] = []

    @weaver.joinpoint("review.render")
    def render(text: str, fast: bool = False) -> str:
        seen.append((text, fast))
        if fast:
            raise NotImplementedError("no fast path")
        return f"slow {text}"

    @weaver.around("review.render", priority="HIGH")
    def outer(ctx: ah.CallContext, proceed: ah.Proceed) -> Any:
        result = proceed()
        seen.append(("outer sees", ctx.args, ctx.kwargs))
        return result

    @weaver.around("review.render")
    def fast_first(ctx: ah.CallContext, proceed: ah.Proceed) -> Any:
        try:
            return proceed(*ctx.args, fast=True)
        except NotImplementedError:
            return proceed()

    assert render("hi") == "slow hi"
    assert seen == [("hi", True), ("hi", False), ("outer sees", ["hi"], {})]


def test_async_proceed_with_new_arguments_changes_only_that_nested_call(
    weaver: ah.Weaver,
) -> None:
    """The same for an async join point."""

    @weaver.joinpoint("review.arender")
    async def arender(text: str, fast: bool = False) -> str:
        if fast:
            raise NotImplementedError("no fast path")
        return f"slow {text}"

    @weaver.around("review.arender")
    async def fast_first(ctx: ah.CallContext, proceed: Any) -> Any:
        try:
            return await proceed(*ctx.args, fast=True)
        except NotImplementedError:
            return await proceed()

    assert asyncio.run(arender("hi")) == "slow hi"


def test_async_proceed_branches_running_concurrently_each_keep_their_arguments(
    weaver: ah.Weaver, point: str
) -> None:
    """``gather(proceed('a'), proceed('b'))``: inner advice in each branch sees its own
    arguments across an await, the call's own are as they were afterwards, and ``ctx.data``
    is shared (the arguments used to be swapped on the shared context and mixed up)."""
    seen: list[Any] = []

    @weaver.joinpoint(point)
    async def get(host: str) -> str:
        await asyncio.sleep(0)
        return host

    @weaver.around(point)
    async def hedge(ctx: Any, proceed: Callable[..., Any]) -> Any:
        results = await asyncio.gather(proceed("a"), proceed("b"))
        seen.append(("hedge", ctx.args))
        return results

    @weaver.around(point, priority=60)
    async def inner(ctx: Any, proceed: Callable[..., Any]) -> Any:
        before = list(ctx.args)
        result = await proceed()
        seen.append(("inner", before, ctx.args))
        ctx.data[result] = True
        return result

    weaver.after(point)(lambda ctx: seen.append(("after", ctx.args, sorted(ctx.data))))
    assert asyncio.run(get("primary")) == ["a", "b"]
    assert seen == [
        ("inner", ["a"], ["a"]),
        ("inner", ["b"], ["b"]),
        ("hedge", ["primary"]),
        ("after", ["primary"], ["a", "b"]),
    ]


def test_ctx_proceed_at_an_async_joinpoint_says_to_use_the_proceed_argument(
    weaver: ah.Weaver, point: str
) -> None:
    """At an async join point each around advice has its own ``proceed``; ``ctx.proceed()``
    raises ``UnsupportedAdviceError`` saying so (it used to be an AttributeError)."""
    fetch = _declare_async(weaver, point)

    @weaver.around(point)
    async def wrap(ctx: Any, proceed: Callable[..., Any]) -> Any:
        assert ctx.deferred(proceed) is proceed  # it works at any time already
        return await ctx.proceed()

    with pytest.raises(UnsupportedAdviceError, match="call the proceed your around advice"):
        asyncio.run(fetch(1))
    assert fetch.calls == []


@pytest.mark.parametrize("kind", ["before", "after", "on_error"])
def test_ctx_proceed_outside_around_advice_says_it_is_for_around_advice(
    weaver: ah.Weaver, point: str, kind: str
) -> None:
    """``ctx.proceed()`` from before, after or error advice raises
    ``UnsupportedAdviceError`` naming the join point and saying what to use instead (it
    used to be an AttributeError about a private slot)."""
    add = _declare(weaver, point, fail=ValueError("boom") if kind == "on_error" else None)
    getattr(weaver, kind)(point)(lambda ctx: ctx.proceed())

    with pytest.raises(UnsupportedAdviceError, match=r"only around advice.*ctx\.skip") as info:
        add(1)
    assert (info.value.kind, info.value.target) == ("proceed", point)


def _plainly_async(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A plain decorator over an async function: a synchronous callable returning a
    coroutine."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


def test_deferred_proceed_runs_the_rest_of_the_chain_after_the_advice_returned(
    weaver: ah.Weaver, point: str
) -> None:
    """``ctx.deferred(proceed)`` called from a coroutine the around advice returned runs the
    inner advice and the target once per call, from this advice's place and with the
    arguments it was given; the context is left as it was."""
    targets: list[str] = []
    inner_runs: list[str] = []

    async def fetch(url: str) -> str:
        targets.append(url)
        return url.upper()

    fetch_ = weaver.joinpoint(point)(_plainly_async(fetch))
    weaver.around(point, priority="HIGH")(lambda ctx, proceed: proceed("replaced"))

    @weaver.around(point)
    def twice(ctx: Any, proceed: Callable[..., Any]) -> Any:
        again = ctx.deferred(proceed)

        async def both() -> Any:
            return [await again(), await again(), list(ctx.args)]

        return both()

    weaver.around(point, priority=60)(lambda ctx, proceed: inner_runs.append("inner") or proceed())
    assert asyncio.run(fetch_("u")) == ["REPLACED", "REPLACED", ["u"]]
    assert targets == ["replaced", "replaced"]
    assert inner_runs == ["inner", "inner"]


def test_once_with_every_runs_on_the_first_call_every_lets_through(weaver: ah.Weaver) -> None:
    """``once=True, every=3`` runs on call 3 and never again."""
    ran: list[int] = []

    @weaver.joinpoint("review.once_every")
    def f(i: int) -> int:
        return i

    weaver.before("review.once_every", once=True, every=3)(lambda ctx: ran.append(ctx.args[0]))
    for i in range(1, 10):
        f(i)
    assert ran == [3]


def test_a_failing_when_predicate_is_logged_under_errors_log(weaver: ah.Weaver) -> None:
    """``when=`` is part of the advice: with errors='log' its failure is logged, the advice
    does not run and the call goes on."""
    ran: list[str] = []

    @weaver.joinpoint("review.when_log")
    def f(batch: Any) -> str:
        return "result"

    advice = weaver.before(
        "review.when_log", when=lambda ctx: ctx.kwargs["step"] % 10 == 0, errors="log"
    )(lambda ctx: ran.append("ran"))
    with capture_logs() as logs:
        assert f([1]) == "result"
    assert ran == []
    assert advice.failures == 1
    assert [e["event"] for e in logs] == ["advice.failed"]


def test_an_errors_log_around_keeps_the_targets_own_exception_chain(weaver: ah.Weaver) -> None:
    """When around advice with errors='log' fails while handling the target's exception,
    that exception propagates with the __cause__ and __context__ the target gave it."""

    @weaver.joinpoint("review.cause")
    def load(path: str) -> None:
        try:
            {}[path]
        except KeyError as e:
            raise FileNotFoundError(path) from e

    @weaver.around("review.cause", errors="log")
    def buggy(ctx: ah.CallContext, proceed: ah.Proceed) -> Any:
        try:
            return proceed()
        except FileNotFoundError:
            raise RuntimeError("bug in the advice") from None

    with capture_logs(), pytest.raises(FileNotFoundError) as info:
        load("x")
    assert isinstance(info.value.__cause__, KeyError)
    assert info.value.__suppress_context__
    assert isinstance(info.value.__context__, KeyError)


@pytest.mark.parametrize("kind", ["before", "after", "on_error", "around", "on"])
def test_a_decorator_used_without_its_pointcut_is_refused(kind: str) -> None:
    """``@before`` with no parentheses would take the advice itself for a predicate
    pointcut and never call it: refused, with the fix in the message."""
    decorator = getattr(ah, kind)

    def advice(ctx: Any, proceed: Any = None) -> None: ...

    with pytest.raises(AspectDefinitionError, match=rf"write @{kind}\('train_iter'\)"):
        decorator(advice)


def test_a_predicate_pointcut_taking_the_join_point_is_still_accepted(weaver: ah.Weaver) -> None:
    """Predicates name their parameter anything but ctx/proceed/event."""
    ran: list[str] = []

    @weaver.joinpoint("review.predicate")
    def f() -> None: ...

    weaver.before(lambda jp: jp.name == "review.predicate")(lambda ctx: ran.append("ran"))
    f()
    assert ran == ["ran"]


def test_an_errors_log_around_keeps_the_context_when_called_in_an_except_block(
    weaver: ah.Weaver,
) -> None:
    """Called while the caller handles another exception, the target's exception still
    propagates with the __context__ it had (not the caller's exception)."""

    @weaver.joinpoint("review.context")
    def target() -> None:
        try:
            {}["k"]
        except KeyError:
            raise ValueError("target failed") from None

    @weaver.around("review.context", errors="log")
    def bad(ctx: ah.CallContext, proceed: ah.Proceed) -> Any:
        try:
            return proceed()
        finally:
            raise RuntimeError("advice bug")

    def caller() -> None:
        try:
            raise OSError("the caller is handling this")
        except OSError:
            target()

    with capture_logs(), pytest.raises(ValueError, match="target failed") as info:
        caller()
    assert isinstance(info.value.__context__, KeyError)


def test_lambdas_and_predicate_objects_stay_predicate_pointcuts(weaver: ah.Weaver) -> None:
    """The check for a decorator without its pointcut leaves lambdas and Predicate(fn)
    alone, whatever their parameter is called."""
    seen: list[str] = []

    def is_mine(event: Any) -> bool:
        return bool(event.name.startswith("mine."))

    weaver.on(lambda event: event.name.startswith("mine."))(lambda e: seen.append(e.name))
    weaver.on(ah.Predicate(is_mine))(lambda e: seen.append("predicate " + e.name))
    weaver.emit("mine.thing")
    assert seen == ["mine.thing", "predicate mine.thing"]
    with pytest.raises(AspectDefinitionError, match=r"aspecthook.Predicate\(is_mine\)"):
        weaver.on(is_mine)


def test_advice_at_a_generator_function_sees_the_call_that_makes_the_generator(
    weaver: ah.Weaver,
) -> None:
    """Pins a known limit (docs/known-issues.md): at a generator function, after advice
    gets the generator and an exception raised while it is iterated reaches no on_error
    advice."""
    seen: list[object] = []

    @weaver.joinpoint("pkg.numbers")
    def numbers() -> Any:
        yield 1
        raise ValueError("while iterating")

    weaver.after("pkg.numbers")(lambda ctx: seen.append(ctx.result))
    weaver.on_error("pkg.numbers")(lambda ctx: seen.append(ctx.exception))
    with pytest.raises(ValueError, match="while iterating"):
        list(numbers())
    [result] = seen
    assert isinstance(result, types.GeneratorType)


def test_plain_around_advice_at_an_async_join_point_gets_the_coroutine(
    weaver: ah.Weaver,
) -> None:
    """Pins a known limit (docs/known-issues.md): ``def`` around advice at an async join
    point gets a coroutine from ``proceed()``, so its ``except`` does not see the target's
    exception; ``async def`` around advice does."""
    caught: list[str] = []

    @weaver.joinpoint("pkg.fetch")
    async def fetch() -> None:
        await asyncio.sleep(0)
        raise ValueError("down")

    @weaver.around("pkg.fetch")
    def plain(ctx: ah.CallContext, proceed: ah.Proceed) -> Any:
        try:
            return proceed()
        except ValueError:
            caught.append("plain")
            return None

    with pytest.raises(ValueError, match="down"):
        asyncio.run(fetch())
    assert caught == []
    plain.remove()

    @weaver.around("pkg.fetch")
    async def awaited(ctx: ah.CallContext, proceed: ah.Proceed) -> Any:
        try:
            return await proceed()
        except ValueError:
            caught.append("async")
            return None

    assert asyncio.run(fetch()) is None
    assert caught == ["async"]
