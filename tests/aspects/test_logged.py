"""``Logged``: one structlog event per call, capped summaries, context, levels, configuration."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import json
import logging
import tempfile
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.contextvars import get_contextvars, merge_contextvars
from structlog.testing import capture_logs

import aspecthook as ah
from aspecthook.aspects import Logged, configure_logging
from aspecthook.aspects._summary import summarize
from aspecthook.errors import InvalidOptionError

MODULE = __name__

# -- the subjects ------------------------------------------------------------------------


def add(a: int, b: int = 1) -> int:
    """Add b to a."""
    return a + b


def fail(message: str) -> None:
    """Raise ValueError(message)."""
    raise ValueError(message)


def login(user: str, password: str, *, token: str = "", **extra: Any) -> str:
    """Pretend to log in."""
    return f"welcome {user}"


def login_fails(user: str, password: str) -> None:
    """Refuse the login."""
    raise PermissionError(f"{user} may not log in")


def _unwrapped_decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A decorator without functools.wraps: its wrapper's signature hides fn's."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


login_behind_a_wrapper = ah.joinpoint(_unwrapped_decorator(login))


def echo(value: Any) -> Any:
    """Return value unchanged."""
    return value


def gather(first: int, *rest: int, sep: str = ",", **options: Any) -> str:
    """Join numbers."""
    return sep.join(map(str, (first, *rest)))


def context_now() -> dict[str, Any]:
    """The structlog context variables bound right now."""
    return get_contextvars()


def outer(n: int) -> int:
    """Call inner."""
    structlog.get_logger().info("outer.work")
    return inner(n) + 1


def inner(n: int) -> int:
    """Log from inside a nested join point."""
    structlog.get_logger().info("inner.work")
    return n


def count_up(n: int) -> Iterator[int]:
    """Yield 0..n-1."""
    yield from range(n)


async def aadd(a: int, b: int = 1) -> int:
    """Add b to a, asynchronously."""
    await asyncio.sleep(0)
    return a + b


async def afail(message: str) -> None:
    """Raise ValueError(message), asynchronously."""
    await asyncio.sleep(0)
    raise ValueError(message)


def plain_decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A synchronous decorator, as many are: over an async function it returns a coroutine."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


@plain_decorator
async def decorated_fetch(url: str) -> dict[str, Any]:
    """Fetch url (the context variables bound while it runs); 'bad' is refused."""
    await asyncio.sleep(0)
    if url == "bad":
        raise ConnectionError(f"{url} refused")
    return get_contextvars()


async def forever() -> None:
    """Wait until cancelled."""
    await asyncio.Event().wait()


@plain_decorator
async def decorated_forever() -> None:
    """Wait until cancelled, behind a plain decorator."""
    await asyncio.Event().wait()


def interrupted() -> None:
    """Stop as Ctrl-C does."""
    raise KeyboardInterrupt


class Service:
    """Methods of every flavour."""

    def method(self, x: int) -> int:
        return x * 2

    @classmethod
    def cmethod(cls, x: int) -> int:
        return x * 3

    @staticmethod
    def smethod(x: int) -> int:
        return x * 4

    async def amethod(self, x: int) -> int:
        await asyncio.sleep(0)
        return x * 5


class FakeTensor:
    """Has shape and dtype like a tensor; its repr must never be called."""

    shape = (1000, 3)
    dtype = "float32"

    def __repr__(self) -> str:
        raise AssertionError("a tensor's repr must not be called")


class BadRepr:
    """An object whose repr raises."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")


class BrokenLogger:
    """A logger whose every logging call raises."""

    def bind(self) -> BrokenLogger:
        return self

    def is_enabled_for(self, level: int) -> bool:
        return True

    def __getattr__(self, name: str) -> Callable[..., None]:
        def broken(*args: Any, **kwargs: Any) -> None:
            raise RuntimeError("the log sink is down")

        return broken


@ah.joinpoint("logged_test.declared")
def declared(x: int) -> int:
    """A declared join point."""
    return x


