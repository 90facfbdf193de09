"""``@joinpoint``: a declared join point behaves as the function or method it replaces.

Every flavour is declared twice at module level, once plain and once as a join point, so
each test compares the join point with its undecorated twin reached the same way.
"""

from __future__ import annotations

import asyncio
import copy
import gc
import inspect
import pickle
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

import aspecthook as ah
from aspecthook.errors import AspectDefinitionError

# -- the subjects: plain originals and their join-point twins ------------------------------


def plain_scale(x: int, factor: int = 2) -> int:
    """Multiply x by factor."""
    return x * factor


@ah.joinpoint
def scale(x: int, factor: int = 2) -> int:
    """Multiply x by factor."""
    return x * factor


async def plain_ascale(x: int, factor: int = 2) -> int:
    """Multiply x by factor, asynchronously."""
    await asyncio.sleep(0)
    return x * factor


@ah.joinpoint
async def ascale(x: int, factor: int = 2) -> int:
    """Multiply x by factor, asynchronously."""
    await asyncio.sleep(0)
    return x * factor


@ah.joinpoint("test_joinpoint.renamed")
def renamed(x: int) -> int:
    """A join point with an explicit name."""
    return x + 1


class Plain:
    """The originals of the method flavours."""

    def method(self, x: int, factor: int = 2) -> int:
        """Multiply x by factor (method)."""
        return x * factor

    @classmethod
    def cmethod(cls, x: int, factor: int = 2) -> int:
        """Multiply x by factor (classmethod)."""
        return x * factor

    @staticmethod
    def smethod(x: int, factor: int = 2) -> int:
        """Multiply x by factor (staticmethod)."""
        return x * factor

    async def amethod(self, x: int, factor: int = 2) -> int:
        """Multiply x by factor (async method)."""
        await asyncio.sleep(0)
        return x * factor


class Woven:
    """The same methods as join points (the decorator above @classmethod/@staticmethod)."""

    @ah.joinpoint
    def method(self, x: int, factor: int = 2) -> int:
        """Multiply x by factor (method)."""
        return x * factor

    @ah.joinpoint
    @classmethod
    def cmethod(cls, x: int, factor: int = 2) -> int:
        """Multiply x by factor (classmethod)."""
        return x * factor

    @ah.joinpoint
    @staticmethod
    def smethod(x: int, factor: int = 2) -> int:
        """Multiply x by factor (staticmethod)."""
        return x * factor

    @ah.joinpoint
    async def amethod(self, x: int, factor: int = 2) -> int:
        """Multiply x by factor (async method)."""
        await asyncio.sleep(0)
        return x * factor


class Named:
    """Join points with explicit names on each kind of method."""

    @ah.joinpoint("test_joinpoint.named.method")
    def method(self, x: int) -> int:
        return x + 1

    @ah.joinpoint("test_joinpoint.named.cmethod")
    @classmethod
    def cmethod(cls, x: int) -> int:
        return x + 1

    @ah.joinpoint("test_joinpoint.named.smethod")
    @staticmethod
    def smethod(x: int) -> int:
        return x + 1

    @ah.joinpoint("test_joinpoint.named.amethod")
    async def amethod(self, x: int) -> int:
        return x + 1


# -- flavours --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Flavour:
    """One way of reaching a join point, with its undecorated twin reached the same way."""

    name: str
    woven: Callable[..., Any]
    plain: Callable[..., Any]
    instance: object
    is_async: bool

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        return asyncio.run(result) if self.is_async else result


def _flavour(kind: str) -> Flavour:
    woven, plain = Woven(), Plain()
    module = __name__
    table: dict[str, Flavour] = {
        "function": Flavour(f"{module}.scale", scale, plain_scale, None, False),
        "async_function": Flavour(f"{module}.ascale", ascale, plain_ascale, None, True),
        "method": Flavour(f"{module}.Woven.method", woven.method, plain.method, woven, False),
        "async_method": Flavour(
            f"{module}.Woven.amethod", woven.amethod, plain.amethod, woven, True
        ),
        "classmethod": Flavour(
            f"{module}.Woven.cmethod", Woven.cmethod, Plain.cmethod, Woven, False
        ),
        "classmethod_via_instance": Flavour(
            f"{module}.Woven.cmethod", woven.cmethod, plain.cmethod, Woven, False
        ),
        "staticmethod": Flavour(
            f"{module}.Woven.smethod", Woven.smethod, Plain.smethod, None, False
        ),
        "staticmethod_via_instance": Flavour(
            f"{module}.Woven.smethod", woven.smethod, plain.smethod, None, False
        ),
    }
    return table[kind]


@pytest.fixture(
    params=[
        "function",
        "async_function",
        "method",
        "async_method",
        "classmethod",
        "classmethod_via_instance",
        "staticmethod",
        "staticmethod_via_instance",
    ]
)
def flavour(request: pytest.FixtureRequest) -> Flavour:
    """Each kind of callable a join point can be declared on."""
    return _flavour(request.param)


