"""GradClip, GradAccumulation, AMP, NaNGuard, EarlyStopping and EMA on a real Runner."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from structlog.testing import capture_logs
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from torch.utils.data import DataLoader, TensorDataset

from aspecthook import Aspect, CallContext
from aspecthook.errors import InvalidOptionError, RunnerError
from aspecthook.train import Runner, _loop
from aspecthook.train.aspects import (
    AMP,
    EMA,
    Checkpoint,
    EarlyStopping,
    EmptyCache,
    Evaluate,
    GradAccumulation,
    GradClip,
    LRSchedule,
    NaNGuard,
)

CE = torch.nn.functional.cross_entropy


def _data(n: int = 16) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 4, generator=g), torch.randint(0, 3, (n,), generator=g))


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def _runner(batch_size: int = 4, n: int = 16, **kwargs: Any) -> Runner:
    model = kwargs.pop("model", None) or _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    kwargs.setdefault("max_epochs", 1)
    kwargs.setdefault("loss_fn", CE)
    return Runner(model, opt, DataLoader(_data(n), batch_size=batch_size), **kwargs)


def _params(runner: Runner) -> list[torch.Tensor]:
    return [p.detach().clone() for p in runner.model.parameters()]


def test_grad_accumulation_equals_the_larger_batch() -> None:
    """Accumulating 2 batches of 2 gives the same weights as batches of 4."""
    big = _runner(batch_size=4)
    big.run()
    small = _runner(batch_size=2, aspects=[GradAccumulation(2)])
    small.run()
    for a, b in zip(_params(big), _params(small), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_grad_clip_bounds_the_update_and_reports_the_norm() -> None:
    """With max_norm=1e-3 no SGD step moves the weights by more than lr * max_norm."""
    runner = _runner(max_iters=1, max_epochs=None, aspects=[GradClip(max_norm=1e-3)])
    before = _params(runner)
    runner.run()
    moved = torch.sqrt(
        sum(((a - b) ** 2).sum() for a, b in zip(before, _params(runner), strict=True))
    )
    assert float(moved) <= 0.1 * 1e-3 * 1.0001
    assert float(runner.outputs["grad_norm"]) > 1e-3


def test_amp_runs_forward_in_bfloat16_on_cpu() -> None:
    """AMP autocasts the forward pass (bfloat16 on CPU) and training still converges a step."""
    dtypes: list[torch.dtype] = []

    def step(runner: Runner, batch: Any) -> torch.Tensor:
        out = runner.model(batch[0])
        dtypes.append(out.dtype)
        return CE(out.float(), batch[1])

    runner = _runner(train_step=step, aspects=[AMP()])
    runner.run()
    assert set(dtypes) == {torch.bfloat16}
    assert runner.get_aspect(AMP).scaler is None  # type: ignore[union-attr]
    model = _model()  # torch's own loop: autocast forward, plain backward and SGD step
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in DataLoader(_data(), batch_size=4):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
        CE(out.float(), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    for a, b in zip(_params(runner), [p.detach() for p in model.parameters()], strict=True):
        torch.testing.assert_close(a, b)


def _nan_at(k: int) -> Any:
    def step(runner: Runner, batch: Any) -> torch.Tensor:
        loss = CE(runner.model(batch[0]), batch[1])
        return loss * float("nan") if runner.iter == k else loss

    return step


def test_nan_guard_skips_the_bad_step_and_names_it() -> None:
    """A NaN loss in the third iteration (``runner.iter`` 2 as it starts) leaves the weights
    as they were and is recorded as iteration 3, as Logger would number it."""
    seen: dict[int, list[torch.Tensor]] = {}
    runner = _runner(train_step=_nan_at(2), aspects=[NaNGuard("skip")])
    runner.weaver.before("train_iter")(lambda ctx: seen.update({ctx.runner.iter: _params(runner)}))
    runner.weaver.after("train_iter")(
        lambda ctx: seen.update({ctx.runner.iter * 100: _params(runner)})
    )
    runner.run()
    guard = runner.get_aspect(NaNGuard)
    assert guard is not None
    assert guard.skipped == [3]
    for a, b in zip(seen[2], seen[300], strict=True):
        assert torch.equal(a, b)
    assert all(torch.isfinite(p).all() for p in runner.model.parameters())


@pytest.mark.parametrize("bad", [0, 1])
def test_nan_guard_with_grad_accumulation_drops_the_whole_group(bad: int) -> None:
    """A NaN in either batch of a group of 2 drops that group's step, as a NaN in the
    equivalent batch of 4 drops its step: the other half is not stepped on its own."""
    big = _runner(batch_size=4, train_step=_nan_at(0), aspects=[NaNGuard("skip")])
    big.run()
    small = _runner(
        batch_size=2, train_step=_nan_at(bad), aspects=[GradAccumulation(2), NaNGuard("skip")]
    )
    small.run()
    assert small.get_aspect(NaNGuard).skipped == [bad + 1]  # type: ignore[union-attr]
    for a, b in zip(_params(big), _params(small), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_grad_accumulation_refuses_gradients_saved_for_another_model() -> None:
    """Partial gradients from a checkpoint of a model with other parameters are refused
    with a message that says what to do, not silently mixed in."""
    accumulation = GradAccumulation(2)
    accumulation.load_state_dict({"grads": [torch.zeros(3)]})
    runner = _runner(aspects=[accumulation])
    with pytest.raises(RunnerError, match="gradients of 1 parameters, the model has 4"):
        runner.run()


def test_nan_guard_stop_ends_the_run_with_the_iteration_in_the_reason() -> None:
    """action='stop' stops the run and says which iteration had the non-finite loss."""
    runner = _runner(train_step=_nan_at(1), aspects=[NaNGuard("stop")], max_epochs=3)
    runner.run()
    assert runner.stop_reason is not None
    assert "iteration 2 (epoch 1)" in runner.stop_reason
    assert runner.iter == 2


def test_early_stopping_stops_after_patience_without_improvement() -> None:
    """val/loss 1.0, 0.5, 0.6, 0.7 with patience=2 stops after the fourth validation."""
    values = iter([1.0, 0.5, 0.6, 0.7, 0.8, 0.9])
    runner = _runner(
        val_loader=DataLoader(_data(4), batch_size=4),
        max_epochs=6,
        aspects=[EarlyStopping("val/loss", patience=2)],
    )
    runner.weaver.after("val_epoch", priority="BELOW_NORMAL")(  # after Evaluate
        lambda ctx: ctx.runner.metrics.update({"val/loss": next(values)})
    )
    runner.run()
    assert runner.epoch == 4
    assert runner.stop_reason is not None
    assert "val/loss" in runner.stop_reason


def test_early_stopping_that_never_saw_a_validation_says_so() -> None:
    """EarlyStopping acts after validations: a run without a val_loader trained to the end
    without a word. It now warns at the run's end; a run that validated does not."""
    runner = _runner(max_epochs=2, aspects=[EarlyStopping("val/loss")])
    assert runner.val_loader is None
    with pytest.warns(RuntimeWarning, match=r"EarlyStopping never checked 'val/loss'"):
        runner.run()
    validated = _runner(
        val_loader=DataLoader(_data(4), batch_size=4),
        max_epochs=2,
        aspects=[Evaluate(), EarlyStopping("val/loss")],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        validated.run()


def test_early_stopping_in_a_run_stopped_before_its_first_validation_does_not_warn() -> None:
    """A run stopped (NaNGuard, stop()) before its first validation has a val_loader and
    Evaluate: the warning's advice to add them would be wrong, so it is not given."""
    runner = _runner(
        val_loader=DataLoader(_data(4), batch_size=4),
        max_epochs=2,
        aspects=[Evaluate(), EarlyStopping("val/loss")],
    )
    runner.weaver.after("train_iter")(lambda ctx: ctx.runner.stop("enough"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        runner.run()
    assert runner.iter == 1


def test_early_stopping_options_are_checked() -> None:
    """Patience must be positive and the rule must be known or inferable."""
    with pytest.raises(InvalidOptionError, match="patience"):
        EarlyStopping(patience=0)
    with pytest.raises(InvalidOptionError, match="rule"):
        EarlyStopping("val/weird_score")
    assert EarlyStopping("val/acc").rule == "greater"


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("patience", True),
        ("min_delta", float("nan")),
        ("min_delta", float("inf")),
        ("min_delta", "0.1"),
        ("min_delta", True),
        ("monitor", None),
        ("monitor", ""),
        ("check_finite", "no"),
    ],
)
def test_early_stopping_refuses_options_that_are_not_counts_or_margins(
    option: str, value: Any
) -> None:
    """patience=True would be a patience of 1, min_delta=nan a run stopped after
    ``patience`` validations whatever they say; a text fails only at the first check; a
    monitor that names no metric, or check_finite='no' (a true value), are refused too."""
    with pytest.raises(InvalidOptionError, match=option):
        EarlyStopping(**{option: value})


def test_early_stopping_without_check_finite_never_takes_nan_as_the_best() -> None:
    """check_finite=False: a NaN at the first validation is no improvement (as every
    later comparison with it would fail), so a run whose loss then falls is not stopped."""
    values = iter([float("nan"), 1.0, 0.5, 0.25, 0.1])
    runner = _runner(
        val_loader=DataLoader(_data(4), batch_size=4),
        max_epochs=5,
        aspects=[EarlyStopping("val/loss", patience=2, check_finite=False)],
    )
    runner.weaver.after("val_epoch", priority="BELOW_NORMAL")(  # after Evaluate
        lambda ctx: ctx.runner.metrics.update({"val/loss": next(values)})
    )
    runner.run()
    assert runner.stop_reason is None
    assert runner.epoch == 5
    early = runner.get_aspect(EarlyStopping)
    assert (early.best, early.wait) == (0.1, 0)


def _early_stopping_run(values: list[float], **options: Any) -> Runner:
    """A run of ``len(values)`` epochs whose validations report ``values`` as ``val/score``."""
    reported = iter(values)
    runner = _runner(
        val_loader=DataLoader(_data(4), batch_size=4),
        max_epochs=len(values),
        aspects=[EarlyStopping("val/score", **options)],
    )
    runner.weaver.after("val_epoch", priority="BELOW_NORMAL")(  # after Evaluate
        lambda ctx: ctx.runner.metrics.update({"val/score": next(reported)})
    )
    runner.run()
    return runner


@pytest.mark.parametrize(
    ("rule", "values"),
    [
        # best 1.0; 0.95 is within 0.1 of it; 0.85 beats it by 0.15; then 0.80 and 0.78
        # are within 0.1 of 0.85: the second of them is the second validation in a row.
        ("less", [1.0, 0.95, 0.85, 0.80, 0.78, 0.5]),
        ("greater", [0.0, 0.05, 0.15, 0.20, 0.22, 0.5]),
    ],
)
def test_early_stopping_counts_only_improvements_larger_than_min_delta(
    rule: str, values: list[float]
) -> None:
    """With min_delta=0.1 an improvement of less than 0.1 on the best does not reset the
    patience and one of more does: patience=2 stops at the fifth validation, with the best
    at the third value. Every value improves on the one before, so with min_delta=0 the
    same run goes to its end."""
    plain = _early_stopping_run(values, rule=rule, patience=2)
    assert (plain.epoch, plain.stop_reason) == (len(values), None)
    margin = _early_stopping_run(values, rule=rule, patience=2, min_delta=0.1)
    assert margin.epoch == 5
    assert margin.stop_reason == (f"val/score did not improve on {values[2]} for 2 validations")
    early = margin.get_aspect(EarlyStopping)
    assert early is not None
    assert (early.best, early.wait) == (values[2], 2)


@pytest.mark.parametrize(
    ("metric", "rule"),
    [
        ("val/mape", "less"),
        ("val/smape", "less"),
        ("val/mAP", "greater"),
        ("val/nll", "less"),
        ("coco/bbox_mAP_50", "greater"),
        ("val/mIoU", "greater"),
        ("acc/top1", "greater"),
        ("val/top-5", "greater"),
        ("val/topk", "greater"),
        ("val/mDice", "greater"),
    ],
)
def test_metric_direction_is_inferred_from_the_name(metric: str, rule: str) -> None:
    """An error such as MAPE goes down even though its name contains 'map' (a precision)."""
    assert EarlyStopping(metric).rule == rule


@pytest.mark.parametrize(
    "metric", ["val/heatmap_dist", "val/stop_dist", "val/remap_l1", "val/topology_dist"]
)
def test_a_score_stem_inside_another_word_does_not_decide_the_rule(metric: str) -> None:
    """'map' in heatmap, 'top' in stop or topology: these name no score, so the rule is
    asked for instead of taken as 'greater' (which would keep the worst model)."""
    with pytest.raises(InvalidOptionError, match="rule"):
        EarlyStopping(metric)


def test_ema_tracks_torch_averaged_model_and_is_used_for_validation() -> None:
    """EMA weights follow decay * ema + (1 - decay) * w and are swapped in for validation."""
    decay = 0.5
    runner = _runner(
        val_loader=DataLoader(_data(4), batch_size=4), aspects=[EMA(decay, use_buffers=False)]
    )
    expected: list[torch.Tensor] | None = None
    during_val: list[torch.Tensor] = []

    def track(ctx: CallContext) -> None:
        nonlocal expected
        now = _params(runner)
        expected = (
            now
            if expected is None
            else [decay * e + (1 - decay) * w for e, w in zip(expected, now, strict=True)]
        )

    runner.weaver.after("optimizer_step", priority="LOWEST")(track)
    runner.weaver.before("val_iter")(lambda ctx: during_val.extend(_params(runner)))
    runner.run()
    ema = runner.get_aspect(EMA)
    assert ema is not None
    assert expected is not None
    averaged = [p.detach() for p in ema.averaged.module.parameters()]  # type: ignore[attr-defined]
    for a, b in zip(averaged, expected, strict=True):
        torch.testing.assert_close(a, b)
    for a, b in zip(during_val, averaged, strict=True):
        torch.testing.assert_close(a, b)
    assert not all(torch.equal(a, b) for a, b in zip(_params(runner), averaged, strict=True))


def test_amp_float16_with_grad_accumulation_unscales_only_before_real_steps() -> None:
    """GradScaler allows one unscale_ per update(): AMP(float16) must not unscale on the
    iterations GradAccumulation skips (it used to fail on the second iteration)."""
    runner = _runner(aspects=[AMP("float16"), GradAccumulation(2)])
    unscaled: list[int] = []
    runner.weaver.after("optimizer_step")(
        lambda ctx: unscaled.append(ctx.runner.iter) if not ctx.skipped else None
    )
    runner.run()
    assert runner.iter == 4
    assert unscaled == [1, 3]
    assert all(torch.isfinite(p).all() for p in runner.model.parameters())


def _amp_runner(max_iters: int) -> Runner:
    """float16 with targets so large that the first steps overflow: the scaler calibrates."""
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 4, generator=g), 1000 * torch.randn(64, 2, generator=g))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    loss = torch.nn.functional.mse_loss
    return Runner(
        model, opt, DataLoader(data, batch_size=8), loss_fn=loss, max_iters=max_iters,
        aspects=[AMP("float16")],
    )  # fmt: skip