@pytest.fixture(autouse=True)
def _structlog_defaults() -> Iterator[None]:
    """Every test starts and ends with structlog's default configuration."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


# Logged runs as a dispatch layer when it is the only advice at a join point, and as around
# advice with a CallContext when other advice is there too: every test runs both ways.
SHAPES = {"layer": False, "context": True}
_WITH_NEIGHBOUR = [False]


@pytest.fixture(autouse=True, params=sorted(SHAPES))
def _shape(request: pytest.FixtureRequest) -> Iterator[None]:
    _WITH_NEIGHBOUR[0] = SHAPES[request.param]
    yield
    _WITH_NEIGHBOUR[0] = False


def _neighbour(ctx: ah.CallContext) -> None:
    """A before advice that does nothing: its presence takes Logged off the layer path."""


@contextlib.contextmanager
def logged(*targets: Any, **options: Any) -> Iterator[Logged]:
    """Weave one Logged aspect into every target for the block (and, in the "context"
    shape, a do-nothing before advice beside it)."""
    aspect = Logged(**options)
    with contextlib.ExitStack() as stack:
        for target in targets:
            handle = stack.enter_context(ah.weave(target, aspect))
            if _WITH_NEIGHBOUR[0]:
                stack.enter_context(ah.weave(target, before=_neighbour))
            for advice in handle.items:
                for jp in advice.points:
                    layered = jp.proxy_ref()._self_wrapper.__name__ == "logged"
                    assert layered is not _WITH_NEIGHBOUR[0] or jp.is_async
        yield aspect


# -- the event -----------------------------------------------------------------------------


def test_one_event_per_call_with_joinpoint_args_result_outcome_duration() -> None:
    """A call logs one 'call' event: join point, args by name, result, outcome, duration."""
    with ah.weave(add, Logged()), capture_logs() as logs:
        assert add(2, b=5) == 7
    [entry] = logs
    assert entry["event"] == "call"
    assert entry["log_level"] == "info"
    assert entry["joinpoint"] == f"{MODULE}.add"
    assert entry["args"] == {"a": "2", "b": "5"}
    assert entry["result"] == "7"
    assert entry["outcome"] == "ok"
    assert isinstance(entry["duration_ms"], float)
    assert entry["duration_ms"] >= 0


def test_event_name_and_what_is_summarised_are_configurable() -> None:
    """event= renames the event; log_args=False and log_result=False leave them out."""
    with (
        ah.weave(add, Logged(event="add.called", log_args=False, log_result=False)),
        capture_logs() as logs,
    ):
        add(1)
    [entry] = logs
    assert entry["event"] == "add.called"
    assert "args" not in entry
    assert "result" not in entry


@pytest.mark.parametrize(
    ("call", "expected", "joinpoint"),
    [
        (lambda: Service().method(2), 4, "Service.method"),
        (lambda: Service.cmethod(2), 6, "Service.cmethod"),
        (lambda: Service().cmethod(2), 6, "Service.cmethod"),
        (lambda: Service.smethod(2), 8, "Service.smethod"),
        (lambda: asyncio.run(Service().amethod(2)), 10, "Service.amethod"),
    ],
    ids=["method", "classmethod", "classmethod_via_instance", "staticmethod", "async_method"],
)
def test_methods_of_every_flavour(call: Callable[[], Any], expected: int, joinpoint: str) -> None:
    """Methods log their arguments without self or cls, and their result."""
    with ah.weave(Service, Logged()), capture_logs() as logs:
        assert call() == expected
    [entry] = logs
    assert entry["joinpoint"] == f"{MODULE}.{joinpoint}"
    assert entry["args"] == {"x": "2"}
    assert entry["result"] == str(expected)


def test_register_with_a_pointcut() -> None:
    """Logged(pointcut=...) registered on the weaver logs the join points it selects."""
    with ah.register(Logged(pointcut="logged_test.*")), capture_logs() as logs:
        assert declared(3) == 3
    assert [e["joinpoint"] for e in logs] == ["logged_test.declared"]


def test_async_call_is_logged_when_the_coroutine_completes() -> None:
    """An async call is logged with its result once awaited, not when the coroutine is made."""
    with ah.weave(aadd, Logged()), capture_logs() as logs:
        coroutine = aadd(1, 2)
        assert logs == []
        assert asyncio.run(coroutine) == 3
    [entry] = logs
    assert entry["result"] == "3"
    assert entry["outcome"] == "ok"


def test_async_failure_is_logged_and_reraised_unchanged() -> None:
    """A failing async call logs the exception and re-raises that same object."""
    with (
        ah.weave(afail, Logged()),
        capture_logs() as logs,
        pytest.raises(ValueError, match="async boom") as raised,
    ):
        asyncio.run(afail("async boom"))
    [entry] = logs
    assert entry["outcome"] == "error"
    assert entry["exc_info"] is raised.value


def test_async_function_behind_a_plain_decorator_is_logged_when_its_coroutine_completes() -> None:
    """A sync callable's coroutine (an async function behind a plain decorator) is logged
    as an async call: once it completes, with its result, the context bound inside it."""
    name = f"{MODULE}.decorated_fetch"
    with logged(decorated_fetch), capture_logs() as logs:
        coroutine = decorated_fetch("good")
        assert logs == []
        assert get_contextvars() == {}
        inside = asyncio.run(coroutine)
    assert inside == {"joinpoint": name, "joinpoint_stack": (name,)}
    assert get_contextvars() == {}
    [entry] = logs
    assert (entry["outcome"], entry["log_level"]) == ("ok", "info")
    assert entry["result"] == summarize(inside)  # its summary (keys sorted, as reprlib does)
    assert entry["args"] == {"url": "'good'"}


@pytest.mark.parametrize("level", ["info", "warning"], ids=["all", "errors_only"])
def test_async_function_behind_a_plain_decorator_logs_its_failure(level: str) -> None:
    """The awaited failure of such a coroutine is logged with its exception, also when only
    failures are logged, and propagates unchanged."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(level))
    with (
        logged(decorated_fetch),
        capture_logs() as logs,
        pytest.raises(ConnectionError, match="bad refused") as raised,
    ):
        asyncio.run(decorated_fetch("bad"))
    [entry] = logs
    assert (entry["outcome"], entry["log_level"]) == ("error", "error")
    assert entry["exc_info"] is raised.value
    assert entry["args"] == {"url": "'bad'"}


