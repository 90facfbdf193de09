"""The model inside a data-parallel wrapper or ``torch.compile``, which checkpoints and
``EMA`` work on."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["unwrapped", "without_wrapper_prefix"]

#: Wrappers that keep the model as ``.module`` and add ``module.`` to its state's keys.
_WRAPPERS = (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel)
_PREFIX = "module."
#: What ``torch.compile`` puts before the keys of the model it wraps (as ``_orig_mod``).
_COMPILED_PREFIX = "_orig_mod."


def unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` without its ``DistributedDataParallel`` / ``DataParallel`` wrapper or
    ``torch.compile``'s, so its state has the same keys in a distributed or compiled run
    and in a plain one."""
    while True:
        if isinstance(model, _WRAPPERS):
            model = model.module
        elif "_orig_mod" in getattr(model, "_modules", ()) and _compiled(model):
            model = model._modules["_orig_mod"]  # type: ignore[assignment]
        else:
            return model


def _compiled(model: torch.nn.Module) -> bool:
    """Whether ``model`` is ``torch.compile``'s wrapper. Its class is looked up only once
    something imported it (compiling does): a plain run never imports torch._dynamo."""
    frame = sys.modules.get("torch._dynamo.eval_frame")
    kind = getattr(frame, "OptimizedModule", None)
    return kind is not None and isinstance(model, kind)


def without_wrapper_prefix(weights: Mapping[str, Any], model: torch.nn.Module) -> Mapping[str, Any]:
    """``weights`` saved from a wrapped or compiled model (every key starts with
    ``module.`` or ``_orig_mod.``) with the prefix taken off, when ``model``'s own keys
    have none; otherwise as they are."""
    own: list[str] | None = None  # the model's keys, read only for a prefixed state
    for prefix in (_PREFIX, _COMPILED_PREFIX, _PREFIX):  # DDP(compile(m)) saved as it was
        if not weights or not all(key.startswith(prefix) for key in weights):
            continue
        own = list(model.state_dict()) if own is None else own
        if any(key.startswith(prefix) for key in own):
            continue
        weights = {key[len(prefix) :]: value for key, value in weights.items()}
    return weights
