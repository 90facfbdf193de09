"""Process event sources: process.start, process.exit, exception.uncaught and audit.<event>."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from structlog.testing import capture_logs

import aspecthook as ah
from aspecthook import Glob, Name, Predicate, _process
from aspecthook._pointcut import Pointcut

# -- helpers ------------------------------------------------------------------------------


def run_script(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` as a script in a fresh interpreter (the one running the tests)."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.run(
        [sys.executable, str(script), "arg1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def custom(request: pytest.FixtureRequest) -> str:
    """A custom audit event name no other test raises (raise it with sys.audit)."""
    return f"aspecthook_test.{request.node.name}"


# -- process.start ------------------------------------------------------------------------


def test_process_start_is_delivered_once_to_a_new_subscription(weaver: ah.Weaver) -> None:
    """Subscribing to process.start delivers the event at once with this process's details."""
    got: list[ah.Event] = []
    weaver.on("process.start")(got.append)
    assert len(got) == 1
    event = got[0]
    assert event.name == "process.start"
    assert event.pid == os.getpid()
    assert event.ppid == os.getppid()
    assert event.argv == sys.argv
    assert event.orig_argv == sys.orig_argv
    assert event.executable == sys.executable
    assert event.time <= time.time()


def test_process_start_is_replayed_to_each_later_subscription(weaver: ah.Weaver) -> None:
    """Each subscription gets process.start exactly once, whenever it subscribes."""
    first: list[ah.Event] = []
    second: list[ah.Event] = []
    weaver.on("process.start")(first.append)
    weaver.on("process.*")(second.append)
    assert len(first) == 1
    assert len(second) == 1
    assert first[0].payload == second[0].payload


def test_process_start_follows_priorities_within_one_registration(weaver: ah.Weaver) -> None:
    """Advice registered together receives process.start in priority order."""
    ran: list[str] = []

    class Startup(ah.Aspect):
        @ah.on("process.start", priority="LOW")
        def late(self, event: ah.Event) -> None:
            ran.append("late")

        @ah.on("process.start", priority="HIGHEST")
        def early(self, event: ah.Event) -> None:
            ran.append("early")

    weaver.register(Startup())
    assert ran == ["early", "late"]


def test_process_start_subscriber_failure_is_logged_with_errors_log(weaver: ah.Weaver) -> None:
    """A failing process.start subscriber with errors='log' is logged, not raised."""

    def broken(event: ah.Event) -> None:
        raise RuntimeError("broken subscriber")

    with capture_logs() as logs:
        advice = weaver.on("process.start", errors="log")(broken)
    assert advice.failures == 1
    assert [entry["event"] for entry in logs] == ["advice.failed"]


def test_process_start_subscriber_failure_raises_at_registration(weaver: ah.Weaver) -> None:
    """With errors='raise' the subscriber's exception surfaces where it subscribed."""

    def broken(event: ah.Event) -> None:
        raise RuntimeError("broken subscriber")

    with pytest.raises(RuntimeError, match="broken subscriber"):
        weaver.on("process.start")(broken)


def test_predicate_for_other_events_breaks_no_process_source(
    weaver: ah.Weaver, tmp_path: Path, custom: str
) -> None:
    """A predicate that cannot judge process or audit events breaks neither them nor itself."""
    known = {"training.step": True}
    got: list[ah.Event] = []
    weaver.on(Predicate(lambda point: known[min(point.names)]))(got.append)  # KeyError else
    sys.audit(custom)
    (tmp_path / "file.txt").write_text("audited operations still work")
    weaver.emit("training.step", step=2)
    assert [e.name for e in got] == ["training.step"]


def test_local_weaver_subscriptions_install_nothing() -> None:
    """A runner's local weaver does not receive process events, so none is replayed."""
    local = ah.Weaver("local", local=True)
    got: list[ah.Event] = []
    local.on("process.start")(got.append)
    assert got == []
    local.close()


