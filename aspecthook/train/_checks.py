"""The checks ``Runner`` makes on its inputs, all before training starts.

Each names the argument at fault and says what to give instead. Kept out of ``_runner``
so the runner module holds the run itself; ``_config`` checks ``work_dir`` with the same
function.
"""

from __future__ import annotations

import inspect
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from ..errors import RunnerError
from .aspects._options import is_integer

__all__ = [
    "_check_can_run",
    "_check_limits",
    "_check_optimizer",
    "_check_parts",
    "_check_scheduler",
    "_check_settings",
    "_check_step_signatures",
    "_check_work_dir",
    "_explain_no_grad",
    "_on_device",
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


def _check_parts(
    model: Any, optimizer: Any, loaders: Mapping[str, Any], steps: Mapping[str, Any]
) -> None:
    """The model, optimizer, loaders and step functions are of the kind the loop calls, so a
    mix-up (a class for an instance, a name for an object) is named here, not found by the
    first iteration as an AttributeError inside the loop."""
    if not isinstance(model, torch.nn.Module):
        raise RunnerError(f"model={model!r} is not a torch.nn.Module: {_instance_hint(model)}")
    if isinstance(optimizer, type) or not all(
        callable(getattr(optimizer, m, None)) for m in ("step", "zero_grad")
    ):
        raise RunnerError(
            f"optimizer={optimizer!r} is not an optimizer (with step() and zero_grad()): "
            "build one on the model's parameters, e.g. "
            "optimizer=torch.optim.SGD(model.parameters(), lr=0.1)"
        )
    for name, loader in loaders.items():
        if (loader is None and name != "train_loader") or (
            isinstance(loader, Iterable) and not isinstance(loader, (str, bytes))
        ):
            continue
        raise RunnerError(
            f"{name}={loader!r} is not a data loader: give an iterable of batches, e.g. "
            f"{name}=torch.utils.data.DataLoader(dataset, batch_size=32)"
        )
    for name, fn in steps.items():
        if fn is not None and not callable(fn):
            raise RunnerError(f"{name}={fn!r} is not callable: give a function, or leave it out")


#: What the runner calls each step function with, and an example of one that fits.
_STEP_CALLS = {
    "train_step": (("runner", "batch"), "def train_step(runner, batch): ... return loss"),
    "val_step": (("runner", "batch"), "def val_step(runner, batch): ... return outputs"),
    "loss_fn": (
        ("outputs", "targets"),
        "loss_fn=torch.nn.functional.cross_entropy or loss_fn=torch.nn.CrossEntropyLoss()",
    ),
}


def _check_step_signatures(steps: Mapping[str, Any]) -> None:
    """Each of ``train_step`` / ``val_step`` / ``loss_fn`` can be called with the two
    arguments the loop gives it, so a step of the wrong shape is named here rather than
    by a bare TypeError at the first iteration. A callable whose signature cannot be read
    (some builtins) is not checked; a module is checked through its ``forward``."""
    for name, fn in steps.items():
        if fn is None or name not in _STEP_CALLS:
            continue
        params, example = _STEP_CALLS[name]
        call = f"{name}({', '.join(params)})"
        if isinstance(fn, type) and issubclass(fn, torch.nn.Module):
            raise RunnerError(
                f"{name}={fn.__name__} is the class, not an instance: give "
                f"{name}={fn.__name__}(...), called as {call}"
            )
        target = fn.forward if isinstance(fn, torch.nn.Module) else fn
        try:
            signature = inspect.signature(target)
        except (TypeError, ValueError):  # no signature to read (a builtin, a C function)
            continue
        try:
            signature.bind(*params)
        except TypeError as exc:
            raise RunnerError(
                f"{name}={_callable_name(fn)}{signature} cannot be called as {call} "
                f"({exc}): give a callable that takes those two arguments, e.g. {example}"
            ) from None


def _callable_name(fn: Any) -> str:
    if isinstance(fn, torch.nn.Module):
        return f"{type(fn).__name__}().forward"
    return str(getattr(fn, "__qualname__", None) or type(fn).__name__)


def _instance_hint(value: Any) -> str:
    if isinstance(value, type):
        return f"give an instance, e.g. model={value.__name__}(...)"
    return "give a model instance, e.g. model=torch.nn.Linear(8, 2)"


def _check_settings(aspects: Any, seed: Any, default_aspects: Any) -> None:
    """``aspects`` is a list (not one aspect, a class or a name), ``seed`` an int and
    ``default_aspects`` a bool (``'no'`` would count as true)."""
    if isinstance(aspects, (str, bytes, type)) or not isinstance(aspects, Iterable):
        raise RunnerError(
            f"aspects={aspects!r} is not a list of aspects: give instances in a list, "
            "e.g. aspects=[Logger(), Checkpoint()]"
        )
    if seed is not None and not is_integer(seed):
        raise RunnerError(f"seed={seed!r} is not an int: give e.g. seed=0, or None")
    if not isinstance(default_aspects, bool):
        raise RunnerError(
            f"default_aspects={default_aspects!r} is not True or False: give False to "
            "leave out the default aspects, True (the default) to add them"
        )


def _on_device(
    model: torch.nn.Module, device: str | torch.device | None
) -> tuple[torch.device | None, torch.nn.Module]:
    """``device`` as a ``torch.device`` and the model moved there (as given for None)."""
    if device is None:
        return None, model
    try:
        place = torch.device(device)
        return place, model.to(place)
    except (TypeError, ValueError, RuntimeError, AssertionError) as exc:
        # AssertionError: torch's own for 'cuda' in a build without CUDA.
        raise RunnerError(
            f"device={device!r} cannot take the model ({exc}): give a device this machine "
            "has, e.g. device='cpu' or device='cuda:0', or leave it out"
        ) from exc


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


_NO_TRAINABLE = (
    "none of the optimizer's parameters requires grad (the model is frozen), so the loss "
    "has no gradient to train with: unfreeze the parameters to train "
    "(param.requires_grad_(True)) and build the optimizer on them"
)

#: How torch words the error of ``backward()`` on a tensor without ``grad_fn``.
_TORCH_NO_GRAD = "does not require grad and does not have a grad_fn"


def _explain_no_grad(exc: BaseException, loss: object, optimizer: Any) -> None:
    """Raise a ``RunnerError`` saying why, when ``exc`` is torch's error for a ``backward()``
    of the step's ``loss`` without ``grad_fn``; return for any other error.

    Called only on the way out of a failed run, so it costs the loop nothing. A frozen
    model is named here, at its first ``backward()``, not refused when ``run()`` starts:
    advice may unfreeze it before then (``before_run``, ``before_train_epoch``)."""
    if not (
        isinstance(exc, RuntimeError)
        and _TORCH_NO_GRAD in str(exc)
        and isinstance(loss, torch.Tensor)
        and not loss.requires_grad
    ):
        return
    held = [p for group in getattr(optimizer, "param_groups", ()) for p in group["params"]]
    if held and not any(getattr(p, "requires_grad", True) for p in held):
        raise RunnerError(_NO_TRAINABLE) from exc
    raise RunnerError(
        "the step's loss has no grad_fn, so backward() cannot compute gradients: compute "
        "it from the model's outputs with gradients on (not inside torch.no_grad() or "
        "torch.inference_mode()) and keep it a tensor (not rebuilt from .item(), "
        ".detach() or .tolist())"
    ) from exc


def _check_scheduler(scheduler: Any, optimizer: torch.optim.Optimizer) -> None:
    if scheduler is None:
        return
    if not callable(scheduler) and not callable(getattr(scheduler, "step", None)):
        raise RunnerError(
            f"scheduler={scheduler!r} is not an LR scheduler: give a torch scheduler built "
            "on the optimizer, e.g. torch.optim.lr_scheduler.StepLR(optimizer, step_size=2), "
            "or a callable optimizer -> scheduler"
        )
    own = getattr(scheduler, "optimizer", None)
    if own is not None and own is not optimizer:
        raise RunnerError(
            f"the scheduler {type(scheduler).__name__} drives a different optimizer than the "
            "runner's: build it on the same optimizer object you pass as optimizer="
        )


def _check_work_dir(work_dir: str | os.PathLike[str] | None) -> Path | None:
    if work_dir is None:
        return None
    if not isinstance(work_dir, (str, os.PathLike)):
        raise RunnerError(
            f"work_dir={work_dir!r} is not a path: give a folder as a str or a pathlib.Path"
        )
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


def _check_open(method: str, *, closed: bool) -> None:
    """``add_aspect()`` / ``joinpoint()`` of a closed runner: its weaver takes no more."""
    if closed:
        raise RunnerError(
            f"runner.{method}() on a closed runner: close() removed its aspects and "
            "its weaver takes no more; build a new Runner, or call close() only when "
            "done with this one"
        )


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
