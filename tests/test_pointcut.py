"""Pointcuts: Name, Glob, Predicate and their &, |, ~ combinations, as immutable values."""

from __future__ import annotations

import copy
import pickle
from dataclasses import dataclass
from typing import Any

import pytest

import aspecthook as ah
from aspecthook import Glob, Name, Pointcut, Predicate
from aspecthook._pointcut import NormalizedName, as_pointcut
from aspecthook.errors import InvalidPointcutError


@dataclass(frozen=True)
class Point:
    """Anything with ``names`` is what a pointcut looks at (a join point or an event)."""

    names: frozenset[str]


def at(*names: str) -> Point:
    return Point(frozenset(names))


def is_step(point: Any) -> bool:
    return any(n.endswith("_step") for n in point.names)


# -- the three leaves --------------------------------------------------------------------------


def test_name_matches_exactly_one_of_the_points_names() -> None:
    """Name('x') selects points that answer to exactly 'x' (their name or an alias)."""
    pc = Name("train_iter")
    assert pc.matches(at("train_iter"))
    assert pc.matches(at("runner.Runner.train_iter", "train_iter"))
    assert not pc.matches(at("train_iter_end"))
    assert not pc.matches(at("TRAIN_ITER"))


@pytest.mark.parametrize(
    ("pattern", "name", "hit"),
    [
        ("train_*", "train_iter", True),
        ("train_*", "val_iter", False),
        ("*.forward", "models.Net.forward", True),
        ("*.forward", "forward", False),
        ("ckpt.?", "ckpt.a", True),
        ("ckpt.?", "ckpt.ab", False),
        ("[tv]al_*", "val_epoch", True),
        ("train_*", "Train_iter", False),
    ],
)
def test_glob_matches_shell_style_case_sensitive(pattern: str, name: str, hit: bool) -> None:
    """Glob selects names matching a shell-style pattern, case-sensitively."""
    assert Glob(pattern).matches(at(name)) is hit


def test_glob_matches_any_alias() -> None:
    """A glob selects a point when any one of its names matches."""
    assert Glob("*.step").matches(at("sgd_update", "torch.optim.SGD.step"))


def test_predicate_is_called_with_the_point() -> None:
    """Predicate(fn) selects the points for which fn(point) is true."""
    seen: list[Any] = []

    def looks(point: Any) -> bool:
        seen.append(point)
        return is_step(point)

    pc = Predicate(looks)
    point = at("train_step")
    assert pc.matches(point)
    assert not pc.matches(at("train_iter"))
    assert seen[0] is point


def test_predicate_result_is_a_bool() -> None:
    """A predicate's truthy or falsy return value is turned into a bool."""
    assert Predicate(lambda p: "yes").matches(at("x")) is True
    assert Predicate(lambda p: 0).matches(at("x")) is False


# -- combinations ------------------------------------------------------------------------------


def test_and_requires_both() -> None:
    """a & b selects points both select."""
    pc = Glob("train_*") & Predicate(is_step)
    assert pc.matches(at("train_step"))
    assert not pc.matches(at("train_iter"))
    assert not pc.matches(at("val_step"))


def test_or_accepts_either() -> None:
    """a | b selects points either selects."""
    pc = Name("run") | Glob("val_*")
    assert pc.matches(at("run"))
    assert pc.matches(at("val_iter"))
    assert not pc.matches(at("train_iter"))


def test_invert_negates() -> None:
    """~a selects the points a does not select, and ~~a the same as a."""
    pc = ~Glob("val_*")
    assert pc.matches(at("train_iter"))
    assert not pc.matches(at("val_iter"))
    assert (~pc).matches(at("val_iter"))


def test_combinations_nest() -> None:
    """&, | and ~ nest to any depth."""
    pc = (Glob("train_*") | Glob("val_*")) & ~Name("val_epoch")
    assert pc.matches(at("train_epoch"))
    assert pc.matches(at("val_iter"))
    assert not pc.matches(at("val_epoch"))
    assert not pc.matches(at("test_iter"))


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        (lambda: Name("a") | "b", Name),
        (lambda: Name("a") | "b*", Glob),
        (lambda: "b*" | Name("a"), Glob),
        (lambda: "b" & Name("a"), Name),
        (lambda: Name("a") & is_step, Predicate),
    ],
    ids=["or-name", "or-glob", "ror-glob", "rand-name", "and-predicate"],
)
def test_strings_and_functions_combine_as_pointcuts(expression: Any, expected: type) -> None:
    """In a combination, a string becomes a Name or a Glob and a function a Predicate."""
    combined = expression()
    assert isinstance(combined, Pointcut)
    assert any(type(part) is expected for part in (combined.left, combined.right))


