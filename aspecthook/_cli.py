"""``aspecthook run``: run an unmodified program with aspects woven from a config file.

The aspects are woven before the program's first line runs; a dotted path whose module
is not imported yet is woven when the program imports it (``weave``'s lazy path), so
the program's own imports happen exactly as without us. The program then runs the way
``python script.py args`` / ``python -m module args`` runs it: the same ``sys.argv``,
``sys.path[0]``, ``__main__`` module, exit code, and uncaught-exception output (through
``sys.excepthook``, with our own frames cut off the traceback). At the end the ``Timed``
summary goes to stderr and the trace file is written, also after ``sys.exit`` or an
uncaught exception.

Exit codes are the program's; ours are 2 for a usage or configuration error (nothing
was run) or, with ``--strict``, for a weave that never took effect (reported at exit, so
the program itself runs as without us), and 1 for a module ``-m`` cannot find, as
python's own.
"""

from __future__ import annotations

import argparse
import builtins
import functools
import io
import os
import sys
import threading
import traceback
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import __version__
from ._config import RunConfig, WeaveSpec, load_config
from ._process import note_exit_code
from .errors import AspectHookError, ConfigError, WeaveTargetError

__all__ = ["main"]

PROG = "aspecthook"
_VALUED = frozenset({"--aspects", "--trace"})  # our options that take a value
_OUR_FILES = frozenset({__file__})
_RUNPY = ("runpy.py", "<frozen runpy>")
_MAIN_PROBLEM = (
    "the program's own __main__ module cannot be woven from outside, it does not exist "
    "before the program runs; move that code into a module the program imports and weave "
    "it there"
)


class _UsageError(Exception):
    """A command line we cannot run; the message says why (exit code 2)."""


@dataclass
class RunOptions:
    """A parsed ``aspecthook run`` command line."""

    aspects: str | None = None
    strict: bool = False
    trace: str | None = None
    summary: bool = True
    script: str | None = None
    module: str | None = None
    args: list[str] = field(default_factory=list)


# -- the command line ------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """The ``aspecthook`` command; returns the exit code (``sys.exit(main())``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_top_usage(), file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    if args[0] == "--version":
        print(f"{PROG} {__version__}")
        return 0
    if args[0] != "run":
        print(f"{_top_usage()}\n{PROG}: error: unknown command {args[0]!r}", file=sys.stderr)
        return 2
    try:
        options = parse_run_args(args[1:])
    except _UsageError as exc:
        print(f"{_run_parser().format_usage()}{PROG} run: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # argparse's --help (0) and its own errors (2)
        return exc.code if isinstance(exc.code, int) else 2
    return run(options)


def _top_usage() -> str:
    return (
        f"usage: {PROG} run [--aspects FILE] [--strict] [--trace PATH] [--no-summary] "
        "[--] script.py [args...]\n"
        f"       {PROG} run [options] -m module [args...]\n"
        f"       {PROG} --version\n\n"
        "Runs an unmodified Python program with aspects woven from FILE (YAML or TOML).\n"
        f"'{PROG} run --help' describes the options."
    )


def _run_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} run",
        usage=f"{PROG} run [options] [--] script.py [args...] | -m module [args...]",
        description="Run a Python program with aspects woven from a config file, before "
        "its own imports. Its argv, exit code and tracebacks are as with plain python.",
    )
    parser.add_argument("--aspects", metavar="FILE", help="YAML or TOML file naming the weaves")
    parser.add_argument(
        "--strict", action="store_true", help="a weave target that does not exist is an error"
    )
    parser.add_argument("--trace", metavar="PATH", help="write the Timed Chrome trace to PATH")
    parser.add_argument(
        "--no-summary",
        dest="summary",
        action="store_false",
        default=None,
        help="do not print the Timed summary table at exit",
    )
    return parser


