"""Which way a metric improves, inferred from its name (shared by checkpoint and stopping)."""

from __future__ import annotations

import re

from ...errors import InvalidOptionError

__all__ = ["infer_rule"]

_GREATER = ("acc", "ar@", "auc", "auroc", "auprc", "precision", "dice", "f1", "recall")
# Short stems found inside other words are taken only where a word starts (``bbox_mAP``,
# ``mIoU``: an ``m`` for "mean" may come first), and ``top`` only before a k, a digit or
# a separator (``top1``, ``top-5``, ``topk``): ``heatmap_dist``, ``stop_dist`` and
# ``topology_dist`` are not scores.
_GREATER_WORDS = re.compile(r"(?<![a-z])m?(?:map|iou)|(?<![a-z])top(?=[\dk@_\-]|$)")
# Checked first: "mape" (an error) would otherwise match "map" (a precision).
_LESS = ("loss", "error", "mse", "mae", "mape", "nll", "perplexity")
# "err" only where a word starts (``top1err``, ``val_err``), not inside one (``terrain``).
_ERR = re.compile(r"(?<![a-z])err")


def infer_rule(metric: str, rule: str | None) -> str:
    """``rule`` if given (checked), else ``'greater'`` / ``'less'`` from ``metric``'s name.

    The last part of the name is searched for the stems (the whole name when it holds
    none): ``val/loss_cls`` and ``val/loss/total`` are losses, ``val/accuracy`` and
    ``val/mDice`` scores, and ``val/acc_terrain`` is not an error because of ``err``.
    """
    if rule is not None:
        if rule not in ("greater", "less"):
            raise InvalidOptionError(
                f"rule={rule!r}: use 'greater' (higher is better) or 'less' (lower is better)",
                option="rule",
                value=rule,
            )
        return rule
    if metric == "auto":
        raise InvalidOptionError(
            "'auto' is not a metric name here: name the metric to judge by, e.g. "
            "'val/acc' (Evaluate names its results 'val/<metric>')",
            option="metric",
            value=metric,
        )
    # The last part of the name decides (``mae_finetune/acc`` is an accuracy); the whole
    # name only when that part says nothing (``val/loss/total``).
    for key in (metric.rsplit("/", 1)[-1].lower(), metric.lower()):
        if any(p in key for p in _LESS) or _ERR.search(key):
            return "less"
        if any(p in key for p in _GREATER) or _GREATER_WORDS.search(key):
            return "greater"
    raise InvalidOptionError(
        f"cannot tell whether {metric!r} should go up or down: give rule='greater' or rule='less'",
        option="rule",
        value=None,
    )
