"""Per-call cost of aspecthook join points beside hand-written wrappers and peer libraries.

Every variant calls the same trivial target, ``f(a, b=1) -> a + b``, as ``fn(1)``.
All variants are measured in one process and interleaved: each round runs every variant
once (``timeit.Timer(...).timeit(n)``: ``time.perf_counter``, garbage collector off), the
order of the variants is shuffled per round (seeded), and the reported figure is the
minimum per-call time over ``--rounds`` rounds (the median is shown beside it as a noise
indicator). A variant's ``n`` is sized once, after a warm-up, so that its sample takes
about ``--sample-ms`` (``--number`` fixes one ``n`` for all instead): equal, short samples
keep the minimum honest on a busy machine, where long samples of the expensive variants
would rarely run uninterrupted. "overhead" is a variant's time minus the raw call's, which
also removes timeit's own loop cost.

The callbacks are no-ops; every context-building variant (closure, naive wrapt,
aspecthook) calls the very same two functions, so the table compares the machinery
around them. Peers are used the way their documentation shows:

* aspectlib: an ``aspectlib.Aspect`` generator (before step, ``yield``, after step)
  applied with ``aspectlib.weave`` to a module-level function;
* pluggy: a hookspec with one hookimpl; the instrumented function makes one
  ``pm.hook.on_call(...)`` call and then calls the target;
* blinker: a ``Signal`` with one receiver; one ``send`` and then the target.

The "50 unrelated" variant times the before+after join point again, with 50 more join
points, each with its own before advice, registered for that variant only (they are
added before and removed after it, every round).

The aspects of ``aspecthook.aspects``, in the same rounds, each woven with
``aspecthook.weave`` into its own module-level copy of ``f``:

* ``Timed()`` (sketch only, no trace; its samples are a whole number of the 1,024-call
  batches it folds into its sketch at a time, so every sample pays its share of folding),
  next to a hand-written closure that takes
  ``time.perf_counter_ns()`` twice and appends the duration to a list (cleared after every
  round), and to one pass-through around advice (``errors='raise'``: no guard), the
  machinery ``Timed`` runs in;
* ``Logged()`` (level ``info``, errors at ``error``) with structlog set up by
  ``aspecthook.aspects.configure_logging('json', level=..., file=<null sink>)`` before each
  of its samples and removed after it (one untimed call refreshes Logged's level cache):
  filtered at ``warning`` ("level disabled": the call is not logged, a failure would be),
  at ``critical`` (both levels off) and at ``info`` (every call rendered as a JSON line into
  a stream that drops it: structlog's and our cost, no I/O);
* aspectlib's ``aspectlib.debug.log`` printing to the same kind of null sink, without the
  ``logging`` module, with its default ``stacktrace=10`` and with ``stacktrace=None``.

The idle audit dispatcher is measured in worker interpreters, because audit hooks cannot
be removed: one set-up per worker (all of them import aspecthook), with no audit hook, with
a do-nothing Python hook, with aspecthook's dispatcher installed by
``on('audit.some.other.event')``, and with that subscription removed again. The workers
stay alive and are sampled in interleaved, shuffled rounds like the variants above (only
the one asked runs), timing ``sys.audit('some.unsubscribed.event')``. The dispatcher's
cost over the do-nothing hook is our code's; the do-nothing hook's cost over no hook is
what CPython charges for having any Python audit hook.

It also times ``import aspecthook`` against ``import wrapt`` in fresh interpreters and
checks that torch is not imported. Targets are printed as PASS/MISS and never asserted.

    python bench/calls.py                      # full run, about 1.5 minutes on 2 cores
    python bench/calls.py --quick --json o.json
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any, TextIO, cast

import aspectlib  # type: ignore[import-untyped]
import aspectlib.debug  # type: ignore[import-untyped]
import blinker
import pluggy
import wrapt

import aspecthook as ah
from aspecthook.aspects import Logged, Timed, configure_logging
from aspecthook.aspects._timed import _BATCH

# -- the target and the callbacks every context-building variant shares -------------------


def f(a: int, b: int = 1) -> int:
    return a + b


def before_cb(ctx: Any) -> None:
    pass


def after_cb(ctx: Any) -> None:
    pass


class Ctx:
    """The small per-call context of the hand-written variants."""

    __slots__ = ("args", "kwargs", "result", "target")

    def __init__(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.target = target
        self.args = args
        self.kwargs = kwargs
        self.result: Any = None


# -- 2. hand-written closure decorator -----------------------------------------------------


def closure_decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = Ctx(fn, args, kwargs)
        before_cb(ctx)
        ctx.result = fn(*args, **kwargs)
        after_cb(ctx)
        return ctx.result

    return wrapper


# -- 3. and 4. wrapt ---------------------------------------------------------------------


def passthrough(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return wrapped(*args, **kwargs)


def naive_joinpoint(
    wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    ctx = Ctx(wrapped, args, kwargs)
    before_cb(ctx)
    ctx.result = wrapped(*args, **kwargs)
    after_cb(ctx)
    return ctx.result


# -- 5. aspectlib --------------------------------------------------------------------------


def on_before(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    pass


def on_after(result: Any) -> None:
    pass


@aspectlib.Aspect  # type: ignore[untyped-decorator]
def aspectlib_aspect(*args: Any, **kwargs: Any) -> Any:
    on_before(args, kwargs)
    result = yield aspectlib.Proceed
    on_after(result)


def f_aspectlib(a: int, b: int = 1) -> int:
    return a + b


# -- 6. pluggy -----------------------------------------------------------------------------

hookspec = pluggy.HookspecMarker("aspecthook_bench")
hookimpl = pluggy.HookimplMarker("aspecthook_bench")


class Spec:
    @hookspec
    def on_call(self, target: Any, args: Any, kwargs: Any) -> None:
        """Called before the target."""


class Plugin:
    @hookimpl
    def on_call(self, target: Any, args: Any, kwargs: Any) -> None:
        pass


def make_pluggy() -> Callable[..., Any]:
    pm = pluggy.PluginManager("aspecthook_bench")
    pm.add_hookspecs(Spec)
    pm.register(Plugin())

    def instrumented(*args: Any, **kwargs: Any) -> Any:
        pm.hook.on_call(target=f, args=args, kwargs=kwargs)
        return f(*args, **kwargs)

    return instrumented


# -- 7. blinker ------------------------------------------------------------------------------


def receiver(sender: Any, **kwargs: Any) -> None:
    pass


def make_blinker() -> Callable[..., Any]:
    signal = blinker.Signal("call")
    signal.connect(receiver, weak=False)

    def instrumented(*args: Any, **kwargs: Any) -> Any:
        signal.send(f, args=args, kwargs=kwargs)
        return f(*args, **kwargs)

    return instrumented


# -- 11. methods ----------------------------------------------------------------------------


class Plain:
    def m(self, a: int, b: int = 1) -> int:
        return a + b


# -- 12. Timed, Logged and what they are compared with ----------------------------------------


class NullSink(io.TextIOBase):
    """A text stream that drops what it gets (no syscall, no growth) and counts the writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.writes += 1
        return len(text)


