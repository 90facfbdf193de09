"""`import aspecthook` stays light: no torch, structlog, rich or yaml until they are needed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "structlog", "rich", "yaml")


def _modules_after(code: str) -> set[str]:
    """The top-level modules loaded in a fresh interpreter after running ``code``."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    return {name.partition(".")[0] for name in json.loads(done.stdout.splitlines()[-1])}


@pytest.mark.parametrize("heavy", HEAVY)
def test_import_does_not_load_heavy_dependencies(heavy: str) -> None:
    """A fresh `import aspecthook` leaves torch, structlog, rich and yaml unimported."""
    assert heavy not in _modules_after("import aspecthook")


def test_declaring_and_advising_stays_light() -> None:
    """Declaring a join point, advising and calling it needs none of the heavy dependencies."""
    code = "\n".join(
        [
            "import aspecthook as ah",
            "@ah.joinpoint('light')",
            "def f(x): return x",
            "ah.before('light')(lambda ctx: None)",
            "assert f(1) == 1",
            "ah.emit('light.event', x=1)",
        ]
    )
    assert not set(HEAVY) & _modules_after(code)


def test_registry_import_and_listing_stay_light() -> None:
    """`import aspecthook.registry` and listing ASPECTS (training aspects too) load no torch."""
    code = "\n".join(
        [
            "from aspecthook.registry import ASPECTS",
            "assert {'Checkpoint', 'CheckpointHook', 'Timed'} <= set(ASPECTS.names())",
        ]
    )
    assert not set(HEAVY) & _modules_after(code)
