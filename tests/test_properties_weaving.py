"""Stateful properties of weaving: any sequence of weaves, registrations, removals, weaver
closes and calls, over every kind of target at once, runs exactly the advice a simple
model says, in the documented order, and leaves the originals in place when it is over.

A run takes about 20 s; ASPECTHOOK_PROPERTY_EXAMPLES=2000 in the environment searches
longer (minutes), for hunting."""

from __future__ import annotations

import asyncio
import functools
import gc
import inspect
import os
import traceback
import types
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import _prop_targets as mod
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    rule,
)
from structlog.testing import capture_logs

import aspecthook as ah
from aspecthook.errors import InvalidOptionError

M = "_prop_targets"
LOG = mod.LOG
SKIPPED, RECOVERED = "skipped-value", "recovered-value"

#: Each site: what weave() is given, and the join points (model keys) it reaches.
SITES: dict[str, tuple[Callable[[], Any], tuple[str, ...]]] = {
    "plain": (lambda: mod.plain, ("plain",)),
    "plain path": (lambda: f"{M}.plain", ("plain",)),
    "Base.m": (lambda: mod.Base.m, ("Base.m",)),
    "Base+.m": (lambda: f"{M}.Base+.m", ("Base.m", "Sub.m", "made later")),
    "Sub.m path": (lambda: f"{M}:Sub.m", ("Sub.m",)),
    "cm": (lambda: mod.Base.cm, ("cm",)),
    "sm path": (lambda: f"{M}.Base.sm", ("sm",)),
    "instance": (lambda: mod.SOLO.m, ("solo",)),
    "coro": (lambda: mod.coro, ("coro",)),
    "gen": (lambda: mod.gen, ("gen",)),
    "declared": (lambda: mod.declared, ("declared",)),
    "class": (lambda: mod.Base, ("Base.m", "cm", "sm")),
    "subclass": (lambda: mod.Sub, ("Sub.m",)),  # its own methods only
    "whole instance": (lambda: mod.SOLO, ("solo",)),
    "module": (lambda: mod, ("plain", "coro", "gen", "declared")),
}

#: Join point names as describe() lists them.
POINT_NAMES = {
    "plain": f"{M}.plain",
    "Base.m": f"{M}.Base.m",
    "Sub.m": f"{M}.Sub.m",
    "cm": f"{M}.Base.cm",
    "sm": f"{M}.Base.sm",
    "solo": f"{M}.Solo.m",
    "coro": f"{M}.coro",
    "gen": f"{M}.gen",
    "declared": "props.declared",
}


def _run_coro(x: int) -> Any:
    return asyncio.run(mod.coro(x))


#: Each call: (join point it reaches, how to make it, its result for argument x).
CALLS: dict[str, tuple[str, Callable[[int], Any], Callable[[int], Any]]] = {
    "plain": ("plain", lambda x: mod.plain(x), lambda x: x + 1),
    "plain(x=)": ("plain", lambda x: mod.plain(x=x), lambda x: x + 1),
    "Base().m": ("Base.m", lambda x: mod.Base().m(x), lambda x: x + 10),
    "Base().m(x=)": ("Base.m", lambda x: mod.Base().m(x=x), lambda x: x + 10),
    "Sub().m": ("Sub.m", lambda x: mod.Sub().m(x), lambda x: x + 20),
    "Base.cm": ("cm", lambda x: mod.Base.cm(x), lambda x: ("Base", x)),
    "Sub.cm": ("cm", lambda x: mod.Sub.cm(x), lambda x: ("Sub", x)),
    "Base.sm": ("sm", lambda x: mod.Base.sm(x), lambda x: -x),
    "Base().sm(x=)": ("sm", lambda x: mod.Base().sm(x=x), lambda x: -x),
    "SOLO.m": ("solo", lambda x: mod.SOLO.m(x), lambda x: x + 30),
    "other Solo().m": ("", lambda x: mod.Solo().m(x), lambda x: x + 30),
    "coro": ("coro", _run_coro, lambda x: x + 40),
    "gen": ("gen", lambda x: mod.gen(x), lambda x: [x, x + 1]),
    "declared": ("declared", lambda x: mod.declared(x), lambda x: x + 50),
}

PRIORITIES = (10, 30, 50, 50, 70, "HIGH", "low")
KINDS = ("before", "after", "on_error", "around")


