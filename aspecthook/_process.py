"""Events from the process itself, for ``on(...)``: start, exit, uncaught exceptions, audit.

Nothing here runs until something subscribes. The first ``on`` advice (registered on a
global weaver: the default one or a private ``Weaver()``) whose pointcut can match one of
these names installs the matching source, once per process; later subscriptions reuse it.
Events go to every global weaver's subscribers in priority order, as
``default_weaver.emit`` sends them, and ``errors='log'`` applies; unlike ``emit``, a
subscriber that raises does not keep the ones after it from ``process.exit`` or
``exception.uncaught`` (no caller is there to handle it). A local weaver (a runner's) only
sees what is emitted on it, so process events do not reach advice registered there.

``process.start``
    Payload ``pid``, ``ppid``, ``argv`` (``sys.argv`` now), ``orig_argv`` (the command line
    the interpreter got), ``executable`` and ``time`` (``time.time()`` when aspecthook was
    imported, or when this process was forked: the closest to the start it can observe).
    The process started before anyone could subscribe, so the event is *replayed* to each
    subscription when it is registered, like pluggy's historic hooks: every subscriber
    gets exactly one ``process.start`` per process, whatever the import order, and a
    subscriber never gets it twice. Advice registered together gets it in priority order.
    A forked child does not deliver it again to subscriptions it inherited (no code
    that runs at a fork can safely call user code); new subscriptions there get the
    child's own pid and fork time.
``process.exit``
    One ``atexit`` handler. Payload ``pid``, ``time``, ``uptime`` (seconds since the
    ``process.start`` time), ``exc`` (the uncaught exception ending the program: the last
    one Python stored as ``sys.last_value`` and gave ``sys.excepthook``, whose wrapper below
    is installed with the subscription; an error a program only shows through
    ``sys.excepthook``, or a ``last_value`` a tool left for a debugger, is not taken for it;
    with a later hook that does not chain to ours, ``last_value``) and ``exit_code``.
    Python does not tell atexit handlers the exit status, so ``exit_code`` is ``1`` after
    an uncaught ``Exception``, the value given to ``note_exit_code()`` (``aspecthook run``
    knows the script's status and passes it), and otherwise ``None``: a normal end and
    ``SystemExit`` cannot be told apart. Not delivered on ``os._exit`` or a fatal signal.
    A subscriber that raises is reported by Python ("Exception ignored in atexit
    callback") once every subscriber has had the event; a second one that raises goes to
    the log (``process.subscriber_failed``). The exit status does not change.
``exception.uncaught``
    Wrappers around ``sys.excepthook`` and ``threading.excepthook``. Payload ``exc_type``,
    ``exc``, ``traceback`` and ``thread`` (the thread the exception escaped from);
    ``source`` is ``'sys.excepthook'`` or ``'threading.excepthook'``. After the event the
    wrapper always calls the hook that was installed before it (kept as ``.previous``),
    so the traceback is still printed and the exit status is unchanged; a hook installed
    later that does not chain to ours stops the event, until a subscription made after it
    wraps that hook in turn (each subscription wraps whichever hook is not ours, so a
    library that puts back the hook it had saved does not leave later subscribers
    without the event; a wrapper reached again through a hook that chains sends nothing).
    A thread ended by ``SystemExit`` ended normally (Python's own hook ignores it): no
    event. A subscriber that raises is reported (``process.subscriber_failed``, through
    the log) instead of being taken for a second uncaught exception, and the subscribers
    after it still get the event.
``audit.<event>``
    One ``sys.addaudithook`` dispatcher (``audit.open``, ``audit.socket.connect``,
    ``audit.subprocess.Popen``...); payload ``args``, the audit event's argument tuple.
    Audit hooks cannot be removed, so the dispatcher is built to cost almost nothing
    while nobody listens: it checks the raw event name against a frozenset of exactly
    subscribed names and one flag that is set while a glob or predicate subscription may
    match some ``audit.*`` name, and returns. (``on('*')`` may match audit names, so it
    receives them too.) Both are supersets, recomputed from the registry when an event
    gets past them after subscriptions changed; a name the flag lets through that no
    subscriber matches is remembered until they change. Audited operations performed
    while a subscriber of that thread runs (a logger opening a file) are not delivered,
    which also keeps a subscriber from recursing into itself. An exception from a
    subscriber with ``errors='raise'`` aborts the audited operation, as Python's audit
    hooks do: ``on('audit.socket.connect')`` can forbid network access in tests; use
    ``errors='log'`` to only observe.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from fnmatch import fnmatchcase
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ._chain import order_stage
from ._context import Event
from ._fork import reinit_after_fork
from ._log import get_logger, log_safely
from ._pointcut import Glob, Name, NormalizedName, Pointcut, _And, _Or
from ._registry import LOCK, REGISTRY

if TYPE_CHECKING:
    from ._advice import Advice
    from ._weaver import Weaver

__all__ = [
    "AUDIT_PREFIX",
    "EXCEPTION_UNCAUGHT",
    "PROCESS_EXIT",
    "PROCESS_START",
    "ChainedExcepthook",
    "ChainedThreadExcepthook",
    "audit_interest",
    "ensure_sources",
    "note_exit_code",
    "start_payload",
    "warn_local_subscriptions",
]

PROCESS_START = "process.start"
PROCESS_EXIT = "process.exit"
EXCEPTION_UNCAUGHT = "exception.uncaught"
AUDIT_PREFIX = "audit."
_AUDIT = "audit"  # key of the audit dispatcher in _installed

_POINTS = {name: Event(name, {}) for name in (PROCESS_START, PROCESS_EXIT, EXCEPTION_UNCAUGHT)}
_ANY_NAME = Event("aspecthook.probe.not-a-process-event", {})  # what broad pointcuts match
_NO_NAMES: frozenset[str] = frozenset()

_install_lock = reinit_after_fork(threading.Lock())
_installed: set[str] = set()
#: How many times this module called ``sys.addaudithook``: 0, then 1 for good.
audit_hooks_added = 0

_started_at = time.time()
_exit_code: int | None = None
_uncaught: BaseException | None = None  # what reached sys.excepthook in the main thread

# The audit dispatcher's view of the subscriptions (see the module docstring). Replaced
# whole, never mutated, so the hook reads a consistent value without a lock.
_audit_names: frozenset[str] = _NO_NAMES
_audit_any = False
_audit_version = -1
_audit_unmatched: set[str] = set()  # names a glob let through that no subscriber matched
_audit_state = threading.local()
_uncaught_state = threading.local()
_NOT_CHAINING = object()  # _uncaught_state.chaining while no wrapper of ours is chaining


def _default_weaver() -> Weaver:
    from ._weaver import default_weaver  # not at the top: _weaver imports this module

    return default_weaver


def _deliver(name: str, source: Any = None, **payload: Any) -> list[Exception]:
    """Send ``name`` to every subscriber in priority order, as ``emit`` does, but go on
    past one that raises: nobody can catch it and decide (the program is ending, or an
    exception already escaped it), and the others must still get the event. Returns the
    failures, in order, for the caller to report."""
    event = Event(name, payload, source)
    failures: list[Exception] = []
    for fn in _default_weaver()._subscribers(name):
        try:
            fn(event)
        except Exception as failure:
            failures.append(failure)
    return failures


def _report_failure(name: str, failure: Exception) -> None:
    log_safely(
        "error",
        "process.subscriber_failed",
        source_event=name,
        error=f"{type(failure).__name__}: {failure}",
        exc_info=failure,
    )


# -- installing ------------------------------------------------------------------------------


def ensure_sources(*advices: Advice) -> None:
    """Install the sources that the ``on`` advice among ``advices`` subscribes to.

    Called by ``Weaver.add`` after a successful registration on a global weaver. Each
    source is installed once per process; ``process.start`` is replayed here.
    """
    subscribers = [a for a in advices if a.kind == "on" and a.pointcut is not None]
    if not subscribers:
        return
    if _any_match(subscribers, PROCESS_EXIT):
        _install_once(PROCESS_EXIT, _install_exit)
        # process.exit's ``exc`` is what the main thread's sys.excepthook was given.
        _install_excepthooks()
    elif _any_match(subscribers, EXCEPTION_UNCAUGHT):
        _install_excepthooks()
    if any(_wants_audit(a) for a in subscribers):
        _install_once(_AUDIT, _install_audit)
        _refresh_audit()
    starters = [a for a in subscribers if _matches(a, PROCESS_START)]
    if starters:
        _replay_start(starters)


def warn_local_subscriptions(*advices: Advice) -> None:
    """Say (a warning, once per advice) that ``on`` advice registered on a local weaver (a
    runner's) for a process event will not get it: those are sent to the global weavers.
    Broad subscriptions (``on('*')``) are left alone: they are for the weaver's own events."""
    for advice in advices:
        if advice.kind != "on" or advice.pointcut is None or _matches_any_name(advice):
            continue
        events = [name for name in _POINTS if _matches(advice, name)]
        events += sorted(AUDIT_PREFIX + name for name in audit_interest(advice.pointcut)[0])
        if events:
            get_logger().warning(
                "process.local_subscription",
                advice=advice.name,
                events=events,
                hint="process events go to the global weavers: subscribe with "
                "aspecthook.on(...) (or a Weaver()), not on a runner's weaver",
            )


def _matches_any_name(advice: Advice) -> bool:
    return _matches_point(advice, _ANY_NAME)


def _matches(advice: Advice, name: str) -> bool:
    return _matches_point(advice, _POINTS[name])


def _matches_point(advice: Advice, point: Event) -> bool:
    if advice.pointcut is None:
        return False
    try:
        return advice.pointcut.matches(point)
    except Exception:
        # A predicate written for other events (reading a payload key these probes lack)
        # must not make its registration fail: it is not subscribed to this source.
        return False


def _any_match(advices: Iterable[Advice], name: str) -> bool:
    return any(_matches(a, name) for a in advices)


def _wants_audit(advice: Advice) -> bool:
    if advice.pointcut is None:
        return False
    names, other = audit_interest(advice.pointcut)
    return bool(names) or other


def _install_once(key: str, install: Callable[[], None]) -> None:
    if key in _installed:
        return
    with _install_lock:
        if key in _installed:
            return
        try:
            install()
        except Exception:
            # The registration itself succeeded; a source that cannot be installed (an
            # audit hook refused by another hook) is reported, and retried next time.
            get_logger().warning("process.source_failed", source=key, exc_info=True)
            return
        _installed.add(key)


# -- process.start ----------------------------------------------------------------------------


def start_payload() -> dict[str, Any]:
    """The payload of ``process.start`` for this process."""
    return {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "argv": list(sys.argv),
        "orig_argv": list(sys.orig_argv),
        "executable": sys.executable,
        "time": _started_at,
    }


def _replay_start(advices: list[Advice]) -> None:
    event = Event(PROCESS_START, start_payload())
    for advice in order_stage(advices):
        # compiled() applies the advice's filters and errors='log', as emit() would.
        advice.compiled(PROCESS_START)(event)


def _after_fork_in_child() -> None:
    global _started_at, _exit_code, _uncaught
    _started_at = time.time()
    _exit_code = None
    _uncaught = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# -- process.exit -----------------------------------------------------------------------------


def note_exit_code(code: int | None) -> None:
    """Tell ``process.exit`` the exit status, for code that knows it (``aspecthook run``)."""
    global _exit_code
    _exit_code = code


def _install_exit() -> None:
    atexit.register(_at_exit)


def _uncaught_at_exit() -> BaseException | None:
    """The exception that ended the program, unless this is an interactive session (where
    one that reached ``sys.excepthook`` was only shown at the prompt).

    Python stores an uncaught exception as ``sys.last_value`` (``last_exc``) and then
    hands it to ``sys.excepthook``. Either alone misleads: tools set ``last_value`` for
    post-mortem debugging in programs that then end normally (pytest, for a failed or
    expected-to-fail test), and programs call ``sys.excepthook`` to show an error they
    handled. So while our wrapper is the hook, the exception is the one it was given that
    is also ``last_value``; a hook installed over ours that does not chain to it leaves
    ``last_value`` alone to go by."""
    if hasattr(sys, "ps1"):
        return None
    last = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    if not isinstance(last, BaseException):
        return None
    if isinstance(sys.excepthook, ChainedExcepthook):
        return last if last is _uncaught else None
    return last


def _at_exit() -> None:
    exc = _uncaught_at_exit()
    code = _exit_code
    if code is None and isinstance(exc, Exception):
        code = 1
    now = time.time()
    failures = _deliver(
        PROCESS_EXIT, pid=os.getpid(), exit_code=code, exc=exc, time=now, uptime=now - _started_at
    )
    for failure in failures[1:]:
        _report_failure(PROCESS_EXIT, failure)
    if failures:
        raise failures[0]  # Python reports it: "Exception ignored in atexit callback"


# -- exception.uncaught --------------------------------------------------------------------------


ExceptHook = Callable[[type[BaseException], BaseException, "TracebackType | None"], Any]
ThreadExceptHook = Callable[[Any], Any]


def _emit_uncaught(
    source: str,
    exc_type: type[BaseException],
    exc: BaseException | None,
    tb: TracebackType | None,
    thread: threading.Thread | None,
) -> None:
    if getattr(_uncaught_state, "busy", False):
        return  # a subscriber that calls an excepthook itself (to print): just chain
    if getattr(_uncaught_state, "chaining", _NOT_CHAINING) is exc:
        return  # a wrapper of ours further out, past a hook that chains, sent it already
    _uncaught_state.busy = True
    try:
        failures = _deliver(
            EXCEPTION_UNCAUGHT, source, exc_type=exc_type, exc=exc, traceback=tb, thread=thread
        )
        # Raised on, a failure would be printed as a second uncaught exception (and from a
        # thread come back to the subscribers through sys.excepthook): report each once.
        for failure in failures:
            _report_failure(EXCEPTION_UNCAUGHT, failure)
    finally:
        _uncaught_state.busy = False


def _chain(exc: BaseException | None, call_previous: Callable[[], Any]) -> None:
    """Call the previous hook, marking ``exc`` as sent: a hook that chains back to another
    wrapper of ours (installed before it) must not have the event sent twice."""
    outer = getattr(_uncaught_state, "chaining", _NOT_CHAINING)
    _uncaught_state.chaining = exc
    try:
        call_previous()
    finally:
        _uncaught_state.chaining = outer


class ChainedExcepthook:
    """``sys.excepthook`` that emits ``exception.uncaught``, then calls ``previous``."""

    def __init__(self, previous: ExceptHook) -> None:
        self.previous = previous

    def __call__(
        self, exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> None:
        global _uncaught
        if threading.current_thread() is threading.main_thread():
            _uncaught = exc  # what process.exit reports, should the program now end
        try:
            _emit_uncaught("sys.excepthook", exc_type, exc, tb, threading.current_thread())
        finally:
            # Never swallow: the traceback still prints.
            _chain(exc, lambda: self.previous(exc_type, exc, tb))

    def __repr__(self) -> str:
        return f"<aspecthook sys.excepthook, then {self.previous!r}>"


class ChainedThreadExcepthook:
    """``threading.excepthook`` that emits ``exception.uncaught``, then calls ``previous``."""

    def __init__(self, previous: ThreadExceptHook) -> None:
        self.previous = previous

    def __call__(self, args: Any) -> None:
        if args.exc_type is SystemExit:  # the thread ended normally (sys.exit)
            self.previous(args)
            return
        try:
            _emit_uncaught(
                "threading.excepthook",
                args.exc_type,
                args.exc_value,
                args.exc_traceback,
                args.thread,
            )
        finally:
            _chain(args.exc_value, lambda: self.previous(args))

    def __repr__(self) -> str:
        return f"<aspecthook threading.excepthook, then {self.previous!r}>"


def _install_excepthooks() -> None:
    """Wrap each hook that is not our wrapper now. Checked on every subscription, not
    once: a library that swaps a hook for a while and puts back the one it saved (pytest
    before 8.4, around each test phase) takes our wrapper off with its own."""
    with _install_lock:
        if not isinstance(sys.excepthook, ChainedExcepthook):
            sys.excepthook = ChainedExcepthook(sys.excepthook)
        if not isinstance(threading.excepthook, ChainedThreadExcepthook):
            threading.excepthook = ChainedThreadExcepthook(threading.excepthook)


# -- audit.<event> -------------------------------------------------------------------------------


def audit_interest(pointcut: Pointcut) -> tuple[frozenset[str], bool]:
    """Which ``audit.*`` names ``pointcut`` may select, as ``(exact, other)``.

    ``exact`` holds raw audit event names (``'open'`` for ``Name('audit.open')``);
    ``other`` is true when it may select audit names it does not spell out (a glob such
    as ``'audit.socket.*'`` or ``'*'``, a predicate, a negation). Both over-approximate:
    the dispatcher only uses them to decide whether an event is worth emitting.
    """
    if isinstance(pointcut, Name):
        literal = pointcut.literal_names()
        size = len(AUDIT_PREFIX)
        return frozenset(n[size:] for n in literal if n.startswith(AUDIT_PREFIX)), False
    if isinstance(pointcut, Glob):
        return _NO_NAMES, glob_may_start_with(pointcut.pattern, AUDIT_PREFIX)
    if isinstance(pointcut, NormalizedName):
        return _NO_NAMES, pointcut.name.startswith("audit_")
    if isinstance(pointcut, (_And, _Or)):
        left, right = audit_interest(pointcut.left), audit_interest(pointcut.right)
        if isinstance(pointcut, _And):
            # A conjunction selects no more than either side: keep a side that is exact.
            for side in (left, right):
                if not side[1]:
                    return side
        return left[0] | right[0], left[1] or right[1]
    return _NO_NAMES, True  # a predicate, ~x or a user's own Pointcut: cannot tell


def glob_may_start_with(pattern: str, prefix: str) -> bool:
    """Whether some name starting with ``prefix`` matches the shell pattern ``pattern``."""
    i = 0
    for char in prefix:
        if i >= len(pattern):
            return False
        token = pattern[i]
        if token == "*":
            return True
        if token == "[":
            end = _class_end(pattern, i)
            if end > i:
                if not fnmatchcase(char, pattern[i : end + 1]):
                    return False
                i = end + 1
                continue
        if token not in ("?", char):
            return False
        i += 1
    return True


def _class_end(pattern: str, start: int) -> int:
    """Index of the ``]`` closing the ``[`` at ``start`` (as fnmatch reads it), or -1."""
    j = start + 1
    if j < len(pattern) and pattern[j] == "!":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1
    return pattern.find("]", j)


def _refresh_audit() -> None:
    """Recompute the dispatcher's names and flag from every global weaver's subscriptions."""
    global _audit_names, _audit_any, _audit_version, _audit_unmatched
    with LOCK:
        version = REGISTRY.event_version
        names: set[str] = set()
        other = False
        for weaver in list(REGISTRY.weavers):
            for advice in weaver.registered:
                if advice.kind == "on" and advice.pointcut is not None:
                    exact, more = audit_interest(advice.pointcut)
                    names.update(exact)
                    other = other or more
        _audit_names, _audit_any = frozenset(names), other
        _audit_unmatched = set()
        _audit_version = version


def _audit_hook(event: str, args: tuple[Any, ...]) -> None:
    # Runs on every audited operation of the process for the rest of its life. Idle, it
    # is two global reads and two truth tests: the empty frozenset is tested before any
    # lookup because CPython hands each hook a new str whose hash is not computed yet.
    # Everything else lives in _audit_dispatch.
    if _audit_any or (_audit_names and event in _audit_names):
        _audit_dispatch(event, args)


def _audit_dispatch(event: str, args: tuple[Any, ...]) -> None:
    if _audit_version != REGISTRY.event_version:
        _refresh_audit()  # subscriptions changed: the supersets may have shrunk
    # Read once: a refresh replaces the set, so a miss found against older subscriptions
    # lands in the discarded one.
    unmatched = _audit_unmatched
    if event in unmatched:
        return  # a glob or predicate let it through before, and nobody matched it
    state = _audit_state
    if getattr(state, "busy", False):
        return  # audited operations done by our own emit (a logger opening a file)
    state.busy = True
    try:
        weaver = _default_weaver()
        name = AUDIT_PREFIX + event
        try:
            matched = bool(weaver._subscribers(name))
        except Exception:
            # A predicate written for other events cannot judge this one (it reads a
            # payload key audit events lack): it does not match, and the audited
            # operation must not fail because of it. Only subscribers may veto.
            matched = False
        if matched:
            weaver.emit(name, args=args)
        else:
            unmatched.add(event)
    finally:
        state.busy = False


def _install_audit() -> None:
    global audit_hooks_added
    sys.addaudithook(_audit_hook)
    audit_hooks_added += 1
