"""Ordering of advice within a stage, and the precompiled chain a join point dispatches.

A ``Chain`` is immutable: registrations build a new one and swap it in with one attribute
store, so a call that already read the old chain finishes with it and no call ever sees a
half-built chain.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import Any

from ._advice import Advice
from .errors import OrderingCycleError

__all__ = ["EMPTY_CHAIN", "STAGES", "Chain", "order_stage"]

STAGES = ("before", "around", "after", "on_error")


class Chain:
    """The compiled advice of one join point: a tuple of callables per stage."""

    __slots__ = ("after", "around", "before", "entries", "on_error", "skipped")

    def __init__(
        self,
        entries: dict[str, tuple[Advice, ...]],
        compiled: dict[str, tuple[Callable[..., Any], ...]],
        skipped: dict[Advice, str] | None = None,
    ) -> None:
        self.entries = entries
        self.before = compiled.get("before", ())
        self.around = compiled.get("around", ())
        self.after = compiled.get("after", ())
        self.on_error = compiled.get("on_error", ())
        self.skipped = skipped or {}

    def __bool__(self) -> bool:
        return bool(self.before or self.around or self.after or self.on_error)


EMPTY_CHAIN = Chain({}, {})


def _key(advice: Advice) -> tuple[int, int]:
    return (advice.priority, advice.seq)


def order_stage(advices: Sequence[Advice]) -> list[Advice]:
    """Order one stage: ascending priority, ties by registration, then the order constraints.

    Constraints are edges (``a.order_after`` names ``b`` => ``b`` runs before ``a``); a
    topological sort that always takes the smallest sort key among the ready advice keeps
    priorities wherever the constraints allow. The advice that states a constraint is the
    one that moves: ``order_after`` waits behind its target, ``order_before`` moves up to
    just before its target (it takes the target's key), so advice that states nothing keeps
    its place. A cycle raises ``OrderingCycleError``.
    """
    ordered = sorted(advices, key=_key)
    if not any(a.order_after or a.order_before for a in ordered):
        return ordered
    successors, waits_for, moves_before, indegree = _constraints(ordered)
    keys = _sort_keys(ordered, waits_for, moves_before)
    ready = [(keys[i], i) for i in range(len(ordered)) if indegree[i] == 0]
    heapq.heapify(ready)
    result: list[Advice] = []
    while ready:
        _, i = heapq.heappop(ready)
        result.append(ordered[i])
        for k in successors[i]:
            indegree[k] -= 1
            if indegree[k] == 0:
                heapq.heappush(ready, (keys[k], k))
    if len(result) < len(ordered):
        cycle = _find_cycle(successors, [i for i in range(len(ordered)) if indegree[i] > 0])
        raise _cycle_error([ordered[i] for i in cycle])
    return result


def _constraints(
    ordered: list[Advice],
) -> tuple[dict[int, list[int]], dict[int, list[int]], dict[int, list[int]], list[int]]:
    """The order constraints among ``ordered`` as edges between positions.

    ``successors[j]`` runs after ``j``; ``waits_for[i]`` are the targets of ``i``'s
    ``order_after``; ``moves_before[j]`` the advice whose ``order_before`` names ``j``;
    ``indegree[i]`` counts the advice ``i`` must follow.
    """
    successors: dict[int, list[int]] = {i: [] for i in range(len(ordered))}
    waits_for: dict[int, list[int]] = {i: [] for i in range(len(ordered))}
    moves_before: dict[int, list[int]] = {i: [] for i in range(len(ordered))}
    indegree = [0] * len(ordered)
    for i, a in enumerate(ordered):
        for j, b in enumerate(ordered):
            if i != j and (b.labels & set(a.order_after) or a.labels & set(b.order_before)):
                successors[j].append(i)  # b before a
                indegree[i] += 1
                if b.labels & set(a.order_after):
                    waits_for[i].append(j)
                if a.labels & set(b.order_before):
                    moves_before[j].append(i)
    return successors, waits_for, moves_before, indegree


def _cycle_error(cycle: list[Advice]) -> OrderingCycleError:
    """The error for constraints that form ``cycle`` (its first advice repeated last)."""
    names = tuple(_label(advice) for advice in cycle)
    return OrderingCycleError(
        "order_after/order_before constraints form a cycle: "
        + " -> ".join(names)
        + "; remove one of these constraints or use priorities instead",
        cycle=names,
    )


def _sort_keys(
    ordered: list[Advice], waits_for: dict[int, list[int]], moves_before: dict[int, list[int]]
) -> list[tuple[int, int]]:
    """Sort keys that move only the advice stating a constraint, and only as far as needed.

    ``wait``: advice with ``order_after`` sorts with the last of its targets (it waits behind
    them). ``pull``: advice with ``order_before`` sorts with the first of its targets, as
    placed by ``wait`` (it moves up to just before them). Back edges of a cycle are ignored
    here; the caller reports the cycle.
    """
    wait: dict[int, tuple[int, int]] = {}
    pull: dict[int, tuple[int, int]] = {}

    def waited(i: int, path: frozenset[int]) -> tuple[int, int]:
        if i not in wait:
            keys = [waited(j, path | {i}) for j in waits_for[i] if j not in path]
            wait[i] = max([_key(ordered[i]), *keys])
        return wait[i]

    def pulled(i: int, path: frozenset[int]) -> tuple[int, int]:
        if i not in pull:
            keys = [pulled(k, path | {i}) for k in moves_before[i] if k not in path]
            pull[i] = min([waited(i, frozenset()), *keys])
        return pull[i]

    return [pulled(i, frozenset()) for i in range(len(ordered))]


def _label(advice: Advice) -> str:
    return advice.aspect_name or advice.name


def _find_cycle(successors: dict[int, list[int]], remaining: list[int]) -> list[int]:
    # Walk predecessors: every advice left unsorted has one that is also left (a walk along
    # successors could end at advice that merely waits behind a cycle).
    left = set(remaining)
    predecessors = {i: [j for j in remaining if i in successors[j]] for i in remaining}
    start = remaining[0]
    path = [start]
    seen = {start: 0}
    node = start
    while True:
        node = next(j for j in predecessors[node] if j in left)
        if node in seen:
            return [*path[seen[node] :], node][::-1]
        seen[node] = len(path)
        path.append(node)


def _once_per_aspect(advices: list[Advice], key: object) -> list[Advice]:
    """``advices`` less the repeats of one aspect's method: two weaves that overlap (a glob
    and a name in it) each register the aspect's advice, and the aspect should run once
    per call (both registrations stay, so removing either keeps the other's advice).

    A repeat shares the filter state (``every=`` / ``once=`` counters) of the advice kept
    at join point ``key``, so when that one is removed the repeat takes over its count:
    ``once=True`` does not run again, ``every=`` keeps its beat."""
    seen: dict[tuple[Any, ...], Advice] = {}
    kept = []
    for advice in advices:
        if advice.aspect is not None:
            mark = (  # the same method with the same options: one mark, registered twice
                id(advice.aspect),
                getattr(advice.fn, "__func__", advice.fn),
                advice.priority,
                advice.every,
                advice.window,
                advice.once,
                # A bound method (advice_options' ``self.check``) is made anew each time:
                # the same one is the same object and function.
                id(getattr(advice.when, "__self__", advice.when)),
                getattr(advice.when, "__func__", None),
                advice.rank,
                advice.errors,
                advice.order_after,
                advice.order_before,
            )
            first = seen.get(mark)
            if first is not None:
                first.share_filters(advice, key)
                continue
            seen[mark] = advice
        kept.append(advice)
    return kept


def build_chain(key: object, advices: Sequence[Advice], *, is_async: bool) -> Chain:
    """Order and compile ``advices`` for the join point ``key``.

    Async advice cannot run inside a synchronous call; it is left out and reported.
    """
    entries: dict[str, tuple[Advice, ...]] = {}
    compiled: dict[str, tuple[Callable[..., Any], ...]] = {}
    skipped: dict[Advice, str] = {}
    for stage in STAGES:
        stage_advice = _once_per_aspect([a for a in advices if a.kind == stage], key)
        if not stage_advice:
            continue
        ordered = order_stage(stage_advice)
        usable = []
        for advice in ordered:
            if advice.is_async and not is_async:
                skipped[advice] = "async advice on a synchronous join point"
            else:
                usable.append(advice)
        entries[stage] = tuple(ordered)
        compiled[stage] = tuple(a.compiled(key) for a in usable)
    return Chain(entries, compiled, skipped)
