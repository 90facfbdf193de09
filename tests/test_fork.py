"""Fork safety: a child made by ``os.fork()`` while another thread holds a lock of the
engine (the registry's, the handles', the process hooks', the logging configuration's,
a ``Registry``'s) or of an aspect (``Timed``, ``Counted``, ``Recorder``) gets it back
unlocked, a copy of such an aspect or registry (or one unpickled) has a lock of its own,
and the fork hook keeps no aspect alive."""

from __future__ import annotations

import contextlib
import copy
import gc
import json
import multiprocessing
import os
import pickle
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import aspecthook as ah
from aspecthook import _handle, _process, _registry
from aspecthook.aspects import Counted, Timed, _logging_config
from aspecthook.registry import ASPECTS, Registry
from aspecthook.testing import Recorder

needs_fork = pytest.mark.skipif(
    not hasattr(os, "fork"), reason="os.fork() does not exist on this platform (Windows)"
)
multi_threaded_fork = pytest.mark.filterwarnings(
    "ignore:This process .* is multi-threaded:DeprecationWarning"
)


def add(x: int) -> int:
    return x + 1


def _exit_status(pid: int, *, give_up_after: float = 20.0) -> int | None:
    """The child's exit code, or None (and the child killed) if it has not ended by then:
    a child stuck on a lock never ends by itself."""
    deadline = time.monotonic() + give_up_after
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


def _fork_while(hold: Callable[[], Any], check: Callable[[], bool]) -> int | None:
    """Fork while another thread is inside ``with hold():``; the child's exit status:
    0 when ``check()`` is true in the child, None when the child never ended."""
    holding, release = threading.Event(), threading.Event()

    def keep() -> None:
        with hold():
            holding.set()
            release.wait()

    holder = threading.Thread(target=keep)
    holder.start()
    holding.wait()
    try:
        pid = os.fork()
        if pid == 0:  # the child: report by exit code, never return into pytest
            code = 1
            try:
                code = 0 if check() else 2
            finally:
                os._exit(code)
    finally:
        release.set()
        holder.join()
    return _exit_status(pid)


def _weave_and_call() -> bool:
    seen: list[int] = []
    with ah.weave(add, before=lambda ctx: seen.append(ctx.args[0])):
        add(1)
    return seen == [1]


# -- the engine's locks ----------------------------------------------------------------------


@needs_fork
@multi_threaded_fork
@pytest.mark.parametrize(
    "lock",
    [
        _registry.LOCK,
        _handle._WAITS,
        _process._install_lock,
        _logging_config._CONFIGURED_LOCK,
    ],
    ids=["registry", "handle-waits", "process-hooks", "logging-config"],
)
def test_a_child_forked_while_another_thread_holds_a_module_lock_can_weave(lock: Any) -> None:
    """A fork while another thread weaves (holds the registry's lock) left the child's
    copy held by a thread the child does not have: its first weave, or its first handle
    removal, waited for ever. The child gets the engine's locks back unlocked."""

    def check() -> bool:
        with lock:  # the lock itself is usable
            pass
        return _weave_and_call()

    assert _fork_while(lambda: lock, check) == 0


@needs_fork
@multi_threaded_fork
def test_a_child_forked_while_another_thread_uses_a_registry_can_look_names_up() -> None:
    """A fork while another thread builds from a config (holds a registry's lock, as it
    does while a plugin or torch is imported) left the child's copy held: its first
    ``ASPECTS.get()`` or ``build()`` waited for ever. The child gets it back unlocked."""
    mine = Registry("thing")
    mine.register(dict, name="Dict")

    def both() -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        stack.enter_context(ASPECTS._lock)
        stack.enter_context(mine._lock)
        return stack

    def check() -> bool:
        return ASPECTS.get("Timed").__name__ == "Timed" and mine.get("Dict") is dict

    assert _fork_while(both, check) == 0


@needs_fork
@multi_threaded_fork
def test_a_child_forked_while_another_thread_removes_a_handle_does_not_wait_for_it() -> None:
    """A fork while another thread removes a handle (its undo running) left the child's
    ``remove()`` of that handle waiting for a thread the child does not have, for ever.
    The child's ``remove()`` returns."""
    undoing, release = threading.Event(), threading.Event()

    def undo() -> None:
        undoing.set()
        release.wait()

    handle = ah.Handle(undo, "slow removal")
    remover = threading.Thread(target=handle.remove)
    remover.start()
    undoing.wait()
    try:
        pid = os.fork()
        if pid == 0:  # the child: report by exit code, never return into pytest
            code = 1
            try:
                handle.remove()
                code = 0 if _weave_and_call() else 2
            finally:
                os._exit(code)
    finally:
        release.set()
        remover.join()
    assert _exit_status(pid) == 0


# -- the aspects' locks ----------------------------------------------------------------------


def _use_timed(timed: Any) -> bool:
    with ah.weave(add, timed):
        add(1)
    return [row.count for row in timed.summary()] == [2]


def _use_counted(counted: Any) -> bool:
    with ah.weave(add, counted):
        add(1)
    return counted.counts[f"{__name__}.add"] == 2


