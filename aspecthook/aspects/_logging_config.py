"""``configure_logging``: structlog set up for humans or machines, undone by its handle.

Also the level names ``Logged`` and ``configure_logging`` take (``LEVELS``) and
``logger_settings``, the processors and level filter of that set-up, which
``aspecthook run`` gives a logger of its own. Apart from ``_logged`` because it configures
structlog once, where ``Logged`` runs on every call; ``_logged`` re-exports its names.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
from typing import Any, TextIO

import structlog
import structlog.tracebacks

from .._fork import reinit_after_fork
from .._handle import Handle
from ..errors import InvalidOptionError

__all__ = ["LEVELS", "configure_logging", "logger_settings"]

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
"""Level names ``Logged`` and ``configure_logging`` take, with structlog's numbers."""


def _level(option: str, value: object) -> tuple[str, int]:
    name = value.lower() if isinstance(value, str) else value
    for level_name, number in LEVELS.items():
        if name in (level_name, number):
            return level_name, number
    raise InvalidOptionError(
        f"{option}={value!r} is not a log level: use one of {', '.join(map(repr, LEVELS))}",
        option=option,
        value=value,
    )


def configure_logging(
    format: str = "console",
    level: str | int = "info",
    file: str | os.PathLike[str] | TextIO | None = None,
) -> Handle:
    """Configure structlog for humans (``'console'``) or machines (``'json'`` lines).

    Both use structlog's conventions: ``merge_contextvars`` (so ``Logged``'s context
    shows), ``add_log_level``, ``StackInfoRenderer``, a ``TimeStamper`` and
    ``make_filtering_bound_logger(level)``. ``'console'`` is what structlog does when
    unconfigured (local time, ``ConsoleRenderer``, colours on a terminal) plus the level;
    ``'json'`` writes one JSON object per line with an ISO UTC timestamp and the traceback
    as data (``dict_tracebacks``). Tracebacks leave out local variables, which would show
    the raw arguments ``redact=`` hides (and uncapped ones). Output goes to ``file`` (a
    path, opened for appending, or an open text stream) or to stderr.

    Returns a handle whose ``remove()`` restores the previous configuration and closes a
    file opened here. Handles may be removed in any order: the newest configuration still
    in place stays in force (the one from before them all once every one is removed).
    """
    level_name, _ = _level("level", level)
    _check_format(format)
    stream, opened = _stream(file)
    config: dict[str, Any] = {
        **logger_settings(format, level_name, stream),
        "logger_factory": structlog.WriteLoggerFactory(file=stream),
        "cache_logger_on_first_use": False,
    }
    mine = _Configured(config, structlog.is_configured(), structlog.get_config())
    with _CONFIGURED_LOCK:
        _CONFIGURED.append(mine)
        structlog.configure(**config)

    def undo() -> None:
        _unconfigure(mine)
        if opened is not None:
            opened.close()

    return Handle(undo, f"configure_logging({format!r}, {level_name!r})")


def _check_format(format: str) -> None:
    if format not in ("console", "json"):
        raise InvalidOptionError(
            f"format={format!r} is not a log format: use 'console' for humans or 'json' for "
            "JSON lines",
            option="format",
            value=format,
        )


def _stream(file: str | os.PathLike[str] | TextIO | None) -> tuple[TextIO, TextIO | None]:
    """Where ``configure_logging`` writes, and the file it opened for that (or None)."""
    if file is None:
        return sys.stderr, None
    if isinstance(file, (str, os.PathLike)):
        opened = open(file, "a", encoding="utf-8")  # noqa: SIM115 - the handle closes it
        return opened, opened
    return file, None


def _unconfigure(mine: _Configured) -> None:
    """Take ``mine`` out of the chain of configurations (its handle's ``remove()``)."""
    # Each handle puts back what it replaced. Removed out of order, its place in the
    # chain is taken by what it replaced: the handle made after it, if it replaced
    # this one's configuration, restores that instead, so no configuration whose file
    # is closed ever comes back (and one the program set in between does).
    with _CONFIGURED_LOCK:
        index = _CONFIGURED.index(mine)
        if index == len(_CONFIGURED) - 1:
            if mine.was_configured:
                structlog.configure(**mine.previous)
            else:
                structlog.reset_defaults()
        else:
            # What the next handle replaced that was this one's goes back to what this
            # one replaced (all of it, or the parts the program left in between).
            after = _CONFIGURED[index + 1]
            shared = [k for k in _SPLICED if after.previous.get(k) is mine.config[k]]
            if len(shared) == len(_SPLICED):
                after.was_configured, after.previous = mine.was_configured, mine.previous
            elif shared:
                after.previous = {**after.previous, **{k: mine.previous[k] for k in shared}}
        del _CONFIGURED[index]


class _Configured:
    """One configure_logging handle's configuration and the one it replaced."""

    __slots__ = ("config", "previous", "was_configured")

    def __init__(self, config: dict[str, Any], was_configured: bool, previous: dict[str, Any]):
        self.config = config
        self.was_configured = was_configured
        self.previous = previous


# The configure_logging handles not yet removed, oldest first.
_CONFIGURED: list[_Configured] = []
# The settings of a configure_logging configuration that are objects of its own.
_SPLICED = ("processors", "wrapper_class", "logger_factory")
_CONFIGURED_LOCK = reinit_after_fork(threading.Lock())


def logger_settings(format: str, level_name: str, stream: TextIO) -> dict[str, Any]:
    """The processors and level filter of ``configure_logging``'s structlog set-up for
    ``stream``; also for a logger of its own (``aspecthook run``'s ``Logged``)."""
    return {
        "processors": _processors(format, stream),
        "wrapper_class": structlog.make_filtering_bound_logger(level_name),
    }


def _processors(format: str, stream: TextIO) -> list[Any]:
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.StackInfoRenderer(),
    ]
    if format == "json":
        no_locals = structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
        return [
            *processors,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.ExceptionRenderer(no_locals),  # dict_tracebacks, no locals
            structlog.processors.JSONRenderer(),
        ]
    return [
        *processors,
        structlog.dev.set_exc_info,
        structlog.processors.TimeStamper(fmt="%Y-%m-%d %H:%M:%S", utc=False),
        _console_renderer(stream),
    ]


def _console_renderer(stream: TextIO) -> structlog.dev.ConsoleRenderer:
    """structlog's ConsoleRenderer, coloured by its own rule but judged on our stream, and
    with Rich tracebacks (when Rich is installed) that leave out local variables."""
    isatty = getattr(stream, "isatty", None)
    tty = bool(isatty and isatty())
    colors = not os.environ.get("NO_COLOR") and bool(tty or os.environ.get("FORCE_COLOR"))
    options: dict[str, Any] = {} if colors else {"colors": False}
    if importlib.util.find_spec("rich") is not None:
        options["exception_formatter"] = structlog.dev.RichTracebackFormatter(
            show_locals=False, color_system="truecolor" if colors else None
        )
    return structlog.dev.ConsoleRenderer(**options)
