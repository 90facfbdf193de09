"""Handles: what every registration returns, to undo exactly that registration."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["Handle"]


class Handle:
    """Undo for one registration: ``remove()`` (idempotent) or ``with handle: ...``.

    A handle keeps only the undo callable and a description; it never holds the woven
    target strongly, so targets can be garbage collected while a handle is alive.
    """

    __slots__ = ("_lock", "_undo", "description", "items")

    def __init__(
        self,
        undo: Callable[[], None] | None,
        description: str = "",
        items: Iterable[Any] = (),
    ) -> None:
        self._undo = undo
        self._lock = threading.Lock()
        self.description = description
        self.items: tuple[Any, ...] = tuple(items)

    @property
    def active(self) -> bool:
        """Whether ``remove()`` has not run yet."""
        return self._undo is not None

    def remove(self) -> None:
        """Undo the registration; a second call does nothing."""
        with self._lock:
            undo, self._undo = self._undo, None
        if undo is not None:
            undo()

    def __enter__(self) -> Handle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        state = "active" if self.active else "removed"
        return f"<Handle {self.description} ({state})>"
