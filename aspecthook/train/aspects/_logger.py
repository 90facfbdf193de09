"""``Logger``: human console lines and a JSON-lines file of every logged scalar."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
from collections import deque
from pathlib import Path
from typing import IO, Any

import torch

from ..._advice import handles_own_errors, log_own_failure
from ..._aspect import Aspect, AspectOptions
from ..._context import CallContext, Proceed
from ..._priority import Priority
from ..._typing import Unpack
from ...errors import InvalidOptionError
from .._steps import _as_float, _is_step_scalar, _step_scalars
from ._options import check_flags
from ._timer import IterTimer

__all__ = ["Logger"]

TRAIN_EVENT = "train"
VAL_EVENT = "val"
RUN_EVENT = "run"
#: How many of the latest records ``Logger.records`` keeps.
_KEPT_RECORDS = 1000


class Logger(Aspect):
    """Logs every ``interval`` iterations on rank 0 through structlog.

    ``epoch`` in its records counts from 1 (the epoch an iteration belongs to, the epoch a
    validation closes); a non-finite value is ``null`` in the JSON-lines file.

    (``file_interval`` can make the JSON-lines file finer-grained than the console.)
    A console line has epoch, iteration, the loss smoothed over the last ``window``
    iterations (10 by default, the window OpenMMLab's log processor smooths over), the LR,
    data/iteration time and ETA (when ``IterTimer`` runs). Every logged
    scalar also goes to ``work_dir/metrics.jsonl`` (one JSON object per line) and, with
    ``tensorboard=True``, to a ``torch.utils.tensorboard`` writer in ``work_dir/tb``.
    The file is appended to; each run first writes ``{"mode": "run", "epoch": e,
    "iter": n}``, ``n`` the iteration it starts after, so a reader can tell a resumed
    run's records of iterations trained again (and a new run's) from the ones before.
    Further scalars a ``train_step`` returns in its dict (``{'loss': ..., 'acc': ...}``:
    numbers and one-element tensors) are logged too. As OpenMMLab's log processor does, a
    scalar whose name has ``loss``, ``time`` or ``grad_norm`` in it (``loss_cls``, the
    timings, the gradient norm) is smoothed over the window as the loss is, and the others
    (``acc``, the LR) are the logged iteration's value: a rate or a count is read as it
    stands, a loss that jumps from batch to batch is read as a trend.
    Validation metrics are logged after each validation; ``records`` holds the latest
    1,000 records as dicts. Failures never stop training (``errors='log'``).
    """

    name = "logger"
    needs_runner = True
    priority = Priority.BELOW_NORMAL
    errors = "log"

    def __init__(
        self,
        interval: int = 50,
        *,
        window: int = 10,
        file_interval: int | None = None,
        json_file: str | None = "metrics.jsonl",
        tensorboard: bool = False,
        **options: Unpack[AspectOptions],
    ) -> None:
        super().__init__(**options)
        check_flags("Logger", tensorboard=tensorboard)
        _check_options(interval, window, file_interval, tensorboard)
        _check_json_file(json_file)
        self.interval = interval
        self.file_interval = file_interval or interval
        self.window = window
        self.json_file = json_file
        self.tensorboard = tensorboard
        self.losses: deque[float | torch.Tensor] = deque(maxlen=window)
        # The other smoothed scalars' windows (time, data_time, grad_norm, loss_cls ...),
        # filled on the same iterations as ``losses``.
        self._windows: dict[str, deque[float | torch.Tensor]] = {}
        self._unsmoothed: set[Any] = set()  # names of outputs judged not to smooth (acc)
        # The latest records, for code to read after a run (the file has them all): bounded,
        # so a long run logged every iteration does not grow without end.
        self.records: deque[dict[str, Any]] = deque(maxlen=_KEPT_RECORDS)
        self._file: IO[str] | None = None
        self._writer: Any = None
        self._log: Any = None
        self._timer: IterTimer | None = None

    def before_run(self, ctx: CallContext) -> None:
        import structlog

        runner = ctx.runner
        self._log = structlog.get_logger("aspecthook.train")
        timer = runner.get_aspect(IterTimer)
        self._timer = timer if isinstance(timer, IterTimer) else None

    def around_run(self, ctx: CallContext, proceed: Proceed) -> Any:
        """The files are open for the run itself: opened once every ``before_run`` advice
        has passed (one that refuses the run leaves nothing open) and closed however the
        run ends."""
        self._open(ctx.runner)
        try:
            return proceed()
        finally:
            self._close()

    def _open(self, runner: Any) -> None:
        if runner.rank != 0:
            return
        if runner.work_dir is not None and self.json_file:
            path = Path(runner.work_dir) / self.json_file
            self._file = path.open("a", encoding="utf-8")
            start = {"mode": RUN_EVENT, "epoch": _epoch(runner), "iter": runner.iter}
            self._file.write(json.dumps(start) + "\n")
            self._file.flush()
        if self.tensorboard and runner.work_dir is not None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(Path(runner.work_dir) / "tb"))

    def advice_options(self, attr: str) -> dict[str, Any]:
        """One log interval: ``after_train_iter`` runs only on the ``window`` iterations
        that end at each log point (the test is made in the join point's dispatcher)."""
        if attr == "after_train_iter" and self.file_interval == self.interval:
            return {"every": self.interval, "window": max(1, min(self.window, self.interval))}
        return {}

    @handles_own_errors  # errors= applies to the logging below, not to the cheap test
    def after_train_iter(self, ctx: CallContext) -> None:
        runner = ctx.runner  # never None: see ``needs_runner``
        it = runner.iter
        # Iterations that neither log nor feed the smoothed values (only the last `window`
        # before a log point do) cost a modulo and a comparison, and nothing else.
        left = -it % self.interval  # iterations to the next log point
        if self.file_interval != self.interval:
            to_file = -it % self.file_interval
            left = to_file if to_file < left else left
        if left and left >= self.window:
            return
        try:
            if left < self.window:
                outputs = runner.outputs
                loss = outputs.get("loss")
                if type(loss) is torch.Tensor:
                    # On the CPU a float costs no more than a detached tensor and makes
                    # the mean a Python sum; on an accelerator .item() would wait for the
                    # device every iteration, so the loss stays there until it is logged.
                    self.losses.append(loss.item() if loss.is_cpu else loss.detach())
                self._keep(outputs)  # the other smoothed scalars (time, loss_cls ...)
            if left == 0:
                self._train_record(runner, it)
                self._end_windows(it)
        except Exception:
            if self.errors != "log":
                raise
            log_own_failure(self, ctx)

    def _keep(self, outputs: dict[str, Any]) -> None:
        """Add this iteration's other smoothed scalars (``_SMOOTHED``) to their windows;
        called on the ``window`` iterations before a log point only, as for the loss. Each
        name is judged once (``_judge``): after that a float costs a lookup and an append."""
        windows = self._windows
        for key, value in outputs.items():
            window = windows.get(key)
            if window is None:
                if key not in self._unsmoothed:
                    self._judge(key, value)
            elif type(value) is float:  # a timing
                window.append(value)
            else:
                kept = _kept(value)
                if kept is not None:
                    window.append(kept)

    def _judge(self, key: Any, value: Any) -> None:
        """Open a window for ``key`` if its name is one to smooth and ``value`` is a scalar
        (a name that is not is remembered, so it is judged once)."""
        if not isinstance(key, str) or key in _NOT_KEPT or _SMOOTHED.search(key) is None:
            self._unsmoothed.add(key)
            return
        kept = _kept(value)
        if kept is not None:
            self._windows[key] = deque([kept], maxlen=self.window)

    def _end_windows(self, it: int) -> None:
        """At a log point: empty the windows of ``_windows`` if the next log point is a whole
        ``window`` away, so that a value a step returns on some iterations only
        (``grad_norm`` under ``GradAccumulation``) is averaged over the iterations of that
        point's window that have it, not over older windows' values. Where two log points
        are closer, the next point's window holds iterations of this one's: kept."""
        to_next = min(
            -it % self.interval or self.interval, -it % self.file_interval or self.file_interval
        )
        if to_next >= self.window:
            for window in self._windows.values():
                window.clear()

    def state_dict(self) -> dict[str, Any]:
        """The values in the smoothing windows so far (part of checkpoints): a run resumed
        inside a window logs the means the uninterrupted run logs. Not the timings': each
        process measures its own, and a checkpoint holds only what a run reproduces."""
        windows = {
            key: [float(v) for v in window]
            for key, window in self._windows.items()
            if "time" not in key
        }
        return {"losses": [float(loss) for loss in self.losses], "windows": windows}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.losses.clear()
        self.losses.extend(float(loss) for loss in state.get("losses", ()))
        self._windows = {
            str(key): deque((float(v) for v in values), maxlen=self.window)
            for key, values in state.get("windows", {}).items()
        }

    def _train_record(self, runner: Any, it: int) -> None:
        console = it % self.interval == 0
        if not (console or it % self.file_interval == 0) or runner.rank != 0:
            return
        record: dict[str, Any] = {
            "mode": TRAIN_EVENT,
            "epoch": _epoch(runner),
            "iter": it,
        }
        record.update(_learning_rates(runner.optimizer.param_groups))
        if self.losses:
            record["loss"] = _mean(self.losses)
        outputs = runner.outputs
        for key in _TIMINGS:
            value = outputs.get(key)
            if value is not None:
                record[key] = self._value(key, value)
        for key, value in _step_scalars(outputs, _NOT_EXTRA).items():
            if key not in record:  # a name the record has already (lr, iter) is not taken
                number = self._value(key, value)
                if number is not None:
                    record[key] = number
        timer = self._timer
        eta = timer.eta(runner) if timer is not None else None
        if eta is not None:
            record["eta_s"] = round(eta, 1)
        self._emit(TRAIN_EVENT, record, it, console=console)

    def _value(self, key: str, value: Any) -> float | None:
        """What a record logs of the scalar ``key``: the mean of its window (see
        ``_SMOOTHED``; it holds the logged iteration's value too), else that value."""
        window = self._windows.get(key)
        if window:
            return _mean(window)
        if isinstance(value, torch.Tensor):
            value = value.detach()  # a part of the loss: read without its graph
        return _as_float(value)

    def after_val_epoch(self, ctx: CallContext) -> None:
        runner = ctx.runner
        if runner.rank != 0 or not runner.metrics:
            return
        record: dict[str, Any] = {"mode": VAL_EVENT, "epoch": _epoch(runner), "iter": runner.iter}
        record.update(
            {k: number for k, v in runner.metrics.items() if (number := _as_float(v)) is not None}
        )
        self._emit(VAL_EVENT, record, runner.iter)

    def _emit(self, event: str, record: dict[str, Any], step: int, *, console: bool = True) -> None:
        self.records.append(record)
        if console:  # four significant digits read well; the file keeps full precision
            short = {
                k: float(f"{v:.4g}") if isinstance(v, float) else v
                for k, v in record.items()
                if k != "mode"
            }
            self._log.info(event, **short)
        if self._file is not None:
            # Strict JSON: a non-finite number (a diverged loss) is written as null.
            self._file.write(json.dumps(_finite(record), allow_nan=False) + "\n")
            self._file.flush()
        if self._writer is not None:
            for key, value in record.items():
                if key != "mode" and isinstance(value, float) and math.isfinite(value):
                    # Validation metrics carry their prefix already ('val/acc').
                    tag = key if key.startswith(f"{event}/") else f"{event}/{key}"
                    self._writer.add_scalar(tag, value, step)

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None


#: The timings and the gradient norm (``IterTimer``, ``GradClip``), logged first.
_TIMINGS = ("time", "data_time", "grad_norm")
#: What a step's outputs hold that is not a further scalar of the step's own to log: the
#: loss is logged from ``losses``, the timings as above, the rest is no scalar.
_NOT_EXTRA = frozenset(["loss", *_TIMINGS, "outputs", "targets"])
#: What is not put in a window of ``_windows`` (the loss has its own).
_NOT_KEPT = frozenset(["loss", "outputs", "targets"])
#: The names of the scalars smoothed over the window, as OpenMMLab's log processor
#: smooths them (its default ``mean_pattern``): a loss, a time, the gradient norm.
_SMOOTHED = re.compile(r"loss|time|grad_norm")


def _kept(value: Any) -> float | torch.Tensor | None:
    """A scalar for a window: a float, or on an accelerator a detached 0-d tensor (reading
    it would wait for the device every iteration; it is read when it is logged); None for
    a value that is no scalar (``_is_step_scalar``)."""
    if not _is_step_scalar(value):
        return None
    if isinstance(value, torch.Tensor):
        if value.is_cpu:
            return float(value.item())
        return value.detach().reshape(())
    return float(value)


def _learning_rates(groups: list[dict[str, Any]]) -> dict[str, float]:
    """``lr`` of the first parameter group, and with several groups (a backbone and a head
    trained at different rates) ``lr/<name>`` for each further one: its ``name`` entry
    when it has one (unique among them), else ``pg<i>``. ``float``: torch allows a tensor
    LR.

    ``lr/pg<i>`` is kept for group ``i``: a group named ``pg<j>`` after another group, or a
    name taken already, is shown as ``lr/pg<i>`` too, so that no group's LR hides
    another's."""
    rates = {"lr": float(groups[0]["lr"])}
    for i, group in enumerate(groups[1:], start=1):
        name = group.get("name")
        key = f"lr/{name}" if isinstance(name, str) and name else ""
        if not key or key in rates or (_INDEXED.fullmatch(key) and key != f"lr/pg{i}"):
            key = f"lr/pg{i}"
        rates[key] = float(group["lr"])
    return rates


#: The key of a parameter group by its index (``lr/pg2``), which only that group may take.
_INDEXED = re.compile(r"lr/pg\d+")


def _check_json_file(json_file: object) -> None:
    """A file name (or None): anything else would fail when the run opens it, and a Logger
    logs its failures, so the run would go on without its metrics file."""
    if json_file is not None and not isinstance(json_file, (str, os.PathLike)):
        raise InvalidOptionError(
            f"Logger(json_file={json_file!r}) is not a file name: give one such as "
            "'metrics.jsonl' (in the runner's work_dir), or None for no file",
            option="json_file",
            value=json_file,
        )


def _check_options(
    interval: int, window: int, file_interval: int | None, tensorboard: bool
) -> None:
    """Refuse, at construction, intervals that are not positive ints and a tensorboard
    writer without its package."""
    if not isinstance(interval, int) or isinstance(interval, bool) or interval < 1:
        raise InvalidOptionError(
            f"Logger(interval={interval!r}) must be a positive int",
            option="interval",
            value=interval,
        )
    if tensorboard and importlib.util.find_spec("tensorboard") is None:
        raise InvalidOptionError(
            "Logger(tensorboard=True) needs the tensorboard package: pip install tensorboard",
            option="tensorboard",
            value=tensorboard,
        )
    for option, value in (("file_interval", file_interval), ("window", window)):
        if (value is not None or option == "window") and (
            not isinstance(value, int) or isinstance(value, bool) or value < 1
        ):
            raise InvalidOptionError(
                f"Logger({option}={value!r}) must be a positive int",
                option=option,
                value=value,
            )


def _epoch(runner: Any) -> int:
    """The record's epoch, counted from 1: the one in progress (train lines, a validation
    inside an epoch) or the one that just ended (a validation after it)."""
    return int(runner.epoch) + (1 if runner.inner_iter else 0)


def _finite(record: dict[str, Any]) -> dict[str, Any]:
    return {
        k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in record.items()
    }


def _mean(values: deque[float | torch.Tensor]) -> float:
    """The mean of the window, summed exactly: device tensors are read in one transfer (as
    float32, which every loss dtype converts to exactly), so a window of tensors and the
    same window restored from a checkpoint as floats give the same mean."""
    floats = [v for v in values if type(v) is float]
    if len(floats) < len(values):
        tensors = [v.reshape(()) for v in values if isinstance(v, torch.Tensor)]  # (1,) too
        floats += torch.stack(tensors).to(torch.float32).tolist()
    return math.fsum(floats) / len(values)