def test_a_process_event_subscription_on_a_local_weaver_is_warned_about() -> None:
    """Subscribing to a process event on a local weaver (a runner's aspect) logs that it
    will not arrive; a broad subscription for the weaver's own events does not."""
    local = ah.Weaver("local", local=True)
    with capture_logs() as logs:
        local.on("exception.uncaught")(lambda event: None)
        local.on("audit.open")(lambda event: None)
        local.on("*")(lambda event: None)
        local.on("checkpoint.*")(lambda event: None)
    warned = [e["events"] for e in logs if e["event"] == "process.local_subscription"]
    assert warned == [["exception.uncaught"], ["audit.open"]]
    local.close()


# -- process.exit -------------------------------------------------------------------------

EXIT_SUBSCRIBER = """
import aspecthook as ah

@ah.on("process.exit")
def bye(event):
    exc = type(event.exc).__name__ if event.exc is not None else None
    print("exit", event.exit_code, exc, event.pid, event.uptime >= 0, flush=True)
"""


def test_process_exit_is_emitted_at_a_normal_end(tmp_path: Path) -> None:
    """process.exit is emitted once at a normal end; the status is unknown (None) and 0."""
    result = run_script(tmp_path, EXIT_SUBSCRIBER + "print('body')\n")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "body"
    assert lines[1:] == [f"exit None None {lines[1].split()[3]} True"]


def test_process_exit_keeps_the_sys_exit_status(tmp_path: Path) -> None:
    """After sys.exit(3) the event is emitted and the process still exits with 3."""
    result = run_script(tmp_path, EXIT_SUBSCRIBER + "import sys\nsys.exit(3)\n")
    assert result.returncode == 3
    assert result.stdout.startswith("exit None None ")


def test_process_exit_reports_the_uncaught_exception(tmp_path: Path) -> None:
    """An uncaught exception is in the payload (exit_code 1); the traceback still prints."""
    result = run_script(tmp_path, EXIT_SUBSCRIBER + "raise ValueError('bad input')\n")
    assert result.returncode == 1
    assert result.stdout.startswith("exit 1 ValueError ")
    assert "ValueError: bad input" in result.stderr


