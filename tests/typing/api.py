"""Calls the public API the way users do; checked by ``mypy --strict`` (``make typecheck``).

Not collected by pytest (no ``test_`` prefix): its job is to fail type checking when the
public signatures regress. ``assert_type`` pins a type exactly. A line that ends in
``# type: ignore[code]`` is one a type checker must refuse: ``--strict`` includes
``warn_unused_ignores``, so if it stops being an error, its ignore is reported as unused.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Unpack, assert_type

import aspecthook as ah
from aspecthook.adapters import KerasCallback, MMHook, from_keras_callback, from_mmengine_hook
from aspecthook.aspects import Counted, Logged, Retry, Summary, Timed, TimingRow
from aspecthook.testing import Call, Recorder
from aspecthook.train import Runner
from aspecthook.train.aspects import (
    ALIASES,
    EMA,
    Checkpoint,
    CheckpointHook,
    GradClip,
    IterTimer,
    LRSchedule,
)


@ah.joinpoint
def plain(x: int) -> int:
    return x + 1


@ah.joinpoint("typing.named")
def named(x: int, *, y: str = "") -> str:
    return f"{x}{y}"


class Model:
    @ah.joinpoint
    def forward(self, x: int) -> int:
        return x * 2


class Timing(ah.Aspect):
    priority = ah.Priority.HIGH

    @ah.around()
    def time_it(self, ctx: ah.CallContext, proceed: ah.Proceed) -> object:
        return proceed()

    def after_train_iter(self, ctx: ah.CallContext) -> None:
        ctx.data["seen"] = True


def use() -> None:
    result: int = plain(1)
    text: str = named(1, y="a")
    doubled: int = Model().forward(3)
    handle: ah.Handle = ah.register(Timing(pointcut="typing.*"))
    with ah.woven("json.dumps", Timing()):
        pass
    advice = ah.before("typing.named", priority="HIGH", every=2)(lambda ctx: None)
    advice.remove()
    event: ah.Event = ah.emit("typing.event", value=1)
    rows: ah.Description = ah.describe("typing.*")
    first: ah.Row | None = rows[0] if rows else None
    handle.remove()
    del result, text, doubled, event, first


# -- predicates take the join point (or event, or recorded call) ----------------------------


def is_mine(jp: ah.JoinPoint) -> bool:
    return jp.name.startswith("mine.") and not jp.aliases


def predicates(recorder: Recorder) -> None:
    ah.Predicate(is_mine)
    ah.Predicate(lambda jp: jp.name.endswith("_iter"))
    ah.Predicate(lambda jp: jp.names & {"a", "b"})  # a truthy result will do
    ah.before(lambda jp: jp.is_async)(lambda ctx: None)
    either: ah.Pointcut = ah.Name("a") | ah.Predicate(is_mine)
    calls: list[Call] = recorder.calls_to(lambda call: call.name == "mine.f")
    ah.Predicate(3)  # type: ignore[arg-type]
    del either, calls


# -- advice decorators keep the function's types ---------------------------------------------


@ah.before("typing.named")
def log(ctx: ah.CallContext) -> None:
    pass


@ah.before("typing.named")
@ah.after("typing.other")
def stacked(ctx: ah.CallContext) -> int:
    return 1


@ah.around("typing.named")
async def around_async(ctx: ah.CallContext, proceed: ah.Proceed) -> object:
    return await proceed()


@ah.on("typing.event")
def got(event: ah.Event) -> None:
    pass


class Probe(ah.Aspect):
    pointcut = "typing.*"

    @ah.before()
    def seen(self, ctx: ah.CallContext) -> None:
        pass

    @ah.before()
    @ah.after()
    def twice(self, ctx: ah.CallContext) -> int:
        return 1

    @ah.before()
    @staticmethod
    def static_above(ctx: ah.CallContext) -> None:
        pass

    @staticmethod
    @ah.before()
    def static_below(ctx: ah.CallContext) -> None:
        pass

    @ah.before()
    @classmethod
    def class_above(cls, ctx: ah.CallContext) -> None:
        pass

    @classmethod
    @ah.before()
    def class_below(cls, ctx: ah.CallContext) -> None:
        pass


def advice_types(ctx: ah.CallContext, event: ah.Event) -> None:
    typed: ah.Advice[[ah.CallContext], None] = log
    typed_stack: ah.Advice[[ah.CallContext], int] = stacked
    typed_event: ah.Advice[[ah.Event], None] = got
    log(ctx)
    got(event)
    one: int = stacked(ctx)
    with log as same:
        same.remove()
        same.remove_all()  # type: ignore[attr-defined]
    any_advice: ah.Advice = log
    registered: list[ah.Advice] = [log, got, stacked, around_async]
    ah.register(registered)
    log.remove_all()  # type: ignore[attr-defined]
    log("not", "a ctx")  # type: ignore[call-arg, arg-type]
    wrong: int = log  # type: ignore[assignment]

    probe = Probe()
    method: Callable[[ah.CallContext], None] = probe.seen
    probe.seen(ctx)
    two: int = probe.twice(ctx)
    Probe.static_above(ctx)
    Probe.static_below(ctx)
    Probe.class_above(ctx)
    Probe.class_below(ctx)
    probe.seen(1, 2)  # type: ignore[call-arg, arg-type]
    probe.seen.remove()  # type: ignore[attr-defined]
    del typed, typed_stack, typed_event, one, any_advice, two, wrong, method


# -- aspect options ------------------------------------------------------------------------


class Ordered(ah.Aspect):
    priority: ah.PriorityLike = "HIGH"
    pointcut: ah.PointcutLike | None = ah.Glob("typing.*") | "other"
    # A list, as users write it (the runtime takes a name or a tuple, list or set of them).
    order_after = ["checkpoint"]  # noqa: RUF012
    order_before: ah.OrderNames = "logger"

    def after_train_iter(self, ctx: ah.CallContext) -> None:
        pass


class Sized(ah.Aspect):
    def __init__(self, size: int = 1, **options: Unpack[ah.AspectOptions]) -> None:
        super().__init__(**options)
        self.size = size


def aspect_options() -> None:
    Ordered(order_after="ema", order_before=("timed", "counted"))
    Ordered(order_after={"ema"}, order_before=frozenset({"timed"}))
    Timed(order_after=["ema"])
    Ordered(order_after=5)  # type: ignore[arg-type]
    Sized(2, pointcut="x", priority="LOW", errors="log", order_before=["timed"])
    Sized(pointcuts="x")  # type: ignore[call-arg]
    Sized(priority=3.5)  # type: ignore[arg-type]
    ah.Advice(
        "before",
        log,
        ah.Name("x"),
        order_after=(n for n in ["a"]),  # type: ignore[arg-type]
    )


# -- weave() and woven() check the same keywords -----------------------------------------------


def weaving(weaver: ah.Weaver) -> None:
    with ah.woven("json.dumps", Timing(), before=log, requires="pytest>=1", strict=True):
        pass
    weaver.weave("json.dumps", after=[log], name="dumps", priority="LOW").remove()
    ah.woven("json.dumps", strict="yes")  # type: ignore[arg-type]
    ah.woven("json.dumps", requires=3)  # type: ignore[arg-type]
    weaver.weave("json.dumps", "Timed")  # type: ignore[arg-type]
    if not weaver.closed:
        weaver.close()
    weaver.closed = True  # type: ignore[misc]


# -- shipped aspects, and names that load on first use -------------------------------------------


def shipped() -> None:
    timed = Timed()
    summary: Summary = timed.summary()
    rows: list[TimingRow] = list(summary)
    counts: int = Counted().counts["typing.named"]
    alias: type[Checkpoint] = CheckpointHook
    names: dict[str, str] = ALIASES
    del rows, counts, alias, names


def shipped_options() -> None:
    """Shipped aspects pass ``Aspect``'s options on, and a type checker checks them."""
    Timed(trace=True, pointcut="typing.*", priority="HIGH", name="timer", errors="raise")
    Counted(pointcut=ah.Glob("typing.*"), order_after=["timed"])
    Retry(2, on=ValueError, errors="log", order_before="timed")
    Logged(level="debug", priority=10, order_after=("timed", "counted"))
    Timed(pointcuts="typing.*")  # type: ignore[call-arg]
    Retry(erors="log")  # type: ignore[call-arg]
    Counted(priority=3.5)  # type: ignore[arg-type]
    Logged(order_after=5)  # type: ignore[arg-type]
    Recorder("typing.*", priorty=1)  # type: ignore[call-arg]


