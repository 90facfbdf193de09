"""The engine's own locks in a child made by ``os.fork()`` while another thread holds one."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest

import aspecthook as ah
from aspecthook import _handle, _process, _registry
from aspecthook.aspects import _logging_config
from aspecthook.registry import ASPECTS, Registry


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


def _weave_and_call() -> bool:
    seen: list[int] = []
    with ah.weave(add, before=lambda ctx: seen.append(ctx.args[0])):
        add(1)
    return seen == [1]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork() does not exist on Windows")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
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
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
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
                with lock:  # the lock itself is usable
                    pass
                code = 0 if _weave_and_call() else 2
            finally:
                os._exit(code)
    finally:
        release.set()
        holder.join()
    assert _exit_status(pid) == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork() does not exist on Windows")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_child_forked_while_another_thread_uses_a_registry_can_look_names_up() -> None:
    """A fork while another thread builds from a config (holds a registry's lock, as it
    does while a plugin or torch is imported) left the child's copy held: its first
    ``ASPECTS.get()`` or ``build()`` waited for ever. The child gets it back unlocked."""
    mine = Registry("thing")
    mine.register(dict, name="Dict")
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with ASPECTS._lock, mine._lock:
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
                found = ASPECTS.get("Timed").__name__ == "Timed" and mine.get("Dict") is dict
                code = 0 if found else 2
            finally:
                os._exit(code)
    finally:
        release.set()
        holder.join()
    assert _exit_status(pid) == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork() does not exist on Windows")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
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