def _recorder(weaver: ah.Weaver, name: str) -> list[Any]:
    """Register before advice on ``name`` that records each call's context."""
    seen: list[Any] = []

    @weaver.before(name)
    def record(ctx: Any) -> None:
        seen.append((ctx.joinpoint.name, ctx.instance, list(ctx.args), dict(ctx.kwargs)))

    return seen


# -- behaving as the original ------------------------------------------------------------------


def test_signature_is_the_originals(flavour: Flavour) -> None:
    """inspect.signature of a join point is that of the original, bound the same way."""
    assert inspect.signature(flavour.woven) == inspect.signature(flavour.plain)


def test_name_and_doc_are_the_originals(flavour: Flavour) -> None:
    """__name__ and __doc__ are the original's."""
    assert flavour.woven.__name__ == flavour.plain.__name__.removeprefix("plain_")
    assert flavour.woven.__doc__ == flavour.plain.__doc__


def test_qualname_is_the_originals(flavour: Flavour) -> None:
    """__qualname__ is the original's own (the join point's default name ends with it)."""
    assert flavour.name == f"{__name__}.{flavour.woven.__qualname__}"


def test_iscoroutinefunction_is_the_originals(flavour: Flavour) -> None:
    """inspect.iscoroutinefunction gives the original's answer, for sync and async alike."""
    assert inspect.iscoroutinefunction(flavour.woven) is flavour.is_async
    assert inspect.iscoroutinefunction(flavour.plain) is flavour.is_async


@pytest.mark.parametrize("kind", ["async_function", "async_method"])
def test_an_advised_async_join_point_makes_a_coroutine_named_as_the_originals(
    kind: str, weaver: ah.Weaver
) -> None:
    """With advice, the coroutine of an async join point has the original's __name__ and
    __qualname__, which its repr and the never-awaited warning show, not the dispatcher's."""
    flavour = _flavour(kind)
    seen = _recorder(weaver, flavour.name)
    name, qualname = flavour.woven.__name__, flavour.woven.__qualname__
    coro = flavour.woven(3)
    assert (coro.__name__, coro.__qualname__) == (name, qualname)
    assert repr(coro).startswith(f"<coroutine object {qualname} at ")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del coro
        gc.collect()
    assert [str(w.message) for w in caught] == [f"coroutine '{qualname}' was never awaited"]
    assert flavour.call(flavour.woven, 3) == 6
    assert len(seen) == 1  # the coroutine never awaited ran no advice


def test_idle_joinpoint_returns_what_the_original_returns(flavour: Flavour) -> None:
    """With no advice, a join point returns exactly what the original returns."""
    assert flavour.call(flavour.woven, 3) == flavour.call(flavour.plain, 3) == 6
    assert flavour.call(flavour.woven, 3, factor=5) == 15


def test_wrapped_is_the_original_and_runs_without_advice(
    flavour: Flavour, weaver: ah.Weaver
) -> None:
    """__wrapped__ is the original callable: calling it bypasses the advice."""
    seen = _recorder(weaver, flavour.name)
    original = flavour.woven.__wrapped__
    assert not hasattr(original, "_self_joinpoint")
    assert flavour.call(original, 4) == 8
    assert seen == []


def test_default_name_is_module_qualname(flavour: Flavour, weaver: ah.Weaver) -> None:
    """Without a name, a join point is named by the dotted module.qualname."""
    seen = _recorder(weaver, flavour.name)
    flavour.call(flavour.woven, 2)
    assert [s[0] for s in seen] == [flavour.name]


def test_ctx_instance_is_the_bound_self_or_cls(flavour: Flavour, weaver: ah.Weaver) -> None:
    """ctx.instance is the bound self (method), cls (classmethod) or None; args exclude it."""
    seen = _recorder(weaver, flavour.name)
    flavour.call(flavour.woven, 2, factor=3)
    (_, instance, args, kwargs) = seen[0]
    assert instance is flavour.instance
    assert args == [2]
    assert kwargs == {"factor": 3}


def test_advice_changes_the_result_of_every_flavour(flavour: Flavour, weaver: ah.Weaver) -> None:
    """Advice reaches every flavour, sync and async, and can change its result."""

    @weaver.after(flavour.name)
    def add_one(ctx: Any) -> None:
        ctx.result += 1

    assert flavour.call(flavour.woven, 3) == 7
    add_one.remove()
    assert flavour.call(flavour.woven, 3) == 6


# -- methods called through the class ----------------------------------------------------------


@pytest.mark.parametrize("attr", ["method", "amethod"])
def test_method_called_via_class_with_explicit_self(attr: str, weaver: ah.Weaver) -> None:
    """Woven.method(obj, x) works as on the original, idle or advised; ctx.instance is obj."""
    obj = Woven()

    def call() -> Any:
        result = getattr(Woven, attr)(obj, 5)
        return asyncio.run(result) if inspect.iscoroutine(result) else result

    assert call() == 10
    seen = _recorder(weaver, f"{__name__}.Woven.{attr}")
    assert call() == 10
    assert seen[0][1] is obj
    assert seen[0][2] == [5]


def test_descriptor_on_class_gives_the_same_signature_as_the_plain_function() -> None:
    """Woven.method reached through the class keeps self in its signature, like Plain.method."""
    assert inspect.signature(Woven.method) == inspect.signature(Plain.method)
    assert next(iter(inspect.signature(Woven.method).parameters)) == "self"


