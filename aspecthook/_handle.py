"""Handles: what every registration returns, to undo exactly that registration."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

from ._fork import reinit_after_fork

__all__ = ["Handle"]

#: Guards ``_WAITING``: which handle's removal each waiting thread waits for.
_WAITS = reinit_after_fork(threading.Lock())
_WAITING: dict[int, Handle] = {}


class Handle:
    """Undo for one registration: ``remove()`` (idempotent) or ``with handle: ...``.

    A handle keeps only the undo callable and a description; it never holds the woven
    target strongly, so targets can be garbage collected while a handle is alive.
    ``state`` says what the registration is until it is removed, for the ``repr``
    (``'active'`` when not given): a weave's handle reads its weave's status there
    (``'skipped: no module named ...'``, ``'pending import'``).
    """

    __slots__ = (
        "_done",
        "_lock",
        "_remover",
        "_remover_pid",
        "_state",
        "_undo",
        "description",
        "items",
    )

    def __init__(
        self,
        undo: Callable[[], None] | None,
        description: str = "",
        items: Iterable[Any] = (),
        *,
        state: Callable[[], str] | None = None,
    ) -> None:
        self._undo = undo
        self._state = state
        self._lock = threading.Lock()
        #: While ``remove()`` runs the undo: the thread running it, and the event set
        #: when it has finished (what a ``remove()`` from another thread waits for).
        self._remover: int | None = None
        self._done: threading.Event | None = None
        #: The process that runs the undo: a child forked meanwhile has not that thread.
        self._remover_pid = 0
        self.description = description
        self.items: tuple[Any, ...] = tuple(items)

    @property
    def active(self) -> bool:
        """Whether ``remove()`` has not run yet."""
        return self._undo is not None

    def remove(self) -> None:
        """Undo the registration; a second call does nothing.

        It returns once the registration is undone, also when another thread is undoing
        it at the same time (this call then waits for that one), except where waiting
        could never end: a call from inside the undo itself (advice or a callback of
        the removal that removes the handle again), and one from a thread that the
        removing thread is itself waiting for, or that holds the registry's lock.
        """
        me = threading.get_ident()
        with self._lock:
            undo, self._undo = self._undo, None
            if undo is not None:
                self._remover, self._done = me, threading.Event()
                self._remover_pid = os.getpid()
            remover, done = self._remover, self._done
        if undo is None:
            if done is not None and remover is not None and remover != me:
                _wait(self, done, me)
            return
        assert done is not None
        try:
            undo()
        finally:
            self._remover = self._done = None
            done.set()

    def __enter__(self) -> Handle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        state = "removed" if not self.active else "active"
        if self.active and self._state is not None:
            state = self._state()
        return f"<Handle {self.description} ({state})>"


def _wait(handle: Handle, done: threading.Event, me: int) -> None:
    """Wait until another thread has finished removing ``handle``, unless that could
    deadlock: that thread waits (directly or through others) for a removal this thread
    is running, this thread holds the registry lock that the removal takes, or that
    thread is in the parent of this forked child."""
    from ._registry import LOCK

    # RLock._is_owned (what threading.Condition uses) is missing from the type stubs.
    if LOCK._is_owned():  # type: ignore[attr-defined]
        return
    if handle._remover_pid != os.getpid():
        # A child forked while another thread removed it: that thread is not in this
        # process, so the removal never finishes here; waiting would never end.
        return
    with _WAITS:
        if _waits_for(handle, me):
            return
        _WAITING[me] = handle
    try:
        done.wait()
    finally:
        with _WAITS:
            del _WAITING[me]


def _waits_for(handle: Handle, me: int) -> bool:
    """Whether the thread removing ``handle`` waits, through a chain of removals, for
    one that thread ``me`` is running (under ``_WAITS``)."""
    seen: set[int] = set()
    current: Handle | None = handle
    while current is not None:
        remover = current._remover
        if remover is None or remover in seen:
            return False
        if remover == me:
            return True
        seen.add(remover)
        current = _WAITING.get(remover)
    return False
