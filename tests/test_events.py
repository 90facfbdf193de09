"""Events: on('name') / on('glob.*') subscribers and emit(name, **payload)."""

from __future__ import annotations

import copy
import pickle
import re
from typing import Any

import pytest
from structlog.testing import capture_logs

import aspecthook as ah
from aspecthook import Aspect, on
from aspecthook.errors import AdviceSignatureError, InvalidOptionError


@pytest.fixture
def event(request: pytest.FixtureRequest) -> str:
    """An event name prefix that no other test uses."""
    return "test_events." + re.sub(r"\W", "_", request.node.name)


def test_subscriber_receives_name_payload_and_source(weaver: ah.Weaver, event: str) -> None:
    """A subscriber gets an Event with .name, .payload (the keyword arguments) and .source."""
    got: list[ah.Event] = []
    weaver.on(f"{event}.saved")(got.append)
    owner = object()
    returned = weaver.emit(f"{event}.saved", source=owner, path="/tmp/x.pt", step=3)
    assert len(got) == 1
    received = got[0]
    assert received is returned
    assert isinstance(received, ah.Event)
    assert received.name == f"{event}.saved"
    assert received.payload == {"path": "/tmp/x.pt", "step": 3}
    assert received.source is owner


def test_source_defaults_to_none(weaver: ah.Weaver, event: str) -> None:
    """emit() without source= gives an Event whose source is None."""
    assert weaver.emit(event, a=1).source is None


def test_payload_keys_read_as_attributes(weaver: ah.Weaver, event: str) -> None:
    """Payload keys can be read as attributes; a missing one lists the keys there are."""
    evt = weaver.emit(event, path="p", step=2)
    assert evt.path == "p"
    assert evt.step == 2
    with pytest.raises(AttributeError, match=r"no payload key 'epoch'.*\['path', 'step'\]"):
        evt.epoch


def test_emit_without_subscribers_returns_the_event(weaver: ah.Weaver, event: str) -> None:
    """Emitting an event nobody subscribes to is fine and returns the Event."""
    evt = weaver.emit(f"{event}.unheard", x=1)
    assert evt.name == f"{event}.unheard"
    assert evt.payload == {"x": 1}


def test_exact_name_only_matches_that_name(weaver: ah.Weaver, event: str) -> None:
    """on('a.b') receives 'a.b' and nothing else."""
    got: list[str] = []
    weaver.on(f"{event}.saved")(lambda e: got.append(e.name))
    weaver.emit(f"{event}.saved")
    weaver.emit(f"{event}.saved.extra")
    weaver.emit(f"{event}.save")
    assert got == [f"{event}.saved"]


def test_glob_subscribes_to_a_family(weaver: ah.Weaver, event: str) -> None:
    """on('ckpt.*') receives every event whose name matches the glob."""
    got: list[str] = []
    weaver.on(f"{event}.ckpt.*")(lambda e: got.append(e.name))
    for name in ("ckpt.saved", "ckpt.loaded", "ckptx", "other.saved"):
        weaver.emit(f"{event}.{name}")
    assert got == [f"{event}.ckpt.saved", f"{event}.ckpt.loaded"]


def test_subscribers_run_in_priority_order(weaver: ah.Weaver, event: str) -> None:
    """Subscribers run in ascending priority, ties in registration order."""
    got: list[str] = []
    weaver.on(event, priority="low")(lambda e: got.append("low"))
    weaver.on(event)(lambda e: got.append("normal-1"))
    weaver.on(f"{event}*", priority="highest")(lambda e: got.append("highest"))
    weaver.on(event)(lambda e: got.append("normal-2"))
    weaver.emit(event)
    assert got == ["highest", "normal-1", "normal-2", "low"]


def test_events_reach_subscribers_of_every_global_weaver(weaver: ah.Weaver, event: str) -> None:
    """aspecthook.emit reaches subscribers on the default weaver and on other global weavers."""
    got: list[str] = []
    ah.on(event)(lambda e: got.append("default"))
    weaver.on(event)(lambda e: got.append("private"))
    ah.emit(event)
    weaver.emit(event)
    assert got == ["default", "private", "default", "private"]


def test_subscribing_after_an_emit_takes_effect(weaver: ah.Weaver, event: str) -> None:
    """A subscriber added after earlier emits receives the next emits."""
    got: list[int] = []
    weaver.emit(event, n=0)
    weaver.on(event)(lambda e: got.append(e.n))
    weaver.emit(event, n=1)
    assert got == [1]


# -- errors ------------------------------------------------------------------------------------


