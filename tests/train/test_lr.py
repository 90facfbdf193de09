"""LRSchedule: the LR at every iteration is exactly torch's own sequence for the schedule."""

from __future__ import annotations

import itertools
import types
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.optim import lr_scheduler
from torch.utils.data import DataLoader, TensorDataset

from aspecthook import CallContext
from aspecthook.errors import InvalidOptionError, RunnerError
from aspecthook.train import Runner
from aspecthook.train.aspects import Evaluate, LRSchedule

ITERS = 40
BASE_LR = 0.5


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(4, 2)


def _loader(n: int = ITERS) -> DataLoader[Any]:
    data = TensorDataset(torch.randn(n, 4), torch.randint(0, 2, (n,)))
    return DataLoader(data, batch_size=1)


def _torch_lrs(build: Callable[[torch.optim.Optimizer], Any], iters: int = ITERS) -> list[float]:
    """The LR of each iteration when torch's scheduler is stepped by hand."""
    opt = torch.optim.SGD(_model().parameters(), lr=BASE_LR)
    scheduler = build(opt)
    seen = []
    for _ in range(iters):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    return seen


def _runner_lrs(
    aspect: LRSchedule, scheduler: Callable[[torch.optim.Optimizer], Any] | None = None
) -> list[float]:
    """The LR each optimizer step of a Runner used, with ``aspect`` driving it."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=BASE_LR)
    runner = Runner(
        model,
        opt,
        _loader(),
        scheduler=scheduler(opt) if scheduler else None,
        loss_fn=torch.nn.functional.cross_entropy,
        max_iters=ITERS,
        aspects=[aspect],
    )
    seen: list[float] = []

    def record(ctx: CallContext) -> None:
        seen.append(ctx.runner.optimizer.param_groups[0]["lr"])

    runner.weaver.before("optimizer_step")(record)
    runner.run()
    return seen


SCHEDULES: dict[str, Callable[[torch.optim.Optimizer], Any]] = {
    "LinearLR": lambda o: lr_scheduler.LinearLR(o, start_factor=0.2, total_iters=10),
    "OneCycleLR": lambda o: lr_scheduler.OneCycleLR(o, max_lr=1.0, total_steps=ITERS),
    "StepLR": lambda o: lr_scheduler.StepLR(o, step_size=7, gamma=0.5),
    "SequentialLR": lambda o: lr_scheduler.SequentialLR(
        o,
        [
            lr_scheduler.ConstantLR(o, factor=0.3, total_iters=5),
            lr_scheduler.ExponentialLR(o, gamma=0.9),
        ],
        milestones=[5],
    ),
}


@pytest.mark.parametrize("value", [None, "no", 0, 1.0])
def test_by_epoch_that_is_not_a_bool_is_refused(value: Any) -> None:
    """LRSchedule(by_epoch=None) would step the scheduler every iteration without a word."""
    with pytest.raises(InvalidOptionError, match=r"LRSchedule\(by_epoch=.*must be True or False"):
        LRSchedule(by_epoch=value)


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_per_iteration_schedule_matches_torch(name: str) -> None:
    """Driven per iteration, the runner sees torch's LR sequence exactly."""
    build = SCHEDULES[name]
    expected = _torch_lrs(build)
    got = _runner_lrs(LRSchedule(by_epoch=False), scheduler=build)
    assert got == pytest.approx(expected, abs=1e-12, rel=0)


