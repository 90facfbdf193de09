"""``aspecthook run`` end to end: unmodified programs in a subprocess, as a user runs them."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

CONFIG = """\
weave:
  - target: "json.*"
    aspects: [Timed]
"""

# A program that uses json and a module of its own (woven lazily on import), and exits
# with the code given as its first argument.
PROGRAM = """\
import json, sys
print("helper imported before the program:", "helper" in sys.modules)
import helper
for i in range(20):
    helper.work(json.dumps({"i": i}))
print("argv:", json.dumps(sys.argv))
if len(sys.argv) > 1:
    sys.exit(int(sys.argv[1]))
"""

HELPER = """\
import json

def work(text):
    return json.loads(text)["i"]
"""


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def run(
    cwd: Path, *args: str, python: tuple[str, ...] = ("-m", "aspecthook", "run")
) -> subprocess.CompletedProcess[str]:
    """``python -m aspecthook run ARGS`` in ``cwd``; output captured as text."""
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "COLUMNS": "160"}
    return subprocess.run(
        [sys.executable, *python, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def python(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Plain ``python ARGS``: the behaviour ``aspecthook run`` must reproduce."""
    return run(cwd, *args, python=())


@pytest.fixture
def program(tmp_path: Path) -> Path:
    """PROGRAM as prog.py next to helper.py, with CONFIG as aspects.yaml; returns the dir."""
    write(tmp_path, "prog.py", PROGRAM)
    write(tmp_path, "helper.py", HELPER)
    write(tmp_path, "aspects.yaml", CONFIG)
    return tmp_path


# -- the program runs as with plain python ----------------------------------------------------


def test_argv_is_passed_as_python_would(program: Path) -> None:
    """sys.argv is [script, args...] exactly, including options named like ours."""
    done = run(program, "--aspects", "aspects.yaml", "prog.py", "0", "--strict", "-m", "x")
    assert done.returncode == 0, done.stderr
    assert 'argv: ["prog.py", "0", "--strict", "-m", "x"]' in done.stdout


def test_double_dash_ends_our_options(program: Path) -> None:
    """Everything after -- is the program's command line."""
    done = run(program, "--no-summary", "--", "prog.py", "--trace", "x")
    assert done.returncode == 1  # int('--trace') fails in the program itself
    assert "ValueError: invalid literal for int() with base 10: '--trace'" in done.stderr


@pytest.mark.parametrize(
    ("typed", "meant"),
    [("--aspect", "--aspects"), ("--trac", "--trace"), ("--strictt", "--strict")],
)
def test_a_misspelt_option_is_refused_naming_the_option_it_resembles(
    program: Path, typed: str, meant: str
) -> None:
    """A misspelt or shortened option of ours is refused (exit 2, nothing run) with the
    option it resembles; `--aspect aspects.yaml` used to read as `--aspects` with no value."""
    done = run(program, typed, "aspects.yaml", "prog.py")
    assert done.returncode == 2
    assert done.stdout == ""
    assert f"unknown option {typed!r}; did you mean {meant!r}?" in done.stderr


def test_main_module_file_and_path_as_python(tmp_path: Path) -> None:
    """__name__, __file__, sys.argv[0] and sys.path[0] are what python gives the script."""
    write(
        tmp_path,
        "sub/where.py",
        """\
        import sys
        print(__name__, __file__, sys.argv[0], sys.path[0], __spec__, sep="|")
        """,
    )
    ours = run(tmp_path, "sub/where.py")
    plain = python(tmp_path, "sub/where.py")
    assert ours.returncode == plain.returncode == 0, ours.stderr
    assert ours.stdout == plain.stdout
    assert plain.stdout.split("|")[:4] == [
        "__main__",
        str(tmp_path / "sub" / "where.py"),
        "sub/where.py",
        str(tmp_path / "sub"),
    ]


@pytest.mark.parametrize("how", ["script", "module", "directory"])
def test_main_module_globals_are_pythons(tmp_path: Path, how: str) -> None:
    """The program's ``__main__`` starts with the names python gives it: ``__annotations__``
    was missing, so a script reading it without annotations of its own raised NameError."""
    body = """\
        print(sorted(name for name in globals() if name.startswith("__")))
        print(__annotations__ if "__annotations__" in globals() else None)
        """
    write(tmp_path, "names.py", body)
    write(tmp_path, "app/__main__.py", body)
    args = {"script": ("names.py",), "module": ("-m", "names"), "directory": ("app",)}[how]
    ours = run(tmp_path, *args)
    plain = python(tmp_path, *args)
    assert ours.returncode == plain.returncode == 0, ours.stderr
    assert ours.stdout == plain.stdout


def test_exit_code_zero_at_normal_end(program: Path) -> None:
    """A program that ends normally exits 0."""
    done = run(program, "--aspects", "aspects.yaml", "prog.py")
    assert done.returncode == 0, done.stderr


def test_sys_exit_code_is_the_exit_code(program: Path) -> None:
    """sys.exit(3) in the program makes aspecthook exit 3."""
    done = run(program, "--aspects", "aspects.yaml", "prog.py", "3")
    assert done.returncode == 3, done.stderr


def test_sys_exit_message_goes_to_stderr_with_code_1(tmp_path: Path) -> None:
    """sys.exit('msg') prints msg on stderr and exits 1, as python does."""
    write(tmp_path, "bye.py", "import sys\nprint('out')\nsys.exit('goodbye, cruel world')\n")
    done = run(tmp_path, "bye.py")
    assert done.returncode == 1
    assert done.stdout == "out\n"
    assert done.stderr == "goodbye, cruel world\n"


def test_uncaught_exception_traceback_is_pythons(tmp_path: Path) -> None:
    """An uncaught exception exits 1 with the traceback python prints, without our frames."""
    write(
        tmp_path,
        "boom.py",
        """\
        def inner():
            raise ValueError("bad thing")

        inner()
        """,
    )
    ours = run(tmp_path, "boom.py")
    plain = python(tmp_path, "boom.py")
    assert ours.returncode == plain.returncode == 1
    assert ours.stderr == plain.stderr
    assert f'File "{tmp_path / "boom.py"}", line 4, in <module>' in ours.stderr
    assert "ValueError: bad thing" in ours.stderr
    for foreign in ("runpy", "_cli", "aspecthook"):
        assert foreign not in ours.stderr


def test_uncaught_exception_uses_the_programs_excepthook(tmp_path: Path) -> None:
    """An excepthook the program installs gets the exception, as under plain python."""
    write(
        tmp_path,
        "hooked.py",
        """\
        import sys
        sys.excepthook = lambda t, e, tb: print("hook:", t.__name__, tb.tb_frame.f_code.co_name)
        raise KeyError("k")
        """,
    )
    done = run(tmp_path, "hooked.py")
    assert done.returncode == 1
    assert done.stdout == "hook: KeyError <module>\n"


