"""Helpers for testing code that uses aspecthook, and a pytest plugin.

``Recorder`` is an aspect that records every call at the join points it is woven into or
registered for, for assertions::

    rec = Recorder()
    with weave("mymod.parse", rec):
        mymod.parse("1")
    rec.assert_called_with("mymod.parse", "1")

(Through the module: a name bound by ``from mymod import parse`` before the weave still
points at the function without the proxy; see ``docs/known-issues.md``.)

The pytest plugin (loaded through the ``pytest11`` entry point, so installing aspecthook
is enough) provides fixtures that keep tests from leaking advice into each other:

``weaver``
    A private global ``Weaver``, cleared and closed after the test. It also requests
    ``isolate_default_weaver``.
``isolate_default_weaver``
    Yields ``aspecthook.default_weaver`` and, after the test, removes every registration
    and weave the test made on it (``@on(...)``, ``register(...)``, ``weave(...)``),
    leaving what was there before the test (advice registered at import, or by fixtures
    of a wider scope) in place; such advice that the test removed (``fn.remove()``) is
    registered again. A weave made before the test that the test undid (``unweave``,
    ``default_weaver.clear()``) is not made again (``docs/known-issues.md``). It is set
    up before the test's other function-scoped fixtures, so what they register is the
    test's and is removed too.
``recorder``
    A fresh ``Recorder`` with no pointcut, to ``weave(target, recorder)``; isolated too.
"""

from __future__ import annotations

import functools
import itertools
import reprlib
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field, fields
from types import CoroutineType
from typing import Any

from ._advice import OrderNames
from ._aspect import Aspect
from ._context import CallContext
from ._dispatch import after_error_advice, error_advice_follows
from ._fork import OwnsLock
from ._handle import Handle
from ._pointcut import PointcutLike, as_pointcut
from ._priority import Priority, PriorityLike
from ._weaver import Weaver, default_weaver

try:
    import pytest
except ImportError:  # pragma: no cover - the Recorder works without pytest; fixtures do not
    _HAVE_PYTEST = False
else:
    _HAVE_PYTEST = True

__all__ = ["Call", "Recorder"]

_SHOWN = 20  # recorded calls quoted in an assertion message
_SHORT = reprlib.Repr()  # their arguments, shortened so the message stays readable
_SHORT.maxstring = _SHORT.maxother = 40


@dataclass(frozen=True)
class Call:
    """One completed call recorded by a ``Recorder``.

    ``index`` is the order in which calls *started* (0, 1, ...), so nested calls read
    outer first; ``exception`` is what the call raised (``result`` is then ``None``). A
    call whose exception error advice recovered (``ctx.recover(value)``) returned to its
    caller: its ``result`` is that value, ``exception`` is ``None`` (``ok`` is true) and
    ``recovered_from`` holds the exception (``recovered`` is true). That is known where
    ``Timed`` knows it (``docs/known-issues.md``): elsewhere (inside other around advice
    such as ``Retry``, at an async join point) the call is recorded with its exception.
    ``names`` holds every name the join point answers to (aliases given with
    ``weave(..., name=)`` included), so pointcuts can select calls; ``joinpoint`` is the
    join point itself, which a predicate pointcut is given.
    """

    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    result: Any
    exception: BaseException | None
    index: int
    thread: threading.Thread = field(repr=False)
    instance: Any = field(default=None, repr=False)
    names: frozenset[str] = field(default=frozenset(), repr=False)
    joinpoint: Any = field(default=None, repr=False, compare=False)
    recovered_from: Exception | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        """Whether the call returned instead of raising (error advice recovering it
        included: the caller got a value)."""
        return self.exception is None

    @property
    def recovered(self) -> bool:
        """Whether error advice recovered the call from ``recovered_from``."""
        return self.recovered_from is not None