async def _cancel(call: Callable[[], Any]) -> None:
    """Start call() as a task, cancel it once it waits, and wait for it to end."""
    task = asyncio.ensure_future(call())
    await asyncio.sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _time_out(call: Callable[[], Any]) -> None:
    """Await call() with a timeout that expires while it waits."""
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(call(), 0.01)


@pytest.mark.parametrize("target", ["forever", "decorated_forever"])
@pytest.mark.parametrize("how", [_cancel, _time_out], ids=["cancel", "timeout"])
def test_a_cancelled_call_is_logged_as_cancelled_at_its_level(
    target: str, how: Callable[..., Any]
) -> None:
    """A cancelled call (task.cancel(), a timeout) is not a failure: it is logged at
    level= as outcome='cancelled', with no traceback."""
    with logged(globals()[target], level="debug"), capture_logs() as logs:
        asyncio.run(how(globals()[target]))
    [entry] = logs
    assert (entry["outcome"], entry["log_level"]) == ("cancelled", "debug")
    assert "exc_info" not in entry
    assert "result" not in entry


def test_a_cancelled_call_is_not_logged_when_only_failures_are() -> None:
    """With level= disabled and error_level= enabled, a cancelled call logs nothing."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger("warning"))
    with logged(forever, decorated_forever), capture_logs() as logs:
        asyncio.run(_cancel(forever))
        asyncio.run(_cancel(decorated_forever))
    assert logs == []


def test_keyboard_interrupt_is_logged_as_an_error() -> None:
    """KeyboardInterrupt (and SystemExit) end the call abnormally: logged at error_level,
    with the traceback of where it stopped."""
    with logged(interrupted), capture_logs() as logs, pytest.raises(KeyboardInterrupt) as raised:
        interrupted()
    [entry] = logs
    assert (entry["outcome"], entry["log_level"]) == ("error", "error")
    assert entry["exc_info"] is raised.value


def test_generator_function_logs_the_call_that_returns_the_generator() -> None:
    """A generator function's call is logged once, with the generator as its result."""
    with ah.weave(count_up, Logged()), capture_logs() as logs:
        generator = count_up(3)
        assert list(generator) == [0, 1, 2]
    [entry] = logs
    assert entry["result"].startswith("<generator object")
    assert entry["args"] == {"n": "3"}


def test_variadic_arguments_are_named_by_their_parameters() -> None:
    """*args are shown as a tuple under their name and **kwargs flattened, redaction included."""
    with ah.weave(gather, Logged(redact=("secret",))), capture_logs() as logs:
        assert gather(1, 2, 3, sep="-", secret="s", mode="fast") == "1-2-3"
    assert logs[0]["args"] == {
        "first": "1",
        "rest": "(2, 3)",
        "sep": "'-'",
        "secret": "***",
        "mode": "'fast'",
    }


# -- summaries -------------------------------------------------------------------------------


def test_long_string_is_truncated_with_its_length() -> None:
    """A 10,000-character string shows its length and a short excerpt."""
    with ah.weave(echo, Logged()), capture_logs() as logs:
        echo("x" * 10_000)
    text = logs[0]["args"]["value"]
    assert text.startswith("<str len=10000 'xxx")
    assert len(text) < 200
    assert logs[0]["result"] == text


def test_big_list_is_summarised_by_type_and_length() -> None:
    """A million-element list becomes '<list len=1000000>'."""
    with ah.weave(echo, Logged()), capture_logs() as logs:
        echo(list(range(1_000_000)))
    assert logs[0]["args"] == {"value": "<list len=1000000>"}