# -- strings given to advice decorators --------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "field"),
    [
        ("train_iter", Name, "name"),
        ("torch.optim.Optimizer.step", Name, "name"),
        ("train_*", Glob, "pattern"),
        ("*.forward", Glob, "pattern"),
        ("ckpt.?", Glob, "pattern"),
        ("[tv]al_iter", Glob, "pattern"),
    ],
)
def test_strings_become_name_or_glob(weaver: ah.Weaver, text: str, kind: type, field: str) -> None:
    """A pointcut string with *, ? or [ is a Glob; any other string is a Name."""
    advice = weaver.before(text)(lambda ctx: None)
    assert type(advice.pointcut) is kind
    assert getattr(advice.pointcut, field) == text


def test_function_becomes_a_predicate_over_joinpoints(weaver: ah.Weaver) -> None:
    """A function given as pointcut selects join points for which it returns true."""
    ran: list[str] = []

    @weaver.joinpoint("test_pointcut.predicate_step")
    def work() -> None:
        pass

    @weaver.joinpoint("test_pointcut.predicate_iter")
    def other() -> None:
        pass

    def selected(jp: Any) -> bool:
        return jp.name == "test_pointcut.predicate_step"

    weaver.before(selected)(lambda ctx: ran.append(ctx.joinpoint.name))
    work()
    other()
    assert ran == ["test_pointcut.predicate_step"]


def test_combined_pointcut_selects_joinpoints(weaver: ah.Weaver) -> None:
    """A combined pointcut given to an advice decorator selects exactly what it matches."""
    ran: list[str] = []
    points = {}
    for suffix in ("train_iter", "train_epoch", "val_iter"):

        @weaver.joinpoint(f"test_pointcut.combined.{suffix}")
        def work() -> None:
            pass

        points[suffix] = work
    pc = Glob("test_pointcut.combined.*") & ~Name("test_pointcut.combined.train_epoch")
    weaver.before(pc)(lambda ctx: ran.append(ctx.joinpoint.name.rsplit(".", 1)[1]))
    for work in points.values():
        work()
    assert ran == ["train_iter", "val_iter"]


# -- values: repr, equality, immutability ------------------------------------------------------


@pytest.mark.parametrize(
    ("pointcut", "text"),
    [
        (Name("train_iter"), "Name('train_iter')"),
        (Glob("train_*"), "Glob('train_*')"),
        (Predicate(is_step), "Predicate('is_step')"),
        (Name("a") | Glob("b*"), "(Name('a') | Glob('b*'))"),
        (Name("a") & ~Glob("b*"), "(Name('a') & ~Glob('b*'))"),
        (~(Name("a") | "b"), "~(Name('a') | Name('b'))"),
    ],
)
def test_repr_shows_the_pointcut(pointcut: Pointcut, text: str) -> None:
    """repr of a pointcut reads as the expression that builds it."""
    assert repr(pointcut) == text


@pytest.mark.parametrize(
    ("make", "other"),
    [
        (lambda: Name("a"), lambda: Name("b")),
        (lambda: Glob("a*"), lambda: Glob("b*")),
        (lambda: NormalizedName("a_b"), lambda: NormalizedName("a_c")),
        (lambda: Predicate(is_step), lambda: Predicate(lambda jp: True)),
        (lambda: Glob("train_*") | Name("val_iter"), lambda: Name("val_iter") | Glob("train_*")),
        (lambda: ~Name("a") & Glob("b*"), lambda: ~Name("a") | Glob("b*")),
    ],
    ids=["name", "glob", "normalized", "predicate", "or", "and-not"],
)
def test_pointcuts_are_equal_by_value(make: Any, other: Any) -> None:
    """Two pointcuts built alike are equal and hash alike (as set members, dict keys);
    a different field, kind or operand order is a different pointcut."""
    assert make() == make()
    assert len({make(), make()}) == 1
    assert make() != other()
    assert make() != Name("zzz")
    assert Glob("a") != Name("a")


def test_a_predicate_over_an_unhashable_callable_still_hashes() -> None:
    """A callable object that is unhashable (it defines __eq__ only) makes a Predicate
    that still goes into a set, equal to one over the same object."""

    class Check:
        def __eq__(self, other: object) -> bool:
            return isinstance(other, Check)

        def __call__(self, point: Any) -> bool:
            return True

    check = Check()
    assert len({Predicate(check), Predicate(check), Predicate(Check())}) == 1