class _Bookkeeping(threading.local):
    """Per thread: whether a ``Recorder`` is noting a call right now. What it calls for
    that (``threading.current_thread``, builtins) may be woven with a Recorder too: such
    calls run unrecorded, or recording one would record the next, without end."""

    active = False


_BOOKKEEPING = _Bookkeeping()


class Recorder(Aspect, OwnsLock):
    """Records every call at the join points it advises: name, arguments, outcome, order.

    ``Recorder('train_*')`` then ``register(...)`` records named join points;
    ``weave(target, Recorder())`` records a callable. It is around advice with
    ``LOWEST`` priority by default, so it sits innermost and records what reaches the
    target itself: the arguments after other advice rewrote them, every attempt a
    ``Retry`` makes, nothing for a call that before advice skipped. ``priority=
    Priority.HIGHEST`` puts it outside the other around advice instead (a call that
    ``Retry`` repeats is then one call, with its final outcome); before and after advice
    still run outside every around advice, so it still sees the arguments they rewrote
    and the result before after advice changes it. An ``async def`` join point, or a
    synchronous callable that returns a coroutine (an async function behind a plain
    decorator), is recorded when its coroutine completes; a generator function's result
    is the generator it returns. A call that error advice recovers is recorded with the
    value the caller got (see ``Call``). ``errors=`` is ``Aspect``'s. A copy
    (``copy.copy`` or ``copy.deepcopy``) starts from the calls recorded so far, in a list
    of its own (the ``Call`` records themselves are kept as they are, even by a deep
    copy), and records apart from this one. Pickled (``multiprocessing`` hands it to a
    spawned worker so), it carries its options and none of the calls: each holds the
    thread it ran in, which belongs to this process and cannot be pickled; the worker's
    copy records its own calls, numbered from 0.
    """

    priority: PriorityLike = Priority.LOWEST

    def __init__(
        self,
        pointcut: PointcutLike | None = None,
        *,
        priority: PriorityLike | None = None,
        name: str | None = None,
        errors: str | None = None,
        order_after: OrderNames | None = None,
        order_before: OrderNames | None = None,
    ) -> None:
        super().__init__(
            pointcut=pointcut,
            priority=priority,
            name=name,
            errors=errors,
            order_after=order_after,
            order_before=order_before,
        )
        self._own_lock()  # a fork while another thread records: not held
        self._calls: list[Call] = []
        self._order = itertools.count()

    def _reset_locks(self) -> None:
        """A new lock (also in a forked child, where another thread may have held it)."""
        self._lock = threading.Lock()

    def _copied_data(self, memo: dict[int, Any] | None) -> dict[str, Any]:
        """The calls so far, for a copy that records apart (``OwnsLock``); its calls are
        numbered on from them. A deep copy keeps each ``Call`` as it is: a record of what
        happened, holding the thread and join point it happened at."""
        calls = list(self._calls)
        order = itertools.count(1 + max((c.index for c in calls), default=-1))
        if memo is not None:
            memo.update((id(kept), kept) for kept in (*calls, order))
        return {"_calls": calls, "_order": order}

    def _pickled_data(self) -> dict[str, Any]:
        """None of the calls (``OwnsLock``): a ``Call`` holds a thread of this process."""
        return {"_calls": []}

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        del state["_order"]  # made anew: an itertools.count stops pickling in Python 3.14
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__({**state, "_order": itertools.count()})

    # -- the advice -----------------------------------------------------------------------

    @default_weaver.around()
    def record(self, ctx: CallContext, proceed: Callable[..., Any]) -> Any:
        """Note the call's arguments now and its result or exception when it completes."""
        if _BOOKKEEPING.active:  # called by a Recorder's own bookkeeping
            return proceed()
        start = self._start(ctx)
        if ctx.joinpoint.is_async:
            return self._record_async(start, proceed)
        try:
            result = proceed()
        except BaseException as exc:
            if isinstance(exc, Exception) and error_advice_follows(ctx):
                # Recorded once the error advice has run: it may recover the call.
                settle = functools.partial(self._settle, start, ctx, exc)
                after_error_advice(ctx, settle)
            else:
                self._finish(start, None, exc)
            raise
        if type(result) is CoroutineType:  # an async function behind a plain decorator
            return self._record_async(start, lambda: result)
        self._finish(start, result, None)
        return result

    async def _record_async(
        self, start: dict[str, Any], proceed: Callable[[], Awaitable[Any]]
    ) -> Any:
        try:
            result = await proceed()
        except BaseException as exc:  # cancellation included: the call ended with it
            self._finish(start, None, exc)
            raise
        self._finish(start, result, None)
        return result

    def _start(self, ctx: CallContext) -> dict[str, Any]:
        jp = ctx.joinpoint
        order = self._order  # read once: clear() may replace it meanwhile
        _BOOKKEEPING.active = True
        try:
            return {
                "name": jp.name,
                "names": frozenset(n for n in jp.names if not n.startswith("@")),
                "args": tuple(ctx.args),
                "kwargs": dict(ctx.kwargs),
                "instance": ctx.instance,
                "joinpoint": jp,
                "thread": threading.current_thread(),
                "index": next(order),
                "numbering": order,  # which clear() the call started after
            }
        finally:
            _BOOKKEEPING.active = False

    def _settle(
        self, start: dict[str, Any], ctx: CallContext, exc: Exception, recovered: bool
    ) -> None:
        """Record a call that raised ``exc`` once its error advice has run: with the value
        it was recovered with (``ctx.result``), or else with ``exc``."""
        if recovered:
            self._finish(start, ctx.result, None, recovered_from=exc)
        else:
            self._finish(start, None, exc)

    def _finish(
        self,
        start: dict[str, Any],
        result: Any,
        exc: BaseException | None,
        *,
        recovered_from: Exception | None = None,
    ) -> None:
        _BOOKKEEPING.active = True
        try:
            numbering = start.pop("numbering")
            call = Call(result=result, exception=exc, recovered_from=recovered_from, **start)
            with self._lock:
                if numbering is self._order:  # else clear() came after it started
                    self._calls.append(call)
        finally:
            _BOOKKEEPING.active = False

    # -- reading ----------------------------------------------------------------------------

    @property
    def calls(self) -> list[Call]:
        """The completed calls, in the order they started (a copy)."""
        with self._lock:
            return sorted(self._calls, key=lambda c: c.index)

    def names(self) -> list[str]:
        """The join point name of every completed call, in the order they started."""
        return [c.name for c in self.calls]

    def calls_to(self, pointcut: PointcutLike) -> list[Call]:
        """The calls whose join point ``pointcut`` selects: a name, a glob or a Pointcut."""
        selector = as_pointcut(pointcut)
        return [c for c in self.calls if selector.matches(_CallPoint(c))]

    def last(self, pointcut: PointcutLike | None = None) -> Call:
        """The call that started last (of those ``pointcut`` selects); AssertionError if none."""
        found = self.calls if pointcut is None else self.calls_to(pointcut)
        if not found:
            raise AssertionError(f"expected a call to {_label(pointcut)}; {self._seen()}")
        return found[-1]

    def clear(self) -> None:
        """Forget every recorded call, and the calls in progress; indexes start again
        at 0."""
        with self._lock:
            self._calls.clear()
            self._order = itertools.count()

    def __len__(self) -> int:
        with self._lock:
            return len(self._calls)

    def __iter__(self) -> Iterator[Call]:
        return iter(self.calls)

    # -- asserting ----------------------------------------------------------------------------

    def assert_called(self, pointcut: PointcutLike, times: int | None = None) -> list[Call]:
        """Assert calls to ``pointcut`` happened (exactly ``times`` if given); return them."""
        found = self.calls_to(pointcut)
        if (times is None and not found) or (times is not None and len(found) != times):
            if times == 0:
                expected = f"expected no call to {_label(pointcut)}"
            else:
                how_often = "at least once" if times is None else _times(times)
                expected = f"expected {_label(pointcut)} to be called {how_often}"
            raise AssertionError(f"{expected}, it was called {_times(len(found))}; {self._seen()}")
        return found

    def assert_not_called(self, pointcut: PointcutLike) -> None:
        """Assert no call to ``pointcut`` was recorded."""
        self.assert_called(pointcut, times=0)

    def assert_called_with(self, pointcut: PointcutLike, /, *args: Any, **kwargs: Any) -> Call:
        """Assert the last call to ``pointcut`` got exactly these arguments; return it."""
        found = self.calls_to(pointcut)
        call = found[-1] if found else self.last(pointcut)  # last() raises, saying why
        if call.args != args or call.kwargs != kwargs:
            raise AssertionError(
                f"expected the last call to {_label(pointcut)} with "
                f"{_signature(args, kwargs)}, got {_signature(call.args, call.kwargs)}"
                + _earlier(found, args, kwargs)
            )
        return call

    def _seen(self) -> str:
        calls = self.calls
        if not calls:
            return "nothing was recorded"
        return f"recorded {len(calls)} call(s): {_listing(calls)}"

    def __repr__(self) -> str:
        return f"<Recorder {self.name!r}, {len(self)} call(s)>"


