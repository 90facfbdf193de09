"""Training aspects: each concern of a training run as an ``Aspect`` on the runner.

OpenMMLab's hook names are accepted as aliases (``CheckpointHook`` is ``Checkpoint``) so
configs written for that world read naturally. Modules load on first use. Each sets
``needs_runner = True``: on a join point of your own called outside a run, its advice
raises a ``RunnerError`` that says so (see ``Aspect``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._checkpoint import Checkpoint
    from ._early_stopping import EarlyStopping
    from ._ema import EMA
    from ._evaluate import Evaluate
    from ._logger import Logger
    from ._lr import LRSchedule
    from ._optim import AMP, EmptyCache, GradAccumulation, GradClip, NaNGuard
    from ._progress import ProgressBar
    from ._sampler_seed import DistSamplerSeed
    from ._sync_buffers import SyncBuffers
    from ._timer import IterTimer

    # The OpenMMLab names of ``ALIASES``, for type checkers (they load through __getattr__).
    AmpOptimWrapperHook = AMP
    CheckpointHook = Checkpoint
    DistSamplerSeedHook = DistSamplerSeed
    EMAHook = EMA
    EarlyStoppingHook = EarlyStopping
    EmptyCacheHook = EmptyCache
    GradientCumulativeOptimizerHook = GradAccumulation
    IterTimerHook = IterTimer
    LoggerHook = Logger
    LrUpdaterHook = LRSchedule
    ParamSchedulerHook = LRSchedule
    ProgressBarHook = ProgressBar
    SyncBuffersHook = SyncBuffers

__all__ = [
    "ALIASES",
    "AMP",
    "EMA",
    "Checkpoint",
    "DistSamplerSeed",
    "EarlyStopping",
    "EmptyCache",
    "Evaluate",
    "GradAccumulation",
    "GradClip",
    "IterTimer",
    "LRSchedule",
    "Logger",
    "NaNGuard",
    "ProgressBar",
    "SyncBuffers",
]

_WHERE: dict[str, str] = {
    "Checkpoint": "._checkpoint",
    "DistSamplerSeed": "._sampler_seed",
    "Evaluate": "._evaluate",
    "LRSchedule": "._lr",
    "Logger": "._logger",
    "IterTimer": "._timer",
    "ProgressBar": "._progress",
    "AMP": "._optim",
    "EmptyCache": "._optim",
    "GradAccumulation": "._optim",
    "GradClip": "._optim",
    "NaNGuard": "._optim",
    "EarlyStopping": "._early_stopping",
    "EMA": "._ema",
    "SyncBuffers": "._sync_buffers",
}

#: OpenMMLab-style names and the aspect each stands for.
ALIASES: dict[str, str] = {
    "CheckpointHook": "Checkpoint",
    "DistSamplerSeedHook": "DistSamplerSeed",
    "ParamSchedulerHook": "LRSchedule",
    "LrUpdaterHook": "LRSchedule",
    "EMAHook": "EMA",
    "LoggerHook": "Logger",
    "IterTimerHook": "IterTimer",
    "ProgressBarHook": "ProgressBar",
    "EarlyStoppingHook": "EarlyStopping",
    "EmptyCacheHook": "EmptyCache",
    "GradientCumulativeOptimizerHook": "GradAccumulation",
    "AmpOptimWrapperHook": "AMP",
    "SyncBuffersHook": "SyncBuffers",
}


# Hidden from type checkers, which see the imports above instead: a module ``__getattr__``
# would make them accept any name imported from here (a typo included) as ``Any``.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        target = ALIASES.get(name, name)
        module = _WHERE.get(target)
        if module is None:
            raise AttributeError(f"module 'aspecthook.train.aspects' has no attribute {name!r}")
        value = getattr(importlib.import_module(module, __name__), target)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted({*__all__, *ALIASES})