@dataclass(eq=False)
class Live:
    """The model of one advice: what it is, where it reaches, whether it is in force."""

    number: int
    name: str
    kind: str
    priority: int
    seq: int
    weaver: int  # index into the machine's weavers (0: the default)
    points: tuple[str, ...]
    behaviour: str = "plain"  # 'plain' | 'faulty' | 'skip' | 'recover'
    every: int | None = None
    once: bool = False
    order: tuple[str, str] | None = None  # ('order_after' | 'order_before', name)
    labels: frozenset[str] = frozenset()
    calls: dict[str, int] = field(default_factory=dict)  # matching calls per join point
    fired: dict[str, int] = field(default_factory=dict)  # calls every= let by, per point
    alive: bool = True

    def passes(self, point: str) -> bool:
        """Count one matching call at ``point``; whether the filters let the advice run:
        ``every=n`` on each n-th call, ``once=True`` on the first call every= lets by."""
        n = self.calls[point] = self.calls.get(point, 0) + 1
        if self.every and n % self.every:
            return False
        fired = self.fired[point] = self.fired.get(point, 0) + 1
        return not self.once or fired == 1


@dataclass(eq=False)
class Weave:
    """The model of one weave (or one registration by name): its advice and reach."""

    handle: ah.Handle | ah.Advice
    advice: list[Live]
    points: tuple[str, ...]
    weaver: int
    site: str = ""
    alive: bool = True


def _priority(value: int | str) -> int:
    return int(ah.Priority[value.upper()]) if isinstance(value, str) else value


def _make_fn(live: Live) -> Callable[..., Any]:
    """The advice function of ``live``: it logs ``(kind, number)`` and does its behaviour."""
    number, kind, behaviour = live.number, live.kind, live.behaviour
    if kind == "around":

        def around(ctx: ah.CallContext, proceed: Callable[..., Any]) -> Any:
            LOG.append(("in", number))
            if ctx.joinpoint.is_async:  # proceed() is awaitable there: finish in a coroutine
                return _finish(proceed(), number)
            result = proceed()
            LOG.append(("out", number))
            return result

        around.__name__ = around.__qualname__ = live.name  # weave() names advice by it
        return around

    def advice(ctx: ah.CallContext) -> None:
        LOG.append((kind, number))
        if behaviour == "faulty":
            raise RuntimeError(f"advice {number} failed")
        if behaviour == "skip":
            ctx.skip(SKIPPED)
        elif behaviour == "recover":
            ctx.recover(RECOVERED)

    advice.__name__ = advice.__qualname__ = live.name
    return advice


async def _finish(awaitable: Any, number: int) -> Any:
    result = await awaitable
    LOG.append(("out", number))
    return result


class Multi(ah.Aspect):
    """An aspect with advice at three stages, woven into whatever target it is given."""

    def __init__(self, number: int, **options: Any) -> None:
        super().__init__(**options)
        self.number = number

    @ah.before()
    def first(self, ctx: ah.CallContext) -> None:
        LOG.append(("before", self.number))

    @ah.after()
    def last(self, ctx: ah.CallContext) -> None:
        LOG.append(("after", self.number + 1))

    @ah.on_error()
    def failed(self, ctx: ah.CallContext) -> None:
        LOG.append(("on_error", self.number + 2))


advice_spec = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(KINDS),
        "priority": st.sampled_from(PRIORITIES),
        "every": st.sampled_from([None, None, None, 2, 3]),
        "once": st.sampled_from([False, False, False, True]),
        "behaviour": st.sampled_from(["plain", "plain", "plain", "faulty", "special"]),
        "order": st.sampled_from([None, None, None, None])
        | st.tuples(st.sampled_from(["order_after", "order_before"]), st.integers(0, 3)),
    }
)


