"""The logging of ``aspecthook run``: the package's own log lines and ``Logged``'s logger.

While the config is woven the package logger is silenced (the session reports skipped
targets itself, once, with their config key), then sent to stderr, less the failures of
the config's weaves, which the session reports at exit with their key. The config's
``Logged`` aspects get a logger of their own, built as ``logging:`` says, without
touching structlog's global configuration, which is the program's. Separate from the
session, which only calls it: this is the part that knows structlog (imported only here,
and only when it is needed).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from .errors import AspectHookError

if TYPE_CHECKING:
    from ._config import RunConfig

__all__ = ["_configure_logging", "_core_logs_to_stderr", "_quiet_core_logs"]


def _quiet_core_logs() -> None:
    """Silence aspecthook's own log lines while weaving: we report skips ourselves."""
    from . import _log

    _log.set_logger(_NullLogger())


def _core_logs_to_stderr(reported: Collection[str] = ()) -> None:
    """aspecthook's own log lines (late weave failures, advice failures) go to stderr,
    except a ``weave.failed`` of a target in ``reported``: the session reports those at
    exit, with the config key, and the line would say it a second time.

    Only the package's logger is redirected (not structlog's global configuration), so
    the program's own structlog output is what it would be without us.
    """
    from . import _log

    _log.set_logger(_StderrLogger(frozenset(reported)))


class _NullLogger:
    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


class _StderrLogger:
    """Becomes a structlog logger printing to stderr on first use (structlog is slow to
    import, and most runs never log), leaving out the failures of ``reported`` weaves."""

    def __init__(self, reported: frozenset[str] = frozenset()) -> None:
        self._reported = reported

    def __getattr__(self, name: str) -> Any:
        import structlog

        from . import _log

        logger: Any = structlog.wrap_logger(structlog.PrintLogger(sys.stderr))
        if self._reported:
            logger = _LeavesOutReported(logger, self._reported)
        _log.set_logger(logger)
        return getattr(logger, name)


class _LeavesOutReported:
    """The package logger less ``weave.failed`` lines of the targets the session reports."""

    def __init__(self, logger: Any, reported: frozenset[str]) -> None:
        self._logger = logger
        self._reported = reported

    def warning(self, event: str, **fields: Any) -> None:
        if event == "weave.failed" and fields.get("target") in self._reported:
            return
        self._logger.warning(event, **fields)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._logger, name)


def _configure_logging(config: RunConfig, aspects: list[Any]) -> None:
    """Give the config's ``Logged`` aspects a logger of their own, as ``logging:`` says.

    Console lines on stderr at level ``debug`` without a ``logging:`` section (so every
    ``Logged`` event shows whatever level the aspect logs at). structlog's global
    configuration is the program's and is left alone, so the program's own structlog
    output goes where it would without us. Without a ``logging:`` section, structlog
    already configured before the program starts (``sitecustomize``) keeps ``Logged``.
    """
    logged = sys.modules.get("aspecthook.aspects._logged")  # not loaded: no Logged used
    users = [
        a
        for a in aspects
        if logged is not None and isinstance(a, logged.Logged) and a.logger is logged.log
    ]
    if config.logging is None:
        if not users:
            return
        import structlog

        if structlog.is_configured():
            return
    logger = _logged_logger(config)  # with a logging: section, checked even if unused
    for aspect in users:
        aspect.logger = logger


def _logged_logger(config: RunConfig) -> Any:
    """A structlog logger as ``configure_logging(**config.logging)`` would configure one
    (level ``debug`` unless given), without configuring structlog."""
    import structlog

    from .aspects._logging_config import _level, logger_settings

    settings = dict(config.logging or {})
    file = settings.get("file")
    try:
        level, _ = _level("level", settings.get("level", "debug"))
        if file:  # its folder is made, as --trace's is
            os.makedirs(os.path.dirname(os.path.abspath(file)), exist_ok=True)
        # Open for the process's life: Logged may write until its very end.
        stream = open(file, "a", encoding="utf-8") if file else sys.stderr  # noqa: SIM115
    except (AspectHookError, OSError) as exc:
        raise config.error("logging", str(exc)) from None
    format = settings.get("format", "console")
    return structlog.wrap_logger(
        structlog.WriteLogger(stream), **logger_settings(format, level, stream)
    ).bind()