def test_errors_log_policy_logs_and_later_subscribers_still_run(
    weaver: ah.Weaver, event: str
) -> None:
    """errors='log': a failing subscriber is logged and counted; the others still run."""
    got: list[str] = []

    @weaver.on(event, errors="log", priority="high")
    def broken(evt: Any) -> None:
        raise RuntimeError("subscriber failed")

    weaver.on(event)(lambda e: got.append("after"))
    with capture_logs() as logs:
        weaver.emit(event)
        weaver.emit(event)
    assert got == ["after", "after"]
    assert broken.failures == 2
    assert [entry["event"] for entry in logs] == ["advice.failed"] * 2
    assert logs[0]["log_level"] == "error"
    assert logs[0]["advice"] == "broken"
    assert logs[0]["kind"] == "on"
    assert logs[0]["joinpoint"] == event


@pytest.mark.parametrize("key", ["joinpoint", "name"])
def test_errors_log_names_the_event_whatever_its_payload(
    weaver: ah.Weaver, event: str, key: str
) -> None:
    """A failure logged under errors='log' (the subscriber's or its when= predicate's) names
    the event that was sent, also when the payload has a key such as 'joinpoint' that an
    Event answers as an attribute: it was logged as the Event object."""

    @weaver.on(event, errors="log")
    def broken(evt: Any) -> None:
        raise RuntimeError("subscriber failed")

    @weaver.on(event, errors="log", when=lambda evt: evt.payload["missing"])
    def never(evt: Any) -> None:
        pass

    with capture_logs() as logs:
        weaver.emit(event, **{key: "train_iter"})
    assert [entry["advice"] for entry in logs] == ["broken", "never"]
    assert [entry["joinpoint"] for entry in logs] == [event, event]


def test_predicate_that_cannot_judge_an_event_matches_nothing_and_is_logged_once(
    weaver: ah.Weaver, event: str
) -> None:
    """A predicate pointcut that raises matches no event; emit() still reaches the others."""
    got: list[str] = []
    with capture_logs() as logs:

        @weaver.on(ah.Predicate(lambda evt: evt.payload["step"] > 0))  # KeyError on probes
        def by_payload(evt: Any) -> None:
            got.append("predicate")

        weaver.on(event)(lambda e: got.append("name"))
        weaver.emit(event, step=1)
        weaver.emit(f"{event}.other", step=2)
        weaver.emit(event, step=3)
    assert got == ["name", "name"]
    [entry] = [e for e in logs if e["event"] == "event.pointcut_failed"]
    assert entry["log_level"] == "warning"
    assert entry["advice"] == "by_payload"
    assert "Predicate" in entry["pointcut"]
    assert isinstance(entry["exc_info"], KeyError)


def test_errors_raise_propagates_and_stops_delivery(weaver: ah.Weaver, event: str) -> None:
    """errors='raise' (default): a failing subscriber's exception reaches the emitter."""
    got: list[str] = []

    @weaver.on(event, priority="high")
    def broken(evt: Any) -> None:
        raise RuntimeError("subscriber failed")

    weaver.on(event)(lambda e: got.append("after"))
    with pytest.raises(RuntimeError, match="subscriber failed"):
        weaver.emit(event)
    assert got == []


def test_subscriber_signature_is_checked_at_registration(weaver: ah.Weaver, event: str) -> None:
    """A subscriber that cannot take the event is refused when it subscribes."""

    def no_args() -> None:
        pass

    with pytest.raises(AdviceSignatureError, match=r"no_args\(\).*no_args\(event\)"):
        weaver.on(event)(no_args)


def test_an_async_subscriber_is_refused_at_registration(weaver: ah.Weaver, event: str) -> None:
    """emit() is synchronous: an async def subscriber (or an object with an async __call__)
    would never run, so it is refused with what to do instead."""

    async def notify(evt: ah.Event) -> None:
        pass

    class Notify:
        async def __call__(self, evt: ah.Event) -> None:
            pass

    for subscriber in (notify, Notify()):
        with pytest.raises(AdviceSignatureError, match=r"coroutine function.*define it with def"):
            weaver.on(event)(subscriber)
    assert weaver.registered == []


def test_event_names_that_carry_ids_do_not_pile_up(weaver: ah.Weaver, event: str) -> None:
    """Emitting many distinct names (``job.<id>.done``) keeps a bounded number of worked-out
    subscriber lists and compiled subscribers, and every subscriber still gets each event."""
    got: list[str] = []
    subscriber = weaver.on(f"{event}.*")(lambda evt: got.append(evt.name))
    names = [f"{event}.{i}.done" for i in range(3000)]
    for name in names:
        ah.emit(name)
    assert got == names
    assert len(ah.default_weaver._events) <= 1024
    assert len(subscriber._compiled_events) == 1