def test_array_like_is_summarised_by_type_shape_and_dtype() -> None:
    """An object with shape and dtype shows them and is never repr'd, even inside a list."""
    with ah.weave(echo, Logged()), capture_logs() as logs:
        echo([FakeTensor()])
    assert logs[0]["args"] == {"value": "[<FakeTensor shape=(1000, 3) dtype=float32>]"}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1, "1"),
        ("ab", "'ab'"),
        ([1, "two", None], "[1, 'two', None]"),
        ({"k": (1, 2)}, "{'k': (1, 2)}"),
        (b"x" * 100, "<bytes len=100 b'" + "x" * 77 + "...'>"),
        (bytearray(b"x" * 100), "<bytearray len=100 b'" + "x" * 77 + "...'>"),
        (memoryview(b"x" * 100), "<memoryview nbytes=100 b'" + "x" * 77 + "...'>"),
        (memoryview(b"ab"), "b'ab'"),
        (bytearray(b"ab"), "bytearray(b'ab')"),
        ({1, 2, 3} | set(range(100)), "<set len=100>"),
    ],
)
def test_summarize_keeps_small_values_and_caps_big_ones(value: Any, expected: str) -> None:
    """Small values read as their repr; big ones are summarised."""
    assert summarize(value) == expected


def test_a_big_buffer_is_summarised_from_a_slice_not_converted_whole() -> None:
    """A 50 MB bytearray argument: its summary is made from its first bytes, so a logged
    call does not copy or repr the whole buffer (which took seconds and gigabytes)."""
    buffer = bytearray(50_000_000)
    tracemalloc.start()
    try:
        text = summarize(buffer)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert text.startswith("<bytearray len=50000000 b'\\x00")
    assert peak < 1_000_000


def test_a_many_dimensional_memoryview_is_summarised_by_its_bytes() -> None:
    """A 2-D view of 32 MB (rows of ints): capped like any buffer, from its first bytes."""
    view = memoryview(bytearray(32_000_000)).cast("i", (1000, 8000))
    tracemalloc.start()
    try:
        text = summarize(view)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert text.startswith("<memoryview nbytes=32000000 b'\\x00")
    assert len(text) <= 4 * 80  # the summary's cap, as for bytes
    assert peak < 1_000_000


@pytest.mark.parametrize("max_length", [1, 2, 3])
@pytest.mark.parametrize("kind", [bytes, memoryview], ids=["bytes", "memoryview"])
def test_a_tiny_max_length_still_summarises_a_big_buffer_from_a_slice(
    kind: Callable[[bytes], Any], max_length: int
) -> None:
    """max_length below the '...' it adds took all but the last bytes of a buffer (a
    negative slice end): a 20 MB argument was repr'd whole before being cut."""
    value = kind(bytes(20_000_000))
    tracemalloc.start()
    try:
        text = summarize(value, max_length=max_length)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(text) <= 4 * max_length
    assert peak < 1_000_000


class _Cuda:
    """A device as torch names it (``torch.device('cuda:0').type``)."""

    type = "cuda"


class FakeDeviceScalar:
    """A 0-d tensor on an accelerator (a loss): reading it by repr waits for the device."""

    shape = ()
    dtype = "float32"
    device = _Cuda()

    def __repr__(self) -> str:
        raise AssertionError("a device scalar's repr copies it to the host")


def test_a_scalar_on_an_accelerator_is_summarised_without_reading_its_value() -> None:
    """A 0-d tensor on 'cuda' (a loss passed or returned) shows type, shape and dtype: its
    repr would copy it to the host and wait for the device on every logged call."""
    with ah.weave(echo, Logged()), capture_logs() as logs:
        echo(FakeDeviceScalar())
    assert logs[0]["args"] == {"value": "<FakeDeviceScalar shape=() dtype=float32>"}


def test_a_scalar_in_host_memory_shows_its_value() -> None:
    """A numpy scalar or 0-d array (device 'cpu', or none) is cheap to read: its repr."""
    np = pytest.importorskip("numpy")
    assert summarize(np.float32(1.5)) == "np.float32(1.5)"
    assert summarize(np.array(2.0)) == "array(2.)"


class Text(str):
    """A str subclass (as markup and path-like strings are)."""


class Blob(bytes):
    """A bytes subclass."""


def test_long_text_and_bytes_of_a_subclass_are_capped_from_a_slice() -> None:
    """A 20 MB str or bytes subclass is summarised like str and bytes, with its type name,
    not repr'd whole and then cut (which copied the whole value)."""
    text, blob = Text("x" * 20_000_000), Blob(b"x" * 20_000_000)
    tracemalloc.start()
    try:
        summaries = summarize(text), summarize(blob)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert summaries[0].startswith("<Text len=20000000 'xxx")
    assert summaries[1].startswith("<Blob len=20000000 b'xxx")
    assert peak < 1_000_000


def test_summarize_caps_deep_nesting_and_custom_sizes() -> None:
    """Nesting deeper than three levels is elided and max_length/max_items are honoured."""
    assert summarize([[[[1]]]]) == "[[[[...]]]]"
    assert summarize(list(range(3)), max_items=2) == "<list len=3>"
    assert summarize("abcdefghijklmnop", max_length=10) == "<str len=16 'ab...nop'>"


