"""Datasets generated in code, so configs, examples and tests train without downloads."""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

from ..errors import InvalidOptionError

__all__ = ["RandomClassification", "RandomRegression"]


class RandomClassification(TensorDataset):
    """``n`` random inputs of ``features`` values, each labelled with one of ``classes``.

    The label is the argmax of a random linear map of the input, so a model can learn it.
    ``seed`` draws the inputs and ``task`` the map: splits with different seeds and the
    same ``task`` share one labelling rule (train on ``seed=0``, validate on ``seed=1``).
    Items are ``(float32 tensor of shape (features,), int64 label)``.
    """

    def __init__(
        self, n: int = 256, features: int = 32, classes: int = 10, seed: int = 0, *, task: int = 0
    ) -> None:
        _positive(type(self).__name__, n=n, features=features, classes=classes)
        weights = torch.randn(features, classes, generator=torch.Generator().manual_seed(task))
        inputs = torch.randn(n, features, generator=torch.Generator().manual_seed(seed))
        super().__init__(inputs, (inputs @ weights).argmax(dim=1))
        self.features = features
        self.classes = classes


class RandomRegression(TensorDataset):
    """``n`` random inputs of ``features`` values with ``outputs`` targets each.

    Targets are a random linear map of the input (drawn from ``task``) plus Gaussian noise
    of standard deviation ``noise``; ``seed`` draws the inputs and the noise. Items are
    ``(float32 tensor (features,), float32 tensor (outputs,))``, as ``MSELoss`` expects.
    """

    def __init__(
        self,
        n: int = 256,
        features: int = 8,
        outputs: int = 1,
        seed: int = 0,
        *,
        noise: float = 0.1,
        task: int = 0,
    ) -> None:
        _positive(type(self).__name__, n=n, features=features, outputs=outputs)
        weights = torch.randn(features, outputs, generator=torch.Generator().manual_seed(task))
        g = torch.Generator().manual_seed(seed)
        inputs = torch.randn(n, features, generator=g)
        targets = inputs @ weights + noise * torch.randn(n, outputs, generator=g)
        super().__init__(inputs, targets)
        self.features = features
        self.outputs = outputs


def _positive(owner: str, **values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InvalidOptionError(
                f"{owner}({name}={value!r}): {name} must be a positive int",
                option=name,
                value=value,
            )
