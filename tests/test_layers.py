"""Dispatch layers: around advice that its aspect also runs as a plain wrapper.

When every advice at a join point is a layer (``runs_as_layer``; ``Timed`` and ``Logged``
are), dispatch calls the layers directly instead of building a ``CallContext``. Users must
not be able to tell: order, results, exceptions, filters, stale references and removal
behave as on the general path.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

import pytest

import aspecthook as ah
from aspecthook._advice import runs_as_layer
from aspecthook._joinpoint import JoinPoint, new_context


class Tag(ah.Aspect):
    """Wraps the result as ``'tag(result)'`` and notes which path ran it."""

    def __init__(self, tag: str, paths: list[str], **options: Any) -> None:
        super().__init__(name=tag, **options)
        self.tag = tag
        self.paths = paths

    @ah.around()
    @runs_as_layer("_layer")
    def wrap(self, ctx: ah.CallContext, proceed: ah.Proceed) -> Any:
        self.paths.append(f"{self.tag}:context")
        result = proceed()
        if inspect.isawaitable(result):
            return self._tag_later(result)
        return f"{self.tag}({result})"

    async def _tag_later(self, result: Any) -> str:
        return f"{self.tag}({await result})"

    def _layer(
        self, jp: JoinPoint, inner: Callable[..., Any] | None, guard: tuple[Any, Any] | None
    ) -> Callable[..., Any]:
        chain, general = guard if guard is not None else (None, None)

        def layer(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            if guard is not None and jp._chain is not chain:
                return general(wrapped, instance, args, kwargs)  # type: ignore[misc]
            self.paths.append(f"{self.tag}:layer")
            ctx = new_context(jp, wrapped, instance, args, kwargs)
            self.seen = (ctx.instance, tuple(ctx.args), dict(ctx.kwargs))
            if inner is None:
                return f"{self.tag}({wrapped(*args, **kwargs)})"
            return f"{self.tag}({inner(wrapped, instance, args, kwargs)})"

        return layer


def subject(x: Any, k: int = 0) -> str:
    if x == "boom":
        raise KeyError("boom")
    return f"{x}{k}"


class Holder:
    def method(self, x: Any) -> str:
        return f"m{x}"


def nothing(ctx: ah.CallContext) -> None:
    """A before advice that does nothing: its presence takes the chain off the layer path."""


@pytest.mark.parametrize("neighbour", [False, True], ids=["layers", "context"])
def test_layers_nest_in_priority_order_like_around_advice(neighbour: bool) -> None:
    """The first layer by priority is outermost, on either path, with the same result."""
    paths: list[str] = []
    with (
        ah.weave(subject, Tag("inner", paths, priority="LOW")),
        ah.weave(subject, Tag("outer", paths, priority="HIGH")),
    ):
        if neighbour:
            with ah.weave(subject, before=nothing):
                assert subject(1, k=2) == "outer(inner(12))"
        else:
            assert subject(1, k=2) == "outer(inner(12))"
    expected = "context" if neighbour else "layer"
    assert paths == [f"outer:{expected}", f"inner:{expected}"]
    assert subject(1) == "10"  # removed: the original again


def test_a_layer_sees_the_call_as_a_context_would() -> None:
    """Arguments, keyword arguments and the bound instance reach the layer."""
    paths: list[str] = []
    tag = Tag("t", paths)
    holder = Holder()
    with ah.weave(Holder, tag):
        assert holder.method(3) == "t(m3)"
    assert paths == ["t:layer"]
    assert tag.seen == (holder, (3,), {})
    with ah.weave(subject, tag):
        assert subject(4, k=5) == "t(45)"
    assert tag.seen == (None, (4,), {"k": 5})


def test_exceptions_pass_through_layers_unchanged() -> None:
    """The target's exception reaches the caller as itself."""
    paths: list[str] = []
    with ah.weave(subject, Tag("t", paths)), pytest.raises(KeyError) as caught:
        subject("boom")
    assert caught.value.args == ("boom",)
    assert paths == ["t:layer"]


def test_a_filtered_advice_takes_the_context_path_and_its_filter_holds() -> None:
    """every= is applied per call, which only the general path does."""
    paths: list[str] = []
    aspect = Tag("t", paths)
    with ah.weave(subject, around=aspect.wrap, every=2):
        assert [subject(i) for i in range(4)] == ["00", "t(10)", "20", "t(30)"]
    assert paths == ["t:context", "t:context"]


def test_a_reference_taken_before_a_rebuild_runs_the_current_advice() -> None:
    """A bound method captured while one layer was woven sees advice added later."""
    paths: list[str] = []
    holder = Holder()
    with ah.weave(Holder, Tag("a", paths)):
        bound = holder.method  # a bound wrapper holding the layer dispatcher of that time
        with ah.weave(Holder, Tag("b", paths)):
            assert bound(1) == "a(b(m1))"
        with ah.weave(Holder, before=nothing):
            assert bound(2) == "a(m2)"
        assert bound(3) == "a(m3)"
    assert bound(4) == "m4"
    # A stale reference goes through the general dispatcher, which builds a context.
    assert paths == ["a:context", "b:context", "a:context", "a:context"]


async def coro(x: int) -> int:
    await asyncio.sleep(0)
    return x


def test_async_join_points_never_take_the_layer_path() -> None:
    """A layer is synchronous; coroutine functions keep the async dispatcher."""
    paths: list[str] = []
    with ah.weave(coro, Tag("t", paths)):
        assert asyncio.run(coro(1)) == "t(1)"
    assert paths == ["t:context"]
