"""Aspects: classes bundling the advice of one concern, registered per instance."""

from __future__ import annotations

import copy
import inspect
import pickle
import re
from collections.abc import Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

import aspecthook as ah
from aspecthook import Aspect, CallContext, Priority, after, around, before, on_error
from aspecthook import aspects as shipped
from aspecthook.errors import (
    AdviceSignatureError,
    AspectDefinitionError,
    AspectParameterError,
    InvalidOptionError,
)


@pytest.fixture
def point(request: pytest.FixtureRequest) -> str:
    """A join point name that no other test uses."""
    return "test_aspect." + re.sub(r"\W", "_", request.node.name)


def _declare(weaver: ah.Weaver, name: str, fail: bool = False) -> Any:
    @weaver.joinpoint(name)
    def step(x: int) -> int:
        if fail:
            raise ValueError("step failed")
        return x * 2

    return step


# -- decorated methods -------------------------------------------------------------------------


def test_decorators_in_the_class_body_only_mark(weaver: ah.Weaver, point: str) -> None:
    """@before in an Aspect body registers nothing; the method stays an ordinary method."""
    step = _declare(weaver, point)
    ran: list[int] = []

    class Watch(Aspect):
        @before(point)
        def look(self, ctx: Any) -> str:
            ran.append(ctx.args[0])
            return "looked"

    assert ah.default_weaver.registered == []
    assert weaver.registered == []
    step(1)
    assert ran == []

    class Ctx:
        args = (9,)

    assert Watch().look(Ctx()) == "looked"
    assert ran == [9]


def test_register_makes_advice_per_instance_bound_to_it(weaver: ah.Weaver, point: str) -> None:
    """register(aspect) makes the advice of that instance; each instance keeps its own state."""
    step = _declare(weaver, point)

    class Count(Aspect):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        @after(point)
        def count(self, ctx: Any) -> None:
            self.calls += 1

    one, two = Count(), Count()
    weaver.register(one)
    step(1)
    weaver.register(two)
    step(1)
    assert (one.calls, two.calls) == (2, 1)


def test_handle_removes_all_of_the_aspect(weaver: ah.Weaver, point: str) -> None:
    """The handle register() returns removes every advice of the aspect, once."""
    step = _declare(weaver, point)
    ran: list[str] = []

    class Full(Aspect):
        @before(point)
        def b(self, ctx: Any) -> None:
            ran.append("before")

        @after(point)
        def a(self, ctx: Any) -> None:
            ran.append("after")

        @around(point)
        def r(self, ctx: Any, proceed: Callable[..., Any]) -> Any:
            ran.append("around")
            return proceed()

    handle = weaver.register(Full())
    assert len(weaver.registered) == 3
    step(1)
    handle.remove()
    handle.remove()
    step(1)
    assert ran == ["before", "around", "after"]
    assert weaver.registered == []
    assert not handle.active


def test_handle_is_a_context_manager(weaver: ah.Weaver, point: str) -> None:
    """`with register(aspect):` applies the aspect for the block only."""
    step = _declare(weaver, point)
    ran: list[int] = []

    class Watch(Aspect):
        @before(point)
        def look(self, ctx: Any) -> None:
            ran.append(ctx.args[0])

    with weaver.register(Watch()):
        step(1)
    step(2)
    assert ran == [1]


def test_module_level_register_uses_the_default_weaver(point: str) -> None:
    """aspecthook.register(aspect) registers on the default weaver."""
    ran: list[int] = []

    @ah.joinpoint(point)
    def step(x: int) -> int:
        return x

    class Watch(Aspect):
        @after(point)
        def look(self, ctx: Any) -> None:
            ran.append(ctx.result)

    handle = ah.register(Watch())
    step(3)
    assert len(ah.default_weaver.registered) == 1
    handle.remove()
    step(4)
    assert ran == [3]


