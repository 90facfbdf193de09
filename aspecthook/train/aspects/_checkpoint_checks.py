"""The checks ``Checkpoint`` makes before anything is written.

Its options, all at construction; whether a state can be stored: at the start of a run
(so a state a checkpoint cannot hold fails then, not at the first save) and in each save;
and that it is the runner's only ``Checkpoint``, at the start of a run.
Separate from ``_checkpoint`` because they only say what is wrong and what to give
instead; the aspect keeps the checked values.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch

from ...errors import CheckpointNotFoundError, InvalidOptionError, RunnerError
from ._checkpoint_files import LATEST, _plain_name
from ._options import check_count
from ._rules import infer_rule

__all__ = [
    "_check_alone",
    "_check_storable",
    "_max_keep",
    "_positive",
    "_resume_option",
    "_rule",
    "_save_name",
    "_template",
]

_PLAIN = frozenset((bool, int, float, complex, str, bytes, type(None)))


# -- the state (at the start of a run and in each save) ---------------------------------------


def _check_storable(value: Any, where: str) -> None:
    """Raise if ``value`` holds anything ``torch.load(weights_only=True)`` cannot read back."""
    bad = _unstorable(value, where)
    if bad is not None:
        raise RunnerError(
            f"Checkpoint cannot store {bad}: checkpoints are read with "
            "torch.load(weights_only=True), which loads only tensors, numbers, strings and "
            "dicts/lists/tuples of them; convert it (float(x), torch.as_tensor(x)) in the "
            "state_dict() that returns it"
        )


def _unstorable(value: Any, where: str) -> str | None:
    kind = type(value)
    if kind in _PLAIN or isinstance(value, (torch.Tensor, torch.dtype, torch.device)):
        return None
    if kind in (dict, OrderedDict):
        items: Any = value.items()
    elif kind in (list, tuple, set, torch.Size):
        plain = _PLAIN
        if all(type(item) in plain for item in value):  # e.g. param ids: no recursion
            return None
        items = enumerate(value)
    else:
        return f"{where} (a {kind.__module__}.{kind.__qualname__})"
    for key, item in items:
        if type(key) not in _PLAIN and (type(key) is not tuple or _unstorable(key, where)):
            return f"the key {key!r} in {where}"
        bad = _unstorable(item, f"{where}[{key!r}]")
        if bad is not None:
            return bad
    return None


def _check_alone(checkpoint: Any, runner: Any, kind: type[Any]) -> None:
    """Refuse a second ``Checkpoint`` (``kind``) on one runner: both would write
    ``work_dir/latest``, each dropping the other's files from it."""
    others = [a.name for a in runner.aspects if isinstance(a, kind) and a is not checkpoint]
    if others:
        raise RunnerError(
            f"the runner has two Checkpoint aspects ({checkpoint.name!r} and {others[0]!r}), "
            "which would both write the manifest 'latest' in work_dir: keep one (it saves "
            "on its interval and keeps the best checkpoint too, with save_best=)"
        )


# -- option checks (all at construction) ------------------------------------------------------


def _positive(option: str, value: Any) -> int:
    return check_count("Checkpoint", option, value)


def _max_keep(value: Any) -> int | None:
    """``max_keep``: None (keep every file) or a positive int. OpenMMLab writes "keep
    them all" as ``max_keep_ckpts=-1``: said here, where a port of it lands."""
    if value is None:
        return None
    if not isinstance(value, bool) and isinstance(value, int) and value < 1:
        raise InvalidOptionError(
            f"Checkpoint(max_keep={value!r}) must be a positive int; max_keep=None keeps them "
            "all (OpenMMLab's max_keep_ckpts=-1)",
            option="max_keep",
            value=value,
        )
    return _positive("max_keep", value)


def _rule(save_best: str | None, rule: str | None) -> str | None:
    if save_best is not None and not isinstance(save_best, str):
        raise InvalidOptionError(
            f"Checkpoint(save_best={save_best!r}) is not a metric name: give the name of "
            "the metric to keep the best checkpoint by, e.g. save_best='val/acc'",
            option="save_best",
            value=save_best,
        )
    if save_best is None:
        if rule is not None:
            raise InvalidOptionError(
                f"Checkpoint(rule={rule!r}) only applies with save_best='metric name'",
                option="rule",
                value=rule,
            )
        return None
    return infer_rule(save_best, rule)


def _template(filename_tmpl: str | None, by_epoch: bool) -> str:
    if filename_tmpl is None:
        return "epoch_{}.pt" if by_epoch else "iter_{}.pt"
    if not isinstance(filename_tmpl, str):
        raise InvalidOptionError(
            f"Checkpoint(filename_tmpl={filename_tmpl!r}) is not a file name: give one with "
            "one '{}' for the epoch or iteration, e.g. 'epoch_{}.pt'",
            option="filename_tmpl",
            value=filename_tmpl,
        )
    plain = filename_tmpl.replace("{{", "").replace("}}", "")  # escaped braces are text
    one_field = plain.count("{}") == 1 and "{" not in plain.replace("{}", "")
    stray = "}" in plain.replace("{}", "")
    if not one_field or stray or "/" in filename_tmpl or filename_tmpl == LATEST:
        raise InvalidOptionError(
            f"Checkpoint(filename_tmpl={filename_tmpl!r}) must be a file name with one '{{}}' "
            "for the epoch or iteration, e.g. 'epoch_{}.pt'",
            option="filename_tmpl",
            value=filename_tmpl,
        )
    return filename_tmpl


def _save_name(name: Any) -> Any:
    """``Checkpoint.save``'s ``name``: a file in work_dir, as the manifest lists only those
    (and ``latest`` is the manifest itself)."""
    if name and not _plain_name(name):  # None (or ''): the usual name
        raise InvalidOptionError(
            f"Checkpoint.save(runner, name={name!r}): give the name of a file to write in "
            "work_dir, e.g. 'extra_4.pt' (no folder; 'latest' is the manifest's name)",
            option="name",
            value=name,
        )
    return name


def _resume_option(resume: str | os.PathLike[str] | None) -> str | Path | None:
    if resume is None or resume == "auto":
        return resume
    if not isinstance(resume, (str, os.PathLike)):
        raise InvalidOptionError(
            f"Checkpoint(resume={resume!r}): give 'auto', a checkpoint path or None",
            option="resume",
            value=resume,
        )
    path = Path(resume)
    if not path.exists():
        raise CheckpointNotFoundError(
            f"Checkpoint(resume={str(resume)!r}): no such file or folder; give an existing "
            "checkpoint file (e.g. work_dir/epoch_3.pt) or its folder, resume='auto' to "
            "continue from the newest checkpoint in work_dir when there is one, or "
            "resume=None to start afresh",
            path=str(resume),
        )
    return path