class _CallPoint:
    """A recorded call as a pointcut sees it: the names the call had, what the call
    recorded (``args``, ``result``, ``ok``: a predicate was given the ``Call``), and its
    join point's other attributes (``is_async``, ``target``), as advice gets them."""

    __slots__ = ("_call",)

    def __init__(self, call: Call) -> None:
        self._call = call

    @property
    def names(self) -> frozenset[str]:
        return self._call.names

    @property
    def name(self) -> str:
        return self._call.name

    def __getattr__(self, attr: str) -> Any:
        if attr in _CALL_ATTRIBUTES:
            return getattr(self._call, attr)
        joinpoint = self._call.joinpoint
        if joinpoint is None:  # a Call made by hand
            raise AttributeError(f"the call {self._call.name!r} has no join point: {attr!r}")
        return getattr(joinpoint, attr)


#: What a predicate reads from the recorded call itself rather than from its join point.
_CALL_ATTRIBUTES = frozenset(
    [f.name for f in fields(Call)]
    + [name for name, value in vars(Call).items() if isinstance(value, property)]
)


def _label(pointcut: PointcutLike | None) -> str:
    """The pointcut as an assertion message names it: a woven function by its join point
    name (``Name('app.parse')``), not by the proxy's address."""
    if pointcut is None:
        return "anything"
    if isinstance(pointcut, str):
        return repr(pointcut)
    return repr(as_pointcut(pointcut))


