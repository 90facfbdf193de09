"""The aspects given to a runner: hooks and callbacks adapted, names made sure unique
(checkpoints keep each aspect's state under its name), aspecthook's own told apart.

Apart from the runner's class because none of this runs in the loop: only when aspects
are given to a runner or added to it.
"""

from __future__ import annotations

from typing import Any

from .._aspect import Aspect
from ..errors import RunnerError

__all__ = ["adapt_unique", "shipped"]


def adapt_unique(aspect: Aspect | Any, others: list[Aspect]) -> Aspect:
    """``aspect`` as an ``Aspect`` (a hook or callback adapted), refused if another of
    ``others`` with state has its name."""
    return _unique(_adapt(aspect), others, given=aspect)


def _adapt(aspect: Aspect | Any) -> Aspect:
    from ..adapters import as_aspect

    adapted = as_aspect(aspect)
    if adapted is None:
        if isinstance(aspect, type):
            name = aspect.__name__
            hint = f"the class {name}, not an instance: give {name}(...)"
        elif isinstance(aspect, str):
            hint = (
                f"the name {aspect!r}: names are for Runner.from_config; in code give the "
                f"instance, e.g. {aspect}(...)"
            )
        else:
            hint = f"{aspect!r}; write an Aspect subclass or wrap it yourself"
        raise RunnerError(
            "aspects= takes Aspect instances, OpenMMLab-style hooks or Keras-style "
            f"callbacks, got {hint}"
        )
    return adapted


def _unique(aspect: Aspect, others: list[Aspect], given: object = None) -> Aspect:
    """``aspect``, unless it has state and so has another of the run's aspects with its
    name: checkpoints keep each aspect's state under its name. ``given`` is what the user
    gave, when ``aspect`` is the adapter made for it: the error says how to name that."""
    if _has_state(aspect) and any(
        other.name == aspect.name and _has_state(other) for other in others
    ):
        other_name = f"name='{aspect.name}_2'"
        if given is not None and given is not aspect:  # a hook or callback, adapted here
            how = f"wrap one as {type(aspect).__name__}({type(given).__name__}(...), {other_name})"
        else:
            how = f"give one another ({other_name})"
        raise RunnerError(
            f"two aspects of this run are named {aspect.name!r}; checkpoints keep each "
            f"aspect's state under its name: {how}"
        )
    return aspect


def shipped(aspect: object) -> bool:
    """Whether ``aspect`` is one of aspecthook's own aspects (an adapter is not: it holds
    the user's hook or callback)."""
    module = type(aspect).__module__
    return module.startswith("aspecthook.") and not module.startswith("aspecthook.adapters.")


def _has_state(aspect: Aspect) -> bool:
    return callable(getattr(aspect, "state_dict", None))