def test_one_method_under_several_decorators(weaver: ah.Weaver, point: str) -> None:
    """A method under several decorators is advice of each kind."""
    step = _declare(weaver, point)
    ran: list[str] = []

    class Both(Aspect):
        @before(point)
        @after(point)
        def mark(self, ctx: Any) -> None:
            ran.append("result" if ctx.result is not None else "args")

    weaver.register(Both())
    step(1)
    assert ran == ["args", "result"]


def test_subclass_inherits_and_overrides_advice(weaver: ah.Weaver, point: str) -> None:
    """A subclass inherits its bases' advice methods and replaces the ones it redefines."""
    step = _declare(weaver, point)
    ran: list[str] = []

    class Base(Aspect):
        @before(point)
        def first(self, ctx: Any) -> None:
            ran.append("base.first")

        @after(point)
        def second(self, ctx: Any) -> None:
            ran.append("base.second")

    class Child(Base):
        @after(point)
        def second(self, ctx: Any) -> None:
            ran.append("child.second")

    weaver.register(Child())
    step(1)
    assert ran == ["base.first", "child.second"]


def test_bad_option_in_the_class_body_fails_at_class_definition(point: str) -> None:
    """A bad option on a decorator in an Aspect body is refused when the class is defined."""
    with pytest.raises(InvalidOptionError, match="every=0"):

        class Broken(Aspect):
            @before(point, every=0)
            def look(self, ctx: Any) -> None:
                pass


def test_bad_method_signature_is_refused_at_register(weaver: ah.Weaver, point: str) -> None:
    """An advice method that cannot take ctx is refused when the aspect is registered."""

    class Broken(Aspect):
        @before(point)
        def look(self) -> None:
            pass

    with pytest.raises(AdviceSignatureError, match=r"look\(\)"):
        weaver.register(Broken())
    assert weaver.registered == []


# -- names, priority, errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("class_name", "expected"),
    [
        ("Checkpoint", "checkpoint"),
        ("EarlyStopping", "early_stopping"),
        ("EarlyStoppingHook", "early_stopping_hook"),
        ("HTTPLogger", "http_logger"),
        ("LRSchedule", "lr_schedule"),
        ("EMA", "ema"),
    ],
)
def test_default_name_is_the_class_name_in_snake_case(class_name: str, expected: str) -> None:
    """An aspect's name defaults to its class name in snake case."""
    cls = type(class_name, (Aspect,), {})
    assert cls.name == expected
    assert cls().name == expected


def test_name_can_be_given_by_class_or_instance() -> None:
    """name can be set as a class attribute or passed to __init__."""

    class Checkpoint(Aspect):
        name = "ckpt"

    assert Checkpoint().name == "ckpt"
    assert Checkpoint(name="best_ckpt").name == "best_ckpt"
    assert Checkpoint().name == "ckpt"


def test_advice_is_named_after_aspect_and_method(weaver: ah.Weaver, point: str) -> None:
    """Each advice of an aspect is named '<aspect name>.<method>' and carries the aspect name."""

    class Checkpoint(Aspect):
        @after(point)
        def save(self, ctx: Any) -> None:
            pass

    weaver.register(Checkpoint())
    (advice,) = weaver.registered
    assert advice.name == "checkpoint.save"
    assert advice.aspect_name == "checkpoint"


def test_class_priority_applies_unless_the_decorator_overrides(
    weaver: ah.Weaver, point: str
) -> None:
    """The class's priority applies to its advice; a decorator's priority= wins for that one."""
    _declare(weaver, point)

    class Warmup(Aspect):
        priority = "high"

        @before(point)
        def default(self, ctx: Any) -> None:
            pass

        @before(point, priority=Priority.LOWEST)
        def overridden(self, ctx: Any) -> None:
            pass

    weaver.register(Warmup())
    priorities = {a.name: a.priority for a in weaver.registered}
    assert priorities == {"warmup.default": 30, "warmup.overridden": 100}


