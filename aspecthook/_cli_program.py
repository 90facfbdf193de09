"""Running the program as python would: ``aspecthook run``'s ``python script.py`` / ``-m``.

``sys.argv``, ``sys.path[0]``, the ``__main__`` module, the exit code and the
uncaught-exception output are python's own, and the non-daemon threads are joined before
the exit work, as python does. Separate from the command line and the weaving because it
imitates the interpreter's start-up and exit, not anything of aspecthook's; its frames
(this file's) are cut off the traceback of an uncaught exception.
"""

from __future__ import annotations

import builtins
import functools
import io
import os
import sys
import threading
import traceback
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

from ._cli_report import _flush_stdout

if TYPE_CHECKING:
    from ._cli import RunOptions

__all__ = [
    "_exit_leaving_threads",
    "_exit_sigint",
    "_join_threads",
    "_program_path",
    "_run_program",
]

_OUR_FILES = frozenset({__file__})
_RUNPY = ("runpy.py", "<frozen runpy>")


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
        uncaught = exc
    else:
        return 0, False
    # Reported once the except clause is left: python calls the hook with no exception
    # being handled (an exception the hook raises has no context, exc_info() is empty).
    return _report(uncaught), isinstance(uncaught, KeyboardInterrupt)


def _program_path(options: RunOptions) -> str:
    """``sys.path[0]`` as python sets it for the program: the script's directory (a
    directory or zip program: itself, absolute), or the working directory for ``-m``."""
    path = options.script
    if path is None:
        return os.getcwd()
    if _is_main_container(path):
        return os.path.abspath(path)
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
    if not safe_path:
        sys.path[0] = os.path.dirname(os.path.realpath(path))
    # Not runpy.run_path for a file: it gives __file__ and code objects the path as typed,
    # sets argv[0] to what it runs and puts the previous __main__ back at the end, while
    # python 3.9+ makes __file__ absolute, leaves argv[0] as typed and keeps the program's
    # __main__. This is python's own pymain_run_file, in Python; a .pyc file (compiled
    # code) as its run_pyc_file.
    from importlib.machinery import SourceFileLoader, SourcelessFileLoader

    filename = os.path.abspath(path)
    compiled = path.endswith(".pyc")
    loader = SourcelessFileLoader if compiled else SourceFileLoader
    module = _fresh_main()
    module.__dict__.update(
        __file__=filename, __cached__=None, __loader__=loader("__main__", filename)
    )
    with io.open_code(filename) as f:
        data = f.read()
    code = _compiled_code(data) if compiled else compile(data, filename, "exec", dont_inherit=True)
    # The program's __main__ stays until the process ends, as under python: its threads
    # and atexit handlers still find its classes there (pickle looks them up by name).
    sys.modules["__main__"] = module
    exec(code, module.__dict__)


def _compiled_code(data: bytes) -> types.CodeType:
    """The code of a ``.pyc`` file's bytes, as python reads it to run one (its header
    is 16 bytes: the magic number, flags, and the source's time and size or hash)."""
    import importlib.util
    import marshal

    if data[:4] != importlib.util.MAGIC_NUMBER:
        raise RuntimeError("Bad magic number in .pyc file")
    code = marshal.loads(data[16:])
    if not isinstance(code, types.CodeType):
        raise RuntimeError("Bad code object in .pyc file")
    return code


def _run_module(name: str, args: list[str]) -> None:
    """Run module ``name`` as ``python -m name args`` would.

    runpy finds the module as python -m does: an import error of its package is raised
    as it is, a module it cannot find is ``sys.exit('python: No module named ...')``.
    """
    import runpy

    # '-m' while the module is located (its package imported), as python has it; runpy
    # then sets argv[0] to the module's file.
    sys.argv = ["-m", *args]
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
    sys.modules["__main__"] = _fresh_main()
    run_as_main(name, alter_argv=alter_argv)


def _fresh_main() -> types.ModuleType:
    """A new ``__main__`` module with what python gives its own before the program runs:
    ``__builtins__``, and an empty ``__annotations__`` where this python's ``__main__``
    (ours until now) has one, so a program that reads that name runs as under python."""
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    if "__annotations__" in vars(sys.modules.get("__main__", main)):
        main.__annotations__ = {}
    return main


def _exit_code(exc: SystemExit) -> int:
    """What python exits with for ``sys.exit(code)``: None → 0, int → it, else print → 1."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _report(exc: BaseException) -> int:
    """Hand an uncaught exception to ``sys.excepthook``, minus our frames and runpy's;
    the exit code (1, or the code of a ``SystemExit`` the hook raised).

    Like python, first store it as ``sys.last_exc`` (3.12+) and ``sys.last_type`` /
    ``last_value`` / ``last_traceback``, where debuggers look for it; ``process.exit``
    gets it from the hook (aspecthook's, installed with its subscription). A hook that
    raises, or is missing, is reported as python reports it, and the run goes on to its
    exit report.
    """
    exc = exc.with_traceback(_without_ours(exc.__traceback__))
    tb = exc.__traceback__
    sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, tb
    if sys.version_info >= (3, 12):
        sys.last_exc = exc
    if not hasattr(sys, "excepthook"):
        print("sys.excepthook is missing", file=sys.stderr)
        traceback.print_exception(type(exc), exc, tb)
        return 1
    try:
        sys.excepthook(type(exc), exc, tb)
    except SystemExit as stop:  # python exits with it
        return _exit_code(stop)
    except BaseException as failure:
        failure = failure.with_traceback(_without_ours(failure.__traceback__))
        _flush_stdout()
        print("Error in sys.excepthook:", file=sys.stderr)
        traceback.print_exception(type(failure), failure, failure.__traceback__)
        print("\nOriginal exception was:", file=sys.stderr)
        traceback.print_exception(type(exc), exc, tb)
    return 1


def _without_ours(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` from the first frame that is neither ours nor runpy's."""
    while tb is not None and _is_ours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return tb


def _is_ours(filename: str) -> bool:
    return filename in _OUR_FILES or filename.endswith(_RUNPY)


def _join_threads() -> bool:
    """Wait for non-daemon threads, as python does before exiting, so they are timed:
    first the calls registered with threading's own exit hook (concurrent.futures tells
    its idle workers to stop there, or they would wait forever), then a join of each.

    Returns whether Ctrl-C stopped the wait: python then reports the KeyboardInterrupt
    as one it ignores and goes on exiting, leaving the threads to die with the process
    (``_exit_leaving_threads``).
    """
    for call in reversed(list(getattr(threading, "_threading_atexits", ()))):
        try:
            call()
        except Exception:  # as python reports a failure there, and goes on
            traceback.print_exc()
    current = threading.current_thread()
    try:
        for thread in threading.enumerate():
            if thread is not current and not thread.daemon and thread.is_alive():
                thread.join()
    except KeyboardInterrupt as exc:
        print(f"Exception ignored in: {threading!r}", file=sys.stderr)
        tb = exc.__traceback__
        traceback.print_exception(type(exc), exc, tb.tb_next if tb is not None else None)
        return True
    return False


def _exit_leaving_threads(code: int) -> NoReturn:
    """End the process with ``code`` now, as python does after Ctrl-C stopped its wait for
    the program's threads: the ``atexit`` handlers run, then the threads die with the
    process. Without this, python's own exit would wait for them again."""
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code & 0xFF)  # what the status becomes at exit(code)


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