def parse_run_args(args: Sequence[str]) -> RunOptions:
    """Split ``run``'s arguments into our options and the program's command line.

    Our options end at the first argument that is not one of ours, at ``--`` or at
    ``-m module``; everything after belongs to the program, untouched (so the program
    may have options named like ours).
    """
    ours: list[str] = []
    i, dashdash = 0, False
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i, dashdash = i + 1, True
            break
        if not arg.startswith("-") or arg == "-" or arg.startswith("-m"):
            break
        ours.append(arg)
        if arg in _VALUED and i + 1 < len(args):
            ours.append(args[i + 1])
            i += 1
        i += 1
    parsed = _run_parser().parse_args(ours)
    options = RunOptions(parsed.aspects, parsed.strict, parsed.trace, parsed.summary is None)
    program = list(args[i:])
    if not program:
        raise _UsageError("give the program to run: script.py [args...] or -m module [args...]")
    if program[0].startswith("-m") and not dashdash:
        inline = program[0][2:]  # python accepts -mmodule as well as -m module
        options.module = inline or (program[1] if len(program) > 1 else "")
        options.args = program[1:] if inline else program[2:]
        if not options.module:
            raise _UsageError("-m needs a module name")
    elif program[0] == "-" and not dashdash:
        raise _UsageError("reading the program from stdin is not supported; give a file")
    else:
        options.script, options.args = program[0], program[1:]
    return options


# -- running ------------------------------------------------------------------------------


