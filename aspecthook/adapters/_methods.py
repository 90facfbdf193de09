"""The methods the adapters call: OpenMMLab's hook methods and Keras's callback methods.

``MM_METHODS`` and ``KERAS_METHODS`` tell an OpenMMLab-style hook from a Keras-style
callback (``as_aspect``, and ``ASPECTS`` when a config names a class); ``_MM`` also says
where and with what arguments ``MMHook`` calls each one. Separate from the adapters
because the shared base needs the OpenMMLab table too (``_GENERIC``).
"""

from __future__ import annotations

from .._advice import AdviceKind

__all__ = ["KERAS_METHODS", "MM_METHODS"]


def _generic(method: str) -> tuple[str, ...]:
    """The generic methods OpenMMLab's base ``Hook.<method>`` hands its call to."""
    stage, _, where = method.partition("_")
    kind = where.rpartition("_")[2]
    if kind not in ("iter", "epoch") or stage not in ("before", "after"):
        return ()
    return (f"_{stage}_{kind}", f"{stage}_{kind}")  # mmengine, mmcv 1.x


#: (method, advice kind, join point, arguments) in the order OpenMMLab calls them; methods
#: at the same join point and stage run in this order.
_MM: tuple[tuple[str, AdviceKind, str, str], ...] = (
    ("before_run", "before", "run", "runner"),
    ("before_train", "before", "run", "runner"),
    ("before_train_epoch", "before", "train_epoch", "runner"),
    ("before_train_iter", "before", "train_iter", "iter"),
    ("after_train_iter", "after", "train_iter", "outputs"),
    ("after_train_epoch", "after", "train_epoch", "runner"),
    ("before_val", "before", "val_epoch", "runner"),
    ("before_val_epoch", "before", "val_epoch", "runner"),
    ("before_val_iter", "before", "val_iter", "iter"),
    ("after_val_iter", "after", "val_iter", "outputs"),
    ("after_val_epoch", "after", "val_epoch", "metrics"),
    ("after_val", "after", "val_epoch", "runner"),
    ("before_test", "before", "test_epoch", "runner"),
    ("before_test_epoch", "before", "test_epoch", "runner"),
    ("before_test_iter", "before", "test_iter", "iter"),
    ("after_test_iter", "after", "test_iter", "outputs"),
    ("after_test_epoch", "after", "test_epoch", "metrics"),
    ("after_test", "after", "test_epoch", "runner"),
    ("after_train", "after", "run", "runner"),
    ("after_run", "after", "run", "runner"),
)
MM_METHODS: tuple[str, ...] = tuple(m for m, *_ in _MM)
#: Each hook method and the generic methods its OpenMMLab base implementation calls.
_GENERIC: dict[str, tuple[str, ...]] = {m: g for m in MM_METHODS if (g := _generic(m))}


KERAS_METHODS: tuple[str, ...] = (
    "on_train_begin",
    "on_train_end",
    "on_epoch_begin",
    "on_epoch_end",
    "on_train_batch_begin",
    "on_train_batch_end",
    "on_batch_begin",
    "on_batch_end",
    "on_test_begin",
    "on_test_end",
    "on_test_batch_begin",
    "on_test_batch_end",
)
