"""``Timed``, ``Counted`` and ``Recorder`` in a child made by ``os.fork()`` while another
thread holds their lock, and the fork hook keeping no aspect alive."""

from __future__ import annotations

import gc
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import pytest

import aspecthook as ah
from aspecthook.aspects import Counted, Timed
from aspecthook.testing import Recorder

needs_fork = pytest.mark.skipif(
    not hasattr(os, "fork"), reason="os.fork() does not exist on this platform (Windows)"
)


def add(x: int) -> int:
    return x + 1


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


@needs_fork
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
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
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with aspect._lock:
            holding.set()
            release.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    holding.wait()
    try:
        pid = os.fork()
        if pid == 0:  # the child: report by exit code, never return into pytest
            code = 1
            try:
                code = 0 if use(aspect) else 2
            finally:
                os._exit(code)
    finally:
        release.set()
        holder.join()
    assert _exit_status(pid) == 0


@pytest.mark.parametrize("make", [Timed, Counted, Recorder], ids=["Timed", "Counted", "Recorder"])
def test_the_fork_hook_keeps_no_aspect_alive(make: Callable[[], Any]) -> None:
    """Each aspect is made known to the fork hook, weakly: a dropped one is collected."""
    ref = weakref.ref(make())
    for _ in range(3):
        gc.collect()
    assert ref() is None