def test_amp_float16_goes_on_with_the_calibrated_scale_in_a_second_run() -> None:
    """run() to 20 iterations, then on to 40: the same weights and scale as one run to 40
    (a second run used to start a new GradScaler and skip the overflowing steps again)."""
    straight = _amp_runner(40)
    straight.run()
    split = _amp_runner(20)
    split.run()
    calibrated = split.grad_scaler.get_scale()
    assert calibrated < 65536.0  # it did calibrate
    split.max_iters = 40
    split.run()
    assert split.grad_scaler.get_scale() == straight.grad_scaler.get_scale()
    for a, b in zip(_params(straight), _params(split), strict=True):
        assert torch.equal(a, b)


def test_amp_float16_state_loaded_before_the_first_run_is_used() -> None:
    """runner.load_state_dict() before run(): the scaler is built with the loaded scale, and
    a state_dict() taken before that run keeps it."""
    trained = _amp_runner(20)
    trained.run()
    saved = trained.state_dict()
    fresh = _amp_runner(21)
    fresh.load_state_dict(saved)
    assert fresh.state_dict()["aspects"]["amp"] == saved["aspects"]["amp"]
    fresh.run()
    straight = _amp_runner(21)
    straight.run()
    assert fresh.grad_scaler.get_scale() == straight.grad_scaler.get_scale()