def test_argument_whose_repr_raises_does_not_break_the_call() -> None:
    """A repr that raises is shown as '<unrepresentable T>' and the call returns normally."""
    bad = BadRepr()
    with ah.weave(echo, Logged()), capture_logs() as logs:
        assert echo(bad) is bad
    assert logs[0]["args"] == {"value": "<unrepresentable BadRepr>"}
    assert logs[0]["result"] == "<unrepresentable BadRepr>"


def test_the_number_of_arguments_shown_is_capped_too() -> None:
    """A call with 10,000 keyword arguments shows 4 * max_items of them and counts the
    rest under '...', as a big container is summarised: the event was 10,000 fields."""
    options = {f"option_{i}": i for i in range(10_000)}
    with ah.weave(gather, Logged(max_items=2, redact=("option_1",))), capture_logs() as logs:
        gather(1, **options)
    assert logs[0]["args"] == {
        "first": "1",
        "option_0": "0",
        "option_1": "***",
        "option_2": "2",
        "option_3": "3",
        "option_4": "4",
        "option_5": "5",
        "option_6": "6",
        "...": "<9993 more>",
    }


def test_redacted_arguments_are_masked_wherever_they_are_passed() -> None:
    """Named arguments in redact= show '***', positional, keyword or through **kwargs."""
    aspect = Logged(redact=("password", "TOKEN", "api_key"))
    with ah.weave(login, aspect), capture_logs() as logs:
        login("ann", "hunter2", token="t0k", api_key="k3y", colour="blue")
    assert logs[0]["args"] == {
        "user": "'ann'",
        "password": "***",
        "token": "***",
        "api_key": "***",
        "colour": "'blue'",
    }
    assert "hunter2" not in repr(logs)


def test_redaction_holds_for_a_call_that_does_not_fit_the_signature() -> None:
    """One positional argument too many: the call fails with TypeError and is logged as an
    error, with the arguments still named (so the password is still masked)."""
    aspect = Logged(redact=("password",))
    with ah.weave(login_fails, aspect), capture_logs() as logs, pytest.raises(TypeError):
        login_fails("ann", "hunter2", True)  # type: ignore[call-arg]
    assert logs[0]["args"] == {"user": "'ann'", "password": "***", "#2": "***"}
    assert "hunter2" not in repr(logs)


def test_redacting_a_var_keyword_parameter_masks_every_keyword_it_collects() -> None:
    """redact= naming a **kwargs parameter masks the keywords that parameter takes, which
    the event shows one by one (flattened): they showed, though that parameter was named.
    Keywords of the parameters before it still go by their own names."""
    aspect = Logged(redact=("EXTRA",))
    with ah.weave(login, aspect), capture_logs() as logs:
        login("ann", "hunter2", token="t0k", api_key="k3y", colour="blue")
    assert logs[0]["args"] == {
        "user": "'ann'",
        "password": "'hunter2'",
        "token": "'t0k'",
        "api_key": "***",
        "colour": "***",
    }
    assert "k3y" not in repr(logs)


def test_an_argument_no_parameter_names_is_masked_when_redacting() -> None:
    """A secret passed by position to a keyword-only parameter (the call fails): the
    argument cannot be named, so with redact= set it is masked all the same."""
    aspect = Logged(redact=("token",))
    with ah.weave(login, aspect), capture_logs() as logs, pytest.raises(TypeError):
        login("ann", "hunter2", "t0k3n")  # type: ignore[misc]
    assert logs[0]["args"]["#2"] == "***"
    assert "t0k3n" not in repr(logs)


def test_positional_arguments_behind_a_wrapper_signature_are_masked_when_redacting() -> None:
    """Behind (*args, **kwargs) no parameter names a positional argument, so with redact=
    set the *args tuple is masked (it showed the password); keywords still go by name."""
    aspect = Logged(redact=("password",))
    with ah.weave(login_behind_a_wrapper, aspect), capture_logs() as logs:
        login_behind_a_wrapper("ann", "hunter2", colour="blue")
        login_behind_a_wrapper(user="ann", password="hunter2")
    assert [e["args"] for e in logs] == [
        {"args": "***", "colour": "'blue'"},
        {"user": "'ann'", "password": "***"},
    ]
    assert "hunter2" not in repr(logs)
    with ah.weave(login_behind_a_wrapper, Logged()), capture_logs() as logs:
        login_behind_a_wrapper("ann", "hunter2")
    assert logs[0]["args"] == {"args": "('ann', 'hunter2')"}  # nothing to redact: shown


# -- outcomes and levels ---------------------------------------------------------------------


def test_exception_is_logged_with_exc_info_and_reraised_unchanged() -> None:
    """A failure logs outcome='error' with the exception as exc_info, then re-raises it as is."""
    with (
        ah.weave(fail, Logged()),
        capture_logs() as logs,
        pytest.raises(ValueError, match="boom") as raised,
    ):
        fail("boom")
    [entry] = logs
    assert entry["outcome"] == "error"
    assert entry["log_level"] == "error"
    assert entry["exc_info"] is raised.value
    assert "result" not in entry
    assert raised.traceback[-1].name == "fail"  # the original traceback, down to the target


