"""The checks ``Runner`` makes on its inputs, all before training starts.

Each names the argument at fault and says what to give instead. Kept out of ``_runner``
so the runner module holds the run itself; ``_config`` checks ``work_dir`` with the same
function.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..errors import RunnerError

if TYPE_CHECKING:
    pass

__all__ = [
    "_check_can_run",
    "_check_limits",
    "_check_optimizer",
    "_check_scheduler",
    "_check_work_dir",
]


def _check_limits(max_epochs: int | None, max_iters: int | None) -> None:
    if (max_epochs is None) == (max_iters is None):
        raise RunnerError(
            "give exactly one of max_epochs= (epoch-based training) or max_iters= "
            f"(iteration-based training); got max_epochs={max_epochs}, max_iters={max_iters}"
        )
    for name, value in (("max_epochs", max_epochs), ("max_iters", max_iters)):
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 1
        ):
            raise RunnerError(f"{name}={value!r} must be a positive int")


def _check_optimizer(optimizer: torch.optim.Optimizer, model: torch.nn.Module) -> None:
    """The optimizer must update at least one of the model's parameters (a subset is fine:
    a frozen backbone), or training would silently change nothing."""
    params = getattr(optimizer, "param_groups", None)
    if params is None:
        return
    held = {id(p) for group in params for p in group["params"]}
    if held and not any(id(p) in held for p in model.parameters()):
        raise RunnerError(
            f"the optimizer {type(optimizer).__name__} holds none of the model's parameters, "
            "so training would not change it: build it on model.parameters() of the model "
            "you pass as model="
        )


def _check_scheduler(scheduler: Any, optimizer: torch.optim.Optimizer) -> None:
    if scheduler is None:
        return
    own = getattr(scheduler, "optimizer", None)
    if own is not None and own is not optimizer:
        raise RunnerError(
            f"the scheduler {type(scheduler).__name__} drives a different optimizer than the "
            "runner's: build it on the same optimizer object you pass as optimizer="
        )


def _check_work_dir(work_dir: str | os.PathLike[str] | None) -> Path | None:
    if work_dir is None:
        return None
    path = Path(work_dir)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise RunnerError(
            f"work_dir {str(path)!r} is not writable ({exc.strerror or exc}): give a directory "
            "this process can create files in"
        ) from None
    return path


def _check_can_run(method: str, *, closed: bool, running: bool) -> None:
    """``run()`` / ``test()`` of a closed runner, or ``run()`` inside its own run."""
    if closed:
        raise RunnerError(
            f"runner.{method}() on a closed runner: close() removed its aspects "
            "(checkpoints, logging, evaluation...), so it would go on without them; build "
            "a new Runner, or call close() only when done with this one"
        )
    if running:
        raise RunnerError(
            "runner.run() was called from advice of this runner's own run(): a nested run "
            "would train to the end, run before_run / after_run advice again and leave the "
            "outer run's epoch half done; call runner.stop(reason) to end the run, or "
            "run() again after it returns"
        )
