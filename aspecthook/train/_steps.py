"""What the runner's steps take and give back: batches split into ``(inputs, targets)``
and moved to the device, a step's result checked to be a loss, metrics copied out.

Kept apart from ``_runner`` as plain functions of their values (no runner in them).
``Runner.compute_train_step`` reads ``_PAIRS``, ``_Tensor`` and ``_as_outputs`` every
iteration: ``_runner`` imports them, so each stays one global lookup there.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import torch

from ..errors import RunnerError

__all__ = ["_PAIRS", "_Tensor", "_as_outputs", "_is_scalar", "_move", "_snapshot", "_split_batch"]

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
            f"{where} returned {type(result).__name__}, not a loss: return a scalar loss "
            "tensor or a dict with a 'loss' tensor, or give loss_fn= (called as "
            "loss_fn(model(x), y)) or train_step=(runner, batch) -> loss"
        )
    return outputs


def _is_scalar(value: Any) -> bool:
    """A 0-d tensor or a real number (numpy's too): what a step returns as its loss."""
    if isinstance(value, torch.Tensor):
        return value.dim() == 0
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _snapshot(metrics: Any) -> dict[str, Any]:
    """What ``run()`` / ``test()`` hand back: a copy of the metrics dict the join point
    returned (advice may have replaced the result with anything else: kept as it is)."""
    return dict(metrics) if type(metrics) is dict else metrics


def _move(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, Mapping):
        return {k: _move(v, device) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*(_move(v, device) for v in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(_move(v, device) for v in batch)
    return batch