def training_options() -> None:
    """So do the training aspects."""
    Checkpoint(2, max_keep=3, priority="LOW", errors="log", order_after="ema")
    LRSchedule(None, warmup="linear", name="lr", order_before=["logger"])
    IterTimer(window=10, name="timer")
    GradClip(1.0, priority=20)
    EMA(0.99, pointcut="train_iter")
    Checkpoint(interval=1, pointcuts="train_iter")  # type: ignore[call-arg]
    IterTimer(erors="log")  # type: ignore[call-arg]
    GradClip(1.0, priority=3.5)  # type: ignore[arg-type]
    EMA(order_before=5)  # type: ignore[arg-type]


def adapter_options(hook: object) -> None:
    """And the adapters, which set ``name`` (and ``MMHook`` the priority) themselves and
    take no pointcut (their advice goes to the join points their methods name)."""
    MMHook(hook, priority="HIGH", name="hook", errors="log", order_after="ema")
    KerasCallback(hook, priority=10, order_before=["logger"])
    from_mmengine_hook(hook, name="hook", priority="LOW", errors="log")
    from_keras_callback(hook, name="callback", order_after=("ema",))
    MMHook(hook, pointcut="train_iter")  # type: ignore[call-arg]
    KerasCallback(hook, priorty=1)  # type: ignore[call-arg]
    MMHook(hook, order_after=5)  # type: ignore[arg-type]
    from_keras_callback(hook, priority=3.5)  # type: ignore[arg-type]
    from_mmengine_hook(hook, name=1)  # type: ignore[arg-type]


def typo_in_an_import() -> None:
    from aspecthook.aspects import Timd  # type: ignore[attr-defined]
    from aspecthook.train.aspects import Checkpiont  # type: ignore[attr-defined]

    del Timd, Checkpiont


# -- the training runner -----------------------------------------------------------------------


class MyRunner(Runner):
    def hello(self) -> str:
        return "hi"


def training(runner: Runner, path: os.PathLike[str]) -> None:
    checkpoint = runner.get_aspect(Checkpoint)
    assert_type(checkpoint, Checkpoint | None)
    keep: int | None = checkpoint.max_keep if checkpoint is not None else None
    by_name: ah.Aspect | None = runner.get_aspect("lr_schedule")
    schedule: LRSchedule | None = runner.get_aspect(LRSchedule)
    assert_type(MyRunner.from_config(path, max_iters=2), MyRunner)
    greeting: str = MyRunner.from_config({"seed": 0}).hello()

    @runner.joinpoint
    def augment(x: int) -> int:
        return x + 1

    @runner.joinpoint()
    def crop(x: int) -> int:
        return x

    @runner.joinpoint("score")
    def score(x: float) -> float:
        return x

    declared: Callable[[int], int] = augment
    total: int = augment(1) + crop(2)
    augment("one")  # type: ignore[arg-type]
    del keep, by_name, schedule, greeting, score, total, declared
