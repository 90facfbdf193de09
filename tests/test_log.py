"""aspecthook._log: the package's own structlog logger, replaceable as a whole."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from aspecthook import _cli_logging, _log


@pytest.fixture(autouse=True)
def _restore_logger() -> Iterator[None]:
    """Put back whatever logger the package had before the test."""
    previous = _log.set_logger(None)
    _log.set_logger(previous)
    yield
    _log.set_logger(previous)


class ListLogger:
    """Records every call as (method, event, fields)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def __getattr__(self, method: str) -> Any:
        return lambda event, **fields: self.calls.append((method, event, fields))


def test_default_logger_is_structlogs_aspecthook_logger() -> None:
    """Without set_logger, get_logger() is structlog's logger (so capture_logs sees it)."""
    _log.set_logger(None)
    with capture_logs() as logs:
        _log.get_logger().warning("weave.skipped", target="x")
    assert logs == [{"event": "weave.skipped", "target": "x", "log_level": "warning"}]
    assert _log.get_logger() is _log.get_logger()


def test_set_logger_replaces_the_logger_and_returns_the_previous_one() -> None:
    """set_logger(logger) makes get_logger() return it; it returns what was there."""
    first, second = ListLogger(), ListLogger()
    _log.set_logger(first)
    assert _log.set_logger(second) is first
    _log.get_logger().error("advice.failed", advice="a")
    assert second.calls == [("error", "advice.failed", {"advice": "a"})]
    assert first.calls == []


def test_cli_quiets_then_redirects_core_logs_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    """aspecthook run silences the package logger while weaving, then sends it to stderr."""
    _cli_logging._quiet_core_logs()
    _log.get_logger().warning("weave.skipped", target="quiet")
    _cli_logging._core_logs_to_stderr()
    _log.get_logger().warning("weave.failed", target="loud")
    captured = capsys.readouterr()
    assert "quiet" not in captured.err
    assert "weave.failed" in captured.err
    assert "loud" in captured.err
    assert captured.out == ""


def test_cli_leaves_out_the_failures_it_reports_itself(capsys: pytest.CaptureFixture[str]) -> None:
    """A config weave that fails later is reported at exit with its config key: the
    package's ``weave.failed`` line for it said it a second time. Only those are left out:
    a failure of the program's own weave, and other events, still show."""
    _cli_logging._core_logs_to_stderr({"cfg.target"})
    _log.get_logger().warning("weave.failed", target="cfg.target", reason="config's")
    _log.get_logger().warning("weave.failed", target="own.target", reason="program's")
    _log.get_logger().error("advice.failed", target="cfg.target", reason="advice")
    err = capsys.readouterr().err
    assert "config's" not in err
    assert "program's" in err
    assert "advice.failed" in err


def test_a_report_made_while_structlog_is_imported_does_not_break_that_import() -> None:
    """A pending weave that fails on a module structlog's own import brings in (json)
    reports it on stderr; ``import structlog`` (the user's, or the logger's) goes on."""
    import subprocess
    import sys

    code = (
        "import aspecthook as ah\n"
        "ah.weave('json.nosuch', before=lambda ctx: None)\n"
        "import structlog\n"
        "print('imported', structlog.get_logger is not None)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "imported True\n"
    assert "aspecthook: warning: weave.failed target='json.nosuch'" in done.stderr