def test_empty_cache_refuses_an_interval_that_is_not_a_count() -> None:
    with pytest.raises(InvalidOptionError, match="give a number of iterations >= 1"):
        EmptyCache(interval="2")  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype", [torch.float32, "float32", "float", torch.int8, "bf16", 3])
def test_amp_refuses_a_dtype_autocast_does_not_compute_in(dtype: Any) -> None:
    """AMP(dtype=) takes float16 or bfloat16 only: float32 used to run without mixed
    precision (torch warning at every forward), a non-dtype to fail at the first forward."""
    with pytest.raises(InvalidOptionError, match=r"AMP\(dtype=.*'bfloat16' or 'float16'") as info:
        AMP(dtype)
    assert info.value.value is dtype


@pytest.mark.parametrize("dtype", [torch.float16, "float16", "half", torch.bfloat16, "bfloat16"])
def test_amp_takes_float16_and_bfloat16_by_dtype_or_name(dtype: Any) -> None:
    assert AMP(dtype).dtype in (torch.float16, torch.bfloat16)


def _precision_probe(seen: list[tuple[bool, torch.dtype]]) -> Any:
    """A val_step that records whether autocast is on and the dtype of the model's output."""

    def val_step(runner: Runner, batch: Any) -> dict[str, Any]:
        out = runner.model(batch[0])
        seen.append((torch.is_autocast_enabled("cpu"), out.dtype))
        return {"loss": CE(out.float(), batch[1])}

    return val_step


def _eval_runner(aspect: AMP, seen: list[tuple[bool, torch.dtype]]) -> Runner:
    eval_data = DataLoader(_data(8), batch_size=4)
    return _runner(
        aspects=[aspect], val_loader=eval_data, test_loader=eval_data,
        val_step=_precision_probe(seen),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        pytest.param({}, (True, torch.bfloat16), id="bfloat16"),
        pytest.param({"dtype": "float16"}, (True, torch.float16), id="float16"),
        pytest.param({"autocast_eval": False}, (False, torch.float32), id="off"),
    ],
)
def test_amp_autocasts_validation_and_test_steps(
    options: dict[str, Any], expected: tuple[bool, torch.dtype]
) -> None:
    """Validation in a run and runner.test() after it run under the autocast the model
    trains with, as Lightning's bf16-mixed does; autocast_eval=False evaluates in float32."""
    seen: list[tuple[bool, torch.dtype]] = []
    runner = _eval_runner(AMP(**options), seen)
    runner.run()
    assert seen == [expected] * 2  # the end-of-run validation: 2 batches
    runner.test()
    assert seen == [expected] * 4
    assert not torch.is_autocast_enabled("cpu")  # and nothing is left on after them


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        pytest.param({}, (True, torch.bfloat16), id="bfloat16"),
        pytest.param({"dtype": "float16"}, (True, torch.float16), id="float16"),
        pytest.param({"autocast_eval": False}, (False, torch.float32), id="off"),
    ],
)
def test_amp_autocasts_evaluation_outside_a_run(
    options: dict[str, Any], expected: tuple[bool, torch.dtype]
) -> None:
    """runner.test() and runner.val_epoch() on a runner that never ran (no before_run to
    choose the device and dtype) autocast as a run would, and leave AMP's dtype as given."""
    seen: list[tuple[bool, torch.dtype]] = []
    amp = AMP(**options)
    given = amp.dtype
    runner = _eval_runner(amp, seen)
    runner.val_iter(next(iter(DataLoader(_data(4), batch_size=4))))  # outside any epoch
    runner.test()
    runner.val_epoch()
    assert seen == [expected] * 5
    assert amp.dtype is given


@pytest.mark.parametrize("value", [None, "no", 0, 1.0])
def test_amp_refuses_an_autocast_eval_that_is_not_a_bool(value: Any) -> None:
    """AMP(autocast_eval='no') would autocast evaluation: refused when it is made."""
    with pytest.raises(InvalidOptionError, match=r"AMP\(autocast_eval=.*must be True or False"):
        AMP(autocast_eval=value)


def test_amp_without_autocast_eval_leaves_evaluation_unadvised() -> None:
    """autocast_eval=False registers no advice on val_iter / test_iter (no cost per batch)."""
    names = {a.name for a in AMP(autocast_eval=False).make_advice()}
    assert names == {"amp.before_run", "amp.around_forward", "amp.before_backward",
                     "amp.before_optimizer_step", "amp.around_optimizer_step"}  # fmt: skip
    assert {"amp.around_val_iter", "amp.around_test_iter"} <= {a.name for a in AMP().make_advice()}


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"max_norm": float("nan")}, r"max_norm=nan\) must be a positive number"),
        ({"max_norm": 1.0, "norm_type": 0}, r"norm_type=0\) must be a positive number or 'inf'"),
        ({"max_norm": 1.0, "norm_type": -2.0}, "norm_type=-2.0"),
        ({"max_norm": 1.0, "norm_type": "fro"}, "norm_type='fro'"),
    ],
)
def test_grad_clip_refuses_a_nan_max_norm_and_a_norm_that_is_not_one(
    options: dict[str, Any], match: str
) -> None:
    """max_norm=NaN used to be taken (and turn every weight into NaN at the first step);
    norm_type 0 or below clipped by no norm, a string failed with a bare ValueError."""
    with pytest.raises(InvalidOptionError, match=match):
        GradClip(**options)


@pytest.mark.parametrize("norm_type", [1, float("inf"), "inf"])
def test_grad_clip_clips_by_the_norm_type_it_is_given(norm_type: float | str) -> None:
    """GradClip(norm_type=1 or inf) leaves the gradients torch's clip_grad_norm_ with that
    norm_type leaves on a copy of the model with the same batches, step after step, and
    reports the norm torch measured before clipping."""
    max_norm = 0.01  # below every batch's gradient norm: each step is clipped
    runner = _runner(aspects=[GradClip(max_norm, norm_type=norm_type)])
    clipped: list[list[torch.Tensor]] = []
    norms: list[float] = []

    def record(ctx: CallContext) -> None:  # after GradClip (lower priority), before the step
        clipped.append([p.grad.detach().clone() for p in ctx.runner.model.parameters()])

    runner.weaver.before("optimizer_step", priority="LOWEST")(record)
    runner.weaver.after("optimizer_step")(
        lambda ctx: norms.append(float(ctx.runner.outputs["grad_norm"]))
    )
    runner.run()
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    expected: list[list[torch.Tensor]] = []
    expected_norms: list[float] = []
    for x, y in DataLoader(_data(16), batch_size=4):
        CE(model(x), y).backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, norm_type=norm_type)
        expected_norms.append(float(norm))
        expected.append([p.grad.detach().clone() for p in model.parameters()])
        opt.step()
        opt.zero_grad(set_to_none=True)
    assert len(clipped) == len(expected) == 4
    assert min(expected_norms) > max_norm
    torch.testing.assert_close(norms, expected_norms)
    for ours, theirs in zip(clipped, expected, strict=True):
        torch.testing.assert_close(ours, theirs)


