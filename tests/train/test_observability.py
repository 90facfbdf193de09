"""Logger, IterTimer and ProgressBar on a real Runner; failures in them never stop training."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import pytest
import structlog
import torch
from rich.console import Console
from torch.utils.data import DataLoader, TensorDataset

import aspecthook as ah
from aspecthook.errors import AspectParameterError, InvalidOptionError, RunnerError
from aspecthook.train import Runner
from aspecthook.train.aspects import Checkpoint, Evaluate, IterTimer, Logger, ProgressBar


def _runner(tmp_path: Path, aspects: list[Any], **kwargs: Any) -> Runner:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    data = TensorDataset(torch.randn(24, 4), torch.randint(0, 3, (24,)))
    kwargs.setdefault("max_epochs", 2)
    return Runner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        DataLoader(data, batch_size=4),
        val_loader=DataLoader(data, batch_size=8),
        loss_fn=torch.nn.functional.cross_entropy,
        work_dir=tmp_path,
        aspects=aspects,
        **kwargs,
    )


def test_a_misspelt_keyword_to_logger_names_logger() -> None:
    """Logger(intervl=5) raises AspectParameterError naming Logger and 'interval'."""
    with pytest.raises(
        AspectParameterError,
        match=r"^Logger does not take 'intervl' \(did you mean 'interval'\?\); its parameters "
        r"are: interval, ",
    ):
        Logger(intervl=5)  # type: ignore[call-arg]


def test_logger_writes_console_events_and_metrics_jsonl(tmp_path: Path) -> None:
    """Every interval-th iteration is logged with loss, lr and timings; val metrics too."""
    runner = _runner(tmp_path, [IterTimer(), Logger(interval=3)])
    with structlog.testing.capture_logs() as logs:
        runner.run()
    train = [e for e in logs if e["event"] == "train"]
    assert [e["iter"] for e in train] == [3, 6, 9, 12]
    assert all({"loss", "lr", "time", "data_time", "eta_s"} <= set(e) for e in train)
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["iter"] for r in lines if r["mode"] == "train"] == [3, 6, 9, 12]
    val = [r for r in lines if r["mode"] == "val"]
    assert len(val) == 2
    assert "val/loss" in val[0]


def test_logger_logs_the_further_scalars_a_train_step_returns(tmp_path: Path) -> None:
    """A train_step's dict with more than a loss (accuracy, the parts of a loss) has those
    scalars logged at each logged iteration's value, on the console and in the file;
    what is no scalar, and a key the line has already, is left out."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    data = TensorDataset(torch.randn(24, 4), torch.randint(0, 3, (24,)))

    def step(runner: Runner, batch: Any) -> dict[str, Any]:
        x, y = batch
        out = runner.model(x)
        loss_cls = torch.nn.functional.cross_entropy(out, y)
        return {
            "loss": loss_cls * 2,
            "loss_cls": loss_cls,
            "acc": (out.argmax(1) == y).float().mean(),
            "count": runner.iter,  # a plain number
            "iter": -1.0,  # the line's own key: not taken
            "outputs": out,  # no scalar
            "flag": True,
            "note": "text",
        }

    runner = Runner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        DataLoader(data, batch_size=4),
        train_step=step,
        max_epochs=1,
        work_dir=tmp_path,
        aspects=[Logger(interval=3, window=1, errors="raise")],
    )
    seen: list[dict[str, float]] = []
    runner.weaver.after("train_iter")(
        lambda ctx: seen.append(
            {k: v.item() for k, v in ctx.result.items() if k in ("acc", "loss_cls")}
        )
    )
    with structlog.testing.capture_logs() as logs:
        runner.run()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in lines if r["mode"] == "train"]
    assert [r["iter"] for r in train] == [3, 6]
    for record in train:
        it = record["iter"]
        assert record["acc"] == seen[it - 1]["acc"]
        assert record["loss_cls"] == seen[it - 1]["loss_cls"]
        assert record["count"] == it - 1  # runner.iter while the step ran
        assert record["loss"] == pytest.approx(2 * record["loss_cls"])
        assert not {"outputs", "flag", "note"} & set(record)
    console = [e for e in logs if e["event"] == "train"]
    assert [e["iter"] for e in console] == [3, 6]
    assert all({"acc", "loss_cls", "count"} <= set(e) for e in console)


def test_logger_logs_a_numpy_scalar_a_train_step_returns(tmp_path: Path) -> None:
    """A further scalar computed with numpy (np.float32, np.int64: no Python float) is
    logged as a tensor or a float is; it was left out."""
    import numpy as np

    model = torch.nn.Linear(4, 3)
    data = TensorDataset(torch.randn(8, 4), torch.randint(0, 3, (8,)))

    def step(runner: Runner, batch: Any) -> dict[str, Any]:
        x, y = batch
        out = runner.model(x)
        hits = (out.argmax(1) == y).numpy()
        return {
            "loss": torch.nn.functional.cross_entropy(out, y),
            "acc": hits.mean(dtype=np.float32),
            "hits": hits.sum(),
            "flag": np.bool_(True),  # no number
        }

    runner = Runner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        DataLoader(data, batch_size=4),
        train_step=step,
        max_epochs=1,
        work_dir=tmp_path,
        aspects=[Logger(interval=1, window=1, errors="raise")],
    )
    runner.run()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in lines if r["mode"] == "train"]
    assert len(train) == 2
    for record in train:
        assert isinstance(record["acc"], float)
        assert isinstance(record["hits"], float)
        assert "flag" not in record