class WeavingMachine(RuleBasedStateMachine):
    """Weaves, registrations, removals, weaver closes and calls, against a model."""

    handles = Bundle("handles")

    def __init__(self) -> None:
        super().__init__()
        self.weavers: list[ah.Weaver] = [ah.default_weaver]
        self.weaves: list[Weave] = []
        self.numbers = 0
        self.seq = 0
        self.made: list[type[mod.Base]] = []  # subclasses of Base made between the steps
        LOG.clear()
        self.logs = capture_logs()  # errors='log' advice fails on purpose: keep it quiet
        self.logs.__enter__()

    @initialize()
    def private_weaverss(self) -> None:
        """Weaver 1 is private and global, weaver 2 private and local."""
        self.weavers += [ah.Weaver("props"), ah.Weaver("props-local", local=True)]

    # -- model helpers ---------------------------------------------------------------------

    def _live(self) -> list[Live]:
        """The advice in force. The local weaver's advice registered by name reaches the
        declared join point only while a weave through that weaver reaches it."""
        local = any(
            w.alive and w.weaver == 2 and "declared" in w.points
            for w in self.weaves
            if not isinstance(w.handle, ah.Advice)
        )
        return [
            a
            for w in self.weaves
            if w.alive and (local or w.weaver != 2 or not isinstance(w.handle, ah.Advice))
            for a in w.advice
            if a.alive
        ]

    def _woven_points(self) -> set[str]:
        return {
            p
            for w in self.weaves
            if w.alive and not isinstance(w.handle, ah.Advice)
            for p in w.points
        }

    def _new_live(self, spec: dict[str, Any], weaver: int, points: tuple[str, ...]) -> Live:
        number = self.numbers
        self.numbers += 1
        kind = spec["kind"]
        behaviour = spec["behaviour"]
        if behaviour == "special":
            behaviour = {"before": "skip", "on_error": "recover"}.get(kind, "plain")
        if kind == "around" and behaviour == "faulty":
            behaviour = "plain"
        # Only advice already in force: ordering advice against itself is refused when
        # it is registered, so the model never names the new advice here.
        names = [label for a in self._live() for label in sorted(a.labels)]
        order = None
        if spec["order"] is not None and names:  # one constraint each: no cycle can form
            option, index = spec["order"]
            order = (option, names[-1 - index % len(names)])
        self.seq += 1
        return Live(
            number=number,
            name=f"a{number}",
            kind=kind,
            priority=_priority(spec["priority"]),
            seq=self.seq,
            weaver=weaver,
            points=points,
            behaviour=behaviour,
            every=spec["every"],
            once=spec["once"],
            order=order,
            labels=frozenset({f"a{number}"}),
        )

    def _options(self, live: Live, spec: dict[str, Any]) -> dict[str, Any]:
        """The options of ``live``, as weave() takes them (its ``name=`` is an alias)."""
        opts: dict[str, Any] = {"priority": spec["priority"]}
        if live.every:
            opts["every"] = live.every
        if live.once:
            opts["once"] = True
        if live.behaviour == "faulty":
            opts["errors"] = "log"
        if live.order is not None:
            opts[live.order[0]] = live.order[1]
        return opts

    # -- rules -----------------------------------------------------------------------------

    @rule(
        target=handles,
        site=st.sampled_from(sorted(SITES)),
        spec=advice_spec,
        weaver=st.integers(0, 2),
    )
    def weave_advice(self, site: str, spec: dict[str, Any], weaver: int) -> Weave:
        """weave(target, <kind>=fn, **options) on the default or the private weaver."""
        where, points = SITES[site]
        live = self._new_live(spec, weaver, points)
        fn = _make_fn(live)
        handle = ah.weave(
            where(), weaver=self.weavers[weaver], **{live.kind: fn}, **self._options(live, spec)
        )
        return self._added(Weave(handle, [live], points, weaver, site))

    @rule(
        target=handles,
        site=st.sampled_from(sorted(SITES)),
        priority=st.sampled_from(PRIORITIES),
        weaver=st.integers(0, 2),
    )
    def weave_aspect(self, site: str, priority: int | str, weaver: int) -> Weave:
        """weave(target, aspect) with an aspect whose advice runs at three stages."""
        where, points = SITES[site]
        number = self.numbers
        self.numbers += 3
        self.seq += 1
        lives = [
            Live(
                number + i,
                f"asp{number}.{method}",
                kind,
                _priority(priority),
                self.seq + i,
                weaver,
                points,
                labels=frozenset({f"asp{number}", f"asp{number}.{method}"}),
            )
            for i, (kind, method) in enumerate(
                [("before", "first"), ("after", "last"), ("on_error", "failed")]
            )
        ]
        self.seq += 2
        aspect = Multi(number, name=f"asp{number}", priority=priority)
        handle = ah.weave(where(), aspect, weaver=self.weavers[weaver])
        return self._added(Weave(handle, lives, points, weaver, site))

    @rule(target=handles, spec=advice_spec, weaver=st.integers(0, 2))
    def register_by_name(self, spec: dict[str, Any], weaver: int) -> Weave:
        """weaver.<kind>('props.declared', **options)(fn): advice on the declared point."""
        live = self._new_live(spec, weaver, ("declared",))
        decorate = getattr(self.weavers[weaver], live.kind)
        options = self._options(live, spec)
        advice = decorate("props.declared", name=live.name, **options)(_make_fn(live))
        return self._added(Weave(advice, [live], ("declared",), weaver))

    def _added(self, weave: Weave) -> Weave:
        self.weaves.append(weave)
        return weave

    @rule(weave=handles)
    def remove(self, weave: Weave) -> None:
        """handle.remove() of any weave made so far: removed already or not."""
        weave.handle.remove()
        weave.alive = False

    @rule(weave=consumes(handles))
    def unweave(self, weave: Weave) -> None:
        """unweave(handle), then again: the second does nothing."""
        ah.unweave(weave.handle)
        weave.alive = False
        ah.unweave(weave.handle)

    @rule(index=st.integers(1, 2))
    def close_private_weaver(self, index: int) -> None:
        """Weaver.close(): everything through it comes off; a new private one replaces it."""
        self.weavers[index].close()
        for weave in self.weaves:
            if weave.weaver == index:
                weave.alive = False
                weave.weaver = -1
        self.weavers[index] = ah.Weaver(self.weavers[index].name, local=index == 2)

    @rule(weaver=st.integers(0, 2))
    def clear_weaver(self, weaver: int) -> None:
        """Weaver.clear(): everything through that weaver comes off; it stays usable."""
        self.weavers[weaver].clear()
        for weave in self.weaves:
            if weave.weaver == weaver:
                weave.alive = False

    @rule(
        site=st.sampled_from(sorted(SITES)),
        spec=advice_spec,
        call=st.sampled_from(sorted(CALLS)),
        x=st.integers(-3, 3),
    )
    def with_woven(self, site: str, spec: dict[str, Any], call: str, x: int) -> None:
        """with woven(...): the advice runs inside the block and not after it."""
        where, points = SITES[site]
        live = self._new_live(spec, 0, points)
        fn = _make_fn(live)
        with ah.woven(where(), **{live.kind: fn}, **self._options(live, spec)) as handle:
            weave = self._added(Weave(handle, [live], points, 0, site))
            self.check_call(call, x)
        weave.alive = False

    @rule(call=st.sampled_from(sorted(CALLS)), x=st.integers(-3, 3))
    def call_target(self, call: str, x: int) -> None:
        """A call of one target, normal (x >= 0) or raising (x < 0)."""
        self.check_call(call, x)

    # -- checks ----------------------------------------------------------------------------

    @rule()
    def make_subclass(self) -> None:
        """A subclass of Base with its own m, created between the steps (type(...))."""
        if len(self.made) < 4:
            self.made.append(_subclass(len(self.made)))

    @rule(index=st.integers(0, 3), x=st.integers(-3, 3))
    def call_subclass(self, index: int, x: int) -> None:
        """A call of a subclass made later: Base+.m weaves reach it, whenever made."""
        if self.made:
            cls = self.made[index % len(self.made)]
            own = "m" in vars(cls)  # else it runs the m it inherits, Base's
            point = f"{M}.{cls.__name__}" if own else "Base.m"
            offset = 60 if own else 10
            made = (point, lambda x: cls().m(x), lambda x: x + offset)
            self.check_call(cls.__name__, x, made, reach="made later" if own else "Base.m")

    def check_call(
        self,
        call: str,
        x: int,
        made: tuple[str, Callable[[int], Any], Callable[[int], Any]] | None = None,
        reach: str | None = None,
    ) -> None:
        point, make, result = made or CALLS[call]
        here = [a for a in self._live() if (reach or point) in a.points]
        expected, outcome = self._expected(point, here, x, result(x))
        LOG.clear()
        try:
            got = make(x)
            if isinstance(got, types.GeneratorType):
                got = list(got)
        except ValueError as exc:
            got = exc
        log = list(LOG)
        if outcome == "raise":
            assert isinstance(got, ValueError), (call, got)
            assert str(got) == f"bad {x}", (call, got)
            # The target's own exception, unchanged: raised where it was, nothing chained.
            assert traceback.extract_tb(got.__traceback__)[-1].name in ("_body", "gen")
            assert got.__context__ is None, (call, got.__context__)
        else:
            assert got == outcome, (call, got, outcome)
        assert sorted(log, key=repr) == sorted(expected, key=repr), (call, log, expected)
        entries = [e for e in log if isinstance(e, tuple)]
        for stage in ("before", "after", "on_error"):
            _check_order([n for k, n in entries if k == stage], here, stage)
        ins = [n for k, n in entries if k == "in"]
        _check_order(ins, here, "around")
        outs = [n for k, n in entries if k == "out"]
        assert outs == ins[::-1][: len(outs)] or outs == ins[::-1], (ins, outs)

    def _expected(self, point: str, here: list[Live], x: int, value: Any) -> tuple[list[Any], Any]:
        """The log entries the call makes (as a multiset) and its result or 'raise'."""
        log: list[Any] = []

        def stage(kind: str) -> list[Live]:
            return [a for a in here if a.kind == kind and a.passes(point)]

        skipped = False
        for a in stage("before"):
            log.append(("before", a.number))
            skipped = skipped or a.behaviour == "skip"
        fails = x < 0 and point != "gen"
        outcome: Any = SKIPPED if skipped else value
        if not skipped:
            arounds = stage("around")
            log.extend(("in", a.number) for a in arounds)
            if point != "gen":
                log.append("target")
            if fails:
                outcome = "raise"
                for a in _in_order(here, "on_error", point):
                    log.append(("on_error", a.number))
                    if a.behaviour == "recover":
                        outcome = RECOVERED
                        break
            else:
                log.extend(("out", a.number) for a in arounds)
        elif x < 0 and point == "gen":
            pass
        if outcome != "raise":
            log.extend(("after", a.number) for a in stage("after"))
        if point == "gen" and x < 0 and not skipped:
            outcome = "raise"
        return log, outcome

    @invariant()
    def originals_back_where_nothing_is_woven(self) -> None:
        """Each target with no weave left is the original object; woven ones wrap it."""
        now = mod._snapshot()
        woven = self._woven_points()
        checks = {
            "plain": "plain",
            "coro": "coro",
            "gen": "gen",
            "Base.m": "Base.m",
            "Sub.m": "Sub.m",
            "Base.cm": "cm",
            "Base.sm": "sm",
        }
        for key, point in checks.items():
            original = mod.ORIGINALS[key]
            if point not in woven:
                assert now[key] is original, key
            else:
                assert now[key].__wrapped__ is original, key
        assert now["declared"] is mod.ORIGINALS["declared"]
        following = any(w.alive and w.site == "Base+.m" for w in self.weaves)
        if not following:  # while it lasts, Base holds a hook on __init_subclass__
            assert now["Base.__dict__"] == mod.ORIGINALS["Base.__dict__"]
        assert now["Sub.__dict__"] == mod.ORIGINALS["Sub.__dict__"]
        if "solo" not in woven:
            assert now["SOLO.__dict__"] == mod.ORIGINALS["SOLO.__dict__"]
        for name in ("plain", "coro", "gen", "declared"):
            assert inspect.signature(getattr(mod, name)) == inspect.signature(
                mod.ORIGINALS[name]  # type: ignore[arg-type]
            )
        for cls in self.made:
            if "m" not in vars(cls):
                continue
            woven_here = any(w.alive and w.site == "Base+.m" for w in self.weaves)
            m = vars(cls)["m"]
            assert (m.__wrapped__ is cls.original) if woven_here else (m is cls.original)
        solo = mod.Solo()
        for now_, then in [
            (mod.Base.m, mod.ORIGINALS["Base.m"]),
            (mod.Base().m, functools.partial(mod.ORIGINALS["Base.m"], None)),  # type: ignore[arg-type]
            (mod.SOLO.m, solo.m),
            (mod.Base.cm, mod.ORIGINALS["Base.cm"].__get__(None, mod.Base)),  # type: ignore[attr-defined]
            (mod.Base.sm, mod.ORIGINALS["Base.sm"].__get__(None, mod.Base)),  # type: ignore[attr-defined]
        ]:
            assert inspect.signature(now_) == inspect.signature(then)
        assert inspect.iscoroutinefunction(mod.coro)
        assert inspect.isgeneratorfunction(mod.gen)

    @invariant()
    def describe_lists_the_live_advice(self) -> None:
        """describe() lists exactly the advice in force, per join point and stage."""
        rows = ah.describe()
        live = self._live()
        for point, name in POINT_NAMES.items():
            here = [a for a in live if point in a.points]
            for stage in KINDS:
                names = [a.name for a in here if a.kind == stage]
                try:
                    listed = rows.advice_names(name, stage)
                except InvalidOptionError:
                    listed = []
                assert sorted(listed) == sorted(names), (point, stage, listed, names)
                by_name = {a.name: a.number for a in here}
                _check_order([by_name[n] for n in listed], here, stage)
        # A global weaver reaches every join point: its describe() shows what runs there,
        # other weavers' advice included (docs/api.md).
        everything = [(r.joinpoint, r.stage, r.advice) for r in rows if r.joinpoint]
        for weaver in self.weavers[:2]:
            mine = [(r.joinpoint, r.stage, r.advice) for r in ah.describe(weaver=weaver)]
            assert [row for row in mine if row[0]] == everything

    def teardown(self) -> None:
        self.logs.__exit__(None, None, None)
        made = [weakref.ref(cls) for cls in self.made]
        del self.made[:]
        gc.collect()
        assert [ref() for ref in made] == [None] * len(made)  # weaves hold them weakly
        for weaver in self.weavers[1:]:
            weaver.close()
        for weave in self.weaves:
            weave.handle.remove()
        ah.default_weaver.clear()
        LOG.clear()
        assert mod._snapshot() == mod.ORIGINALS or all(
            mod._snapshot()[k] is v or mod._snapshot()[k] == v for k, v in mod.ORIGINALS.items()
        )


