"""The Python snippets of the README and the docs run as written, in page order, and
print what the pages say they print."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import aspecthook as ah
from aspecthook.registry import Registry

ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    ROOT / "README.md",
    ROOT / "docs" / "guide.md",
    ROOT / "docs" / "training.md",
    ROOT / "docs" / "instrumenting.md",
]
_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)

# What each page's snippets print, as the page quotes it (beside the call, or in the
# text): each line must be on the page and in the output, so the two change together.
PRINTED: dict[str, list[str]] = {
    "README.md": ["batch [1, 2]"],
    "guide.md": [
        "batch [1, 2]",
        "default() at __main__.SetEncoder.default",
        "{'status': 200}",
        "[False, False, True]",
        "['retry.attempt', 'retry.attempt', 'call']",
        "***",
        "1 1",
        "started: True",
        "audited: ('hello',)",
    ],
    "training.md": ["{} 4"],
    "instrumenting.md": [],
}


def _readme(namespace: dict[str, Any], out: str) -> None:
    """README: the advised join point returns 6 for [1, 2]; the woven json.dumps prints."""
    assert namespace["train_iter"]([1, 2]) == 6  # log_batch is removed, double is not
    assert "dumped 8" in out  # len('{"a": 1}')
    assert "join points and advice" in out  # print(ah.describe()) renders a table


def _guide(namespace: dict[str, Any], out: str) -> None:
    """guide: the counted advice ran on 5 of 10 calls; json.dumps is its own again."""
    import json

    (row,) = ah.describe("load_batch")
    assert (row.advice, row.calls) == ("check", 5)
    assert not hasattr(json.dumps, "__wrapped__")
    assert "show" not in namespace["rows"].advice_names("train_iter", "before")  # removed


def _training(namespace: dict[str, Any], out: str) -> None:
    """training: run() returns the validation metrics the comment shows."""
    assert set(namespace["metrics"]) == {"val/loss"}


def _instrumenting(namespace: dict[str, Any], out: str) -> None:
    """instrumenting: the registered aspect is built with the configured parameter."""
    assert out.splitlines()[-1] == "5"


CHECKS: dict[str, Callable[[dict[str, Any], str], None]] = {
    "README.md": _readme,
    "guide.md": _guide,
    "training.md": _training,
    "instrumenting.md": _instrumenting,
}


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_snippets_run(
    page: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each page's python blocks execute in one namespace, as a script, without error, and
    print what the page says."""
    if page.name == "instrumenting.md":  # it registers an aspect type: on a registry of its own
        monkeypatch.setattr("aspecthook.registry.ASPECTS", Registry("aspect"))
    text = page.read_text()
    blocks = _BLOCK.findall(text)
    assert blocks, f"{page} has no python snippets"
    namespace: dict[str, Any] = {"__name__": "__main__"}
    for block in blocks:
        exec(compile(block, str(page), "exec"), namespace)
    out = capsys.readouterr().out
    assert out  # the snippets show something to the reader
    lines = out.splitlines()
    for promised in PRINTED[page.name]:
        assert promised in text, f"{page.name} no longer quotes {promised!r}"
        assert promised in lines, f"{page.name}'s snippets did not print {promised!r}"
    CHECKS[page.name](namespace, out)


PUBLIC_MODULES = [
    "aspecthook",
    "aspecthook.aspects",
    "aspecthook.testing",
    "aspecthook.registry",
    "aspecthook.errors",
    "aspecthook.train",
    "aspecthook.train.aspects",
    "aspecthook.adapters",
]


def _code_words(text: str) -> set[str]:
    """The identifiers written inside the page's inline code spans."""
    spans = re.findall(r"`([^`]+)`", text)  # a span may wrap onto the next line
    return {word for span in spans for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", span)}


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_api_page_names_every_public_name(module: str) -> None:
    """docs/api.md shows every name of each public module's ``__all__`` in code."""
    import importlib

    documented = _code_words((ROOT / "docs" / "api.md").read_text())
    public = importlib.import_module(module).__all__
    assert [name for name in public if name not in documented] == []


def test_api_page_lists_the_row_fields_in_order() -> None:
    """The fields api.md gives for describe()'s rows are Row's, in its order."""
    import dataclasses

    text = (ROOT / "docs" / "api.md").read_text()
    listed = re.search(r"list of `Row`s\s*\(([^)]*)\)", text)
    assert listed is not None
    names = re.findall(r"`(\w+)`", listed.group(1))
    assert names == [field.name for field in dataclasses.fields(ah.Row)]
