"""Process-wide state: join points, weavers, and the matching between advice and points.

Every change goes through here under one lock. A change computes the new chains of all
join points it touches first (which is where an ordering cycle is found) and only then
commits them, so a refused registration leaves nothing half-applied.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ._chain import build_chain, order_stage
from ._context import Event
from ._fork import reinit_after_fork

if TYPE_CHECKING:
    from ._advice import Advice
    from ._joinpoint import JoinPoint
    from ._weaver import Weaver

__all__ = ["LOCK", "REGISTRY", "Registry"]

LOCK = reinit_after_fork(threading.RLock())


class Registry:
    """All join points and global weavers of the process (held weakly)."""

    def __init__(self) -> None:
        self.joinpoints: weakref.WeakSet[JoinPoint] = weakref.WeakSet()
        self.weavers: weakref.WeakSet[Weaver] = weakref.WeakSet()
        self.seq = itertools.count()
        self.event_version = 0

    # -- scope ----------------------------------------------------------------------------

    def weavers_of(self, jp: JoinPoint) -> list[Weaver]:
        """The weavers whose advice may apply to ``jp``: the global ones and its own."""
        found = list(self.weavers)
        found.extend(w for w in jp.local_weavers if w not in found)
        return found

    def points_of(self, weaver: Weaver) -> list[JoinPoint]:
        """The join points advice of ``weaver`` may apply to."""
        if weaver.is_global:
            return list(self.joinpoints)
        return [jp for jp in self.joinpoints if weaver in jp.local_weavers]

    # -- changes --------------------------------------------------------------------------

    def _commit(self, changes: dict[JoinPoint, list[Advice]]) -> None:
        chains = {
            jp: build_chain(jp, advices, is_async=jp.is_async) for jp, advices in changes.items()
        }
        for jp, advices in changes.items():
            old = set(map(id, jp.advice))
            new = set(map(id, advices))
            for advice in jp.advice:
                if id(advice) not in new:
                    advice.forget(jp)
                    advice.points.discard(jp)
            for advice in advices:
                if id(advice) not in old:
                    advice.points.add(jp)
            jp.advice = advices
            jp.set_chain(chains[jp])

    def recompile(self) -> None:
        """Compile the advice of every join point again (``track_calls`` switched)."""
        with LOCK:
            points = list(self.joinpoints)
            for jp in points:
                for advice in jp.advice:
                    advice.recompile(jp)
            self._commit({jp: list(jp.advice) for jp in points})  # the same advice

    def add_joinpoint(self, jp: JoinPoint) -> None:
        """Make ``jp`` known; advice registered earlier that matches it applies now."""
        with LOCK:
            matched = [
                advice
                for weaver in self.weavers_of(jp)
                for advice in weaver.registered
                if advice.kind != "on" and _matches(advice, jp)
            ]
            self._commit({jp: matched})
            self.joinpoints.add(jp)

    def drop_joinpoint(self, jp: JoinPoint) -> None:
        with LOCK:
            self.joinpoints.discard(jp)
            self._commit({jp: []})

    def rename(
        self, jp: JoinPoint, add: tuple[str, ...] = (), remove: tuple[str, ...] = ()
    ) -> None:
        """Change the names ``jp`` answers to and re-match advice against them."""
        with LOCK:
            old_counts = jp._name_counts.copy()
            jp.add_names(add)
            jp.remove_names(remove)
            try:
                self._rematch([jp])
            except Exception:
                jp._name_counts = old_counts
                jp.names = frozenset(old_counts)
                raise

    def _rematch(self, points: Iterable[JoinPoint]) -> None:
        changes = {}
        for jp in points:
            if jp not in self.joinpoints:
                continue
            changes[jp] = [
                advice
                for weaver in self.weavers_of(jp)
                for advice in weaver.registered
                if advice.kind != "on" and _matches(advice, jp)
            ]
        self._commit(changes)

    def add_advice(self, weaver: Weaver, advices: list[Advice], *, again: bool = False) -> None:
        """Register ``advices`` on ``weaver`` and apply them to every matching join point.

        ``again``: they were registered before and are put back where they were among
        advice of the same priority (their first registration's order), not last."""
        with LOCK:
            for advice in advices:
                if not again or advice.seq < 0:
                    advice.seq = next(self.seq)
            self._check_events(weaver, advices)  # raises OrderingCycleError: nothing changed
            changes: dict[JoinPoint, list[Advice]] = {}
            for jp in self.points_of(weaver):
                hits = [a for a in advices if a.kind != "on" and _matches(a, jp)]
                if hits:
                    changes[jp] = [*jp.advice, *hits]
            self._commit(changes)  # raises OrderingCycleError before anything changed
            weaver.registered.extend(advices)
            if any(a.kind == "on" for a in advices):
                self.event_version += 1

    def _check_events(self, weaver: Weaver, advices: list[Advice]) -> None:
        """Refuse ``on`` advice whose order constraints close a cycle among the subscribers
        of an event, as a join point refuses one, instead of every ``emit()`` of it raising.

        An event's subscribers are only worked out when it is emitted, so this checks the
        names the new subscriptions spell out and the names emitted so far.
        """
        new = [a for a in advices if a.kind == "on" and a.pointcut is not None]
        if not new:
            return
        weavers = [*self.weavers, *([] if weaver in self.weavers else [weaver])]
        subscribers = [a for w in weavers for a in w.registered if a.kind == "on"] + new
        if not any(a.order_after or a.order_before for a in subscribers):
            return
        names = {n for a in new if a.pointcut is not None for n in a.pointcut.literal_names()}
        names.update(n for w in weavers for n in w._events)
        for name in names:
            point = Event(name, {})
            order_stage([a for a in subscribers if subscribes(a, point)])

    def remove_advice(self, weaver: Weaver, advices: list[Advice]) -> None:
        with LOCK:
            gone = set(map(id, advices))
            weaver.registered[:] = [a for a in weaver.registered if id(a) not in gone]
            changes: dict[JoinPoint, list[Advice]] = {}
            for advice in advices:
                for jp in list(advice.points):
                    base = changes.get(jp, jp.advice)
                    changes[jp] = [a for a in base if id(a) not in gone]
            self._commit(changes)
            if any(a.kind == "on" for a in advices):
                self.event_version += 1


def _matches(advice: Advice, jp: JoinPoint) -> bool:
    """Whether ``advice`` applies to ``jp``. A pointcut that raises there (a predicate
    that assumes a name shape) matches nothing and is logged: it must not break the
    declaration or weave of an unrelated join point, nor the registration of the advice
    at the join points it does match."""
    pointcut = advice.pointcut
    try:
        return pointcut is not None and pointcut.matches(jp)
    except Exception:
        reported = _REPORTED.setdefault(advice, set())
        if jp.name in reported:  # once per advice and join point, not at every rematch
            return False
        reported.add(jp.name)
        from ._log import get_logger

        get_logger().warning(
            POINTCUT_FAILED,
            advice=advice.name,
            aspect=advice.aspect_name,
            pointcut=repr(pointcut),
            joinpoint=jp.name,
            hint="the pointcut raised for this join point, so it does not apply there; "
            "make a predicate return False for names it does not expect",
            exc_info=True,
        )
        return False


def subscribes(
    advice: Advice, point: Event, failed: list[tuple[Advice, Exception]] | None = None
) -> bool:
    """Whether ``advice`` subscribes to ``point``; a pointcut that raises does not (it is
    added to ``failed``, for ``emit()`` to log).

    Subscriptions are matched once per event name, against an event without payload (the
    list is cached until subscriptions change), so a predicate that reads the payload
    cannot judge it: it must not break ``emit()`` for every other subscriber.
    """
    try:
        return advice.pointcut is not None and advice.pointcut.matches(point)
    except Exception as exc:
        if failed is not None:
            failed.append((advice, exc))
        return False


#: Logged when a pointcut raises while it is matched against a join point.
POINTCUT_FAILED = "joinpoint.pointcut_failed"
_REPORTED: weakref.WeakKeyDictionary[Advice, set[str]] = weakref.WeakKeyDictionary()

REGISTRY = Registry()