@pytest.mark.parametrize(
    "hook",
    [
        "def hook(*exc_info):\n    raise RuntimeError('the hook failed')\nsys.excepthook = hook",
        "sys.excepthook = None",
        "del sys.excepthook",
        "def hook(*exc_info):\n    sys.exit(5)\nsys.excepthook = hook",
    ],
    ids=["raises", "none", "missing", "exits"],
)
def test_an_excepthook_that_fails_is_reported_as_python_does(tmp_path: Path, hook: str) -> None:
    """A program's excepthook that raises, is None or is gone: python's report of both
    exceptions and its exit code (a SystemExit from the hook exits with its code), and
    the summary still printed, not a traceback through aspecthook's own frames."""
    write(tmp_path, "aspects.yaml", CONFIG)
    write(tmp_path, "hooked.py", f"import json, sys\njson.dumps(1)\n{hook}\nraise KeyError('k')\n")
    ours = run(tmp_path, "--aspects", "aspects.yaml", "hooked.py")
    plain = python(tmp_path, "hooked.py")
    assert ours.returncode == plain.returncode, ours.stderr
    report, _, summary = ours.stderr.partition("aspecthook: timings")
    assert report.rstrip() == plain.stderr.rstrip()
    assert "json.dumps" in summary


def test_a_compiled_program_runs_as_python_runs_it(tmp_path: Path) -> None:
    """A ``.pyc`` program, started from another folder: its folder first on sys.path (so
    a module beside it is imported, and woven), an absolute ``__file__``, python's
    ``__loader__`` and ``__package__``, and its ``__main__`` kept for its exit handlers."""
    import py_compile

    app = tmp_path / "app"
    source = write(
        app,
        "prog.py",
        """\
        import atexit, json, pickle, sys
        import helper

        class Point:
            pass

        atexit.register(lambda: print("pickled at exit:", len(pickle.dumps(Point())) > 0))
        print(sys.argv, sys.path[0], __file__, type(__loader__).__name__, __package__)
        print(helper.work(json.dumps({"i": 7})))
        """,
    )
    write(app, "helper.py", HELPER)
    py_compile.compile(str(source), cfile=str(app / "prog.pyc"), doraise=True)
    source.unlink()
    write(tmp_path, "aspects.yaml", 'weave:\n  - target: "helper.work"\n    aspects: [Timed]\n')
    ours = run(tmp_path, "--aspects", "aspects.yaml", "app/prog.pyc", "x")
    plain = python(tmp_path, "app/prog.pyc", "x")
    assert ours.returncode == plain.returncode == 0, ours.stderr
    assert ours.stdout == plain.stdout
    assert f"['app/prog.pyc', 'x'] {app} {app / 'prog.pyc'} SourcelessFileLoader None" in (
        ours.stdout
    )
    assert "pickled at exit: True" in ours.stdout
    assert "helper.work" in ours.stderr


def test_syntax_error_is_reported_as_python_does(tmp_path: Path) -> None:
    """A program that does not compile prints python's SyntaxError report and exits 1."""
    write(tmp_path, "broken.py", "def (:\n")
    ours = run(tmp_path, "broken.py")
    plain = python(tmp_path, "broken.py")
    assert ours.returncode == plain.returncode == 1
    assert ours.stderr == plain.stderr


@pytest.mark.skipif(not hasattr(signal, "SIGINT"), reason="needs POSIX signals")
def test_keyboard_interrupt_exits_by_sigint(tmp_path: Path) -> None:
    """An uncaught KeyboardInterrupt ends the process by SIGINT, as python does."""
    write(tmp_path, "ctrl_c.py", "raise KeyboardInterrupt\n")
    ours = run(tmp_path, "ctrl_c.py")
    plain = python(tmp_path, "ctrl_c.py")
    assert ours.returncode == plain.returncode == -signal.SIGINT
    assert "KeyboardInterrupt" in ours.stderr


def test_missing_script_exits_2(tmp_path: Path) -> None:
    """A script that does not exist is reported like python does, exit code 2."""
    done = run(tmp_path, "nope.py")
    assert done.returncode == 2
    assert "can't open file" in done.stderr
    assert "nope.py" in done.stderr


# -- -m module ---------------------------------------------------------------------------------


def test_run_module_with_args(program: Path) -> None:
    """-m module runs it as __main__ with argv[0] its file and the rest passed through."""
    write(
        program,
        "pkg/__main__.py",
        """\
        import json, sys
        import helper
        print(__name__, json.dumps(sys.argv[1:]), sys.argv[0].endswith("__main__.py"))
        sys.exit(helper.work(json.dumps({"i": 4})))
        """,
    )
    write(program, "pkg/__init__.py", "")
    done = run(program, "--aspects", "aspects.yaml", "-m", "pkg", "a", "-b")
    assert done.returncode == 4, done.stderr
    assert done.stdout == '__main__ ["a", "-b"] True\n'
    assert "json.loads" in done.stderr  # the summary covers the module's calls


def test_argv0_is_dash_m_while_the_modules_package_is_imported(tmp_path: Path) -> None:
    """As under ``python -m``, the package of the ``-m`` module sees ``sys.argv[0] ==
    '-m'`` while it is imported (the module is still being located), not the name."""
    write(tmp_path, "app/__init__.py", "import sys\nprint('package:', sys.argv)\n")
    write(tmp_path, "app/cli.py", "import sys\nprint('module:', sys.argv[1:])\n")
    ours = run(tmp_path, "-m", "app.cli", "x")
    plain = python(tmp_path, "-m", "app.cli", "x")
    assert ours.returncode == plain.returncode == 0, ours.stderr
    assert ours.stdout == plain.stdout == "package: ['-m', 'x']\nmodule: ['x']\n"