# Module-level targets: aspecthook.weave and aspectlib.weave replace the module attribute,
# and the variants read the woven callable back from globals().


def f_timed(a: int, b: int = 1) -> int:
    return a + b


def f_around(a: int, b: int = 1) -> int:
    return a + b


def f_logged_disabled(a: int, b: int = 1) -> int:
    return a + b


def f_logged_off(a: int, b: int = 1) -> int:
    return a + b


def f_logged_enabled(a: int, b: int = 1) -> int:
    return a + b


def passthrough_around(ctx: Any, proceed: Any) -> Any:
    return proceed()


def perf_counter_decorator(fn: Callable[..., Any]) -> tuple[Callable[..., Any], list[int]]:
    """The hand-written timer: ``perf_counter_ns`` around the call, durations into a list."""
    durations: list[int] = []
    clock = time.perf_counter_ns
    record = durations.append

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = clock()
        result = fn(*args, **kwargs)
        record(clock() - start)
        return result

    return wrapper, durations


def logging_config(
    level: str, sink: NullSink, target: Callable[..., Any]
) -> tuple[Callable[[], None], Callable[[], None]]:
    """Per-round set-up of a Logged variant: structlog configured by ``configure_logging``
    (JSON lines, filtering logger at ``level``) writing to ``sink``, one untimed call so
    that Logged's level cache is refreshed outside the timing; removed after the round."""
    handles: list[ah.Handle] = []

    def enter() -> None:
        handles.append(configure_logging("json", level=level, file=cast(TextIO, sink)))
        target(1)

    def leave() -> None:
        while handles:
            handles.pop().remove()

    return enter, leave


def woven(
    name: str, weaver: ah.Weaver, cleanups: list[Callable[[], object]], *aspects: Any, **kw: Any
) -> Any:
    """Weave the module-level function ``name`` and return the proxy that replaced it."""
    original = globals()[name]
    handle = ah.weave(original, *aspects, weaver=weaver, strict=True, **kw)
    cleanups.append(handle.remove)
    proxy = globals()[name]
    require(proxy is not original, f"aspecthook.weave did not replace {name}")
    return proxy


# -- the variants --------------------------------------------------------------------------


