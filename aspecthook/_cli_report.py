"""What ``aspecthook run`` itself reports on stderr: warnings, the ``Timed`` summary
table and the trace file.

Every line starts with the command's name (``PROG``). Separate from the session that
decides what to report, so that the output's form sits in one place.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

__all__ = [
    "PROG",
    "_flush_stdout",
    "_is_timer",
    "_overridden",
    "_print_summary",
    "_say",
    "_trace_problem",
    "_warn",
    "_write_trace",
]

PROG = "aspecthook"


def _say(text: object) -> None:
    """Print ``text`` on stderr, unless the program closed or removed its stderr: python
    drops its own messages then, and the exit report goes on (to write the trace)."""
    stream = sys.stderr
    if stream is None:  # print(file=None) would write to stdout
        return
    try:
        print(text, file=stream)
    except (OSError, ValueError):  # closed, or its pipe gone
        pass


def _flush_stdout() -> None:
    """Flush the program's stdout, so that our stderr lines come after its output; one it
    closed or removed is left alone (python's own exit reports a failing flush)."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except (OSError, ValueError):
        pass


def _warn(message: str) -> None:
    _say(f"{PROG}: warning: {message}")


def _is_timer(aspect: Any) -> bool:
    return callable(getattr(aspect, "summary", None)) and callable(
        getattr(aspect, "export_chrome_trace", None)
    )


def _print_summary(timers: list[Any], overridden: Sequence[tuple[str, str]] = ()) -> None:
    """One table over every Timed instance (rows of all, slowest total first); without
    any call, the ``overridden`` woven methods (``_overridden``), a likely reason."""
    summaries = [t.summary() for t in timers]
    _flush_stdout()
    if not any(len(summary) for summary in summaries):  # no woven call ran: no empty table
        _say(f"{PROG}: Timed recorded no calls")
        for name, note in overridden:
            _say(f"{PROG}: {name} is {note}")
        return
    table = summaries[0]
    if len(summaries) > 1:
        rows = sorted(_labelled(timers, summaries), key=lambda r: -r.total_s)
        table = type(summaries[0])(rows)
    _say(table)


def _overridden() -> list[tuple[str, str]]:
    """The woven methods that loaded subclasses override (a likely reason for no calls:
    ``'torch.optim.Optimizer.step'`` woven, ``SGD.step`` called), with what to weave."""
    from ._registry import LOCK, REGISTRY
    from ._subtypes import overridden_note

    with LOCK:
        points = [jp for jp in REGISTRY.joinpoints if jp.advice]
    found = [(jp.name, overridden_note(jp)) for jp in points]
    return sorted((name, note) for name, note in found if note)


def _labelled(timers: list[Any], summaries: list[Any]) -> list[Any]:
    """Every timer's rows; a join point that more than one timer times is shown once per
    timer, as ``name [timer]`` (``[timed #2]``, its place among the timers, where two
    timers have the same name), so that no two rows read the same."""
    from collections import Counter
    from dataclasses import replace

    timing = Counter(row.name for summary in summaries for row in summary)
    names = [getattr(timer, "name", type(timer).__name__) for timer in timers]
    rows: list[Any] = []
    for place, (name, summary) in enumerate(zip(names, summaries, strict=True), 1):
        label = name if names.count(name) == 1 else f"{name} #{place}"
        rows += [
            replace(r, name=f"{r.name} [{label}]") if timing[r.name] > 1 else r for r in summary
        ]
    return rows


def _trace_problem(path: str) -> str | None:
    """Why the trace could not be written to ``path`` at exit, or None; checked before the
    program runs, so that a long run does not lose its trace. Creates the folder."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        return "cannot write the trace there: it is a folder; name a file, e.g. trace.json"
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        return f"cannot write the trace there: {exc}"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"cannot write the trace there: the folder {folder} is not writable"
    return None


def _write_trace(timers: list[Any], path: str) -> None:
    """Write the trace of every Timed instance into one Trace Event JSON file."""
    if not timers:
        _warn(f"no Timed aspect in the config, so no trace is written to {path}")
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if len(timers) == 1:
            timers[0].export_chrome_trace(path)
        else:
            _merge_traces(timers, path)
    except OSError as exc:
        _warn(f"cannot write the trace to {path}: {exc}")
        return
    _say(f"{PROG}: trace written to {path} (open it in https://ui.perfetto.dev)")


def _meta_key(event: dict[str, Any]) -> tuple[Any, ...]:
    return event.get("name"), event.get("pid"), event.get("tid")


def _merge_traces(timers: list[Any], path: str) -> None:
    """One document of every timer's trace, written atomically as each one's is: their
    events, and the events they dropped added up."""
    import json
    import tempfile
    from pathlib import Path

    from .aspects._trace import write_atomically

    parts = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, timer in enumerate(timers):
            part = os.path.join(tmp, f"{i}.json")
            timer.export_chrome_trace(part)
            with open(part, encoding="utf-8") as f:
                parts.append(json.load(f))
    document = parts[0]
    named = {_meta_key(e) for e in document["traceEvents"] if e.get("ph") == "M"}
    for part in parts[1:]:
        for event in part["traceEvents"]:
            if event.get("ph") == "M":  # each part names the process and its threads
                if _meta_key(event) in named:
                    continue
                named.add(_meta_key(event))
            document["traceEvents"].append(event)
    dropped = [part.get("otherData", {}).get("dropped_events") for part in parts]
    if all(isinstance(n, int) for n in dropped):
        document.setdefault("otherData", {})["dropped_events"] = sum(dropped)
    write_atomically(Path(path), json.dumps(document))
