"""The model inside a data-parallel wrapper, which checkpoints and ``EMA`` work on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["unwrapped", "without_wrapper_prefix"]

#: Wrappers that keep the model as ``.module`` and add ``module.`` to its state's keys.
_WRAPPERS = (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel)
_PREFIX = "module."


def unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` without its ``DistributedDataParallel`` / ``DataParallel`` wrapper, so
    its state has the same keys in a distributed run and in a single process."""
    while isinstance(model, _WRAPPERS):
        model = model.module
    return model


def without_wrapper_prefix(weights: Mapping[str, Any], model: torch.nn.Module) -> Mapping[str, Any]:
    """``weights`` saved from a wrapped model (every key starts with ``module.``) with the
    prefix taken off, when ``model``'s own keys have none; otherwise as they are."""
    if not weights or not all(key.startswith(_PREFIX) for key in weights):
        return weights
    if any(key.startswith(_PREFIX) for key in model.state_dict()):
        return weights
    return {key[len(_PREFIX) :]: value for key, value in weights.items()}