def test_instance_priority_overrides_the_class(weaver: ah.Weaver, point: str) -> None:
    """Aspect(priority=...) sets the priority of that instance's advice."""

    class Warmup(Aspect):
        priority = "high"

        @before(point)
        def go(self, ctx: Any) -> None:
            pass

    weaver.register(Warmup(priority="very_low"))
    assert [a.priority for a in weaver.registered] == [90]


def test_advice_options_give_per_instance_options_that_decorators_override(
    weaver: ah.Weaver, point: str
) -> None:
    """advice_options(attr) sets options from the instance's settings; a decorator's win."""
    step = _declare(weaver, point)

    class Sampled(Aspect):
        def __init__(self, every: int) -> None:
            super().__init__()
            self.every = every
            self.seen: list[int] = []

        def advice_options(self, attr: str) -> dict[str, Any]:
            return {"every": self.every}

        @after(point)
        def sample(self, ctx: Any) -> None:
            self.seen.append(ctx.args[0])

        @after(point, every=1)
        def each(self, ctx: Any) -> None:
            self.seen.append(-ctx.args[0])

    aspect = Sampled(every=2)
    weaver.register(aspect)
    for x in range(1, 5):
        step(x)
    assert aspect.seen == [-1, 2, -2, -3, 4, -4]


def test_default_priority_is_normal(weaver: ah.Weaver, point: str) -> None:
    """Without a priority anywhere, an aspect's advice is NORMAL."""

    class Plain(Aspect):
        @after(point)
        def go(self, ctx: Any) -> None:
            pass

    weaver.register(Plain())
    assert [a.priority for a in weaver.registered] == [Priority.NORMAL]


def test_class_errors_policy_applies_unless_the_decorator_overrides(
    weaver: ah.Weaver, point: str
) -> None:
    """errors='log' on the class applies to its advice; a decorator's errors= wins for that one."""
    step = _declare(weaver, point)

    class Flaky(Aspect):
        errors = "log"

        @before(point)
        def logged(self, ctx: Any) -> None:
            raise RuntimeError("logged")

        @after(point, errors="raise")
        def raised(self, ctx: Any) -> None:
            raise RuntimeError("raised")

    weaver.register(Flaky())
    with capture_logs() as logs, pytest.raises(RuntimeError, match="raised"):
        step(1)
    assert [entry["advice"] for entry in logs] == ["flaky.logged"]
    assert logs[0]["aspect"] == "flaky"


# -- <kind>_<joinpoint> convention methods -----------------------------------------------------


def test_convention_methods_are_advice_for_their_joinpoint(weaver: ah.Weaver) -> None:
    """before_x / after_x / on_error_x / around_x methods advise the join point named x."""
    ran: list[str] = []

    @weaver.joinpoint("aspect_conv_train_iter")
    def train_iter(x: int) -> int:
        return x

    @weaver.joinpoint("aspect_conv_run")
    def run() -> None:
        raise ValueError("run failed")

    class Hook(Aspect):
        def before_aspect_conv_train_iter(self, ctx: Any) -> None:
            ran.append("before")

        def around_aspect_conv_train_iter(self, ctx: Any, proceed: Callable[..., Any]) -> Any:
            ran.append("around")
            return proceed()

        def after_aspect_conv_train_iter(self, ctx: Any) -> None:
            ran.append("after")

        def on_error_aspect_conv_run(self, ctx: Any) -> None:
            ran.append("on_error")
            ctx.recover("recovered")

        def helper(self) -> None:
            """Not advice: no kind prefix."""

    weaver.register(Hook())
    assert train_iter(1) == 1
    assert run() == "recovered"
    assert ran == ["before", "around", "after", "on_error"]
    assert len(weaver.registered) == 4


def test_convention_reaches_dotted_joinpoint_names(weaver: ah.Weaver) -> None:
    """A join point named 'a.b' is reached by a method after_a_b (dots become _)."""
    ran: list[str] = []

    @weaver.joinpoint("aspect_dots.val-epoch.end")
    def val_epoch_end() -> str:
        return "ok"

    class Hook(Aspect):
        def after_aspect_dots_val_epoch_end(self, ctx: Any) -> None:
            ran.append(ctx.joinpoint.name)

    weaver.register(Hook())
    assert val_epoch_end() == "ok"
    assert ran == ["aspect_dots.val-epoch.end"]