@dataclass
class Variant:
    key: str
    label: str
    stmt: str
    env: dict[str, Any]
    enter: Callable[[], None] | None = None  # run before this variant's timing, per round
    leave: Callable[[], None] | None = None  # and after it
    check: Callable[[], None] | None = None  # a set-up check, after the first call
    number: int = 0  # calls per round
    multiple: int = 1  # calls per round are rounded up to a multiple of this
    times: list[float] = field(default_factory=list)  # seconds per call, one per round

    def timer(self) -> timeit.Timer:
        return timeit.Timer(self.stmt, timer=time.perf_counter, globals=self.env)


def fresh_target(name: str) -> Callable[..., Any]:
    """A new copy of ``f`` (its own code object name), to be made a join point."""

    def target(a: int, b: int = 1) -> int:
        return a + b

    target.__name__ = target.__qualname__ = name
    return target


def chain_sizes(proxy: Any) -> tuple[int, int]:
    chain = proxy._self_joinpoint.chain
    return len(chain.before), len(chain.after)


def require(condition: bool, message: str) -> None:
    """A set-up check (not a timing check): the benchmark would measure the wrong thing."""
    if not condition:
        raise SystemExit(f"bench set-up is wrong: {message}")


def build_variants(weaver: ah.Weaver, cleanups: list[Callable[[], object]]) -> list[Variant]:
    fn = "fn(1)"
    jp = weaver.joinpoint

    idle = jp("bench.idle")(fresh_target("idle"))
    ba = jp("bench.ba")(fresh_target("ba"))
    weaver.before("bench.ba")(before_cb)
    weaver.after("bench.ba")(after_cb)

    class Woven:
        @jp("bench.method")
        def m(self, a: int, b: int = 1) -> int:
            return a + b

    weaver.before("bench.method")(before_cb)
    weaver.after("bench.method")(after_cb)

    class WovenIdle:
        @jp("bench.method_idle")
        def m(self, a: int, b: int = 1) -> int:
            return a + b

    many = {}
    for n in (1, 10, 50):
        many[n] = jp(f"bench.before{n}")(fresh_target(f"before{n}"))
        for _ in range(n):
            weaver.before(f"bench.before{n}")(before_cb)

    # 50 unrelated join points, each with one before advice, present only while the
    # "ba + 50 unrelated" variant runs.
    others = [jp(f"bench.other{i}")(fresh_target(f"other{i}")) for i in range(50)]
    unrelated: list[ah.Handle] = []

    def add_unrelated() -> None:
        advices = [ah.Advice("before", before_cb, ah.Name(f"bench.other{i}")) for i in range(50)]
        unrelated.append(weaver.add(*advices))

    def remove_unrelated() -> None:
        while unrelated:
            unrelated.pop().remove()

    require(chain_sizes(idle) == (0, 0), "bench.idle has advice")
    require(chain_sizes(ba) == (1, 1), "bench.ba should have 1 before + 1 after")
    require(chain_sizes(Woven.__dict__["m"]) == (1, 1), "bench.method: 1 before + 1 after")
    require(chain_sizes(WovenIdle.__dict__["m"]) == (0, 0), "bench.method_idle has advice")
    for n, proxy in many.items():
        require(chain_sizes(proxy) == (n, 0), f"bench.before{n} should have {n} before")
    add_unrelated()
    require(all(chain_sizes(o) == (1, 0) for o in others), "unrelated advice missing")
    require(chain_sizes(ba) == (1, 1), "unrelated advice reached bench.ba")
    remove_unrelated()
    require(all(chain_sizes(o) == (0, 0) for o in others), "unrelated advice not removed")

    # aspectlib.weave patches the module attribute; the woven function is read back from it.
    original = globals()["f_aspectlib"]
    cleanups.append(aspectlib.weave(original, aspectlib_aspect))
    woven_aspectlib = globals()["f_aspectlib"]
    require(woven_aspectlib is not original, "aspectlib.weave did not patch f_aspectlib")

    # Timed, Logged, and the hand-written and aspectlib equivalents.
    timed_aspect = Timed()
    timed_fn = woven("f_timed", weaver, cleanups, timed_aspect)
    around_fn = woven("f_around", weaver, cleanups, around=passthrough_around, errors="raise")
    perf_fn, durations = perf_counter_decorator(f)
    logged: dict[str, tuple[Any, NullSink, str]] = {}
    for key, level in (("disabled", "warning"), ("off", "critical"), ("enabled", "info")):
        logged[key] = (woven(f"f_logged_{key}", weaver, cleanups, Logged()), NullSink(), level)
    debug_sink, debug_sink_nostack = NullSink(), NullSink()
    debug_log = aspectlib.debug.log(print_to=debug_sink, use_logging=None)(f)
    debug_log_nostack = aspectlib.debug.log(
        print_to=debug_sink_nostack, use_logging=None, stacktrace=None
    )(f)

    def logged_variant(key: str, label: str, writes: bool) -> Variant:
        fn_, sink, level = logged[key]
        enter, leave = logging_config(level, sink, fn_)

        def check() -> None:
            require((sink.writes > 0) == writes, f"Logged {key}: {sink.writes} writes")

        return Variant(f"logged_{key}", label, fn, {"fn": fn_}, enter, leave, check)

    def check_timed() -> None:
        calls = sum(row.count for row in timed_aspect.summary())
        require(calls > 0, "Timed recorded no call")

    def check_debug_log() -> None:
        require(debug_sink.writes > 0, "debug.log wrote nothing")

    def check_debug_log_nostack() -> None:
        require(debug_sink_nostack.writes > 0, "debug.log(stacktrace=None) wrote nothing")

    return [
        Variant("raw", "raw call", fn, {"fn": f}),
        Variant(
            "closure", "closure decorator + ctx + before/after", fn, {"fn": closure_decorator(f)}
        ),
        Variant(
            "wrapt_passthrough",
            "wrapt.FunctionWrapper pass-through",
            fn,
            {"fn": wrapt.FunctionWrapper(f, passthrough)},
        ),
        Variant(
            "wrapt_naive",
            "naive wrapt join point + ctx + before/after",
            fn,
            {"fn": wrapt.FunctionWrapper(f, naive_joinpoint)},
        ),
        Variant(
            "aspectlib", "aspectlib Aspect (before, yield, after)", fn, {"fn": woven_aspectlib}
        ),
        Variant("pluggy", "pluggy: 1 hook call (1 impl) + call", fn, {"fn": make_pluggy()}),
        Variant("blinker", "blinker: 1 send (1 receiver) + call", fn, {"fn": make_blinker()}),
        Variant("ah_idle", "aspecthook idle join point", fn, {"fn": idle}),
        Variant("ah_before_after", "aspecthook before + after", fn, {"fn": ba}),
        Variant(
            "ah_before_after_50_unrelated",
            "aspecthook before + after, 50 unrelated advices",
            fn,
            {"fn": ba},
            add_unrelated,
            remove_unrelated,
        ),
        Variant("raw_method", "raw method call", "obj.m(1)", {"obj": Plain()}),
        Variant(
            "ah_method_idle", "aspecthook idle method join point", "obj.m(1)", {"obj": WovenIdle()}
        ),
        Variant("ah_method", "aspecthook method before + after", "obj.m(1)", {"obj": Woven()}),
        Variant("ah_before_1", "aspecthook 1 before", fn, {"fn": many[1]}),
        Variant("ah_before_10", "aspecthook 10 before", fn, {"fn": many[10]}),
        Variant("ah_before_50", "aspecthook 50 before", fn, {"fn": many[50]}),
        Variant(
            "ah_around",
            "aspecthook 1 around, pass-through (errors='raise')",
            fn,
            {"fn": around_fn},
        ),
        Variant(
            "perf_counter",
            "closure: perf_counter_ns x2 + list.append",
            fn,
            {"fn": perf_fn},
            leave=durations.clear,
        ),
        # Timed folds its pending durations into the sketch every _BATCH calls: a sample of
        # a whole number of batches holds exactly its share of folds, whatever its phase.
        Variant("timed", "Timed()", fn, {"fn": timed_fn}, check=check_timed, multiple=_BATCH),
        logged_variant("disabled", "Logged(), level disabled (errors still on)", False),
        logged_variant("off", "Logged(), info and error disabled", False),
        logged_variant("enabled", "Logged() enabled, JSON to a null sink", True),
        Variant(
            "aspectlib_log",
            "aspectlib.debug.log to a null sink (stacktrace=10)",
            fn,
            {"fn": debug_log},
            check=check_debug_log,
        ),
        Variant(
            "aspectlib_log_nostack",
            "aspectlib.debug.log to a null sink, stacktrace=None",
            fn,
            {"fn": debug_log_nostack},
            check=check_debug_log_nostack,
        ),
    ]


