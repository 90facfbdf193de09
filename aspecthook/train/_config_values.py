"""Tell the values a config file can hold (names, mappings, lists, numbers) from objects
built in code and passed in a dict config or an override (a class, a loss module, a
dataset, a loader), which ``_config`` uses as they are.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from torch.utils.data import DataLoader, Dataset

__all__ = ["_callable_object", "_dataset_object", "_is_factory", "_loader_object"]


def _is_factory(value: Any) -> bool:
    """A class or function given directly (dict configs), not any callable instance."""
    return inspect.isclass(value) or inspect.isroutine(value)


def _callable_object(value: Any) -> bool:
    """A callable built in code (a loss module, a partial): no config file holds one."""
    return callable(value) and not _is_factory(value)


def _dataset_object(value: Any) -> bool:
    """A dataset built in code: a torch ``Dataset``, or another object DataLoader can
    index or iterate that no config file can hold."""
    if isinstance(value, Dataset):
        return True
    plain = (Mapping, str, bytes, list, tuple, int, float, bool, type(None))
    if isinstance(value, plain) or _is_factory(value):
        return False
    return hasattr(type(value), "__getitem__") or hasattr(type(value), "__iter__")


def _loader_object(value: Any) -> bool:
    """A loader built in code: a ``DataLoader``, or another iterable object that no config
    file can hold (not a mapping, string, list or tuple)."""
    if isinstance(value, DataLoader):
        return True
    plain = (Mapping, str, bytes, list, tuple, int, float, bool, type(None))
    return not isinstance(value, plain) and hasattr(type(value), "__iter__")