def test_run_pytest_as_the_program(tmp_path: Path) -> None:
    """``aspecthook run -m pytest``: pytest, which marks its plugins' packages for
    assertion rewriting, does not warn that aspecthook (its pytest plugin's package) was
    imported before it started, which a suite whose warnings are errors cannot run with."""
    write(tmp_path, "calc.py", "def double(x):\n    return 2 * x\n")
    write(
        tmp_path,
        "test_calc.py",
        "import calc\n\ndef test_double():\n    assert calc.double(2) == 4\n",
    )
    write(tmp_path, "aspects.yaml", 'weave:\n  - target: "calc.*"\n    aspects: [Timed]\n')
    pytest_args = ("-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error", "test_calc.py")
    done = run(tmp_path, "--aspects", "aspects.yaml", *pytest_args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    assert "calc.double" in done.stderr


def test_run_missing_module(tmp_path: Path) -> None:
    """-m with a module that does not exist says so, exit code 1, as python -m does."""
    done = run(tmp_path, "-m", "no_such_module_xyz")
    assert done.returncode == 1
    assert done.stderr.endswith(": No module named no_such_module_xyz\n")


def test_console_script_runs_the_same_command(program: Path) -> None:
    """The installed 'aspecthook' script is the same command."""
    script = Path(sys.executable).with_name("aspecthook")
    if not script.exists():
        pytest.skip("the aspecthook console script is not installed next to python")
    done = subprocess.run(
        [str(script), "run", "--aspects", "aspects.yaml", "prog.py", "5"],
        cwd=program,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 5, done.stderr
    assert "json.dumps" in done.stderr


# -- weaving -----------------------------------------------------------------------------------


def test_aspects_are_woven_before_the_programs_imports(program: Path) -> None:
    """A module of the program is woven when the program imports it, not before."""
    write(
        program,
        "lazy.yaml",
        """\
        weave:
          - target: helper.work
            aspects: [Timed]
        """,
    )
    done = run(program, "--aspects", "lazy.yaml", "prog.py")
    assert done.returncode == 0, done.stderr
    assert "helper imported before the program: False" in done.stdout
    row = next(line for line in done.stderr.splitlines() if "helper.work" in line)
    assert row.split("│")[2].strip() == "20"  # calls


def test_retry_configured_with_exception_names(tmp_path: Path) -> None:
    """Retry's exception filter is written in the config file by name."""
    write(
        tmp_path,
        "flaky.py",
        """\
        calls = []

        def fetch():
            calls.append(1)
            if len(calls) < 3:
                raise ConnectionError("down")
            return len(calls)
        """,
    )
    write(tmp_path, "prog.py", "import flaky\nprint('calls', flaky.fetch())\n")
    write(
        tmp_path,
        "retry.yaml",
        """\
        weave:
          - target: flaky.fetch
            aspects: [{type: Retry, attempts: 3, backoff: 0, "on": [ConnectionError]}]
        """,
    )
    done = run(tmp_path, "--no-summary", "--aspects", "retry.yaml", "prog.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "calls 3"


def test_a_bare_on_key_in_yaml_is_explained(tmp_path: Path) -> None:
    """YAML reads a bare `on:` as true: the error says to quote it."""
    write(tmp_path, "prog.py", "print('ran')\n")
    write(
        tmp_path,
        "retry.yaml",
        """\
        weave:
          - target: json.dumps
            aspects: [{type: Retry, on: [ConnectionError]}]
        """,
    )
    done = run(tmp_path, "--aspects", "retry.yaml", "prog.py")
    assert done.returncode == 2
    assert done.stdout == ""
    assert (
        "aspecthook: error: retry.yaml: weave[0].aspects[0].True: a parameter name must be "
        "text (YAML reads a bare on, off, yes or no as a boolean: quote it, e.g. 'on':)"
    ) in done.stderr


def test_missing_target_is_a_warning_and_skipped(program: Path) -> None:
    """A target that does not exist is reported on stderr; the program runs and its code
    is the exit code."""
    write(
        program,
        "missing.yaml",
        """\
        weave:
          - target: no_such_pkg_xyz.thing
            aspects: [Timed]
          - target: "json.*"
            aspects: [Timed]
        """,
    )
    done = run(program, "--aspects", "missing.yaml", "prog.py", "7")
    assert done.returncode == 7
    assert (
        "aspecthook: warning: missing.yaml: weave[0]: no_such_pkg_xyz.thing skipped: "
        "no module named 'no_such_pkg_xyz'"
    ) in done.stderr
    assert "json.dumps" in done.stderr
    assert "argv:" in done.stdout


@pytest.mark.parametrize("strict", [False, True], ids=["warn", "strict"])
def test_glob_that_matches_nothing_is_reported(program: Path, strict: bool) -> None:
    """A misspelt glob over a package's modules is reported at exit while some modules it
    could match were never imported; with --strict as an error, exit 2, after the program
    ran (it might have imported a module the glob matches)."""
    write(
        program,
        "typo.yaml",
        """\
        weave:
          - target: "json.*.dumsp"
            aspects: [Timed]
        """,
    )
    done = run(program, *(["--strict"] if strict else []), "--aspects", "typo.yaml", "prog.py")
    assert "argv:" in done.stdout
    assert done.returncode == (2 if strict else 0)
    lead = "error" if strict else "warning"
    assert (
        f"aspecthook: {lead}: typo.yaml: weave[0]: json.*.dumsp matched nothing yet: waiting for"
    ) in done.stderr


def test_missing_target_with_strict_exits_2(program: Path) -> None:
    """With --strict a missing target is an error: exit 2 and the program does not run."""
    write(
        program,
        "missing.yaml",
        """\
        weave:
          - target: no_such_pkg_xyz.thing
            aspects: [Timed]
        """,
    )
    done = run(program, "--strict", "--aspects", "missing.yaml", "prog.py")
    assert done.returncode == 2
    assert done.stdout == ""
    assert "aspecthook: error: missing.yaml: weave[0]: cannot weave no_such_pkg_xyz.thing" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr


def test_missing_attribute_of_lazy_module(program: Path) -> None:
    """A missing function in a module imported later is reported at exit (a warning),
    and with strict: true in the file it exits 2. It is reported once, with its config
    key: the package's own ``weave.failed`` log line said it too, when it failed."""
    body = """\
        weave:
          - target: helper.no_such_function
            aspects: [Timed]
        """
    write(program, "late.yaml", body)
    done = run(program, "--aspects", "late.yaml", "prog.py", "6")
    assert done.returncode == 6
    assert "weave[0]: helper.no_such_function failed: helper has no attribute path" in done.stderr
    assert done.stderr.count("no attribute path 'no_such_function'") == 1

    write(program, "late_strict.yaml", "strict: true\n" + textwrap.dedent(body))
    done = run(program, "--aspects", "late_strict.yaml", "prog.py")
    assert done.returncode == 2
    assert "aspecthook: error: late_strict.yaml: weave[0]: " in done.stderr
    assert "helper.no_such_function" in done.stderr
    assert "(strict mode)" in done.stderr
    assert done.stderr.count("failed:") == 1  # the error is not repeated as a warning
    assert done.stderr.count("no attribute path 'no_such_function'") == 1
    assert "Timed recorded no calls" in done.stderr  # not an empty table


def test_no_calls_at_a_method_its_subclasses_override_says_what_to_weave(tmp_path: Path) -> None:
    """A base method woven by path whose subclasses define their own (as optimizers do
    ``step``) times nothing; the summary says why and names the weave that reaches them."""
    write(
        tmp_path,
        "shapes.py",
        """\
        class Shape:
            def area(self):
                raise NotImplementedError

        class Square(Shape):
            def area(self):
                return 4

        class Circle(Shape):
            def area(self):
                return 3
        """,
    )
    write(tmp_path, "main.py", "import shapes\nprint(shapes.Square().area())\n")
    write(tmp_path, "base.yaml", "weave:\n  - target: shapes.Shape.area\n    aspects: [Timed]\n")
    done = run(tmp_path, "--aspects", "base.yaml", "main.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "4\n"
    assert "aspecthook: Timed recorded no calls\n" in done.stderr
    assert (
        "aspecthook: shapes.Shape.area is overridden in 2 loaded subclasses (Circle, Square), "
        "whose calls reach it only through super(): weave 'shapes.Shape+.area' to reach "
        "theirs too"
    ) in done.stderr

    write(tmp_path, "all.yaml", "weave:\n  - target: shapes.Shape+.area\n    aspects: [Timed]\n")
    done = run(tmp_path, "--aspects", "all.yaml", "main.py")
    assert done.returncode == 0, done.stderr
    assert "shapes.Square.area" in done.stderr
    assert "overridden" not in done.stderr


def test_version_guard_skips_even_with_strict(program: Path) -> None:
    """A requires: guard that does not hold is a skip with a warning, even with --strict:
    the program runs with json.dumps unwoven (woven when the guard is left out)."""
    write(
        program,
        "guard.yaml",
        """\
        weave:
          - target: "json.*"
            requires: "pytest>=999"
            aspects: [Timed]
        """,
    )
    # A wrapt proxy answers __class__ as the function would; type() tells them apart.
    check = "import json, types\nprint(type(json.dumps) is types.FunctionType)\n"
    write(program, "check.py", check)
    done = run(program, "--strict", "--aspects", "guard.yaml", "check.py")
    assert done.returncode == 0, done.stderr
    assert "does not satisfy pytest>=999" in done.stderr
    assert done.stdout == "True\n"  # json.dumps is still the original function
    write(program, "met.yaml", 'weave:\n  - target: "json.*"\n    aspects: [Timed]\n')
    woven = run(program, "--strict", "--aspects", "met.yaml", "check.py")
    assert (woven.returncode, woven.stdout) == (0, "False\n"), woven.stderr


def test_main_module_target_is_explained(program: Path) -> None:
    """A __main__ target cannot be woven from outside; the warning says what to do."""
    write(
        program,
        "main.yaml",
        """\
        weave:
          - target: "__main__.*"
            aspects: [Timed]
        """,
    )
    done = run(program, "--aspects", "main.yaml", "prog.py")
    assert done.returncode == 0, done.stderr
    assert "move that code into a module the program imports" in done.stderr


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_design_example_times_json_and_optimizer_step(tmp_path: Path) -> None:
    """The documented config times and logs json.* and times torch's optimizer steps,
    woven when the program imports torch."""
    write(
        tmp_path,
        "aspects.yaml",
        """\
        weave:
          - target: "json.*"
            aspects: [Timed, {type: Logged, level: debug}]
          - target: "torch.optim.*.step"
            requires: "torch>=2"
            aspects: [Timed]
        """,
    )
    write(
        tmp_path,
        "train.py",
        """\
        import json, sys
        print("torch imported before the program:", "torch" in sys.modules)
        import torch
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            model(torch.ones(4, 2)).sum().backward()
            opt.step()
        print(json.dumps({"done": True}))
        """,
    )
    done = run(tmp_path, "--aspects", "aspects.yaml", "train.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout == 'torch imported before the program: False\n{"done": true}\n'
    step = next(line for line in done.stderr.splitlines() if "SGD.step" in line)
    assert step.split("│")[2].strip() == "3"
    assert "joinpoint=json.dumps" in done.stderr  # Logged, on stderr


# -- bad configuration ---------------------------------------------------------------------------


def test_unknown_aspect_type_exits_2_naming_file_and_key(program: Path) -> None:
    """A config error is one line naming the file, the key and the closest type; exit 2."""
    write(
        program,
        "typo.yaml",
        """\
        weave:
          - target: "json.*"
            aspects: [Timed]
          - target: helper.work
            aspects: [Timed, Loged]
        """,
    )
    done = run(program, "--aspects", "typo.yaml", "prog.py")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(
        "aspecthook: error: typo.yaml: weave[1].aspects[1].type: unknown aspect type 'Loged'; "
        "did you mean 'Logged'?"
    )
    assert "Traceback" not in done.stderr


def test_wrong_aspect_parameter_exits_2(program: Path) -> None:
    """A parameter the aspect does not take names it and the valid ones; exit 2."""
    write(
        program,
        "param.toml",
        """\
        [[weave]]
        target = "json.*"
        aspects = [{type = "Timed", max_event = 10}]
        """,
    )
    done = run(program, "--aspects", "param.toml", "prog.py")
    assert done.returncode == 2
    assert "param.toml: weave[0].aspects[0].max_event: Timed does not take 'max_event'" in (
        done.stderr
    )
    assert "did you mean 'max_events'?" in done.stderr


def test_a_hook_class_is_refused_as_an_aspect_to_weave(program: Path) -> None:
    """An OpenMMLab-style hook class (which the registry accepts, for a training runner)
    cannot be woven into a target: the error points at its ``type`` key and says what to
    give instead, before the program runs; exit 2."""
    write(
        program,
        "hooks.py",
        """\
        class PrintIter:
            def before_train_iter(self, runner):
                print(runner.iter)
        """,
    )
    write(
        program,
        "hook.yaml",
        """\
        weave:
          - target: "json.*"
            aspects: [Timed, "hooks:PrintIter"]
        """,
    )
    done = run(program, "--aspects", "hook.yaml", "prog.py")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(
        "aspecthook: error: hook.yaml: weave[0].aspects[1].type: 'hooks:PrintIter' builds "
        "a hooks.PrintIter, which is not an Aspect"
    )
    assert "Runner.from_config" in done.stderr
    assert "weave(" not in done.stderr  # the Python call's wording, not the config's


def test_malformed_yaml_exits_2(program: Path) -> None:
    """A file that is not YAML is reported with its name and line; exit 2."""
    write(program, "bad.yaml", "weave: [\n")
    done = run(program, "--aspects", "bad.yaml", "prog.py")
    assert done.returncode == 2
    assert done.stderr.startswith("aspecthook: error: bad.yaml: is not valid YAML: line 2")


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    """No program, an unknown command or an unknown option are usage errors (exit 2)."""
    assert run(tmp_path).returncode == 2
    assert "give the program to run" in run(tmp_path).stderr
    assert run(tmp_path, python=("-m", "aspecthook", "walk")).returncode == 2
    assert run(tmp_path, "--frobnicate", "x.py").returncode == 2
    helped = run(tmp_path, "--help")
    assert helped.returncode == 0
    assert "--aspects FILE" in helped.stdout


@pytest.mark.parametrize(
    ("argv", "meant"),
    [
        (["runn", "app.py", "-x"], "aspecthook run app.py -x"),
        (["app.py", "--restock", "3"], "aspecthook run app.py --restock 3"),
        (["--aspects", "a.yaml", "app.py"], "aspecthook run --aspects a.yaml app.py"),
        # A program named like the command is the program, not a misspelt 'run'.
        (["run.py", "--lr", "1"], "aspecthook run run.py --lr 1"),
        (["runner.py"], "aspecthook run runner.py"),
        (["scripts/run"], "aspecthook run scripts/run"),
    ],
)
def test_an_unknown_command_suggests_the_run_command_meant(
    argv: list[str], meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A misspelt 'run', or a command line that left 'run' out, is shown the one meant."""
    from aspecthook._cli import main

    assert main(argv) == 2
    assert f"unknown command {argv[0]!r}; did you mean '{meant}'?" in capsys.readouterr().err


@pytest.mark.parametrize("option", ["--aspects", "--trace"])
def test_an_option_with_a_value_given_twice_is_refused(
    option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--aspects a.yaml --aspects b.yaml`` would run with b.yaml's weaves only (the last
    one wins): a usage error naming both values, exit 2, instead of a silent drop."""
    from aspecthook._cli import main

    assert main(["run", option, "a.yaml", f"{option}=b.yaml", "app.py"]) == 2
    assert f"{option} is given twice ('a.yaml', 'b.yaml'): give it once" in (
        capsys.readouterr().err
    )


# -- at exit: summary and trace -----------------------------------------------------------------


def test_summary_table_on_stderr(program: Path) -> None:
    """At exit the Timed summary table goes to stderr with its columns; stdout is the
    program's own."""
    done = run(program, "--aspects", "aspects.yaml", "prog.py")
    plain = python(program, "prog.py")
    assert done.stdout == plain.stdout
    assert "aspecthook: timings" in done.stderr
    header = next(line for line in done.stderr.splitlines() if "join point" in line)
    columns = [c.strip() for c in header.strip("┃ ").split("┃")]
    assert columns == [
        "join point",
        "calls",
        "errors",
        "total",
        "mean",
        "min",
        "p50",
        "p95",
        "p99",
        "max",
    ]
    dumps = next(line for line in done.stderr.splitlines() if "│ json.dumps " in line)
    assert dumps.split("│")[2].strip() == "21"  # 20 in the loop, 1 for argv


def test_summary_also_after_exception_and_exit(program: Path) -> None:
    """The summary is printed after sys.exit(n) and after an uncaught exception."""
    assert "json.dumps" in run(program, "--aspects", "aspects.yaml", "prog.py", "9").stderr
    failing = run(program, "--aspects", "aspects.yaml", "prog.py", "not-a-number")
    assert failing.returncode == 1
    assert failing.stderr.index("Traceback") < failing.stderr.index("json.dumps")


def test_no_summary(program: Path) -> None:
    """--no-summary, or summary: false in the file, prints no table."""
    assert (
        "timings" not in run(program, "--no-summary", "--aspects", "aspects.yaml", "prog.py").stderr
    )
    write(program, "quiet.yaml", "summary: false\n" + CONFIG)
    assert "timings" not in run(program, "--aspects", "quiet.yaml", "prog.py").stderr


@pytest.mark.parametrize("how", ["option", "file"])
def test_describe_prints_every_join_point_with_its_calls(program: Path, how: str) -> None:
    """--describe (or describe: true) counts every advice's calls while the program runs
    and prints the join points with their advice and counts at exit: 20 calls each of
    json.dumps (the program, and once more for its argv) and json.loads (its helper, woven
    on import); a target that
    was never woven shows as skipped. Without it, no such table."""
    write(program, "described.yaml", "describe: true\n" + CONFIG + MISSING_TARGET)
    write(program, "plain.yaml", CONFIG + MISSING_TARGET)
    file = "plain.yaml" if how == "option" else "described.yaml"
    args = ("--describe", "--aspects", file) if how == "option" else ("--aspects", file)
    done = run(program, *args, "prog.py")
    assert done.returncode == 0, done.stderr
    assert "join points and advice" in done.stderr
    table = done.stderr[done.stderr.index("join points and advice") : done.stderr.index("timings")]
    rows = {
        cells[0]: cells
        for line in table.splitlines()
        if line.startswith("│") and (cells := [c.strip() for c in line.split("│")[1:-1]])
    }
    assert rows["json.dumps"][1:3] == ["around", "1"]
    assert rows["json.dumps"][8] == "21"  # calls: 20 in the loop, one for argv
    assert rows["json.loads"][8] == "20"
    assert rows["nosuchmodule.f"][7] == "skipped"
    quiet = run(program, "--aspects", "plain.yaml", "prog.py")
    assert "join points and advice" not in quiet.stderr


MISSING_TARGET = """\
  - target: nosuchmodule.f
    aspects: [Timed]
"""


def test_trace_file_is_written(program: Path) -> None:
    """--trace writes Trace Event JSON with complete, nested events of every weave."""
    write(
        program,
        "two.yaml",
        """\
        weave:
          - target: "json.*"
            aspects: [Timed]
          - target: helper.work
            aspects: [Timed]
        """,
    )
    done = run(program, "--aspects", "two.yaml", "--trace", "out/trace.json", "prog.py", "4")
    assert done.returncode == 4, done.stderr
    assert f"trace written to {program / 'out' / 'trace.json'}" in done.stderr
    events = json.loads((program / "out" / "trace.json").read_text())["traceEvents"]
    meta = [e for e in events if e["ph"] == "M"]
    events = [e for e in events if e["ph"] != "M"]
    assert {e["ph"] for e in events} == {"X"}
    # the process and its main thread are named once, though two timers wrote parts
    assert [e["args"]["name"] for e in meta] == ["prog.py", "MainThread"]
    names = [e["name"] for e in events]
    assert names.count("helper.work") == 20
    assert names.count("json.dumps") == 21
    work = next(e for e in events if e["name"] == "helper.work")
    inside = [
        e
        for e in events
        if e["tid"] == work["tid"]
        and work["ts"] <= e["ts"]
        and e["ts"] + e["dur"] <= work["ts"] + work["dur"]
    ]
    assert "json.loads" in {e["name"] for e in inside}  # nested calls nest


def test_trace_from_config_file_after_exception(program: Path) -> None:
    """trace: in the file writes the trace at exit, also after an uncaught exception."""
    (program / "out").mkdir()
    write(
        program,
        "traced.toml",
        'trace = "out/t.json"\n[[weave]]\ntarget = "json.*"\naspects = ["Timed"]\n',
    )
    done = run(program, "--aspects", "traced.toml", "prog.py", "x")
    assert done.returncode == 1
    events = json.loads((program / "out" / "t.json").read_text())["traceEvents"]
    assert any(e["name"] == "json.dumps" for e in events)


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_program_that_closes_its_output_still_gets_its_exit_report(
    tmp_path: Path, stream: str
) -> None:
    """A program that closes its stdout (to see a write error at the end) or its stderr
    exits as under python; the summary still goes to stderr where it is open, and the
    trace is written. Flushing or printing to the closed stream raised from our exit
    report instead."""
    write(tmp_path, "aspects.yaml", CONFIG)
    write(tmp_path, "closes.py", f"import json, sys\njson.dumps(1)\nsys.{stream}.close()\n")
    args = ("--describe", "--trace", "trace.json", "closes.py")
    ours = run(tmp_path, "--aspects", "aspects.yaml", *args)
    plain = python(tmp_path, "closes.py")
    assert ours.returncode == plain.returncode == 0, ours.stderr
    assert "Traceback" not in ours.stderr
    if stream == "stdout":
        assert "aspecthook: timings" in ours.stderr
        assert "json.dumps" in ours.stderr
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert any(e["name"] == "json.dumps" for e in events)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_that_ends_normally_reports_nothing(tmp_path: Path) -> None:
    """A child made by os.fork() that runs to the end of the program prints no summary
    and writes no trace: only the process that started the run reports, with its own
    calls (the child's counts stay in the child, as the docs say)."""
    write(tmp_path, "aspects.yaml", CONFIG)
    write(
        tmp_path,
        "forks.py",
        """\
        import json, os
        json.dumps(0)
        pid = os.fork()
        if pid == 0:
            for i in range(5):
                json.dumps(i)
        else:
            os.waitpid(pid, 0)
            print("parent", os.getpid())
        """,
    )
    done = run(tmp_path, "--aspects", "aspects.yaml", "--trace", "t.json", "forks.py")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("aspecthook: timings") == 1
    assert done.stderr.count("trace written") == 1
    parent = int(done.stdout.split()[-1])
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    dumps = [e for e in events if e["name"] == "json.dumps"]
    assert len(dumps) == 1
    assert {e["pid"] for e in events} == {parent}


def test_threads_are_joined_before_the_summary(tmp_path: Path) -> None:
    """Calls made by non-daemon threads still running at the end are in the summary."""
    write(tmp_path, "aspects.yaml", CONFIG)
    write(
        tmp_path,
        "threaded.py",
        """\
        import json, threading, time

        def late():
            time.sleep(0.2)
            json.dumps([1])

        threading.Thread(target=late).start()
        """,
    )
    done = run(tmp_path, "--aspects", "aspects.yaml", "threaded.py")
    assert done.returncode == 0, done.stderr
    assert "json.dumps" in done.stderr


def test_differently_configured_timers_share_one_table_and_trace(program: Path) -> None:
    """Two Timed aspects with different parameters end up in one table and one trace file."""
    write(
        program,
        "two_timers.yaml",
        """\
        weave:
          - target: "json.dumps"
            aspects: [Timed]
          - target: helper.work
            aspects: [{type: Timed, max_events: 5}]
        """,
    )
    done = run(program, "--aspects", "two_timers.yaml", "--trace", "t.json", "prog.py")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("aspecthook: timings") == 1
    assert "│ json.dumps " in done.stderr
    assert "│ helper.work " in done.stderr
    names = [e["name"] for e in json.loads((program / "t.json").read_text())["traceEvents"]]
    assert (names.count("json.dumps"), names.count("helper.work")) == (21, 5)


@pytest.mark.parametrize(
    ("second", "labels"),
    [
        ("{type: Timed, name: outer}", ("timed", "outer")),
        ("{type: Timed, max_events: 5}", ("timed #1", "timed #2")),  # equal specs share one
    ],
    ids=["named", "same-name"],
)
def test_two_timers_of_one_join_point_get_rows_named_after_each_timer(
    program: Path, second: str, labels: tuple[str, str]
) -> None:
    """When two Timed aspects time one join point, the summary's rows for it carry each
    timer's name (and its place where the names are the same), so no two rows read alike;
    a join point one timer times keeps its plain name."""
    write(
        program,
        "two_timers.yaml",
        f"""\
        weave:
          - target: "json.dumps"
            aspects: [Timed, {second}]
          - target: helper.work
            aspects: [Timed]
        """,
    )
    done = run(program, "--aspects", "two_timers.yaml", "prog.py")
    assert done.returncode == 0, done.stderr
    names = [
        line.split("│")[1].strip() for line in done.stderr.splitlines() if line.startswith("│")
    ]
    assert sorted(names) == sorted([f"json.dumps [{label}]" for label in labels] + ["helper.work"])


def test_a_merged_trace_counts_the_dropped_events_of_every_timer(program: Path) -> None:
    """The trace of several Timed aspects says how many events all of them dropped."""
    write(
        program,
        "two_timers.yaml",
        """\
        weave:
          - target: "json.dumps"
            aspects: [{type: Timed, max_events: 20}]
          - target: helper.work
            aspects: [{type: Timed, max_events: 5}]
        """,
    )
    done = run(program, "--aspects", "two_timers.yaml", "--trace", "t.json", "prog.py")
    assert done.returncode == 0, done.stderr
    document = json.loads((program / "t.json").read_text())
    assert len([e for e in document["traceEvents"] if e["ph"] != "M"]) == 25
    assert document["otherData"]["dropped_events"] == 1 + 15  # 21 json.dumps, 20 helper.work


def test_a_merged_trace_is_written_atomically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trace of several Timed aspects replaces the file whole: the file is never opened
    for writing in place, where an interrupted write leaves half a JSON document."""
    import builtins

    import aspecthook as ah
    from aspecthook._cli_report import _write_trace
    from aspecthook.aspects import Timed

    timers = [Timed(trace=True), Timed(trace=True)]
    with ah.weave(json.dumps, timers[0]), ah.weave(json.loads, timers[1]):
        json.loads(json.dumps([1]))
    target = tmp_path / "trace.json"
    target.write_text('{"traceEvents": []}')
    written = []
    real_open = builtins.open

    def spying_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if set(mode) & set("wax+"):
            written.append(Path(file))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spying_open)
    _write_trace(timers, str(target))
    monkeypatch.undo()
    assert target not in written
    events = json.loads(target.read_text())["traceEvents"]
    assert {e["name"] for e in events if e["ph"] != "M"} == {"json.dumps", "json.loads"}
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]


def test_malformed_requires_is_a_config_error(program: Path) -> None:
    """A requires: that is not a requirement points at that key; exit 2."""
    write(
        program,
        "req.yaml",
        """\
        weave:
          - target: "json.*"
            requires: "torch >>> 2"
            aspects: [Timed]
        """,
    )
    done = run(program, "--aspects", "req.yaml", "prog.py")
    assert done.returncode == 2
    assert done.stderr.startswith("aspecthook: error: req.yaml: weave[0].requires: requires=")


# -- process events and logging ----------------------------------------------------------------

EXIT_REPORTER = """\
import sys
import aspecthook as ah

@ah.on("process.exit")
def bye(event):
    exc = type(event.exc).__name__ if event.exc is not None else None
    print("process.exit", event.exit_code, exc, flush=True)

{body}
"""


@pytest.mark.parametrize(
    ("body", "code", "exc"),
    [
        ("print('done')", 0, "None"),
        ("sys.exit(3)", 3, "None"),
        ("sys.exit('goodbye')", 1, "None"),
        ("raise ValueError('bad')", 1, "ValueError"),
    ],
    ids=["normal-end", "sys-exit-int", "sys-exit-message", "uncaught"],
)
def test_process_exit_subscriber_sees_the_exact_exit_code(
    tmp_path: Path, body: str, code: int, exc: str
) -> None:
    """A process.exit subscriber of the program gets the status aspecthook run exits with."""
    write(tmp_path, "prog.py", EXIT_REPORTER.format(body=body))
    done = run(tmp_path, "prog.py")
    assert done.returncode == code, done.stderr
    assert done.stdout.splitlines()[-1] == f"process.exit {code} {exc}"


@pytest.mark.skipif(not hasattr(signal, "SIGINT"), reason="needs POSIX signals")
def test_process_exit_runs_before_a_death_by_ctrl_c(tmp_path: Path) -> None:
    """After an uncaught KeyboardInterrupt process.exit still runs (status 130), as python
    runs atexit handlers before it kills itself by SIGINT."""
    write(tmp_path, "prog.py", EXIT_REPORTER.format(body="raise KeyboardInterrupt"))
    done = run(tmp_path, "prog.py")
    assert done.returncode == -signal.SIGINT
    assert done.stdout.splitlines()[-1] == "process.exit 130 KeyboardInterrupt"
    assert "KeyboardInterrupt" in done.stderr


def test_logged_json_functions_with_json_log_lines(tmp_path: Path) -> None:
    """Logged on json.* with logging: {format: json} logs each call once, as JSON lines."""
    write(
        tmp_path,
        "log_json.yaml",
        """\
        logging: {format: json}
        weave:
          - target: "json.*"
            aspects: [{type: Logged, log_result: false}]
        """,
    )
    write(tmp_path, "prog.py", "import json\nprint(json.loads(json.dumps([1, 2])))\n")
    done = run(tmp_path, "--aspects", "log_json.yaml", "prog.py")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "[1, 2]\n"
    records = [json.loads(line) for line in done.stderr.splitlines()]
    outermost = [r["joinpoint"] for r in records if len(r["joinpoint_stack"]) == 1]
    assert outermost == ["json.dumps", "json.loads"]
    assert len(records) == len({r["joinpoint"] for r in records})  # each call logged once


def test_logging_file_in_a_folder_not_made_yet_is_written(tmp_path: Path) -> None:
    """logging: {file: logs/calls.jsonl} makes its folder, as --trace does for its own."""
    write(
        tmp_path,
        "log_file.yaml",
        """\
        logging: {format: json, file: logs/calls.jsonl}
        weave:
          - target: json.dumps
            aspects: [{type: Logged, log_result: false}]
        """,
    )
    write(tmp_path, "prog.py", "import json\nprint(json.dumps([1]))\n")
    done = run(tmp_path, "--no-summary", "--aspects", "log_file.yaml", "prog.py")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "[1]\n"
    lines = (tmp_path / "logs" / "calls.jsonl").read_text().splitlines()
    assert [json.loads(line)["joinpoint"] for line in lines] == ["json.dumps"]


@pytest.mark.parametrize("how", ["script", "module"])
def test_modules_beside_the_program_are_woven_from_another_directory(
    tmp_path: Path, how: str
) -> None:
    """The console script, started elsewhere: a target in a module beside the script (in
    the working directory for -m) is woven on import, as the docs' walkthrough shows."""
    app = tmp_path / "app"
    write(app, "prog.py", PROGRAM)
    write(app, "helper.py", HELPER)
    write(app, "aspects.yaml", 'weave:\n  - target: "helper.work"\n    aspects: [Counted]\n')
    console = str(Path(sys.executable).with_name("aspecthook"))
    if how == "script":
        args = ["--strict", "--aspects", str(app / "aspects.yaml"), str(app / "prog.py")]
        done = subprocess.run(
            [console, "run", *args], cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
    else:
        args = ["--strict", "--aspects", "aspects.yaml", "-m", "prog"]
        done = subprocess.run(
            [console, "run", *args], cwd=app, capture_output=True, text=True, timeout=120
        )
    assert done.returncode == 0, done.stderr
    assert "skipped" not in done.stderr
    assert "helper imported before the program: False" in done.stdout


def test_modules_of_the_program_named_like_ours_do_not_stand_in_for_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A program whose folder holds a ``yaml.py``, ``structlog.py`` or ``rich.py`` of its
    own: aspecthook reads the config, builds ``Logged`` and prints the summary with the
    installed packages (the program's folder came first on sys.path while it imported
    them). A module of the program that the config names is the program's, also where an
    installed module has its name."""
    app = tmp_path / "app"
    write(app, "prog.py", "import helper, slow\nprint(helper.work('{\"i\": 3}'), slow.WHOSE)\n")
    write(app, "helper.py", HELPER)
    write(app, "slow.py", "from aspecthook.aspects import Counted as Slow\nWHOSE = 'app'\n")
    write(tmp_path / "site", "slow.py", "raise ImportError('the installed slow.py')\n")
    paths = [os.environ.get("PYTHONPATH", ""), str(tmp_path / "site")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    for name in ("yaml", "structlog", "rich"):
        write(app, f"{name}.py", f"raise ImportError('the program's own {name}.py')\n")
    write(
        tmp_path,
        "aspects.yaml",
        'weave:\n  - target: "helper.work"\n    aspects: [Timed, Logged, "slow:Slow"]\n',
    )
    done = run(tmp_path, "--describe", "--aspects", "aspects.yaml", "app/prog.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "3 app\n"
    assert "program's own" not in done.stderr
    assert "installed slow.py" not in done.stderr
    assert "aspecthook: timings" in done.stderr
    assert "helper.work" in done.stderr


# -- the end of the program, as python ends it --------------------------------------------------


@pytest.mark.parametrize("how", ["script", "module"])
def test_the_programs_main_module_stays_for_its_threads_and_exit_handlers(
    program: Path, how: str
) -> None:
    """A thread still running after the script body, and an atexit handler, pickle a class
    of the program's own: pickle finds it in __main__, as under plain python."""
    body = """\
        import atexit, pickle, threading, time

        class Point:
            pass

        def later():
            time.sleep(0.2)
            print("thread:", type(pickle.loads(pickle.dumps(Point()))).__name__)

        threading.Thread(target=later).start()
        atexit.register(lambda: print("atexit:", len(pickle.dumps(Point())) > 0))
        """
    if how == "script":
        write(program, "late.py", body)
        done = run(program, "--aspects", "aspects.yaml", "--no-summary", "late.py")
    else:
        write(program, "latepkg/__init__.py", "")
        write(program, "latepkg/__main__.py", body)
        done = run(program, "--aspects", "aspects.yaml", "--no-summary", "-m", "latepkg")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "thread: Point\natexit: True\n"


def test_a_thread_pool_left_open_does_not_keep_the_program_from_exiting(program: Path) -> None:
    """Idle pool workers wait on their queue: python tells them to stop before it joins
    the program's threads (threading's exit hooks), and so does aspecthook run."""
    write(
        program,
        "libpool.py",
        """\
        from concurrent.futures import ThreadPoolExecutor

        executor = ThreadPoolExecutor(2)  # a library's pool, never shut down
        """,
    )
    write(
        program,
        "pool.py",
        """\
        import json
        import libpool

        print(libpool.executor.submit(json.dumps, {"a": 1}).result())
        """,
    )
    done = subprocess.run(
        [sys.executable, "-m", "aspecthook", "run", "--aspects", "aspects.yaml", "pool.py"],
        cwd=program,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith('{"a": 1}\n')


# -- regressions: the program runs as with python, whatever the config says -----------------------


def test_run_module_shows_the_import_error_of_its_package(tmp_path: Path) -> None:
    """-m pkg.mod whose package fails to import (a missing dependency) shows that error,
    as python -m does, not 'No module named pkg.mod'."""
    write(tmp_path, "mypkg/__init__.py", "import some_missing_dependency_xyz\n")
    write(tmp_path, "mypkg/train.py", "print('training')\n")
    ours = run(tmp_path, "-m", "mypkg.train")
    plain = python(tmp_path, "-m", "mypkg.train")
    assert ours.returncode == plain.returncode == 1
    last = "ModuleNotFoundError: No module named 'some_missing_dependency_xyz'"
    assert plain.stderr.strip().splitlines()[-1] == last
    assert ours.stderr.strip().splitlines()[-1] == last


STRUCTLOG_PROGRAM = """\
import json, structlog
structlog.get_logger().info("order placed", id=7)
print(json.dumps({"ok": True}))
"""


@pytest.mark.parametrize("logging", ["", "logging: {format: json}\n"], ids=["default", "json"])
def test_logged_leaves_the_programs_own_structlog_output_where_it_was(
    tmp_path: Path, logging: str
) -> None:
    """A Logged aspect writes to stderr without configuring structlog for the program:
    the program's own structlog lines stay on its stdout, as under plain python."""
    write(tmp_path, "app.py", STRUCTLOG_PROGRAM)
    config = logging + "weave:\n  - target: json.dumps\n    aspects: [Logged]\n"
    write(tmp_path, "aspects.yaml", config)
    ours = run(tmp_path, "--aspects", "aspects.yaml", "--no-summary", "app.py")
    plain = python(tmp_path, "app.py")
    assert ours.returncode == plain.returncode == 0, ours.stderr
    assert "order placed" in plain.stdout
    assert [line[20:] for line in ours.stdout.splitlines()] == [
        line[20:]
        for line in plain.stdout.splitlines()  # after the timestamp
    ]
    assert "order placed" not in ours.stderr
    assert "json.dumps" in ours.stderr  # the Logged line
    if logging:
        (record,) = [json.loads(line) for line in ours.stderr.splitlines()]
        assert record["joinpoint"] == "json.dumps"


def _never_imported(tmp_path: Path) -> None:
    write(tmp_path, "mypkg/__init__.py", "")
    step = "def step(i):\n    return i\nprint([step(i) for i in (1, 2)])\n"
    write(tmp_path, "mypkg/train.py", step)
    write(tmp_path, "app.py", "def compute(x):\n    return 2 * x\nprint(compute(3))\n")
    write(
        tmp_path,
        "aspects.yaml",
        """\
        weave:
          - target: mypkg.train.step
            aspects: [Timed]
          - target: app.compute
            aspects: [Timed]
          - target: json.tool.mian
            aspects: [Timed]
        """,
    )


@pytest.mark.parametrize("strict", [False, True], ids=["warn", "strict"])
@pytest.mark.parametrize("program", [["-m", "mypkg.train"], ["app.py"]], ids=["module", "script"])
def test_targets_never_woven_are_reported_at_exit(
    tmp_path: Path, strict: bool, program: list[str]
) -> None:
    """A target whose module the program never imported is reported at exit (with --strict
    an error, exit 2): a typo in a module never imported, and the program's own module,
    which runs as __main__ and is explained as such."""
    _never_imported(tmp_path)
    flags = ["--strict"] if strict else []
    done = run(tmp_path, *flags, "--aspects", "aspects.yaml", "--no-summary", *program)
    assert done.returncode == (2 if strict else 0), done.stderr
    assert done.stdout in ("[1, 2]\n", "6\n")  # the program ran to its end
    lead = "aspecthook: error: " if strict else "aspecthook: warning: "
    typo = f"{lead}aspects.yaml: weave[2]: json.tool.mian was never woven: "
    assert typo + "the program never imported json.tool" in done.stderr
    own = "weave[0]: mypkg.train.step" if program[0] == "-m" else "weave[1]: app.compute"
    assert f"{lead}aspects.yaml: {own} was never woven: " in done.stderr
    assert "runs as __main__" in done.stderr
    assert "move that code into a module the program imports" in done.stderr


def test_strict_failure_is_not_raised_into_the_programs_import(tmp_path: Path) -> None:
    """With --strict a target missing from a module the program imports does not make that
    import fail (a program guarding it would take its fallback): the program runs as
    under python, and the run exits 2 at the end."""
    write(tmp_path, "fastlib.py", "def encode(x):\n    return x\n")
    write(
        tmp_path,
        "app.py",
        """\
        try:
            import fastlib
        except Exception as exc:
            fastlib = None
            print("fastlib unavailable:", type(exc).__name__)
        print("using fastlib" if fastlib else "using slow path")
        """,
    )
    write(tmp_path, "aspects.yaml", "weave:\n  - target: fastlib.encdoe\n    aspects: [Timed]\n")
    done = run(tmp_path, "--strict", "--aspects", "aspects.yaml", "app.py")
    assert done.stdout == "using fastlib\n"
    assert done.returncode == 2
    assert "aspecthook: error: aspects.yaml: weave[0]: " in done.stderr
    assert "fastlib.encdoe" in done.stderr
    assert "(strict mode)" in done.stderr


@pytest.mark.parametrize("target", ["appdir", "app.zip"])
def test_directory_and_zip_programs_get_absolute_paths_as_python(
    tmp_path: Path, target: str
) -> None:
    """A directory or zip with __main__.py gets the absolute sys.path[0] and __file__ that
    python gives it (so a lazy import after os.chdir works), and argv[0] as typed."""
    import zipfile

    main = """\
        import os, sys
        print(__name__, __file__, sys.path[0], sys.argv[0], sep="|")
        os.chdir(os.path.dirname(os.getcwd()))
        import helper
        print("lazy import:", helper.X)
        """
    write(tmp_path, "appdir/__main__.py", main)
    write(tmp_path, "appdir/helper.py", "X = 1\n")
    with zipfile.ZipFile(tmp_path / "app.zip", "w") as archive:
        archive.write(tmp_path / "appdir" / "__main__.py", "__main__.py")
        archive.write(tmp_path / "appdir" / "helper.py", "helper.py")
    ours = run(tmp_path, target)
    plain = python(tmp_path, target)
    assert plain.returncode == 0, plain.stderr
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout == plain.stdout
    assert str(tmp_path / target) in plain.stdout


# -- regressions: exit work under Ctrl-C, trace paths, --help ------------------------------------


@pytest.mark.skipif(not hasattr(signal, "SIGINT"), reason="needs POSIX signals")
def test_ctrl_c_while_waiting_for_threads_still_reports(tmp_path: Path) -> None:
    """Ctrl-C while the end waits for the program's threads stops the wait as python
    does (reported, the program's exit code kept, the threads left to die with the
    process), and the summary and trace are still written, without our frames."""
    write(tmp_path, "aspects.yaml", CONFIG)
    write(
        tmp_path,
        "hang.py",
        """\
        import json, os, signal, sys, threading, time

        def waiting_for_threads():
            frame = sys._current_frames().get(threading.main_thread().ident)
            while frame is not None and frame.f_code.co_name != "join":
                frame = frame.f_back
            return frame is not None

        def stuck():
            json.dumps([1])
            # Ctrl-C once the main thread waits for this one (in Thread.join): a fixed
            # delay could come before that on a loaded machine.
            while not waiting_for_threads():
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGINT)
            threading.Event().wait(60)

        threading.Thread(target=stuck).start()
        print("main done", flush=True)
        """,
    )
    done = run(tmp_path, "--aspects", "aspects.yaml", "--trace", "t.json", "hang.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "main done\n"
    assert "Exception ignored in: <module 'threading'" in done.stderr
    assert "KeyboardInterrupt" in done.stderr
    assert "aspecthook/_cli" not in done.stderr.replace(os.sep, "/")
    assert "json.dumps" in done.stderr  # the summary
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert any(e["name"] == "json.dumps" for e in events)


@pytest.mark.parametrize("where", ["option", "config"])
@pytest.mark.parametrize("trace", ["prog.py/t.json", "out"], ids=["under-a-file", "a-folder"])
def test_a_trace_path_that_cannot_be_written_is_an_error_before_the_run(
    program: Path, where: str, trace: str
) -> None:
    """A trace that could not be written at exit is exit code 2 before the program runs,
    not a warning after it (a long run would lose its trace)."""
    (program / "out").mkdir()
    if where == "option":
        done = run(program, "--aspects", "aspects.yaml", "--trace", trace, "prog.py")
        assert f"aspecthook: error: --trace {trace}: cannot write the trace" in done.stderr
    else:
        write(program, "traced.yaml", f"trace: {trace}\n{CONFIG}")
        done = run(program, "--aspects", "traced.yaml", "prog.py")
        assert "aspecthook: error: traced.yaml: trace: cannot write the trace" in done.stderr
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""  # nothing was run


def test_run_help_says_what_strict_does_and_where_the_programs_arguments_go(
    tmp_path: Path,
) -> None:
    """run --help describes --strict as the docs do and says that everything from the
    script on is the program's."""
    helped = run(tmp_path, "--help")
    assert helped.returncode == 0
    text = " ".join(helped.stdout.split())
    assert "never woven" in text
    assert "exit code 2" in text
    assert "passed to it untouched" in text


def test_describe_leaves_call_counting_off_when_the_config_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A strict weave that fails while the config is read (the session never starts)
    leaves call counting as it was: on only for a session that runs."""
    from aspecthook import _log
    from aspecthook._cli import RunOptions
    from aspecthook._cli_session import Session
    from aspecthook._tracking import is_tracking
    from aspecthook.errors import WeaveTargetError

    write(tmp_path, "bad.yaml", "weave:\n  - target: json.no_such_function\n    aspects: [Timed]\n")
    options = RunOptions(aspects=str(tmp_path / "bad.yaml"), strict=True, describe=True)
    monkeypatch.setattr(_log, "_logger", _log._logger)  # the session redirects it to stderr
    with pytest.raises(WeaveTargetError, match="no_such_function"):
        Session.start(options)
    assert not is_tracking()