@pytest.mark.parametrize(("kind", "warm"), [("linear", lr_scheduler.LinearLR), ("constant", None)])
def test_warmup_then_cosine_matches_torch(kind: str, warm: Any) -> None:
    """Warm-up composed with cosine annealing equals torch's SequentialLR of the same."""
    w, ratio = 8, 0.1

    def reference(o: torch.optim.Optimizer) -> Any:
        first = (
            lr_scheduler.LinearLR(o, start_factor=ratio, end_factor=1.0, total_iters=w)
            if kind == "linear"
            else lr_scheduler.ConstantLR(o, factor=ratio, total_iters=w)
        )
        cosine = lr_scheduler.CosineAnnealingLR(o, T_max=ITERS - w)
        return lr_scheduler.SequentialLR(o, [first, cosine], milestones=[w])

    expected = _torch_lrs(reference)
    got = _runner_lrs(
        LRSchedule(
            lambda o: lr_scheduler.CosineAnnealingLR(o, T_max=ITERS - w),
            by_epoch=False,
            warmup=kind,
            warmup_iters=w,
            warmup_ratio=ratio,
        )
    )
    assert got == pytest.approx(expected, abs=1e-12, rel=0)
    assert got[0] == pytest.approx(BASE_LR * ratio)


def test_exp_warmup_ramps_geometrically_to_the_base_lr() -> None:
    """warmup='exp' multiplies the LR by a constant factor each step up to the base LR."""
    w, ratio = 5, 0.01
    got = _runner_lrs(
        LRSchedule(
            lambda o: lr_scheduler.ConstantLR(o, factor=1.0, total_iters=1),
            by_epoch=False,
            warmup="exp",
            warmup_iters=w,
            warmup_ratio=ratio,
        )
    )
    ramp = got[: w + 1]
    factors = [b / a for a, b in itertools.pairwise(ramp)]
    assert ramp[0] == pytest.approx(BASE_LR * ratio)
    assert factors == pytest.approx([factors[0]] * w)
    assert got[w:] == pytest.approx([BASE_LR] * (ITERS - w))


def test_epoch_schedule_steps_once_per_epoch() -> None:
    """With the default by_epoch=True, a StepLR(step_size=1) halves the LR per epoch."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=BASE_LR)
    runner = Runner(
        model,
        opt,
        _loader(4),
        scheduler=lr_scheduler.StepLR(opt, step_size=1, gamma=0.5),
        loss_fn=torch.nn.functional.cross_entropy,
        max_epochs=3,
    )
    seen: list[float] = []
    runner.weaver.before("train_epoch")(
        lambda ctx: seen.append(ctx.runner.optimizer.param_groups[0]["lr"])
    )
    runner.run()
    assert seen == [BASE_LR, BASE_LR / 2, BASE_LR / 4]


def _plateau_runner(
    *, by_epoch: bool, evaluate: Evaluate, **limits: int
) -> tuple[Runner, lr_scheduler.ReduceLROnPlateau, list[int]]:
    """A runner whose plateau scheduler watches a metric that never improves; also returns
    the iterations at which validation ran."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=BASE_LR)
    plateau = lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
    runner = Runner(
        model,
        opt,
        _loader(4),
        val_loader=_loader(4),
        loss_fn=torch.nn.functional.cross_entropy,
        aspects=[evaluate, LRSchedule(plateau, by_epoch=by_epoch, monitor="val/flat")],
        **limits,
    )
    validated: list[int] = []
    runner.weaver.after("val_epoch")(lambda ctx: validated.append(ctx.runner.iter))
    return runner, plateau, validated


def test_plateau_steps_once_per_validation() -> None:
    """ReduceLROnPlateau steps after each validation (every 2nd epoch here), on its metric."""
    flat = Evaluate(interval=2, metrics={"flat": lambda outputs, targets: 1.0})
    runner, plateau, validated = _plateau_runner(by_epoch=True, evaluate=flat, max_epochs=6)
    runner.run()
    assert validated == [8, 16, 24]
    assert plateau.last_epoch == 3  # once per validation, not once per epoch
    # patience=0: the first value sets the best, each later (equal) one halves the LR
    assert runner.optimizer.param_groups[0]["lr"] == BASE_LR / 4


def test_plateau_steps_after_validation_by_iteration() -> None:
    """With LRSchedule(by_epoch=False) and validation every 3 iterations, it still steps."""
    flat = Evaluate(interval=3, by_epoch=False, metrics={"flat": lambda outputs, targets: 1.0})
    runner, plateau, validated = _plateau_runner(by_epoch=False, evaluate=flat, max_iters=9)
    runner.run()
    assert validated == [3, 6, 9]
    assert plateau.last_epoch == 3
    assert runner.optimizer.param_groups[0]["lr"] == BASE_LR / 4