def test_process_exit_ignores_what_a_tool_left_for_a_debugger(tmp_path: Path) -> None:
    """sys.last_value set by a test runner or a debugger (the program then ends normally)
    is not reported as the exception that ended the program."""
    left = "import sys\nsys.last_type, sys.last_value = ValueError, ValueError()\n"
    code = EXIT_SUBSCRIBER + left
    result = run_script(tmp_path, code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("exit None None ")


def test_process_exit_ignores_an_error_a_program_only_shows(tmp_path: Path) -> None:
    """A handled error shown through sys.excepthook (the program then ends normally) is
    not the exception that ended the program."""
    shown = """
    import sys
    try:
        {}["missing"]
    except KeyError:
        sys.excepthook(*sys.exc_info())
    """
    result = run_script(tmp_path, EXIT_SUBSCRIBER + textwrap.dedent(shown))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("exit None None ")


def test_process_exit_reports_a_crash_behind_a_hook_that_does_not_chain(
    tmp_path: Path,
) -> None:
    """A hook installed over ours that does not call it (a pretty-printer): the crash is
    still the exception that ended the program."""
    pretty = """
    import sys
    sys.excepthook = lambda kind, exc, tb: print("pretty:", kind.__name__, flush=True)
    raise RuntimeError("boom")
    """
    result = run_script(tmp_path, EXIT_SUBSCRIBER + textwrap.dedent(pretty))
    assert result.returncode == 1
    assert result.stdout.splitlines()[-1].startswith("exit 1 RuntimeError ")


def test_process_exit_uses_a_noted_exit_code(tmp_path: Path) -> None:
    """note_exit_code() (used by aspecthook run) sets the payload's exit_code."""
    code = EXIT_SUBSCRIBER + "from aspecthook import _process\n_process.note_exit_code(7)\n"
    result = run_script(tmp_path, code)
    assert result.stdout.startswith("exit 7 None ")


def test_failing_exit_subscriber_does_not_change_the_exit_status(tmp_path: Path) -> None:
    """A process.exit subscriber that raises is reported by Python; the status stays."""
    code = """
    import sys
    import aspecthook as ah

    @ah.on("process.exit")
    def bye(event):
        raise RuntimeError("subscriber failed")

    sys.exit(4)
    """
    result = run_script(tmp_path, code)
    assert result.returncode == 4
    assert "RuntimeError: subscriber failed" in result.stderr


def test_a_failing_exit_subscriber_does_not_keep_the_others_from_the_event(
    tmp_path: Path,
) -> None:
    """Every process.exit subscriber gets the event, whichever raises: the first failure
    is reported by Python, a later one through the log."""
    code = """
    import sys
    import aspecthook as ah

    @ah.on("process.exit", priority="HIGHEST")
    def first(event):
        raise RuntimeError("first failed")

    @ah.on("process.exit", priority="HIGH")
    def second(event):
        raise RuntimeError("second failed")

    @ah.on("process.exit", priority="LOW")
    def last(event):
        print("last got", event.exit_code, flush=True)

    sys.exit(4)
    """
    result = run_script(tmp_path, code)
    assert result.returncode == 4
    assert result.stdout.startswith("last got None")
    output = result.stdout + result.stderr
    assert "RuntimeError: first failed" in result.stderr
    assert "process.subscriber_failed" in output
    assert "second failed" in output


def test_process_exit_source_is_installed_once(tmp_path: Path) -> None:
    """Several process.exit subscriptions share one atexit handler: one event each."""
    code = """
    import aspecthook as ah
    for label in ("a", "b"):
        ah.on("process.exit")(lambda event, label=label: print("exit", label, flush=True))
    ah.on("process.*")(lambda event: print("glob", event.name, flush=True))
    """
    result = run_script(tmp_path, code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "glob process.start",
        "exit a",
        "exit b",
        "glob process.exit",
    ]


# -- exception.uncaught -------------------------------------------------------------------


def test_uncaught_exception_is_emitted_then_printed(tmp_path: Path) -> None:
    """An uncaught exception is emitted, then the previous hook prints it; status 1."""
    code = """
    import aspecthook as ah

    @ah.on("exception.uncaught")
    def seen(event):
        print("uncaught", event.source, event.exc_type.__name__, event.exc,
              event.thread.name, event.traceback is not None, flush=True)

    raise KeyError("boom")
    """
    result = run_script(tmp_path, code)
    assert result.returncode == 1
    assert result.stdout == "uncaught sys.excepthook KeyError 'boom' MainThread True\n"
    assert "Traceback (most recent call last)" in result.stderr
    assert "KeyError: 'boom'" in result.stderr


def test_uncaught_exception_chains_to_the_hook_installed_before(tmp_path: Path) -> None:
    """The wrapper calls whatever sys.excepthook was installed before subscribing."""
    code = """
    import sys
    import aspecthook as ah

    def mine(exc_type, exc, tb):
        print("previous hook", exc_type.__name__, flush=True)
        sys.exit(5)

    sys.excepthook = mine
    ah.on("exception.uncaught")(lambda event: print("event", flush=True))
    assert sys.excepthook.previous is mine
    raise OSError("disk")
    """
    result = run_script(tmp_path, code)
    assert result.stdout.splitlines() == ["event", "previous hook OSError"]
    assert result.returncode == 5  # the previous hook still decides how the process ends


@pytest.fixture
def fresh_excepthooks(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Fake previous hooks and a not-yet-installed source; everything restored afterwards."""
    previous: list[Any] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: previous.append(args))
    monkeypatch.setattr(sys, "excepthook", lambda *exc: previous.append(exc))
    others = _process._installed - {_process.EXCEPTION_UNCAUGHT}
    monkeypatch.setattr(_process, "_installed", others)
    return previous


def test_thread_exception_is_emitted_and_chained(
    weaver: ah.Weaver, fresh_excepthooks: list[Any]
) -> None:
    """An exception escaping a thread is emitted with the thread, then the old hook runs."""
    got: list[ah.Event] = []
    weaver.on("exception.uncaught")(got.append)
    error = ValueError("in thread")

    def work() -> None:
        raise error

    thread = threading.Thread(target=work, name="worker")
    thread.start()
    thread.join()
    assert len(got) == 1
    event = got[0]
    assert event.source == "threading.excepthook"
    assert event.thread is thread
    assert event.exc is error
    assert event.exc_type is ValueError
    assert [args.exc_value for args in fresh_excepthooks] == [error]


def test_excepthooks_are_wrapped_once(weaver: ah.Weaver, fresh_excepthooks: list[Any]) -> None:
    """Many subscriptions install one wrapper per hook, each chaining to the old hook."""
    old_thread, old_sys = threading.excepthook, sys.excepthook
    for _ in range(3):
        weaver.on("exception.*")(lambda event: None)
    assert isinstance(threading.excepthook, _process.ChainedThreadExcepthook)
    assert threading.excepthook.previous is old_thread
    assert isinstance(sys.excepthook, _process.ChainedExcepthook)
    assert sys.excepthook.previous is old_sys


def test_a_subscription_after_our_hook_was_put_back_wraps_the_hooks_again(
    weaver: ah.Weaver, fresh_excepthooks: list[Any]
) -> None:
    """A library that swaps a hook for a while and puts back the one it saved (pytest
    before 8.4, around each test phase) takes our wrapper off with its own: the next
    subscription wraps the hooks in place then, and the event is still sent once."""
    saved_thread, saved_sys = threading.excepthook, sys.excepthook
    threading.excepthook = lambda args: None
    sys.excepthook = lambda *exc: None
    weaver.on("exception.uncaught")(lambda event: None)
    threading.excepthook, sys.excepthook = saved_thread, saved_sys  # the library's undo
    got: list[ah.Event] = []
    weaver.on("exception.uncaught")(got.append)
    error = ValueError("after the undo")
    args = SimpleNamespace(exc_type=ValueError, exc_value=error, exc_traceback=None, thread=None)
    threading.excepthook(args)  # type: ignore[arg-type]
    sys.excepthook(ValueError, error, None)
    assert [event.source for event in got] == ["threading.excepthook", "sys.excepthook"]
    assert fresh_excepthooks == [args, (ValueError, error, None)]


def test_a_hook_that_chains_to_ours_under_a_new_wrapper_sends_the_event_once(
    weaver: ah.Weaver, fresh_excepthooks: list[Any]
) -> None:
    """Our wrapper, a library's hook that chains to it, our wrapper again: one event."""
    weaver.on("exception.uncaught")(lambda event: None)
    ours = sys.excepthook
    sys.excepthook = lambda *exc: ours(*exc)  # a hook installed later that chains
    got: list[ah.Event] = []
    weaver.on("exception.uncaught")(got.append)
    error = ValueError("once")
    sys.excepthook(ValueError, error, None)
    assert [event.exc for event in got] == [error]
    assert fresh_excepthooks == [(ValueError, error, None)]


def test_failing_subscriber_never_swallows_the_exception(
    weaver: ah.Weaver, fresh_excepthooks: list[Any]
) -> None:
    """A subscriber that raises still lets the previous hook see the original exception,
    and its own error is reported once as a log event, not raised from the hook (where
    it would be printed as a second uncaught exception)."""

    def broken(event: ah.Event) -> None:
        raise RuntimeError("subscriber failed")

    weaver.on("exception.uncaught")(broken)
    original = ValueError("original")
    args = SimpleNamespace(exc_type=ValueError, exc_value=original, exc_traceback=None, thread=None)
    with capture_logs() as logs:
        threading.excepthook(args)  # type: ignore[arg-type]
        sys.excepthook(ValueError, original, None)
    assert fresh_excepthooks == [args, (ValueError, original, None)]
    failed = [e for e in logs if e["event"] == "process.subscriber_failed"]
    assert [e["error"] for e in failed] == ["RuntimeError: subscriber failed"] * 2


def test_a_failing_subscriber_does_not_keep_the_others_from_the_exception(
    weaver: ah.Weaver, fresh_excepthooks: list[Any]
) -> None:
    """A subscriber that raises is reported and the ones after it still get the event."""
    got: list[ah.Event] = []

    def broken(event: ah.Event) -> None:
        raise RuntimeError("subscriber failed")

    weaver.on("exception.uncaught", priority="HIGH")(broken)
    weaver.on("exception.uncaught", priority="LOW")(got.append)
    original = ValueError("original")
    with capture_logs() as logs:
        sys.excepthook(ValueError, original, None)
    assert [event.exc for event in got] == [original]
    failed = [e for e in logs if e["event"] == "process.subscriber_failed"]
    assert [e["error"] for e in failed] == ["RuntimeError: subscriber failed"]
    assert fresh_excepthooks == [(ValueError, original, None)]


def test_a_thread_ended_by_sys_exit_is_no_uncaught_exception(
    weaver: ah.Weaver, fresh_excepthooks: list[Any]
) -> None:
    """sys.exit() in a thread ends it normally (Python's hook ignores it): no event, and
    the previous hook is still called."""
    got: list[ah.Event] = []
    weaver.on("exception.uncaught")(got.append)
    thread = threading.Thread(target=sys.exit, args=(0,))
    thread.start()
    thread.join()
    assert got == []
    assert [args.exc_type for args in fresh_excepthooks] == [SystemExit]


def test_a_subscriber_failure_in_the_main_thread_prints_the_traceback_once(
    tmp_path: Path,
) -> None:
    """The program's traceback is printed once, the subscriber's failure is reported, and
    the status is still 1."""
    code = """
    import aspecthook as ah

    @ah.on("exception.uncaught")
    def broken(event):
        raise RuntimeError("subscriber failed")

    raise KeyError("boom")
    """
    result = run_script(tmp_path, code)
    assert result.returncode == 1
    output = result.stdout + result.stderr
    assert output.count("KeyError: 'boom'") == 1
    assert "process.subscriber_failed" in output
    assert "Error in sys.excepthook" not in output


# -- audit.<event> ------------------------------------------------------------------------


def test_audit_open_is_emitted(weaver: ah.Weaver, tmp_path: Path) -> None:
    """Opening a file emits audit.open with the audit event's arguments."""
    got: list[ah.Event] = []
    weaver.on("audit.open")(got.append)
    path = tmp_path / "data.txt"
    with open(path, "w") as handle:
        handle.write("x")
    opened = [e for e in got if e.args[0] == str(path)]
    assert len(opened) == 1
    assert opened[0].name == "audit.open"
    assert opened[0].args[1] == "w"


def test_audit_glob_subscription(weaver: ah.Weaver, custom: str) -> None:
    """A glob subscription receives every audit event it matches."""
    got: list[ah.Event] = []
    weaver.on(f"audit.{custom}.*")(got.append)
    sys.audit(f"{custom}.one", 1)
    sys.audit(f"{custom}.two", 2, "b")
    sys.audit(f"{custom}x.other", 3)
    assert [(e.name, e.args) for e in got] == [
        (f"audit.{custom}.one", (1,)),
        (f"audit.{custom}.two", (2, "b")),
    ]


def test_audit_events_follow_priorities_and_errors_log(weaver: ah.Weaver, custom: str) -> None:
    """Audit events go through emit: priority order, and errors='log' failures are logged."""
    ran: list[str] = []

    def broken(event: ah.Event) -> None:
        ran.append("broken")
        raise RuntimeError("subscriber failed")

    weaver.on(f"audit.{custom}", priority="LOW")(lambda e: ran.append("low"))
    weaver.on(f"audit.{custom}", priority="HIGH", errors="log")(broken)
    with capture_logs() as logs:
        sys.audit(custom)
    assert ran == ["broken", "low"]
    assert [entry["event"] for entry in logs] == ["advice.failed"]


def test_new_subscription_receives_a_name_a_glob_let_through_before(
    weaver: ah.Weaver, custom: str
) -> None:
    """A name no subscriber matched is skipped only until the subscriptions change."""
    got: list[ah.Event] = []
    weaver.on(f"audit.{custom}.*")(got.append)
    sys.audit(f"{custom}_other")  # through the glob flag, matched by nobody: remembered
    assert f"{custom}_other" in _process._audit_unmatched
    weaver.on(f"audit.{custom}_other")(got.append)
    sys.audit(f"{custom}_other")
    assert [e.name for e in got] == [f"audit.{custom}_other"]


def test_raising_audit_subscriber_aborts_the_operation(weaver: ah.Weaver, custom: str) -> None:
    """With errors='raise' a subscriber can veto an audited operation, as audit hooks do."""

    def forbid(event: ah.Event) -> None:
        raise PermissionError(f"{event.name} is not allowed in tests")

    weaver.on(f"audit.{custom}")(forbid)
    with pytest.raises(PermissionError, match="is not allowed in tests"):
        sys.audit(custom)


def test_removed_audit_subscription_gets_nothing(weaver: ah.Weaver, custom: str) -> None:
    """After remove() the subscriber gets no more events and the dispatcher goes idle."""
    got: list[ah.Event] = []
    advice = weaver.on(f"audit.{custom}")(got.append)
    sys.audit(custom)
    advice.remove()
    sys.audit(custom)
    assert len(got) == 1
    assert custom not in _process._audit_names


def test_audit_subscriber_that_opens_files_does_not_recurse(
    weaver: ah.Weaver, tmp_path: Path
) -> None:
    """Audited operations inside a subscriber are not delivered to it again."""
    log = tmp_path / "log.txt"
    seen: list[str] = []

    def record(event: ah.Event) -> None:
        seen.append(str(event.args[0]))
        with open(log, "a") as handle:  # audited too: must not re-enter
            handle.write("x")

    weaver.on("audit.open")(record)
    target = tmp_path / "target.txt"
    target.write_text("y")
    assert seen.count(str(target)) == 1
    assert str(log) not in seen


def test_audit_dispatcher_is_installed_once(weaver: ah.Weaver, custom: str) -> None:
    """Subscribing to many audit names, exact and glob, adds one audit hook in all."""
    for name in ("open", "socket.connect", "subprocess.Popen", f"{custom}.*"):
        weaver.on(f"audit.{name}")(lambda event: None)
    assert _process.audit_hooks_added == 1


def test_audit_dispatcher_is_added_once_per_process(tmp_path: Path) -> None:
    """In a fresh process, sys.addaudithook is called once, on the first audit subscription."""
    code = """
    import sys
    added = []
    real = sys.addaudithook
    sys.addaudithook = lambda hook: (added.append(hook), real(hook))[1]

    import aspecthook as ah
    ah.on("process.start")(lambda event: None)
    print(len(added))
    first = ah.on("audit.open")(lambda event: None)
    ah.on("audit.socket.*")(lambda event: None)
    first.remove()
    ah.on("audit.open")(lambda event: None)
    print(len(added), added[0].__name__)
    """
    result = run_script(tmp_path, code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["0", "1 _audit_hook"]


# -- which subscriptions can reach audit events --------------------------------------------


@pytest.mark.parametrize(
    ("pointcut", "exact", "other"),
    [
        (Name("audit.open"), {"open"}, False),
        (Name("audit.socket.connect"), {"socket.connect"}, False),
        (Name("process.exit"), set(), False),
        (Glob("audit.socket.*"), set(), True),
        (Glob("*"), set(), True),
        (Glob("a*"), set(), True),
        (Glob("audit?open"), set(), True),
        (Glob("[a-c]udit.*"), set(), True),
        (Glob("[!a]*"), set(), False),
        (Glob("process.*"), set(), False),
        (Glob("aud?"), set(), False),
        (Name("x") | Glob("audit.*"), set(), True),
        (Name("audit.open") | Name("audit.exec"), {"open", "exec"}, False),
        (Name("audit.open") & Predicate(lambda p: True), {"open"}, False),
        (Glob("audit.*") & Name("process.exit"), set(), False),
        (Predicate(lambda p: True), set(), True),
        (~Name("x"), set(), True),
    ],
    ids=repr,
)
def test_audit_interest(pointcut: Pointcut, exact: set[str], other: bool) -> None:
    """Exact audit names come from Name pointcuts; globs that can match audit.* set the flag."""
    assert _process.audit_interest(pointcut) == (frozenset(exact), other)


def test_a_subscriber_that_raises_on_the_replayed_start_is_not_left_registered() -> None:
    """A registration that fails (the replay of process.start raised in the subscriber)
    changes nothing: the subscriber is not registered and later events do not reach it."""
    calls: list[str] = []

    def started(event: ah.Event) -> None:
        calls.append(event.name)
        raise RuntimeError("subscriber bug")

    with pytest.raises(RuntimeError, match="subscriber bug"):
        ah.on("process.start")(started)
    assert not ah.default_weaver.registered
    ah.emit("process.start")
    assert calls == ["process.start"]