def test_convention_methods_take_class_priority(weaver: ah.Weaver) -> None:
    """Convention methods use the aspect's priority and name like decorated ones."""

    class Early(Aspect):
        priority = "highest"

        def before_aspect_conv_priority(self, ctx: Any) -> None:
            pass

    weaver.register(Early())
    (advice,) = weaver.registered
    assert advice.priority == 0
    assert advice.name == "early.before_aspect_conv_priority"


def test_convention_method_with_wrong_signature_is_refused(weaver: ah.Weaver) -> None:
    """A convention method that cannot take ctx is refused at register()."""

    class Hook(Aspect):
        def before_aspect_conv_bad(self) -> None:
            pass

    with pytest.raises(AdviceSignatureError, match=r"before_aspect_conv_bad\(\)"):
        weaver.register(Hook())


def test_private_and_bare_prefix_methods_are_not_advice(weaver: ah.Weaver) -> None:
    """Methods starting with _ and a bare 'before_' are not advice."""

    class Hook(Aspect):
        def _before_x(self, ctx: Any) -> None:
            pass

        def before_(self, ctx: Any) -> None:
            pass

    weaver.register(Hook())
    assert weaver.registered == []


# -- pointcut-less advice ----------------------------------------------------------------------


class Timed(Aspect):
    """Pointcut-less advice, as shipped aspects carry."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.calls: list[str] = []

    @around()
    def time(self, ctx: Any, proceed: Callable[..., Any]) -> Any:
        self.calls.append(ctx.joinpoint.name)
        return proceed()


def test_pointcut_less_advice_needs_a_pointcut(weaver: ah.Weaver) -> None:
    """Registering an aspect whose advice has no pointcut, without Aspect(pointcut=), is refused."""
    with pytest.raises(AspectDefinitionError, match=r"Timed\(pointcut='name or glob'\)"):
        weaver.register(Timed())
    assert weaver.registered == []


def test_pointcut_given_to_the_instance(weaver: ah.Weaver, point: str) -> None:
    """Aspect(pointcut='glob') applies pointcut-less advice to the join points it selects."""
    one = _declare(weaver, f"{point}.one")
    two = _declare(weaver, f"{point}.two")
    timed = Timed(pointcut=f"{point}.*")
    weaver.register(timed)
    one(1)
    two(2)
    assert timed.calls == [f"{point}.one", f"{point}.two"]


def test_pointcut_as_class_attribute(weaver: ah.Weaver, point: str) -> None:
    """A pointcut class attribute serves the pointcut-less advice of every instance."""
    step = _declare(weaver, point)

    class TimedStep(Timed):
        pointcut = point

    timed = TimedStep()
    weaver.register(timed)
    step(1)
    assert timed.calls == [point]


def test_decorator_pointcut_wins_over_the_aspect_pointcut(weaver: ah.Weaver, point: str) -> None:
    """Advice with its own pointcut ignores Aspect(pointcut=)."""
    mine = _declare(weaver, f"{point}.mine")
    other = _declare(weaver, f"{point}.other")
    ran: list[str] = []

    class Mixed(Aspect):
        @before(f"{point}.mine")
        def own(self, ctx: Any) -> None:
            ran.append(f"own:{ctx.joinpoint.name}")

        @on_error()
        def shared(self, ctx: Any) -> None:
            ctx.recover(None)

    weaver.register(Mixed(pointcut=f"{point}.other"))
    mine(1)
    other(1)
    assert ran == [f"own:{point}.mine"]


# -- what register() refuses -------------------------------------------------------------------


def test_registering_the_class_instead_of_an_instance(weaver: ah.Weaver) -> None:
    """register(SomeAspect) says to register an instance: register(SomeAspect())."""
    with pytest.raises(AspectDefinitionError, match=r"the class Timed, not an instance.*Timed\(\)"):
        weaver.register(Timed)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [42, "checkpoint", [Timed, 1]], ids=["int", "str", "list"])
def test_registering_something_else_is_refused(weaver: ah.Weaver, value: object) -> None:
    """register() accepts aspects and advice (or lists of them) and refuses anything else."""
    with pytest.raises(AspectDefinitionError, match="give an Aspect instance"):
        weaver.register(value)  # type: ignore[arg-type]


def test_registering_a_list_of_aspects(weaver: ah.Weaver, point: str) -> None:
    """register([a, b]) registers both; its handle removes both."""
    step = _declare(weaver, point)
    first, second = Timed(pointcut=point), Timed(pointcut=point)
    handle = weaver.register([first, second])
    step(1)
    handle.remove()
    step(1)
    assert first.calls == second.calls == [point]


def test_static_and_class_methods_are_advice_whichever_decorator_is_on_top(
    weaver: ah.Weaver, point: str
) -> None:
    """@before above or below @staticmethod / @classmethod makes advice all the same."""
    step = _declare(weaver, point)
    ran: list[str] = []

    class Hooks(Aspect):
        @before(point)
        @staticmethod
        def static_below(ctx: Any) -> None:
            ran.append("static_below")

        @staticmethod
        @before(point)
        def static_above(ctx: Any) -> None:
            ran.append("static_above")

        @before(point)
        @classmethod
        def class_below(cls, ctx: Any) -> None:
            ran.append(f"class_below {cls.__name__}")

        @classmethod
        @before(point)
        def class_above(cls, ctx: Any) -> None:
            ran.append(f"class_above {cls.__name__}")

    with weaver.register(Hooks()) as handle:
        step(1)
    assert len(handle.items) == 4
    assert sorted(ran) == [
        "class_above Hooks",
        "class_below Hooks",
        "static_above",
        "static_below",
    ]


def test_an_aspect_holding_a_pointcut_value_can_be_copied_and_pickled() -> None:
    """An aspect with a Glob pointcut deep-copies and pickles (e.g. for a worker process)."""
    aspect = Timed(pointcut=ah.Glob("train_*") | ah.Name("val_iter"))
    for clone in (copy.deepcopy(aspect), pickle.loads(pickle.dumps(aspect))):
        assert repr(clone.pointcut) == "(Glob('train_*') | Name('val_iter'))"


@pytest.mark.parametrize("option", ["order_after", "order_before"])
@pytest.mark.parametrize("names", [{"ema": 1}.keys(), (n for n in ["ema"]), 5, ("ema", 5)])
def test_bad_order_names_are_refused_when_the_aspect_is_made(option: str, names: object) -> None:
    """Aspect(order_after=...) that is not a name or a tuple, list or set of names fails
    at construction, naming the option, not later when the aspect is registered."""
    with pytest.raises(InvalidOptionError, match=f"{option}=.* must be a name") as info:
        Aspect(**{option: names})
    assert info.value.option == option


@pytest.mark.parametrize(
    ("names", "kept"),
    [("ema", ("ema",)), (["ema", "timed"], ("ema", "timed")), (("ema",), ("ema",))],
)
def test_order_names_are_a_name_or_a_collection_of_names(
    weaver: ah.Weaver, point: str, names: Any, kept: tuple[str, ...]
) -> None:
    """order_after= / order_before= take one name or a tuple, list or set of them, and the
    aspect keeps them as a tuple of names, as its advice does."""

    class Late(Aspect):
        @before(point)
        def seen(self, ctx: CallContext) -> None:
            pass

    late = Late(order_after=names, order_before=names)
    assert (late.order_after, late.order_before) == (kept, kept)
    with weaver.register(late) as handle:
        assert [a.order_after for a in handle.items] == [kept]


def test_public_type_aliases_of_aspect_options() -> None:
    """The types of the Aspect options are importable from aspecthook, to annotate a
    subclass's own attributes and __init__ parameters with."""
    for alias in ("AspectOptions", "PointcutLike", "PriorityLike", "OrderNames"):
        assert alias in ah.__all__
        assert getattr(ah, alias) is not None
    assert ah.__all__ == sorted(ah.__all__)


