"""The Python snippets in README.md and docs/guide.md run as written, in page order; the API
page lists each error once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "docs" / "guide.md", ROOT / "docs" / "training.md"]
_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_snippets_run(page: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each page's python blocks execute in one namespace without error."""
    blocks = _BLOCK.findall(page.read_text())
    assert blocks, f"{page} has no python snippets"
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for block in blocks:
        exec(compile(block, str(page), "exec"), namespace)
    assert capsys.readouterr().out  # the snippets show something to the reader


def test_the_api_pages_error_table_lists_each_error_once() -> None:
    """docs/api.md has one row per class of aspecthook.errors, none written twice."""
    import aspecthook.errors

    rows = re.findall(r"^\| `(\w+)` \|", (ROOT / "docs" / "api.md").read_text(), re.MULTILINE)
    errors = [
        name
        for name, value in vars(aspecthook.errors).items()
        if isinstance(value, type)
        and issubclass(value, Exception)
        and value.__module__ == "aspecthook.errors"
    ]
    assert sorted(name for name in rows if name in errors) == sorted(errors)
