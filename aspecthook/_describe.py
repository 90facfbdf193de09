"""``describe()``: what will run where, as data a program can read and a table to print."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from fnmatch import fnmatchcase
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ._chain import STAGES, order_stage
from ._context import Event
from ._pointcut import Glob, Name, NormalizedName, Pointcut, PointcutLike, as_pointcut
from ._registry import LOCK, REGISTRY
from ._rich import import_rich, render
from ._units import format_seconds
from .errors import InvalidOptionError, OrderingCycleError

if TYPE_CHECKING:
    from ._weaver import Weaver

__all__ = ["EVENTS", "Description", "Row", "describe"]

#: The stage of event subscribers' rows: their advice kind (``@on``, ``Weaver.on``).
EVENTS = "on"


@dataclass(frozen=True)
class Row:
    """One line of ``describe()``.

    A join point with no advice has one row with ``stage`` empty. Advice that matches no
    join point has ``joinpoint`` empty and a ``note`` (with a did-you-mean suggestion).
    A weave that is pending, skipped or failed has ``status`` saying so. ``calls`` and
    ``time_s`` are the advice's calls at this join point and the time they took, once
    ``track_calls()`` has counted them (None before); around advice's time leaves out the
    time inside ``proceed``. ``aliases`` are the join point's other names (``name=``).

    An event subscription has one row with ``stage`` ``'on'`` and ``joinpoint`` the
    pattern it subscribes to (``'checkpoint.*'``); ``order`` is its place in the run order
    of every subscription listed, so an event runs those it reaches in ascending ``order``.
    """

    joinpoint: str
    stage: str
    order: int
    advice: str
    priority: int | None
    aspect: str
    filters: str
    location: str
    status: str
    calls: int | None = None
    time_s: float | None = None
    failures: int = 0
    note: str = ""
    aliases: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_TITLE = "aspecthook: join points and advice"

#: How many join point names an error about an unknown one lists.
_SHOWN = 12


class Description(list[Row]):
    """The rows of ``describe()``; printing renders a table (with rich when installed)."""

    #: Each event row's pointcut, for ``advice_names(event, 'on')``; set by ``describe()``.
    _subscriptions: Mapping[Row, Pointcut] = MappingProxyType({})

    def __str__(self) -> str:
        import_rich()  # first, so that importing it leaves ``random`` as it was
        try:
            import rich.console  # noqa: F401
        except ImportError:
            return self._plain()
        return render(self.__rich__(), 160)

    def __rich__(self) -> Any:
        import_rich()
        from rich.table import Table
        from rich.text import Text

        table = Table(title=_TITLE, show_lines=False)
        for column in self._columns():
            # Names are what a reader looks for: never cut one (a long one widens the
            # table, ``_rich.render``), nor short words and numbers; fold long notes.
            whole = column not in ("aspect", "filters", "note")
            table.add_column(column, no_wrap=whole, overflow="ellipsis" if whole else "fold")
        for cells in self._cells():
            # Text, not markup: a name such as 'eval[val]' is shown as it is.
            table.add_row(*map(Text, cells))
        return table

    def _plain(self) -> str:
        """The table as aligned plain text (rich is not installed): the same columns."""
        columns = self._columns()
        rows = self._cells()
        widths = [max([len(c), *(len(row[i]) for row in rows)]) for i, c in enumerate(columns)]

        def line(cells: list[str]) -> str:
            return "  ".join(
                cell.ljust(width) for cell, width in zip(cells, widths, strict=True)
            ).rstrip()

        rule = "  ".join("-" * width for width in widths)
        return "\n".join([_TITLE, line(columns), rule, *map(line, rows)])

    def _tracked(self) -> bool:
        return any(r.calls is not None for r in self)  # the columns only when counted

    def _failed(self) -> bool:
        return any(r.failures for r in self)  # the column only when an advice failed

    def _columns(self) -> list[str]:
        columns = ["join point", "stage", "#", "advice", "priority", "aspect", "filters"]
        return [
            *columns,
            "status",
            *(["calls", "time"] if self._tracked() else []),
            *(["failures"] if self._failed() else []),
            "where",
            "note",
        ]

    def _cells(self) -> list[list[str]]:
        tracked, failed = self._tracked(), self._failed()
        return [
            [
                r.joinpoint,
                r.stage,
                str(r.order) if r.stage else "",
                r.advice,
                "" if r.priority is None else str(r.priority),
                r.aspect,
                r.filters,
                r.status,
                *([_calls(r), _time(r)] if tracked else []),
                *([f"{r.failures:,}" if r.failures else ""] if failed else []),
                _short(r.location),
                r.note,
            ]
            for r in self
        ]

    def for_joinpoint(self, name: str) -> list[Row]:
        """Rows of the join point named or aliased ``name``, in run order per stage."""
        return [r for r in self if r.joinpoint == name or name in r.aliases]

    def advice_names(self, joinpoint: str, stage: str) -> list[str]:
        """Advice names at one join point (by name or alias) and stage, in run order.

        A join point with no advice there gives ``[]``; a name no row of this description
        has raises ``InvalidOptionError``, so a misspelt name is not read as "no advice".
        With stage ``'on'``, ``joinpoint`` is an event name (or a subscription's pattern):
        the subscribers that event runs, in order; ``[]`` when none, as any name may be
        emitted.
        """
        if stage not in (*STAGES, EVENTS):
            stages = ", ".join(map(repr, (*STAGES, EVENTS)))
            raise InvalidOptionError(
                f"stage {stage!r} is not a stage: use one of {stages}",
                option="stage",
                value=stage,
            )
        if stage == EVENTS:
            return [r.advice for r in self if r.stage == EVENTS and self._runs(r, joinpoint)]
        rows = [r for r in self.for_joinpoint(joinpoint) if r.stage != EVENTS]
        if not rows:
            raise InvalidOptionError(
                self._unknown_joinpoint(joinpoint), option="joinpoint", value=joinpoint
            )
        return [r.advice for r in rows if r.stage == stage]

    def _runs(self, row: Row, event: str) -> bool:
        """Whether the subscription in ``row`` runs when ``event`` is emitted."""
        pointcut = self._subscriptions.get(row)
        return row.joinpoint == event or (pointcut is not None and _reaches(pointcut, event))

    def _unknown_joinpoint(self, name: str) -> str:
        """Why ``name`` has no rows here: the closest name and the known ones (the first
        few of a long description)."""
        known = sorted(
            {
                n
                for r in self
                if r.joinpoint and r.stage != EVENTS
                for n in (r.joinpoint, *r.aliases)
            }
        )
        message = f"join point {name!r} is not in this description"
        if not known:
            return (
                f"{message}, which has no join points: none is declared, or the pointcut "
                "given to describe() selected none"
            )
        shown = ", ".join(map(repr, known[:_SHOWN]))
        more = f", ... ({len(known)} in all)" if len(known) > _SHOWN else ""
        close = _close(name, known)
        hint = f"did you mean {close[0]!r}?" if close else "give one of its join points"
        return f"{message} (its join points: {shown}{more}); {hint}"


def _calls(row: Row) -> str:
    return "" if row.calls is None else f"{row.calls:,}"


def _time(row: Row) -> str:
    return "" if row.time_s is None else format_seconds(row.time_s)


def _short(location: str) -> str:
    path, _, line = location.rpartition(":")
    return f"{path.rsplit('/', 1)[-1]}:{line}" if path else location


def describe(pointcut: PointcutLike | None = None, *, weaver: Weaver | None = None) -> Description:
    """Every join point (selected by ``pointcut``) with its advice per stage, in run order."""
    from ._weave import WEAVES
    from ._weaver import check_weaver

    check_weaver(weaver)
    selected = as_pointcut(pointcut) if pointcut is not None else None
    rows = Description()
    with LOCK:
        points = sorted(
            REGISTRY.points_of(weaver) if weaver is not None else REGISTRY.joinpoints,
            key=lambda jp: jp.name,
        )
        all_points = list(REGISTRY.joinpoints)
        weavers = [weaver] if weaver is not None else list(REGISTRY.weavers)
        for jp in points:
            if selected is not None and not selected.matches(jp):
                continue
            rows.extend(_joinpoint_rows(jp))
        events = _event_rows(_emitters(weaver), selected)
        rows.extend(events)
        rows.extend(_weave_rows(WEAVES, weaver, selected))
        rows.extend(_unmatched_rows(weavers, all_points, selected))
    rows._subscriptions = MappingProxyType(events)
    return rows


def _emitters(weaver: Weaver | None) -> list[Any]:
    """The weavers whose subscriptions an event sent through ``weaver`` runs, as
    ``Weaver.emit`` finds them; all global ones when ``weaver`` is None
    (``aspecthook.emit``)."""
    return list(REGISTRY.weavers) if weaver is None else weaver._emits_to()


def _event_rows(weavers: list[Any], selected: Any) -> dict[Row, Pointcut]:
    """A row per event subscription of ``weavers`` (those ``selected`` picks), in the
    order ``emit`` runs them, each with its pointcut. Built here, not read from ``emit``'s
    cache, which holds only names already sent: describing costs ``emit`` nothing."""
    subscriptions = [a for w in weavers for a in w.registered if a.kind == EVENTS]
    try:
        ordered = order_stage(subscriptions)
    except OrderingCycleError:  # emit() orders each event's own: this cycle may span events
        ordered = sorted(subscriptions, key=lambda a: (a.priority, a.seq))
    rows: dict[Row, Pointcut] = {}
    for i, advice in enumerate(ordered, 1):
        pointcut = advice.pointcut
        if pointcut is None:  # an on() advice always has one; this keeps the type narrow
            continue
        pattern = _pattern(pointcut)
        if selected is not None and not _selects_event(selected, pattern, pointcut):
            continue
        row = Row(
            joinpoint=pattern,
            stage=EVENTS,
            order=i,
            advice=advice.name,
            priority=advice.priority,
            aspect=advice.aspect_name or "",
            filters=advice.filters,
            location=advice.location,
            status="active",
            failures=advice.failures,
        )
        rows[row] = pointcut
    return rows


def _pattern(pointcut: Pointcut) -> str:
    """What a subscription names: ``'checkpoint.*'``, or a composite pointcut's repr."""
    if isinstance(pointcut, Name | NormalizedName):
        return pointcut.name
    if isinstance(pointcut, Glob):
        return pointcut.pattern
    return repr(pointcut)


def _reaches(pointcut: Pointcut, event: str) -> bool:
    """Whether an event named ``event`` runs a subscription with ``pointcut`` (matched
    without payload, as ``emit`` matches it)."""
    try:
        return bool(pointcut.matches(Event(event, {})))
    except Exception:  # a user's predicate may raise anything: emit() skips it too
        return False


def _selects_event(selected: Any, pattern: str, pointcut: Pointcut) -> bool:
    """Whether ``selected`` picks a subscription: by its pattern as a name (a glob or the
    pattern itself), or by naming an event that it reaches (``describe('checkpoint.saved')``
    lists ``'checkpoint.*'`` subscribers)."""
    return _selects(selected, pattern) or any(
        _reaches(pointcut, n) for n in selected.literal_names()
    )


def _joinpoint_rows(jp: Any) -> list[Row]:
    from ._subtypes import overridden_note

    chain = jp.chain
    aliases = f"aliases: {', '.join(jp.aliases)}" if jp.aliases else ""
    aliases = "; ".join(n for n in (aliases, overridden_note(jp)) if n)
    rows = []
    for stage in STAGES:
        for i, advice in enumerate(chain.entries.get(stage, ()), 1):
            problem = chain.skipped.get(advice)
            stats = advice.stats(jp)
            rows.append(
                Row(
                    joinpoint=jp.name,
                    stage=stage,
                    order=i,
                    advice=advice.name,
                    priority=advice.priority,
                    aspect=advice.aspect_name or "",
                    filters=advice.filters,
                    location=advice.location,
                    status="failed" if problem else jp.status,
                    calls=None if stats is None else stats.calls,
                    time_s=None if stats is None else stats.time_s,
                    failures=advice.failures,
                    note=problem or aliases,
                    aliases=jp.aliases,
                )
            )
    if not rows:
        empty = Row(jp.name, "", 0, "", None, "", "", jp.location, jp.status, note=aliases)
        rows.append(replace(empty, aliases=jp.aliases))
    return rows


def _weave_rows(records: list[Any], weaver: Weaver | None, selected: Any) -> list[Row]:
    """Weaves not in place (pending, skipped, failed) or waiting for more (a subclass weave
    that matches nothing yet), by their target's name: those the pointcut selects, when
    one is given."""
    from ._subtypes import waiting_note

    notes = [(r, r.reason or waiting_note(r)) for r in records]
    return [
        Row(r.target, "", 0, "", None, "", "", "", r.status, note=note)
        for r, note in notes
        if (r.status != "active" or note)
        and (weaver is None or r.weaver is weaver)
        and (selected is None or _selects(selected, r.target))
    ]


def _unmatched_rows(weavers: list[Any], points: list[Any], selected: Any) -> list[Row]:
    """Advice whose names and globs match no join point (a typo, or one not declared yet):
    the ``unmatched`` rows. Advice through a predicate alone is left out: it names nothing
    to check."""
    known = sorted({n for jp in points for n in jp.names if not n.startswith("@")})
    rows = []
    for w in weavers:
        for advice in w.registered:
            if advice.kind == "on" or advice.points or advice.pointcut is None:
                continue
            note = _unmatched_note(advice.pointcut, known, selected)
            if note is None:
                continue
            rows.append(
                Row(
                    "",
                    advice.kind,
                    0,
                    advice.name,
                    advice.priority,
                    advice.aspect_name or "",
                    advice.filters,
                    advice.location,
                    "unmatched",
                    note=note,
                )
            )
    return rows


def _unmatched_note(pointcut: Any, known: list[str], selected: Any) -> str | None:
    """What an unmatched pointcut names and the closest join point name, or None where it
    names nothing, names an ``@`` join point, or is not one ``selected`` picks."""
    literal = list(pointcut.literal_names())
    globs = list(pointcut._globs())
    if not (literal or globs) or any(n.startswith("@") for n in (*literal, *globs)):
        return None
    if selected is not None and not (
        any(_selects(selected, n) for n in literal)
        or any(_selects_glob(selected, g) for g in globs)
    ):
        return None
    parts = []
    if literal:
        parts.append(f"no join point named {' or '.join(map(repr, literal))}")
    if globs:
        parts.append(f"no join point name matches {' or '.join(map(repr, globs))}")
    note = "; ".join(parts)
    hints = [m for n in literal for m in _close(n, known)]
    if hints:
        return f"{note}; did you mean {hints[0]!r}?"
    near = [m for g in globs for m in _close_to_glob(g, known)]
    if near:
        return f"{note}; did you mean a pattern that matches {near[0]!r}?"
    return note


def _selects_glob(selected: Any, pattern: str) -> bool:
    """Whether ``selected`` picks the pattern as a name, or names one the pattern would
    match (``describe('train_iter')`` lists unmatched ``'train_*'`` advice)."""
    return _selects(selected, pattern) or any(
        fnmatchcase(n, pattern) for n in selected.literal_names()
    )


def near_misses(weavers: list[Any], known: list[str]) -> list[tuple[Any, str, str]]:
    """``(advice, name, closest)`` for each advice registered on ``weavers`` for a literal
    name no join point has, when that name is close to one of ``known`` (a typo); and for
    a glob that matches none of ``known`` when a name of ``known`` is close to its text
    (``'trian_*'``: ``name`` is the glob, ``closest`` a name it was likely meant to match)."""
    misses = []
    for w in weavers:
        for advice in w.registered:
            if advice.kind == "on" or advice.points or advice.pointcut is None:
                continue
            for name in advice.pointcut.literal_names():
                if name.startswith("@") or name in known:
                    continue
                hints = _close(name, known)
                if hints:
                    misses.append((advice, name, hints[0]))
            for pattern in advice.pointcut._globs():
                if pattern.startswith("@") or any(fnmatchcase(n, pattern) for n in known):
                    continue
                hints = _close_to_glob(pattern, known)
                if hints:
                    misses.append((advice, pattern, hints[0]))
    return misses


class _Named:
    """A name alone, for a pointcut to judge as the join point it would be."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.names = frozenset((name,))


def _selects(selected: Any, name: str) -> bool:
    """Whether ``selected`` picks the join point ``name`` would be. A pointcut that reads
    more than names (a predicate on ``jp.is_async``) cannot judge a name alone: not picked.
    """
    try:
        return bool(selected.matches(_Named(name)))
    except Exception:  # a user's predicate may raise anything on a bare name
        return False


def _close_to_glob(pattern: str, known: list[str]) -> list[str]:
    """The known name whose start and end are closest to the pattern's text before its
    first wildcard and after its last (``'trian_*'`` -> ``'train_iter'``, ``'*.forwad'``
    -> ``'net.forward'``); none for a pattern without such text."""
    import difflib

    cut = [i for i, c in enumerate(pattern) if c in "*?["] or [len(pattern)]
    head, tail = pattern[: cut[0]], pattern[cut[-1] + 1 :]
    if pattern[cut[-1] : cut[-1] + 1] == "[":  # a [...] set: the name's end is after it
        tail = tail.partition("]")[2]
    if not (head or tail):
        return []
    ends: dict[str, str] = {}
    for name in known:
        if len(name) >= len(head) + len(tail):
            ends.setdefault(name[: len(head)] + name[len(name) - len(tail) :], name)
    close = difflib.get_close_matches(head + tail, list(ends), n=1, cutoff=0.75)
    return [ends[c] for c in close]


def _close(name: str, known: list[str]) -> list[str]:
    import difflib  # only when there is unmatched advice to explain; keeps import light

    return difflib.get_close_matches(name, known, n=1)