def test_logger_smooths_the_loss_over_its_window(tmp_path: Path) -> None:
    """The logged loss is the mean of the last `window` iteration losses (console: 4 digits)."""
    losses: list[float] = []
    logger = Logger(interval=6, window=3)
    runner = _runner(tmp_path, [logger], max_epochs=1)
    runner.weaver.after("train_iter")(lambda ctx: losses.append(ctx.result["loss"].item()))
    with structlog.testing.capture_logs() as logs:
        runner.run()
    expected = sum(losses[3:6]) / 3
    assert logger.records[0]["loss"] == pytest.approx(expected, rel=1e-6)
    logged = next(e for e in logs if e["event"] == "train")
    assert logged["loss"] == pytest.approx(expected, rel=1e-3)


def _step_with_parts(runner: Runner, batch: Any) -> dict[str, Any]:
    """A train_step returning a loss, a part of it and an accuracy."""
    x, y = batch
    out = runner.model(x)
    loss_cls = torch.nn.functional.cross_entropy(out, y)
    return {"loss": loss_cls * 2, "loss_cls": loss_cls, "acc": (out.argmax(1) == y).float().mean()}


def test_logger_smooths_every_loss_time_and_grad_norm_over_its_window(tmp_path: Path) -> None:
    """As OpenMMLab's log processor: a further scalar named like a loss (loss_cls), the
    timings and the gradient norm are the mean of the window's iterations, as the loss is;
    any other scalar (acc) is the logged iteration's value. loss_cls and the timings were
    the logged iteration's value, beside a smoothed loss."""
    from aspecthook.train.aspects import GradClip

    seen: dict[int, dict[str, float]] = {}
    logger = Logger(interval=6, window=3, errors="raise")
    runner = _runner(
        tmp_path, [IterTimer(), GradClip(max_norm=10.0), logger], train_step=_step_with_parts
    )

    def record(ctx: ah.CallContext) -> None:
        keys = ("loss", "loss_cls", "acc", "time", "data_time", "grad_norm")
        values = {k: ctx.result[k] for k in keys}
        seen[ctx.runner.iter] = {
            k: float(v.detach() if isinstance(v, torch.Tensor) else v) for k, v in values.items()
        }

    runner.weaver.after("train_iter", priority="LOWEST")(record)
    runner.run()
    train = [r for r in logger.records if r["mode"] == "train"]
    assert [r["iter"] for r in train] == [6, 12]
    for logged in train:
        window = [seen[i] for i in range(logged["iter"] - 2, logged["iter"] + 1)]
        for key in ("loss", "loss_cls", "time", "data_time", "grad_norm"):
            assert logged[key] == pytest.approx(sum(w[key] for w in window) / 3, rel=1e-6), key
        assert logged["acc"] == seen[logged["iter"]]["acc"]


def _step_with_a_part_every_other_iteration(runner: Runner, batch: Any) -> dict[str, Any]:
    """A train_step returning ``loss_aux`` (the iteration's number) on even iterations only."""
    x, y = batch
    out: dict[str, Any] = {"loss": torch.nn.functional.cross_entropy(runner.model(x), y)}
    number = runner.iter + 1  # the iteration this step belongs to
    if number % 2 == 0:
        out["loss_aux"] = float(number)
    return out


def test_a_value_returned_on_some_iterations_is_smoothed_over_the_window_alone(
    tmp_path: Path,
) -> None:
    """A smoothed value a step returns on some iterations only (grad_norm under
    GradAccumulation) is the mean of the logged window's iterations that have it; the
    values of an earlier window no longer make up the rest of it."""
    logger = Logger(interval=8, window=4, errors="raise")
    runner = _runner(
        tmp_path, [logger], max_epochs=3, train_step=_step_with_a_part_every_other_iteration
    )
    runner.run()
    train = [r for r in logger.records if r["mode"] == "train"]
    assert [r["iter"] for r in train] == [8, 16]
    for logged in train:
        it = logged["iter"]
        assert logged["loss_aux"] == pytest.approx((it - 2 + it) / 2), it


def test_a_run_resumed_inside_a_log_window_logs_the_same_smoothed_parts(
    tmp_path: Path,
) -> None:
    """The windows of the other smoothed scalars (loss_cls) are part of the checkpoint as
    the loss's is: a run resumed at 5, inside the window (3..6) of the log point 6, logs
    the uninterrupted run's mean of loss_cls at 6."""

    def records(folder: Path, **checkpoint: Any) -> list[tuple[int, float]]:
        logger = Logger(interval=6, window=4, json_file=None, errors="raise")
        ckpt = Checkpoint(interval=5, by_epoch=False, save_last=False, **checkpoint)
        runner = _runner(
            folder, [logger, ckpt], max_epochs=None, max_iters=12, train_step=_step_with_parts
        )
        runner.run()
        return [(r["iter"], r["loss_cls"]) for r in logger.records if r["mode"] == "train"]

    whole = records(tmp_path / "whole")
    resumed = records(tmp_path / "resumed", resume=tmp_path / "whole" / "iter_5.pt")
    assert [it for it, _ in whole] == [6, 12]
    assert resumed == whole