def test_level_per_outcome() -> None:
    """level= applies to successes and error_level= to failures."""
    with logged(add, fail, level="debug", error_level="warning"), capture_logs() as logs:
        add(1)
        with pytest.raises(ValueError, match="x"):
            fail("x")
    assert [e["log_level"] for e in logs] == ["debug", "warning"]


def test_disabled_level_skips_successes_but_still_logs_failures() -> None:
    """Below the configured level, successes are not logged; failures at error_level are."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger("warning"))
    with logged(add, fail), capture_logs() as logs:
        add(1)
        with pytest.raises(ValueError, match="x"):
            fail("x")
    assert [(e["joinpoint"], e["outcome"]) for e in logs] == [(f"{MODULE}.fail", "error")]
    assert logs[0]["args"] == {"message": "'x'"}


def test_fully_disabled_logs_nothing_and_binds_no_context() -> None:
    """With both levels disabled the call just proceeds: no event and no context."""
    with ah.weave(context_now, Logged()), capture_logs() as logs:
        assert context_now()["joinpoint"] == f"{MODULE}.context_now"
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger("critical"))
        assert context_now() == {}
    assert len(logs) == 1


def test_level_cache_follows_structlog_reconfiguration() -> None:
    """The same aspect notices when structlog is configured with another level."""
    with ah.weave(add, Logged()), capture_logs() as logs:
        add(1)
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger("error"))
        add(2)
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger("debug"))
        add(3)
    assert [e["args"]["a"] for e in logs] == ["1", "3"]


def test_stdlib_logger_level_is_followed_as_it_changes() -> None:
    """A stdlib-backed logger is asked per call, so logging.setLevel takes effect at once."""
    structlog.configure(
        wrapper_class=structlog.stdlib.BoundLogger,
        logger_factory=structlog.stdlib.LoggerFactory(),
    )
    stdlib_logger = logging.getLogger("logged_test.stdlib")
    aspect = Logged(logger=structlog.stdlib.get_logger("logged_test.stdlib"))
    try:
        with ah.weave(add, aspect), capture_logs() as logs:
            stdlib_logger.setLevel(logging.WARNING)
            add(1)
            stdlib_logger.setLevel(logging.INFO)
            add(2)
    finally:
        stdlib_logger.setLevel(logging.NOTSET)
    assert [e["args"]["a"] for e in logs] == ["2"]


# -- context -----------------------------------------------------------------------------------


def test_nested_join_points_carry_the_outer_join_point_in_context() -> None:
    """Logs inside a call carry joinpoint and joinpoint_stack; nesting keeps the outer visible."""
    with logged(outer, inner), capture_logs(processors=[merge_contextvars]) as logs:
        assert outer(5) == 6
    by_event = {(e["event"], e["joinpoint"]): e for e in logs}
    out, inn = f"{MODULE}.outer", f"{MODULE}.inner"
    assert by_event["outer.work", out]["joinpoint_stack"] == (out,)
    assert by_event["inner.work", inn]["joinpoint_stack"] == (out, inn)
    assert by_event["call", inn]["joinpoint_stack"] == (out, inn)
    assert by_event["call", out]["joinpoint_stack"] == (out,)
    assert get_contextvars() == {}


def test_context_is_restored_after_a_failure_and_keeps_outer_bindings() -> None:
    """The call's context goes away even when it raises, and unrelated bindings stay."""
    with (
        ah.weave(fail, Logged()),
        capture_logs(),
        structlog.contextvars.bound_contextvars(request="r1", joinpoint="caller"),
    ):
        with pytest.raises(ValueError, match="x"):
            fail("x")
        assert get_contextvars() == {"request": "r1", "joinpoint": "caller"}


# -- Logged's own failures -----------------------------------------------------------------------


def test_failing_logger_does_not_break_the_call_and_is_reported() -> None:
    """With errors='log' (the default) a logger that raises is reported as advice.failed."""
    with ah.weave(add, Logged(logger=BrokenLogger())) as handle, capture_logs() as logs:
        assert add(1) == 2
    [failure] = [e for e in logs if e["event"] == "advice.failed"]
    assert failure["aspect"] == "logged"
    assert failure["joinpoint"] == f"{MODULE}.add"
    [advice] = handle.items
    assert advice.failures == 1


