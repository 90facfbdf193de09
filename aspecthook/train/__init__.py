"""The PyTorch training runner (needs the ``torch`` extra).

``Runner`` runs a loop made only of join points (``run``, ``train_epoch``, ``train_iter``,
``forward``, ``backward``, ``optimizer_step``, ``val_*``, ``test_*``); learning-rate
schedules, logging, checkpoints, timing, evaluation and the rest are aspects from
``aspecthook.train.aspects`` registered on it. ``Runner.from_config`` builds a run from a
mapping or a YAML / TOML file through the registries ``MODELS``, ``OPTIMIZERS``,
``SCHEDULERS``, ``LOSSES`` and ``DATASETS`` (and ``aspecthook.registry.ASPECTS``).
"""

from __future__ import annotations

try:
    import torch as _torch  # noqa: F401  (the one dependency of this package: said when missing)
except ModuleNotFoundError as error:
    if error.name != "torch":
        raise
    raise ModuleNotFoundError(
        "aspecthook.train (the Runner and the training aspects) needs PyTorch, which is not "
        "installed: pip install 'aspecthook[torch]'",
        name="torch",
    ) from error

from ._config import DATASETS, LOSSES, MODELS, OPTIMIZERS, SCHEDULERS
from ._datasets import RandomClassification, RandomRegression
from ._runner import JOINPOINTS, Runner, seed_everything

__all__ = [
    "DATASETS",
    "JOINPOINTS",
    "LOSSES",
    "MODELS",
    "OPTIMIZERS",
    "SCHEDULERS",
    "RandomClassification",
    "RandomRegression",
    "Runner",
    "seed_everything",
]