def test_a_loggers_state_holds_no_timings() -> None:
    """The timings' windows are left out of the Logger's state: each process measures its
    own, and a resumed run's checkpoints equal the uninterrupted run's."""
    logger = Logger(interval=4, window=2)
    logger._keep({"loss": torch.tensor(1.0), "loss_cls": torch.tensor(0.5), "time": 0.1})
    logger._keep({"loss": torch.tensor(1.0), "data_time": 0.2, "grad_norm": torch.tensor(3.0)})
    assert logger.state_dict()["windows"] == {"loss_cls": [0.5], "grad_norm": [3.0]}


def test_a_window_of_one_element_device_tensors_has_their_mean() -> None:
    """A scalar of shape (1,) kept on an accelerator averages as a 0-d one does (stacking
    them gave nested lists, and the mean failed)."""
    from collections import deque

    from aspecthook.train.aspects._logger import _mean

    window: deque[Any] = deque([torch.tensor([1.0]), torch.tensor(2.0), 6.0])
    assert _mean(window) == pytest.approx(3.0)


@pytest.mark.parametrize("window", [1, 3])
def test_console_and_file_intervals_that_do_not_divide_each_other(
    tmp_path: Path, window: int
) -> None:
    """interval=6 with file_interval=4: the console at 6 and 12, the file at every point
    of either (4, 6, 8, 12), whatever the window; the smoothed loss is over the window."""
    logger = Logger(interval=6, file_interval=4, window=window)
    runner = _runner(tmp_path, [logger], max_epochs=2)  # 6 batches an epoch: 12 iterations
    with structlog.testing.capture_logs() as logs:
        runner.run()
    assert [e["iter"] for e in logs if e["event"] == "train"] == [6, 12]
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["iter"] for r in lines if r["mode"] == "train"] == [4, 6, 8, 12]
    assert all("loss" in r for r in lines if r["mode"] == "train")


def test_the_smoothed_loss_keeps_device_losses_as_tensors_and_mixes_them_right() -> None:
    """CPU losses are kept as floats; a loss on another device stays a tensor (reading it
    would wait for the device); a window holding both averages them all, in float32 for
    the tensors whatever their dtype."""
    from collections import deque

    from aspecthook.train.aspects._logger import _mean

    window: deque[Any] = deque([1.0, torch.tensor(2.0), torch.tensor(6.0, dtype=torch.float16)])
    assert _mean(window) == pytest.approx(3.0)
    assert _mean(deque([0.1, 0.2, 0.3])) == pytest.approx(0.2, abs=1e-15)


def test_a_window_of_device_tensors_and_the_same_window_restored_as_floats_agree() -> None:
    """On an accelerator the window holds tensors; a checkpoint restores it as floats:
    both give the same mean, to the last bit."""
    from collections import deque

    from aspecthook.train.aspects._logger import _mean

    torch.manual_seed(0)
    for _ in range(50):
        losses = torch.rand(10) * 3
        as_tensors: deque[Any] = deque(losses.unbind())
        half_restored: deque[Any] = deque([float(v) for v in losses[:5]] + list(losses[5:]))
        assert _mean(as_tensors) == _mean(half_restored)


def test_logger_keeps_its_log_points_and_window_in_a_resumed_run(tmp_path: Path) -> None:
    """A run whose counter starts at 5 logs at iterations 8 and 12, each loss the mean of
    the 3 iterations before it, as the uninterrupted run does."""
    losses: dict[int, float] = {}
    logger = Logger(interval=4, window=3)
    runner = _runner(tmp_path, [logger], max_epochs=None, max_iters=12)
    runner.iter = 5
    runner.weaver.after("train_iter")(
        lambda ctx: losses.__setitem__(ctx.runner.iter, ctx.result["loss"].item())
    )
    runner.run()
    assert [r["iter"] for r in logger.records if r["mode"] == "train"] == [8, 12]
    for record in logger.records:
        if record["mode"] == "train":
            it = record["iter"]
            expected = sum(losses[i] for i in (it - 2, it - 1, it)) / 3
            assert record["loss"] == pytest.approx(expected, rel=1e-6)


def test_a_run_resumed_inside_a_log_window_logs_the_same_smoothed_loss(
    tmp_path: Path,
) -> None:
    """A checkpoint at iteration 5 falls inside the window (3..6) of the log point 6: the
    losses already in the window are part of the checkpoint, so the resumed run logs the
    uninterrupted run's mean at 6, not the mean of iteration 6 alone."""

    def records(folder: Path, **checkpoint: Any) -> list[tuple[int, float]]:
        logger = Logger(interval=6, window=4, json_file=None)
        ckpt = Checkpoint(interval=5, by_epoch=False, save_last=False, **checkpoint)
        runner = _runner(folder, [logger, ckpt], max_epochs=None, max_iters=12)
        runner.run()
        return [(r["iter"], r["loss"]) for r in logger.records if r["mode"] == "train"]

    whole = records(tmp_path / "whole")
    resumed = records(tmp_path / "resumed", resume=tmp_path / "whole" / "iter_5.pt")
    assert [it for it, _ in whole] == [6, 12]
    assert resumed == whole


