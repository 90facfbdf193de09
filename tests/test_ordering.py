"""Ordering: priorities, ties by registration, around nesting, order_after / order_before."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

import aspecthook as ah
from aspecthook import Aspect, Priority, after, before
from aspecthook.errors import InvalidOptionError, OrderingCycleError, UnknownPriorityError

ALL_NAMES = (
    "HIGHEST",
    "VERY_HIGH",
    "HIGH",
    "ABOVE_NORMAL",
    "NORMAL",
    "BELOW_NORMAL",
    "LOW",
    "VERY_LOW",
    "LOWEST",
)


@pytest.fixture
def point(request: pytest.FixtureRequest) -> str:
    """A join point name that no other test uses."""
    return "test_ordering." + re.sub(r"\W", "_", request.node.name)


def _declare(weaver: ah.Weaver, name: str, fail: bool = False) -> Any:
    @weaver.joinpoint(name)
    def work() -> str:
        if fail:
            raise RuntimeError("target failed")
        return "done"

    return work


# -- Priority values and names -----------------------------------------------------------------


def test_priority_has_the_nine_openmmlab_levels() -> None:
    """Priority names and values match OpenMMLab's hook priorities, in this order."""
    assert {p.name: p.value for p in Priority} == {
        "HIGHEST": 0,
        "VERY_HIGH": 10,
        "HIGH": 30,
        "ABOVE_NORMAL": 40,
        "NORMAL": 50,
        "BELOW_NORMAL": 60,
        "LOW": 70,
        "VERY_LOW": 90,
        "LOWEST": 100,
    }
    assert tuple(p.name for p in Priority) == ALL_NAMES


@pytest.mark.parametrize(
    ("given", "value"),
    [
        ("high", 30),
        ("HIGH", 30),
        ("High", 30),
        ("very_low", 90),
        ("Above_Normal", 40),
        ("lowest", 100),
        (Priority.VERY_HIGH, 10),
        (0, 0),
        (1, 1),
        (55, 55),
        (100, 100),
    ],
)
def test_priority_accepts_names_any_case_members_and_ints(
    weaver: ah.Weaver, point: str, given: object, value: int
) -> None:
    """priority= takes a Priority, a level name in any case, or an int 0..100."""
    advice = weaver.before(point, priority=given)(lambda ctx: None)
    assert advice.priority == value


def test_default_priority_is_normal(weaver: ah.Weaver, point: str) -> None:
    """Advice without priority= has NORMAL priority."""
    assert weaver.after(point)(lambda ctx: None).priority == Priority.NORMAL


@pytest.mark.parametrize(
    ("given", "match"),
    [
        ("urgent", "unknown priority 'urgent'"),
        ("very high", "unknown priority"),
        ("", "unknown priority"),
        (-1, "out of range"),
        (101, "out of range"),
        (1.5, "unknown priority"),
        (True, "unknown priority"),
        (None, "unknown priority"),
    ],
)
def test_bad_priority_lists_the_valid_names(
    weaver: ah.Weaver, point: str, given: object, match: str
) -> None:
    """An unknown name or out-of-range value raises UnknownPriorityError listing every level."""
    with pytest.raises(UnknownPriorityError, match=match) as info:
        weaver.before(point, priority=given)(lambda ctx: None)
    message = str(info.value)
    assert all(name in message for name in ALL_NAMES)
    assert info.value.value is given
    assert weaver.registered == []


def test_bad_priority_on_an_aspect_is_refused_when_made(point: str) -> None:
    """Aspect(priority=...) checks the priority when the aspect is made."""

    class Timing(Aspect):
        @before(point)
        def start(self, ctx: Any) -> None:
            pass

    with pytest.raises(UnknownPriorityError, match="HIGHEST"):
        Timing(priority="sometimes")


# -- order within a stage ----------------------------------------------------------------------


def _register(
    weaver: ah.Weaver, stage: str, point: str, label: str, ran: list[str], **opts: Any
) -> Any:
    """Register advice of ``stage`` that appends ``label`` to ``ran`` when it runs."""
    if stage == "around":

        def wrap(ctx: Any, proceed: Callable[..., Any]) -> Any:
            ran.append(label)
            return proceed()

        fn: Callable[..., Any] = wrap
    elif stage == "on":

        def receive(event: Any) -> None:
            ran.append(label)

        fn = receive
    else:

        def hook(ctx: Any) -> None:
            ran.append(label)

        fn = hook
    return getattr(weaver, stage)(point, name=label, **opts)(fn)