def run(options: RunOptions) -> int:
    """Weave what ``options.aspects`` names, run the program, report; the exit code."""
    if options.script is not None and not os.path.exists(options.script):
        print(
            f"{sys.executable}: can't open file {os.path.abspath(options.script)!r}: "
            "[Errno 2] No such file or directory",
            file=sys.stderr,
        )
        return 2
    if not getattr(sys.flags, "safe_path", False):
        # Where the program's own imports will look first, before weaving: a target in a
        # module beside the script (or in the working directory, for -m) is then found.
        sys.path[0] = _program_path(options)
    try:
        session = Session.start(options)
    except (ConfigError, WeaveTargetError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    try:
        code, interrupted = _run_program(options)
    finally:
        _join_threads()
    if session.finish() and not interrupted:
        code = 2  # a weave that --strict asked for never took effect
    # atexit cannot see the status: process.exit subscribers get it from here (130, the
    # shell's status for a death by SIGINT, after Ctrl-C).
    note_exit_code(130 if interrupted else code)
    return _exit_sigint() if interrupted else code


@dataclass
class Session:
    """What ``aspecthook run`` set up: the config, its aspects and weaves, the outputs."""

    config: RunConfig
    strict: bool
    trace: str | None
    summary: bool
    program: tuple[str, ...] = ()  # the module names of the program itself (run as __main__)
    aspects: list[Any] = field(default_factory=list)
    records: list[tuple[str, Any]] = field(default_factory=list)  # (key, WeaveRecord)
    handles: list[Any] = field(default_factory=list)

    @classmethod
    def start(cls, options: RunOptions) -> Session:
        """Read the config and weave it; ``ConfigError`` / ``WeaveTargetError`` if not."""
        config = load_config(options.aspects) if options.aspects else RunConfig(file="")
        trace = options.trace or config.trace
        session = cls(
            config,
            strict=options.strict or config.strict,
            trace=os.path.abspath(trace) if trace else None,
            summary=options.summary and config.summary,
            program=_program_modules(options),
        )
        from .registry import ASPECTS

        built = config.build_aspects(ASPECTS, trace=session.trace is not None)
        for aspect in (a for aspects in built for a in aspects):
            if all(aspect is not seen for seen in session.aspects):
                session.aspects.append(aspect)
        _configure_logging(config, session.aspects)
        _quiet_core_logs()  # skipped targets are reported below, once, with their key
        try:
            for weave_spec, aspects in zip(config.weaves, built, strict=True):
                for target in weave_spec.targets:
                    session.weave(weave_spec, target, aspects)
        finally:
            _core_logs_to_stderr()
        return session

    def weave(self, spec: WeaveSpec, target: str, aspects: list[Any]) -> None:
        """Weave one target; a missing one is a warning, or an error with ``strict``.

        Always woven with ``weave(strict=False)``: a strict weave raises a failure found
        later inside the program's own ``import``, which the program may catch. A target
        found missing now is an error here; later failures are reported by ``finish``.
        """
        from ._registry import LOCK
        from ._weave import WEAVES, weave

        key = spec.key if len(spec.targets) == 1 else f"{spec.key}.target"
        if target.partition(":")[0].split(".")[0] == "__main__":
            self._refuse(key, target, _MAIN_PROBLEM)
            return
        # A requires= guard that does not hold is the config's own "only if installed":
        # a skip, never an error, even with --strict.
        guard_fails = self._guard_fails(spec)
        strict = self.strict and not guard_fails
        with LOCK:
            before = list(WEAVES)
        try:
            handle = weave(target, *aspects, name=spec.name, requires=spec.requires)
        except WeaveTargetError as exc:
            raise WeaveTargetError(f"{self.config.file}: {key}: {exc}", target=exc.target) from None
        except AspectHookError as exc:
            raise self.config.error(key, f"cannot weave {target}: {exc}") from None
        self.handles.append(handle)
        with LOCK:
            new = [r for r in WEAVES if all(r is not b for b in before)]
        for record in new:
            self.records.append((key, record))
            if record.status == "skipped" and strict:
                raise WeaveTargetError(
                    f"{self.config.file}: {key}: cannot weave {target}: {record.reason} "
                    "(strict mode; drop --strict to skip it)",
                    target=target,
                )
            if record.status == "skipped":
                _warn(f"{self.config.file}: {key}: {target} skipped: {record.reason}")

    def _guard_fails(self, spec: WeaveSpec) -> bool:
        """Whether ``spec.requires`` is given and not met; ``ConfigError`` if malformed."""
        from ._weave import _version_problem

        if spec.requires is None:
            return False
        try:
            return _version_problem(spec.requires) is not None
        except AspectHookError as exc:
            raise self.config.error(f"{spec.key}.requires", str(exc)) from None

    def _refuse(self, key: str, target: str, problem: str) -> None:
        if self.strict:
            raise WeaveTargetError(f"{self.config.file}: {key}: {target}: {problem}", target=target)
        _warn(f"{self.config.file}: {key}: {target} skipped: {problem}")

    def finish(self) -> bool:
        """Unweave, report the weaves that never took effect, print the summary, write the
        trace. Returns whether the run must exit 2: a weave failed under ``strict``.

        Unweaving first keeps our own exit work (the trace is written with ``json``) out
        of the timings and logs of a config that instruments ``json.*``.
        """
        for handle in self.handles:
            handle.remove()
        problems = [(key, p) for key, r in self.records if (p := self._problem(r)) is not None]
        for key, problem in problems:
            where = f"{self.config.file}: {key}: {problem}"
            if self.strict:
                print(f"{PROG}: error: {where} (strict mode)", file=sys.stderr)
            else:
                _warn(where)
        timers = [a for a in self.aspects if _is_timer(a)]
        if self.summary and timers:
            _print_summary(timers)
        if self.trace is not None:
            _write_trace(timers, self.trace)
        return self.strict and bool(problems)

    def _problem(self, record: Any) -> str | None:
        """Why ``record``'s weave never took effect (failed, or still waiting), or None."""
        if record.status == "failed":
            return f"{record.target} failed: {record.reason}"
        if record.status != "pending import":
            return None
        if record.reason:  # a glob that matched nothing so far
            return f"{record.target} {record.reason}"
        module = _first_unimported(record.target)
        if module in self.program:
            return (
                f"{record.target} was never woven: {module} is the program itself, which "
                f"runs as __main__ and is never imported as {module}; move that code into a "
                "module the program imports and weave it there"
            )
        return f"{record.target} was never woven: the program never imported {module}"


def _program_modules(options: RunOptions) -> tuple[str, ...]:
    """The module names the program's own code would have if it were imported: the ``-m``
    module (its package's ``__main__`` for a package), or a ``.py`` script's file name."""
    if options.module is not None:
        return (options.module, f"{options.module}.__main__")
    if options.script is not None and options.script.endswith(".py"):
        return (os.path.basename(options.script)[:-3],)
    return ()


def _first_unimported(target: str) -> str:
    """The first module of ``target``'s dotted path that is not imported: what a weave
    still waiting for an import waits for."""
    module = target.partition(":")[0]
    parts = module.split(".")
    for i in range(1, len(parts) + 1):
        if ".".join(parts[:i]) not in sys.modules:
            return ".".join(parts[:i])
    return module


def _run_program(options: RunOptions) -> tuple[int, bool]:
    """Run the program as python would; (exit code, whether it ended by Ctrl-C)."""
    try:
        if options.module is not None:
            _run_module(options.module, options.args)
        else:
            assert options.script is not None
            _run_script(options.script, options.args)
    except SystemExit as exc:
        return _exit_code(exc), False
    except BaseException as exc:
        _report(exc)
        return 1, isinstance(exc, KeyboardInterrupt)
    return 0, False


def _program_path(options: RunOptions) -> str:
    """``sys.path[0]`` as python sets it for the program: the script's directory (a
    directory or zip program: itself, absolute), or the working directory for ``-m``."""
    path = options.script
    if path is None:
        return os.getcwd()
    if _is_main_container(path):
        return os.path.abspath(path)
    if path.endswith(".pyc"):
        return path
    return os.path.dirname(os.path.realpath(path))


def _is_main_container(path: str) -> bool:
    """A directory or zip archive whose ``__main__.py`` is the program."""
    return os.path.isdir(path) or path.endswith((".zip", ".pyz"))


def _run_script(path: str, args: list[str]) -> None:
    """Run ``path`` as ``python path args`` would, in a fresh ``__main__`` module."""
    import runpy

    sys.argv = [path, *args]
    safe_path = getattr(sys.flags, "safe_path", False)
    if _is_main_container(path):
        # As python does: the absolute path goes first on sys.path (run() put it there,
        # and python does it also with -P), then its __main__ module runs as __main__.
        if safe_path:
            sys.path.insert(0, os.path.abspath(path))
        fallback = functools.partial(runpy.run_path, path, run_name="__main__")
        _run_as_main("__main__", alter_argv=False, fallback=fallback)
        return
    if path.endswith(".pyc"):  # compiled code: runpy's job
        if not safe_path:
            del sys.path[0]
        runpy.run_path(path, run_name="__main__")
        return
    if not safe_path:
        sys.path[0] = os.path.dirname(os.path.realpath(path))
    # Not runpy.run_path for a plain file: it gives __file__ and code objects the path as
    # typed and sets argv[0] to what it runs, while python 3.9+ makes __file__ absolute and
    # leaves argv[0] as typed. This is python's own pymain_run_file, in Python.
    filename = os.path.abspath(path)
    with io.open_code(filename) as f:
        source = f.read()
    from importlib.machinery import SourceFileLoader

    module = types.ModuleType("__main__")
    module.__dict__.update(
        __file__=filename,
        __cached__=None,
        __builtins__=builtins,
        __loader__=SourceFileLoader("__main__", filename),
    )
    # The program's __main__ stays until the process ends, as under python: its threads
    # and atexit handlers still find its classes there (pickle looks them up by name).
    sys.modules["__main__"] = module
    exec(compile(source, filename, "exec", dont_inherit=True), module.__dict__)


def _run_module(name: str, args: list[str]) -> None:
    """Run module ``name`` as ``python -m name args`` would.

    runpy finds the module as python -m does: an import error of its package is raised
    as it is, a module it cannot find is ``sys.exit('python: No module named ...')``.
    """
    import runpy

    sys.argv = [name, *args]  # runpy sets argv[0] to the module's file
    if not getattr(sys.flags, "safe_path", False):
        sys.path[0] = os.getcwd()
    fallback = functools.partial(runpy.run_module, name, run_name="__main__", alter_sys=True)
    _run_as_main(name, alter_argv=True, fallback=fallback)


def _run_as_main(name: str, *, alter_argv: bool, fallback: Callable[[], object]) -> None:
    """What python itself calls for ``-m`` and for a directory or zip program: module
    ``name`` runs in a fresh ``__main__`` that stays until the process ends (under the
    program's threads and atexit handlers). ``fallback`` where this python lacks it."""
    import runpy

    run_as_main = getattr(runpy, "_run_module_as_main", None)
    if run_as_main is None:  # not in this python: the public form
        fallback()
        return
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    run_as_main(name, alter_argv=alter_argv)


def _exit_code(exc: SystemExit) -> int:
    """What python exits with for ``sys.exit(code)``: None → 0, int → it, else print → 1."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _report(exc: BaseException) -> None:
    """Hand an uncaught exception to ``sys.excepthook``, minus our frames and runpy's.

    Like python, first store it as ``sys.last_exc`` (3.12+) and ``sys.last_type`` /
    ``last_value`` / ``last_traceback``, where ``process.exit`` and debuggers look for it.
    """
    tb = exc.__traceback__
    while tb is not None and _is_ours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    exc = exc.with_traceback(tb)
    sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, tb
    if sys.version_info >= (3, 12):
        sys.last_exc = exc
    sys.excepthook(type(exc), exc, tb)


def _is_ours(filename: str) -> bool:
    return filename in _OUR_FILES or filename.endswith(_RUNPY)


def _join_threads() -> None:
    """Wait for non-daemon threads, as python does before exiting, so they are timed:
    first the calls registered with threading's own exit hook (concurrent.futures tells
    its idle workers to stop there, or they would wait forever), then a join of each."""
    for call in reversed(list(getattr(threading, "_threading_atexits", ()))):
        try:
            call()
        except Exception:  # as python reports a failure there, and goes on
            traceback.print_exc()
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon and thread.is_alive():
            thread.join()


def _exit_sigint() -> int:
    """Die by SIGINT after an uncaught KeyboardInterrupt, as python does; else 130.

    Python runs the ``atexit`` handlers (``process.exit`` among them) before it kills
    itself; a process killed by a signal runs none, so they are run here first.
    ``atexit._run_exitfuncs`` runs each handler once and clears them.
    """
    import atexit
    import signal

    if hasattr(signal, "SIGINT") and hasattr(os, "kill"):
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return 130


# -- reporting -------------------------------------------------------------------------


def _warn(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr)


def _is_timer(aspect: Any) -> bool:
    return callable(getattr(aspect, "summary", None)) and callable(
        getattr(aspect, "export_chrome_trace", None)
    )


def _print_summary(timers: list[Any]) -> None:
    """One table over every Timed instance (rows of all, slowest total first)."""
    summaries = [t.summary() for t in timers]
    sys.stdout.flush()
    if not any(len(summary) for summary in summaries):  # no woven call ran: no empty table
        print(f"{PROG}: Timed recorded no calls", file=sys.stderr)
        return
    table = summaries[0]
    if len(summaries) > 1:
        rows = sorted((r for s in summaries for r in s), key=lambda r: -r.total_s)
        table = type(summaries[0])(rows)
    print(table, file=sys.stderr)


def _write_trace(timers: list[Any], path: str) -> None:
    """Write the trace of every Timed instance into one Trace Event JSON file."""
    if not timers:
        _warn(f"no Timed aspect in the config, so no trace is written to {path}")
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        timers[0].export_chrome_trace(path)
        if len(timers) > 1:
            _merge_traces(timers[1:], path)
    except OSError as exc:
        _warn(f"cannot write the trace to {path}: {exc}")
        return
    print(f"{PROG}: trace written to {path} (open it in https://ui.perfetto.dev)", file=sys.stderr)


def _merge_traces(timers: list[Any], path: str) -> None:
    import json
    import tempfile

    with open(path, encoding="utf-8") as f:
        document = json.load(f)
    with tempfile.TemporaryDirectory() as tmp:
        for i, timer in enumerate(timers):
            part = os.path.join(tmp, f"{i}.json")
            timer.export_chrome_trace(part)
            with open(part, encoding="utf-8") as f:
                document["traceEvents"].extend(json.load(f)["traceEvents"])
    with open(path, "w", encoding="utf-8") as f:
        json.dump(document, f)


# -- logging ---------------------------------------------------------------------------


def _quiet_core_logs() -> None:
    """Silence aspecthook's own log lines while weaving: we report skips ourselves."""
    from . import _log

    _log.set_logger(_NullLogger())