# -- explicit names ----------------------------------------------------------------------------


def test_explicit_name(weaver: ah.Weaver) -> None:
    """@joinpoint('name') names the join point; advice on that name reaches it."""
    seen = _recorder(weaver, "test_joinpoint.renamed")
    assert renamed(1) == 2
    assert [s[0] for s in seen] == ["test_joinpoint.renamed"]
    assert renamed.__name__ == "renamed"


@pytest.mark.parametrize(
    ("attr", "via_instance", "expected_instance"),
    [
        ("method", True, "obj"),
        ("cmethod", False, "cls"),
        ("cmethod", True, "cls"),
        ("smethod", False, None),
        ("amethod", True, "obj"),
    ],
)
def test_explicit_name_on_methods(
    weaver: ah.Weaver, attr: str, via_instance: bool, expected_instance: str | None
) -> None:
    """@joinpoint('name') works on every kind of method; ctx.instance is still self or cls."""
    seen = _recorder(weaver, f"test_joinpoint.named.{attr}")
    obj = Named()
    result = getattr(obj if via_instance else Named, attr)(1)
    if inspect.iscoroutine(result):
        result = asyncio.run(result)
    assert result == 2
    instance = {"obj": obj, "cls": Named, None: None}[expected_instance]
    assert [(s[0], s[1]) for s in seen] == [(f"test_joinpoint.named.{attr}", instance)]


def test_explicit_name_shows_in_describe() -> None:
    """describe() lists a declared join point under its given name."""
    rows = ah.describe("test_joinpoint.renamed")
    assert [r.joinpoint for r in rows] == ["test_joinpoint.renamed"]


def test_joinpoint_on_a_private_weaver_behaves_the_same(weaver: ah.Weaver) -> None:
    """weaver.joinpoint declares join points just as the module-level decorator does."""

    @weaver.joinpoint("test_joinpoint.private_weaver")
    def double(x: int) -> int:
        """Double x."""
        return 2 * x

    seen = _recorder(weaver, "test_joinpoint.private_weaver")
    assert double(4) == 8
    assert double.__doc__ == "Double x."
    assert len(seen) == 1


# -- pickling and copying ----------------------------------------------------------------------


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
@pytest.mark.parametrize("jp", [scale, ascale, renamed], ids=["function", "async", "named"])
def test_module_level_joinpoint_pickles_by_reference(jp: Any, protocol: int) -> None:
    """pickle round-trips a module-level join point to the very same object."""
    assert pickle.loads(pickle.dumps(jp, protocol=protocol)) is jp


@pytest.mark.parametrize("via_instance", [False, True], ids=["via_class", "via_instance"])
@pytest.mark.parametrize("attr", ["method", "cmethod", "smethod"])
def test_method_joinpoint_pickles_by_reference(
    attr: str, via_instance: bool, weaver: ah.Weaver
) -> None:
    """A method join point pickles as the original does, and the copy is still advised."""
    owner: Any = Woven() if via_instance else Woven
    plain_owner: Any = Plain() if via_instance else Plain
    pickle.dumps(getattr(plain_owner, attr))  # the original pickles, so must the join point
    restored = pickle.loads(pickle.dumps(getattr(owner, attr)))
    seen = _recorder(weaver, f"{__name__}.Woven.{attr}")
    args = (Woven(), 3) if attr == "method" and not via_instance else (3,)
    assert restored(*args) == 6
    assert len(seen) == 1


def test_copy_returns_the_joinpoint_itself() -> None:
    """copy.copy and copy.deepcopy return a join point itself, as they do a function."""
    assert copy.copy(plain_scale) is plain_scale
    assert copy.copy(scale) is scale
    assert copy.deepcopy(scale) is scale


# -- what cannot be a join point ---------------------------------------------------------------


def test_joinpoint_refuses_a_non_string_name() -> None:
    """@joinpoint(42) is refused with a message showing the two valid forms."""
    with pytest.raises(AspectDefinitionError, match=r"@joinpoint\('train_iter'\)"):
        ah.joinpoint(42)  # type: ignore[call-overload]


@pytest.mark.parametrize("name", ["", "   "])
def test_joinpoint_refuses_an_empty_name(name: str) -> None:
    """An empty name is refused; it used to fall back to module.qualname without a word,
    so advice written for the name it was meant to have never ran."""
    with pytest.raises(AspectDefinitionError, match=r"@joinpoint takes a name string"):
        ah.joinpoint(name)


def test_joinpoint_refuses_a_non_callable() -> None:
    """@joinpoint('name') on something that is not a function or method is refused."""
    with pytest.raises(AspectDefinitionError, match="needs a function or method"):
        ah.joinpoint("test_joinpoint.not_callable")(42)  # type: ignore[type-var]


def test_wrapped_original_is_a_plain_function() -> None:
    """The original under a module-level join point is the plain function object."""
    assert type(scale.__wrapped__) is types.FunctionType
    assert inspect.unwrap(scale) is scale.__wrapped__