def test_grad_clip_takes_the_infinity_norm_by_name() -> None:
    assert GradClip(1.0, norm_type="inf").norm_type == float("inf")


def test_grad_accumulation_refuses_a_bool_for_steps() -> None:
    with pytest.raises(InvalidOptionError, match="must be a positive int"):
        GradAccumulation(True)


def test_amp_float16_with_nan_guard_keeps_training_after_a_bad_loss() -> None:
    """A skipped step (NaN loss) does not unscale either: training goes on after it."""
    runner = _runner(train_step=_nan_at(1), aspects=[AMP("float16"), NaNGuard("skip")])
    runner.run()
    assert runner.iter == 4
    guard = runner.get_aspect(NaNGuard)
    assert guard is not None
    assert guard.skipped == [2]


def test_grad_clip_with_accumulation_clips_the_accumulated_gradient_once() -> None:
    """GradClip runs only before the real step, on the whole group's gradient: the result
    equals torch's own accumulate-then-clip loop."""
    max_norm = 0.05
    runner = _runner(batch_size=2, aspects=[GradAccumulation(2), GradClip(max_norm)])
    runner.run()
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, (x, y) in enumerate(DataLoader(_data(16), batch_size=2)):
        (CE(model(x), y) / 2).backward()
        if i % 2 == 1:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            opt.step()
            opt.zero_grad(set_to_none=True)
    for a, b in zip(_params(runner), [p.detach() for p in model.parameters()], strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("limits", [{"max_iters": 6}, {"max_epochs": 3}])
def test_grad_accumulation_steps_the_last_short_group(limits: dict[str, int]) -> None:
    """6 iterations in groups of 4: the last group (2 iterations) steps at the run's end,
    with its loss divided by 2, and no gradient is left behind."""
    runner = _runner(
        batch_size=4, n=8, aspects=[GradAccumulation(4)], **{"max_epochs": None, **limits}
    )
    steps: list[int] = []
    runner.weaver.after("optimizer_step")(
        lambda ctx: steps.append(ctx.runner.iter) if not ctx.skipped else None
    )
    runner.run()
    assert steps == [3, 5]
    assert all(p.grad is None for p in runner.model.parameters())
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [b for _ in range(3) for b in DataLoader(_data(8), batch_size=4)]
    for group in (batches[:4], batches[4:]):
        for x, y in group:
            (CE(model(x), y) / len(group)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    for a, b in zip(_params(runner), [p.detach() for p in model.parameters()], strict=True):
        torch.testing.assert_close(a, b)


@pytest.fixture
def process_group(tmp_path: Any) -> Any:
    """A one-process gloo group (rank 0 of 1) for the test, destroyed after it."""
    dist = torch.distributed
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _accumulating(model: torch.nn.Module | None = None) -> Runner:
    """6 iterations in groups of 4: steps after iterations 3 and 5 (a last group of 2)."""
    return _runner(
        batch_size=4, n=8, model=model, max_epochs=None, max_iters=6,
        aspects=[GradAccumulation(4)],
    )  # fmt: skip


@pytest.mark.usefixtures("process_group")
def test_grad_accumulation_skips_the_ddp_all_reduce_on_iterations_that_do_not_step() -> None:
    """With a DistributedDataParallel model the iterations that do not step (the last,
    shorter group's included) run inside its no_sync(), forward too, so gradients are
    all-reduced only when the group steps; the weights are those of the run without DDP,
    bit for bit (one rank: the average is the identity)."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel

    plain = _accumulating()
    plain.run()
    ddp = DistributedDataParallel(_model())
    runner = _accumulating(ddp)
    no_sync, all_reduced = [], []
    real_no_sync = ddp.no_sync

    @contextlib.contextmanager
    def spy() -> Iterator[None]:
        no_sync.append(runner.iter)
        with real_no_sync():
            yield

    # DDP's own all-reduce, counted. Not annotated: DDP refuses a bucket annotation
    # other than GradBucket, and under ``from __future__ import annotations`` it is a str.
    def hook(state, bucket):  # type: ignore[no-untyped-def]
        all_reduced.append(runner.iter)
        return allreduce_hook(state, bucket)

    ddp.no_sync = spy  # type: ignore[method-assign]
    ddp.register_comm_hook(None, hook)
    runner.run()
    assert no_sync == [0, 1, 2, 4]
    assert all_reduced == [3, 5]
    for a, b in zip(_params(plain), _params(runner), strict=True):
        assert torch.equal(a, b)


@pytest.mark.usefixtures("process_group")
def test_grad_accumulation_advises_train_iter_only_for_a_ddp_model_and_only_in_its_run() -> None:
    """The no_sync advice on train_iter is added by before_run for a DDP model and removed
    at the run's end: a run without DDP has no advice on train_iter (nothing to pay for
    each iteration), and neither has the DDP runner once its run is over."""
    from torch.nn.parallel import DistributedDataParallel

    def bare(runner: Runner) -> bool:
        return getattr(runner.train_iter, "__func__", None) is _loop.train_iter

    for model, advised in [(None, False), (DistributedDataParallel(_model()), True)]:
        runner = _accumulating(model)
        during: list[bool] = []
        runner.weaver.before("backward")(lambda ctx, seen=during: seen.append(bare(ctx.runner)))
        runner.run()
        assert during == [not advised] * 6
        assert bare(runner)


@pytest.mark.usefixtures("process_group")
@pytest.mark.parametrize(
    ("where", "error"),
    [("backward", RuntimeError), ("backward", KeyboardInterrupt), ("run", RuntimeError)],
)
def test_grad_accumulation_takes_its_ddp_advice_off_when_the_run_raises(
    where: str, error: type[BaseException]
) -> None:
    """A run that raised (Ctrl-C too, or a before_run advice after GradAccumulation's that
    refused it) leaves no no_sync advice: left on the runner's train_iter (after_run does
    not run), it outlived the aspect itself, and a later run without GradAccumulation
    still skipped DDP's all-reduce on the iterations it took for a group's."""
    from torch.nn.parallel import DistributedDataParallel

    runner = _accumulating(DistributedDataParallel(_model()))

    def fail(ctx: CallContext) -> None:
        if ctx.runner.iter == (2 if where == "backward" else 0):
            raise error("boom")

    fails = runner.weaver.before(where, priority="LOWEST")(fail)
    with fails, pytest.raises(error, match="boom"):
        runner.run()
    assert getattr(runner.train_iter, "__func__", None) is _loop.train_iter


@pytest.mark.parametrize("how", ["second run", "resume"])
def test_grad_accumulation_continued_past_the_end_starts_whole_groups(
    how: str, tmp_path: Any
) -> None:
    """A 6-iteration run in groups of 4 (its last group of 2 steps at its end), continued
    to 14 iterations: the next groups are iterations 6-9 and 10-13, each loss divided by 4
    (a group of 2 used to step on 6-7 with its losses divided by 4)."""

    def make(max_iters: int, resume: str | None = None) -> Runner:
        aspects: list[Any] = [GradAccumulation(4)]
        if how == "resume":
            aspects.append(Checkpoint(interval=1, by_epoch=False, resume=resume))
        return _runner(
            batch_size=4, n=8, max_epochs=None, max_iters=max_iters, aspects=aspects,
            work_dir=tmp_path if how == "resume" else None,
        )  # fmt: skip

    runner = make(6)
    runner.run()
    if how == "second run":
        runner.max_iters = 14
    else:
        runner = make(14, resume="auto")
    steps: list[int] = []
    runner.weaver.after("optimizer_step")(
        lambda ctx: steps.append(ctx.runner.iter) if not ctx.skipped else None
    )
    runner.run()
    assert steps == [9, 13]
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [b for _ in range(7) for b in DataLoader(_data(8), batch_size=4)]
    for group in (batches[:4], batches[4:6], batches[6:10], batches[10:14]):
        for x, y in group:
            (CE(model(x), y) / len(group)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    for a, b in zip(_params(runner), [p.detach() for p in model.parameters()], strict=True):
        torch.testing.assert_close(a, b)


class _CtrlC(Aspect):
    """Stands for Ctrl-C pressed once, at iteration ``at``, in the given stage."""

    name = "ctrl_c"

    def __init__(self, at: int, stage: str) -> None:
        super().__init__()
        self.at, self.stage, self.fired = at, stage, False

    def _maybe(self, ctx: CallContext, stage: str) -> None:
        if stage == self.stage and ctx.runner.iter == self.at and not self.fired:
            self.fired = True
            raise KeyboardInterrupt

    def before_forward(self, ctx: CallContext) -> None:
        self._maybe(ctx, "forward")

    def before_optimizer_step(self, ctx: CallContext) -> None:
        self._maybe(ctx, "optimizer_step")


@pytest.mark.parametrize(
    ("accumulate", "stage", "exact"),
    [
        (1, "optimizer_step", True),  # after backward: that batch's gradients are dropped
        (4, "forward", True),  # inside a group, before backward: the group's are kept
        (4, "optimizer_step", False),  # inside a group, after backward: dropped, warned
    ],
)
@pytest.mark.parametrize("rank", [0, 1])
def test_run_again_after_an_interrupted_run_counts_no_batch_twice(
    accumulate: int, stage: str, exact: bool, rank: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C at iteration 5, then run() again: the same weights as one uninterrupted run
    (the interrupted iteration's gradients used to stay and be added to again). Every
    rank drops alike, and rank 0 alone says so."""
    monkeypatch.setattr(Runner, "rank", property(lambda runner: rank))

    def make(*extra: Aspect) -> Runner:
        aspects = [*extra, GradAccumulation(accumulate)] if accumulate > 1 else list(extra)
        return _runner(batch_size=2, max_epochs=None, max_iters=8, aspects=aspects)

    straight = make()
    straight.run()
    runner = make(_CtrlC(5, stage))
    with pytest.raises(KeyboardInterrupt):
        runner.run()
    with capture_logs() as logs:
        runner.run()
    assert runner.iter == 8
    same = all(torch.equal(a, b) for a, b in zip(_params(straight), _params(runner), strict=True))
    assert same is exact
    dropped = [e for e in logs if e["event"] == "grad_accumulation.group_dropped"]
    assert len(dropped) == (0 if exact or rank else 1)