@pytest.mark.parametrize(
    ("monitor", "mode", "warns"),
    [
        ("val/acc", "min", True),
        ("val/loss", "max", True),
        ("val/acc", "max", False),
        ("val/loss", "min", False),
        ("val/flat", "min", False),
    ],
)
def test_a_plateau_mode_against_its_metric_is_reported(
    monitor: str, mode: str, warns: bool
) -> None:
    """torch's default mode='min' on an accuracy lowers the LR while it rises: said when the
    run starts (a name that tells nothing says nothing)."""
    import warnings

    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=BASE_LR)
    runner = Runner(
        model,
        opt,
        _loader(4),
        val_loader=_loader(4),
        loss_fn=torch.nn.functional.cross_entropy,
        max_epochs=1,
        aspects=[
            Evaluate(metrics={"acc": lambda o, t: 1.0, "flat": lambda o, t: 1.0}),
            LRSchedule(lr_scheduler.ReduceLROnPlateau(opt, mode=mode), monitor=monitor),
        ],
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runner.run()
    said = [w for w in caught if "ReduceLROnPlateau(mode=" in str(w.message)]
    assert len(said) == int(warns)


def test_plateau_without_validation_data_is_refused_before_training() -> None:
    """A plateau schedule needs a validation metric: no val_loader is an error up front."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=BASE_LR)
    runner = Runner(
        model,
        opt,
        _loader(4),
        scheduler=lr_scheduler.ReduceLROnPlateau(opt),
        loss_fn=torch.nn.functional.cross_entropy,
        max_epochs=2,
    )
    with pytest.raises(RunnerError, match="val_loader"):
        runner.run()
    assert runner.iter == 0


def test_a_plateau_that_never_steps_is_reported() -> None:
    """A val_loader but no validation (no Evaluate): the run warns that the plateau
    schedule never saw its metric."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=BASE_LR)
    runner = Runner(
        model,
        opt,
        _loader(4),
        val_loader=_loader(4),
        loss_fn=torch.nn.functional.cross_entropy,
        max_epochs=2,
        default_aspects=False,
        aspects=[LRSchedule(lr_scheduler.ReduceLROnPlateau(opt))],
    )
    with pytest.warns(RuntimeWarning, match="never stepped.*Evaluate"):
        runner.run()


def test_a_plateau_of_a_run_stopped_before_its_first_validation_is_not_reported() -> None:
    """A run stopped (NaNGuard, stop()) before its first validation has Evaluate: the
    warning's advice to add it would be wrong, so it is not given."""
    import warnings

    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=BASE_LR)
    runner = Runner(
        model,
        opt,
        _loader(4),
        val_loader=_loader(4),
        loss_fn=torch.nn.functional.cross_entropy,
        max_epochs=2,
        aspects=[LRSchedule(lr_scheduler.ReduceLROnPlateau(opt))],
    )
    runner.weaver.after("train_iter")(lambda ctx: ctx.runner.stop("enough"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        runner.run()
    assert runner.iter == 1


def test_a_finished_run_resumed_does_not_report_its_plateau(tmp_path: Any) -> None:
    """Resuming a run that already ended trains nothing: no warning about the plateau."""
    import warnings

    from aspecthook.train.aspects import Checkpoint

    def run() -> None:
        model = _model()
        opt = torch.optim.SGD(model.parameters(), lr=BASE_LR)
        Runner(
            model,
            opt,
            _loader(4),
            val_loader=_loader(4),
            scheduler=lr_scheduler.ReduceLROnPlateau(opt),
            loss_fn=torch.nn.functional.cross_entropy,
            max_epochs=2,
            work_dir=tmp_path,
            aspects=[Checkpoint(resume="auto")],
        ).run()

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        run()
        run()


def test_a_run_resumed_at_an_epochs_last_batch_is_not_told_it_steps_the_schedule_first(
    tmp_path: Any,
) -> None:
    """A checkpoint taken by iteration at the last batch of the first epoch: the resumed
    run's first scheduler step (the epoch's end) comes before any optimizer step of the
    new process. The optimizer had stepped in the run that saved it, so torch's warning
    about calling ``lr_scheduler.step()`` before ``optimizer.step()`` would be false."""
    import warnings

    from aspecthook import Aspect, Priority
    from aspecthook.train.aspects import Checkpoint

    class Killed(Exception):
        pass

    class KillAfterTheSave(Aspect):
        priority = Priority.LOWEST

        def after_train_iter(self, ctx: CallContext) -> None:
            if ctx.runner.iter == 4:
                raise Killed

    def runner(*aspects: Any) -> Runner:
        model = _model()
        opt = torch.optim.SGD(model.parameters(), lr=BASE_LR)
        return Runner(
            model,
            opt,
            _loader(4),  # four batches an epoch
            scheduler=lr_scheduler.StepLR(opt, step_size=1, gamma=0.5),
            loss_fn=torch.nn.functional.cross_entropy,
            max_epochs=3,
            work_dir=tmp_path,
            aspects=list(aspects),
        )

    with pytest.raises(Killed):
        runner(Checkpoint(interval=4, by_epoch=False), KillAfterTheSave()).run()
    resumed = runner(Checkpoint(interval=4, by_epoch=False, resume="auto"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resumed.run()
    assert resumed.optimizer.param_groups[0]["lr"] == BASE_LR * 0.5**3


@pytest.mark.parametrize("kind", ["constant", "linear", "exp"])
def test_warmup_composes_with_an_epoch_schedule_across_epochs(kind: str) -> None:
    """A per-iteration warm-up longer than an epoch keeps the epoch schedule's steps: the
    LR is the warm-up factor times the StepLR value at every iteration."""
    per_epoch, w, ratio, gamma = 4, 6, 0.1, 0.5
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=BASE_LR)
    runner = Runner(
        model,
        opt,
        _loader(per_epoch),
        scheduler=lr_scheduler.StepLR(opt, step_size=1, gamma=gamma),
        loss_fn=torch.nn.functional.cross_entropy,
        max_epochs=3,
        aspects=[LRSchedule(warmup=kind, warmup_iters=w, warmup_ratio=ratio)],
    )
    seen: list[float] = []
    runner.weaver.before("optimizer_step")(
        lambda ctx: seen.append(ctx.runner.optimizer.param_groups[0]["lr"])
    )
    runner.run()

    def factor(i: int) -> float:  # the warm-up's own factor at iteration i
        if i >= w:
            return 1.0
        if kind == "constant":
            return ratio
        if kind == "linear":
            return ratio + (1 - ratio) * i / w
        return float(ratio ** (1 - i / w))

    expected = [BASE_LR * gamma ** (i // per_epoch) * factor(i) for i in range(3 * per_epoch)]
    assert seen == pytest.approx(expected, abs=1e-12, rel=0)


def test_bad_options_are_refused() -> None:
    """Unknown warm-up kinds and ratios out of range fail at construction."""
    with pytest.raises(InvalidOptionError, match="warmup"):
        LRSchedule(warmup="cosine", warmup_iters=3)
    with pytest.raises(InvalidOptionError, match="warmup_ratio"):
        LRSchedule(warmup_ratio=0)


@pytest.mark.parametrize("warmup_iters", [5, True, "5"])
def test_warmup_iters_without_a_warmup_is_refused(warmup_iters: Any) -> None:
    """warmup_iters= with no warmup= kind did nothing, silently: the run had no warm-up
    at all. It is refused at construction, saying which kinds to give."""
    with pytest.raises(InvalidOptionError, match=r"warmup_iters=.* needs warmup='linear'"):
        LRSchedule(warmup_iters=warmup_iters)


@pytest.mark.parametrize(
    "options",
    [
        {"scheduler": "CosineAnnealingLR"},
        {"scheduler": {"type": "StepLR", "step_size": 2}},
        {"scheduler": 3},
        {"warmup": "linear", "warmup_iters": "5"},
        {"warmup_ratio": "0.1"},
        {"warmup_ratio": True},
    ],
    ids=[
        "scheduler-name",
        "scheduler-mapping",
        "scheduler-number",
        "iters-text",
        "ratio-text",
        "ratio-bool",
    ],
)
def test_options_of_the_wrong_kind_are_refused_at_construction(options: dict[str, Any]) -> None:
    """What a config can give by mistake fails when the aspect is made, not mid-run."""
    with pytest.raises(
        InvalidOptionError, match=next(iter(options)) if len(options) == 1 else "warmup_iters"
    ):
        LRSchedule(**options)


def test_missing_scheduler_is_reported_before_training() -> None:
    """LRSchedule without any scheduler stops the run before the first step."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=BASE_LR)
    runner = Runner(
        model,
        opt,
        _loader(),
        loss_fn=torch.nn.functional.cross_entropy,
        max_iters=3,
        aspects=[LRSchedule(by_epoch=False)],
    )
    with pytest.raises(RunnerError, match="no scheduler"):
        runner.run()
    assert runner.iter == 0


def _warm_cosine_runner(
    aspect_scheduler: Any, runner_scheduler: bool, max_iters: int, lr: Any = BASE_LR
) -> tuple[Runner, list[float]]:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    cosine = lr_scheduler.CosineAnnealingLR(opt, T_max=ITERS)
    runner = Runner(
        model,
        opt,
        _loader(),
        scheduler=cosine if runner_scheduler else None,
        loss_fn=torch.nn.functional.cross_entropy,
        max_iters=max_iters,
        aspects=[
            LRSchedule(
                None if runner_scheduler else aspect_scheduler,
                by_epoch=False,
                warmup="linear",
                warmup_iters=5,
            )
        ],
    )
    seen: list[float] = []
    runner.weaver.before("optimizer_step")(
        lambda ctx: seen.append(float(ctx.runner.optimizer.param_groups[0]["lr"]))
    )
    return runner, seen


@pytest.mark.parametrize("given", ["runner", "factory"])
def test_a_second_run_of_the_runner_goes_on_with_the_same_schedule(given: str) -> None:
    """run() to 15 iterations, then max_iters=40 and run() again: the LRs are the ones
    one run to 40 uses (the warm-up is not started again, a factory not called again)."""

    def cosine(o: torch.optim.Optimizer) -> Any:
        return lr_scheduler.CosineAnnealingLR(o, T_max=ITERS)

    whole, whole_lrs = _warm_cosine_runner(cosine, given == "runner", ITERS)
    whole.run()
    twice, twice_lrs = _warm_cosine_runner(cosine, given == "runner", 15)
    twice.run()
    twice.max_iters = ITERS
    twice.run()
    assert len(twice_lrs) == ITERS
    assert twice_lrs == whole_lrs


def test_a_state_loaded_before_the_first_run_continues_the_schedule() -> None:
    """runner.load_state_dict(state) and then run(): the warm-up and the cosine go on from
    the saved iteration, as Checkpoint(resume=) does."""
    whole, whole_lrs = _warm_cosine_runner(None, True, ITERS)
    whole.run()
    first, _ = _warm_cosine_runner(None, True, 12)
    first.run()
    state = first.state_dict()
    resumed, resumed_lrs = _warm_cosine_runner(None, True, ITERS)
    resumed.load_state_dict(state)
    resumed.run()
    assert resumed_lrs == whole_lrs[12:]


def test_a_scheduler_class_is_built_on_the_runners_optimizer() -> None:
    """LRSchedule(SchedulerClass): called with the optimizer, like a factory."""
    seen = _runner_lrs(LRSchedule(lr_scheduler.LinearLR, by_epoch=False))
    assert seen == _torch_lrs(lr_scheduler.LinearLR)


def test_a_scheduler_class_that_needs_more_arguments_says_what_to_give() -> None:
    """LRSchedule(StepLR): the class is called with the optimizer alone, which StepLR
    refuses (no step_size); the run failed with torch's bare TypeError. It now says
    which class could not be built and how to give it its arguments."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=BASE_LR)
    runner = Runner(
        model,
        opt,
        _loader(),
        loss_fn=torch.nn.functional.cross_entropy,
        max_epochs=1,
        aspects=[LRSchedule(lr_scheduler.StepLR)],
    )
    with pytest.raises(RunnerError, match=r"StepLR\(optimizer\).*step_size.*lambda"):
        runner.run()
    assert runner.iter == 0


def _one_cycle_runner(max_iters: int, lr: Any) -> tuple[Runner, list[tuple[float, float]]]:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    cycle = lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=ITERS)
    runner = Runner(
        model,
        opt,
        _loader(),
        scheduler=cycle,
        loss_fn=torch.nn.functional.cross_entropy,
        max_iters=max_iters,
        aspects=[LRSchedule(by_epoch=False)],
    )
    seen: list[tuple[float, float]] = []

    def record(ctx: CallContext) -> None:
        group = ctx.runner.optimizer.param_groups[0]
        seen.append((float(group["lr"]), float(group["momentum"])))

    runner.weaver.before("optimizer_step")(record)
    return runner, seen


def test_a_state_loaded_before_the_first_run_keeps_the_momentum_a_schedule_cycles() -> None:
    """OneCycleLR sets the momentum too when it is built: the loaded one comes back."""
    whole, whole_seen = _one_cycle_runner(ITERS, BASE_LR)
    whole.run()
    first, _ = _one_cycle_runner(12, BASE_LR)
    first.run()
    resumed, resumed_seen = _one_cycle_runner(ITERS, BASE_LR)
    resumed.load_state_dict(first.state_dict())
    resumed.run()
    assert resumed_seen == whole_seen[12:]


def test_a_state_loaded_before_the_first_run_keeps_a_tensor_lr() -> None:
    """A tensor LR is changed in place by torch while the schedule is built: the loaded
    value comes back into the optimizer's own tensor."""
    whole, whole_lrs = _warm_cosine_runner(None, True, ITERS, lr=torch.tensor(BASE_LR))
    whole.run()
    first, _ = _warm_cosine_runner(None, True, 12, lr=torch.tensor(BASE_LR))
    first.run()
    resumed, resumed_lrs = _warm_cosine_runner(None, True, ITERS, lr=torch.tensor(BASE_LR))
    resumed.load_state_dict(first.state_dict())
    resumed.run()
    assert resumed_lrs == whole_lrs[12:]


def test_a_state_loaded_and_saved_again_before_a_run_keeps_the_schedules_progress() -> None:
    """load_state_dict, then state_dict before any run(): the schedule's progress is saved
    as it was loaded (the runner's scheduler is not built on until the run starts)."""
    whole, whole_lrs = _warm_cosine_runner(None, True, ITERS)
    whole.run()
    first, _ = _warm_cosine_runner(None, True, 12)
    first.run()
    middle, _ = _warm_cosine_runner(None, True, ITERS)
    middle.load_state_dict(first.state_dict())
    resaved = middle.state_dict()
    resumed, resumed_lrs = _warm_cosine_runner(None, True, ITERS)
    resumed.load_state_dict(resaved)
    resumed.run()
    assert resumed_lrs == whole_lrs[12:]


def test_a_scheduler_built_on_another_optimizer_is_refused_before_training() -> None:
    """A scheduler stepping another optimizer would leave the runner's LR as it is all
    run long: refused when the run starts, with what to do."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=BASE_LR)
    other = torch.optim.SGD(_model().parameters(), lr=BASE_LR)
    runner = Runner(
        model,
        opt,
        _loader(4),
        loss_fn=torch.nn.functional.cross_entropy,
        max_iters=4,
        aspects=[LRSchedule(lr_scheduler.StepLR(other, step_size=1), by_epoch=False)],
    )
    refused = r"StepLR drives a different optimizer.*runner\.optimizer"
    with pytest.raises(RunnerError, match=refused):
        runner.run()
    assert runner.iter == 0


def test_a_plateau_watching_a_metric_validation_does_not_report_names_it() -> None:
    """ReduceLROnPlateau on a metric Evaluate does not produce fails at the first
    validation with the metric asked for and the ones there are, not with a KeyError."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=BASE_LR)
    plateau = lr_scheduler.ReduceLROnPlateau(opt, mode="max")
    runner = Runner(
        model,
        opt,
        _loader(4),
        val_loader=_loader(4),
        loss_fn=torch.nn.functional.cross_entropy,
        max_epochs=2,
        aspects=[LRSchedule(plateau, monitor="val/acc")],
    )
    with pytest.raises(
        RunnerError, match=r"watches 'val/acc', which is not in runner\.metrics"
    ) as e:
        runner.run()
    assert "(['val/loss']): add Evaluate() or set LRSchedule(monitor=...)" in str(e.value)
    assert runner.epoch == 1  # the first epoch's validation is where it is found missing
    assert sorted(runner.metrics) == ["val/loss"]


# -- with GradAccumulation: one scheduler step per optimizer step ----------------------


def _accumulating_lrs(
    aspect: LRSchedule, steps: int = 4, iters: int = 16, **runner: Any
) -> tuple[list[float], Runner]:
    """The LR of each optimizer step of a run accumulating ``steps`` batches a step."""
    from aspecthook.train.aspects import GradAccumulation

    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=BASE_LR)
    run = Runner(
        model,
        opt,
        _loader(),
        loss_fn=torch.nn.functional.cross_entropy,
        max_iters=iters,
        aspects=[GradAccumulation(steps), aspect],
        default_aspects=False,
        **runner,
    )
    seen: list[float] = []

    def record(ctx: CallContext) -> None:
        if not ctx.skipped:
            seen.append(opt.param_groups[0]["lr"])

    run.weaver.before("optimizer_step", priority="LOWEST")(record)
    run.run()
    return seen, run


def test_a_per_iteration_schedule_steps_once_per_optimizer_step_when_accumulating() -> None:
    """GradAccumulation(4) over 16 batches makes 4 optimizer steps: they use the
    schedule's first 4 LRs, as torch's loop (scheduler.step() after optimizer.step())
    gives them; stepped every batch, they used its 1st, 5th, 9th and 13th, and torch warned
    that the scheduler stepped before the optimizer."""

    def build(opt: torch.optim.Optimizer) -> Any:
        return lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (step + 1))

    seen, _ = _accumulating_lrs(LRSchedule(build, by_epoch=False))
    assert seen == _torch_lrs(build, iters=4)


def test_a_schedule_sized_in_optimizer_steps_runs_to_the_end_when_accumulating() -> None:
    """OneCycleLR(total_steps=the run's optimizer steps) fits a run accumulating batches,
    as it does in a Lightning or hand-written loop; it raised 'Tried to step 5 times'."""

    def build(opt: torch.optim.Optimizer) -> Any:
        return lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=4)

    seen, _ = _accumulating_lrs(LRSchedule(build, by_epoch=False))
    assert seen == pytest.approx(_torch_lrs(build, iters=4))


@pytest.mark.parametrize(
    ("accumulate", "by_epoch", "needed"),
    [(4, False, 8), (1, False, 30), (1, True, 3)],
)
def test_a_one_cycle_shorter_than_the_run_is_refused_before_training(
    accumulate: int, by_epoch: bool, needed: int
) -> None:
    """3 epochs of 10 batches step a OneCycleLR 8 times under GradAccumulation(4) (groups
    run across epoch ends, the last one of 2), 30 times per iteration, 3 times per epoch.
    One step short, the run is refused before it trains, with the length to give (torch
    raised 'Tried to step' in its last iteration, after all the training); with that
    length it runs to its end."""
    from aspecthook.train.aspects import GradAccumulation

    def make(total_steps: int) -> Runner:
        model = _model()
        opt = torch.optim.SGD(model.parameters(), lr=BASE_LR)
        build = lambda o: lr_scheduler.OneCycleLR(o, max_lr=1.0, total_steps=total_steps)  # noqa: E731
        aspects: list[Any] = [LRSchedule(build, by_epoch=by_epoch)]
        if accumulate > 1:
            aspects.append(GradAccumulation(accumulate))
        return Runner(
            model, opt, _loader(10), loss_fn=torch.nn.functional.cross_entropy,
            max_epochs=3, aspects=aspects, default_aspects=False,
        )  # fmt: skip

    short = make(needed - 1)
    with pytest.raises(RunnerError, match=rf"too short .* build it with total_steps={needed}$"):
        short.run()
    assert short.iter == 0
    whole = make(needed)
    whole.run()
    assert whole.iter == 30
    assert whole.scheduler.last_epoch == needed


def test_a_warm_up_counts_optimizer_steps_when_accumulating() -> None:
    """warmup_iters=3 in front of a per-epoch schedule ramps over 3 optimizer steps (12
    batches with GradAccumulation(4)), then the LR is the base one."""

    def build(opt: torch.optim.Optimizer) -> Any:
        return lr_scheduler.StepLR(opt, step_size=100)

    aspect = LRSchedule(build, warmup="linear", warmup_iters=3, warmup_ratio=0.25)
    seen, _ = _accumulating_lrs(aspect, iters=20)
    expected = _torch_lrs(
        lambda opt: lr_scheduler.LinearLR(opt, start_factor=0.25, total_iters=3), iters=5
    )
    assert seen == pytest.approx(expected)
    assert seen[3:] == [BASE_LR, BASE_LR]


def test_a_run_resumed_inside_an_accumulated_warm_up_goes_on_with_it() -> None:
    """The optimizer steps the warm-up counted are part of checkpoints: a runner loading
    the state after 2 of 3 warm-up steps makes the third, then trains at the base LR."""

    def aspect() -> LRSchedule:
        build = lambda opt: lr_scheduler.StepLR(opt, step_size=100)  # noqa: E731
        return LRSchedule(build, warmup="linear", warmup_iters=3, warmup_ratio=0.25)

    whole, _ = _accumulating_lrs(aspect(), iters=20)
    first, run = _accumulating_lrs(aspect(), iters=8)
    state = run.state_dict()
    assert state["aspects"]["lr_schedule"]["optimizer_steps"] == 2

    from aspecthook.train.aspects import GradAccumulation

    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=BASE_LR)
    resumed = Runner(
        model,
        opt,
        _loader(),
        loss_fn=torch.nn.functional.cross_entropy,
        max_iters=20,
        aspects=[GradAccumulation(4), aspect()],
        default_aspects=False,
    )
    resumed.load_state_dict(state)
    rest: list[float] = []
    resumed.weaver.before("optimizer_step", priority="LOWEST")(
        lambda ctx: None if ctx.skipped else rest.append(opt.param_groups[0]["lr"])
    )
    resumed.run()
    assert first + rest == pytest.approx(whole)


def test_a_runner_of_the_protocol_alone_gets_its_per_iteration_schedule() -> None:
    """A runner with only the runner protocol (no Runner's ``aspects`` list) steps a
    per-iteration schedule: looking for a GradAccumulation among its aspects raised
    AttributeError when the run began."""
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    runner = types.SimpleNamespace(
        model=model,
        optimizer=opt,
        scheduler=None,
        rank=0,
        world_size=1,
        iter=0,
        epoch=0,
        inner_iter=0,
        max_epochs=None,
        max_iters=4,
        train_loader=[0] * 4,
        metrics={},
    )
    ctx: Any = types.SimpleNamespace(runner=runner)  # what the schedule reads of a context
    schedule = LRSchedule(lr_scheduler.StepLR(opt, step_size=1, gamma=0.5), by_epoch=False)
    schedule.before_run(ctx)
    opt.step()
    runner.iter = 1
    schedule.after_train_iter(ctx)
    assert opt.param_groups[0]["lr"] == 0.5
