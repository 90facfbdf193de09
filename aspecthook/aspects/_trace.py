"""Chrome's Trace Event Format for ``Timed.export_chrome_trace``, written atomically.

Apart from ``_timed`` because it runs once per export, never per call: it turns the
events ``Timed`` kept into the JSON document Perfetto and chrome://tracing open.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .._files import fsync_dir
from .._fork import reinit_after_fork

__all__ = ["THIS_THREAD", "chrome_trace", "note_thread", "write_atomically"]

#: Time zero of every trace (``perf_counter_ns`` at import): shared by all ``Timed``
#: instances, so their traces line up when merged into one file.
_ORIGIN = time.perf_counter_ns()


#: Names of the threads that made trace events, by native id, noted at each one's first
#: event (``note_thread``) so that a trace written after a thread ended still names it.
#: The oldest go first beyond ``_NAMES_KEPT`` (a program that starts threads without end).
_THREAD_NAMES: dict[int, str] = {}
_NAMES_KEPT = 4096
_NAMES_LOCK = reinit_after_fork(threading.Lock())


class _ThisThread(threading.local):
    """The native id of the running thread, once ``note_thread`` has read it: a trace
    event reads this attribute (cheaper than asking for the id each time), and finds
    ``None`` only at the thread's first event."""

    tid: int | None = None

    def _at_fork_reinit(self) -> None:
        """In a forked child (``reinit_after_fork``): its one thread has a new native
        id, read again at its next event."""
        self.tid = None


THIS_THREAD = reinit_after_fork(_ThisThread())


def note_thread() -> int:
    """The running thread's native id, read at its first trace event; notes its name."""
    current = threading.current_thread()
    tid = THIS_THREAD.tid = threading.get_native_id()
    with _NAMES_LOCK:
        _THREAD_NAMES.pop(tid, None)  # a new thread with an ended one's id: now the newest
        if len(_THREAD_NAMES) >= _NAMES_KEPT:
            del _THREAD_NAMES[next(iter(_THREAD_NAMES))]
        _THREAD_NAMES[tid] = current.name
    return tid


def chrome_trace(
    events: Iterable[tuple[str, int, int, int, bool, bool]], dropped: int, owner: int
) -> dict[str, Any]:
    """The document for ``events`` (``Timed``'s, sorted by start), ``owner`` its ``id``."""
    pid = os.getpid()
    trace: list[dict[str, Any]] = []
    for call, (name, start, duration, tid, failed, concurrent) in enumerate(events):
        ts, dur = (start - _ORIGIN) / 1000, duration / 1000
        if concurrent:  # ids unique across Timed instances too, so traces merge
            trace += _async_events(name, ts, dur, pid, tid, failed, f"{owner:x}.{call}")
        else:
            trace.append(_trace_event(name, ts, dur, pid, tid, failed))
    return {
        "traceEvents": _names(pid, trace) + trace,
        "displayTimeUnit": "ms",
        "otherData": {"producer": "aspecthook.Timed", "dropped_events": dropped},
    }


def _names(pid: int, trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Metadata events naming the process and the threads (viewers show bare ids
    otherwise): a thread still alive by its name now, one that has ended by the name it
    had at its first event (``note_thread``)."""
    program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    meta = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": program}}]
    alive = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
    with _NAMES_LOCK:
        known = {**_THREAD_NAMES, **alive}
    for tid in sorted({event["tid"] for event in trace}):
        if tid in known:
            args = {"name": known[tid]}
            meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": args})
    return meta


def _trace_event(
    name: str, ts: float, dur: float, pid: int, tid: int, failed: bool
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "name": name,
        "cat": "aspecthook",
        "ph": "X",
        "ts": ts,
        "dur": dur,
        "pid": pid,
        "tid": tid,
    }
    if failed:
        event["args"] = {"error": True}
    return event


def _async_events(
    name: str, ts: float, dur: float, pid: int, tid: int, failed: bool, call: str
) -> list[dict[str, Any]]:
    """A coroutine's call as the begin and end of an async event, ``id`` its own."""
    begin: dict[str, Any] = {"name": name, "cat": "aspecthook", "ph": "b", "id": call}
    begin |= {"ts": ts, "pid": pid, "tid": tid}
    if failed:
        begin["args"] = {"error": True}
    end: dict[str, Any] = {"name": name, "cat": "aspecthook", "ph": "e", "id": call}
    end |= {"ts": ts + dur, "pid": pid, "tid": tid}
    return [begin, end]


def write_atomically(target: Path, text: str) -> None:
    """Write ``text`` to a temp file next to ``target``, fsync it, ``os.replace`` it in,
    then fsync the folder, as ``Checkpoint`` writes its files.

    A reader never sees a half-written trace, a crash leaves the old file intact, and once
    this returns the new file survives a power loss (the folder's fsync makes the rename
    durable). The temp file's name starts with at most 50 characters of ``target``'s (200
    bytes, even in UTF-8), so that it fits where ``target``'s own name is as long as names
    can be.
    """
    if not target.parent.is_dir():  # else the error would name the temp file
        raise FileNotFoundError(
            errno.ENOENT,
            f"cannot write {target}: the folder {target.parent} does not exist (create it first)",
            str(target),
        )
    tmp = target.with_name(f".{target.name[:50]}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(target.parent)