def test_metrics_jsonl_marks_where_each_run_starts(tmp_path: Path) -> None:
    """The file is appended to: a run broken off at iteration 10 and resumed from its
    checkpoint at 6 logs 8 and 10 again, after a 'run' line at 6, so a reader can keep the
    last record of each iteration; a new run in the same folder starts at a 'run' line at 0."""
    first = _runner(tmp_path, [Checkpoint(), Logger(interval=2)])
    first.weaver.after("train_iter")(lambda ctx: ctx.runner.iter < 10 or 1 / 0)
    with pytest.raises(ZeroDivisionError):
        first.run()
    _runner(tmp_path, [Checkpoint(resume="auto"), Logger(interval=2)]).run()
    _runner(tmp_path, [Logger(interval=6)], max_epochs=1).run()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["mode"], r["iter"]) for r in lines if r["mode"] != "val"] == [
        ("run", 0), ("train", 2), ("train", 4), ("train", 6), ("train", 8),
        ("run", 6), ("train", 8), ("train", 10), ("train", 12),
        ("run", 0), ("train", 6),
    ]  # fmt: skip


def test_logger_file_interval_is_finer_than_the_console(tmp_path: Path) -> None:
    """file_interval=2 writes every second iteration to metrics.jsonl; the console every 6."""
    runner = _runner(tmp_path, [Logger(interval=6, file_interval=2)], max_epochs=1)
    with structlog.testing.capture_logs() as logs:
        runner.run()
    assert [e["iter"] for e in logs if e["event"] == "train"] == [6]
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["iter"] for r in lines if r["mode"] == "train"] == [2, 4, 6]


def test_iter_timer_reports_eta_that_shrinks(tmp_path: Path) -> None:
    """IterTimer puts times in the outputs and its ETA goes down as the run advances: after
    each iteration it is the iterations left (of 12) times the recent mean period."""
    timer = IterTimer()
    runner = _runner(tmp_path, [timer])
    seen: list[tuple[int, float, float]] = []

    def record(ctx: ah.CallContext) -> None:
        mean = sum(timer.times) / len(timer.times)
        seen.append((ctx.runner.iter, timer.eta(ctx.runner) or 0.0, mean))

    runner.weaver.after("train_iter", priority="LOWEST")(record)
    runner.run()
    assert runner.outputs["time"] > 0
    assert [done for done, _, _ in seen] == list(range(1, 13))
    for done, eta, mean in seen:
        assert eta == pytest.approx((12 - done) * mean, rel=1e-12)
    assert seen[-1][1] == 0.0
    assert seen[0][1] > 0.0


class _Stream(torch.utils.data.IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    """Five batches of four samples an epoch, with no len()."""

    def __iter__(self) -> Any:
        generator = torch.Generator().manual_seed(0)
        for _ in range(5):
            yield torch.randn(4, 4, generator=generator), torch.randint(0, 3, (4,))


def test_an_eta_over_a_loader_without_len_from_the_first_whole_epoch(tmp_path: Path) -> None:
    """max_epochs=3 over an IterableDataset: no ETA in the first epoch, whose length is not
    known; from the end of it, the epochs left times its 5 iterations, less the current
    epoch's, at the recent mean period, in IterTimer, in Logger's lines and as the
    ProgressBar's total. All three had none for the whole run."""
    timer = IterTimer()
    logger = Logger(interval=5, errors="raise")
    out = io.StringIO()
    bar = ProgressBar(console=Console(file=out, force_terminal=False, width=100), errors="raise")
    runner = _runner(tmp_path, [timer, logger, bar], max_epochs=3)
    runner.train_loader = DataLoader(_Stream(), batch_size=None)
    seen: list[tuple[int, float | None, float]] = []
    totals: list[float | None] = []

    def record(ctx: ah.CallContext) -> None:
        seen.append((ctx.runner.iter, timer.eta(ctx.runner), sum(timer.times) / len(timer.times)))

    runner.weaver.after("train_iter", priority="LOWEST")(record)
    runner.weaver.after("train_epoch", priority="LOWEST")(
        lambda ctx: totals.append(bar._progress.tasks[0].total)
    )
    runner.run()
    assert [done for done, _, _ in seen] == list(range(1, 16))
    assert [eta for _, eta, _ in seen[:5]] == [None] * 5
    for done, eta, mean in seen[5:]:
        assert eta == pytest.approx((15 - done) * mean, rel=1e-12)
    train = [r for r in logger.records if r["mode"] == "train"]
    assert [("eta_s" in r) for r in train] == [False, True, True]
    assert train[-1]["eta_s"] == 0.0
    assert totals == [15, 15, 15]
    assert "15/15" in out.getvalue()


class _SlowBatches:
    """Three batches, each handed out after ``wait`` seconds (a slow data pipeline)."""

    def __init__(self, wait: float) -> None:
        self.wait = wait
        self.data = DataLoader(TensorDataset(torch.randn(12, 4), torch.randint(0, 3, (12,))), 4)

    def __len__(self) -> int:
        return len(self.data)

    def __iter__(self) -> Any:
        for batch in self.data:
            time.sleep(self.wait)
            yield batch


def test_iter_timer_splits_the_wait_for_data_from_the_iteration(tmp_path: Path) -> None:
    """data_time covers the wait for the batch (previous iteration's end to this one's
    start), time the iteration itself; every iteration has both."""
    times: list[tuple[float, float]] = []
    model = torch.nn.Linear(4, 3)

    def step(runner: Runner, batch: Any) -> torch.Tensor:
        time.sleep(0.01)
        return torch.nn.functional.cross_entropy(runner.model(batch[0]), batch[1])

    runner = Runner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        _SlowBatches(0.03),
        train_step=step,
        max_epochs=2,
        aspects=[IterTimer()],
    )
    runner.weaver.after("train_iter", priority="LOWEST")(
        lambda ctx: times.append((ctx.result["data_time"], ctx.result["time"]))
    )
    runner.run()
    assert len(times) == 6
    assert all(data >= 0.03 and took >= 0.01 for data, took in times)


