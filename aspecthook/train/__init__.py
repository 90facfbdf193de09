"""The PyTorch training runner (needs the ``torch`` extra).

``Runner`` runs a loop made only of join points (``run``, ``train_epoch``, ``train_iter``,
``forward``, ``backward``, ``optimizer_step``, ``val_*``, ``test_*``); learning-rate
schedules, logging, checkpoints, timing, evaluation and the rest are aspects from
``aspecthook.train.aspects`` registered on it.
"""

from __future__ import annotations

from ._runner import JOINPOINTS, Runner, seed_everything

__all__ = ["JOINPOINTS", "Runner", "seed_everything"]