def test_amp_float16_run_again_after_an_interrupt_between_unscale_and_step() -> None:
    """Ctrl-C after AMP unscaled the gradients and before the scaler's update: run() again
    trains on (the scaler used to refuse the next unscale_)."""
    runner = _amp_runner(8)
    runner.add_aspect(_CtrlC(2, "optimizer_step"))
    with pytest.raises(KeyboardInterrupt):
        runner.run()
    runner.run()
    assert runner.iter == 8


def test_grad_accumulation_groups_of_a_checkpoint_without_their_start(tmp_path: Any) -> None:
    """A state saved before group_start was (or with no GradAccumulation at all), resumed
    at iteration 8 in groups of 4: the groups stay on multiples of 4."""
    first = _runner(batch_size=2, max_epochs=None, max_iters=8, aspects=[GradAccumulation(4)])
    first.run()
    saved = first.state_dict()
    del saved["aspects"]["grad_accumulation"]["group_start"]
    for state in (saved, {**saved, "aspects": {}}):
        runner = _runner(batch_size=2, max_epochs=None, max_iters=16, aspects=[GradAccumulation(4)])
        runner.load_state_dict(state)
        steps: list[int] = []
        runner.weaver.after("optimizer_step")(
            lambda ctx, steps=steps: steps.append(ctx.runner.iter) if not ctx.skipped else None
        )
        runner.run()
        assert steps == [11, 15]


def test_interrupted_inside_a_group_then_resumed_from_its_start_counts_it_once(
    tmp_path: Any,
) -> None:
    """Ctrl-C at iteration 6 of a group 4-7, then run() again with resume='auto': the
    checkpoint of iteration 4 has no gradients, so the group's partial ones are dropped
    and the run ends as an uninterrupted one does."""

    def make(work_dir: Any, *extra: Aspect) -> Runner:
        checkpoint = Checkpoint(interval=4, by_epoch=False, resume="auto")
        aspects = [GradAccumulation(4), checkpoint, *extra]
        return _runner(
            batch_size=2, max_epochs=None, max_iters=8, aspects=aspects, work_dir=work_dir
        )

    straight = make(tmp_path / "straight")
    straight.run()
    runner = make(tmp_path / "interrupted", _CtrlC(6, "forward"))
    with pytest.raises(KeyboardInterrupt):
        runner.run()
    runner.run()
    for a, b in zip(_params(straight), _params(runner), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("option", ["use_buffers", "use_for_eval"])
@pytest.mark.parametrize("value", [None, "no", 0, 1.0])
def test_ema_flags_that_are_not_bools_are_refused(option: str, value: Any) -> None:
    """EMA(use_for_eval='no') would validate with the average: a flag that is not True or
    False is refused when the aspect is made."""
    with pytest.raises(InvalidOptionError, match=rf"EMA\({option}=.*must be True or False"):
        EMA(**{option: value})


def test_ema_update_every_counts_optimizer_steps() -> None:
    """With GradAccumulation(2) there are 2 steps in 4 iterations: update_every=2 averages
    once, not twice."""
    runner = _runner(aspects=[GradAccumulation(2), EMA(0.5, update_every=2)])
    runner.run()
    ema = runner.get_aspect(EMA)
    assert ema is not None
    assert ema.averaged is not None
    assert int(ema.averaged.n_averaged) == 1
    assert ema.state_dict()["steps"] == 2


def test_ema_update_every_updates_steps_1_n_plus_1_2n_plus_1_as_openmmlab() -> None:
    """update_every=3 updates at the 1st, 4th and 7th optimizer step (OpenMMLab's
    ExponentialMovingAverage(interval=3) phase: its 0th, 3rd, 6th calls), the first a
    copy; in between the average stays as it was (it followed the live weights until a
    first update at the 3rd step)."""
    ema = EMA(0.5, update_every=3, use_buffers=False)
    runner = _runner(batch_size=2, n=14, aspects=[ema])  # 7 iterations
    counts: list[int] = []
    averages: list[list[torch.Tensor]] = []
    lives: list[list[torch.Tensor]] = []

    @runner.weaver.after("train_iter")
    def record(ctx: Any) -> None:
        assert ema.averaged is not None
        counts.append(int(ema.averaged.n_averaged))
        averages.append([p.detach().clone() for p in ema.averaged.module.parameters()])
        lives.append(_params(runner))

    runner.run()
    assert counts == [1, 1, 1, 2, 2, 2, 3]
    for it in (1, 2):  # still the copy of the first step's weights
        for a, first, live in zip(averages[it], lives[0], lives[it], strict=True):
            assert torch.equal(a, first)
            assert not torch.equal(a, live)
    for a, before, live in zip(averages[3], averages[2], lives[3], strict=True):
        assert torch.allclose(a, 0.5 * before + 0.5 * live)


def test_ema_before_start_iter_follows_the_live_weights() -> None:
    """Before start_iter the EMA copy is the trained weights (validation sees those, not
    the initial ones), and averaging starts from them."""
    runner = _runner(
        val_loader=DataLoader(_data(4), batch_size=4),
        max_epochs=2,
        aspects=[EMA(0.5, start_iter=100, use_buffers=False)],
    )
    initial = _params(runner)
    validated: list[list[torch.Tensor]] = []
    trained: list[list[torch.Tensor]] = []
    runner.weaver.before("val_epoch", priority="HIGHEST")(
        lambda ctx: trained.append(_params(runner))  # before EMA swaps its weights in
    )
    runner.weaver.before("val_iter")(lambda ctx: validated.append(_params(runner)))
    runner.run()
    ema = runner.get_aspect(EMA)
    assert ema is not None
    assert ema.averaged is not None
    assert int(ema.averaged.n_averaged) == 0
    assert len(validated) == len(trained) == 2
    for seen, live in zip(validated, trained, strict=True):
        for a, b, c in zip(seen, live, initial, strict=True):
            assert torch.equal(a, b)
            assert not torch.equal(a, c)


def test_ema_averages_from_the_start_iter_th_iteration() -> None:
    """start_iter counts iterations from 1, as Logger and Checkpoint's iter_<n> do, and as
    OpenMMLab's begin_iter (which a config is told to write as start_iter) counts them:
    start_iter=3 averages in the 3rd iteration and after. The first update was made in
    the 4th."""
    ema = EMA(0.5, start_iter=3, use_buffers=False)
    runner = _runner(aspects=[ema])  # 4 iterations
    averaged: list[int] = []

    @runner.weaver.after("train_iter")
    def count(ctx: Any) -> None:
        assert ema.averaged is not None
        averaged.append(int(ema.averaged.n_averaged))

    runner.run()
    assert averaged == [0, 0, 1, 2]


# -- EMA: several averages, added on resume, loaded without a run, tied weights -------------


def _ema_run(work_dir: Any = None, val: bool = True, **kwargs: Any) -> Runner:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)) for _ in range(4)]
    return Runner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.5),
        data,
        val_loader=data[:1] if val else None,
        loss_fn=torch.nn.functional.mse_loss,
        work_dir=work_dir,
        **kwargs,
    )


