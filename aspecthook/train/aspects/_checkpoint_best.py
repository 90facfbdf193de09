"""How a ``Checkpoint`` judges a validation with ``save_best``: whether the metric
improved, and the new best file's name.

Separate from ``_checkpoint`` (when to save, what a checkpoint holds) because it is the
rule alone: a value, the best so far and the rule they are compared by.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from ._checkpoint import Checkpoint

__all__ = ["_new_best"]


def _new_best(checkpoint: Checkpoint, runner: Any, doomed: list[str]) -> str | None:
    """After a validation: the new best file's name if the metric improved, else None;
    the best file it replaces goes into ``doomed``."""
    metric = checkpoint.save_best
    if metric is None or not checkpoint._fresh:
        return None
    checkpoint._fresh = False
    # Rank 0's value decides on every rank: a save is a collective (RNG states are
    # gathered), so ranks whose own validation shards disagree must still agree.
    value = _from_rank0(runner, float(runner.metrics[metric]))
    if not _better(value, checkpoint.best_score, checkpoint.rule):
        return None
    previous, checkpoint.best_score = checkpoint.best_file, value
    checkpoint.best_file = _best_name(metric, checkpoint._stamp(runner))
    if previous is not None and previous != checkpoint.best_file:
        doomed.append(previous)
    return checkpoint.best_file


def _from_rank0(runner: Any, value: float) -> float:
    """``value`` as rank 0 has it (the value itself outside a distributed run)."""
    if getattr(runner, "world_size", 1) <= 1:
        return value
    box: list[Any] = [value]
    torch.distributed.broadcast_object_list(box, src=0)
    return float(box[0])


def _better(value: float, best: float | None, rule: str | None) -> bool:
    if math.isnan(value):
        return False
    if best is None:
        return True
    return value > best if rule == "greater" else value < best


def _best_name(metric: str, stamp: str) -> str:
    return f"best_{re.sub(r'[^A-Za-z0-9@.-]+', '_', metric).strip('_')}_{stamp}.pt"
