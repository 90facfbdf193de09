"""Tiny models, data and runners for the training tests: made in code, fast, seeded.

Import from test modules in this folder (``from _fixtures import make_runner``); pytest
puts the folder on ``sys.path`` because it has no ``__init__.py``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from aspecthook import Aspect
from aspecthook.train import Runner

__all__ = [
    "CountingDataset",
    "make_dataset",
    "make_loader",
    "make_model",
    "make_runner",
    "one_thread",
    "params",
]


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one thread for the block (use in an autouse fixture).

    Tiny models are fastest on one thread, much faster on a busy machine where a second
    intra-op thread has to wait for a core, and give the same bits run after run.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def make_dataset(n: int = 64, features: int = 4, classes: int = 3, seed: int = 0) -> TensorDataset:
    """``n`` random inputs with labels that depend on them (so a model can learn)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    y = (x[:, :classes].argmax(dim=1) + (x[:, -1] > 1).long()) % classes
    return TensorDataset(x, y)


def make_model(
    features: int = 4, classes: int = 3, hidden: int = 16, dropout: float = 0.0, seed: int = 0
) -> torch.nn.Module:
    """An MLP ``features -> hidden -> classes`` (with ``Dropout`` when ``dropout`` > 0)."""
    torch.manual_seed(seed)
    layers: list[torch.nn.Module] = [torch.nn.Linear(features, hidden), torch.nn.ReLU()]
    if dropout:
        layers.append(torch.nn.Dropout(dropout))
    layers.append(torch.nn.Linear(hidden, classes))
    return torch.nn.Sequential(*layers)


def make_loader(
    dataset: Dataset[Any], batch_size: int = 8, shuffle: bool = False
) -> DataLoader[Any]:
    """A single-process ``DataLoader`` (workers would only slow tiny tests down)."""
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle)


def make_runner(
    work_dir: str | os.PathLike[str] | None,
    *,
    aspects: Iterable[Aspect] = (),
    n: int = 64,
    batch_size: int = 8,
    shuffle: bool = False,
    dropout: float = 0.0,
    val: bool = False,
    lr: float = 0.1,
    **kwargs: Any,
) -> Runner:
    """A runner on ``make_model`` / ``make_dataset`` with cross-entropy and SGD.

    ``val=True`` adds a validation loader; ``kwargs`` go to ``Runner`` (``max_epochs=1``
    unless ``max_epochs`` or ``max_iters`` is given).
    """
    model = make_model(dropout=dropout)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    if "max_iters" not in kwargs:
        kwargs.setdefault("max_epochs", 1)
    val_loader = make_loader(make_dataset(n // 2, seed=1), batch_size) if val else None
    return Runner(
        model,
        optimizer,
        make_loader(make_dataset(n), batch_size, shuffle),
        val_loader=val_loader,
        loss_fn=torch.nn.functional.cross_entropy,
        aspects=aspects,
        work_dir=work_dir,
        **kwargs,
    )


def params(runner: Runner) -> list[torch.Tensor]:
    """Copies of the runner's model parameters."""
    return [p.detach().clone() for p in runner.model.parameters()]


class CountingDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """``n`` one-feature samples; ``calls`` counts ``__getitem__``, ``seen`` the indices."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.calls = 0
        self.seen: list[int] = []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls += 1
        self.seen.append(index)
        return torch.tensor([float(index)]), torch.tensor([0.0])