def test_a_users_pointcut_subclass_keeps_identity_equality() -> None:
    """A user's subclass says for itself what equal means: without an __eq__ of its own
    two instances are different pointcuts, however alike, and both stay hashable."""
    assert Prefix("a") != Prefix("a")
    assert len({Prefix("a"), Prefix("a")}) == 2
    one = SlottedPrefix("a")
    assert {one: 1}[one] == 1


@pytest.mark.parametrize(
    ("pointcut", "field"),
    [
        (Name("a"), "name"),
        (Glob("a*"), "pattern"),
        (Predicate(is_step), "fn"),
        (Name("a") | Name("b"), "left"),
        (Name("a") & Name("b"), "right"),
        (~Name("a"), "inner"),
    ],
)
def test_pointcuts_are_immutable(pointcut: Pointcut, field: str) -> None:
    """A pointcut's fields cannot be set or deleted, and no attribute can be added."""
    before = repr(pointcut)
    with pytest.raises(AttributeError, match="immutable"):
        setattr(pointcut, field, Name("other"))
    with pytest.raises(AttributeError, match="immutable"):
        delattr(pointcut, field)
    with pytest.raises(AttributeError, match="immutable"):
        pointcut.extra = 1  # type: ignore[attr-defined]
    assert repr(pointcut) == before


@pytest.mark.parametrize(
    "pointcut",
    [
        Name("a"),
        Glob("a*"),
        NormalizedName("torch_optim_step"),
        Predicate(is_step),
        Glob("train_*") | Name("val_iter"),
        ~Name("a") & Glob("b*"),
    ],
    ids=repr,
)
def test_pointcuts_copy_as_themselves_and_pickle(pointcut: Pointcut) -> None:
    """copy and deepcopy give the same immutable value; a pickle round trip an equal one."""
    assert copy.copy(pointcut) is pointcut
    assert copy.deepcopy(pointcut) is pointcut
    clone = pickle.loads(pickle.dumps(pointcut))
    assert type(clone) is type(pointcut)
    assert repr(clone) == repr(pointcut)
    assert [clone.matches(at(n)) for n in ("a", "b1", "x_step")] == [
        pointcut.matches(at(n)) for n in ("a", "b1", "x_step")
    ]


class Prefix(Pointcut):
    """A user's pointcut as the docs show one: no __slots__, fields set by ``_init``."""

    prefix: str

    def __init__(self, prefix: str) -> None:
        self._init(prefix=prefix)

    def matches(self, point: Any) -> bool:
        return any(n.startswith(self.prefix) for n in point.names)


class SlottedPrefix(Prefix):
    """A user's pointcut whose slots are not its ``__init__`` arguments."""

    __slots__ = ("length",)
    length: int

    def __init__(self, prefix: str) -> None:
        self._init(prefix=prefix, length=len(prefix))


@pytest.mark.parametrize("kind", [Prefix, SlottedPrefix])
def test_a_users_pointcut_subclass_pickles(kind: type[Prefix]) -> None:
    """A Pointcut subclass of the user's own pickles with its fields, alone or combined."""
    clone = pickle.loads(pickle.dumps(kind("train_") | Name("val")))
    assert type(clone.left) is kind
    assert clone.left.prefix == "train_"
    assert vars(clone.left) == {"prefix": "train_"}
    assert getattr(clone.left, "length", 6) == 6
    assert clone.matches(at("train_iter"))
    assert not clone.matches(at("test_iter"))
    with pytest.raises(AttributeError, match="immutable"):
        clone.left.prefix = "x"


def test_combining_leaves_the_operands_unchanged() -> None:
    """&, | and ~ build new pointcuts and never change their operands."""
    a, b = Name("a"), Glob("b*")
    combined = a | b
    assert repr(a) == "Name('a')"
    assert repr(b) == "Glob('b*')"
    assert combined.left is a
    assert combined.right is b


# -- what is not a pointcut --------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [42, 3.5, b"train_iter", ("train_iter",), object()],
    ids=["int", "float", "bytes", "tuple", "object"],
)
def test_non_pointcut_given_to_advice_is_refused(weaver: ah.Weaver, value: object) -> None:
    """Something that is not a name, glob, pointcut or predicate raises InvalidPointcutError."""
    with pytest.raises(InvalidPointcutError, match="is not a pointcut"):
        weaver.before(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["", " train_iter", "train_iter "])
def test_empty_or_padded_string_is_refused(weaver: ah.Weaver, value: str) -> None:
    """An empty string, or one with surrounding spaces, is refused with what to give instead."""
    with pytest.raises(InvalidPointcutError, match="empty or has surrounding spaces"):
        weaver.after(value)


