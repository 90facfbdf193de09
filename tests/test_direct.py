"""Published join points: a caller that keeps a join point in a place of its own.

``JoinPoint.publish(sink)`` hands the sink the join point's cheapest callable now and after
every change of its advice: the target itself while it has none, a dispatcher called as
the target is otherwise (``JoinPoint.direct``). The ``Runner`` keeps its loop's join
points this way. Whatever the chain, a call through the published callable must do what a
call through the proxy does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aspecthook as ah
from aspecthook._joinpoint import JoinPoint
from aspecthook.aspects import Timed


def advice(kind: Any, fn: Callable[..., Any], name: str) -> ah.Advice:
    return ah.Advice(kind, fn, ah.Name(name))


class Box:
    """What a sink received last."""

    def __init__(self) -> None:
        self.fn: Callable[..., Any] | None = None
        self.calls = 0

    def __call__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.calls += 1


class Holder:
    def method(self, x: Any, k: int = 0) -> str:
        if x == "boom":
            raise KeyError("boom")
        return f"m{x}{k}"

    def plain(self, x: Any, k: Any) -> str:
        """Plain parameters only: its dispatcher takes them by name, as the target does."""
        return self.method(x, k)


def plain_function(x: Any, k: Any) -> str:
    return Holder().method(x, k)


def declared(weaver: ah.Weaver, name: str) -> tuple[Any, JoinPoint, Box, Holder]:
    holder = Holder()
    proxy: Any = weaver.joinpoint(name)(holder.method)
    jp: JoinPoint = proxy._self_joinpoint
    box = Box()
    jp.publish(box)
    return proxy, jp, box, holder


def test_idle_publishes_the_target_and_advice_publishes_a_dispatcher() -> None:
    weaver = ah.Weaver("direct-idle", local=True)
    _proxy, _jp, box, holder = declared(weaver, "direct.idle")
    assert box.fn == holder.method  # the bound method itself: nothing in between
    seen: list[str] = []
    handle = weaver.add(advice("before", lambda ctx: seen.append("before"), "direct.idle"))
    assert box.fn != holder.method
    assert box.fn is not None
    assert box.fn("x", k=2) == "mx2"
    assert seen == ["before"]
    handle.remove()
    assert box.fn == holder.method
    assert box.fn("y") == "my0"
    assert seen == ["before"]
    weaver.close()


def test_a_dispatcher_sees_the_call_as_the_proxy_does() -> None:
    weaver = ah.Weaver("direct-ctx", local=True)
    proxy, jp, box, holder = declared(weaver, "direct.ctx")
    seen: list[tuple[Any, ...]] = []

    def note(ctx: ah.CallContext) -> None:
        seen.append((ctx.joinpoint, ctx.instance, tuple(ctx.args), dict(ctx.kwargs), ctx.runner))

    weaver.add(advice("before", note, "direct.ctx"))
    assert box.fn is not None
    assert box.fn(1, k=3) == proxy(1, k=3) == "m13"
    assert seen[0] == seen[1] == (jp, holder, (1,), {"k": 3}, None)
    weaver.close()


def test_a_stale_dispatcher_runs_the_current_advice() -> None:
    weaver = ah.Weaver("direct-stale", local=True)
    _, _, box, _ = declared(weaver, "direct.stale")
    seen: list[str] = []
    first = weaver.add(advice("before", lambda ctx: seen.append("a"), "direct.stale"))
    stale = box.fn
    assert stale is not None
    weaver.add(advice("after", lambda ctx: seen.append("b"), "direct.stale"))
    assert stale(1) == "m10"
    assert seen == ["a", "b"]
    first.remove()
    assert stale(2) == "m20"
    assert seen == ["a", "b", "b"]
    weaver.close()


def test_a_published_callable_follows_module_level_advice() -> None:
    weaver = ah.Weaver("direct-global", local=True)
    _, _, box, holder = declared(weaver, "direct.global")
    seen: list[str] = []

    @ah.after("direct.global")
    def note(ctx: ah.CallContext) -> None:
        seen.append(ctx.result)

    try:
        assert box.fn is not None
        assert box.fn(5) == "m50"
        assert seen == ["m50"]
    finally:
        note.remove()
    assert box.fn == holder.method
    weaver.close()


# Every chain shape: unrolled before/after/around, error advice (the general dispatcher),
# layers only (Timed), more advice than the unrolled form takes, skipping, and before
# advice that rewrites the first argument (given by position or by name).
KINDS = ["before", "after", "around", "on_error", "skip", "timed", "rewrite"]


def advice_of(kind: str, i: int, log: list[str], name: str) -> Any:
    if kind == "before":
        return advice("before", lambda ctx: log.append(f"b{i}"), name)
    if kind == "after":
        return advice("after", lambda ctx: log.append(f"a{i}:{ctx.result}"), name)
    if kind == "skip":
        return advice("before", lambda ctx: ctx.skip(f"s{i}"), name)
    if kind == "rewrite":

        def rewrite(ctx: ah.CallContext) -> None:
            if ctx.args:
                ctx.args[0] = f"{ctx.args[0]}{i}"
            else:
                ctx.kwargs["x"] = f"{ctx.kwargs['x']}{i}"

        return advice("before", rewrite, name)
    if kind == "on_error":

        def recover(ctx: ah.CallContext) -> None:
            log.append(f"e{i}")
            ctx.recover(f"r{i}")

        return advice("on_error", recover, name)
    if kind == "around":

        def wrap(ctx: ah.CallContext, proceed: ah.Proceed) -> Any:
            log.append(f"<{i}")
            return f"w{i}({proceed()})"

        return advice("around", wrap, name)
    return Timed(name=f"timed{i}", pointcut=name)


def outcome(fn: Callable[..., Any], log: list[str], x: Any) -> tuple[Any, ...]:
    results: list[Any] = []
    for call in (lambda: fn(x, k=1), lambda: fn(x, 2), lambda: fn(x=x, k=3)):
        log.clear()
        try:
            results.append(call())
        except KeyError as exc:
            results.append(("raised", repr(exc)))
        results.append(list(log))
    return tuple(results)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.sampled_from(KINDS), max_size=9),
    st.sampled_from(["ok", "boom"]),
    st.sampled_from(["method", "plain", "function"]),
)
def test_every_chain_shape_runs_the_same_through_the_published_callable(
    kinds: list[str], x: str, target: str
) -> None:
    weaver = ah.Weaver("direct-shapes", local=True)
    holder = Holder()
    fn = {"method": holder.method, "plain": holder.plain, "function": plain_function}[target]
    proxy: Any = weaver.joinpoint("direct.shapes")(fn)
    box = Box()
    proxy._self_joinpoint.publish(box)
    log: list[str] = []
    for i, kind in enumerate(kinds):
        weaver.register(advice_of(kind, i, log, "direct.shapes"))
    assert box.fn is not None
    assert outcome(box.fn, log, x) == outcome(proxy, log, x)
    weaver.close()
    assert outcome(box.fn, log, x) == outcome(proxy, log, x)


def test_an_async_join_point_publishes_its_proxy_while_advised() -> None:
    weaver = ah.Weaver("direct-async", local=True)

    async def work(x: int) -> int:
        return x

    proxy: Any = weaver.joinpoint("direct.async")(work)
    box = Box()
    proxy._self_joinpoint.publish(box)
    assert box.fn is work
    weaver.add(advice("before", lambda ctx: None, "direct.async"))
    assert box.fn is proxy
    weaver.close()
    assert box.fn is work


@pytest.mark.parametrize("name", ["run", "train_iter"])
def test_ctx_runner_is_filled_or_worked_out(name: str) -> None:
    """On a published runner join point ``ctx.runner`` is set by the dispatcher; elsewhere
    it is worked out on first read, with the same answer."""

    class FakeRunner:
        __aspecthook_runner__ = True

        def step(self) -> Any:
            return self

    weaver = ah.Weaver("direct-runner", local=True)
    fake = FakeRunner()
    proxy: Any = weaver.joinpoint(name)(fake.step)
    box = Box()
    proxy._self_joinpoint.publish(box)
    seen: list[Any] = []
    weaver.add(advice("before", lambda ctx: seen.append(ctx.runner), name))
    assert box.fn is not None
    box.fn()
    proxy()
    assert seen == [fake, fake]
    weaver.close()


def test_a_wrong_call_is_refused_as_the_target_refuses_it() -> None:
    weaver = ah.Weaver("direct-wrong", local=True)
    holder = Holder()
    proxy: Any = weaver.joinpoint("direct.wrong")(holder.plain)
    box = Box()
    proxy._self_joinpoint.publish(box)
    weaver.add(advice("after", lambda ctx: None, "direct.wrong"))
    assert box.fn is not None
    with pytest.raises(TypeError, match=r"plain\(\) missing 1 required positional argument: 'k'"):
        box.fn(1)
    with pytest.raises(TypeError, match=r"plain\(\) got an unexpected keyword argument 'z'"):
        box.fn(1, 2, z=3)
    weaver.close()


def test_a_context_built_directly_works_out_its_runner() -> None:
    """``CallContext(...)`` (as layers and async join points build it) has ``runner`` set
    from the start: the instance if it is a runner, else the run in progress, else None;
    an unset slot still reads as its documented default."""
    from aspecthook._context import CURRENT_RUNNER, CallContext

    class FakeRunner:
        __aspecthook_runner__ = True

    jp: Any = object()
    assert CallContext(jp, print, None, (), {}).runner is None
    fake = FakeRunner()
    assert CallContext(jp, print, fake, (), {}).runner is fake
    token = CURRENT_RUNNER.set(fake)
    try:
        ctx = CallContext(jp, print, object(), (), {})
    finally:
        CURRENT_RUNNER.reset(token)
    assert ctx.runner is fake
    assert ctx.exception is None
    assert not ctx.recovered
    with pytest.raises(AttributeError):
        ctx.no_such_field


class _Strict:
    """An object whose ``__getattr__`` raises something other than AttributeError (as some
    proxy objects do): asking it whether it is a runner must not break its calls."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"no {name} here")

    def double(self, x: int) -> int:
        return 2 * x

    async def double_later(self, x: int) -> int:
        return 2 * x


def test_calls_on_an_object_whose_getattr_raises_are_not_broken_by_the_context() -> None:
    """Layers (``Logged``), async join points and plain advice build their contexts
    without asking the instance anything until advice reads ``ctx.runner``; reading it
    then says None (not a runner) instead of raising."""
    import asyncio

    from structlog.testing import capture_logs

    from aspecthook.aspects import Logged

    weaver = ah.Weaver("direct-strict", local=True)
    strict = _Strict()
    double: Any = weaver.joinpoint("strict.double")(strict.double)
    later: Any = weaver.joinpoint("strict.later")(strict.double_later)
    runners: list[Any] = []
    weaver.register(Logged(pointcut="strict.double"))
    with capture_logs() as logs:
        assert double(3) == 6
    assert [e["joinpoint"] for e in logs] == ["strict.double"]
    weaver.add(advice("before", lambda ctx: None, "strict.later"))
    assert asyncio.run(later(4)) == 8
    weaver.add(advice("before", lambda ctx: runners.append(ctx.runner), "strict.later"))
    assert asyncio.run(later(5)) == 10
    assert runners == [None]
    weaver.close()
