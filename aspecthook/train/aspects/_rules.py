"""Which way a metric improves, inferred from its name (shared by checkpoint and stopping)."""

from __future__ import annotations

from ...errors import InvalidOptionError

__all__ = ["infer_rule"]

_GREATER = ("acc", "top", "ar@", "auc", "precision", "map", "miou", "f1", "recall")
# Checked first: "mape" (an error) would otherwise match "map" (a precision).
_LESS = ("loss", "error", "err", "mse", "mae", "mape", "nll", "perplexity")


def infer_rule(metric: str, rule: str | None) -> str:
    """``rule`` if given (checked), else ``'greater'`` / ``'less'`` from ``metric``'s name."""
    if rule is not None:
        if rule not in ("greater", "less"):
            raise InvalidOptionError(
                f"rule={rule!r}: use 'greater' (higher is better) or 'less' (lower is better)",
                option="rule",
                value=rule,
            )
        return rule
    key = metric.rsplit("/", 1)[-1].lower()
    if any(key.startswith(p) or p in key for p in _LESS):
        return "less"
    if any(key.startswith(p) or p in key for p in _GREATER):
        return "greater"
    raise InvalidOptionError(
        f"cannot tell whether {metric!r} should go up or down: give rule='greater' or rule='less'",
        option="rule",
        value=None,
    )
