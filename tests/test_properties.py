"""Properties: any sequence of registrations, weaves and removals leaves the expected state."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import _weave_targets as targets
from _weave_targets import Child, Model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aspecthook as ah

MOD = "_weave_targets"
SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# -- advice on declared join points ----------------------------------------------------------

POINTS = ("prop_a", "prop_b")
KINDS = ("before", "after", "around")
PRIORITIES = (10, 50, 50, 90, "HIGH", "LOW")


@dataclass(frozen=True)
class Live:
    """The model of one registered advice."""

    number: int
    kind: str
    priority: int
    point: str


def _key(advice: Live) -> tuple[int, int]:
    return (advice.priority, advice.number)


def _advice_fn(kind: str, number: int, log: list[Any]) -> Callable[..., Any]:
    if kind == "around":

        def around(ctx: ah.CallContext, proceed: Callable[..., Any]) -> Any:
            log.append(f"in{number}")
            result = proceed()
            log.append(f"out{number}")
            return result

        return around

    def advice(ctx: ah.CallContext) -> None:
        log.append(f"{kind}{number}")

    return advice


def _expected_calls(live: list[Live], point: str) -> list[str]:
    def ordered(kind: str) -> list[Live]:
        return sorted((a for a in live if a.point == point and a.kind == kind), key=_key)

    arounds = ordered("around")
    return [
        *(f"before{a.number}" for a in ordered("before")),
        *(f"in{a.number}" for a in arounds),
        "target",
        *(f"out{a.number}" for a in reversed(arounds)),
        *(f"after{a.number}" for a in ordered("after")),
    ]


_register = st.tuples(
    st.just("register"),
    st.sampled_from(KINDS),
    st.sampled_from(PRIORITIES),
    st.sampled_from(POINTS),
)
_remove = st.tuples(st.just("remove"), st.integers(min_value=0, max_value=40))
_clear = st.tuples(st.just("clear"))
advice_ops = st.lists(st.one_of(_register, _register, _remove, _clear), max_size=25)


@SETTINGS
@given(advice_ops)
def test_register_and_remove_advice_in_any_sequence(ops: list[tuple[Any, ...]]) -> None:
    """Advice in force is exactly what was registered and not removed, in priority order."""
    weaver = ah.Weaver("prop", local=True)
    log: list[Any] = []

    def target() -> str:
        log.append("target")
        return "result"

    points = {name: weaver.joinpoint(name)(target) for name in POINTS}
    made: list[tuple[ah.Advice, Live]] = []
    live: list[Live] = []
    try:
        for op in ops:
            if op[0] == "register":
                _, kind, priority, point = op
                number = len(made)
                decorate = getattr(weaver, kind)(point, priority=priority, name=f"a{number}")
                advice = decorate(_advice_fn(kind, number, log))
                value = ah.Priority[priority] if isinstance(priority, str) else priority
                entry = Live(number, kind, int(value), point)
                made.append((advice, entry))
                live.append(entry)
            elif op[0] == "remove" and made:
                advice, entry = made[op[1] % len(made)]
                advice.remove()
                if entry in live:
                    live.remove(entry)
            elif op[0] == "clear":
                weaver.clear()
                live.clear()
            _check_points(weaver, points, live, log)
    finally:
        weaver.close()


def _check_points(
    weaver: ah.Weaver, points: dict[str, Any], live: list[Live], log: list[Any]
) -> None:
    rows = weaver.describe()
    for name, proxy in points.items():
        log.clear()
        assert proxy() == "result"
        assert log == _expected_calls(live, name)
        for kind in KINDS:
            expected = sorted((a for a in live if a.point == name and a.kind == kind), key=_key)
            assert rows.advice_names(name, kind) == [f"a{a.number}" for a in expected]


# -- weaving and unweaving existing code -----------------------------------------------------

#: What each weave covers, by the calls of ``_calls`` it reaches.
SITES: dict[str, tuple[Callable[[Model], Any], tuple[str, ...]]] = {
    "add_one": (lambda obj: targets.add_one, ("add_one",)),
    "add_one path": (lambda obj: f"{MOD}.add_one", ("add_one",)),
    "forward": (lambda obj: Model.forward, ("forward", "obj.forward")),
    "forward path": (lambda obj: f"{MOD}:Model.forward", ("forward", "obj.forward")),
    "build": (lambda obj: Model.build, ("build",)),
    "build path": (lambda obj: f"{MOD}.Model.build", ("build",)),
    "helper": (lambda obj: vars(Model)["helper"], ("helper",)),
    "helper path": (lambda obj: f"{MOD}.Model.helper", ("helper",)),
    "class": (lambda obj: Model, ("forward", "obj.forward", "build", "helper")),
    "module": (lambda obj: targets, ("add_one",)),
    "glob": (lambda obj: f"{MOD}.*.forward", ("forward", "obj.forward")),
}


def _calls(obj: Model) -> dict[str, Callable[[], Any]]:
    return {
        "add_one": lambda: targets.add_one(1),
        "forward": lambda: Model().forward(1),
        "obj.forward": lambda: obj.forward(1),
        "build": lambda: Model.build(1),
        "helper": lambda: Model.helper(1),
    }


RESULTS = {"add_one": 2, "forward": 11, "obj.forward": 11, "build": ("Model", 1), "helper": -1}
WOVEN_ATTRIBUTES = ("add_one", "Model.forward", "Model.build", "Model.helper")

_weave = st.tuples(st.just("weave"), st.sampled_from(sorted(SITES)), st.sampled_from(KINDS))
weave_ops = st.lists(st.one_of(_weave, _weave, _remove), max_size=20)


def _woven_advice(kind: str, number: int, log: list[Any]) -> dict[str, Callable[..., Any]]:
    def record(ctx: ah.CallContext) -> None:
        log.append(number)

    def around(ctx: ah.CallContext, proceed: Callable[..., Any]) -> Any:
        log.append(number)
        return proceed()

    return {kind: around if kind == "around" else record}


def _expected_weaves(live: dict[int, tuple[str, str]], call: str) -> list[int]:
    reached = [(n, kind) for n, (site, kind) in live.items() if call in SITES[site][1]]
    order = {"before": 0, "around": 1, "after": 2}
    return [n for n, kind in sorted(reached, key=lambda item: (order[item[1]], item[0]))]


@SETTINGS
@given(weave_ops, st.randoms(use_true_random=False))
def test_weave_and_remove_in_any_sequence(ops: list[tuple[Any, ...]], rnd: Any) -> None:
    """Weaves in force are exactly those not removed; at the end the originals are back."""
    obj = Model()
    log: list[Any] = []
    handles: list[ah.Handle] = []
    live: dict[int, tuple[str, str]] = {}
    try:
        for op in ops:
            if op[0] == "weave":
                _, site, kind = op
                number = len(handles)
                target = SITES[site][0](obj)
                handles.append(ah.weave(target, **_woven_advice(kind, number, log)))
                live[number] = (site, kind)
            elif handles:
                number = op[1] % len(handles)
                handles[number].remove()
                live.pop(number, None)
            _check_calls(obj, live, log)
        for handle in rnd.sample(handles, len(handles)):
            handle.remove()
    finally:
        ah.default_weaver.clear()
    assert targets.changed() == []
    assert "forward" not in vars(obj)
    _check_calls(obj, {}, log)


def _check_calls(obj: Model, live: dict[int, tuple[str, str]], log: list[Any]) -> None:
    for call, run in _calls(obj).items():
        log.clear()
        assert run() == RESULTS[call]
        assert log == _expected_weaves(live, call), call
    for name in WOVEN_ATTRIBUTES:
        holder = Model if name.startswith("Model.") else targets
        value = vars(holder)[name.rpartition(".")[2]]
        original = targets.ORIGINALS[name]
        assert value is original or value.__wrapped__ is original  # one proxy at most


_instance_weave = st.tuples(
    st.just("weave"),
    st.sampled_from(["instance", "bound", "child", "child build", "class"]),
    st.just("before"),
)


@SETTINGS
@given(st.lists(st.one_of(_instance_weave, _remove), max_size=20), st.randoms())
def test_instance_and_subclass_weaves_come_off_in_any_order(
    ops: list[tuple[Any, ...]], rnd: Any
) -> None:
    """Per-instance, subclass and class weaves in any sequence leave no shadow behind."""
    obj = Model()
    by_site: dict[str, Callable[[], Any]] = {
        "instance": lambda: obj,
        "bound": lambda: obj.forward,
        "child": lambda: f"{MOD}.Child.forward",
        "child build": lambda: f"{MOD}.Child.build",
        "class": lambda: Model,
    }
    handles: list[ah.Handle] = []
    try:
        for op in ops:
            if op[0] == "weave":
                handles.append(ah.weave(by_site[op[1]](), before=lambda ctx: None))
            elif handles:
                handles[op[1] % len(handles)].remove()
            assert obj.forward(1) == 11
            assert Child().forward(2) == 12
            assert Child.build(3) == ("Child", 3)
        for handle in rnd.sample(handles, len(handles)):
            handle.remove()
    finally:
        ah.default_weaver.clear()
    assert targets.changed() == []
    assert "forward" not in vars(obj)
    assert "forward" not in vars(Child)
    assert "build" not in vars(Child)
