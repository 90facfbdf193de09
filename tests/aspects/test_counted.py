"""Counted: calls and exceptions per join point."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import aspecthook as ah
from aspecthook.aspects import Counted
from aspecthook.errors import AspectDefinitionError


def add(x: int) -> int:
    return x + 1


def explode(error: Exception) -> None:
    raise error


async def add_async(x: int) -> int:
    await asyncio.sleep(0)
    return x + 1


def count_up(n: int) -> Iterator[int]:
    yield from range(n)


async def wait_forever() -> None:
    await asyncio.Event().wait()


def interrupted() -> None:
    raise KeyboardInterrupt


def plain_decorator(fn: Any) -> Any:
    """A synchronous decorator: over an async function it returns a coroutine."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


@plain_decorator
async def refused_later() -> None:
    await asyncio.sleep(0)
    raise ConnectionError("refused")


class Calculator:
    def add(self, x: int) -> int:
        return x + 1

    @classmethod
    def make(cls) -> str:
        return cls.__name__

    @staticmethod
    def zero() -> int:
        return 0


def name(fn: Any) -> str:
    """The join point name weave() gives a module-level function or method."""
    return f"{fn.__module__}.{fn.__qualname__}"


def test_counts_calls_of_a_function() -> None:
    """Each call of a woven function counts once; results pass through."""
    counted = Counted()
    with ah.weave(add, counted):
        assert [add(i) for i in range(3)] == [1, 2, 3]
    assert counted.counts[name(add)] == 3
    assert counted.error_counts[name(add)] == 0


def test_counts_exceptions_and_reraises_them_unchanged() -> None:
    """A raising call counts as a call and an error; the same exception propagates."""
    counted, error = Counted(), ValueError("boom")
    with ah.weave(explode, counted), pytest.raises(ValueError, match="boom") as caught:
        explode(error)
    assert caught.value is error
    assert caught.value.__context__ is None
    assert (counted.counts[name(explode)], counted.error_counts[name(explode)]) == (1, 1)


def test_cancellations_and_interrupts_are_calls_not_errors() -> None:
    """A cancelled task and a KeyboardInterrupt count as calls, not in error_counts: only
    Exceptions are errors (what on_error advice sees)."""

    async def cancel_one() -> None:
        task = asyncio.ensure_future(wait_forever())
        await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    counted = Counted()
    with ah.weave(wait_forever, counted), ah.weave(interrupted, counted):
        asyncio.run(cancel_one())
        with pytest.raises(KeyboardInterrupt):
            interrupted()
    assert counted.counts == {name(wait_forever): 1, name(interrupted): 1}
    assert counted.error_counts == {}


def test_a_failure_raised_when_a_returned_coroutine_is_awaited_is_not_counted() -> None:
    """An async function behind a plain decorator fails after its call returned: the call
    counts, the failure does not (as documented; Timed counts it)."""
    counted = Counted()
    with ah.weave(refused_later, counted), pytest.raises(ConnectionError):
        asyncio.run(refused_later())
    assert counted.counts == {name(refused_later): 1}
    assert counted.error_counts == {}


def test_counts_methods() -> None:
    """Instance, class and static methods are counted under their own names."""
    counted = Counted()
    with ah.weave(Calculator, counted):
        Calculator().add(1)
        Calculator().add(2)
        Calculator.make()
        Calculator.zero()
    assert counted.counts == {
        name(Calculator.add): 2,
        name(Calculator.make): 1,
        name(Calculator.zero): 1,
    }


def test_counts_async_calls() -> None:
    """An async join point counts each awaited call."""
    counted = Counted()
    with ah.weave(add_async, counted):
        assert asyncio.run(add_async(1)) == 2
    assert counted.counts[name(add_async)] == 1


def test_counts_generator_calls_once() -> None:
    """A generator function counts the call that makes the generator, not each item."""
    counted = Counted()
    with ah.weave(count_up, counted):
        assert list(count_up(3)) == [0, 1, 2]
    assert counted.counts[name(count_up)] == 1


def test_register_with_a_pointcut_and_remove() -> None:
    """register(Counted(pointcut=...)) counts matching join points until removed."""

    @ah.joinpoint("counted_test.train_step")
    def train_step() -> None:
        pass

    @ah.joinpoint("counted_test.evaluate")
    def evaluate() -> None:
        pass

    counted = Counted(pointcut="counted_test.train_*")
    with ah.register(counted):
        train_step()
        evaluate()
    train_step()
    assert counted.counts == {"counted_test.train_step": 1}


def test_weave_remove_restores_the_original() -> None:
    """remove() puts the original back and counting stops."""
    original = add
    counted = Counted()
    handle = ah.weave(add, counted)
    add(1)
    handle.remove()
    assert add is original
    add(1)
    assert counted.counts[name(add)] == 1


def test_register_without_pointcut_is_refused() -> None:
    """register(Counted()) without a pointcut says to give one or to weave it."""
    with pytest.raises(AspectDefinitionError, match="pointcut"):
        ah.register(Counted())


def test_counts_are_snapshots_and_reset_clears_them() -> None:
    """counts is a copy (0 for names never called); reset() zeroes everything."""
    counted = Counted()
    with ah.weave(add, counted), ah.weave(explode, counted):
        add(1)
        with pytest.raises(KeyError):
            explode(KeyError("k"))
        snapshot = counted.counts
        add(1)
        assert snapshot[name(add)] == 1
        assert snapshot["never.called"] == 0
        counted.reset()
    assert (counted.counts, counted.error_counts) == ({}, {})


def test_counts_from_many_threads() -> None:
    """Concurrent calls from several threads are all counted."""
    counted = Counted()
    with ah.weave(add, counted):
        threads = [threading.Thread(target=lambda: [add(i) for i in range(500)]) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert counted.counts[name(add)] == 4000
