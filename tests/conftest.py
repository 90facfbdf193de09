"""Shared fixtures: every test starts and ends with no advice on the default weaver."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import aspecthook as ah
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


# The `weaver`, `isolate_default_weaver` and `recorder` fixtures come from the
# aspecthook.testing pytest plugin (entry point pytest11).
