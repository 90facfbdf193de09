"""Cross-cutting aspects shipped with aspecthook: ``Logged``, ``Timed``, ``Retry``, ``Counted``,
and ``Recorder`` for tests.

Each lives in its own private module and is imported on first use, so
``import aspecthook.aspects`` stays cheap and structlog/rich load only when an aspect that
needs them is used. ``Recorder`` is ``aspecthook.testing.Recorder`` itself (the same class),
so that module, and pytest with it, is imported only when ``Recorder`` is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..testing import Recorder
    from ._counted import Counted
    from ._logged import Logged
    from ._logging_config import configure_logging
    from ._retry import Retry
    from ._timed import Summary, Timed, TimingRow

__all__ = [
    "Counted",
    "Logged",
    "Recorder",
    "Retry",
    "Summary",
    "Timed",
    "TimingRow",
    "configure_logging",
]

_WHERE = {
    "Counted": "._counted",
    "Logged": "._logged",
    "configure_logging": "._logging_config",
    "Recorder": "..testing",
    "Retry": "._retry",
    "Summary": "._timed",
    "Timed": "._timed",
    "TimingRow": "._timed",
}

# Hidden from type checkers, which see the imports above instead: a module ``__getattr__``
# would make them accept any name imported from here (a typo included) as ``Any``.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        module = _WHERE.get(name)
        if module is None:
            raise AttributeError(f"module 'aspecthook.aspects' has no attribute {name!r}")
        value = getattr(importlib.import_module(module, __name__), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted(__all__)
