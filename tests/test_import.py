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


@pytest.mark.parametrize(
    ("code", "error"),
    [
        ("import aspecthook.train", "ModuleNotFoundError"),
        ("from aspecthook.train.aspects import Checkpoint", "ModuleNotFoundError"),
        (
            "from aspecthook.registry import ASPECTS; ASPECTS.build({'type': 'Checkpoint'})",
            "aspecthook.errors.UnknownAspectError",
        ),
    ],
)
def test_training_without_torch_says_which_extra_to_install(code: str, error: str) -> None:
    """Where torch is not installed, reaching for the runner says to install the extra,
    not only that a module named torch is missing (torch is hidden from the child here)."""
    script = f"import sys\nsys.modules['torch'] = None\n{code}"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{error}: ")
    assert "aspecthook.train (the Runner and the training aspects) needs PyTorch" in last
    assert last.endswith("pip install 'aspecthook[torch]'")
