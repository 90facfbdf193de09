"""A runner's state for checkpoints: what ``Runner.state_dict()`` gathers and
``Runner.load_state_dict()`` puts back (model, optimizer, scheduler, counters, metrics and
every aspect's own state, with the rearrangements aspects such as ``EMA`` make to it).

Apart from the runner's class because none of this runs in the loop: only at a save or a
resume.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._wrappers import unwrapped, without_wrapper_prefix

if TYPE_CHECKING:
    from ._runner import Runner

__all__ = ["load_runner_state", "runner_state"]


def runner_state(runner: Runner) -> dict[str, Any]:
    """``Runner.state_dict()``: see there."""
    state: dict[str, Any] = {
        "model": unwrapped(runner.model).state_dict(),
        "optimizer": runner.optimizer.state_dict(),
        "counters": {"epoch": runner.epoch, "iter": runner.iter, "inner_iter": runner.inner_iter},
        "metrics": dict(runner.metrics),
        # A run stopped early (EarlyStopping, NaNGuard) must stay stopped when resumed
        # from a checkpoint taken after stop(), or it would train on past its end.
        "stop_reason": runner.stop_reason,
        # Whether the optimizer has stepped, as torch's schedulers track it: a run
        # resumed before its first step since would otherwise be told its first
        # scheduler step comes before any optimizer step.
        "optimizer_stepped": bool(getattr(runner.optimizer, "_opt_called", False)),
        "aspects": {},
    }
    if runner.scheduler is not None:
        state["scheduler"] = runner.scheduler.state_dict()
    for aspect in runner.aspects:
        own = getattr(aspect, "state_dict", None)
        if callable(own):
            state["aspects"][aspect.name] = own()
    # An aspect may rearrange the whole state (EMA puts the weights it validates
    # under "model"); "packed" lists those that did, in order, for load_state_dict to
    # undo them in reverse (rearrangements stack: two EMAs exchange in turn).
    for aspect in runner.aspects:
        pack = getattr(aspect, "pack_state", None)
        if callable(pack):
            packed = pack(state)
            if packed is not state:
                state = {**packed, "packed": [*state.get("packed", ()), aspect.name]}
    return state


def load_runner_state(runner: Runner, state: Mapping[str, Any]) -> None:
    """``Runner.load_state_dict()``: restore what ``runner_state`` gathered."""
    from .aspects._ema import unpack_orphan

    aspects = {aspect.name: aspect for aspect in runner.aspects}
    packed = list(state.get("packed", ()))
    for name in reversed(packed):  # the exact reverse of the packing
        unpack = getattr(aspects.get(name), "unpack_state", None)
        # Packed by an EMA aspect this runner does not have: the live weights go back
        # under "model" all the same, or training would go on from the average.
        state = unpack(state) if callable(unpack) else unpack_orphan(state, name)
    for aspect in reversed(runner.aspects):
        unpack = getattr(aspect, "unpack_state", None)
        if callable(unpack) and aspect.name not in packed:
            state = unpack(state)
    for name in [n for n in state.get("aspects", {}) if n not in aspects]:
        state = unpack_orphan(state, name)  # a state saved without "packed"
    model = unwrapped(runner.model)
    model.load_state_dict(without_wrapper_prefix(state["model"], model))
    runner.optimizer.load_state_dict(state["optimizer"])
    if runner.scheduler is not None and "scheduler" in state:
        runner.scheduler.load_state_dict(state["scheduler"])
    counters = state["counters"]
    runner.epoch = int(counters["epoch"])
    runner.iter = int(counters["iter"])
    runner.inner_iter = int(counters["inner_iter"])
    runner.metrics = dict(state.get("metrics", {}))
    runner.stop_reason = state.get("stop_reason")
    if state.get("optimizer_stepped", runner.iter > 0):  # older checkpoints: by the counters
        runner.optimizer._opt_called = True  # type: ignore[attr-defined]  # torch's own flag
    saved = state.get("aspects", {})
    for aspect in runner.aspects:
        load = getattr(aspect, "load_state_dict", None)
        if callable(load) and aspect.name in saved:
            load(saved[aspect.name])
