"""The model inside a data-parallel or ``torch.compile`` wrapper, which checkpoints and
``EMA`` work on."""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

import torch
import wrapt

__all__ = ["unwrapped", "without_wrapper_prefix"]

#: Wrappers that keep the model as ``.module`` and add ``module.`` to its state's keys, and
#: (once torch's compiler is imported, see ``_add_compiled``) ``torch.compile``'s, which
#: keeps it as ``._orig_mod`` and adds ``_orig_mod.``.
_WRAPPERS: tuple[type, ...] = (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel)
_COMPILED: tuple[type, ...] = ()
_PREFIXES = ("module.", "_orig_mod.")


def _add_compiled(eval_frame: ModuleType) -> None:
    """Count ``torch.compile``'s ``OptimizedModule`` among the wrappers, as its module is
    imported (by the first ``torch.compile``, or optimizer): ``unwrapped`` runs every step
    under ``EMA``, so it tests one tuple, and importing torch's compiler here would cost
    every program seconds."""
    global _WRAPPERS, _COMPILED
    compiled = getattr(eval_frame, "OptimizedModule", None)
    if isinstance(compiled, type) and compiled not in _WRAPPERS:
        _COMPILED = (compiled,)
        _WRAPPERS = (*_WRAPPERS, compiled)


wrapt.register_post_import_hook(_add_compiled, "torch._dynamo.eval_frame")


def unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` without its ``DistributedDataParallel`` / ``DataParallel`` /
    ``torch.compile`` wrappers, so its state has the same keys in a distributed run, a
    compiled one and a single plain process."""
    while isinstance(model, _WRAPPERS):
        inner: torch.nn.Module = getattr(
            model, "_orig_mod" if isinstance(model, _COMPILED) else "module"
        )
        model = inner
    return model


def without_wrapper_prefix(weights: Mapping[str, Any], model: torch.nn.Module) -> Mapping[str, Any]:
    """``weights`` saved from a wrapped model (every key starts with ``module.`` or
    ``_orig_mod.``, or both) with the prefixes taken off that ``model``'s own keys do not
    have; otherwise as they are."""
    own: list[str] | None = None
    while weights:
        prefix = next((p for p in _PREFIXES if all(key.startswith(p) for key in weights)), None)
        if prefix is None:
            return weights
        own = list(model.state_dict()) if own is None else own
        if any(key.startswith(prefix) for key in own):
            return weights
        weights = {key[len(prefix) :]: value for key, value in weights.items()}
    return weights
