"""Adapters: existing hooks and other trainers, non-invasively, as aspecthook aspects.

``MMHook`` wraps an OpenMMLab-style hook object (``before_train_iter(runner, batch_idx,
data_batch)`` ...) and ``KerasCallback`` a Keras-style callback (``on_epoch_end(epoch,
logs)`` ...) into an ``Aspect`` a runner accepts in ``aspects=``; ``Runner`` also wraps
such objects by itself (``as_aspect``). Nothing here imports torch.
"""

from __future__ import annotations

from ._hooks import as_aspect
from ._keras import KerasCallback, from_keras_callback
from ._methods import KERAS_METHODS, MM_METHODS
from ._mmengine import MMHook, from_mmengine_hook

__all__ = [
    "KERAS_METHODS",
    "MM_METHODS",
    "KerasCallback",
    "MMHook",
    "as_aspect",
    "from_keras_callback",
    "from_mmengine_hook",
]
