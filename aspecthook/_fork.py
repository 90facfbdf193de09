"""Locks that a child made by ``os.fork()`` gets back unlocked.

A child has only the thread that forked; a lock another thread held at that moment stays
held in the child, by a thread that no longer exists, and the child's first use of it
waits for ever. Objects that keep a lock (``Timed``, ``Counted``, ``Recorder``, each
``aspecthook.registry.Registry``) register here and are
given fresh locks in the child, as the standard library's ``logging`` handlers are; the
module-level locks (the registry's, the handles' waits, the process hooks', the logging
configuration's) are registered once and re-made in place (``_at_fork_reinit``, what
``threading`` itself uses: other modules hold them by name, so they cannot be replaced).

One process-wide ``os.register_at_fork`` hook (a registration cannot be undone, so one per
object would pile up) over a weak mapping: being registered keeps no object alive.
"""

from __future__ import annotations

import os
import weakref
from typing import Any, Protocol, TypeVar

__all__ = ["reinit_after_fork", "reset_locks_after_fork"]


class _HasLocks(Protocol):
    def _reset_locks(self) -> None: ...


# By id: an aspect need not be hashable. An entry goes when its object is collected.
_OWNERS: weakref.WeakValueDictionary[int, _HasLocks] = weakref.WeakValueDictionary()
# Module-level locks: they live as long as the process.
_MODULE_LOCKS: list[Any] = []


def reset_locks_after_fork(owner: _HasLocks) -> None:
    """Have ``owner._reset_locks()`` called in every child forked from now on."""
    _OWNERS[id(owner)] = owner


_Lock = TypeVar("_Lock")


def reinit_after_fork(lock: _Lock) -> _Lock:
    """Have a module-level ``lock`` (a ``threading.Lock`` or ``RLock``) unlocked in every
    child forked from now on; returns it, for ``LOCK = reinit_after_fork(RLock())``."""
    _MODULE_LOCKS.append(lock)
    return lock


def _after_fork_in_child() -> None:
    for lock in _MODULE_LOCKS:
        lock._at_fork_reinit()
    for owner in list(_OWNERS.values()):
        owner._reset_locks()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_after_fork_in_child)
