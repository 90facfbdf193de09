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

``OwnsLock`` gives such an object's copies (``copy.copy``, ``copy.deepcopy``) a lock of
their own, registered here too, and data of their own to guard with it; so does
unpickling one (``multiprocessing`` pickles what it hands a spawned worker).
"""

from __future__ import annotations

import copy
import os
import weakref
from typing import Any, Protocol, TypeVar

from ._typing import Self

__all__ = ["OwnsLock", "reinit_after_fork", "reset_locks_after_fork"]


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
    child forked from now on; returns it, for ``LOCK = reinit_after_fork(RLock())``.
    Anything else with an ``_at_fork_reinit()`` method is called the same way (in the
    child's one thread: the thread that forked)."""
    _MODULE_LOCKS.append(lock)
    return lock


class OwnsLock:
    """Base of an object that guards what it records with a lock of its own, ``_lock``.

    ``_own_lock()`` makes the lock (``_reset_locks``) and has it made anew in a forked
    child. A copy, shallow or deep, gets a lock of its own the same way (sharing the
    original's, it would also lose it to a fork: the child re-makes the original's
    only), and copies of what the lock guards (``_copied_data``, read under the
    original's lock), so that the two record apart from each other. A pickle carries
    what a copy gets (``_pickled_data``; a lock cannot be pickled) and its unpickling
    makes the lock, as a copy does: an aspect handed to a worker process (``multiprocessing``
    with ``spawn`` pickles it) goes on there from what it had recorded.
    """

    _lock: Any

    def _reset_locks(self) -> None:
        """Make ``_lock`` anew (a subclass says which kind of lock)."""
        raise NotImplementedError

    def _own_lock(self) -> None:
        """Make the lock, and have it made anew in every child forked from now on."""
        self._reset_locks()
        reset_locks_after_fork(self)

    def _copied_data(self, memo: dict[int, Any] | None) -> dict[str, Any]:
        """Copies of the attributes the lock guards, by name (called with it held); a
        deep copy's ``memo`` may be given what it should keep as it is."""
        return {}

    def _pickled_data(self) -> dict[str, Any]:
        """What a pickle carries of the attributes the lock guards, by name (called with
        it held): by default what a copy gets."""
        return self._copied_data(None)

    def __getstate__(self) -> dict[str, Any]:
        """What a pickle carries: the attributes, less the lock (it cannot be pickled)."""
        with self._lock:
            state = {**self.__dict__, **self._pickled_data()}
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled: the attributes, and a lock of its own, made anew after a fork."""
        self.__dict__.update(state)
        self._own_lock()

    def __copy__(self) -> Self:
        return self._copy(None)

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        return self._copy(memo)

    def _copy(self, memo: dict[int, Any] | None) -> Self:
        cls = type(self)
        new = cls.__new__(cls)
        if memo is not None:
            memo[id(self)] = new  # a reference back to this object reaches the copy
        with self._lock:
            state = {**self.__dict__, **self._copied_data(memo)}
        del state["_lock"]
        if memo is not None:  # outside the lock: what it copies may call back into us
            state = copy.deepcopy(state, memo)
        new.__dict__.update(state)
        new._own_lock()
        return new


def _after_fork_in_child() -> None:
    for lock in _MODULE_LOCKS:
        lock._at_fork_reinit()
    for owner in list(_OWNERS.values()):
        owner._reset_locks()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_after_fork_in_child)
