"""Existing hook objects as aspects: OpenMMLab-style hooks and Keras-style callbacks.

Teams arrive with hooks already written for another trainer. Rather than asking them to
rewrite those as ``Aspect`` subclasses, ``MMHook`` and ``KerasCallback`` turn such an
object into an aspect whose advice calls its methods with the arguments that trainer would
pass, built from the call context and the runner protocol (``ctx.runner``,
``runner.inner_iter``, ``runner.outputs``, ``runner.metrics``, ``runner.stop()``). They
work on any runner that speaks that protocol, not only ``aspecthook.train.Runner``.

This module picks the adapter an object needs (``as_aspect``). The adapters live beside
it: ``MMHook`` in ``_mmengine``, ``KerasCallback`` in ``_keras``, their shared base (and
which methods count as defined) in ``_base``, the method tables in ``_methods``. Their
names are importable from here too, where they were first defined.

Nothing here imports torch.
"""

from __future__ import annotations

from typing import Any

from .._aspect import Aspect
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


def as_aspect(obj: object, **options: Any) -> Aspect | None:
    """``obj`` as an aspect: itself, an ``MMHook``, a ``KerasCallback``, or None.

    An object with any OpenMMLab hook method becomes an ``MMHook``, else one with any
    Keras callback method a ``KerasCallback``; anything else (classes included) is None.
    ``options`` (``priority=`` ...) go to the adapter made; an aspect is returned as it is.
    ``AspectDefinitionError`` when the adapter would never call any of its methods.
    """
    if isinstance(obj, Aspect):
        return obj
    if isinstance(obj, type):
        return None
    if any(callable(getattr(obj, m, None)) for m in MM_METHODS):
        return MMHook(obj, **options)
    if any(callable(getattr(obj, m, None)) for m in KERAS_METHODS):
        return KerasCallback(obj, **options)
    return None