def _trigger(weaver: ah.Weaver, stage: str, point: str) -> None:
    if stage == "on":
        weaver.emit(point)
        return
    work = _declare(weaver, point, fail=stage == "on_error")
    if stage == "on_error":
        with pytest.raises(RuntimeError, match="target failed"):
            work()
    else:
        work()


STAGES = ["before", "after", "on_error", "around", "on"]


@pytest.mark.parametrize("stage", STAGES)
def test_ascending_priority_within_a_stage(weaver: ah.Weaver, point: str, stage: str) -> None:
    """Advice of one stage runs in ascending priority value, whatever the registration order."""
    ran: list[str] = []
    _register(weaver, stage, point, "low", ran, priority="LOW")
    _register(weaver, stage, point, "highest", ran, priority=Priority.HIGHEST)
    _register(weaver, stage, point, "normal", ran)
    _register(weaver, stage, point, "p45", ran, priority=45)
    _register(weaver, stage, point, "lowest", ran, priority="lowest")
    _trigger(weaver, stage, point)
    assert ran == ["highest", "p45", "normal", "low", "lowest"]


@pytest.mark.parametrize("stage", STAGES)
def test_equal_priorities_run_in_registration_order(
    weaver: ah.Weaver, point: str, stage: str
) -> None:
    """Ties in priority run in the order the advice was registered."""
    ran: list[str] = []
    for label in ("first", "second", "third", "fourth"):
        _register(weaver, stage, point, label, ran, priority="high")
    _trigger(weaver, stage, point)
    assert ran == ["first", "second", "third", "fourth"]


def test_later_registration_never_jumps_an_equal_earlier_one(weaver: ah.Weaver, point: str) -> None:
    """A later registration of equal priority runs after every earlier one, across weavers too."""
    work = _declare(weaver, point)
    ran: list[str] = []
    _register(weaver, "before", point, "a", ran)
    _register(ah.default_weaver, "before", point, "b", ran)
    c = _register(weaver, "before", point, "c", ran)
    _register(weaver, "before", point, "early", ran, priority="high")
    work()
    assert ran == ["early", "a", "b", "c"]

    ran.clear()
    c.remove()
    weaver.add(c)  # registered again: now the latest of its priority
    _register(weaver, "before", point, "d", ran)
    work()
    assert ran == ["early", "a", "b", "c", "d"]


def test_removing_and_reregistering_goes_to_the_back(weaver: ah.Weaver, point: str) -> None:
    """Advice removed and registered again runs after the equal-priority advice still present."""
    work = _declare(weaver, point)
    ran: list[str] = []
    first = _register(weaver, "after", point, "first", ran)
    _register(weaver, "after", point, "second", ran)
    first.remove()
    weaver.add(first)
    work()
    assert ran == ["second", "first"]


def test_around_nests_with_the_first_in_order_outermost(weaver: ah.Weaver, point: str) -> None:
    """Around advice nests by order: the highest priority (then earliest) is outermost."""
    work = _declare(weaver, point)
    ran: list[str] = []

    def make(label: str) -> Callable[..., Any]:
        def wrap(ctx: Any, proceed: Callable[..., Any]) -> Any:
            ran.append(f"{label}>")
            result = proceed()
            ran.append(f"<{label}")
            return result

        return wrap

    weaver.around(point, priority="low")(make("low"))
    weaver.around(point)(make("normal1"))
    weaver.around(point, priority="high")(make("high"))
    weaver.around(point)(make("normal2"))
    assert work() == "done"
    assert ran == [
        "high>",
        "normal1>",
        "normal2>",
        "low>",
        "<low",
        "<normal2",
        "<normal1",
        "<high",
    ]


def test_stages_keep_their_own_order(weaver: ah.Weaver, point: str) -> None:
    """Priority orders advice within its stage; before advice always precede around and after."""
    work = _declare(weaver, point)
    ran: list[str] = []
    _register(weaver, "after", point, "after-highest", ran, priority="highest")
    _register(weaver, "around", point, "around-highest", ran, priority="highest")
    _register(weaver, "before", point, "before-lowest", ran, priority="lowest")
    work()
    assert ran == ["before-lowest", "around-highest", "after-highest"]


