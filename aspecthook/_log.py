"""The package logger: structlog, imported on first use so ``import aspecthook`` stays light."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["get_logger", "log_safely", "set_logger"]

_logger: Any = None


def get_logger() -> Any:
    """The ``aspecthook`` structlog logger (created on first call)."""
    global _logger
    if _logger is None:
        import structlog

        try:
            _logger = structlog.get_logger("aspecthook")
        except AttributeError:
            # structlog is being imported, and its own import of a module (json, logging)
            # ran an import hook of ours that reports something: a logger for this once.
            return _StderrLogger()
    return _logger


class _StderrLogger:
    """Writes ``aspecthook: <level>: <event> key=value ...`` lines to stderr."""

    def __getattr__(self, level: str) -> Any:
        def log(event: str, **fields: Any) -> None:
            fields.pop("exc_info", None)
            text = " ".join(f"{key}={value!r}" for key, value in fields.items())
            sys.stderr.write(f"aspecthook: {level}: {event} {text}\n")

        return log


def set_logger(logger: Any) -> Any:
    """Make ``logger`` the package logger and return the one it replaces.

    ``None`` goes back to the structlog logger, created again on the next ``get_logger()``.
    ``aspecthook run`` uses this to silence the package's log lines while it weaves and to
    send them to stderr afterwards, without touching structlog's global configuration.
    """
    global _logger
    previous, _logger = _logger, logger
    return previous


def log_safely(level: str, event: str, **fields: Any) -> None:
    """Log ``event`` at ``level`` through the package logger, never raising.

    For reports made on a user's call (an advice's failure, a retry): a log sink that
    raises (a full disk, a closed file) must not turn the report into the call's error.
    The report then goes to stderr, as ``logging.Handler.handleError`` does for its own.
    """
    try:
        getattr(get_logger(), level)(event, **fields)
    except Exception as exc:
        fields.pop("exc_info", None)
        try:
            sys.stderr.write(
                f"aspecthook: could not log {event} {fields} ({type(exc).__name__}: {exc})\n"
            )
        except Exception:
            pass  # stderr is gone too: nowhere left to report to
