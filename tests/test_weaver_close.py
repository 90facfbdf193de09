"""A closed weaver: close() removes its registrations, and it takes no more."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

import aspecthook as ah
from aspecthook.errors import AspectHookError, WeaverClosedError

CLOSED = r"on weaver 'closing', which is closed: .* register on a new Weaver"


class Note(ah.Aspect):
    def before_close_step(self, ctx: ah.CallContext) -> None:
        pass


def _closed() -> ah.Weaver:
    weaver = ah.Weaver("closing")
    weaver.close()
    return weaver


def _target(x: int) -> int:
    return x + 1


REGISTRATIONS: dict[str, Callable[[ah.Weaver], Any]] = {
    "register": lambda w: w.register(Note()),
    "add": lambda w: w.add(ah.Advice("before", lambda ctx: None, ah.Name("close_step"))),
    "before": lambda w: w.before("close_step")(lambda ctx: None),
    "after": lambda w: w.after("close_step"),
    "on_error": lambda w: w.on_error("close_step"),
    "around": lambda w: w.around("close_step"),
    "on": lambda w: w.on("close.event")(lambda event: None),
    "weave": lambda w: w.weave(_target, before=lambda ctx: None),
    "weave(weaver=)": lambda w: ah.weave(_target, before=lambda ctx: None, weaver=w),
    "woven(weaver=)": lambda w: ah.woven(_target, Note(), weaver=w),
    "joinpoint": lambda w: w.joinpoint("close_step")(_target),
}


@pytest.mark.parametrize("name", sorted(REGISTRATIONS))
def test_a_closed_weaver_refuses_every_registration(name: str) -> None:
    """register, add, each advice decorator, weave (also through weaver=) and joinpoint on
    a closed weaver raise WeaverClosedError, which names the call refused and says to use a
    new Weaver; nothing is registered or woven."""
    weaver = _closed()
    with pytest.raises(WeaverClosedError, match=CLOSED) as info:
        REGISTRATIONS[name](weaver)
    assert info.value.weaver == "closing"
    assert info.value.operation == name.partition("(")[0].replace("woven", "weave")
    assert str(info.value).startswith(f"{info.value.operation}() on weaver 'closing'")
    assert weaver.registered == []
    assert not hasattr(_target, "__wrapped__")  # not woven


def test_weaver_closed_error_is_a_runtime_error_with_the_operation() -> None:
    """WeaverClosedError is an AspectHookError and a RuntimeError; .operation says what
    was refused."""
    with pytest.raises(RuntimeError) as info:
        _closed().before("close_step")
    assert isinstance(info.value, AspectHookError)
    assert isinstance(info.value, WeaverClosedError)
    assert info.value.operation == "before"


def test_a_closed_global_weaver_advice_reaches_no_join_point(weaver: ah.Weaver) -> None:
    """Advice given to a closed global weaver is refused, so it neither reaches the join
    points that exist (as it used to) nor misses later ones."""
    seen: list[str] = []
    before = weaver.joinpoint("close_before")(lambda: "a")
    closing = ah.Weaver("closing")
    closing.close()
    with pytest.raises(WeaverClosedError):
        closing.before(ah.Glob("close_*"))(lambda ctx: seen.append(ctx.joinpoint.name))
    after = weaver.joinpoint("close_after")(lambda: "b")
    assert (before(), after()) == ("a", "b")
    assert seen == []


def test_close_removes_everything_and_closing_again_is_a_no_op(weaver: ah.Weaver) -> None:
    """close() removes every registration; the handles made before it remove as no-ops,
    a second close() does nothing, and describe(), emit() and clear() still work."""
    seen: list[str] = []
    step = weaver.joinpoint("close_step")(_target)
    closing = ah.Weaver("closing")
    advice = closing.before("close_step")(lambda ctx: seen.append("before"))
    handle = closing.register(Note())
    woven = closing.weave(_target, before=lambda ctx: seen.append("woven"))
    subscription = closing.on("close.event")(lambda event: seen.append("event"))
    assert (step(1), _target(1)) == (2, 2)
    assert seen == ["before", "woven"]
    closing.close()
    assert closing.closed
    assert "closed" in repr(closing)
    assert closing.registered == []
    assert (step(1), _target(1)) == (2, 2)
    assert seen == ["before", "woven"]
    assert not hasattr(_target, "__wrapped__")  # the original function is back
    for undo in (advice, handle, woven, subscription):
        undo.remove()
    closing.close()
    closing.clear()
    assert closing.emit("close.event").name == "close.event"
    assert [r.stage for r in closing.describe("close_step")] == [""]
    assert seen == ["before", "woven"]


def test_the_default_weaver_cannot_be_closed(isolate_default_weaver: ah.Weaver) -> None:
    """default_weaver.close() is refused, saying to clear() it; the default weaver keeps
    working."""
    with pytest.raises(WeaverClosedError, match=r"default weaver cannot be closed.*clear\(\)"):
        ah.default_weaver.close()
    assert not ah.default_weaver.closed
    seen: list[int] = []
    step = ah.joinpoint("close_default_step")(_target)
    with ah.before("close_default_step")(lambda ctx: seen.append(ctx.args[0])):
        assert step(4) == 5
    assert seen == [4]


def test_a_second_close_waits_for_the_first(
    blocked_removal: tuple[threading.Event, threading.Event],
) -> None:
    """close() from a second thread while a first is closing returns once the weaver's
    registrations are gone."""
    entered, release = blocked_removal
    closing = ah.Weaver("closing")
    closing.before("close_step")(lambda ctx: None)
    first = threading.Thread(target=closing.close, daemon=True)
    first.start()
    assert entered.wait(10)
    registered: list[int] = []

    def second() -> None:
        closing.close()
        registered.append(len(closing.registered))

    other = threading.Thread(target=second, daemon=True)
    other.start()
    other.join(0.3)
    assert other.is_alive(), "the second close() returned while the first was closing"
    release.set()
    first.join(10)
    other.join(10)
    assert registered == [0]


def test_a_weave_that_close_overtakes_is_undone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A weave whose weaver is closed while it is being made (another thread) is undone
    and refused, not left in place on the closed weaver."""
    from aspecthook import _weave

    closing = ah.Weaver("closing")
    settle = _weave._settle

    def close_then_settle(*args: Any) -> None:
        closing.close()
        settle(*args)

    monkeypatch.setattr(_weave, "_settle", close_then_settle)
    with pytest.raises(WeaverClosedError, match=CLOSED):
        closing.weave(_target, before=lambda ctx: None)
    assert not hasattr(_target, "__wrapped__")  # the original function is back
    assert closing.registered == []