def _use_recorder(recorder: Any) -> bool:
    with ah.weave(add, recorder):
        add(2)
    return [call.args for call in recorder.calls] == [(1,), (2,)]


FLAVOURS: list[tuple[Callable[[], Any], Callable[[Any], bool]]] = [
    (Timed, _use_timed),
    (Counted, _use_counted),
    (Recorder, _use_recorder),
]


@needs_fork
@multi_threaded_fork
@pytest.mark.parametrize(("make", "use"), FLAVOURS, ids=["Timed", "Counted", "Recorder"])
def test_a_child_forked_while_another_thread_holds_the_lock_can_use_the_aspect(
    make: Callable[[], Any], use: Callable[[Any], bool]
) -> None:
    """A fork while another thread records (holds the aspect's lock) left the child's
    copy of the lock held by a thread the child does not have: the child's first call of
    a woven function waited for ever. The child gets the lock back unlocked."""
    aspect = make()
    with ah.weave(add, aspect):
        add(1)
    assert _fork_while(lambda: aspect._lock, lambda: use(aspect)) == 0


@pytest.mark.parametrize("make", [Timed, Counted, Recorder], ids=["Timed", "Counted", "Recorder"])
def test_the_fork_hook_keeps_no_aspect_alive(make: Callable[[], Any]) -> None:
    """Each aspect is made known to the fork hook, weakly: a dropped one is collected."""
    ref = weakref.ref(make())
    for _ in range(3):
        gc.collect()
    assert ref() is None


# -- copies of the aspects -------------------------------------------------------------------


@needs_fork
@multi_threaded_fork
@pytest.mark.parametrize("copier", [copy.copy, copy.deepcopy], ids=["copy", "deepcopy"])
@pytest.mark.parametrize(("make", "use"), FLAVOURS, ids=["Timed", "Counted", "Recorder"])
def test_a_copy_of_an_aspect_has_a_lock_of_its_own_made_anew_in_a_forked_child(
    make: Callable[[], Any], use: Callable[[Any], bool], copier: Callable[[Any], Any]
) -> None:
    """A shallow copy shared the original's lock, which the fork hook re-made for the
    original only: a fork while another thread held it left the copy's lock held in the
    child, whose first call woven with the copy waited for ever (a deep copy failed
    outright: a lock cannot be copied). A copy has a lock of its own, made anew in the
    child, and goes on from what the original had recorded."""
    aspect = make()
    with ah.weave(add, aspect):
        add(1)
    twin = copier(aspect)
    assert _fork_while(lambda: twin._lock, lambda: use(twin)) == 0


def _recorded(aspect: Any) -> Any:
    """What ``aspect`` has recorded of ``add``: calls, errors and trace events."""
    if isinstance(aspect, Timed):
        return [(row.count, row.errors) for row in aspect.summary()], len(aspect._events)
    if isinstance(aspect, Counted):
        return aspect.counts[f"{__name__}.add"], aspect.error_counts[f"{__name__}.add"]
    return [(call.args, call.index) for call in aspect.calls]


@pytest.mark.parametrize("copier", [copy.copy, copy.deepcopy], ids=["copy", "deepcopy"])
@pytest.mark.parametrize(
    "make",
    [lambda: Timed(trace=True), Counted, Recorder],
    ids=["Timed", "Counted", "Recorder"],
)
def test_a_copy_of_an_aspect_records_apart_from_the_original(
    make: Callable[[], Any], copier: Callable[[Any], Any]
) -> None:
    """A copy starts from what the original recorded; calls woven with either are
    recorded by that one only (a shallow copy shared its counters, timings and lists)."""
    aspect = make()
    with ah.weave(add, aspect):
        add(1)
    before = _recorded(aspect)
    twin = copier(aspect)
    assert _recorded(twin) == before
    with ah.weave(add, twin):
        add(2)
    assert _recorded(aspect) == before
    with ah.weave(add, aspect):
        add(3)
        add(4)
    expected = {
        Timed: ([(2, 0)], 2),
        Counted: (2, 0),
        Recorder: [((1,), 0), ((2,), 1)],
    }
    assert _recorded(twin) == expected[type(twin)]


@needs_fork
def test_a_forked_childs_trace_events_carry_its_own_thread_id(tmp_path: Path) -> None:
    """A thread's native id is read at its first trace event and kept for the next: the
    thread that forks has another id in the child, which the child's events carry (and
    its trace names), not the parent's."""
    timed, path = Timed(trace=True), tmp_path / "child.json"
    with ah.weave(add, timed):
        add(1)  # the parent's id is read here
        pid = os.fork()
        if pid == 0:  # the child: report by exit code, never return into pytest
            code = 1
            try:
                timed.reset()
                add(2)
                document = json.loads(timed.export_chrome_trace(path).read_text())
                tid = threading.get_native_id()
                events = [e for e in document["traceEvents"] if e["ph"] == "X"]
                names = [e["tid"] for e in document["traceEvents"] if e["name"] == "thread_name"]
                code = 0 if [e["tid"] for e in events] == [tid] and tid in names else 2
            finally:
                os._exit(code)
    assert _exit_status(pid) == 0