def test_two_emas_validating_leave_the_live_weights_alone() -> None:
    """Each EMA swaps its average in around validation; nested, the live weights come
    back last, so training goes on from them (not from the first EMA's average)."""

    def weights(val: bool) -> torch.Tensor:
        emas = [EMA(decay=0.5), EMA(decay=0.9, name="ema_2")]
        runner = _ema_run(val=val, max_epochs=3, aspects=emas)
        runner.run()
        return runner.model.weight.detach().clone()

    assert torch.equal(weights(val=False), weights(val=True))


def test_an_ema_added_on_resume_starts_from_the_trained_weights(tmp_path: Any) -> None:
    """A checkpoint without EMA state: the new average starts from the weights trained so
    far, not from the model's initial ones."""
    from aspecthook.train.aspects import Checkpoint

    _ema_run(tmp_path, max_epochs=2, aspects=[Checkpoint()]).run()
    ema = EMA(decay=0.999)
    seen: list[bool] = []
    runner = _ema_run(tmp_path, max_epochs=3, aspects=[Checkpoint(resume="auto"), ema])
    runner.weaver.before("train_iter")(
        lambda ctx: (
            seen
            or seen.append(
                torch.equal(ema.averaged.module.weight, ctx.runner.model.weight)  # type: ignore[union-attr]
            )
        )
    )
    runner.run()
    assert seen == [True]


def test_a_loaded_ema_is_used_by_a_test_without_a_run() -> None:
    """load_state_dict into a fresh runner, then test(): the test runs on the EMA weights
    the checkpoint held, as the validation at the end of the run did."""
    trained = _ema_run(max_epochs=2, aspects=[EMA(decay=0.5)], test_loader=[])
    validated = trained.run()["val/loss"]
    state = trained.state_dict()
    fresh = _ema_run(max_epochs=2, aspects=[EMA(decay=0.5)])
    fresh.test_loader = fresh.val_loader
    fresh.load_state_dict(state)
    assert fresh.test()["test/loss"] == pytest.approx(validated, rel=1e-6)


def test_tied_weights_are_all_saved_as_the_ema_average() -> None:
    """Every name of a shared tensor holds the average in a checkpoint's model."""

    class Tied(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(4, 4)
            self.b = torch.nn.Linear(4, 4)
            self.b.weight = self.a.weight

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(self.a(x))

    torch.manual_seed(0)
    model = Tied()
    data = [(torch.randn(8, 4), torch.randn(8, 4)) for _ in range(3)]
    ema = EMA(decay=0.5)
    runner = Runner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        data,
        loss_fn=torch.nn.functional.mse_loss,
        max_epochs=2,
        aspects=[ema],
    )
    runner.run()
    saved = runner.state_dict()["model"]
    average = ema.averaged.module.a.weight  # type: ignore[union-attr]
    assert torch.equal(saved["a.weight"], average)
    assert torch.equal(saved["b.weight"], average)


def test_a_checkpoint_with_ema_resumed_without_it_trains_on_from_the_live_weights() -> None:
    """The exchange is undone from the data alone when the runner has no EMA aspect."""
    trained = _ema_run(max_epochs=2, aspects=[EMA(decay=0.5)])
    trained.run()
    live = trained.model.weight.detach().clone()
    plain = _ema_run(max_epochs=2, val=False)
    plain.load_state_dict(trained.state_dict())
    assert torch.equal(plain.model.weight, live)


def test_a_state_loaded_and_saved_again_before_a_run_keeps_the_average() -> None:
    """load_state_dict() then state_dict() before run() (re-saving a checkpoint): the EMA's
    average and the exchange of weights under "model" are kept as they were saved."""
    trained = _ema_run(max_epochs=2, aspects=[EMA(decay=0.5)])
    trained.run()
    saved = trained.state_dict()
    loading = _ema_run(max_epochs=2, aspects=[EMA(decay=0.5)])
    loading.load_state_dict(saved)
    again = loading.state_dict()
    assert again["packed"] == saved["packed"] == ["ema"]
    assert set(again["model"]) == set(saved["model"])
    for key, value in saved["model"].items():
        assert torch.equal(again["model"][key], value)
    for key, value in saved["aspects"]["ema"]["averaged"].items():
        assert torch.equal(again["aspects"]["ema"]["averaged"][key], value)


@pytest.mark.parametrize("kept", [("ema", "ema_slow"), ("ema_slow",), ("ema",), ()])
def test_a_checkpoint_with_two_emas_loads_the_live_weights_with_any_of_them(
    kept: tuple[str, ...],
) -> None:
    """Two EMAs both put their average under "model" in turn; loading undoes that in the
    exact reverse order, whichever of them the loading runner still has."""

    def emas(names: tuple[str, ...]) -> list[EMA]:
        made = {"ema": lambda: EMA(decay=0.5), "ema_slow": lambda: EMA(decay=0.9, name="ema_slow")}
        return [made[name]() for name in names]

    trained = _ema_run(max_epochs=2, aspects=emas(("ema", "ema_slow")))
    trained.run()
    live = trained.model.weight.detach().clone()
    loading = _ema_run(max_epochs=2, val=bool(kept), aspects=emas(kept))
    loading.load_state_dict(trained.state_dict())
    assert torch.equal(loading.model.weight, live)