# -- order_after / order_before ----------------------------------------------------------------


class Tagged(Aspect):
    """Appends its name to ``ran`` before each call of the join points it is given."""

    def __init__(self, ran: list[str], **options: Any) -> None:
        super().__init__(**options)
        self.ran = ran

    @before()
    def hook(self, ctx: Any) -> None:
        self.ran.append(self.name)


def test_order_before_places_an_aspect_ahead_of_an_equal_priority_one(
    weaver: ah.Weaver, point: str
) -> None:
    """order_before=('checkpoint',) runs an aspect before 'checkpoint' though registered later."""
    work = _declare(weaver, point)
    ran: list[str] = []
    weaver.register(Tagged(ran, pointcut=point, name="checkpoint"))
    weaver.register(Tagged(ran, pointcut=point, name="logger"))
    weaver.register(Tagged(ran, pointcut=point, name="ema", order_before=("checkpoint",)))
    work()
    assert ran == ["ema", "checkpoint", "logger"]


def test_order_after_places_an_aspect_behind_a_named_one(weaver: ah.Weaver, point: str) -> None:
    """order_after=('ema',) runs an aspect after 'ema' even when its priority is higher."""
    work = _declare(weaver, point)
    ran: list[str] = []
    weaver.register(Tagged(ran, pointcut=point, name="ema", priority="low"))
    weaver.register(
        Tagged(ran, pointcut=point, name="checkpoint", priority="highest", order_after=("ema",))
    )
    weaver.register(Tagged(ran, pointcut=point, name="logger", priority="normal"))
    work()
    assert ran == ["logger", "ema", "checkpoint"]


def test_constraints_between_advice_by_name(weaver: ah.Weaver, point: str) -> None:
    """Plain advice take order_after/order_before naming other advice (their name=)."""
    work = _declare(weaver, point)
    ran: list[str] = []
    _register(weaver, "before", point, "clip", ran, order_after=("scale",))
    _register(weaver, "before", point, "scale", ran)
    _register(weaver, "before", point, "zero", ran, order_before="clip", priority="lowest")
    work()
    assert ran == ["scale", "zero", "clip"]


def test_constraints_are_resolved_together_with_priorities(weaver: ah.Weaver, point: str) -> None:
    """Unconstrained advice keep priority order; constraints only move what they name."""
    work = _declare(weaver, point)
    ran: list[str] = []
    _register(weaver, "before", point, "p10", ran, priority=10)
    _register(weaver, "before", point, "p30", ran, priority=30)
    _register(weaver, "before", point, "p50", ran, priority=50, order_before=("p30",))
    _register(weaver, "before", point, "p70", ran, priority=70)
    _register(weaver, "before", point, "p20", ran, priority=20)
    work()
    assert ran == ["p10", "p20", "p50", "p30", "p70"]


def test_constraint_naming_an_absent_aspect_is_ignored(weaver: ah.Weaver, point: str) -> None:
    """order_after naming an aspect that is not registered leaves priority order alone."""
    work = _declare(weaver, point)
    ran: list[str] = []
    _register(weaver, "before", point, "b", ran, order_after=("not_here",))
    _register(weaver, "before", point, "a", ran, priority="high")
    work()
    assert ran == ["a", "b"]


def test_aspect_constraint_applies_to_all_its_advice(weaver: ah.Weaver, point: str) -> None:
    """An aspect's order_before applies to every advice method of it, in every stage."""
    work = _declare(weaver, point)
    ran: list[str] = []

    class Checkpoint(Aspect):
        @before(point)
        def load(self, ctx: Any) -> None:
            ran.append("checkpoint.before")

        @after(point)
        def save(self, ctx: Any) -> None:
            ran.append("checkpoint.after")

    class Ema(Aspect):
        order_before = ("checkpoint",)

        @before(point)
        def swap_in(self, ctx: Any) -> None:
            ran.append("ema.before")

        @after(point)
        def update(self, ctx: Any) -> None:
            ran.append("ema.after")

    weaver.register(Checkpoint())
    weaver.register(Ema())
    work()
    assert ran == ["ema.before", "checkpoint.before", "ema.after", "checkpoint.after"]


