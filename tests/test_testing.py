"""aspecthook.testing: the Recorder aspect and the pytest plugin's fixtures."""

from __future__ import annotations

import asyncio
import functools
import subprocess
import sys
import threading
from typing import Any

import pytest

import aspecthook as ah
from aspecthook import _log
from aspecthook.testing import Call, Recorder

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _keep_the_package_logger(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test ends with the package logger it started with.

    An in-process ``pytester`` run whose tests log (a skipped weave) may be the first to
    import structlog, and with it rich: the package caches a structlog logger made from
    those modules, and the run then takes them out of ``sys.modules`` again. A later
    logged exception would render through that orphaned structlog and rich, which import
    fresh copies of rich's modules halfway, so rich meets a ``Text`` of another class.
    """
    monkeypatch.setattr(_log, "_logger", _log._logger)


def add(a: int, b: int = 0) -> int:
    return a + b


def fail(message: str) -> None:
    raise ValueError(message)


async def slow_echo(value: str, delay: float) -> str:
    await asyncio.sleep(delay)
    return value


class Shop:
    def price(self, item: str, *, qty: int = 1) -> int:
        return 3 * qty


# -- Recorder -------------------------------------------------------------------------------


def test_records_a_function_call(weaver: ah.Weaver) -> None:
    """A woven function's call is recorded with name, arguments, result, order and thread."""
    rec = Recorder()
    weaver.weave(add, rec)
    assert add(1, b=2) == 3
    [call] = rec.calls
    assert call == Call(
        name=f"{__name__}.add",
        args=(1,),
        kwargs={"b": 2},
        result=3,
        exception=None,
        index=0,
        thread=threading.current_thread(),
        names=frozenset({f"{__name__}.add"}),
    )
    assert call.ok
    assert call.thread is threading.current_thread()


def test_records_the_exception_and_lets_it_propagate(weaver: ah.Weaver) -> None:
    """A raising call is recorded with its exception, which propagates unchanged."""
    rec = Recorder()
    weaver.weave(fail, rec)
    with pytest.raises(ValueError, match="nope") as info:
        fail("nope")
    [call] = rec.calls
    assert call.exception is info.value
    assert call.result is None
    assert not call.ok


def test_records_method_calls_with_their_instance(weaver: ah.Weaver) -> None:
    """On a method the instance is kept apart from the arguments."""
    rec = Recorder()
    weaver.weave(Shop, rec)
    shop = Shop()
    assert shop.price("tea", qty=2) == 6
    call = rec.assert_called_with(f"{__name__}.Shop.price", "tea", qty=2)
    assert call.instance is shop


def test_records_async_calls_when_they_complete(weaver: ah.Weaver) -> None:
    """An async call is recorded on completion, with its result and its start order."""
    rec = Recorder()
    weaver.weave(slow_echo, rec)

    async def main() -> tuple[str, str]:
        return await asyncio.gather(slow_echo("slow", 0.05), slow_echo("fast", 0.0))

    assert list(asyncio.run(main())) == ["slow", "fast"]
    assert [(c.args[0], c.result, c.index) for c in rec.calls] == [
        ("slow", "slow", 0),
        ("fast", "fast", 1),
    ]


def test_records_async_exceptions(weaver: ah.Weaver) -> None:
    """An async call that raises is recorded with the exception."""
    rec = Recorder()
    weaver.weave(slow_echo, rec)
    with pytest.raises(TypeError):
        asyncio.run(slow_echo("x", "not a number"))  # type: ignore[arg-type]
    [call] = rec.calls
    assert isinstance(call.exception, TypeError)


def _wrapped_async(fn: Any) -> Any:
    """A plain decorator (functools.wraps) around an async function: a sync callable."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return call


@_wrapped_async
async def fetch(value: int) -> int:
    await asyncio.sleep(0)
    if value < 0:
        raise ValueError("backend down")
    return value * 2


@pytest.mark.parametrize(("value", "ok"), [(2, True), (-1, False)])
def test_records_a_coroutine_of_a_sync_callable_when_it_completes(
    weaver: ah.Weaver, value: int, ok: bool
) -> None:
    """An async function behind a plain decorator is recorded with the coroutine's
    outcome, not with the coroutine object as a successful result."""
    rec = Recorder()
    weaver.weave(fetch, rec)
    if ok:
        assert asyncio.run(fetch(value)) == 4
    else:
        with pytest.raises(ValueError, match="backend down"):
            asyncio.run(fetch(value))
    [call] = rec.calls
    assert call.ok is ok
    assert call.result == (4 if ok else None)
    assert isinstance(call.exception, ValueError) is not ok


def test_recorder_takes_the_errors_option_of_every_aspect() -> None:
    """Recorder(errors=...) is accepted like any shipped aspect's, and checked."""
    assert Recorder(errors="log").errors == "log"
    with pytest.raises(ah.errors.InvalidOptionError, match="errors"):
        Recorder(errors="ignore")


def test_pointcut_in_the_constructor(weaver: ah.Weaver) -> None:
    """Recorder('glob') registered on a weaver records the declared join points it selects."""

    @weaver.joinpoint("rec_test.load")
    def load(path: str) -> str:
        return path.upper()

    @weaver.joinpoint("rec_test.save")
    def save(path: str) -> None:
        load(path)

    @weaver.joinpoint("other.thing")
    def other() -> None:
        pass

    rec = Recorder("rec_test.*")
    weaver.register(rec)
    save("a")
    other()
    assert rec.names() == ["rec_test.save", "rec_test.load"]  # in the order they started
    assert [c.name for c in rec.calls_to("rec_test.load")] == ["rec_test.load"]


def test_aliases_select_calls(weaver: ah.Weaver) -> None:
    """A name given with weave(..., name=) selects the calls too."""
    rec = Recorder()
    weaver.weave(add, rec, name="summing")
    add(1)
    rec.assert_called("summing", times=1)
    rec.assert_called("*.add")


def test_calls_to_takes_a_predicate_over_the_join_point(weaver: ah.Weaver) -> None:
    """A predicate pointcut takes the join point, as in advice: ``calls_to`` gives it the
    call's join point (its ``is_async``, ``target``), with the names the call had."""
    rec = Recorder()
    weaver.weave(add, rec)
    weaver.weave(slow_echo, rec)
    add(1)
    asyncio.run(slow_echo("x", 0))
    [call] = rec.calls_to(ah.Predicate(lambda jp: jp.is_async))
    assert call.name == f"{__name__}.slow_echo"
    assert rec.calls_to(lambda jp: not jp.is_async and "add" in jp.name) == rec.calls[:1]
    assert rec.calls_to(ah.Glob("*.add") & ah.Predicate(lambda jp: jp.is_async)) == []


def test_calls_to_predicate_still_reads_what_the_call_recorded(weaver: ah.Weaver) -> None:
    """A predicate in ``calls_to`` / ``assert_called`` / ``last`` reads the call's own
    record too (``args``, ``result``, ``exception``, ``ok``), as it did when it was given
    the ``Call``; those now raised AttributeError (the join point has none of them)."""
    rec = Recorder()
    weaver.weave(add, rec)
    add(1)
    add(2, b=3)
    [call] = rec.calls_to(lambda c: c.args == (2,) and c.kwargs == {"b": 3})
    assert call.result == 5
    assert rec.last(lambda c: c.result == 1).index == 0
    rec.assert_called(lambda c: c.ok and c.exception is None and not c.is_async, times=2)
    assert rec.calls_to(lambda c: c.joinpoint.name == c.name) == rec.calls


def test_assert_called_counts_and_explains(weaver: ah.Weaver) -> None:
    """assert_called checks the count; a failure says what was recorded."""
    rec = Recorder()
    weaver.weave(add, rec)
    add(1)
    add(2)
    assert len(rec.assert_called("*.add", times=2)) == 2
    with pytest.raises(AssertionError, match=r"called once, it was called 2 times; recorded 2"):
        rec.assert_called("*.add", times=1)
    with pytest.raises(AssertionError, match=r"at least once, it was called 0 times"):
        rec.assert_called("missing")
    rec.assert_not_called("missing")
    with pytest.raises(AssertionError, match=r"^expected no call to .*add', it was called 2 times"):
        rec.assert_not_called("*.add")


def test_assert_called_with_checks_the_last_call(weaver: ah.Weaver) -> None:
    """assert_called_with compares the arguments of the last matching call."""
    rec = Recorder()
    weaver.weave(add, rec)
    add(1)
    add(2, b=5)
    assert rec.assert_called_with("*.add", 2, b=5).result == 7
    with pytest.raises(AssertionError, match=r"with \(1\), got \(2, b=5\)"):
        rec.assert_called_with("*.add", 1)
    with pytest.raises(AssertionError, match="nothing was recorded"):
        Recorder().last()


def test_assertion_messages_name_a_woven_function_and_show_the_calls(
    weaver: ah.Weaver,
) -> None:
    """A failed assertion on a woven function names its join point (not the proxy's
    address) and lists the recorded calls with their arguments and what they raised."""
    rec = Recorder()
    weaver.weave(add, rec)
    weaver.weave(fail, rec)
    add(1)
    add(2, b=5)
    with pytest.raises(ValueError):
        fail("x" * 100)
    with pytest.raises(AssertionError) as info:
        rec.assert_called(add, times=1)
    message = str(info.value)
    assert "JoinPointProxy" not in message
    assert f"expected Name('{__name__}.add') to be called once, it was called 2 times" in message
    assert f"{__name__}.add(1), {__name__}.add(2, b=5), {__name__}.fail('xxx" in message
    assert message.endswith("xxx') raised ValueError")
    assert "x" * 100 not in message  # long arguments are shortened
    with pytest.raises(AssertionError, match=r"^expected the last call to Name\('.*\.add'\)"):
        rec.assert_called_with(add, 3)


def test_assert_called_with_says_an_earlier_call_had_the_arguments(weaver: ah.Weaver) -> None:
    """When only an earlier call had the expected arguments, the message says which, and
    lists the calls to the join point."""
    rec = Recorder()
    weaver.weave(add, rec)
    add(1)
    add(2, b=5)
    with pytest.raises(AssertionError) as info:
        rec.assert_called_with("*.add", 1)
    message = str(info.value)
    assert message.startswith("expected the last call to '*.add' with (1), got (2, b=5)")
    assert f"all 2 calls to it: {__name__}.add(1), {__name__}.add(2, b=5)" in message
    assert "the call with index 0 had those arguments" in message


def test_clear_forgets_calls(weaver: ah.Weaver) -> None:
    """clear() empties the record and restarts the order index."""
    rec = Recorder()
    weaver.weave(add, rec)
    add(1)
    rec.clear()
    assert rec.calls == []
    add(2)
    assert [c.index for c in rec] == [0]


def wait_for(started: threading.Event, release: threading.Event) -> str:
    started.set()
    release.wait(10)
    return "late"


def test_clear_forgets_a_call_in_progress(weaver: ah.Weaver) -> None:
    """A call that started before clear() and ends after it is not recorded: it would
    come back with an index of the old numbering (two calls with index 0)."""
    rec = Recorder()
    weaver.weave(add, rec)
    weaver.weave(wait_for, rec)
    started, release = threading.Event(), threading.Event()
    thread = threading.Thread(target=wait_for, args=(started, release))
    thread.start()
    assert started.wait(10)
    rec.clear()
    add(1)
    release.set()
    thread.join()
    assert [(c.name, c.index) for c in rec] == [(f"{__name__}.add", 0)]


def test_innermost_by_default_sees_what_reaches_the_target(weaver: ah.Weaver) -> None:
    """By default the Recorder is innermost: rewritten arguments and every retry attempt."""
    inner, outer = Recorder(), Recorder(priority=ah.Priority.HIGHEST)

    def twice(ctx: ah.CallContext, proceed: ah.Proceed) -> Any:
        proceed()
        return proceed(10)

    weaver.weave(add, inner, outer, around=twice)
    assert add(1) == 10
    assert [c.args for c in inner.calls] == [(1,), (10,)]
    assert [(c.args, c.result) for c in outer.calls] == [((1,), 10)]


def test_records_calls_from_threads(weaver: ah.Weaver) -> None:
    """Each call records the thread it ran in."""
    rec = Recorder()
    weaver.weave(add, rec)
    thread = threading.Thread(target=add, args=(1,), name="adder")
    thread.start()
    thread.join()
    assert rec.last().thread is thread


def test_records_the_functions_its_own_bookkeeping_calls(weaver: ah.Weaver) -> None:
    """A Recorder woven into what it calls itself to record (``threading.current_thread``)
    records the program's calls, not its own, instead of recursing until RecursionError."""
    rec = Recorder()
    weaver.weave("threading.current_thread", rec)
    assert threading.current_thread() is threading.main_thread()
    [call] = rec.calls
    assert (call.name, call.args, call.result) == (
        "threading.current_thread",
        (),
        threading.main_thread(),
    )


# -- the pytest plugin --------------------------------------------------------------------


def test_recorder_is_also_a_shipped_aspect_imported_on_first_use() -> None:
    """aspecthook.aspects.Recorder is this same class; aspecthook.testing loads on use."""
    import aspecthook.aspects

    assert aspecthook.aspects.Recorder is Recorder
    assert "Recorder" in aspecthook.aspects.__all__
    assert "Recorder" in dir(aspecthook.aspects)
    code = (
        "import sys, aspecthook.aspects as a\n"
        "print('aspecthook.testing' in sys.modules)\n"
        "from aspecthook.aspects import Recorder\n"
        "print(Recorder.__module__, 'aspecthook.testing' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.split() == ["False", "aspecthook.testing", "True"]


def test_weaver_fixture_isolates_tests(pytester: pytest.Pytester) -> None:
    """Registrations and weaves made on the default weaver in a test are gone after it."""
    pytester.makepyfile(
        """
        import json
        import aspecthook as ah
        from aspecthook.testing import Recorder

        ORIGINAL_DUMPS = json.dumps

        def test_registers(weaver):
            assert isinstance(weaver, ah.Weaver) and weaver is not ah.default_weaver
            weaver.on("iso.event")(lambda event: None)
            ah.on("iso.event")(lambda event: None)
            ah.register(Recorder("iso.*"))
            ah.weave("json.dumps", before=lambda ctx: None)
            ah.weave("no_such_module_for_iso.f")  # skipped, but listed in describe()
            assert json.dumps is not ORIGINAL_DUMPS

        def test_nothing_leaked():
            assert ah.default_weaver.registered == []
            assert ah.default_weaver._subscribers("iso.event") == ()
            assert json.dumps is ORIGINAL_DUMPS
            assert not [r for r in ah.describe() if "iso" in str(r)]
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_a_test_may_close_the_weaver_fixture_itself(pytester: pytest.Pytester) -> None:
    """A test that closes the fixture's weaver (or code it calls does) tears down cleanly:
    closing it again after the test does nothing."""
    pytester.makepyfile(
        """
        import aspecthook as ah

        def test_closes(weaver):
            weaver.before("fixture_closed")(lambda ctx: None)
            weaver.close()
            assert weaver.closed

        def test_nothing_leaked():
            assert list(ah.describe("fixture_closed")) == []  # not even an unmatched row
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_without_the_fixture_registrations_leak(pytester: pytest.Pytester) -> None:
    """The isolation is the fixture's doing: a test without it leaks into the next one."""
    pytester.makepyfile(
        """
        import aspecthook as ah

        def test_leaks():
            ah.on("leak.event")(lambda event: None)

        def test_sees_the_leak():
            assert len(ah.default_weaver._subscribers("leak.event")) == 1
            ah.default_weaver.clear()
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_fixture_keeps_registrations_made_before_the_test(pytester: pytest.Pytester) -> None:
    """Advice registered at import stays: the fixture removes only what the test added."""
    pytester.makepyfile(
        """
        import aspecthook as ah

        module_level = ah.on("kept.event")(lambda event: None)

        def test_uses_fixture(weaver):
            ah.on("kept.event")(lambda event: None)
            assert len(ah.default_weaver._subscribers("kept.event")) == 2

        def test_module_advice_is_still_there():
            assert module_level.active
            assert len(ah.default_weaver._subscribers("kept.event")) == 1
            module_level.remove()
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_fixture_registers_again_what_a_test_removed(pytester: pytest.Pytester) -> None:
    """Advice registered at import that a test removes is back for the next tests, in its
    order among advice of the same priority, and without a second ``process.start``."""
    pytester.makepyfile(
        """
        import aspecthook as ah

        seen = []
        starts = []

        @ah.joinpoint
        def parse(text):
            return int(text)

        @ah.before("*.parse", priority=0)
        def first(ctx):
            seen.append("first")

        @ah.before("*.parse", priority=0)
        def second(ctx):
            seen.append("second")

        @ah.on("app.ping")
        @ah.on("app.pong")
        def stacked(event):
            seen.append(event.name)

        @ah.on("process.start")
        def started(event):
            starts.append(event.payload["pid"])

        def test_removes_them(weaver):
            first.remove()
            stacked.remove()
            started.remove()
            assert not first.active

        def test_they_are_back():
            seen.clear()
            parse("1")
            ah.emit("app.ping")
            ah.emit("app.pong")
            assert seen == ["first", "second", "app.ping", "app.pong"]
            assert first.active and stacked.active and started.active
            assert len(starts) == 1
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_fixture_does_not_weave_again_what_a_test_unwove(pytester: pytest.Pytester) -> None:
    """Pins a known limit (docs/known-issues.md): a weave made at import that a test
    removes is not made again, so the advice registered for it runs no more."""
    pytester.makepyfile(
        """
        import json

        import aspecthook as ah

        seen = []
        woven = ah.weave("json.dumps")
        ah.before("json.dumps")(lambda ctx: seen.append("dumps"))

        def test_unweaves(weaver):
            woven.remove()

        def test_the_weave_stays_undone():
            json.dumps(1)
            assert seen == []
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_advice_a_test_module_registers_at_import_reaches_other_modules(
    pytester: pytest.Pytester,
) -> None:
    """Pins a known limit (docs/known-issues.md): a test module's module-level advice is
    registered at collection, so it runs in the tests of the modules collected with it."""
    pytester.makepyfile(
        test_first="""
        import aspecthook as ah

        seen = []
        ah.on("app.ready")(lambda event: seen.append("first module"))

        def test_own(weaver):
            pass
        """,
        test_second="""
        import aspecthook as ah
        import test_first

        def test_other_module(weaver):
            ah.emit("app.ready")
            assert test_first.seen == ["first module"]
        """,
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_fixture_keeps_an_import_time_subscription_a_test_stacked_on(
    pytester: pytest.Pytester,
) -> None:
    """A test that stacks a decorator on advice registered at import removes only its own
    part: the import-time subscription still works in the next test."""
    pytester.makepyfile(
        """
        import aspecthook as ah

        seen = []

        @ah.on("app.ready")
        def on_ready(event):
            seen.append(event.name)

        def test_adds_a_second_event(weaver):
            ah.on("app.extra")(on_ready)
            ah.emit("app.extra")
            assert seen == ["app.extra"]

        def test_import_time_subscription_still_there():
            seen.clear()
            assert on_ready.active
            ah.emit("app.ready")
            ah.emit("app.extra")
            assert seen == ["app.ready"]
            on_ready.remove()
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_fixture_removes_what_a_fixture_requested_before_it_registered(
    pytester: pytest.Pytester,
) -> None:
    """A function-scoped fixture set up for the test registers as part of the test, even
    when the test names it before ``weaver`` (or an autouse one does): that is removed too,
    while what a module-scoped fixture registered stays for the module's other tests."""
    pytester.makepyfile(
        """
        import json
        import pytest
        import aspecthook as ah

        ORIGINAL_DUMPS = json.dumps

        @pytest.fixture(scope="module")
        def module_advice():
            return ah.on("module.event")(lambda event: None)

        @pytest.fixture(autouse=True)
        def every_test():
            ah.on("autouse.event")(lambda event: None)

        @pytest.fixture
        def dumps_woven():
            return ah.weave("json.dumps", before=lambda ctx: None)

        def test_named_before_the_fixture(module_advice, dumps_woven, weaver):
            assert json.dumps is not ORIGINAL_DUMPS

        def test_recorder_named_last(dumps_woven, recorder):
            assert json.dumps is not ORIGINAL_DUMPS

        def test_nothing_leaked(module_advice):
            assert json.dumps is ORIGINAL_DUMPS
            assert len(ah.default_weaver._subscribers("autouse.event")) == 1
            assert module_advice.active
            ah.default_weaver.clear()
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=3)


def test_recorder_fixture(pytester: pytest.Pytester) -> None:
    """The recorder fixture gives a fresh Recorder whose weaves are undone after the test."""
    pytester.makepyfile(
        """
        import json
        import aspecthook as ah
        from aspecthook.testing import Recorder

        ORIGINAL_DUMPS = json.dumps

        def test_records(recorder):
            assert isinstance(recorder, Recorder) and len(recorder) == 0
            ah.weave("json.dumps", recorder)
            json.dumps([1])
            recorder.assert_called_with("json.dumps", [1])

        def test_unwoven():
            assert json.dumps is ORIGINAL_DUMPS
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_plugin_is_registered_through_its_entry_point(pytester: pytest.Pytester) -> None:
    """A plain pytest run in a new process lists the plugin's fixtures."""
    result = pytester.runpytest_subprocess("--fixtures")
    result.stdout.fnmatch_lines(
        [
            "*fixtures defined from aspecthook.testing*",
            "isolate_default_weaver -- *",
            "weaver -- *",
            "recorder -- *",
        ]
    )