def test_iter_timer_eta_counts_the_wait_for_data(tmp_path: Path) -> None:
    """A loader that takes 30 ms a batch and a step of about 1 ms: after iteration 4 of 6,
    the ETA is the two iterations left at the period of the last two, data included."""
    timer = IterTimer(window=2)  # iterations 3 and 4: no first-iteration warm-up
    model = torch.nn.Linear(4, 3)
    runner = Runner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        _SlowBatches(0.03),
        loss_fn=torch.nn.functional.cross_entropy,
        max_epochs=2,
        aspects=[timer],
    )
    etas: list[float] = []
    runner.weaver.after("train_iter", priority="LOWEST")(
        lambda ctx: etas.append(timer.eta(ctx.runner) or 0.0)
    )
    runner.run()
    assert etas[3] >= 2 * 0.03


def test_iter_timer_does_not_count_a_validation_as_data_time(tmp_path: Path) -> None:
    """Validation every 2 iterations (taking 50 ms here) between two iterations: the next
    iteration's data_time is the wait for its batch, not the validation."""
    runner = _runner(tmp_path, [IterTimer(), Evaluate(interval=2, by_epoch=False)], max_epochs=1)
    runner.weaver.before("val_epoch")(lambda ctx: time.sleep(0.05))
    data_times: list[float] = []
    runner.weaver.after("train_iter", priority="LOWEST")(
        lambda ctx: data_times.append(ctx.result["data_time"])
    )
    runner.run()
    assert len(data_times) == 6
    assert max(data_times) < 0.04


def test_logger_errors_raise_stops_the_run_at_the_first_failure(tmp_path: Path) -> None:
    """With errors='raise' a failing log line is an error of the run, not a log entry."""
    logger = Logger(interval=2, errors="raise")

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("sink is gone")

    logger._emit = broken  # type: ignore[method-assign]
    runner = _runner(tmp_path, [logger])
    with pytest.raises(RuntimeError, match="sink is gone"):
        runner.run()
    assert runner.iter == 2


def test_progress_bar_advances_to_the_total(tmp_path: Path) -> None:
    """The rich bar reaches max_epochs * batches and is stopped at the end of the run."""
    out = io.StringIO()
    bar = ProgressBar(console=Console(file=out, force_terminal=False, width=100))
    _runner(tmp_path, [bar]).run()
    assert "12/12" in out.getvalue()
    assert bar._progress is None


def test_progress_bar_moves_as_often_as_it_draws_and_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bar is drawn about ten times a second, so it is moved no more often: a run of
    fast iterations moves it far fewer times than it has iterations, and its last move,
    at the end of the run, is to the last iteration."""
    from rich.progress import Progress

    moves: list[int] = []
    update = Progress.update

    def counted(self: Progress, task: Any, **fields: Any) -> None:
        moves.append(fields["completed"])
        update(self, task, **fields)

    monkeypatch.setattr(Progress, "update", counted)
    bar = ProgressBar(console=Console(file=io.StringIO()))
    runner = _runner(tmp_path, [bar], max_epochs=50)  # 300 iterations
    start = time.perf_counter()
    runner.run()
    elapsed = time.perf_counter() - start
    assert moves[-1] == runner.iter == 300
    assert len(moves) <= elapsed / 0.1 + 2  # one at the first iteration, one at the end
    assert moves == sorted(moves)


def test_progress_bar_reads_the_loss_when_it_draws_not_every_iteration(tmp_path: Path) -> None:
    """On an accelerator reading a loss waits for the device: the bar reads it only when it
    draws the loss (about ten times a second, and at the end), not in each of the 300
    iterations; what it shows at the end is the last iteration's loss."""

    class Counted(torch.Tensor):
        reads = 0

        def __float__(self) -> float:
            Counted.reads += 1
            return float(self.as_subclass(torch.Tensor))

    def train_step(runner: Runner, batch: Any) -> torch.Tensor:
        loss = torch.nn.functional.cross_entropy(runner.model(batch[0]), batch[1])
        return loss.as_subclass(Counted)

    out = io.StringIO()
    bar = ProgressBar(console=Console(file=out, force_terminal=False, width=100))
    runner = _runner(tmp_path, [bar], train_step=train_step, max_epochs=50)
    start = time.perf_counter()
    runner.run()
    elapsed = time.perf_counter() - start
    assert 1 <= Counted.reads <= elapsed / 0.1 + 2
    assert Counted.reads < runner.iter == 300
    shown = float(runner.outputs["loss"].detach().as_subclass(torch.Tensor))
    assert f"loss {shown:.4f}" in out.getvalue()