def _core_logs_to_stderr() -> None:
    """aspecthook's own log lines (late weave failures, advice failures) go to stderr.

    Only the package's logger is redirected (not structlog's global configuration), so
    the program's own structlog output is what it would be without us.
    """
    from . import _log

    _log.set_logger(_StderrLogger())


class _NullLogger:
    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


class _StderrLogger:
    """Becomes a structlog logger printing to stderr on first use (structlog is slow to
    import, and most runs never log)."""

    def __getattr__(self, name: str) -> Any:
        import structlog

        from . import _log

        logger = structlog.wrap_logger(structlog.PrintLogger(sys.stderr))
        _log.set_logger(logger)
        return getattr(logger, name)


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

    from .aspects._logged import _level, logger_settings

    settings = dict(config.logging or {})
    file = settings.get("file")
    try:
        level, _ = _level("level", settings.get("level", "debug"))
        # Open for the process's life: Logged may write until its very end.
        stream = open(file, "a", encoding="utf-8") if file else sys.stderr  # noqa: SIM115
    except (AspectHookError, OSError) as exc:
        raise config.error("logging", str(exc)) from None
    format = settings.get("format", "console")
    return structlog.wrap_logger(
        structlog.WriteLogger(stream), **logger_settings(format, level, stream)
    ).bind()