def test_a_failed_further_subscription_leaves_the_existing_one(
    weaver: ah.Weaver, event: str
) -> None:
    """on('process.*')(handler) that fails (the process.start replay raises) leaves the
    handler's earlier subscription in place: the failure changes nothing."""
    got: list[str] = []

    def record(evt: ah.Event) -> None:
        if evt.name == "process.start":
            raise RuntimeError("not ready")
        got.append(evt.name)

    handler = weaver.on(f"{event}.done")(record)
    with pytest.raises(RuntimeError, match="not ready"):
        weaver.on("process.start")(handler)
    assert handler.active
    ah.emit(f"{event}.done")
    assert got == [f"{event}.done"]


# -- filters -----------------------------------------------------------------------------------


def test_every_and_once_count_emits(weaver: ah.Weaver, event: str) -> None:
    """every=n and once=True filter emits as they filter calls."""
    every: list[int] = []
    once: list[int] = []
    weaver.on(event, every=2)(lambda e: every.append(e.n))
    weaver.on(event, once=True)(lambda e: once.append(e.n))
    for n in range(5):
        weaver.emit(event, n=n)
    assert every == [1, 3]
    assert once == [0]


def test_when_filters_events(weaver: ah.Weaver, event: str) -> None:
    """when=predicate(event) delivers only the events it accepts."""
    got: list[float] = []
    weaver.on(event, when=lambda e: e.loss < 1.0)(lambda e: got.append(e.loss))
    for loss in (2.0, 0.5, 1.5, 0.1):
        weaver.emit(event, loss=loss)
    assert got == [0.5, 0.1]


# -- removal -----------------------------------------------------------------------------------


def test_remove_unsubscribes(weaver: ah.Weaver, event: str) -> None:
    """subscriber.remove() stops delivery; removing twice is a no-op."""
    got: list[str] = []
    subscriber = weaver.on(event)(lambda e: got.append("got"))
    weaver.emit(event)
    subscriber.remove()
    subscriber.remove()
    weaver.emit(event)
    assert got == ["got"]


def test_subscriber_as_context_manager(weaver: ah.Weaver, event: str) -> None:
    """`with subscriber:` receives events in the block only."""
    got: list[int] = []
    with weaver.on(event)(lambda e: got.append(e.n)):
        weaver.emit(event, n=1)
    weaver.emit(event, n=2)
    assert got == [1]


def test_aspect_subscribers_are_removed_with_the_aspect(weaver: ah.Weaver, event: str) -> None:
    """An Aspect's @on methods subscribe per instance and its handle removes them."""

    class Saved(Aspect):
        def __init__(self) -> None:
            super().__init__()
            self.paths: list[str] = []

        @on(f"{event}.saved")
        def remember(self, evt: Any) -> None:
            self.paths.append(evt.path)

    first, second = Saved(), Saved()
    handle = weaver.register(first)
    weaver.register(second)
    weaver.emit(f"{event}.saved", path="a")
    handle.remove()
    weaver.emit(f"{event}.saved", path="b")
    assert first.paths == ["a"]
    assert second.paths == ["a", "b"]


def test_clear_removes_subscribers(event: str) -> None:
    """weaver.clear() removes every subscriber registered through that weaver."""
    got: list[str] = []
    private = ah.Weaver("test_events.clear")
    try:
        private.on(event)(lambda e: got.append("got"))
        private.clear()
        private.emit(event)
        assert got == []
    finally:
        private.close()


def test_an_event_can_be_copied_and_pickled(weaver: ah.Weaver, event: str) -> None:
    """An emitted Event copies, deep-copies and pickles (e.g. onto a multiprocessing queue)."""
    emitted = weaver.emit(event, step=3, loss=0.5)
    for clone in (
        copy.copy(emitted),
        copy.deepcopy(emitted),
        pickle.loads(pickle.dumps(emitted)),
    ):
        assert (clone.name, clone.payload, clone.source) == (event, {"step": 3, "loss": 0.5}, None)
        assert clone.step == 3


def test_an_event_without_a_field_set_says_so_without_recursing() -> None:
    """An Event whose fields are unset (made without __init__) raises AttributeError."""
    blank = ah.Event.__new__(ah.Event)
    with pytest.raises(AttributeError):
        blank.payload
    assert not hasattr(blank, "__setstate__")


@pytest.mark.parametrize("name", [5, None, b"job.done", ["job"]])
def test_an_event_name_that_is_not_a_string_is_refused(name: Any) -> None:
    """emit() of a name that is not a string says so (it was "cannot create weak reference"
    once anything subscribed, or "unhashable type")."""
    weaver = ah.Weaver("names", local=True)
    weaver.on("job.*")(lambda event: None)
    with pytest.raises(InvalidOptionError, match=r"emit\(.*\): an event name is a string"):
        weaver.emit(name)  # type: ignore[arg-type]