@pytest.mark.parametrize("bar_first", [True, False], ids=["bar-first", "checkpoint-first"])
def test_progress_bar_of_a_resumed_run_starts_where_the_run_does(
    tmp_path: Path, bar_first: bool
) -> None:
    """Resumed at iteration 12 of 24, the bar starts at 12 whichever aspect is listed
    first (both have priority LOW; a checkpoint resumes in its before_run)."""
    from aspecthook.train.aspects import Checkpoint

    _runner(tmp_path, [Checkpoint()]).run()
    bar = ProgressBar(console=Console(file=io.StringIO()))
    checkpoint = Checkpoint(resume="auto")
    runner = _runner(tmp_path, [bar, checkpoint] if bar_first else [checkpoint, bar], max_epochs=4)
    first: list[tuple[int, float]] = []
    runner.weaver.before("train_iter")(
        lambda ctx: first or first.append((ctx.runner.iter, bar._progress.tasks[0].completed))
    )
    runner.run()
    assert first == [(12, 12)]


def test_a_run_refused_as_it_starts_leaves_no_file_open_and_no_bar_running(
    tmp_path: Path,
) -> None:
    """A before_run that refuses the run (here a checkpoint of another model to resume):
    the Logger's file is not left open, nor the progress bar's live display running."""
    from aspecthook.errors import RunnerError

    other = torch.nn.Linear(4, 2)
    Runner(
        other, torch.optim.SGD(other.parameters(), lr=0.1),
        DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 2)), batch_size=4),
        loss_fn=torch.nn.functional.mse_loss, max_iters=1, work_dir=tmp_path,
        aspects=[Checkpoint(interval=1, by_epoch=False)],
    ).run()  # fmt: skip
    logger = Logger(interval=1)
    bar = ProgressBar(console=Console(file=io.StringIO()))
    runner = _runner(tmp_path, [logger, bar, Checkpoint(resume="auto")])
    with pytest.raises(RunnerError, match="checkpoint"):
        runner.run()
    assert logger._file is None
    assert bar._progress is None


def _users_train_step(x: int) -> int:
    """A step of the user's own loop, not of a Runner."""
    return x * 2


def test_logger_on_a_train_iter_outside_a_runner_reports_it_and_does_not_break_it() -> None:
    """Logger on a function of the user's own loop named train_iter (no runner): its calls
    go on, and the failure says what Logger needs (errors='raise' raises it)."""
    step = _users_train_step
    with ah.woven(step, name="train_iter"), ah.register(Logger(interval=1)):
        with structlog.testing.capture_logs() as logs:
            assert _users_train_step(2) == 4
        [failed] = [e for e in logs if e["event"] == "advice.failed"]
        assert failed["advice"] == "logger.after_train_iter"
    with (
        ah.woven(step, name="train_iter"),
        ah.register(Logger(interval=1, errors="raise")),
        pytest.raises(RunnerError, match=r"needs a training runner.*ctx.runner is None"),
    ):
        _users_train_step(2)


def test_failing_observability_aspects_do_not_stop_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Logger and ProgressBar default to errors='log': their failures are logged, not raised."""
    from rich.progress import Progress

    logger, bar = Logger(interval=1), ProgressBar(console=Console(file=io.StringIO()))

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("sink is gone")

    logger._emit = broken  # type: ignore[method-assign]
    monkeypatch.setattr(Progress, "update", broken)  # every bar update fails too
    runner = _runner(tmp_path, [logger, bar])
    with structlog.testing.capture_logs() as logs:
        runner.run()
    assert runner.iter == 12
    failed = [e["aspect"] for e in logs if e["event"] == "advice.failed"]
    assert failed.count("logger") == 12 + 2  # every train line and both validations
    assert failed.count("progress_bar") >= 1  # each move of the bar (see the next test)


def test_tensorboard_gets_every_logged_scalar_under_its_name(tmp_path: Path) -> None:
    """Logger(tensorboard=True) writes each number of metrics.jsonl's records to
    work_dir/tb as a scalar ('train/loss', 'val/loss': a validation metric keeps its own
    prefix) at the record's iteration, as TensorBoard reads the event file back."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    runner = _runner(tmp_path, [IterTimer(), Logger(interval=3, tensorboard=True)])
    runner.run()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    expected: dict[str, list[tuple[int, float]]] = {}
    for record in records:
        mode = record["mode"]
        for key, value in record.items():
            if isinstance(value, float):
                tag = key if key.startswith(f"{mode}/") else f"{mode}/{key}"
                expected.setdefault(tag, []).append((record["iter"], value))
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    written = {
        tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]
    }
    assert {"train/loss", "train/lr", "train/time", "train/data_time", "val/loss"} <= set(written)
    assert written.keys() == expected.keys()
    for tag, points in expected.items():  # float32 in the event file
        assert [step for step, _ in written[tag]] == [step for step, _ in points]
        assert [v for _, v in written[tag]] == pytest.approx([v for _, v in points], rel=1e-6)


