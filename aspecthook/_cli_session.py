"""The session of ``aspecthook run``: the config read, its aspects woven, and the exit
report of the weaves that never took effect, the advice table, the summary and the trace.

Separate from the command line, which only parses, and from the running of the program,
which imitates python: this is where the config meets ``weave``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._cli_logging import _configure_logging, _core_logs_to_stderr, _quiet_core_logs
from ._cli_report import (
    PROG,
    _flush_stdout,
    _is_timer,
    _overridden,
    _print_summary,
    _say,
    _trace_problem,
    _warn,
    _write_trace,
)
from ._config import RunConfig, WeaveSpec, load_config
from ._describe import describe
from ._install import ENDING
from ._tracking import track_calls
from .errors import AspectHookError, WeaveTargetError

if TYPE_CHECKING:
    from ._cli import RunOptions

__all__ = ["Session"]

_MAIN_PROBLEM = (
    "the program's own __main__ module cannot be woven from outside, it does not exist "
    "before the program runs; move that code into a module the program imports and weave "
    "it there"
)


@dataclass
class Session:
    """What ``aspecthook run`` set up: the config, its aspects and weaves, the outputs."""

    config: RunConfig
    strict: bool
    trace: str | None
    summary: bool
    describe: bool = False  # count calls while the program runs, print describe() at exit
    program: tuple[str, ...] = ()  # the module names of the program itself (run as __main__)
    aspects: list[Any] = field(default_factory=list)
    records: list[tuple[str, Any]] = field(default_factory=list)  # (key, WeaveRecord)
    handles: list[Any] = field(default_factory=list)
    tracking: track_calls | None = None  # the switch turned on for describe, put back at exit
    pid: int = field(default_factory=os.getpid)  # the process that reports at exit

    @classmethod
    def start(
        cls,
        options: RunOptions,
        *,
        as_program: Callable[[], AbstractContextManager[None]] = nullcontext,
    ) -> Session:
        """Read the config and weave it; ``ConfigError`` / ``WeaveTargetError`` if not.

        ``as_program()``: the context in which ``sys.path`` is the program's, where the
        modules of the config's ``'package.module:Name'`` types are imported.
        """
        config = load_config(options.aspects) if options.aspects else RunConfig(file="")
        trace = options.trace or config.trace
        problem = _trace_problem(trace) if trace and not options.trace else None
        if problem is not None:  # the --trace option's own was checked before the config
            raise config.error("trace", problem)
        session = cls(
            config,
            strict=options.strict or config.strict,
            trace=os.path.abspath(trace) if trace else None,
            summary=options.summary and config.summary,
            describe=options.describe or config.describe,
            program=_program_modules(options),
        )
        from .registry import ASPECTS

        with as_program():
            _import_type_modules(config)
        built = config.build_aspects(ASPECTS, trace=session.trace is not None)
        _check_weavable(config, built)
        for aspect in (a for aspects in built for a in aspects):
            if all(aspect is not seen for seen in session.aspects):
                session.aspects.append(aspect)
        _configure_logging(config, session.aspects)
        _quiet_core_logs()  # skipped targets are reported below, once, with their key
        try:
            for weave_spec, aspects in zip(config.weaves, built, strict=True):
                for target in weave_spec.targets:
                    session.weave(weave_spec, target, aspects)
        finally:  # a config weave that fails later is reported by finish(), with its key
            _core_logs_to_stderr({record.target for _, record in session.records})
        if session.describe:  # once every weave is made: a config that fails leaves it off
            session.tracking = track_calls()
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
                    f"{self.config.file}: {key}: cannot weave {target}: {_reason(record)} "
                    "(strict mode; drop --strict to skip it)",
                    target=target,
                )
            if record.status == "skipped":
                _warn(f"{self.config.file}: {key}: {target} skipped: {_reason(record)}")

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
        of the timings and logs of a config that instruments ``json.*``. A child that the
        program forked (``os.fork()``) and that ran on to the program's end reports
        nothing: its counts are not the run's, and its trace would replace the run's.
        """
        if os.getpid() != self.pid:
            return False
        # Read while the weaves are in place (they leave describe() with their handles);
        # printed after unweaving, so rendering it runs no advice of the config.
        rows = describe() if self.describe else None
        overridden = _overridden()  # why a timer may have seen no call, said with its summary
        if self.tracking is not None:
            self.tracking.__exit__(None, None, None)
        ending = ENDING.set(True)  # an idle proxy left under a wrapper no longer matters
        try:
            for handle in self.handles:
                handle.remove()
        finally:
            ENDING.reset(ending)
        problems = [(key, p) for key, r in self.records if (p := self._problem(r)) is not None]
        for key, problem in problems:
            where = f"{self.config.file}: {key}: {problem}"
            if self.strict:
                _say(f"{PROG}: error: {where} (strict mode)")
            else:
                _warn(where)
        if rows is not None:
            _flush_stdout()
            _say(rows)
        timers = [a for a in self.aspects if _is_timer(a)]
        if self.summary and timers:
            _print_summary(timers, overridden)
        if self.trace is not None:
            _write_trace(timers, self.trace)
        return self.strict and bool(problems)

    def _problem(self, record: Any) -> str | None:
        """Why ``record``'s weave never took effect (failed, or still waiting), or None."""
        if record.status == "failed":
            return f"{record.target} failed: {_reason(record)}"
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


def _import_type_modules(config: RunConfig) -> None:
    """Import the modules of the config's ``'package.module:Name'`` types, as the program
    would import them. A module that fails is left to the build, which reports it at its
    key."""
    import importlib

    for weave_spec in config.weaves:
        for spec in weave_spec.aspects:
            module, colon, _ = spec.type.partition(":")
            if not colon:
                continue
            try:
                importlib.import_module(module.strip())
            except Exception:
                continue


def _check_weavable(config: RunConfig, built: list[list[Any]]) -> None:
    """``ConfigError`` at the ``type`` of an aspect that ``weave`` cannot apply: the
    registry also takes hook and callback classes, which run on a training runner."""
    from ._advice import Advice
    from ._aspect import Aspect

    for weave_spec, aspects in zip(config.weaves, built, strict=True):
        for spec, aspect in zip(weave_spec.aspects, aspects, strict=True):
            if isinstance(aspect, (Aspect, Advice)):
                continue
            raise config.error(
                f"{spec.key}.type",
                f"{spec.type!r} builds {_what(aspect)}, which is not an Aspect"
                f"{_RUNNER_HINT if _is_hook(aspect) else ''}; here name an Aspect to weave "
                "into the target (Timed, Logged, Counted, Retry, Recorder, or a "
                "'package.module:Name' of an Aspect subclass of your own)",
            )


#: Why a hook or callback object cannot be woven, and where it goes instead.
_RUNNER_HINT = (
    ": a hook or callback object runs at a training runner's join points (give it to "
    "Runner.from_config or a runner's aspects=)"
)


def _is_hook(value: Any) -> bool:
    """An OpenMMLab-style hook or a Keras-style callback (what the adapters take)."""
    from .adapters import KERAS_METHODS, MM_METHODS

    return any(callable(getattr(value, m, None)) for m in (*MM_METHODS, *KERAS_METHODS))


def _what(value: Any) -> str:
    """``a pkg.mod.Class`` for an object, its repr for None and the like."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    from ._targets import _a

    kind = type(value)
    return _a(f"{kind.__module__}.{kind.__qualname__}")


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


def _reason(record: Any) -> str:
    """A weave record's reason without the target it may start with (the lines that
    show it name the target already)."""
    reason: str = record.reason
    return reason.removeprefix(f"{record.target}: ")