def _subclass(n: int) -> Any:
    def m(self: Any, x: int) -> int:
        mod._body(x)
        return x + 60

    # Made0 and Made3 are Base's, Made1 Sub's, with an m of their own; Made2 inherits m.
    parent, body = [(mod.Base, {"m": m}), (mod.Sub, {"m": m}), (mod.Base, {})][n % 3]
    cls: Any = type(f"Made{n}", (parent,), {**body, "__module__": M})
    cls.original = m
    return cls


def _in_order(here: list[Live], kind: str, point: str) -> Iterator[Live]:
    """Error advice in force at ``point`` whose filters pass, in the order it runs.

    Only used where no order constraint applies between them (see ``_check_order``):
    with constraints, the run order is checked there instead."""
    stage = [a for a in here if a.kind == kind]
    return (a for a in _ordered(stage) if a.passes(point))  # filters count as they run


def _ordered(stage: list[Live]) -> list[Live]:
    """One stage's advice in run order: a topological sort by (priority, registration)."""
    by_name = {label: a for a in stage for label in a.labels}
    waits: dict[int, list[Live]] = {a.number: [] for a in stage}
    for a in stage:
        other = by_name.get(a.order[1]) if a.order is not None else None
        if other is None:  # it names advice no longer in force here
            continue
        if a.order[0] == "order_after":
            waits[a.number].append(other)
        else:
            waits[other.number].append(a)
    result: list[Live] = []
    left = sorted(stage, key=lambda a: (a.priority, a.seq))
    while left:
        ready = [a for a in left if all(w in result for w in waits[a.number])]
        pick = ready[0]
        result.append(pick)
        left.remove(pick)
    return result


