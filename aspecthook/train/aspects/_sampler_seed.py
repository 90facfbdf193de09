"""``DistSamplerSeed``: a fresh, reproducible shuffle order every epoch."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import RandomSampler

from ..._aspect import Aspect
from ..._context import CallContext
from ..._priority import Priority

__all__ = ["DistSamplerSeed"]


class DistSamplerSeed(Aspect):
    """Seeds the training sampler from (base seed, epoch) before every epoch.

    A sampler with ``set_epoch`` (``DistributedSampler``) gets the epoch, as torch asks;
    a ``RandomSampler`` gets a generator seeded with ``base + epoch``. The shuffle order of
    an epoch then depends only on the seed and the epoch number, which is what lets a run
    resumed mid-epoch replay the same order. The base seed is the runner's ``seed`` or is
    drawn once, and is part of this aspect's state (saved in checkpoints).
    """

    name = "dist_sampler_seed"
    priority = Priority.NORMAL

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.base_seed: int | None = None

    def before_train_epoch(self, ctx: CallContext) -> None:
        runner = ctx.runner
        if self.base_seed is None:
            seed = runner.seed
            if seed is None:
                seed = int(torch.empty((), dtype=torch.int64).random_().item())
            self.base_seed = int(seed)
        sampler: Any = getattr(runner.train_loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(runner.epoch)
        elif isinstance(sampler, RandomSampler):
            sampler.generator = torch.Generator().manual_seed(self.base_seed + runner.epoch)

    def state_dict(self) -> dict[str, Any]:
        return {"base_seed": self.base_seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.base_seed = state.get("base_seed")
