"""Regressions found in review: bound instances through proxies, and the two dispatch paths.

A chain with only a few before/after advice runs through a generated, shape-specialised
dispatcher; any around or error advice (or a long chain) sends calls through the general
one. Users must not be able to tell which one ran.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import aspecthook as ah

# -- subjects ------------------------------------------------------------------------------

CALLS: list[tuple[Any, ...]] = []
BOOM = ValueError("boom")


@ah.joinpoint("review.function")
def target(x: Any, k: int = 0) -> tuple[Any, int]:
    CALLS.append((x, k))
    if x == "boom":
        raise BOOM
    return (x, k)


class Holder:
    @ah.joinpoint("review.method")
    def method(self, x: Any, k: int = 0) -> tuple[Any, int]:
        return target(x, k=k)


HOLDER = Holder()


def _call_function(x: Any, **kw: Any) -> Any:
    return target(x, **kw)


def _call_method(x: Any, **kw: Any) -> Any:
    return HOLDER.method(x, **kw)


# -- the instance a proxy over a bound join point method passes ---------------------------


def test_joinpoint_over_a_bound_joinpoint_method_sees_its_instance(weaver: ah.Weaver) -> None:
    """@joinpoint applied to a bound join point method gives advice that bound instance."""
    holder = Holder()
    bound_jp = weaver.joinpoint("review.bound")(holder.method)
    seen: list[Any] = []
    weaver.before("review.bound")(lambda ctx: seen.append(ctx.instance))
    assert bound_jp(1) == (1, 0)
    assert seen == [holder]


def test_weaving_an_instance_of_a_class_with_joinpoints_sees_the_instance() -> None:
    """Weaving an instance whose class declares join point methods gives advice that instance."""
    holder = Holder()
    seen: list[Any] = []
    with ah.woven(holder, before=lambda ctx: seen.append(ctx.instance)):
        assert holder.method(2) == (2, 0)
    assert seen == [holder]


# -- specialised and general dispatch behave the same --------------------------------------

Scenario = Callable[[ah.Weaver, Callable[..., Any]], Any]


def _skip(w: ah.Weaver, call: Callable[..., Any]) -> Any:
    after: list[Any] = []
    w.before("review.*")(lambda ctx: ctx.skip("skipped"))
    w.after("review.*")(lambda ctx: after.append(ctx.result))
    return call(1), CALLS, after


def _rewrite_args(w: ah.Weaver, call: Callable[..., Any]) -> Any:
    def edit(ctx: Any) -> None:
        ctx.args[0] = 10
        ctx.kwargs["k"] = 3

    w.before("review.*")(edit)
    return call(1), call(2, k=1)


def _replace_result(w: ah.Weaver, call: Callable[..., Any]) -> Any:
    seen: list[Any] = []

    def replace(ctx: Any) -> None:
        seen.append(ctx.result)
        ctx.result = "replaced"

    w.after("review.*")(replace)
    return call(4), seen


def _target_raises(w: ah.Weaver, call: Callable[..., Any]) -> Any:
    after: list[Any] = []
    w.before("review.*")(lambda ctx: None)
    w.after("review.*")(lambda ctx: after.append(ctx.result))
    with pytest.raises(ValueError) as info:
        call("boom")
    return info.value is BOOM, info.value.__cause__, after


def _advice_raises(w: ah.Weaver, call: Callable[..., Any]) -> Any:
    problem = KeyError("advice")

    def fail(ctx: Any) -> None:
        raise problem

    w.before("review.*")(fail)
    with pytest.raises(KeyError) as info:
        call(1)
    return info.value is problem, CALLS


def _advice_errors_logged(w: ah.Weaver, call: Callable[..., Any]) -> Any:
    def fail(ctx: Any) -> None:
        raise KeyError("advice")

    advice = w.before("review.*", errors="log")(fail)
    after = w.after("review.*", errors="log")(fail)
    return call(5), advice.failures, after.failures


def _filters(w: ah.Weaver, call: Callable[..., Any]) -> Any:
    seen: list[tuple[str, Any]] = []
    w.before("review.*", every=2)(lambda ctx: seen.append(("every", ctx.args[0])))
    w.before("review.*", once=True)(lambda ctx: seen.append(("once", ctx.args[0])))
    w.after("review.*", when=lambda ctx: ctx.args[0] > 2)(
        lambda ctx: seen.append(("when", ctx.args[0]))
    )
    for i in range(1, 5):
        call(i)
    return seen


def _instance(w: ah.Weaver, call: Callable[..., Any]) -> Any:
    seen: list[Any] = []
    w.before("review.*")(lambda ctx: seen.append(ctx.instance))
    call(1)
    return [s is HOLDER if s is not None else None for s in seen]


SCENARIOS: dict[str, Scenario] = {
    "skip": _skip,
    "rewrite_args": _rewrite_args,
    "replace_result": _replace_result,
    "target_raises": _target_raises,
    "advice_raises": _advice_raises,
    "advice_errors_logged": _advice_errors_logged,
    "filters": _filters,
    "instance": _instance,
}


def _force(shape: str, w: ah.Weaver) -> None:
    """Add advice that changes nothing observable but sends calls down the general path."""
    if shape == "around":
        w.around("review.*")(lambda ctx, proceed: proceed())
    elif shape == "on_error":
        w.on_error("review.*")(lambda ctx: None)
    elif shape == "long":
        for _ in range(7):
            w.after("review.*", priority="LOWEST")(lambda ctx: None)


def _observe(scenario: Scenario, shape: str, call: Callable[..., Any]) -> tuple[Any, bool]:
    w = ah.Weaver(f"review {shape}")
    CALLS.clear()
    try:
        _force(shape, w)
        outcome = scenario(w, call)
        proxy = vars(Holder)["method"] if call is _call_method else target
        general = proxy._self_wrapper is proxy._self_joinpoint.general
        return outcome, general
    finally:
        w.close()
        CALLS.clear()


@pytest.mark.parametrize("name", sorted(SCENARIOS))
@pytest.mark.parametrize("call", [_call_function, _call_method], ids=["function", "method"])
def test_specialised_and_general_dispatch_behave_the_same(
    name: str, call: Callable[..., Any], isolate_default_weaver: ah.Weaver
) -> None:
    """Every advice semantic gives the same outcome on the specialised and general paths."""
    scenario = SCENARIOS[name]
    fast, fast_general = _observe(scenario, "plain", call)
    assert not fast_general, "the plain shape should take the specialised dispatcher"
    for shape in ("around", "on_error", "long"):
        slow, slow_general = _observe(scenario, shape, call)
        if shape != "around":  # around advice may or may not be specialised
            assert slow_general, f"{shape} should take the general dispatcher"
        assert slow == fast, f"{name}: {shape} path differs from the specialised path"