def _check_order(ran: list[int], here: list[Live], kind: str) -> None:
    """``ran`` (advice numbers, as they ran or are listed) keeps the documented order:
    each advice after the one its ``order_after`` names (before its ``order_before``'s),
    and the advice that states no constraint in ascending priority, ties in registration
    order."""
    stage = {a.number: a for a in here if a.kind == kind}
    labels = {label: a.number for a in stage.values() for label in a.labels}
    position = {n: i for i, n in enumerate(ran)}
    free = []
    for n in ran:
        a = stage[n]
        target = labels.get(a.order[1]) if a.order is not None else None
        if target is None:
            free.append(n)
        elif target in position:
            after = a.order is not None and a.order[0] == "order_after"
            assert (position[target] < position[n]) == after, (kind, ran, a.name, a.order)
    keys = [(stage[n].priority, stage[n].seq) for n in free]
    assert keys == sorted(keys), (kind, ran)


TestWeaving = WeavingMachine.TestCase
TestWeaving.settings = settings(
    max_examples=int(os.environ.get("ASPECTHOOK_PROPERTY_EXAMPLES", "40")),
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_nothing_leaks_from_a_dropped_target() -> None:
    """A class and instance woven by two weavers, dropped with the handles still held,
    are collected: handles and weavers hold them weakly."""
    private = ah.Weaver("props-gc")
    try:

        class Tmp:
            def m(self, x: int) -> int:
                return x

        obj = Tmp()
        handles = [
            ah.weave(Tmp, before=lambda ctx: None),
            ah.weave(obj, after=lambda ctx: None, weaver=private),
            ah.weave(obj.m, around=lambda ctx, proceed: proceed()),
        ]
        assert obj.m(1) == 1
        refs = [weakref.ref(Tmp), weakref.ref(obj)]
        del Tmp, obj
        gc.collect()
        assert [r() for r in refs] == [None, None]
        for handle in handles:
            handle.remove()
            handle.remove()
    finally:
        private.close()


@pytest.fixture(autouse=True)
def _clean_log() -> Any:
    LOG.clear()
    yield
    LOG.clear()


# -- regressions the properties found ----------------------------------------------------------


class _OnceAndEvery(ah.Aspect):
    """Advice with filters: once=, and every=2."""

    @ah.before(once=True)
    def first_call(self, ctx: ah.CallContext) -> None:
        LOG.append("once")

    @ah.after(every=2)
    def even_calls(self, ctx: ah.CallContext) -> None:
        LOG.append("every")


def test_filters_of_an_aspect_woven_twice_survive_removing_either_weave() -> None:
    """An aspect woven twice into one callable runs once per call, and its once= / every=
    advice keeps counting the callable's calls when either weave is removed: once=True
    does not run a second time, every=2 keeps its beat."""
    aspect = _OnceAndEvery()
    first = ah.weave(mod.plain, aspect)
    second = ah.weave(f"{M}.plain", aspect)
    try:
        for x in range(3):
            mod.plain(x)
        assert LOG.count("once") == 1
        assert LOG.count("every") == 1  # the 2nd call
        first.remove()
        LOG.clear()
        mod.plain(3)  # the 4th call of the callable: every=2 runs, once= does not
        mod.plain(4)
        assert LOG == ["target", "every", "target"]
    finally:
        first.remove()
        second.remove()


def test_filters_of_an_aspect_woven_through_two_weavers_survive_removing_one() -> None:
    """The same holds for an aspect woven through two weavers, whichever is removed."""
    aspect = _OnceAndEvery()
    private = ah.Weaver("props-private")
    first = ah.weave(mod.plain, aspect, weaver=private)
    try:
        mod.plain(0)
        second = ah.weave(f"{M}.plain", aspect)
        mod.plain(1)
        first.remove()
        LOG.clear()
        mod.plain(2)
        mod.plain(3)
        assert LOG == ["target", "target", "every"]
        second.remove()
    finally:
        private.close()


def test_an_instance_weave_keeps_the_class_proxy_it_was_put_around() -> None:
    """As docs/known-issues.md says: the class unwoven and woven again while an instance
    weave lasts, that instance runs its own advice only; removing it brings the class's."""
    first = ah.weave(mod.Solo.m, before=lambda ctx: LOG.append("class 1"))
    mine = ah.weave(mod.SOLO.m, before=lambda ctx: LOG.append("instance"))
    first.remove()
    again = ah.weave(mod.Solo.m, before=lambda ctx: LOG.append("class 2"))
    try:
        assert mod.SOLO.m(1) == 31
        assert mod.Solo().m(1) == 31
        assert LOG == ["instance", "target", "class 2", "target"]
        mine.remove()
        LOG.clear()
        assert mod.SOLO.m(1) == 31
        assert LOG == ["class 2", "target"]
    finally:
        mine.remove()
        again.remove()
    assert vars(mod.Solo)["m"] is mod.ORIGINALS["Solo.m"]
    assert "m" not in vars(mod.SOLO)