def _listing(calls: list[Call]) -> str:
    """``name(args)`` of each call (arguments shortened), and what a failed one raised."""
    shown = [_short_call(call) for call in calls[:_SHOWN]]
    return ", ".join(shown) + (", ..." if len(calls) > _SHOWN else "")


def _short_call(call: Call) -> str:
    parts = [_SHORT.repr(a) for a in call.args]
    parts += [f"{k}={_SHORT.repr(v)}" for k, v in call.kwargs.items()]
    text = f"{call.name}({', '.join(parts)})"
    if call.exception is not None:
        text += f" raised {type(call.exception).__name__}"
    return text


def _earlier(found: list[Call], args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """What the calls before the last one had, for ``assert_called_with``'s message: the
    arguments a test expected often went to an earlier call."""
    if len(found) < 2:
        return ""
    earlier = [c.index for c in found[:-1] if c.args == args and c.kwargs == kwargs]
    note = (
        f" (the call with index {earlier[-1]} had those arguments: assert_called_with "
        "checks the last call; use calls_to() to check another)"
        if earlier
        else ""
    )
    return f"; all {len(found)} calls to it: {_listing(found)}{note}"


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


def _signature(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"({', '.join(parts)})"


# -- the pytest plugin --------------------------------------------------------------------------


def _isolate(target: Weaver) -> Callable[[], None]:
    """Snapshot ``target``'s registrations; the returned function removes newer ones."""
    from ._weave import WEAVES

    # Keep the handles themselves, not their ids: a removed handle could be collected
    # and its id reused by a handle the test makes.
    known = {id(h): h for h in target._handles}
    registrations = target._registrations()
    records = {id(r): r for r in WEAVES}

    def undo() -> None:
        failures: list[BaseException] = []
        for handle in reversed([h for h in target._handles if id(h) not in known]):
            try:
                _remove_added(target, handle, known)
            except Exception as exc:
                failures.append(exc)
        # What the test removed of the advice registered before it (``fn.remove()`` on
        # advice registered at import) is registered again, so later tests still have it.
        for handle in registrations:
            if not handle.active:
                try:
                    target._register_again(handle)
                except Exception as exc:
                    failures.append(exc)
        # Skipped weaves leave a record but no tracked handle.
        for record in [r for r in WEAVES if id(r) not in records and r.weaver is target]:
            WEAVES.remove(record)
        if failures:
            raise failures[0]

    return undo


def _remove_added(target: Weaver, handle: Handle, known: dict[int, Handle]) -> None:
    """Remove ``handle``, made during the test. A decorator the test stacked on one
    registered before it (``on('b')(advice_registered_at_import)``) shares that one's
    handle: only the test's part goes, the earlier registration stays."""
    if known.get(id(handle)) is handle:
        return  # registered before the test
    parts = target._unstack(handle)
    if parts is None:
        handle.remove()
        return
    first, outer = parts
    outer.remove()
    _remove_added(target, first, known)


def _close(weaver: Weaver) -> None:
    from ._weave import WEAVES

    weaver.close()
    for record in [r for r in WEAVES if r.weaver is weaver]:
        WEAVES.remove(record)


_ISOLATE = "isolate_default_weaver"


def _isolate_first(item: Any) -> None:
    """Set up ``isolate_default_weaver`` before the test's other function-scoped fixtures.

    pytest sets up fixtures of one scope in the order the test names them (autouse ones
    first), so ``def test(woven, weaver)`` would take its snapshot after ``woven``
    registered, and leave that registration to the next tests. Fixtures of a wider scope
    stay before it: what they register outlives the test on purpose.
    """
    names = getattr(item, "fixturenames", None)
    info = getattr(item, "_fixtureinfo", None)
    if not isinstance(names, list) or _ISOLATE not in names or info is None:
        return
    defs = getattr(info, "name2fixturedefs", {})

    def function_scoped(name: str) -> bool:
        found = defs.get(name)
        return not found or getattr(found[-1], "scope", "function") == "function"

    names.remove(_ISOLATE)
    first = next((i for i, name in enumerate(names) if function_scoped(name)), len(names))
    names.insert(first, _ISOLATE)


if _HAVE_PYTEST:

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(item: pytest.Item) -> None:
        """Before pytest sets up the test's fixtures: see ``_isolate_first``."""
        _isolate_first(item)

    @pytest.fixture
    def isolate_default_weaver() -> Iterator[Weaver]:
        """The default weaver; what the test registers or weaves on it is removed after."""
        undo = _isolate(default_weaver)
        yield default_weaver
        undo()

    @pytest.fixture
    def weaver(request: pytest.FixtureRequest, isolate_default_weaver: Weaver) -> Iterator[Weaver]:
        """A private global weaver, cleared and closed after the test."""
        private = Weaver(f"test {request.node.name}")
        yield private
        _close(private)

    @pytest.fixture
    def recorder(isolate_default_weaver: Weaver) -> Recorder:
        """A fresh ``Recorder`` to weave into a target: ``weave(fn, recorder)``."""
        return Recorder()
