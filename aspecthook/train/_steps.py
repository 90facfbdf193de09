"""What the runner's steps take and give back: batches split into ``(inputs, targets)``
and moved to the device, a step's result checked to be a loss, metrics copied out.

Kept apart from ``_runner`` as plain functions of their values (no runner in them).
``Runner.compute_train_step`` reads ``_PAIRS``, ``_Tensor`` and ``_as_outputs`` every
iteration: ``_runner`` imports them, so each stays one global lookup there.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import numbers
from collections.abc import Collection, Mapping
from typing import Any

import torch

from ..errors import RunnerError

__all__ = [
    "_PAIRS",
    "_Tensor",
    "_as_float",
    "_as_outputs",
    "_is_scalar",
    "_is_step_scalar",
    "_move",
    "_snapshot",
    "_split_batch",
    "_step_scalars",
]

#: Batch types taken as ``(inputs, targets)`` by the default step; the tensor type.
_PAIRS = (tuple, list)
_Tensor = torch.Tensor


def _split_batch(batch: Any) -> tuple[Any, Any]:
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        return batch[0], batch[1]
    if isinstance(batch, Mapping) and "inputs" in batch:
        return batch["inputs"], batch.get("targets")
    return batch, None


def _as_outputs(result: Any, *, where: str) -> dict[str, Any]:
    if isinstance(result, Mapping):
        outputs = dict(result)
        loss = outputs.get("loss")
    else:
        outputs = {"loss": result}
        loss = result
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise RunnerError(
            f"{where} returned {type(result).__name__}{_what(result, loss)}, not a loss: "
            "return a scalar loss "
            "tensor or a dict with a 'loss' tensor, or give loss_fn= (called as "
            "loss_fn(model(x), y)) or train_step=(runner, batch) -> loss"
        )
    return outputs


def _what(result: Any, loss: Any) -> str:
    """What is wrong with a step's result, for the error: a dict's keys, a tensor's shape."""
    if isinstance(result, Mapping) and "loss" not in result:
        return f" without 'loss' (keys: {', '.join(map(repr, result))})"
    which = " of" if loss is result else " whose 'loss' has"
    if isinstance(loss, torch.Tensor):
        return f"{which} shape {tuple(loss.shape)} (reduce it, e.g. .mean())"
    return "" if loss is result else f" whose 'loss' is {type(loss).__name__}"


def _is_scalar(value: Any) -> bool:
    """A 0-d tensor or a real number (numpy's too): what a step returns as its loss."""
    if isinstance(value, torch.Tensor):
        return value.dim() == 0
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _as_float(value: Any) -> float | None:
    """A metric's value as a float: a number, a numpy scalar or a one-element tensor (or
    array); None for anything else."""
    try:
        number = value.item() if hasattr(value, "item") else value  # tensors, numpy values
    except (ValueError, RuntimeError):  # more than one element
        return None
    return float(number) if isinstance(number, numbers.Real) else None


def _is_step_scalar(value: Any) -> bool:
    """A further value of a step's dict to log or average: a number (numpy's scalars
    included, which are no Python float; not a bool) or a one-element tensor."""
    if isinstance(value, torch.Tensor):
        return value.numel() == 1
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _step_scalars(result: Any, skip: Collection[str]) -> dict[str, Any]:
    """The further scalars of a step's dict (``{'loss': ..., 'acc': ...}``): its entries
    named by a string not in ``skip`` whose value ``_is_step_scalar``, as they are. What
    ``Logger`` logs of a training step and ``Evaluate`` averages of a validation step."""
    if not isinstance(result, Mapping) or len(result) <= 1:
        return {}
    return {
        name: value
        for name, value in result.items()
        if isinstance(name, str) and name not in skip and _is_step_scalar(value)
    }


def _snapshot(metrics: Any) -> dict[str, Any]:
    """What ``run()`` / ``test()`` hand back: a copy of the metrics dict the join point
    returned (advice may have replaced the result with anything else: kept as it is)."""
    return dict(metrics) if type(metrics) is dict else metrics


def _move(batch: Any, device: torch.device, non_blocking: bool) -> Any:
    """``batch`` with its tensors on ``device``: tensors, mappings (their type kept),
    namedtuples, tuples, lists and dataclass instances (a shallow copy) are gone through;
    any other value is kept as it is. ``non_blocking`` only for a CUDA target: a copy to
    the host (or to MPS) may be read before it is complete (torch's ``pin_memory`` and
    ``non_blocking`` guide)."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, Mapping):
        return _moved_mapping(batch, device, non_blocking)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*(_move(v, device, non_blocking) for v in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(_move(v, device, non_blocking) for v in batch)
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        moved = copy.copy(batch)
        for field in dataclasses.fields(batch):
            value = getattr(batch, field.name)
            object.__setattr__(moved, field.name, _move(value, device, non_blocking))  # frozen too
        return moved
    return batch


def _moved_mapping(batch: Mapping[Any, Any], device: torch.device, non_blocking: bool) -> Any:
    """A mapping of the same type (``OrderedDict``, ``defaultdict``, a ``UserDict``)
    with its values moved; a plain dict where the type cannot be made from one."""
    moved = {k: _move(v, device, non_blocking) for k, v in batch.items()}
    kind: Any = type(batch)
    if kind is dict:
        return moved
    try:
        if isinstance(batch, collections.defaultdict):
            return kind(batch.default_factory, moved)
        return kind(moved)
    except TypeError:
        return moved
