"""``SyncBuffers``: the same model buffers on every rank after each epoch."""

from __future__ import annotations

from typing import Any

import torch

from ..._aspect import Aspect
from ..._context import CallContext
from ..._priority import Priority
from .._wrappers import unwrapped

__all__ = ["SyncBuffers"]


class SyncBuffers(Aspect):
    """Averages the model's floating-point buffers over the ranks after every training
    epoch (batch-norm running statistics drift apart when each rank sees its own shard),
    and gives every rank rank 0's other buffers (counters such as
    ``num_batches_tracked``), so validation and checkpoints see one model. A no-op outside
    a distributed run (``runner.world_size`` 1).
    """

    name = "sync_buffers"
    needs_runner = True
    priority = Priority.HIGH  # before Evaluate validates at the epoch's end

    def after_train_epoch(self, ctx: CallContext) -> None:
        runner = ctx.runner
        world = getattr(runner, "world_size", 1)
        if world <= 1:
            return
        dist = torch.distributed
        with torch.no_grad():
            for buffer in _buffers(runner.model):
                if buffer.is_floating_point() or buffer.is_complex():
                    dist.all_reduce(buffer, op=dist.ReduceOp.SUM)
                    buffer.div_(world)
                else:
                    dist.broadcast(buffer, src=0)


def _buffers(model: Any) -> list[torch.Tensor]:
    return list(unwrapped(model).buffers())
