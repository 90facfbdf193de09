"""How a ``ConfigError`` words its message: the file and key path, the bad value shown
with its type, a hint when YAML read a number as a string (``lr: 1e-3``), and the entry
to write for an aspect that advises no join point of its own (``Timed`` without ``pointcut``).

Kept apart from ``_config``'s builder: these are plain text helpers, with no torch or
registry in them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._config import _kind
from .._pointcut import Name
from ..errors import AspectHookError, AspectParameterError, ConfigError, UnknownPriorityError

if TYPE_CHECKING:
    from ..registry import Parameters

__all__ = [
    "_NO_FUNCTION",
    "_OPENMMLAB_KEYS",
    "_a",
    "_bool_text",
    "_error",
    "_how_to_write",
    "_kind",
    "_needs_pointcut",
    "_number_hint",
    "_number_text",
    "_openmmlab_hint",
    "_option_key",
    "_string_problem",
    "_user",
]


#: A scheduler parameter that takes a function (``lr_lambda``), written in a file.
_NO_FUNCTION = (
    "a config cannot name a function: build the scheduler in code, "
    "Runner.from_config(path, scheduler=lambda optimizer: {label}(optimizer, {name}=my_fn)), "
    "or use one that takes numbers (StepLR, LinearLR, ...)"
)


def _a(word: str) -> str:
    return "an" if word[:1] in tuple("aeiou") else "a"


def _number_hint(params: Mapping[str, Any]) -> str:
    """A hint when a value is a number written so that YAML reads a string (``1e-3``)."""
    for name, value in params.items():
        if _number_text(value):
            return f" ({name}={value!r} is a string: {_how_to_write(value)})"
    return ""


#: Text YAML 1.1 reads as a boolean when unquoted, and how to write that boolean.
_BOOLEANS = {
    "true": "true",
    "yes": "true",
    "on": "true",
    "false": "false",
    "no": "false",
    "off": "false",
}


def _bool_text(value: Any) -> str | None:
    """``'true'`` / ``'false'`` for a string written as a boolean (``'False'``, ``'no'``),
    which a parameter taking a bool would read as true; None for anything else."""
    return _BOOLEANS.get(value.strip().lower()) if isinstance(value, str) else None


def _number_text(value: Any) -> bool:
    """A string Python reads as a number (``'1e-6'``, ``'8'``)."""
    if not isinstance(value, str):
        return False
    try:
        float(value)
    except ValueError:
        return False
    return True


#: What YAML 1.1 (PyYAML) reads as a decimal number: a float needs a '.', its exponent a sign.
_YAML_NUMBER = re.compile(
    r"[-+]?(0|[1-9][0-9_]*|[0-9][0-9_]*\.[0-9_]*([eE][-+][0-9]+)?)|\.[0-9_]+([eE][-+][0-9]+)?"
)

_SCIENTIFIC = re.compile(r"([-+]?[0-9]+\.?[0-9]*)([eE])([-+]?[0-9]+)")


def _how_to_write(text: str, *, integer: bool = False) -> str:
    """How to write the number ``text`` so that YAML reads a number, not a string."""
    text = text.strip()
    if _YAML_NUMBER.fullmatch(text):
        return f"write {text} without quotes"
    number = float(text)
    if not any(c.isdigit() for c in text):  # nan, inf, infinity
        spelt = ".nan" if math.isnan(number) else ("-.inf" if number < 0 else ".inf")
        return f"YAML spells it {spelt}"
    if integer and number.is_integer():
        spelt = str(int(number))
    else:  # the user's spelling where it has one ('1e-3' -> '1.0e-3'), else Python's
        written = _SCIENTIFIC.fullmatch(text)
        mantissa, e, exponent = written.groups() if written else (repr(number), "e", "")
        if "e" in mantissa:
            mantissa, e, exponent = mantissa.partition("e")
        mantissa = mantissa if "." in mantissa or not exponent else f"{mantissa}.0"
        spelt = f"{mantissa}{e}{int(exponent):+d}" if exponent else mantissa
    if "e" not in text.lower():
        return f"write {spelt} without quotes"
    return (
        f"YAML reads {text} as text (a YAML float needs a '.' and a signed exponent, "
        f"e.g. 1.0e-6), write {spelt}"
    )


def _user(cfg: Any) -> dict[str, Any]:
    """The parameters a config wrote (for messages), without its ``type``."""
    return {k: v for k, v in cfg.items() if k != "type"} if isinstance(cfg, Mapping) else {}


def _error(file: str, key: str, message: str) -> ConfigError:
    where = ": ".join(part for part in (file, key) if part)
    return ConfigError(f"{where}: {message}" if where else message, file=file, key=key)


def _needs_pointcut(aspect: Any) -> str | None:
    """What to write when ``aspect`` has advice for no join point (``Timed``, ``Logged``
    without ``pointcut``), said in a config's terms; None for any other definition error."""
    if aspect is None or aspect.pointcut is not None:
        return None
    try:
        aspect.make_advice(Name("train_iter"))
    except (AspectHookError, TypeError, ValueError):
        return None
    name = type(aspect).__name__
    return (
        f"{name} advises no join point of its own: give it the runner's join points to "
        f"advise, e.g. {{type: {name}, pointcut: 'train_*'}} (a join point name or glob: "
        "run, train_epoch, train_iter, forward, backward, optimizer_step, val_*, test_*)"
    )