def test_tensorboard_without_the_package_is_refused_at_construction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Logger(tensorboard=True) says to install tensorboard when it is missing."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "tensorboard" else real(name, *a),
    )
    with pytest.raises(InvalidOptionError, match="pip install tensorboard"):
        Logger(tensorboard=True)


def test_empty_cache_runs_after_each_epoch_without_cuda(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EmptyCache is advice after every epoch and every ``interval`` iterations; on a
    CPU-only machine emptying the cache is a no-op."""
    from aspecthook.train.aspects import EmptyCache, _optim

    runner = _runner(tmp_path, [EmptyCache(interval=5)])  # 6 iterations an epoch, 2 epochs
    assert (
        runner.describe().advice_names("train_epoch", "after")[-1]
        == "empty_cache.after_train_epoch"
    )
    real_empty = _optim._empty
    emptied: list[int] = []

    def empty() -> None:
        emptied.append(runner.iter)
        real_empty()  # the real one, without CUDA here: it must do nothing and not fail

    monkeypatch.setattr(_optim, "_empty", empty)
    runner.run()
    assert runner.epoch == 2
    assert emptied == [5, 6, 10, 12]  # iterations 5 and 10, the ends of epochs 1 and 2


def test_logger_records_count_epochs_from_one_and_agree_with_validation(tmp_path: Path) -> None:
    """The first epoch's train lines and the validation that closes it both say epoch 1."""
    runner = _runner(tmp_path, [Logger(interval=3)])
    runner.run()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["mode"], r["iter"], r["epoch"]) for r in lines] == [
        ("run", 0, 0),
        ("train", 3, 1),
        ("train", 6, 1),
        ("val", 6, 1),
        ("train", 9, 2),
        ("train", 12, 2),
        ("val", 12, 2),
    ]


def test_logger_file_is_strict_json_with_a_nan_loss_and_a_tensor_lr(tmp_path: Path) -> None:
    """A diverged loss is null in metrics.jsonl (not a bare NaN), and a tensor LR is a
    number."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    data = TensorDataset(torch.randn(8, 4), torch.randint(0, 3, (8,)))

    def step(runner: Runner, batch: Any) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(runner.model(batch[0]), batch[1]) * float("nan")

    runner = Runner(
        model,
        torch.optim.SGD(model.parameters(), lr=torch.tensor(0.1)),
        DataLoader(data, batch_size=4),
        train_step=step,
        max_epochs=1,
        work_dir=tmp_path,
        aspects=[Logger(interval=2, errors="raise")],
    )
    runner.run()
    text = (tmp_path / "metrics.jsonl").read_text().splitlines()[-1]  # after the run line
    record = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in the file"))
    assert record["loss"] is None
    assert record["lr"] == pytest.approx(0.1)


def test_logger_records_the_lr_of_every_parameter_group(tmp_path: Path) -> None:
    """A backbone and a head at different rates: every group's LR is in the records, the
    first as ``lr``, a named group by its name, an unnamed one by its index; each equals
    what the optimizer held at that iteration."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 3), torch.nn.Linear(3, 3))
    optimizer = torch.optim.SGD(
        [
            {"params": model[0].parameters(), "lr": 0.1},
            {"params": model[1].parameters(), "lr": 0.01, "name": "head"},
            {"params": model[2].parameters(), "lr": 0.5},
        ]
    )
    seen: dict[int, list[float]] = {}

    class Snapshot(ah.Aspect):  # the LRs as the Logger reads them, after the LR step
        priority = ah.Priority.LOWEST

        def after_train_iter(self, ctx: ah.CallContext) -> None:
            seen[ctx.runner.iter] = [g["lr"] for g in ctx.runner.optimizer.param_groups]

    data = TensorDataset(torch.randn(16, 4), torch.randint(0, 3, (16,)))
    runner = Runner(
        model,
        optimizer,
        DataLoader(data, batch_size=4),
        loss_fn=torch.nn.functional.cross_entropy,
        scheduler=torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5),
        max_epochs=2,
        work_dir=tmp_path,
        aspects=[Logger(interval=2), Snapshot()],
    )
    runner.run()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in lines if r["mode"] == "train"]
    assert [r["iter"] for r in train] == [2, 4, 6, 8]
    for record in train:
        lr, head, third = seen[record["iter"]]
        assert (record["lr"], record["lr/head"], record["lr/pg2"]) == (lr, head, third)
    assert train[0]["lr/head"] != train[-1]["lr/head"]  # the epoch schedule moved it


