"""The package logger: structlog, imported on first use so ``import aspecthook`` stays light."""

from __future__ import annotations

from typing import Any

__all__ = ["get_logger", "set_logger"]

_logger: Any = None


def get_logger() -> Any:
    """The ``aspecthook`` structlog logger (created on first call)."""
    global _logger
    if _logger is None:
        import structlog

        _logger = structlog.get_logger("aspecthook")
    return _logger


def set_logger(logger: Any) -> Any:
    """Make ``logger`` the package logger and return the one it replaces.

    ``None`` goes back to the structlog logger, created again on the next ``get_logger()``.
    ``aspecthook run`` uses this to silence the package's log lines while it weaves and to
    send them to stderr afterwards, without touching structlog's global configuration.
    """
    global _logger
    previous, _logger = _logger, logger
    return previous
