"""Which way a metric improves, inferred from its name (shared by checkpoint and stopping)."""

from __future__ import annotations

import re

from ...errors import InvalidOptionError

__all__ = ["infer_rule"]

_GREATER = (
    "acc",
    "top",
    "ar@",
    "auc",
    "precision",
    "map",
    "miou",
    "iou",
    "mdice",
    "dice",
    "f1",
    "recall",
)
# Checked first: "mape" (an error) would otherwise match "map" (a precision).
_LESS = ("loss", "error", "err", "mse", "mae", "mape", "nll", "perplexity")
# Inside a word (``meanerror``, ``smape``, ``rmse``): only stems no score's name holds
# (not ``err``, which ``terrain`` holds).
_LESS_INSIDE = ("loss", "error", "mse", "mae", "mape", "nll")
_GREATER_INSIDE = ("acc", "precision", "recall")


def infer_rule(metric: str, rule: str | None) -> str:
    """``rule`` if given (checked), else ``'greater'`` / ``'less'`` from ``metric``'s name.

    The name's words (split at ``/``, ``_``, ``.``, ``-`` ...) are matched by how they
    start, so ``val/loss_cls`` and ``val/loss/total`` are losses, ``val/accuracy`` and
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
    words = [w for w in re.split(r"[^a-z0-9@]+", metric.lower()) if w]
    if any(w.startswith(p) for w in words for p in _LESS):
        return "less"
    if any(w.startswith(p) for w in words for p in _GREATER):
        return "greater"
    if any(p in w for w in words for p in _LESS_INSIDE):
        return "less"
    if any(p in w for w in words for p in _GREATER_INSIDE):
        return "greater"
    raise InvalidOptionError(
        f"cannot tell whether {metric!r} should go up or down: give rule='greater' or rule='less'",
        option="rule",
        value=None,
    )