@pytest.mark.parametrize(
    ("names", "keys"),
    [
        ((None, "pg2", None), ["lr", "lr/pg1", "lr/pg2"]),  # 'pg2' is the third group's
        ((None, "head", "head"), ["lr", "lr/head", "lr/pg2"]),
        ((None, "pg1", "pg2"), ["lr", "lr/pg1", "lr/pg2"]),
    ],
    ids=["another-groups-index", "a-name-twice", "own-index"],
)
def test_logger_keeps_every_groups_lr_when_names_collide(
    names: tuple[str | None, ...], keys: list[str]
) -> None:
    """Parameter groups whose names would give two of them one key (a name written twice,
    a group named after another's index) each keep an LR key of their own."""
    from aspecthook.train.aspects._logger import _learning_rates

    groups = [{"lr": float(i)} | ({"name": n} if n else {}) for i, n in enumerate(names)]
    rates = _learning_rates(groups)
    assert list(rates) == keys
    assert sorted(rates.values()) == [0.0, 1.0, 2.0]


@pytest.mark.parametrize(
    ("aspect", "option"), [(Logger, "tensorboard"), (ProgressBar, "transient")]
)
@pytest.mark.parametrize("value", [None, "no", 0, 1.0])
def test_flags_that_are_not_bools_are_refused(aspect: Any, option: str, value: Any) -> None:
    """Logger(tensorboard='no') would open a TensorBoard writer: a flag that is not True or
    False is refused when the aspect is made."""
    name = aspect.__name__
    with pytest.raises(InvalidOptionError, match=rf"{name}\({option}=.*must be True or False"):
        aspect(**{option: value})


@pytest.mark.parametrize("option", ["interval", "file_interval", "window"])
@pytest.mark.parametrize("value", [0, -2, 1.5, True])
def test_logger_intervals_and_window_must_be_positive_ints(option: str, value: Any) -> None:
    """A zero, negative, fractional or bool interval / file_interval / window is refused
    when it is made."""
    with pytest.raises(InvalidOptionError, match=option):
        Logger(**{option: value})


def test_logger_keeps_only_the_latest_records_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``records`` is bounded (a long run logged every iteration must not grow without
    end): the latest ones stay, and the file still has every record."""
    from aspecthook.train.aspects import _logger

    monkeypatch.setattr(_logger, "_KEPT_RECORDS", 5)
    logger = Logger(interval=1)
    _runner(tmp_path, [logger]).run()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["iter"] for r in lines if r["mode"] == "train"] == list(range(1, 13))
    assert [(r["mode"], r["iter"]) for r in logger.records] == [
        (r["mode"], r["iter"]) for r in lines[-5:]
    ]


@pytest.mark.parametrize("window", [0, -1, 1.5, "50", None])
def test_iter_timer_refuses_a_window_that_is_not_a_positive_int(window: Any) -> None:
    """IterTimer(window=) is checked when built, with the option named (it was a bare
    TypeError / ValueError from deque, or None accepted as an unbounded window)."""
    with pytest.raises(InvalidOptionError, match=r"IterTimer\(window=.*\) must be a positive int"):
        IterTimer(window=window)


def test_logger_refuses_a_window_of_none() -> None:
    """Logger(window=None) is refused when built; it failed as a TypeError at registration."""
    with pytest.raises(InvalidOptionError, match=r"Logger\(window=None\) must be a positive int"):
        Logger(window=None)  # type: ignore[arg-type]


@pytest.mark.parametrize("json_file", [5, ["metrics.jsonl"]])
def test_logger_refuses_a_json_file_that_is_not_a_file_name(json_file: Any) -> None:
    """Logger(json_file=) must be a name or None: anything else failed when the run opened
    it, was logged (errors='log'), and the run went on without its metrics file."""
    with pytest.raises(InvalidOptionError, match=r"Logger\(json_file=.*\) is not a file name"):
        Logger(json_file=json_file)


def test_logger_records_numpy_and_tensor_metrics_of_a_validation(tmp_path: Path) -> None:
    """Metrics an aspect of the user's puts in ``runner.metrics`` as a numpy scalar or a
    one-element tensor are logged as numbers; they were left out of the record."""
    import numpy as np

    class Extra(ah.Aspect):
        def after_val_epoch(self, ctx: Any) -> None:
            ctx.runner.metrics["val/np"] = np.float32(0.25)
            ctx.runner.metrics["val/tensor"] = torch.tensor(0.5)
            ctx.runner.metrics["val/name"] = "not a number"

    logger = Logger(interval=3)
    runner = _runner(tmp_path, [Evaluate(), logger, Extra(priority=ah.Priority.HIGHEST)])
    runner.run()
    val = [r for r in logger.records if r["mode"] == "val"]
    assert [(r["val/np"], r["val/tensor"]) for r in val] == [(0.25, 0.5)] * 2
    assert all(type(r["val/np"]) is float and "val/name" not in r for r in val)
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["val/tensor"] for r in lines if r["mode"] == "val"] == [0.5, 0.5]