def test_early_stopping_state_of_another_metric_starts_afresh() -> None:
    """A state saved while watching val/loss, loaded into EarlyStopping('val/acc'), keeps
    neither the best loss nor the patience spent (it used to stop a rising accuracy for not
    beating the old loss); the same metric's state is kept."""
    saved = EarlyStopping("val/loss", patience=3)
    saved.best, saved.wait = 1.07, 2
    other = EarlyStopping("val/acc", patience=3)
    other.load_state_dict(saved.state_dict())
    assert (other.best, other.wait) == (None, 0)
    same = EarlyStopping("val/loss", patience=3)
    same.load_state_dict(saved.state_dict())
    assert (same.best, same.wait) == (1.07, 2)


@pytest.mark.parametrize(("at", "exact"), [(4, True), (5, False)])
def test_a_save_after_a_break_between_backward_and_step_keeps_no_half_iteration(
    tmp_path: Any, at: int, exact: bool
) -> None:
    """Ctrl-C between an iteration's backward and its step, then Checkpoint.save(): the
    file holds no part of that iteration, which the resumed run trains again. At a
    group's first iteration nothing of the group is lost (exact); inside a group the
    gradients cannot be taken apart, so they are left out with a warning (it used to save
    them and count that batch twice, silently)."""
    straight = _runner(batch_size=2, max_epochs=None, max_iters=8, aspects=[GradAccumulation(4)])
    straight.run()
    checkpoint = Checkpoint(by_epoch=False, interval=100)
    broken = _runner(
        batch_size=2,
        max_epochs=None,
        max_iters=8,
        work_dir=tmp_path,
        aspects=[checkpoint, GradAccumulation(4), _CtrlC(at, "optimizer_step")],
    )
    with pytest.raises(KeyboardInterrupt):
        broken.run()
    with capture_logs() as logs:
        checkpoint.save(broken)
    dropped = [e for e in logs if e["event"] == "grad_accumulation.group_dropped"]
    assert len(dropped) == (0 if exact else 1)
    resumed = _runner(
        batch_size=2,
        max_epochs=None,
        max_iters=8,
        work_dir=tmp_path,
        aspects=[Checkpoint(by_epoch=False, interval=100, resume="auto"), GradAccumulation(4)],
    )
    resumed.run()
    same = all(torch.equal(a, b) for a, b in zip(_params(straight), _params(resumed), strict=True))
    assert same is exact


def test_nan_guard_names_the_iteration_as_logger_numbers_it(tmp_path: Any) -> None:
    """The warning, ``skipped`` and the stop reason give the iteration and epoch that
    Logger's record of that same iteration gives (both counted from 1)."""
    import structlog

    from aspecthook.train.aspects import Logger

    logger = Logger(interval=1, json_file=None)
    runner = _runner(train_step=_nan_at(2), aspects=[NaNGuard("stop"), logger], work_dir=tmp_path)
    with structlog.testing.capture_logs() as logs:
        runner.run()
    [warning] = [e for e in logs if e["event"] == "nan_guard.non_finite_loss"]
    last = logger.records[-1]
    assert (warning["iteration"], warning["epoch"]) == (last["iter"], last["epoch"])
    assert runner.get_aspect(NaNGuard).skipped == [last["iter"]]  # type: ignore[union-attr]
    assert f"iteration {last['iter']} (epoch {last['epoch']})" in str(runner.stop_reason)


def test_nan_guard_asks_for_the_world_size_once_a_run_not_every_iteration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``runner.world_size`` asks the process group each time it is read; NaNGuard reads
    it when the run starts, not in every iteration's backward."""
    from aspecthook.train import _runner as runner_module

    asked: list[int] = []
    dist_info = runner_module._dist_info

    def counted() -> tuple[int, int]:
        asked.append(1)
        return dist_info()

    monkeypatch.setattr(runner_module, "_dist_info", counted)
    runner = _runner(n=32, max_epochs=2, aspects=[NaNGuard("skip")], default_aspects=False)
    runner.run()
    assert runner.iter == 16
    assert len(asked) <= 2


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_early_stopping_stops_at_once_on_a_metric_that_is_not_finite(bad: float) -> None:
    """check_finite (the default): a NaN or infinite val/score at the second validation ends
    the run there, with patience 5 not waited out, and the reason says what and when."""
    runner = _early_stopping_run([1.0, bad, 0.5, 0.4], rule="less", patience=5)
    assert runner.epoch == 2
    assert runner.stop_reason == f"val/score is {bad} at epoch 2"


def test_early_stopping_warns_and_waits_when_its_metric_is_missing() -> None:
    """A monitor no validation reports: each validation logs a warning naming it and the
    metrics there are; it counts as no validation, so the run is not stopped."""
    runner = _runner(
        val_loader=DataLoader(_data(4), batch_size=4),
        max_epochs=3,
        aspects=[EarlyStopping("val/acc", patience=1)],
    )
    with capture_logs() as logs:
        runner.run()
    missing = [e for e in logs if e["event"] == "early_stopping.missing_metric"]
    assert [(e["monitor"], e["known"], e["log_level"]) for e in missing] == [
        ("val/acc", ["val/loss"], "warning")
    ] * 3
    assert (runner.epoch, runner.stop_reason) == (3, None)
    early = runner.get_aspect(EarlyStopping)
    assert early is not None
    assert (early.best, early.wait) == (None, 0)


def test_nan_guard_refuses_an_action_it_does_not_know() -> None:
    with pytest.raises(InvalidOptionError, match="action") as info:
        NaNGuard("raise")
    assert info.value.value == "raise"


@pytest.mark.parametrize("decay", [0.0, 1.0, -0.5, 1.5])
def test_ema_refuses_a_decay_outside_zero_to_one(decay: float) -> None:
    """decay 1 would never move the average, decay 0 would copy the weights: refused."""
    with pytest.raises(InvalidOptionError, match="decay"):
        EMA(decay)


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("decay", "0.9", r"EMA\(decay='0.9'\) must be between 0 and 1"),
        ("decay", None, r"EMA\(decay=None\) must be between 0 and 1"),
        ("update_every", 0, r"EMA\(update_every=0\) must be an int >= 1"),
        ("update_every", 1.5, r"EMA\(update_every=1.5\) must be an int >= 1"),
        ("start_iter", -1, r"EMA\(start_iter=-1\) must be an int >= 0"),
        ("start_iter", None, r"EMA\(start_iter=None\) must be an int >= 0"),
    ],
)
def test_ema_refuses_a_bad_option_when_built(option: str, value: Any, message: str) -> None:
    """EMA's options are checked at construction: a string decay was a bare TypeError, and
    a bad update_every / start_iter failed (or ran oddly) only during training."""
    with pytest.raises(InvalidOptionError, match=message):
        EMA(**{option: value})


def test_ema_starts_from_the_weights_of_its_first_step() -> None:
    """update_every=10 and an epoch of 4 steps: the validation at the epoch's end sees
    the average's first update, a copy of the weights after the first step (OpenMMLab's
    averaged models copy at their first call), not the initial model's, which no step of
    the run ever held."""
    runner = _runner(
        val_loader=DataLoader(_data(4), batch_size=4),
        aspects=[EMA(0.5, update_every=10, use_buffers=False)],
    )
    initial = _params(runner)
    first: list[list[torch.Tensor]] = []
    runner.weaver.after("train_iter")(
        lambda ctx: first.append(_params(runner)) if not first else None
    )
    validated: list[torch.Tensor] = []
    runner.weaver.before("val_iter")(lambda ctx: validated.extend(_params(runner)))
    runner.run()
    for seen, stepped, start in zip(validated, first[0], initial, strict=True):
        assert torch.equal(seen, stepped)
        assert not torch.equal(seen, start)