def test_aspect_options_name_every_option_of_aspect_init() -> None:
    """AspectOptions, the type of a subclass's **options, has exactly Aspect.__init__'s
    keyword parameters."""
    parameters = set(inspect.signature(Aspect.__init__).parameters) - {"self"}
    assert set(ah.AspectOptions.__annotations__) == parameters


def test_a_misspelt_keyword_names_the_aspect_class_and_a_close_option() -> None:
    """Timed(trac=True) raises AspectParameterError (a TypeError) naming Timed, not
    Aspect.__init__, with the unknown keyword, a did-you-mean and the valid keywords."""
    with pytest.raises(AspectParameterError) as info:
        shipped.Timed(trac=True)  # type: ignore[call-arg]
    message = str(info.value)
    assert message.startswith("Timed does not take 'trac' (did you mean 'trace'?)")
    assert "Aspect.__init__" not in message
    assert "its parameters are: trace, max_events, pointcut, priority, name" in message
    assert isinstance(info.value, TypeError)
    assert info.value.aspect == "Timed"
    assert info.value.parameters == ("trac",)
    assert {"trace", "pointcut", "order_before"} <= set(info.value.valid)


def test_a_misspelt_keyword_of_a_subclass_names_that_subclass() -> None:
    """A user's aspect that passes **options on, or one with no __init__ of its own, is
    named in the error; Aspect's signature still shows only its options."""

    class Sized(Aspect):
        def __init__(self, size: int = 1, **options: Any) -> None:
            super().__init__(**options)
            self.size = size

    with pytest.raises(AspectParameterError, match=r"^Sized does not take 'priorty' \(did you"):
        Sized(2, priorty=1)

    class Plain(Aspect):
        pass

    with pytest.raises(AspectParameterError, match=r"^Plain does not take 'pointcuts', 'x'"):
        Plain(pointcuts="a", x=1)  # type: ignore[call-arg]
    assert "unknown" not in inspect.signature(Aspect).parameters