@pytest.mark.parametrize("option", ["order_after", "order_before"])
@pytest.mark.parametrize("stage", STAGES)
def test_advice_naming_itself_in_its_order_is_refused(
    weaver: ah.Weaver, point: str, stage: str, option: str
) -> None:
    """order_after= / order_before= naming the advice itself did nothing, silently: it is
    refused at registration, saying to remove the name, and nothing is registered."""
    ran: list[str] = []
    refused = r"names the advice itself.*remove 'clip'"
    with pytest.raises(InvalidOptionError, match=refused) as info:
        _register(weaver, stage, point, "clip", ran, **{option: ("scale", "clip")})
    assert (info.value.option, info.value.value) == (option, ("scale", "clip"))
    assert weaver.registered == []


@pytest.mark.parametrize("option", ["order_after", "order_before"])
def test_an_aspect_naming_itself_in_its_order_is_refused(
    weaver: ah.Weaver, point: str, option: str
) -> None:
    """Aspect(name='ema', order_after='ema') ordered none of its advice: it is refused when
    registered, naming the aspect, and leaves nothing registered."""
    ran: list[str] = []
    with pytest.raises(InvalidOptionError, match=rf"{option}=\('ema',\) .* its aspect 'ema'"):
        weaver.register(Tagged(ran, pointcut=point, name="ema", **{option: "ema"}))
    assert weaver.registered == []


def test_advice_ordered_after_another_advice_of_its_own_aspect(
    weaver: ah.Weaver, point: str
) -> None:
    """An aspect's method may name another method's advice of the same aspect (by its
    advice name, '<aspect>.<method>'); naming the aspect itself from a method is refused."""
    work = _declare(weaver, point)
    ran: list[str] = []

    class Pair(Aspect):
        @before(point, order_after="pair.first")
        def second(self, ctx: Any) -> None:
            ran.append("second")

        @before(point)
        def first(self, ctx: Any) -> None:
            ran.append("first")

    class Whole(Aspect):
        @before(point, order_after="whole")
        def alone(self, ctx: Any) -> None:
            ran.append("alone")

    weaver.register(Pair())
    work()
    assert ran == ["first", "second"]
    refused = r"its aspect 'whole'.*order_after='whole\.<method>'"
    with pytest.raises(InvalidOptionError, match=refused):
        weaver.register(Whole())


# -- cycles ------------------------------------------------------------------------------------


def test_cycle_is_refused_and_names_the_aspects(weaver: ah.Weaver, point: str) -> None:
    """Contradicting constraints raise OrderingCycleError naming the aspects in the cycle."""
    work = _declare(weaver, point)
    ran: list[str] = []
    weaver.register(Tagged(ran, pointcut=point, name="ema", order_before=("checkpoint",)))
    with pytest.raises(OrderingCycleError, match=r"cycle: (ema|checkpoint) -> ") as info:
        weaver.register(Tagged(ran, pointcut=point, name="checkpoint", order_before=("ema",)))
    assert set(info.value.cycle) == {"ema", "checkpoint"}
    assert info.value.cycle[0] == info.value.cycle[-1]
    assert "remove one of these constraints" in str(info.value)
    work()
    assert ran == ["ema"]


def test_refused_cycle_leaves_earlier_registrations_intact(weaver: ah.Weaver, point: str) -> None:
    """After a refused cycle nothing of the refused aspect is registered, anywhere."""
    work = _declare(weaver, point)
    other = _declare(weaver, f"{point}.other")
    ran: list[str] = []

    class Checkpoint(Aspect):
        order_before = ("ema",)

        @before(point)
        def save(self, ctx: Any) -> None:
            ran.append("checkpoint.save")

        @before(f"{point}.other")
        def elsewhere(self, ctx: Any) -> None:
            ran.append("checkpoint.elsewhere")

    kept = weaver.register(Tagged(ran, pointcut=point, name="ema", order_before=("checkpoint",)))
    registered = list(weaver.registered)
    with pytest.raises(OrderingCycleError, match="checkpoint"):
        weaver.register(Checkpoint())
    assert weaver.registered == registered
    work()
    other()
    assert ran == ["ema"]
    assert [r.advice for r in weaver.describe(f"{point}.other") if r.stage] == []

    kept.remove()
    weaver.register(Checkpoint())  # with the other side gone, it registers fine
    ran.clear()
    work()
    other()
    assert ran == ["checkpoint.save", "checkpoint.elsewhere"]