@pytest.mark.parametrize(
    "combine",
    [lambda: Name("a") & 42, lambda: Name("a") | None, lambda: 42 | Name("a")],
    ids=["and-int", "or-none", "ror-int"],
)
def test_combining_with_a_non_pointcut_is_refused(combine: Any) -> None:
    """&, | with something that is not a pointcut raise InvalidPointcutError."""
    with pytest.raises(InvalidPointcutError, match="is not a pointcut"):
        combine()


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: Name(42), r"Name\(42\) needs a string"),
        (lambda: Glob(None), r"Glob\(None\) needs a string"),
        (lambda: Name(b"x"), r"needs a string"),
        (lambda: Predicate("train_*"), r"needs a callable"),
    ],
    ids=["name-int", "glob-none", "name-bytes", "predicate-str"],
)
def test_pointcut_constructors_check_their_argument(make: Any, match: str) -> None:
    """Name and Glob need a string and Predicate a callable, checked when made."""
    with pytest.raises(InvalidPointcutError, match=match):
        make()


def test_invalid_pointcut_error_is_a_type_error(weaver: ah.Weaver) -> None:
    """InvalidPointcutError can be caught as TypeError."""
    with pytest.raises(TypeError, match="is not a pointcut"):
        weaver.on_error(12)  # type: ignore[arg-type]


def test_a_pointcut_that_raises_for_one_join_point_matches_nothing_there(
    weaver: ah.Weaver,
) -> None:
    """A predicate written for dotted names meets 'train_iter': that declaration works,
    the advice does not apply there (logged), and it still applies where it matches."""
    from structlog.testing import capture_logs

    seen: list[str] = []

    def is_forward(jp: Any) -> bool:
        return bool(jp.name.split(".")[1] == "forward")  # IndexError without a dot

    weaver.before(ah.Predicate(is_forward))(lambda ctx: seen.append(ctx.joinpoint.name))
    with capture_logs() as logs:

        @weaver.joinpoint("test_registry_plain")
        def plain() -> None:
            pass

    @weaver.joinpoint("test_registry.forward")
    def forward() -> None:
        pass

    plain()
    forward()
    assert seen == ["test_registry.forward"]
    failed = [e for e in logs if e["event"] == "joinpoint.pointcut_failed"]
    assert [e["joinpoint"] for e in failed] == ["test_registry_plain"]


# -- a woven callable given where a pointcut goes ---------------------------------------------


_CALLS: list[int] = []


def _pointcut_target(x: int) -> int:
    _CALLS.append(x)
    return x


def _other_target(x: int) -> int:
    return x


def test_a_woven_function_given_as_pointcut_selects_its_own_join_point(
    weaver: ah.Weaver,
) -> None:
    """``before(f)`` after ``weave(f)`` advises f's calls, and f is not called to decide."""
    seen: list[str] = []
    _CALLS.clear()
    weaver.weave(_pointcut_target, before=lambda ctx: None)
    weaver.weave(_other_target, before=lambda ctx: None)
    weaver.before(_pointcut_target)(lambda ctx: seen.append(ctx.joinpoint.name))
    _other_target(1)
    _pointcut_target(2)
    name = f"{__name__}._pointcut_target"
    assert _CALLS == [2]
    assert seen == [name]
    assert [row.joinpoint for row in ah.describe(_pointcut_target, weaver=weaver)] == [name] * 2


class _Woven:
    def m(self) -> str:
        return "m"


def test_a_woven_method_given_bound_or_from_its_class_selects_its_join_point(
    weaver: ah.Weaver,
) -> None:
    """``obj.m`` and ``Cls.m`` of a woven method both stand for the method's join point."""
    weaver.weave(_Woven.m, before=lambda ctx: None)
    obj = _Woven()
    for given in (obj.m, _Woven.m):
        assert as_pointcut(given) == Name(f"{__name__}._Woven.m")
        rows = ah.describe(given, weaver=weaver)
        assert {row.joinpoint for row in rows} == {f"{__name__}._Woven.m"}


def test_a_callable_that_cannot_take_the_join_point_is_refused_as_a_pointcut(
    weaver: ah.Weaver,
) -> None:
    """A zero-argument function given as a pointcut is refused at once, saying what a
    callable pointcut is, instead of a TypeError from inside the first match."""

    def g() -> None:
        pass

    with pytest.raises(InvalidPointcutError, match=r"g\(\) cannot be a pointcut.*weave it"):
        ah.describe(g)  # type: ignore[arg-type]
    with pytest.raises(InvalidPointcutError, match="cannot be a pointcut"):
        weaver.before(g)  # type: ignore[arg-type]
    assert Predicate(bool).matches(at("a"))  # a callable with no signature is taken on trust
