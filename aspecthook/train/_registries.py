"""The registries ``Runner.from_config`` builds a run's parts from: ``MODELS``,
``OPTIMIZERS``, ``SCHEDULERS``, ``LOSSES`` and ``DATASETS``.

Each falls back to the matching names of torch (``torch.nn``, ``torch.optim``,
``torch.optim.lr_scheduler``, torch's losses), collected here from torch's own namespaces;
the config reader and its checks live in ``_config``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from ..registry import Registry
from ._datasets import RandomClassification, RandomRegression

__all__ = ["DATASETS", "LOSSES", "MODELS", "OPTIMIZERS", "SCHEDULERS"]


def _classes(namespace: object, base: type, *exclude: type) -> dict[str, Callable[..., Any]]:
    """The public subclasses of ``base`` in ``namespace`` by name, minus ``exclude``."""
    return {
        name: value
        for name, value in vars(namespace).items()
        if not name.startswith("_")
        and inspect.isclass(value)
        and issubclass(value, base)
        and value not in exclude
    }


def _torch_models() -> dict[str, Callable[..., Any]]:
    return _classes(torch.nn, torch.nn.Module, torch.nn.Module)


def _torch_optimizers() -> dict[str, Callable[..., Any]]:
    return _classes(torch.optim, torch.optim.Optimizer, torch.optim.Optimizer)


def _torch_schedulers() -> dict[str, Callable[..., Any]]:
    schedulers = torch.optim.lr_scheduler
    found = _classes(schedulers, schedulers.LRScheduler, schedulers.LRScheduler)
    found.update(_classes(schedulers, schedulers.ReduceLROnPlateau))
    return found


def _torch_losses() -> dict[str, Callable[..., Any]]:
    functional = torch.nn.functional
    found = _classes(torch.nn, torch.nn.modules.loss._Loss)
    found.update(
        (name, value)
        for name, value in vars(functional).items()
        if callable(value)
        and not inspect.isclass(value)
        and (name.endswith("_loss") or "entropy" in name or name == "kl_div")
    )
    return found


def _subclass_of(*bases: type) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, type) and issubclass(value, bases)


MODELS = Registry(
    "model",
    fallback=_torch_models,
    accepts=(_subclass_of(torch.nn.Module), "a torch.nn.Module class"),
)
"""Model types by name; names of ``torch.nn`` modules resolve when not registered."""
OPTIMIZERS = Registry(
    "optimizer",
    fallback=_torch_optimizers,
    accepts=(_subclass_of(torch.optim.Optimizer), "a torch.optim.Optimizer class"),
)
"""Optimizer types by name; ``torch.optim`` optimizers resolve when not registered."""
SCHEDULERS = Registry(
    "scheduler",
    fallback=_torch_schedulers,
    accepts=(
        _subclass_of(
            torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau
        ),
        "a torch LR scheduler class",
    ),
)
"""LR scheduler types by name; ``torch.optim.lr_scheduler`` ones resolve when not registered."""
LOSSES = Registry(
    "loss",
    fallback=_torch_losses,
    accepts=(_subclass_of(torch.nn.Module), "a torch.nn.Module loss class"),
)
"""Losses by name: ``torch.nn`` loss classes and ``torch.nn.functional`` loss functions."""
DATASETS = Registry(
    "dataset",
    accepts=(_subclass_of(torch.utils.data.Dataset), "a torch.utils.data.Dataset class"),
)
"""Dataset types by name: ``RandomClassification``, ``RandomRegression`` and yours."""
DATASETS.register(RandomClassification)
DATASETS.register(RandomRegression)
