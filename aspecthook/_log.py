"""The package logger: structlog, imported on first use so ``import aspecthook`` stays light."""

from __future__ import annotations

from typing import Any

__all__ = ["get_logger"]

_logger: Any = None


def get_logger() -> Any:
    """The ``aspecthook`` structlog logger (created on first call)."""
    global _logger
    if _logger is None:
        import structlog

        _logger = structlog.get_logger("aspecthook")
    return _logger