def test_cycle_between_plain_advice_is_refused(weaver: ah.Weaver, point: str) -> None:
    """A cycle between named advice is refused at the registration that closes it."""
    work = _declare(weaver, point)
    ran: list[str] = []
    _register(weaver, "after", point, "p", ran, order_after=("q",))
    _register(weaver, "after", point, "q", ran, order_after=("r",))
    with pytest.raises(OrderingCycleError, match=r"cycle: . -> . -> . -> .;"):
        _register(weaver, "after", point, "r", ran, order_after=("p",))
    assert [a.name for a in weaver.registered] == ["p", "q"]
    work()
    assert ran == ["q", "p"]


def test_cycle_between_event_subscribers_is_refused(weaver: ah.Weaver, point: str) -> None:
    """A cycle among subscribers of one event is refused at registration, not at emit()."""
    ran: list[str] = []
    _register(weaver, "on", point, "p", ran, order_after=("q",))
    with pytest.raises(OrderingCycleError, match=r"cycle: (p -> q -> p|q -> p -> q);"):
        _register(weaver, "on", point, "q", ran, order_after=("p",))
    assert [a.name for a in weaver.registered] == ["p"]
    weaver.emit(point)
    assert ran == ["p"]


def test_cycle_closed_by_a_glob_subscriber_of_an_emitted_event_is_refused(
    weaver: ah.Weaver, point: str
) -> None:
    """A glob subscription that closes a cycle at an event already emitted is refused."""
    ran: list[str] = []
    _register(weaver, "on", f"{point}.saved", "p", ran, order_after=("q",))
    weaver.emit(f"{point}.saved")
    with pytest.raises(OrderingCycleError, match="cycle"):
        _register(weaver, "on", f"{point}.*", "q", ran, order_after=("p",))
    weaver.emit(f"{point}.saved")
    assert ran == ["p", "p"]


def test_cycle_is_reported_when_other_advice_waits_behind_it(weaver: ah.Weaver, point: str) -> None:
    """A cycle is named even when advice outside it (sorting first) waits behind it."""
    work = _declare(weaver, point)
    ran: list[str] = []
    logger = Tagged(ran, pointcut=point, name="logger", priority="highest", order_after=("ema",))
    weaver.register(logger)
    weaver.register(Tagged(ran, pointcut=point, name="ema", order_before=("checkpoint",)))
    cycle = r"(ema -> checkpoint -> ema|checkpoint -> ema -> checkpoint);"
    with pytest.raises(OrderingCycleError, match=cycle) as info:
        weaver.register(Tagged(ran, pointcut=point, name="checkpoint", order_before=("ema",)))
    assert "logger" not in info.value.cycle
    work()
    assert ran == ["ema", "logger"]


def test_a_hook_placed_between_two_equal_priority_hooks(weaver: ah.Weaver, point: str) -> None:
    """order_after + order_before place a new hook between two equal-priority ones."""
    work = _declare(weaver, point)
    ran: list[str] = []
    weaver.register(Tagged(ran, pointcut=point, name="ema"))
    weaver.register(Tagged(ran, pointcut=point, name="checkpoint"))
    weaver.register(Tagged(ran, pointcut=point, name="logger"))
    weaver.register(
        Tagged(ran, pointcut=point, name="eval", order_after=("ema",), order_before=("checkpoint",))
    )
    work()
    assert ran == ["ema", "eval", "checkpoint", "logger"]


def test_only_the_advice_stating_a_constraint_moves(weaver: ah.Weaver, point: str) -> None:
    """order_before moves its own advice up; equal-priority bystanders keep registration order."""
    work = _declare(weaver, point)
    ran: list[str] = []
    _register(weaver, "before", point, "clip", ran, order_after=("scale",))
    _register(weaver, "before", point, "scale", ran)
    _register(weaver, "before", point, "log", ran)
    _register(weaver, "before", point, "zero", ran, order_before="clip")
    work()
    assert ran == ["scale", "zero", "clip", "log"]