def _stack_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 3)
    )


def _stack_data() -> TensorDataset:
    """Float16 gradients of these overflow at the scaler's first scales, and now and then
    later: it skips steps while it calibrates, and steps the others."""
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(20, 4, generator=g), torch.randn(20, 3, generator=g))


def test_the_whole_optimisation_stack_is_torch_own_loop_bit_for_bit() -> None:
    """NaNGuard, GradAccumulation(4), AMP(float16), GradClip, EMA and a per-iteration
    warm-up + cosine schedule over 3 epochs of 10 batches (groups of 4 across epoch ends,
    the second with a NaN loss in iteration 6, the last of 2) train exactly as torch's
    AMP recipe written out by hand: loss / group size, scaler.scale(loss).backward(),
    unscale_ then clip then scaler.step / update, EMA and scheduler after each step, a
    group with a bad loss dropped. Weights, optimizer, scaler, EMA and every LR equal."""
    mse = torch.nn.functional.mse_loss
    bad = 5  # runner.iter as the 6th iteration starts

    def schedule(opt: torch.optim.Optimizer) -> Any:
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=6)

    def step(runner: Runner, batch: Any) -> torch.Tensor:
        loss = mse(runner.model(batch[0]), batch[1])
        return loss * float("nan") if runner.iter == bad else loss

    model = _stack_model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    ema = EMA(0.9)
    runner = Runner(
        model, opt, DataLoader(_stack_data(), batch_size=2), train_step=step, max_epochs=3,
        aspects=[
            NaNGuard(), GradAccumulation(4), AMP("float16"), GradClip(1.0), ema,
            LRSchedule(schedule, by_epoch=False, warmup="linear", warmup_iters=2),
        ],
    )  # fmt: skip
    lrs: list[float] = []
    runner.weaver.before("train_iter")(lambda ctx: lrs.append(opt.param_groups[0]["lr"]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: the scheduler stepped past a skipped step
        runner.run()

    ref = _stack_model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=1e-2, momentum=0.9)
    warm = torch.optim.lr_scheduler.LinearLR(ref_opt, start_factor=0.1, total_iters=2)
    scheduler = torch.optim.lr_scheduler.SequentialLR(
        ref_opt, [warm, schedule(ref_opt)], milestones=[2]
    )
    scaler = torch.amp.GradScaler("cpu")
    averaged = AveragedModel(ref, multi_avg_fn=get_ema_multi_avg_fn(0.9), use_buffers=True)
    ref_lrs: list[float] = []
    batches = [b for _ in range(3) for b in DataLoader(_stack_data(), batch_size=2)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for start in range(0, 30, 4):
            group = batches[start : start + 4]
            dropped = False
            for i, (x, y) in enumerate(group, start):
                ref_lrs.append(ref_opt.param_groups[0]["lr"])
                with torch.autocast("cpu", dtype=torch.float16):
                    loss = mse(ref(x), y)
                if i == bad:
                    dropped = True
                    continue
                scaler.scale(loss / len(group)).backward()
            if not dropped:
                scaler.unscale_(ref_opt)
                torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
                scaler.step(ref_opt)
                scaler.update()
                averaged.update_parameters(ref)
            ref_opt.zero_grad(set_to_none=True)
            scheduler.step()

    assert scaler.get_scale() < 65536.0  # steps were skipped while it calibrated
    assert not torch.equal(next(model.parameters()), next(_stack_model().parameters()))
    assert lrs == ref_lrs
    assert runner.grad_scaler.state_dict() == scaler.state_dict()
    assert ema.averaged is not None
    for ours, theirs in [(model, ref), (ema.averaged, averaged)]:
        for (name, a), b in zip(
            ours.state_dict().items(), theirs.state_dict().values(), strict=True
        ):
            assert torch.equal(a, b), name
    state, ref_state = opt.state_dict(), ref_opt.state_dict()
    assert state["param_groups"] == ref_state["param_groups"]
    for index, values in ref_state["state"].items():
        for key, value in values.items():
            assert torch.equal(state["state"][index][key], value), (index, key)


def test_grad_clip_clips_the_parameters_the_optimizer_steps() -> None:
    """An optimizer over the last layer only (the rest still requires grad, as in a
    fine-tune that passes just the head to it): the norm clipped and reported is the
    head's, as torch's clip over the optimizer's parameters (mmengine, Lightning) gives;
    the other layers' gradients do not shrink the head's step."""
    model = _model()
    head = list(model[2].parameters())
    runner = Runner(
        model,
        torch.optim.SGD(head, lr=0.1),
        DataLoader(_data(), batch_size=4),
        loss_fn=CE,
        max_iters=1,
        aspects=[GradClip(max_norm=1e-3)],
    )
    norms: list[torch.Tensor] = []

    def head_norm(ctx: CallContext) -> None:
        norms.append(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in head])))

    runner.weaver.before("optimizer_step", priority="HIGHEST")(head_norm)
    runner.weaver.before("optimizer_step", priority="LOWEST")(head_norm)
    runner.run()
    torch.testing.assert_close(runner.outputs["grad_norm"], norms[0])
    torch.testing.assert_close(norms[1], torch.tensor(1e-3), rtol=1e-4, atol=0.0)


def test_early_stopping_names_the_epoch_of_a_validation_inside_it() -> None:
    """Evaluate every 2 iterations, 4 an epoch: a NaN at the first validation (inside the
    first epoch) stops the run saying epoch 1, as epochs are numbered at an epoch's end
    (and by Logger), not epoch 0."""
    runner = _runner(
        val_loader=DataLoader(_data(4), batch_size=4),
        max_epochs=2,
        aspects=[Evaluate(2, by_epoch=False), EarlyStopping("val/loss")],
    )
    runner.weaver.after("val_epoch", priority="BELOW_NORMAL")(  # after Evaluate
        lambda ctx: ctx.runner.metrics.update({"val/loss": float("nan")})
    )
    runner.run()
    assert (runner.iter, runner.stop_reason) == (2, "val/loss is nan at epoch 1")


def test_numpy_numbers_are_taken_as_options() -> None:
    """A decay, a norm, a warm-up ratio or a count computed with numpy (``np.float32``,
    ``np.int64``) is a number like any other: it was refused as "not between 0 and 1" /
    "not a positive number". The aspects keep it as a Python number; bools stay refused."""
    import numpy as np

    from aspecthook.train.aspects import EMA, GradClip, IterTimer, LRSchedule

    ema = EMA(decay=np.float32(0.99), update_every=np.int64(2))
    assert (type(ema.decay), ema.update_every, type(ema.update_every)) == (float, 2, int)
    assert GradClip(np.float32(1.5), norm_type=np.float64(1.0)).max_norm == 1.5
    lr = LRSchedule(warmup="linear", warmup_iters=np.int64(5), warmup_ratio=np.float32(0.5))
    assert (lr.warmup_ratio, type(lr.warmup_ratio)) == (0.5, float)
    assert IterTimer(window=np.int64(7)).times.maxlen == 7
    with pytest.raises(InvalidOptionError, match=r"EMA\(decay=True\)"):
        EMA(decay=True)
    with pytest.raises(InvalidOptionError, match=r"IterTimer\(window=True\)"):
        IterTimer(window=True)