def test_a_log_sink_that_fails_for_every_event_does_not_break_the_call(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The sink behind structlog failing (a full disk): the call's own event fails, and so
    does the advice.failed report of it; the call still returns, and stderr says why."""

    def sink_down(logger: Any, method: str, event_dict: Any) -> Any:
        raise OSError("log sink down")

    structlog.configure(processors=[sink_down])
    try:
        with ah.weave(add, Logged()):
            assert add(1) == 2
    finally:
        structlog.reset_defaults()
    err = capsys.readouterr().err
    assert "could not log advice.failed" in err
    assert "log sink down" in err


def test_failing_logger_on_an_async_call_does_not_break_it() -> None:
    """The same holds inside the coroutine of an async join point."""
    with ah.weave(aadd, Logged(logger=BrokenLogger())), capture_logs() as logs:
        assert asyncio.run(aadd(1)) == 2
    assert [e["event"] for e in logs] == ["advice.failed"]


def test_failing_logger_with_errors_raise_propagates() -> None:
    """errors='raise' lets a failure of Logged itself propagate."""
    with (
        ah.weave(add, Logged(logger=BrokenLogger(), errors="raise")),
        pytest.raises(RuntimeError, match="log sink is down"),
    ):
        add(1)


def test_failing_logger_never_masks_the_target_exception() -> None:
    """When both the target and the logger fail, the target's exception propagates."""
    with (
        ah.weave(fail, Logged(logger=BrokenLogger())),
        capture_logs(),
        pytest.raises(ValueError, match="target"),
    ):
        fail("target")


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"level": "loud"}, "level='loud' is not a log level: use one of 'debug'"),
        ({"error_level": 99}, "error_level=99 is not a log level"),
        ({"max_items": 0}, "max_items=0 is not a positive int"),
        ({"event": ""}, "event='' is not an event name"),
        ({"redact": ("password", 3)}, r"redact=\('password', 3\) is not a list of argument names"),
        (
            {"logger": logging.getLogger("logged_test.plain")},
            r"logger=<Logger logged_test.plain .*> is a standard library logger, which takes no "
            r"event fields: give a structlog logger, e\.g\. logger=structlog\.wrap_logger",
        ),
        (
            {"logger": logging.LoggerAdapter(logging.getLogger("logged_test.plain"))},
            r"is a standard library logger",
        ),
        (
            {"logger": print},
            r"logger=<built-in function print> has no method 'info' to log at level 'info': "
            r"give a structlog logger",
        ),
        (
            {"logger": structlog.stdlib.BoundLogger, "level": "debug"},
            r"has no method 'debug'",  # a class: its methods take the instance first
        ),
    ],
)
def test_invalid_options_are_refused_with_what_to_do(options: dict[str, Any], match: str) -> None:
    """Bad options raise InvalidOptionError (a ValueError) naming the option."""
    with pytest.raises(InvalidOptionError, match=match) as raised:
        Logged(**options)
    assert isinstance(raised.value, ValueError)
    assert raised.value.option == next(iter(options))


def test_a_standard_library_logger_wrapped_by_structlog_gets_the_event() -> None:
    """The way the refusal of a bare stdlib logger points to works: one event per call."""
    stdlib = structlog.wrap_logger(logging.getLogger("logged_test.wrapped"))
    with ah.weave(add, Logged(logger=stdlib)), capture_logs() as logs:
        add(1)
    assert [(e["event"], e["outcome"]) for e in logs] == [("call", "ok")]


# -- configure_logging ---------------------------------------------------------------------------


def test_json_lines_to_a_file_are_parseable(tmp_path: Path) -> None:
    """format='json' writes one JSON object per line, tracebacks included as data."""
    path = tmp_path / "calls.jsonl"
    with configure_logging(format="json", file=path), logged(add, fail):
        add(1)
        with pytest.raises(ValueError, match="bad"):
            fail("bad")
    lines = path.read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    assert [(r["event"], r["outcome"], r["level"]) for r in records] == [
        ("call", "ok", "info"),
        ("call", "error", "error"),
    ]
    assert records[0]["args"] == {"a": "1"}
    assert records[0]["joinpoint_stack"] == [f"{MODULE}.add"]
    assert "T" in records[0]["timestamp"]
    [exception] = records[1]["exception"]
    assert exception["exc_type"] == "ValueError"
    assert exception["frames"][-1]["name"] == "fail"
    assert not any("locals" in frame for frame in exception["frames"])


def test_tracebacks_do_not_leak_redacted_arguments(tmp_path: Path) -> None:
    """Configured tracebacks carry no local variables, so redacted values stay hidden."""
    path, stream = tmp_path / "calls.jsonl", io.StringIO()
    aspect = Logged(redact=("password",))
    for output in (path, stream):
        with (
            configure_logging(format="json" if output is path else "console", file=output),
            ah.weave(login_fails, aspect),
            pytest.raises(PermissionError),
        ):
            login_fails("ann", "hunter2")
    text = path.read_text(encoding="utf-8") + stream.getvalue()
    assert "PermissionError" in text
    assert "'password': '***'" in text
    assert "hunter2" not in text