#: Parameters of OpenMMLab's hooks, under the hook's name, that have another name or place
#: here, and what to write instead (``{value}`` is the value given).
_OPENMMLAB = {
    ("EMAHook", "momentum"): "OpenMMLab's momentum is 1 - decay here: write decay: {decay}",
    (
        "EMAHook",
        "begin_iter",
    ): "OpenMMLab's begin_iter is start_iter here: write start_iter: {value}",
    ("EMAHook", "interval"): "OpenMMLab's interval (update the average every n "
    "iterations) is update_every here: write update_every: {value}",
    ("EMAHook", "update_buffers"): "OpenMMLab's update_buffers is use_buffers here: write "
    "use_buffers: {value}",
    ("EMAHook", "begin_epoch"): "The average starts at an iteration here: write "
    "start_iter: (begin_epoch times the iterations of an epoch)",
    ("EMAHook", "ema_type"): "The average here is OpenMMLab's ExponentialMovingAverage "
    "(torch's AveragedModel with get_ema_multi_avg_fn); remove ema_type",
    ("EMAHook", "strict_load"): "A checkpoint's average loads strictly here; remove strict_load",
    ("GradientCumulativeOptimizerHook", "cumulative_iters"): (
        "OpenMMLab's cumulative_iters is steps here: write steps: {value}"
    ),
    ("CheckpointHook", "out_dir"): "Checkpoints go to the run's folder: write work_dir: "
    "at the top level of the config",
    ("EmptyCacheHook", "after_iter"): "The cache is emptied after every epoch; write "
    "interval: 1 to empty it after every iteration too",
    ("CheckpointHook", "save_begin"): "OpenMMLab's save_begin (the first epoch or "
    "iteration to save at) is not save_best, and has no counterpart here: checkpoints are "
    "saved every interval from the start; remove save_begin",
}


def _openmmlab_hint(label: str, params: Mapping[str, Any], exc: AspectParameterError) -> str:
    """What to write instead of an OpenMMLab hook parameter given under its alias."""
    name = exc.parameters[0] if exc.parameters else ""
    hint = _OPENMMLAB.get((label, name))
    if hint is None:
        return ""
    value = params.get(name)
    decay = round(1 - value, 12) if isinstance(value, float) else "1 - momentum"
    return ". " + hint.format(value=value, decay=decay)


def _option_key(key: str, exc: BaseException, given: Mapping[str, Any]) -> str:
    """``key`` and the parameter an error names when the entry gave it (an aspect's
    ``InvalidOptionError`` has its ``option``, a priority error is ``priority``'s)."""
    option = "priority" if isinstance(exc, UnknownPriorityError) else getattr(exc, "option", None)
    return f"{key}.{option}" if isinstance(option, str) and option in given else key


_HOOKS = (
    "OpenMMLab's hooks are aspects here: list them under aspects: [...], by OpenMMLab's "
    "names too ({type: CheckpointHook, interval: 1})"
)
_EVALUATOR = "metrics are the Evaluate aspect's, whose functions are given in code"
#: Top-level keys of an OpenMMLab config and what to write instead, where a look-alike
#: key of ours would be the wrong suggestion (train_cfg is not train_step).
_OPENMMLAB_KEYS = {
    "train_cfg": "OpenMMLab's train_cfg: write max_epochs: or max_iters: at the top level; "
    "its val_interval is the Evaluate aspect's interval:",
    "val_cfg": "validation runs on val_loader: with the Evaluate aspect; remove val_cfg",
    "test_cfg": "runner.test() runs on test_loader:; remove test_cfg",
    "optim_wrapper": "write its optimizer: {type: ..., lr: ...} at the top level; clip_grad "
    "is the GradClip aspect, accumulative_counts GradAccumulation, AmpOptimWrapper AMP",
    "default_hooks": _HOOKS,
    "custom_hooks": _HOOKS,
    "val_evaluator": _EVALUATOR,
    "test_evaluator": _EVALUATOR,
    "param_scheduler": "write one scheduler: {type: ...} (chain several with SequentialLR), "
    "or a warm-up with LRSchedule's warmup:",
    "randomness": "write seed: N at the top level",
    "load_from": "OpenMMLab's load_from loads the weights only (a fine-tune starts at epoch "
    "0): load them into the model in code, model.load_state_dict(torch.load(path)"
    "['state_dict']) (an aspecthook checkpoint's are under ['runner']['model']), and give "
    "it as Runner.from_config(..., model=model). torch.load's weights_only=True refuses the "
    "other objects an OpenMMLab file holds (its message_hub's): re-save the weights alone "
    "once, where you trust the file, torch.save(torch.load(path, weights_only=False)"
    "['state_dict'], 'weights.pt'), and load that. A run OpenMMLab saved (its "
    "resume=True) cannot be continued here: start from its weights as above; the "
    "Checkpoint aspect's resume: takes only the checkpoints that aspect saves",
    "resume": "OpenMMLab's resume=True is the Checkpoint aspect's resume: auto; "
    "resume=False, starting afresh, is the default here: remove the key",
    "default_scope": "there are no registry scopes here; remove it",
}


def _string_problem(accepted: Parameters, name: str, value: Any) -> str | None:
    """What is wrong with ``value``, a string given for ``name`` that takes a number or a
    boolean (torch's schedulers and losses do not check: ``Linear(bias='false')`` has a
    bias); None when nothing is."""
    if not isinstance(value, str):
        return None
    default = accepted.defaults.get(name)
    integer = type(default) is int or name in accepted.ints  # 'int': no default
    number = integer or type(default) is float or name in accepted.numbers  # 'float | ...'
    if number and _number_text(value):
        return f"is the string {value!r}, not a number: {_how_to_write(value, integer=integer)}"
    boolean = _bool_text(value)
    if boolean and (type(default) is bool or name in accepted.bools):
        return f"is the string {value!r}, not a boolean: write {boolean} without quotes"
    if name in accepted.numbers and not _number_text(value):
        example = f" (its default is {default})" if type(default) in (int, float) else ""
        return f"is the string {value!r}, not a number: write a number{example}"
    return None