def test_an_unknown_errors_policy_is_refused_when_the_aspect_is_made() -> None:
    """Aspect(errors='ignore') fails at construction, naming the policies there are,
    not later when it is registered."""

    class Quiet(Aspect):
        def after_step(self, ctx: CallContext) -> None:
            pass

    with pytest.raises(InvalidOptionError, match="errors='raise' to propagate"):
        Quiet(errors="ignore")


def test_a_name_that_is_not_a_string_is_refused() -> None:
    """Aspect(name=3), or a class attribute name that is not a string, is refused naming
    the option (describe() used to fail on it with a bare AttributeError)."""

    class Numbered(Aspect):
        name = 3  # type: ignore[assignment]

        def after_step(self, ctx: CallContext) -> None:
            pass

    with pytest.raises(InvalidOptionError, match="name=3 is not a string") as info:
        Aspect(name=3)  # type: ignore[arg-type]
    assert info.value.option == "name"
    with pytest.raises(InvalidOptionError, match="name=3 is not a string"):
        Numbered().make_advice()


def test_the_public_signatures_resolve_at_run_time() -> None:
    """typing.get_type_hints (what tools that build objects from annotations use) resolves
    the constructors of the shipped aspects and the typed weaving functions."""
    import typing

    from aspecthook import aspects

    for obj in (
        ah.weave,
        ah.woven,
        ah.Weaver.weave,
        ah.Advice.__enter__,
        aspects.Timed.__init__,
        aspects.Logged.__init__,
        aspects.Retry.__init__,
        aspects.Counted.__init__,
    ):
        assert typing.get_type_hints(obj), obj
