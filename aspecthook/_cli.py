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

This module is the command line (``main``, its parser) and ``run``, which ties the parts
together: the session that weaves the config and reports at exit (``_cli_session``), the
running of the program as python would (``_cli_program``), the lines printed on stderr
(``_cli_report``) and the logging set-up (``_cli_logging``).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import shlex
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from . import __version__
from ._cli_program import (
    _exit_leaving_threads,
    _exit_sigint,
    _join_threads,
    _program_path,
    _run_program,
)
from ._cli_report import PROG, _trace_problem
from ._cli_session import Session
from ._process import note_exit_code
from .errors import ConfigError, WeaveTargetError

__all__ = ["main"]

_VALUED = frozenset({"--aspects", "--trace"})  # our options that take a value
_NAMED = ("--aspects", "--strict", "--trace", "--no-summary", "--describe")
_OPTIONS = (*_NAMED, "--help", "-h")


class _UsageError(Exception):
    """A command line we cannot run; the message says why (exit code 2)."""


@dataclass
class RunOptions:
    """A parsed ``aspecthook run`` command line."""

    aspects: str | None = None
    strict: bool = False
    trace: str | None = None
    summary: bool = True
    describe: bool = False
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
        # 'runn app.py' meant run; 'app.py' or '--aspects f.yaml app.py' left it out, and
        # so did 'run.py' and 'runner.py': a file's name, however close to run, is the
        # program (a misspelt command has no dot or folder in it).
        misspelt = not any(c in args[0] for c in "./\\") and difflib.get_close_matches(
            args[0], ["run"], cutoff=0.5
        )
        meant = args[1:] if misspelt else args
        print(
            f"{_top_usage()}\n{PROG}: error: unknown command {args[0]!r}; did you mean "
            f"'{PROG} run {shlex.join(meant)}'?",
            file=sys.stderr,
        )
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
        "[--describe] [--] script.py [args...]\n"
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
        epilog="Our options end at the script (or -m module): everything from there on is "
        "the program's command line, passed to it untouched.",
    )
    parser.add_argument("--aspects", metavar="FILE", help="YAML or TOML file naming the weaves")
    parser.add_argument(
        "--strict",
        action="store_true",
        help="a weave target that does not exist, or is never woven, is an error (exit code 2)",
    )
    parser.add_argument("--trace", metavar="PATH", help="write the Timed Chrome trace to PATH")
    parser.add_argument(
        "--no-summary",
        dest="summary",
        action="store_false",
        default=None,
        help="do not print the Timed summary table at exit",
    )
    parser.add_argument(
        "--describe",
        action="store_true",
        help="count every advice's calls and time, and print every join point with its "
        "advice, calls and time at exit",
    )
    return parser


def parse_run_args(args: Sequence[str]) -> RunOptions:
    """Split ``run``'s arguments into our options and the program's command line.

    Our options end at the first argument that is not one of ours, at ``--`` or at
    ``-m module``; everything after belongs to the program, untouched (so the program
    may have options named like ours).
    """
    ours: list[str] = []
    values: dict[str, list[str]] = {}  # what each option with a value was given
    i, dashdash = 0, False
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i, dashdash = i + 1, True
            break
        if not arg.startswith("-") or arg == "-" or arg.startswith("-m"):
            break
        name, inline, value = arg.partition("=")
        _check_option(name)
        ours.append(arg)
        if arg in _VALUED and i + 1 < len(args):
            value = args[i + 1]
            ours.append(value)
            i += 1
        if name in _VALUED and (inline or arg in _VALUED):
            values.setdefault(name, []).append(value)
        i += 1
    _check_given_once(values)
    parsed = _run_parser().parse_args(ours)
    options = RunOptions(
        parsed.aspects, parsed.strict, parsed.trace, parsed.summary is None, parsed.describe
    )
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


def _check_given_once(values: dict[str, list[str]]) -> None:
    """Refuse an option with a value given more than once: argparse keeps the last, so
    ``--aspects a.yaml --aspects b.yaml`` would silently run without a.yaml's weaves."""
    for name, given in values.items():
        if len(given) > 1:
            times = "twice" if len(given) == 2 else f"{len(given)} times"
            fix = "; put every weave in one file" if name == "--aspects" else ""
            raise _UsageError(
                f"{name} is given {times} ({', '.join(map(repr, given))}): give it once{fix}"
            )


def _check_option(name: str) -> None:
    """Refuse an option that is not ours, before argparse reads a prefix of one as that
    option (``--aspect FILE`` would be ``--aspects`` missing its value)."""
    if name in _OPTIONS:
        return
    close = difflib.get_close_matches(name, _NAMED, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}? Ours" if close else ": ours"
    raise _UsageError(
        f"unknown option {name!r}{hint} are {', '.join(_NAMED)}; the program's own "
        "options go after the script (or -m module)"
    )


# -- running ------------------------------------------------------------------------------


@contextlib.contextmanager
def _program_folder_last(
    folder: str | None,
) -> Iterator[Callable[[], contextlib.AbstractContextManager[None]]]:
    """While aspecthook imports what it needs itself (the YAML parser, structlog, rich):
    ``folder``, the program's first place on sys.path, is the last, and ``sys.path`` is
    put back after. A module of the program named like a package of ours (``yaml.py``
    beside the script) then does not stand in for that package, while a target's module
    beside the script is still found.

    Yields ``as_program()``, a context in which sys.path is the program's again: the
    modules the config names (``type: 'slow:Slow'``) are imported there, as the program
    would import them.
    """
    saved = list(sys.path)

    @contextlib.contextmanager
    def as_program() -> Iterator[None]:
        ours = list(sys.path)
        sys.path[:] = saved
        try:
            yield
        finally:
            sys.path[:] = ours

    if folder is None:
        yield as_program
        return
    sys.path[:] = [entry for entry in saved if entry != folder] + [folder]
    try:
        yield as_program
    finally:
        sys.path[:] = saved


def run(options: RunOptions) -> int:
    """Weave what ``options.aspects`` names, run the program, report; the exit code."""
    if options.script is not None and not os.path.exists(options.script):
        print(
            f"{sys.executable}: can't open file {os.path.abspath(options.script)!r}: "
            "[Errno 2] No such file or directory",
            file=sys.stderr,
        )
        return 2
    problem = _trace_problem(options.trace) if options.trace else None
    if problem is not None:
        print(f"{PROG}: error: --trace {options.trace}: {problem}", file=sys.stderr)
        return 2
    folder = None
    if not getattr(sys.flags, "safe_path", False):
        # Where the program's own imports will look first, before weaving: a target in a
        # module beside the script (or in the working directory, for -m) is then found.
        folder = sys.path[0] = _program_path(options)
    try:
        with _program_folder_last(folder) as as_program:
            session = Session.start(options, as_program=as_program)
    except (ConfigError, WeaveTargetError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    try:
        code, interrupted = _run_program(options)
    finally:
        abandoned = _join_threads()
    with _program_folder_last(folder):
        failed = session.finish()
    if failed and not interrupted:
        code = 2  # a weave that --strict asked for never took effect
    # atexit cannot see the status: process.exit subscribers get it from here (130, the
    # shell's status for a death by SIGINT, after Ctrl-C).
    note_exit_code(130 if interrupted else code)
    if interrupted:
        return _exit_sigint()
    if abandoned:  # Ctrl-C stopped the wait for the program's threads
        _exit_leaving_threads(code)
    return code
