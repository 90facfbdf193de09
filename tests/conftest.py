"""Shared fixtures: every test starts and ends with no advice on the default weaver;
removals held halfway for tests of removal across threads."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

import aspecthook as ah
from aspecthook._registry import REGISTRY
from aspecthook._weave import WEAVES


@pytest.fixture(autouse=True)
def _clean_default_weaver() -> Iterator[None]:
    """Remove whatever a test registered or wove on the default weaver."""
    yield
    ah.default_weaver.clear()
    assert not ah.default_weaver.registered
    leftover = [r for r in WEAVES if r.weaver is ah.default_weaver]
    for record in leftover:
        WEAVES.remove(record)


@pytest.fixture
def blocked_removal(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Removals stop inside, before the registry takes the advice off, until released:
    (entered, release)."""
    entered, release = threading.Event(), threading.Event()
    original = REGISTRY.remove_advice

    def remove_advice(weaver: ah.Weaver, advices: list[ah.Advice]) -> None:
        entered.set()
        release.wait(10)
        original(weaver, advices)

    monkeypatch.setattr(REGISTRY, "remove_advice", remove_advice)
    return entered, release


# The `weaver`, `isolate_default_weaver` and `recorder` fixtures come from the
# aspecthook.testing pytest plugin (entry point pytest11).