# -- measuring -------------------------------------------------------------------------------


def check_results(variants: list[Variant]) -> None:
    for v in variants:
        if v.enter:
            v.enter()
        try:
            result = eval(v.stmt, dict(v.env))
        finally:
            if v.leave:
                v.leave()
        if result != 2:
            raise SystemExit(f"variant {v.key} returned {result!r}, expected 2")
        if v.check:
            v.check()


def timed(v: Variant, timer: timeit.Timer, number: int) -> float:
    """Seconds per call of ``number`` calls, with the variant's per-round set-up around it."""
    if v.enter:
        v.enter()
    try:
        return timer.timeit(number) / number
    finally:
        if v.leave:
            v.leave()


def measure(
    variants: list[Variant], rounds: int, number: int | None, sample_s: float, seed: int
) -> None:
    """Interleaved rounds; ``number=None`` sizes each variant's calls to ~``sample_s`` a round.

    Short samples of equal length are what makes the minimum trustworthy on a busy machine:
    a long sample is rarely left uninterrupted, so a fixed call count would inflate the
    expensive variants (peers, 50 before advices) more than the cheap ones.
    """
    timers = {v.key: v.timer() for v in variants}
    for v in variants:  # warm-up, not recorded; it also sizes the samples
        per_call = min(timed(v, timers[v.key], 200) for _ in range(3))
        if number is not None:
            v.number = number
        else:
            v.number = max(100, min(1_000_000, round(sample_s / max(per_call, 1e-9))))
        v.number = -(-v.number // v.multiple) * v.multiple
    order = list(variants)
    rng = random.Random(seed)
    for _ in range(rounds):
        rng.shuffle(order)
        for v in order:
            v.times.append(timed(v, timers[v.key], v.number))


IMPORT_SNIPPET = (
    "import sys, time; n = len(sys.modules); c = time.process_time(); t = time.perf_counter(); "
    "import {mod}; t = time.perf_counter() - t; c = time.process_time() - c; "
    "print(t, c, len(sys.modules) - n, 'torch' in sys.modules)"
)


def measure_imports(repeats: int) -> dict[str, Any]:
    """``import aspecthook`` and ``import wrapt`` in fresh interpreters, interleaved.

    Both run with bytecode caching on, into a private ``PYTHONPYCACHEPREFIX`` that a first
    untimed import of each fills: otherwise ``PYTHONDONTWRITEBYTECODE`` (set on some of our
    machines) makes every run recompile whichever package has no ``__pycache__`` yet, which
    measures the compiler rather than the import. Wall time (``perf_counter``) is the
    figure; CPU time (``process_time``) is recorded beside it because it does not grow
    when a busy machine takes the CPU away mid-import.
    """
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    wall: dict[str, list[float]] = {"aspecthook": [], "wrapt": []}
    cpu: dict[str, list[float]] = {"aspecthook": [], "wrapt": []}
    modules: dict[str, int] = {}
    torch_seen = False
    with tempfile.TemporaryDirectory(prefix="aspecthook-bench-pycache-") as cache:
        env["PYTHONPYCACHEPREFIX"] = cache

        def once(mod: str) -> list[str]:
            return subprocess.run(
                [sys.executable, "-c", IMPORT_SNIPPET.format(mod=mod)],
                check=True,
                capture_output=True,
                text=True,
                env=env,
            ).stdout.split()

        for mod in wall:  # untimed: fills the bytecode cache
            once(mod)
        for _ in range(repeats):
            for mod in wall:
                out = once(mod)
                wall[mod].append(float(out[0]))
                cpu[mod].append(float(out[1]))
                modules[mod] = int(out[2])
                torch_seen |= mod == "aspecthook" and out[3] == "True"
    result: dict[str, Any] = {}
    for mod, values in wall.items():
        result[mod] = {
            "min_ms": min(values) * 1e3,
            "median_ms": statistics.median(values) * 1e3,
            "cpu_min_ms": min(cpu[mod]) * 1e3,
            "modules": modules[mod],
        }
    result["ratio_min"] = result["aspecthook"]["min_ms"] / result["wrapt"]["min_ms"]
    result["ratio_median"] = result["aspecthook"]["median_ms"] / result["wrapt"]["median_ms"]
    result["ratio_cpu_min"] = result["aspecthook"]["cpu_min_ms"] / result["wrapt"]["cpu_min_ms"]
    result["torch_imported"] = torch_seen
    result["repeats"] = repeats
    return result


# The audit-hook workers: one interpreter per hook set-up (audit hooks cannot be removed).
# Every worker imports aspecthook, so they differ only in their hooks; it sets its hook up,
# checks that it is what it claims to be, then waits: for each line ``n`` it reads from
# stdin it times ``n`` calls of ``sys.audit`` of an event nobody subscribed to and writes
# the seconds per call. Only the worker being asked runs; the others block on stdin.
AUDIT_EVENT = "some.unsubscribed.event"
AUDIT_WORKER = """
import sys, timeit
import aspecthook, aspecthook._process as p
mode, EVENT = sys.argv[1], sys.argv[2]
seen = []
if mode == 'python_hook':
    sys.addaudithook(lambda event, args: None)
elif mode in ('dispatcher', 'dispatcher_no_subscription'):
    advice = aspecthook.on('audit.some.other.event')(lambda event: seen.append(event.name))
    sys.audit('some.other.event', 1)
    sys.audit(EVENT, 1)
    assert [str(n) for n in seen] == ['audit.some.other.event'], seen
    if mode == 'dispatcher_no_subscription':
        advice.remove()
        sys.audit('some.other.event', 2)  # an event past the check refreshes the names
        assert len(seen) == 1 and not p._audit_names, (seen, p._audit_names)
    else:
        assert p._audit_names == frozenset(['some.other.event']), p._audit_names
    assert not p._audit_any
assert p.audit_hooks_added == (0 if mode in ('no_hook', 'python_hook') else 1), mode
timer = timeit.Timer('audit(EVENT)', globals={'audit': sys.audit, 'EVENT': EVENT})
print('ready', flush=True)
for line in sys.stdin:
    n = int(line)
    print(repr(timer.timeit(n) / n), flush=True)
"""

AUDIT_MODES = {
    "no_hook": "no audit hook",
    "python_hook": "do-nothing Python hook (lambda event, args: None)",
    "dispatcher": "aspecthook dispatcher, subscribed to audit.some.other.event",
    "dispatcher_no_subscription": "aspecthook dispatcher, that subscription removed",
}


class AuditWorker:
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.number = 0
        self.proc = subprocess.Popen(
            [sys.executable, "-c", AUDIT_WORKER, mode, AUDIT_EVENT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def ask(self, number: int) -> float:
        """Seconds per call of one sample of ``number`` calls (only this worker runs)."""
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(f"{number}\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            raise SystemExit(f"audit worker {self.mode} died (exit {self.proc.wait()})")
        return float(answer)

    def wait_ready(self) -> None:
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise SystemExit(f"audit worker {self.mode} failed its set-up check")

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def measure_audit(processes: int, rounds: int, sample_s: float, seed: int) -> dict[str, Any]:
    """ns per ``sys.audit('some.unsubscribed.event')`` under each hook set-up.

    The same method as the call variants, across processes: ``processes`` live workers per
    set-up, each sample sized once to about ``sample_s``, interleaved rounds in a shuffled
    order (one sample of every worker per round), minimum over all samples of a set-up
    (median beside it as noise). Interleaving matters here: a process measured alone
    for half a second can land in a busy spell of the machine, and its minimum with it.
    """
    workers = [AuditWorker(mode) for _ in range(processes) for mode in AUDIT_MODES]
    samples: dict[str, list[float]] = {mode: [] for mode in AUDIT_MODES}
    try:
        for worker in workers:
            worker.wait_ready()
        for worker in workers:  # warm-up, not recorded; it also sizes the samples
            per_call = min(worker.ask(200) for _ in range(3))
            worker.number = max(100, min(100_000, round(sample_s / max(per_call, 1e-9))))
        order = list(workers)
        rng = random.Random(seed)
        for _ in range(rounds):
            rng.shuffle(order)
            for worker in order:
                samples[worker.mode].append(worker.ask(worker.number))
    finally:
        for worker in workers:
            worker.close()
    modes: dict[str, dict[str, Any]] = {
        mode: {
            "label": AUDIT_MODES[mode],
            "ns_per_call": min(values) * 1e9,
            "median_ns": statistics.median(values) * 1e9,
            "calls_per_sample": next(w.number for w in workers if w.mode == mode),
        }
        for mode, values in samples.items()
    }
    ns = {mode: float(row["ns_per_call"]) for mode, row in modes.items()}
    return {
        "event": AUDIT_EVENT,
        "processes": processes,
        "rounds": rounds,
        "sample_ms": sample_s * 1e3,
        "modes": modes,
        # The fair measure of our code: the dispatcher against any Python hook doing nothing.
        "dispatcher_over_python_hook_ns": ns["dispatcher"] - ns["python_hook"],
        "dispatcher_no_subscription_over_python_hook_ns": (
            ns["dispatcher_no_subscription"] - ns["python_hook"]
        ),
        # What CPython charges for having any Python audit hook at all.
        "python_hook_over_no_hook_ns": ns["python_hook"] - ns["no_hook"],
        "dispatcher_over_no_hook_ns": ns["dispatcher"] - ns["no_hook"],
    }


# -- reporting -------------------------------------------------------------------------------

METHOD_KEYS = frozenset(("raw_method", "ah_method_idle", "ah_method"))


def summarize(variants: list[Variant]) -> dict[str, dict[str, Any]]:
    best = {v.key: min(v.times) * 1e9 for v in variants}
    raw, raw_method = best["raw"], best["raw_method"]
    ah_overhead = best["ah_before_after"] - raw
    rows: dict[str, dict[str, Any]] = {}
    for v in variants:
        method = v.key in METHOD_KEYS
        overhead = best[v.key] - (raw_method if method else raw)
        baseline = v.key in ("raw", "raw_method")
        rows[v.key] = {
            "label": v.label,
            "ns_per_call": best[v.key],
            "median_ns": statistics.median(v.times) * 1e9,
            "calls_per_round": v.number,
            "overhead_ns": overhead,
            "ratio_vs_ah_before_after": (
                overhead / ah_overhead if ah_overhead > 0 and not baseline else None
            ),
        }
    return rows


def targets(
    rows: dict[str, dict[str, Any]],
    imports: dict[str, Any] | None,
    audit: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    def over(key: str) -> float:
        return float(rows[key]["overhead_ns"])

    ba = over("ah_before_after")
    slope = (over("ah_before_50") - over("ah_before_1")) / 49
    checks: list[tuple[str, float, str, float]] = [
        ("before+after overhead (ns)", ba, "<=", 600),
        ("naive wrapt join point overhead / aspecthook's", over("wrapt_naive") / ba, ">=", 2),
        ("aspectlib overhead / aspecthook's", over("aspectlib") / ba, ">=", 1.8),
        ("pluggy overhead / aspecthook's", over("pluggy") / ba, ">=", 3),
        ("idle join point overhead (ns)", over("ah_idle"), "<=", 150),
        ("per extra before advice (ns, 1 -> 50)", slope, "<=", 60),
        (
            "50 unrelated advices: overhead / without",
            over("ah_before_after_50_unrelated") / ba,
            "<=",
            1.1,
        ),
        ("Timed overhead (ns)", over("timed"), "<=", 1000),
        ("Logged, level disabled, overhead (ns)", over("logged_disabled"), "<=", 600),
    ]
    if audit is not None:
        checks.append(
            (
                "idle audit dispatcher, ns per sys.audit over a do-nothing Python hook",
                audit["dispatcher_over_python_hook_ns"],
                "<=",
                100,
            )
        )
    if imports is not None:
        checks.append(
            ("import aspecthook / import wrapt (wall, min)", imports["ratio_min"], "<=", 1.5)
        )
        checks.append(
            ("import aspecthook / import wrapt (CPU, min)", imports["ratio_cpu_min"], "<=", 1.5)
        )
    out = []
    for name, value, op, limit in checks:
        ok = value <= limit if op == "<=" else value >= limit
        out.append({"target": name, "value": value, "op": op, "limit": limit, "pass": ok})
    if imports is not None:
        ok = not imports["torch_imported"]
        out.append(
            {
                "target": "import aspecthook leaves torch unimported",
                "value": float(ok),
                "op": "==",
                "limit": 1.0,
                "pass": ok,
            }
        )
    return out


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def print_report(
    rows: dict[str, dict[str, Any]],
    extra: dict[str, float],
    imports: dict[str, Any] | None,
    checks: list[dict[str, Any]],
    meta: dict[str, Any],
    audit: dict[str, Any] | None = None,
) -> None:
    print(f"{meta['cpu_model']}, {meta['cpus']} CPUs")
    print(
        f"python {meta['python']} | wrapt {meta['wrapt']} ({meta['wrapt_impl']}) | "
        f"structlog {meta['structlog']} | aspectlib {meta['aspectlib']} | "
        f"{meta['rounds']} interleaved rounds, "
        + (
            f"{meta['number']} calls per variant each"
            if meta["number"]
            else f"~{meta['sample_ms']:g} ms of calls per variant each"
        )
        + "; min over rounds"
    )
    print()
    width = max(len(r["label"]) for r in rows.values())
    print(
        f"{'variant':<{width}}  {'ns/call':>9}  {'overhead':>9}  {'vs ah b+a':>9}  "
        f"{'median':>9}  {'calls':>7}"
    )
    print("-" * (width + 57))
    for row in rows.values():
        print(
            f"{row['label']:<{width}}  {row['ns_per_call']:9.1f}  {row['overhead_ns']:9.1f}  "
            f"{fmt_ratio(row['ratio_vs_ah_before_after']):>9}  {row['median_ns']:9.1f}  "
            f"{row['calls_per_round']:7d}"
        )
    print(
        "ns/call: min over rounds; overhead: above the raw call (method rows: above the raw "
        "method call);\nvs ah b+a: overhead / aspecthook before+after overhead; median: "
        "median over rounds (noise); calls: per round"
    )
    print()
    print(
        f"per extra before advice: {extra['slope_1_to_50_ns']:.1f} ns (1 -> 50), "
        f"{extra['slope_1_to_10_ns']:.1f} ns (1 -> 10)"
    )
    if imports is not None:
        a, w = imports["aspecthook"], imports["wrapt"]
        print(
            f"import time ({imports['repeats']} fresh interpreters each): "
            f"aspecthook {a['min_ms']:.1f} ms (median {a['median_ms']:.1f}, {a['modules']} modules), "
            f"wrapt {w['min_ms']:.1f} ms (median {w['median_ms']:.1f}, {w['modules']} modules), "
            f"ratio {imports['ratio_min']:.2f}x (median {imports['ratio_median']:.2f}x)"
        )
        print(
            f"import CPU time: aspecthook {a['cpu_min_ms']:.1f} ms, wrapt {w['cpu_min_ms']:.1f} ms, "
            f"ratio {imports['ratio_cpu_min']:.2f}x; torch imported: {imports['torch_imported']}"
        )
    if audit is not None:
        print_audit(audit)
    print()
    print("targets")
    for check in checks:
        mark = "PASS" if check["pass"] else "MISS"
        print(
            f"  {mark}  {check['target']}: {check['value']:.2f} (target {check['op']} {check['limit']})"
        )


def print_audit(audit: dict[str, Any]) -> None:
    print()
    print(
        f"sys.audit({audit['event']!r}), nobody subscribed to it: {audit['processes']} "
        f"interpreter(s) per hook set-up, {audit['rounds']} interleaved rounds of "
        f"~{audit['sample_ms']:g} ms samples; min over samples"
    )
    modes = audit["modes"]
    width = max(len(m["label"]) for m in modes.values())
    print(f"  {'hook set-up':<{width}}  {'ns/call':>8}  {'median':>8}  {'calls':>7}")
    for row in modes.values():
        print(
            f"  {row['label']:<{width}}  {row['ns_per_call']:8.1f}  {row['median_ns']:8.1f}  "
            f"{row['calls_per_sample']:7d}"
        )
    print(
        f"  dispatcher over a do-nothing Python hook (our code): "
        f"{audit['dispatcher_over_python_hook_ns']:+.1f} ns "
        f"(subscription removed: {audit['dispatcher_no_subscription_over_python_hook_ns']:+.1f} ns)"
    )
    print(
        f"  do-nothing Python hook over no hook (CPython's price for any hook): "
        f"{audit['python_hook_over_no_hook_ns']:+.1f} ns; "
        f"dispatcher over no hook: {audit['dispatcher_over_no_hook_ns']:+.1f} ns"
    )


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1000, help="rounds (default 1000)")
    parser.add_argument(
        "--number",
        type=int,
        default=None,
        help="calls per variant per round, the same for all (default: sized per variant so "
        "that one round of it takes about --sample-ms)",
    )
    parser.add_argument(
        "--sample-ms",
        type=float,
        default=1.0,
        help="target length of one variant's sample when --number is not given (default 1)",
    )
    parser.add_argument(
        "--imports",
        type=int,
        default=10,
        help="fresh interpreters per import measurement (default 10; 0 skips)",
    )
    parser.add_argument(
        "--audit",
        type=int,
        default=2,
        help="interpreters per audit-hook set-up, all sampled in the same interleaved rounds "
        "(default 2; 0 skips)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny numbers, for a smoke run")
    parser.add_argument("--seed", type=int, default=0, help="seed of the per-round variant order")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.number, args.imports, args.audit = 3, 200, 1, 1

    weaver = ah.Weaver("bench")
    cleanups: list[Callable[[], object]] = [weaver.close]
    try:
        variants = build_variants(weaver, cleanups)
        check_results(variants)
        measure(variants, args.rounds, args.number, args.sample_ms / 1e3, args.seed)
    finally:
        for cleanup in reversed(cleanups):
            cleanup()
    imports = measure_imports(args.imports) if args.imports > 0 else None
    audit = None
    if args.audit > 0:
        audit_rounds = 3 if args.quick else args.rounds
        audit = measure_audit(args.audit, audit_rounds, args.sample_ms / 1e3, args.seed)

    rows = summarize(variants)
    over = {k: float(r["overhead_ns"]) for k, r in rows.items()}
    extra = {
        "slope_1_to_50_ns": (over["ah_before_50"] - over["ah_before_1"]) / 49,
        "slope_1_to_10_ns": (over["ah_before_10"] - over["ah_before_1"]) / 9,
    }
    checks = targets(rows, imports, audit)
    meta = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpu_model": cpu_model(),
        "cpus": os.cpu_count(),
        "wrapt": version("wrapt"),
        "structlog": version("structlog"),
        "aspectlib": version("aspectlib"),
        "wrapt_impl": "C extension"
        if wrapt.FunctionWrapper.__module__ == "_wrappers"
        else "pure Python",
        "rounds": args.rounds,
        "number": args.number,
        "sample_ms": args.sample_ms,
        "seed": args.seed,
    }
    print_report(rows, extra, imports, checks, meta, audit)
    if args.json is not None:
        data = {
            "meta": meta,
            "variants": rows,
            "derived": extra,
            "imports": imports,
            "audit": audit,
            "targets": checks,
        }
        args.json.write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