def test_console_format_is_plain_text_for_a_non_terminal_and_filters_by_level() -> None:
    """format='console' renders readable lines without colour codes; level= filters."""
    stream = io.StringIO()
    with configure_logging(level="warning", file=stream), ah.weave(add, Logged()):
        add(1)
        structlog.get_logger().warning("careful", n=1)
    text = stream.getvalue()
    assert "careful" in text
    assert "n=1" in text
    assert "\x1b[" not in text
    assert f"{MODULE}.add" not in text


def test_configure_logging_handle_restores_the_previous_configuration() -> None:
    """Removing the returned handle puts back what was configured before."""
    processors = [structlog.processors.JSONRenderer()]
    structlog.configure(processors=processors)
    with configure_logging(format="json", file=io.StringIO()):
        assert structlog.get_config()["processors"] is not processors
    assert structlog.get_config()["processors"] is processors
    structlog.reset_defaults()
    with configure_logging(file=io.StringIO()):
        assert structlog.is_configured()
    assert not structlog.is_configured()


@given(st.permutations(range(3)))
@settings(max_examples=20, deadline=None)
def test_configure_logging_handles_removed_in_any_order(order: list[int]) -> None:
    """Three handles, each logging to its own file, removed in any order: logging keeps
    going to the newest file still configured, never to a closed one, and the state from
    before them all comes back at the end."""
    structlog.reset_defaults()
    with tempfile.TemporaryDirectory() as folder:
        paths = [Path(folder, f"run{i}.log") for i in range(3)]
        handles = [configure_logging("json", file=path) for path in paths]
        left = [0, 1, 2]
        for i in order:
            handles[i].remove()
            left.remove(i)
            structlog.get_logger().info("after", removed=i)  # never a closed file
            if left:
                last = paths[left[-1]].read_text(encoding="utf-8").splitlines()[-1]
                assert json.loads(last)["removed"] == i
        assert not structlog.is_configured()


def test_a_handle_puts_back_the_configuration_the_program_set_before_it() -> None:
    """configure_logging, then the program's own structlog.configure, then a second
    configure_logging: removing the second brings the program's configuration back."""
    structlog.reset_defaults()
    first = configure_logging(file=io.StringIO())
    program = io.StringIO()
    structlog.configure(
        logger_factory=structlog.WriteLoggerFactory(file=program),
        processors=[structlog.processors.KeyValueRenderer(sort_keys=True)],
    )
    configure_logging(file=io.StringIO()).remove()
    structlog.get_logger().info("hello", n=1)
    assert program.getvalue() == "event='hello' n=1\n"
    first.remove()
    assert not structlog.is_configured()


def test_out_of_order_removal_never_brings_back_a_closed_file(tmp_path: Path) -> None:
    """A file handle, the program's own processors, a second handle; the first removed,
    then the second: what comes back is the state from before the first handle (with the
    program's processors), never the first handle's closed file."""
    structlog.reset_defaults()
    first = configure_logging("json", file=tmp_path / "a.log")
    structlog.configure(processors=[structlog.processors.JSONRenderer()])
    second = configure_logging("json", file=io.StringIO())
    first.remove()
    second.remove()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        structlog.get_logger().info("hello")  # would raise: I/O operation on closed file
    assert json.loads(out.getvalue()) == {"event": "hello"}
    structlog.reset_defaults()


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"format": "xml"}, "format='xml' is not a log format: use 'console'"),
        ({"level": "verbose"}, "level='verbose' is not a log level"),
    ],
)
def test_configure_logging_refuses_unknown_options(options: dict[str, Any], match: str) -> None:
    """Unknown formats and levels raise InvalidOptionError and configure nothing."""
    with pytest.raises(InvalidOptionError, match=match):
        configure_logging(**options)
    assert not structlog.is_configured()


# -- re-entrancy ---------------------------------------------------------------------------------


class _Runaway(BaseException):
    """Raised by the counting processor below: Logged was logging its own logging."""


def test_logging_json_with_json_lines_logs_each_call_once() -> None:
    """Calls made while Logged emits its event (the JSON renderer's json) are not logged."""
    stream, emitted = io.StringIO(), []

    def count(logger: Any, method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
        emitted.append(event_dict["joinpoint"])
        if len(emitted) > 50:
            raise _Runaway(emitted[-5:])
        return event_dict

    with configure_logging(format="json", file=stream):
        processors = structlog.get_config()["processors"]
        structlog.configure(processors=[count, *processors])
        with ah.weave("json.*", Logged(log_result=False)):
            text = json.dumps({"a": [1, 2]})
            value = json.loads(text)
    assert value == {"a": [1, 2]}
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [r["joinpoint"] for r in records] == emitted
    outermost = [r["joinpoint"] for r in records if len(r["joinpoint_stack"]) == 1]
    assert outermost == ["json.dumps", "json.loads"]
    assert len(emitted) == len(set(emitted))  # each woven json function ran once here
