"""Weaving and unweaving while other threads call the woven code."""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import _weave_targets as targets
import pytest
from _weave_targets import Model

import aspecthook as ah
from aspecthook._registry import LOCK

CALLERS = 5
WEAVERS = 3
CALLS = 1500
WEAVES = 100

#: What each caller calls, and the result it must get back.
CALLS_MADE: dict[str, tuple[Callable[[int], Any], Callable[[int], Any]]] = {
    "add_one": (lambda i: targets.add_one(i), lambda i: i + 1),
    "double": (lambda i: targets.double(i), lambda i: i * 2),
    "forward": (lambda i: Model().forward(i), lambda i: i + 10),
    "build": (lambda i: Model.build(i), lambda i: ("Model", i)),
}

#: Weave targets the weaver threads cycle through: objects, paths, a class, a glob.
WEAVE_TARGETS: tuple[Callable[[], Any], ...] = (
    lambda: targets.add_one,
    lambda: "_weave_targets.double",
    lambda: Model.forward,
    lambda: Model,
    lambda: "_weave_targets.Model.build",
    lambda: "_weave_targets.*",
)


@pytest.fixture(autouse=True)
def _busy_switching() -> Iterator[None]:
    """Switch threads far more often than usual so that races show up."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(interval)


class Hits(threading.local):
    """Per thread: the advice that ran during the call the thread is making now."""

    def __init__(self) -> None:
        self.log: list[tuple[object, str]] = []


def _pair(key: object, hits: Hits) -> dict[str, Callable[[ah.CallContext], None]]:
    """Before and after advice that must run as a pair, each once per call."""

    def before(ctx: ah.CallContext) -> None:
        assert key not in ctx.data, f"before advice {key} ran twice in one call"
        ctx.data[key] = "before"
        hits.log.append((key, "before"))

    def after(ctx: ah.CallContext) -> None:
        assert ctx.data.get(key) == "before", f"after advice {key} ran without its before"
        ctx.data[key] = "after"
        hits.log.append((key, "after"))

    return {"before": before, "after": after}


def _check_hits(log: list[tuple[object, str]]) -> None:
    """Every advice that ran in one call ran once, before first, then its after."""
    counts = Counter(log)
    for (key, stage), n in counts.items():
        assert n == 1, f"{stage} advice {key} ran {n} times in one call"
        if stage == "before":
            assert counts[(key, "after")] == 1, f"advice {key} ran before but not after"
        else:
            assert counts[(key, "before")] == 1, f"advice {key} ran after but not before"
    for key, stage in log:
        if stage == "after":
            assert log.index((key, "before")) < log.index((key, "after"))


def test_weave_and_unweave_while_calling() -> None:
    """8 threads: callers always get correct results and whole advice pairs; weavers leave
    the originals back."""
    hits = Hits()
    errors: list[BaseException] = []
    start = threading.Barrier(CALLERS + WEAVERS)
    persistent = ah.weave(targets.double, **_pair("persistent", hits))
    double_calls = Counter[bool]()  # by whether the persistent pair ran

    def caller(number: int) -> None:
        try:
            start.wait()
            names = list(CALLS_MADE)
            for i in range(CALLS):
                name = names[(i + number) % len(names)]
                call, expected = CALLS_MADE[name]
                hits.log = []
                assert call(i) == expected(i)
                _check_hits(hits.log)
                if name == "double":
                    double_calls[("persistent", "before") in hits.log] += 1
        except BaseException as exc:  # report any failure from the thread
            errors.append(exc)

    def weaver(number: int) -> None:
        try:
            start.wait()
            for i in range(WEAVES):
                target = WEAVE_TARGETS[(i + number) % len(WEAVE_TARGETS)]()
                handle = ah.weave(target, **_pair((number, i), hits))
                if i % 3 == 0:
                    hits.log = []
                    assert targets.double(i) == 2 * i
                    _check_hits(hits.log)
                handle.remove()
                if i % 7 == 0:
                    handle.remove()  # removing twice stays a no-op under contention
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(CALLERS)]
    threads += [threading.Thread(target=weaver, args=(n,)) for n in range(WEAVERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    assert double_calls[False] == 0
    assert double_calls[True] > 0
    persistent.remove()
    assert targets.changed() == []
    assert ah.default_weaver.registered == []


def test_register_and_remove_advice_while_calling(weaver: ah.Weaver) -> None:
    """Advice registered and removed on a declared join point mid-flight runs whole or not."""
    hits = Hits()
    errors: list[BaseException] = []
    start = threading.Barrier(CALLERS + WEAVERS)

    @weaver.joinpoint("threads_step")
    def step(x: int) -> int:
        return x * 3

    def caller(number: int) -> None:
        try:
            start.wait()
            for i in range(CALLS):
                hits.log = []
                assert step(i) == 3 * i
                _check_hits(hits.log)
        except BaseException as exc:
            errors.append(exc)

    def registrar(number: int) -> None:
        try:
            start.wait()
            for i in range(WEAVES):
                pair = _pair((number, i), hits)
                handle = weaver.register(
                    [
                        ah.Advice("before", pair["before"], ah.Name("threads_step"), priority=i),
                        ah.Advice("after", pair["after"], ah.Glob("threads_*"), priority=99 - i),
                    ]
                )
                handle.remove()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(CALLERS)]
    threads += [threading.Thread(target=registrar, args=(n,)) for n in range(WEAVERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    assert weaver.registered == []
    assert [r.stage for r in weaver.describe("threads_step")] == [""]


# -- removing one registration from two threads at once ----------------------------------------


def _run(fn: Callable[[], None], errors: list[BaseException]) -> threading.Thread:
    """Start ``fn`` on a daemon thread (a deadlock fails the test, not the session)."""

    def body() -> None:
        try:
            fn()
        except BaseException as exc:  # report any failure from the thread
            errors.append(exc)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


def test_a_second_remove_returns_only_once_the_first_has_removed(
    weaver: ah.Weaver, blocked_removal: tuple[threading.Event, threading.Event]
) -> None:
    """remove() in a second thread while a first is removing the same advice waits for it:
    when it returns, the advice is gone (it does not run in that thread's next call)."""
    entered, release = blocked_removal
    errors: list[BaseException] = []
    seen: list[int] = []

    @weaver.joinpoint("threads_remove")
    def step(x: int) -> int:
        return x

    advice = weaver.before("threads_remove")(lambda ctx: seen.append(ctx.args[0]))
    first = _run(advice.remove, errors)
    assert entered.wait(10)
    returned = threading.Event()

    def second() -> None:
        advice.remove()
        returned.set()
        step(2)

    other = _run(second, errors)
    assert not returned.wait(0.3), "the second remove() returned while the first was removing"
    step(1)  # the first removal has not taken it off yet
    release.set()
    first.join(10)
    other.join(10)
    assert returned.is_set()
    assert errors == []
    assert seen == [1]
    assert weaver.registered == []
    advice.remove()  # and a third, later, is a no-op


def test_advice_that_removes_itself_while_another_thread_removes_it(
    weaver: ah.Weaver, blocked_removal: tuple[threading.Event, threading.Event]
) -> None:
    """Advice running in one thread that calls its own remove() while another thread is
    removing it waits for that removal, then the call completes."""
    entered, release = blocked_removal
    errors: list[BaseException] = []
    results: list[int] = []

    @weaver.joinpoint("threads_self_remove")
    def step(x: int) -> int:
        return x * 2

    def drop(ctx: ah.CallContext) -> None:
        advice.remove()

    advice = weaver.before("threads_self_remove")(drop)
    first = _run(advice.remove, errors)
    assert entered.wait(10)
    caller = _run(lambda: results.append(step(3)), errors)
    release.set()
    first.join(10)
    caller.join(10)
    assert not first.is_alive()
    assert not caller.is_alive()
    assert errors == []
    assert results == [6]


def test_removals_that_remove_each_other_from_two_threads_do_not_deadlock() -> None:
    """Handles whose undo removes the other, removed from two threads at once, both
    finish: a removal does not wait for one that is waiting for it."""
    both_in = threading.Barrier(2, timeout=10)
    undone: list[str] = []

    def undo(name: str, other: Callable[[], ah.Handle]) -> Callable[[], None]:
        def run() -> None:
            both_in.wait()
            other().remove()
            undone.append(name)

        return run

    first: ah.Handle = ah.Handle(undo("first", lambda: second))
    second: ah.Handle = ah.Handle(undo("second", lambda: first))
    errors: list[BaseException] = []
    threads = [_run(first.remove, errors), _run(second.remove, errors)]
    for thread in threads:
        thread.join(10)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    assert sorted(undone) == ["first", "second"]
    assert not first.active
    assert not second.active


def test_remove_under_the_registry_lock_does_not_wait_for_a_removal_that_needs_it() -> None:
    """A remove() made while holding the registry lock (code run by a registration, e.g. a
    logger) does not wait for another thread's removal of that handle, which needs the
    lock to finish."""
    entered, release = threading.Event(), threading.Event()

    def undo() -> None:
        entered.set()
        release.wait(10)
        with LOCK:
            pass

    handle = ah.Handle(undo)
    errors: list[BaseException] = []

    def under_lock() -> None:
        with LOCK:
            handle.remove()
            release.set()

    first = _run(handle.remove, errors)
    assert entered.wait(10)
    second = _run(under_lock, errors)
    second.join(10)
    first.join(10)
    assert not first.is_alive()
    assert not second.is_alive()
    assert errors == []