# -- pickled aspects (what multiprocessing hands a spawned worker) --------------------------


def _round_trip(obj: Any) -> Any:
    return pickle.loads(pickle.dumps(obj))


@pytest.mark.parametrize("make", [lambda: Timed(trace=True), Counted], ids=["Timed", "Counted"])
def test_an_unpickled_aspect_goes_on_from_what_it_recorded(make: Callable[[], Any]) -> None:
    """Pickling Timed or Counted failed on its lock, so neither could be handed to a
    worker process. One unpickled starts from what the original had recorded, as a copy
    does, and records apart from it."""
    aspect = make()
    with ah.weave(add, aspect):
        add(1)
    before = _recorded(aspect)
    twin = _round_trip(aspect)
    assert _recorded(twin) == before
    with ah.weave(add, twin):
        add(2)
    assert _recorded(aspect) == before
    assert _recorded(twin) == {Timed: ([(2, 0)], 2), Counted: (2, 0)}[type(twin)]


def test_an_unpickled_recorder_carries_no_calls() -> None:
    """A ``Call`` holds the thread it ran in, which cannot be pickled: pickling a Recorder
    that had recorded a call failed. One unpickled keeps its options and records its
    own calls, numbered from 0; the original keeps its calls."""
    recorder = Recorder(pointcut="props.*", name="rec", priority="HIGHEST")
    with ah.weave(add, recorder):
        add(1)
    twin = _round_trip(recorder)
    assert (twin.pointcut, twin.name, twin.priority) == ("props.*", "rec", "HIGHEST")
    assert twin.calls == []
    with ah.weave(add, twin):
        add(2)
    assert [(call.args, call.index) for call in twin.calls] == [((2,), 0)]
    assert [(call.args, call.index) for call in recorder.calls] == [((1,), 0)]


@needs_fork
@multi_threaded_fork
@pytest.mark.parametrize(("make", "use"), FLAVOURS, ids=["Timed", "Counted", "Recorder"])
def test_an_unpickled_aspect_has_a_lock_made_anew_in_a_forked_child(
    make: Callable[[], Any], use: Callable[[Any], bool]
) -> None:
    """An unpickled aspect's lock is made anew in a forked child, as a copy's is: a fork
    while another thread holds it leaves the child able to record."""
    aspect = make()
    if not isinstance(aspect, Recorder):  # a Recorder's calls stay with the original
        with ah.weave(add, aspect):
            add(1)
    twin = _round_trip(aspect)

    def check() -> bool:
        if isinstance(twin, Recorder):
            with ah.weave(add, twin):
                add(1)
        return use(twin)

    assert _fork_while(lambda: twin._lock, check) == 0


def _count_in_worker(counted: Counted) -> dict[str, int]:
    """Run in a spawned worker: count two more calls of ``add`` there."""
    with ah.weave(add, counted):
        add(1)
        add(2)
    return dict(counted.counts)


def test_an_aspect_can_be_handed_to_a_spawned_worker() -> None:
    """multiprocessing's spawn start method pickles what it hands a worker: a Counted
    failed there on its lock. The worker's goes on from the original's counts."""
    counted = Counted()
    with ah.weave(add, counted):
        add(0)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        counts = pool.apply(_count_in_worker, (counted,))
    assert counts == {f"{__name__}.add": 3}
    assert counted.counts[f"{__name__}.add"] == 1


# -- copies of a registry --------------------------------------------------------------------


COPIERS = [copy.copy, copy.deepcopy, _round_trip]


@pytest.mark.parametrize("copier", COPIERS, ids=["copy", "deepcopy", "pickle"])
def test_a_copy_of_a_registry_has_names_of_its_own(copier: Callable[[Any], Any]) -> None:
    """A shallow copy of a Registry shared its lock and its names (registering in the copy
    registered in the original too); a deep copy or a pickle failed on the lock. A copy
    starts from the original's names, for the same classes, and registers apart."""
    mine = Registry("thing")
    mine.register(dict, name="Dict")
    assert mine.get("Dict") is dict  # loaded once: the copy keeps what was loaded too
    twin = copier(mine)
    assert twin._lock is not mine._lock
    twin.register(list, name="List")
    mine.register(set, name="Set")
    assert (twin.names(), mine.names()) == (["Dict", "List"], ["Dict", "Set"])
    assert twin.get("Dict") is dict
    assert twin.build({"type": "List"}) == []


@needs_fork
@multi_threaded_fork
@pytest.mark.parametrize("copier", COPIERS, ids=["copy", "deepcopy", "pickle"])
def test_a_copy_of_a_registry_has_a_lock_made_anew_in_a_forked_child(
    copier: Callable[[Any], Any],
) -> None:
    """A shallow copy shared the original's lock, which the fork hook re-made for the
    original only: a fork while another thread held it left the copy's first lookup in
    the child waiting for ever. The copy's own lock is made anew there."""
    mine = Registry("thing")
    mine.register(dict, name="Dict")
    twin = copier(mine)
    assert _fork_while(lambda: twin._lock, lambda: twin.get("Dict") is dict) == 0
