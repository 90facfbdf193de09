"""``DistSamplerSeed``: a fresh, reproducible shuffle order every epoch."""

from __future__ import annotations

from typing import Any

import torch

from ..._aspect import Aspect, AspectOptions
from ..._context import CallContext
from ..._priority import Priority
from ..._typing import Unpack

__all__ = ["DistSamplerSeed"]


class DistSamplerSeed(Aspect):
    """Seeds the training sampler from (base seed, epoch) before every epoch.

    A sampler with ``set_epoch`` (``DistributedSampler``) gets the epoch, as torch asks;
    one with a ``generator`` (``RandomSampler``, ``SubsetRandomSampler``,
    ``WeightedRandomSampler``, a batch sampler of yours that has one) gets a generator
    seeded with ``base + epoch``; the loader's ``batch_sampler`` and the sampler inside it
    are looked at too. The shuffle order of
    an epoch then depends only on the seed and the epoch number, which is what lets a run
    resumed mid-epoch replay the same order. The base seed is the runner's ``seed`` or is
    drawn once (on rank 0, for every rank), and is part of this aspect's state (saved in
    checkpoints).
    """

    name = "dist_sampler_seed"
    needs_runner = True
    priority = Priority.NORMAL

    def __init__(self, **options: Unpack[AspectOptions]) -> None:
        super().__init__(**options)
        self.base_seed: int | None = None

    def before_train_epoch(self, ctx: CallContext) -> None:
        runner = ctx.runner
        if self.base_seed is None:
            seed = runner.seed
            if seed is None:
                seed = _draw(runner)
            self.base_seed = int(seed)
        for sampler in _samplers(runner.train_loader):
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(runner.epoch)
            elif hasattr(sampler, "generator"):
                sampler.generator = torch.Generator().manual_seed(self.base_seed + runner.epoch)

    def state_dict(self) -> dict[str, Any]:
        return {"base_seed": self.base_seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.base_seed = state.get("base_seed")


def _draw(runner: Any) -> int:
    """A base seed drawn from torch's generator, rank 0's on every rank: a runner seed is
    one for all ranks, and a checkpoint keeps rank 0's (a rank that drew its own would
    shuffle differently once resumed). A collective, once a run, on every rank."""
    seed = int(torch.empty((), dtype=torch.int64).random_().item())
    if getattr(runner, "world_size", 1) <= 1:
        return seed
    box: list[Any] = [seed]  # an object, not a tensor: nccl broadcasts only GPU tensors
    torch.distributed.broadcast_object_list(box, src=0)
    return int(box[0])


def _samplers(loader: Any) -> list[Any]:
    """The loader's sampler, its batch sampler and the sampler inside that, each once."""
    found: list[Any] = []
    batch_sampler = getattr(loader, "batch_sampler", None)
    for sampler in (
        getattr(loader, "sampler", None),
        batch_sampler,
        getattr(batch_sampler, "sampler", None),
    ):
        if sampler is not None and all(sampler is not seen for seen in found):
            found.append(sampler)
    return found
