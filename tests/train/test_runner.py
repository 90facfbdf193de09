"""The Runner: a loop of join points, its counters, validation, stop, and bad input."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

import pytest
import structlog
import torch
from torch.utils.data import DataLoader, TensorDataset

import aspecthook as ah
from aspecthook.errors import InvalidOptionError, RunnerError, WeaverClosedError
from aspecthook.train import JOINPOINTS, Runner, _loop, seed_everything
from aspecthook.train.aspects import Checkpoint, Evaluate, Logger, ProgressBar

CE = torch.nn.functional.cross_entropy


def _parts(n: int = 12, batch_size: int = 4) -> tuple[torch.nn.Module, torch.optim.Optimizer, Any]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    data = TensorDataset(torch.randn(n, 4), torch.randint(0, 3, (n,)))
    return (
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        DataLoader(data, batch_size=batch_size),
    )


def _runner(**kwargs: Any) -> Runner:
    model, opt, loader = _parts()
    kwargs.setdefault("loss_fn", CE)
    if "max_iters" not in kwargs:
        kwargs.setdefault("max_epochs", 2)
    return Runner(model, opt, loader, **kwargs)


def test_the_loop_module_holds_only_join_point_functions() -> None:
    """_loop defines exactly the runner's join points and names no other concern's code."""
    functions = {
        n
        for n, v in vars(_loop).items()
        if inspect.isfunction(v) and v.__module__ == _loop.__name__
    }
    assert functions == set(JOINPOINTS)
    tree = ast.parse(inspect.getsource(_loop))
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    used |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    forbidden = {
        "scheduler",
        "lr_scheduler",
        "save",
        "load",
        "structlog",
        "logger",
        "autocast",
        "clip_grad_norm_",
        "ema",
        "perf_counter",
        "time",
        "metrics_fn",
        "GradScaler",
    }
    assert used & forbidden == set()


def test_epoch_based_run_counts_epochs_and_iterations() -> None:
    """max_epochs=2 over 3 batches per epoch runs 6 iterations and ends at epoch 2."""
    calls: list[tuple[int, int, int]] = []
    runner = _runner()
    runner.weaver.before("train_iter")(
        lambda ctx: calls.append((ctx.runner.epoch, ctx.runner.iter, ctx.runner.inner_iter))
    )
    runner.run()
    assert calls == [(0, 0, 0), (0, 1, 1), (0, 2, 2), (1, 3, 0), (1, 4, 1), (1, 5, 2)]
    assert (runner.epoch, runner.iter, runner.inner_iter) == (2, 6, 0)


def test_iteration_based_run_stops_mid_epoch() -> None:
    """max_iters=4 stops after the fourth iteration, in the second epoch."""
    runner = _runner(max_iters=4)
    runner.run()
    assert (runner.iter, runner.epoch, runner.inner_iter) == (4, 1, 1)


@pytest.mark.parametrize("limits", [{"max_iters": 6}, {"max_epochs": 2}])
def test_a_run_that_ends_on_an_epoch_boundary_ends_that_epoch(limits: dict[str, int]) -> None:
    """max_iters=6 over 3 batches per epoch ends where max_epochs=2 does: epoch 2 counted,
    and the epoch-end advice (validation every 2 epochs here) sees it."""
    runner = _runner(val_loader=_parts()[2], aspects=[Evaluate(interval=2)], **limits)
    validated: list[tuple[int, int]] = []
    runner.weaver.after("val_epoch")(
        lambda ctx: validated.append((ctx.runner.iter, ctx.runner.epoch))
    )
    runner.run()
    assert (runner.iter, runner.epoch, runner.inner_iter) == (6, 2, 0)
    assert validated == [(6, 2)]


def test_a_stop_on_the_last_batch_still_ends_the_epoch() -> None:
    """runner.stop() on an epoch's last iteration: that epoch is complete, and counted."""
    runner = _runner(max_epochs=5)
    runner.weaver.after("train_iter")(
        lambda ctx: ctx.runner.stop("enough") if ctx.runner.iter == 3 else None
    )
    runner.run()
    assert (runner.iter, runner.epoch, runner.inner_iter) == (3, 1, 0)


class _Streaming:
    """A loader whose length is unknown: ``len()`` raises NotImplementedError."""

    def __init__(self, batches: list[Any]) -> None:
        self.batches = batches

    def __iter__(self) -> Any:
        return iter(self.batches)

    def __len__(self) -> int:
        raise NotImplementedError("streaming: length unknown")


def test_a_loader_without_a_length_runs_to_max_iters() -> None:
    """Epoch ends and GradAccumulation's last group need the length only when it exists."""
    from aspecthook.train.aspects import GradAccumulation

    model, opt, loader = _parts()
    runner = Runner(
        model,
        opt,
        _Streaming(list(loader)),
        loss_fn=CE,
        max_iters=5,
        aspects=[GradAccumulation(2)],
    )
    runner.run()
    assert (runner.iter, runner.epoch) == (5, 1)


def test_a_train_loader_without_batches_is_refused_before_training() -> None:
    """drop_last with fewer samples than a batch gives len() == 0: run() refuses it, not a
    run that trains nothing (max_epochs) or spins forever (max_iters)."""
    model, opt, _ = _parts()
    data = TensorDataset(torch.randn(5, 4), torch.randint(0, 3, (5,)))
    empty = DataLoader(data, batch_size=8, drop_last=True)
    for limits in ({"max_epochs": 3}, {"max_iters": 10}):
        runner = Runner(model, opt, empty, loss_fn=CE, **limits)  # may be filled before run()
        with pytest.raises(RunnerError, match="train_loader has no batches"):
            runner.run()
        assert runner.iter == 0


def test_a_frozen_model_is_named_at_its_first_backward() -> None:
    """No parameter of the optimizer requires grad: the run stops at the first
    backward() with a RunnerError that says so, instead of torch's error from inside it."""
    model, opt, loader = _parts()
    model.requires_grad_(False)
    runner = Runner(model, opt, loader, loss_fn=CE, max_epochs=1, default_aspects=False)
    with pytest.raises(RunnerError, match="none of the optimizer's parameters requires grad"):
        runner.run()
    assert runner.iter == 0


@pytest.mark.parametrize("stage", ["run", "train_epoch"])
def test_a_model_frozen_until_advice_unfreezes_it_trains(stage: str) -> None:
    """A model built frozen and unfrozen by advice as the run starts (a fine-tuning
    policy) trains: it was refused when run() began, before that advice ran."""
    model, opt, loader = _parts()
    model.requires_grad_(False)
    before = [p.detach().clone() for p in model.parameters()]
    runner = Runner(model, opt, loader, loss_fn=CE, max_epochs=1, default_aspects=False)
    runner.weaver.before(stage)(lambda ctx: model.requires_grad_(True))
    runner.run()
    assert runner.iter == len(loader)
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))


def _no_grad_step(runner: Runner, batch: Any) -> torch.Tensor:
    with torch.no_grad():
        return CE(runner.model(batch[0]), batch[1])


def _item_step(runner: Runner, batch: Any) -> torch.Tensor:
    return torch.tensor(CE(runner.model(batch[0]), batch[1]).item())


@pytest.mark.parametrize("step", [_no_grad_step, _item_step], ids=["no_grad", "item"])
@pytest.mark.parametrize("advised", [False, True], ids=["inlined", "backward_advised"])
def test_a_loss_without_grad_fn_is_named_with_the_fix(step: Any, advised: bool) -> None:
    """A step whose loss has no grad_fn (computed under no_grad, rebuilt from .item())
    stops the run with a RunnerError that says so, torch's error kept as its cause."""
    model, opt, loader = _parts()
    runner = Runner(model, opt, loader, train_step=step, max_epochs=1, default_aspects=False)
    if advised:
        runner.weaver.before("backward")(lambda ctx: None)
    with pytest.raises(RunnerError, match=r"loss has no grad_fn.*torch\.no_grad") as caught:
        runner.run()
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_a_model_frozen_during_the_run_is_named_at_its_backward() -> None:
    """Parameters frozen by advice after the run started: the failed backward() is
    explained as a frozen model."""
    model, opt, loader = _parts()
    runner = Runner(model, opt, loader, loss_fn=CE, max_epochs=1, default_aspects=False)
    runner.weaver.before("train_iter")(lambda ctx: model.requires_grad_(False))
    with pytest.raises(RunnerError, match="none of the optimizer's parameters requires grad"):
        runner.run()


def test_other_runtime_errors_of_a_run_pass_unchanged() -> None:
    """Only torch's no-grad_fn error is explained; another RuntimeError reaches the user
    as raised."""
    runner = _runner(max_epochs=1, default_aspects=False)

    def fail(ctx: Any) -> None:
        raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")

    runner.weaver.before("optimizer_step")(fail)  # the loss itself has its grad_fn
    with pytest.raises(RuntimeError, match="element 0") as caught:
        runner.run()
    assert not isinstance(caught.value, RunnerError)


def test_an_epoch_that_yields_no_batch_is_an_error_not_a_hang() -> None:
    """A loader without a length that yields nothing stops the run with a RunnerError."""
    model, opt, _ = _parts()
    runner = Runner(model, opt, _Streaming([]), loss_fn=CE, max_iters=10)
    with pytest.raises(RunnerError, match="gave no batch in epoch 0"):
        runner.run()


def test_validation_and_test_batches_go_to_the_runners_device() -> None:
    """device= moves every batch: training, validation and test alike ('meta' stands in
    for an accelerator here)."""
    model, opt, loader = _parts()
    seen: dict[str, set[str]] = {"train": set(), "val": set()}

    def train_step(runner: Runner, batch: Any) -> torch.Tensor:
        seen["train"].add(batch[0].device.type)
        return CE(runner.model(batch[0]), batch[1])

    def val_step(runner: Runner, batch: Any) -> dict[str, Any]:
        seen["val"].add(batch[0].device.type)
        return {}

    runner = Runner(
        model,
        opt,
        loader,
        val_loader=loader,
        test_loader=loader,
        train_step=train_step,
        val_step=val_step,
        max_epochs=1,
        device="meta",
        default_aspects=False,
    )
    runner.run()
    runner.val_epoch()
    runner.test_epoch()
    assert seen == {"train": {"meta"}, "val": {"meta"}}


class _Stream(torch.utils.data.IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    def __iter__(self) -> Any:
        torch.manual_seed(1)
        return iter([(torch.randn(4), torch.tensor(1)) for _ in range(6)])


def test_loaders_over_iterable_datasets_validate_and_test() -> None:
    """A DataLoader over an IterableDataset has no len(); validation and test still run."""
    model, opt, loader = _parts()
    stream = DataLoader(_Stream(), batch_size=2)
    runner = Runner(
        model, opt, loader, val_loader=stream, test_loader=stream, loss_fn=CE, max_epochs=1
    )
    assert "val/loss" in runner.run()
    runner.test_epoch()


def test_namedtuple_batches_move_to_the_device() -> None:
    """torch's collate keeps namedtuples; moving one to the device keeps its type."""
    from collections import namedtuple

    sample = namedtuple("sample", ["x", "y"])
    model, opt, _ = _parts()
    data = [sample(torch.randn(4), torch.tensor(i % 3)) for i in range(8)]
    seen: list[type] = []

    def train_step(runner: Runner, batch: Any) -> torch.Tensor:
        seen.append(type(batch))
        return CE(runner.model(batch.x), batch.y)

    runner = Runner(
        model,
        opt,
        DataLoader(data, batch_size=4),
        train_step=train_step,
        max_epochs=1,
        device="cpu",
    )
    runner.run()
    assert seen == [sample, sample]


def _batches_seen_on(device: str, batches: list[Any]) -> list[Any]:
    """The batches a step is given by a runner with ``device=`` (``'meta'`` shows, on a
    machine without an accelerator, which tensors were moved)."""
    model, opt, _ = _parts()
    seen: list[Any] = []

    def train_step(runner: Runner, batch: Any) -> torch.Tensor:
        seen.append(batch)
        return torch.zeros((), requires_grad=True)

    Runner(model, opt, batches, train_step=train_step, max_iters=len(batches), device=device).run()
    return seen


def test_dataclass_batches_move_to_the_device() -> None:
    """A dataclass batch (frozen too) comes to the step as a copy with its tensor fields
    moved; the loader's batch is left as it was."""
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Sample:
        x: torch.Tensor
        ids: list[int]

    given = Sample(torch.ones(2), [1, 2])
    [seen] = _batches_seen_on("meta", [given])
    assert type(seen) is Sample
    assert seen.x.device == torch.device("meta")
    assert seen.ids == [1, 2]
    assert given.x.device == torch.device("cpu")


def test_mapping_batches_keep_their_type_on_the_device() -> None:
    """An OrderedDict or a defaultdict batch comes to the step as that type, moved."""
    import collections

    ordered = collections.OrderedDict(x=torch.ones(2))
    default = collections.defaultdict(list, x=torch.ones(2))
    seen = _batches_seen_on("meta", [ordered, default])
    assert [type(b) for b in seen] == [collections.OrderedDict, collections.defaultdict]
    assert seen[1].default_factory is list
    assert all(b["x"].device == torch.device("meta") for b in seen)


def test_batches_are_copied_to_a_host_device_blocking(monkeypatch: pytest.MonkeyPatch) -> None:
    """non_blocking=True only for a CUDA target: a non-blocking copy to the host may be
    read before it is complete."""
    calls: list[bool] = []
    to = torch.Tensor.to

    def spy(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append(kwargs.get("non_blocking", False))
        return to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", spy)
    _batches_seen_on("cpu", [(torch.ones(2), torch.ones(2))])
    assert len(calls) >= 2  # the model's parameters and the batch
    assert not any(calls)


def test_a_run_cut_inside_an_epoch_does_not_end_it() -> None:
    """max_iters=4 over 3 batches per epoch: the per-epoch schedule steps for epoch 1
    only, not for the unfinished second (a resumed run finishes it); validation runs after
    epoch 1 and once more for the final model, at the run's end."""
    model, opt, loader = _parts()
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    runner = Runner(
        model,
        opt,
        loader,
        val_loader=_parts()[2],
        scheduler=scheduler,
        loss_fn=CE,
        max_iters=4,
    )
    validated: list[int] = []
    runner.weaver.after("val_epoch")(lambda ctx: validated.append(ctx.runner.iter))
    runner.run()
    assert (runner.iter, runner.epoch, runner.inner_iter) == (4, 1, 1)
    assert scheduler.last_epoch == 1
    assert validated == [3, 4]


def test_every_join_point_is_advisable_with_ctx_runner() -> None:
    """Advice on each train join point sees ctx.runner, in the nesting order of the loop."""
    order: list[str] = []
    runner = _runner(max_iters=1)
    for name in ("run", "train_epoch", "train_iter", "forward", "backward", "optimizer_step"):
        runner.weaver.before(name)(
            lambda ctx, n=name: order.append(n) if ctx.runner is runner else None
        )
    runner.run()
    assert order == ["run", "train_epoch", "train_iter", "forward", "backward", "optimizer_step"]


def test_aspects_advise_only_their_own_runner_and_module_advice_reaches_all() -> None:
    """Runner aspects are local; a module-level @after('train_iter') reaches every runner."""
    seen: list[int] = []
    a, b = _runner(max_iters=2), _runner(max_iters=3)
    a.weaver.after("train_iter")(lambda ctx: seen.append(1))
    with ah.after("train_iter")(lambda ctx: seen.append(0)):
        a.run()
        b.run()
    assert seen.count(1) == 2
    assert seen.count(0) == 5


def test_idle_join_points_are_the_loop_functions_themselves() -> None:
    """A join point without advice is the bound loop function (it costs the loop nothing);
    advice added later, by the runner or at module level, reaches it at once, and goes
    again with its handle."""
    runner = _runner(max_iters=2, default_aspects=False)
    for name in ("forward", "backward", "optimizer_step", "train_iter", "train_epoch"):
        bound = getattr(runner, name)
        assert bound.__func__ is getattr(_loop, name), name
        assert bound.__self__ is runner, name
    seen: list[str] = []
    handle = runner.weaver.before("forward")(lambda ctx: seen.append("local"))
    with ah.after("backward")(lambda ctx: seen.append("module")):
        assert getattr(runner.forward, "__func__", None) is not _loop.forward
        runner.run()
    assert seen == ["local", "module"] * 2
    assert runner.backward.__func__ is _loop.backward  # type: ignore[attr-defined]
    handle.remove()
    assert runner.forward.__func__ is _loop.forward  # type: ignore[attr-defined]
    runner.run()  # at its limit already: runs no iteration, and nothing is advised
    assert seen == ["local", "module"] * 2


@pytest.mark.parametrize("advised", ["forward", "backward", "optimizer_step"])
def test_train_iter_inlines_idle_inner_points_with_the_same_result(advised: str) -> None:
    """While forward, backward and optimizer_step have no advice, train_iter runs their
    bodies itself; advice on any one of them sends every call through all three. Both
    ways train to the same bits."""
    plain = _runner(max_iters=5, default_aspects=False)
    assert plain.inner_idle
    plain.run()

    calls: list[str] = []
    runner = _runner(max_iters=5, default_aspects=False)
    handle = runner.weaver.before(advised)(lambda ctx: calls.append(advised))
    assert not runner.inner_idle
    runner.run()
    assert calls == [advised] * 5
    for a, b in zip(plain.model.parameters(), runner.model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert torch.equal(plain.outputs["loss"], runner.outputs["loss"])
    handle.remove()
    assert runner.inner_idle
    with ah.after(advised)(lambda ctx: None):  # module-level advice counts too
        assert not runner.inner_idle
    assert runner.inner_idle


def test_a_closed_runner_is_collected() -> None:
    """The join points that keep the runner's attributes current hold it weakly."""
    import gc
    import weakref

    runner = _runner(max_iters=1, aspects=[Logger(json_file=None)])
    runner.run()
    runner.close()
    ref = weakref.ref(runner)
    del runner
    gc.collect()
    assert ref() is None


def test_validation_every_n_epochs_and_every_n_iterations() -> None:
    """Evaluate(interval=2) validates after epochs 2 and 4; by_epoch=False every 5 iterations."""
    model, opt, loader = _parts()
    val = DataLoader(TensorDataset(torch.randn(4, 4), torch.randint(0, 3, (4,))), batch_size=4)
    epochs: list[int] = []
    runner = Runner(
        model, opt, loader, val_loader=val, loss_fn=CE, max_epochs=4, aspects=[Evaluate(2)]
    )
    runner.weaver.before("val_epoch")(lambda ctx: epochs.append(ctx.runner.epoch))
    runner.run()
    assert epochs == [2, 4]
    assert "val/loss" in runner.metrics
    iters: list[int] = []
    model, opt, loader = _parts()
    runner = Runner(
        model,
        opt,
        loader,
        val_loader=val,
        loss_fn=CE,
        max_iters=12,
        aspects=[Evaluate(5, by_epoch=False)],
    )
    runner.weaver.before("val_epoch")(lambda ctx: iters.append(ctx.runner.iter))
    runner.run()
    assert iters == [5, 10, 12]  # and at the run's end: run() returns the final metrics


@pytest.mark.parametrize(
    ("limits", "evaluate", "expected"),
    [
        ({"max_epochs": 3}, {"interval": 2}, [(2, 6), (3, 9)]),
        ({"max_iters": 9}, {"interval": 2}, [(2, 6), (3, 9)]),  # ends on an epoch boundary
        ({"max_iters": 8}, {"interval": 2}, [(2, 6), (3, 8)]),  # ends inside epoch 3
        ({"max_epochs": 2}, {"interval": 4, "by_epoch": False}, [(2, 4), (2, 6)]),
    ],
)
def test_a_run_that_reaches_its_limits_validates_its_final_model(
    limits: dict[str, int], evaluate: dict[str, Any], expected: list[tuple[int, int]]
) -> None:
    """Validation at the run's last epoch / iteration even when the interval does not
    divide the run, or max_iters ends it inside an epoch (as OpenMMLab's loops do)."""
    model, opt, loader = _parts()
    val = DataLoader(TensorDataset(torch.randn(4, 4), torch.randint(0, 3, (4,))), batch_size=4)
    seen: list[tuple[int, int]] = []
    runner = Runner(
        model, opt, loader, val_loader=val, loss_fn=CE, aspects=[Evaluate(**evaluate)], **limits
    )
    runner.weaver.before("val_epoch")(
        lambda ctx: seen.append(
            (ctx.runner.epoch + (1 if ctx.runner.inner_iter else 0), ctx.runner.iter)
        )
    )
    runner.run()
    assert seen == expected


def test_a_stopped_run_is_not_validated_again() -> None:
    """stop() ends the run where it is: the last validation stays the last one."""
    model, opt, loader = _parts()
    val = DataLoader(TensorDataset(torch.randn(4, 4), torch.randint(0, 3, (4,))), batch_size=4)
    seen: list[int] = []
    runner = Runner(
        model, opt, loader, val_loader=val, loss_fn=CE, max_epochs=5, aspects=[Evaluate(2)]
    )
    runner.weaver.after("train_epoch", priority="HIGHEST")(
        lambda ctx: ctx.runner.stop("enough") if ctx.runner.epoch == 3 else None
    )
    runner.weaver.before("val_epoch")(lambda ctx: seen.append(ctx.runner.epoch))
    runner.run()
    assert seen == [2]


def test_stop_ends_the_run_after_the_current_iteration_with_its_reason() -> None:
    """runner.stop(reason) from advice finishes the iteration, then the run returns."""
    runner = _runner(max_epochs=5)
    runner.weaver.after("train_iter")(
        lambda ctx: ctx.runner.iter == 2 and ctx.runner.stop("enough")
    )
    runner.run()
    assert runner.iter == 2
    assert runner.stop_reason == "enough"


def test_a_user_callable_becomes_a_join_point_of_the_run() -> None:
    """Runner.joinpoint declares a callable of the user's; its advice gets ctx.runner."""
    runner = _runner(max_iters=2)
    seen: list[Any] = []

    @runner.joinpoint("score")
    def score(x: torch.Tensor) -> float:
        return float(x.sum())

    runner.weaver.after("score")(lambda ctx: seen.append(ctx.runner))

    def step(r: Runner, batch: Any) -> torch.Tensor:
        score(batch[0])
        return CE(r.model(batch[0]), batch[1])

    runner.train_step = step
    runner.run()
    assert seen == [runner, runner]


def test_runner_joinpoint_without_a_name_uses_the_callables_path() -> None:
    """@runner.joinpoint and @runner.joinpoint() declare a callable under its dotted name,
    as @joinpoint does, on this run only."""
    runner = _runner(max_iters=1)
    seen: list[str] = []

    @runner.joinpoint
    def bare(x: int) -> int:
        return x + 1

    @runner.joinpoint()
    def called(x: int) -> int:
        return x * 2

    runner.weaver.before("*.bare")(lambda ctx: seen.append(ctx.joinpoint.name))
    runner.weaver.before("*.called")(lambda ctx: seen.append(ctx.joinpoint.name))
    assert (bare(1), called(2)) == (2, 4)
    prefix = f"{__name__}.test_runner_joinpoint_without_a_name_uses_the_callables_path.<locals>"
    assert seen == [f"{prefix}.bare", f"{prefix}.called"]


def test_train_step_may_return_a_dict_with_extra_outputs() -> None:
    """A train_step returning {'loss': ..., 'extra': ...} exposes both in runner.outputs."""
    runner = _runner(
        max_iters=1,
        loss_fn=None,
        train_step=lambda r, b: {"loss": CE(r.model(b[0]), b[1]), "extra": 7},
    )
    runner.run()
    assert runner.outputs["extra"] == 7


class _Pair(tuple):  # type: ignore[type-arg]
    """A tuple subclass (as a namedtuple batch is)."""


@pytest.mark.parametrize(
    "wrap",
    [
        tuple,
        list,
        _Pair,
        lambda xy: {"inputs": xy[0], "targets": xy[1]},
    ],
    ids=["tuple", "list", "tuple-subclass", "dict"],
)
def test_the_default_step_takes_every_batch_shape_it_documents(wrap: Any) -> None:
    """(x, y) tuples, lists and tuple subclasses and {'inputs', 'targets'} dicts train
    exactly as the hand-written loss_fn(model(x), y) does."""
    model, opt, loader = _parts()
    runner = Runner(model, opt, [wrap(b) for b in loader], loss_fn=CE, max_epochs=1)
    runner.run()
    reference, ref_opt, ref_loader = _parts()
    for x, y in ref_loader:
        CE(reference(x), y).backward()
        ref_opt.step()
        ref_opt.zero_grad(set_to_none=True)
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_loss_of_one_element_is_a_loss_and_a_vector_is_not() -> None:
    """A loss of shape (1,) trains; a per-sample loss (shape (4,)) is refused at once."""
    runner = _runner(max_iters=2, loss_fn=lambda out, y: CE(out, y).reshape(1))
    runner.run()
    assert runner.iter == 2
    runner = _runner(max_iters=2, loss_fn=lambda out, y: CE(out, y, reduction="none"))
    with pytest.raises(RunnerError, match=r"returned Tensor of shape \(4,\) \(reduce it"):
        runner.run()
    assert runner.iter == 0


@pytest.mark.parametrize(
    ("result", "said"),
    [
        ({"loss_cls": torch.ones(())}, "returned dict without 'loss' (keys: 'loss_cls')"),
        ({"loss": 0.5}, "returned dict whose 'loss' is float"),
        (0.5, "returned float, not a loss"),
        ({"loss": torch.ones(3)}, "returned dict whose 'loss' has shape (3,) (reduce it"),
    ],
)
def test_a_step_result_that_is_no_loss_is_named_in_the_error(result: Any, said: str) -> None:
    """The error says what the step gave: a dict's keys, the type of its 'loss'."""
    runner = _runner(max_iters=1, train_step=lambda r, b: result)
    with pytest.raises(RunnerError, match=re.escape(said)):
        runner.run()


def test_a_device_moves_every_batch_before_the_step() -> None:
    """With device= the step sees the batches on that device, the loader's as they are."""
    seen: list[torch.device] = []
    model, opt, loader = _parts()

    def step(r: Runner, batch: Any) -> torch.Tensor:
        seen.append(batch[0].device)
        return CE(r.model(batch[0]), batch[1])

    Runner(model, opt, loader, train_step=step, max_epochs=1, device="cpu").run()
    assert seen == [torch.device("cpu")] * 3


def test_close_removes_the_aspects_given_at_construction_and_added_later() -> None:
    """All aspects given to the runner advise it; add_aspect's handle removes only its
    own advice; close() leaves no advice at any join point."""

    class Note(ah.Aspect):
        def __init__(self, tag: str) -> None:
            super().__init__(name=tag)

        def after_train_iter(self, ctx: ah.CallContext) -> None:
            pass

    runner = _runner(aspects=[Note("a"), Note("b")], default_aspects=False)
    handle = runner.add_aspect(Note("c"))
    names = runner.describe().advice_names("train_iter", "after")
    assert names == ["a.after_train_iter", "b.after_train_iter", "c.after_train_iter"]
    handle.remove()
    assert runner.describe().advice_names("train_iter", "after") == names[:2]
    runner.close()
    assert runner.describe().advice_names("train_iter", "after") == []


def test_a_closed_runner_refuses_to_run_or_test() -> None:
    """After close() its aspects are gone: run() and test() say so instead of going on
    without them; a second close() does nothing."""
    model, opt, loader = _parts()
    runner = Runner(model, opt, loader, loss_fn=CE, max_iters=2, test_loader=loader)
    runner.run()
    runner.close()
    runner.close()
    runner.max_iters = 4
    with pytest.raises(RunnerError, match=r"closed runner: close\(\) removed its aspects"):
        runner.run()
    with pytest.raises(RunnerError, match=r"runner.test\(\) on a closed runner"):
        runner.test()
    assert runner.iter == 2


def test_describe_lists_the_subscribers_the_runners_events_run() -> None:
    """runner.describe() lists its aspects' event subscribers (on its local weaver) and
    the global ones its events reach too, in the order they run; describe() of the
    process leaves out the runner's own, which the process's events do not reach."""

    class Upload(ah.Aspect):
        @ah.on("checkpoint.saved", priority="high")
        def push(self, event: Any) -> None:
            pass

    runner = _runner(aspects=[Upload()], default_aspects=False)
    handle = ah.on("checkpoint.*", name="audit")(lambda e: None)
    names = runner.describe().advice_names("checkpoint.saved", "on")
    assert names == ["upload.push", "audit"]
    assert [r.advice for r in ah.describe() if r.stage == "on"] == ["audit"]
    handle.remove()
    runner.close()
    assert runner.describe().advice_names("checkpoint.saved", "on") == []


def test_a_closed_runner_takes_no_more_aspects_but_still_describes_and_emits() -> None:
    """After close() add_aspect() and joinpoint() raise RunnerError, and its weaver refuses
    registrations (WeaverClosedError); describe() and the weaver's events still work."""
    runner = _runner(max_iters=1)
    runner.close()
    with pytest.raises(RunnerError, match=r"runner.add_aspect\(\) on a closed runner"):
        runner.add_aspect(Logger(json_file=None))
    with pytest.raises(RunnerError, match=r"runner.joinpoint\(\) on a closed runner"):
        runner.joinpoint("augment")
    with pytest.raises(WeaverClosedError, match="build a new Runner"):
        runner.weaver.before("train_iter")(lambda ctx: None)
    assert runner.describe().advice_names("train_iter", "before") == []
    assert runner.weaver.emit("checkpoint.saved", path="x").payload == {"path": "x"}


def test_run_called_from_advice_of_its_own_run_is_refused() -> None:
    """A nested run() would train to the end inside one iteration's advice: it raises, and
    the run goes on to its limit once the advice has caught it; run() works after it."""
    runner = _runner(max_iters=4)
    errors: list[str] = []

    def again(ctx: ah.CallContext) -> None:
        if ctx.runner.iter == 1:
            with pytest.raises(RunnerError, match="from advice of this runner's own run") as e:
                ctx.runner.run()
            errors.append(str(e.value))

    runner.weaver.after("train_iter")(again)
    runner.run()
    assert (runner.iter, len(errors)) == (4, 1)
    runner.max_iters = 5
    runner.run()
    assert runner.iter == 5


def test_default_aspects_run_before_custom_ones_of_equal_priority() -> None:
    """Shipped aspects run in priority order; an equal-priority custom aspect runs after."""

    class Custom(ah.Aspect):
        priority = ah.Priority.BELOW_NORMAL  # Logger's priority

        def after_train_iter(self, ctx: ah.CallContext) -> None:
            pass

    runner = _runner(aspects=[Custom(), ProgressBar(), Logger(interval=1)])
    names = runner.describe().advice_names("train_iter", "after")
    assert names == [
        "logger.after_train_iter",
        "custom.after_train_iter",
        "progress_bar.after_train_iter",
    ]


def test_order_after_places_a_custom_aspect_after_a_shipped_one() -> None:
    """order_after=('checkpoint',) moves a higher-priority custom aspect behind Checkpoint."""

    class Upload(ah.Aspect):
        priority = ah.Priority.HIGHEST
        order_after = ("checkpoint",)

        def after_train_epoch(self, ctx: ah.CallContext) -> None:
            pass

    runner = _runner(work_dir=None, aspects=[Upload(), Checkpoint(interval=1)], max_epochs=1)
    names = runner.describe().advice_names("train_epoch", "after")
    assert names.index("upload.after_train_epoch") > names.index("checkpoint.after_train_epoch")


def test_failing_observability_aspect_is_logged_and_training_continues() -> None:
    """A Logger whose every call fails (errors='log') does not stop the run."""
    logger = Logger(interval=1)
    logger._emit = lambda *a, **k: 1 / 0  # type: ignore[method-assign,assignment]
    runner = _runner(aspects=[logger])
    with structlog.testing.capture_logs() as logs:
        runner.run()
    assert runner.iter == 6
    assert sum(e["event"] == "advice.failed" for e in logs) == 6


# -- bad input: a specific error that says what to do, before training starts -------------


def test_limits_must_be_exactly_one_of_max_epochs_and_max_iters() -> None:
    """Both or neither of max_epochs/max_iters is refused at construction."""
    model, opt, loader = _parts()
    with pytest.raises(RunnerError, match="exactly one of max_epochs"):
        Runner(model, opt, loader, loss_fn=CE)
    with pytest.raises(RunnerError, match="exactly one of max_epochs"):
        Runner(model, opt, loader, loss_fn=CE, max_epochs=1, max_iters=3)


@pytest.mark.parametrize("option", ["max_epochs", "max_iters"])
@pytest.mark.parametrize("value", [0, -1, 1.5, True], ids=["zero", "negative", "float", "bool"])
def test_limits_must_be_positive_ints(option: str, value: Any) -> None:
    """A zero, negative, fractional or bool max_epochs / max_iters is refused at construction."""
    model, opt, loader = _parts()
    with pytest.raises(RunnerError, match=f"{option}={value!r} must be a positive int"):
        Runner(model, opt, loader, loss_fn=CE, **{option: value})


def test_scheduler_on_another_optimizer_is_refused() -> None:
    """A scheduler built on a different optimizer object is refused at construction."""
    model, opt, loader = _parts()
    other = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(RunnerError, match="different optimizer"):
        Runner(
            model,
            opt,
            loader,
            loss_fn=CE,
            max_epochs=1,
            scheduler=torch.optim.lr_scheduler.StepLR(other, 1),
        )


def test_work_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    """A work_dir path that is an existing file cannot hold checkpoints: refused."""
    target = tmp_path / "file"
    target.write_text("")
    model, opt, loader = _parts()
    with pytest.raises(RunnerError, match="not writable"):
        Runner(model, opt, loader, loss_fn=CE, max_epochs=1, work_dir=target)


def test_model_that_returns_no_loss_fails_before_any_step() -> None:
    """Without loss_fn the model's output must be a loss: the first step says what to do."""
    runner = _runner(loss_fn=None, max_iters=3)
    before = [p.detach().clone() for p in runner.model.parameters()]
    with pytest.raises(RunnerError, match=r"not a loss.*loss_fn="):
        runner.run()
    assert runner.iter == 0
    assert all(torch.equal(a, b) for a, b in zip(before, runner.model.parameters(), strict=True))


def test_resume_path_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    """Checkpoint(resume=<missing file>) fails at construction, before any training."""
    with pytest.raises(RunnerError, match=r"does not exist|not found|no such"):
        Checkpoint(resume=tmp_path / "missing.pt")


def test_non_aspect_in_aspects_is_refused() -> None:
    """aspects= takes Aspect instances (or adaptable hook objects); other objects fail."""
    with pytest.raises(RunnerError, match="aspects="):
        _runner(aspects=[object()])


@pytest.mark.parametrize("seed", ["1", 1.5, True, None])
def test_seed_everything_refuses_a_seed_that_is_not_an_int(seed: Any) -> None:
    """seed_everything('1') says a seed is an int; it raised numpy's 'not all arguments
    converted during string formatting'."""
    with pytest.raises(InvalidOptionError, match=r"a seed is an int"):
        seed_everything(seed)


def test_a_numpy_integer_is_a_seed() -> None:
    """seed_everything(np.int64(3)) and Runner(seed=np.int64(3)) seed as 3 does (python's
    random.seed refuses a numpy integer; the runner refused it as not an int)."""
    import random

    import numpy as np

    seed_everything(np.int64(3))
    drawn = random.random(), torch.rand(1).item(), float(np.random.rand())
    seed_everything(3)
    assert drawn == (random.random(), torch.rand(1).item(), float(np.random.rand()))
    seed = _runner(seed=np.int64(3)).seed
    assert (type(seed), seed) == (int, 3)


def test_an_aspect_class_or_name_in_aspects_says_to_give_an_instance() -> None:
    """aspects=[Logger] or aspects=['Logger'] (a config's spelling) say what to write."""
    with pytest.raises(
        RunnerError, match=r"the class Logger, not an instance: give Logger\("
    ) as exc:
        _runner(aspects=[Logger])
    assert "write an Aspect subclass" not in str(exc.value)
    with pytest.raises(RunnerError, match=r"names are for Runner.from_config.*Logger\(\.\.\.\)"):
        _runner(aspects=["Logger"])


def _every_run(start: int, *, general: bool, kind: str = "after") -> list[int]:
    """Iterations (1-based numbers) at which `every=3` advice on train_iter ran, for a run
    of 12 iterations whose counter starts at `start` (as a resumed run's does)."""
    runner = _runner(max_iters=12)
    runner.iter = start
    seen: list[int] = []
    offset = 1 if kind == "before" else 0  # before advice runs before the count moves on
    getattr(runner.weaver, kind)("train_iter", every=3)(
        lambda ctx: seen.append(ctx.runner.iter + offset)
    )
    if general:  # error advice sends every call through the general dispatcher
        runner.weaver.on_error("train_iter")(lambda ctx: None)
    runner.run()
    return seen


@pytest.mark.parametrize("general", [False, True], ids=["generated", "general"])
@pytest.mark.parametrize("kind", ["before", "after"])
def test_every_at_train_iter_counts_the_runs_iterations(kind: str, general: bool) -> None:
    """every=3 at train_iter runs on iterations 3, 6, 9, ... of the run, before and after."""
    assert _every_run(0, general=general, kind=kind) == [3, 6, 9, 12]


@pytest.mark.parametrize("general", [False, True], ids=["generated", "general"])
def test_every_keeps_the_runs_schedule_after_a_resume(general: bool) -> None:
    """A run resumed at iteration 4 runs every=3 advice at 6, 9, 12, as the whole run did."""
    assert _every_run(4, general=general) == [6, 9, 12]


@pytest.mark.parametrize("start", [0, 1])
def test_every_at_train_epoch_counts_the_runs_epochs(start: int) -> None:
    """every=2 at train_epoch runs after epochs 2 and 4, also when resumed at epoch 1."""
    runner = _runner(max_epochs=5)
    runner.epoch = start
    seen: list[int] = []
    runner.weaver.after("train_epoch", every=2)(lambda ctx: seen.append(ctx.runner.epoch))
    runner.run()
    assert seen == [2, 4]


def test_every_with_other_filters_still_counts_the_runs_iterations() -> None:
    """every= next to when= keeps the run's numbering (the filter runs as a wrapper)."""
    runner = _runner(max_iters=12)
    runner.iter = 4
    seen: list[int] = []
    runner.weaver.after("train_iter", every=3, when=lambda ctx: True)(
        lambda ctx: seen.append(ctx.runner.iter)
    )
    runner.run()
    assert seen == [6, 9, 12]


@pytest.mark.parametrize("general", [False, True], ids=["generated", "general"])
def test_window_at_train_iter_counts_the_runs_iterations(general: bool) -> None:
    """every=5, window=2 at train_iter runs after iterations 4, 5, 9, 10, resumed or not."""
    for start, expected in ((0, [4, 5, 9, 10]), (4, [5, 9, 10])):
        runner = _runner(max_iters=12)
        runner.iter = start
        seen: list[int] = []
        runner.weaver.after("train_iter", every=5, window=2)(
            lambda ctx, seen=seen: seen.append(ctx.runner.iter)
        )
        if general:
            runner.weaver.on_error("train_iter")(lambda ctx: None)
        runner.run()
        assert seen == expected


@pytest.mark.parametrize("new_limit", [4, 7])
def test_max_iters_changed_during_an_epoch_takes_effect_at_once(new_limit: int) -> None:
    """Lowering or raising max_iters from advice mid-epoch ends the run there, in one epoch."""
    runner = _runner(max_iters=5)  # 3 batches an epoch
    epochs: list[int] = []
    runner.weaver.after("train_iter")(
        lambda ctx: ctx.runner.iter == 2 and setattr(ctx.runner, "max_iters", new_limit)
    )
    runner.weaver.after("train_epoch")(lambda ctx: epochs.append(ctx.runner.epoch))
    runner.run()
    assert runner.iter == new_limit
    # train_epoch ends once per epoch begun; the last one is cut short (no epoch count).
    assert epochs == {4: [1, 1], 7: [1, 2, 2]}[new_limit]


def test_a_subclass_with_its_own_finished_is_asked_after_every_iteration() -> None:
    """The loop tests the stock limits without the property, but a subclass's own
    ``finished`` (a time or budget limit, say) is what ends its run."""

    class Budget(Runner):
        @property
        def finished(self) -> bool:
            return self.iter >= 5 or super().finished

    model, opt, loader = _parts()  # 3 batches an epoch
    runner = Budget(model, opt, loader, loss_fn=CE, max_epochs=10)
    runner.run()
    assert runner.iter == 5
    assert runner.finished
    plain = _runner(max_epochs=10)
    plain.run()
    assert plain.iter == 30  # the stock test: the epoch limit


class _SelfLoss(torch.nn.Module):
    """A model that takes the batch dict and returns its own loss (no loss_fn)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        logits = self.lin(batch["x"])
        return {"loss": CE(logits, batch["y"]), "logits": logits}


def test_a_model_that_returns_its_loss_is_validated_on_it() -> None:
    """val/loss is the model's own loss, averaged over the samples (batches of 4, 4, 2)."""
    torch.manual_seed(0)
    rows = [{"x": torch.randn(4), "y": torch.tensor(i % 3)} for i in range(10)]
    model = _SelfLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(rows, batch_size=4)
    runner = Runner(model, opt, loader, val_loader=loader, max_epochs=1)
    metrics = runner.run()
    with torch.no_grad():
        losses = [(float(model(b)["loss"]), len(b["y"])) for b in loader]
    expected = sum(loss * n for loss, n in losses) / 10
    assert metrics["val/loss"] == pytest.approx(expected, rel=1e-6)


def test_runner_test_measures_the_test_loader_as_test_metrics() -> None:
    """runner.test() runs the test loop; Evaluate averages it as 'test/<name>', apart from
    the validation metrics, and a runner with only a test_loader gets Evaluate too."""
    model, opt, loader = _parts()
    other = DataLoader(TensorDataset(torch.randn(6, 4), torch.randint(0, 3, (6,))), batch_size=4)
    accuracy = {"acc": lambda out, y: (out.argmax(1) == y).float().mean()}
    runner = Runner(
        model,
        opt,
        loader,
        val_loader=loader,
        test_loader=other,
        loss_fn=CE,
        max_epochs=1,
        aspects=[Evaluate(metrics=accuracy)],
    )
    validated = dict(runner.run())
    metrics = runner.test()
    with torch.no_grad():
        x, y = other.dataset.tensors  # type: ignore[attr-defined]
        expected = float(CE(model(x), y))
    assert metrics["test/loss"] == pytest.approx(expected, rel=1e-6)
    assert set(metrics) == {"val/loss", "val/acc", "test/loss", "test/acc"}
    assert {k: metrics[k] for k in validated} == validated
    only_test = Runner(model, opt, loader, test_loader=other, loss_fn=CE, max_epochs=1)
    assert only_test.test()["test/loss"] == pytest.approx(expected, rel=1e-6)
    with pytest.raises(RunnerError, match="needs a test_loader"):
        _runner().test()


def test_advice_for_a_misspelt_join_point_is_reported_when_the_run_starts() -> None:
    """An aspect method or module-level advice one typo away from a join point of the run
    is never called: run() says so, with the name it probably meant."""

    class Typo(ah.Aspect):
        def after_trian_epoch(self, ctx: ah.CallContext) -> None: ...

    advice = ah.before("trian_iter")(lambda ctx: None)
    try:
        runner = _runner(aspects=[Typo()], max_epochs=1)
        with pytest.warns(UserWarning, match="did you mean") as caught:
            runner.run()
    finally:
        advice.remove()
    messages = sorted(str(w.message) for w in caught)
    assert any("'trian_epoch'" in m and "did you mean 'train_epoch'?" in m for m in messages)
    assert any("'trian_iter'" in m and "did you mean 'train_iter'?" in m for m in messages)


def test_advice_for_a_misspelt_glob_is_reported_when_the_run_starts() -> None:
    """Advice for a glob that matches no join point of the run but is one typo away from
    one (``'trian_*'``) is never called either: run() says so, as for a literal name; a
    glob that matches a join point of the run, or none close to it, is not reported."""
    runner = _runner(max_epochs=1)
    runner.weaver.before("trian_*")(lambda ctx: None)
    runner.weaver.after("val_*")(lambda ctx: None)  # matches val_epoch / val_iter
    runner.weaver.after("database.*")(lambda ctx: None)  # nothing of the run's
    with pytest.warns(UserWarning, match="did you mean") as caught:
        runner.run()
    [message] = [str(w.message) for w in caught]
    assert "no join point name matches 'trian_*'" in message
    assert "did you mean a pattern that matches 'train_" in message


def test_a_misspelt_name_with_glob_characters_is_reported_as_a_name() -> None:
    """A literal name (``Name``) with a bracket in it is a name, not a glob: the warning
    says no join point is named so, and suggests the name itself."""
    runner = _runner(max_epochs=1)
    runner.weaver.before(ah.Name("trian_iter[0]"))(lambda ctx: None)
    with pytest.warns(UserWarning, match="did you mean") as caught:
        runner.run()
    [message] = [str(w.message) for w in caught]
    assert "no join point is named 'trian_iter[0]'" in message
    assert "did you mean 'train_iter'?" in message


def test_an_epoch_whose_iterations_advice_skipped_is_not_an_empty_loader() -> None:
    """Before advice may skip every train_iter of an epoch: the loader did give batches."""
    runner = _runner(max_epochs=2)
    runner.weaver.before("train_iter")(lambda ctx: ctx.skip({}) if ctx.runner.epoch == 0 else None)
    runner.run()
    assert runner.epoch == 2


def test_an_optimizer_of_another_models_parameters_is_refused() -> None:
    """An optimizer holding none of the model's parameters would train nothing; a subset
    (a frozen part) is fine."""
    model, _, loader = _parts()
    other = torch.nn.Linear(4, 3)
    with pytest.raises(RunnerError, match="holds none of the model's parameters"):
        Runner(model, torch.optim.SGD(other.parameters(), lr=0.1), loader, loss_fn=CE, max_epochs=1)
    Runner(model, torch.optim.SGD([model.weight], lr=0.1), loader, loss_fn=CE, max_epochs=1)


@pytest.mark.parametrize("loss", ["tensor", "float"])
def test_a_val_step_that_returns_a_loss_is_validated_on_it(loss: str) -> None:
    """val_step returning a scalar, as train_step does: val/loss is its mean over the
    samples (batches of 4, 4, 2), not nothing."""
    model, opt, loader = _parts()
    val = DataLoader(TensorDataset(torch.randn(10, 4), torch.randint(0, 3, (10,))), batch_size=4)

    def val_step(runner: Runner, batch: Any) -> Any:
        value = CE(runner.model(batch[0]), batch[1])
        return value if loss == "tensor" else float(value)

    runner = Runner(model, opt, loader, val_loader=val, val_step=val_step, loss_fn=CE, max_epochs=1)
    metrics = runner.run()
    with torch.no_grad():
        expected = sum(float(CE(model(x), y)) * len(y) for x, y in val) / 10
    assert metrics["val/loss"] == pytest.approx(expected, rel=1e-6)


def test_a_val_step_that_returns_the_models_outputs_is_measured_as_the_default_step() -> None:
    """val_step returning the model's outputs (a model called its own way): Evaluate's
    metrics and val/loss take them with the batch's targets, as the default step's. The
    metrics were given None for the targets, and no loss was computed."""
    model, opt, loader = _parts()
    val = DataLoader(TensorDataset(torch.randn(10, 4), torch.randint(0, 3, (10,))), batch_size=4)
    seen: list[Any] = []

    def accuracy(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        seen.append(targets)
        return (outputs.argmax(1) == targets).float().mean()

    runner = Runner(
        model,
        opt,
        loader,
        val_loader=val,
        val_step=lambda runner, batch: runner.model(batch[0]),
        loss_fn=CE,
        max_epochs=1,
        aspects=[Evaluate(metrics={"acc": accuracy})],
    )
    metrics = runner.run()
    assert all(isinstance(t, torch.Tensor) for t in seen)
    with torch.no_grad():
        acc = sum(float((model(x).argmax(1) == y).float().sum()) for x, y in val) / 10
        loss = sum(float(CE(model(x), y)) * len(y) for x, y in val) / 10
    assert metrics["val/acc"] == pytest.approx(acc)
    assert metrics["val/loss"] == pytest.approx(loss, rel=1e-6)


def test_further_scalars_of_a_val_step_dict_are_averaged_as_the_loss_is() -> None:
    """val_step returning {'loss', 'acc', ...}: acc is averaged over the validation set
    weighted by batch size, as val/acc (and test/acc), as the loss is; what is no scalar
    is left out; a name metrics= has too is refused."""
    model, opt, loader = _parts()
    val = DataLoader(TensorDataset(torch.randn(10, 4), torch.randint(0, 3, (10,))), batch_size=4)

    def step(runner: Runner, batch: Any) -> dict[str, Any]:
        x, y = batch
        out = runner.model(x)
        return {
            "loss": CE(out, y),
            "acc": (out.argmax(1) == y).float().mean(),
            "seen": float(len(y)),  # a plain number: its mean weighted by batch size
            "outputs": out,
            "targets": y,
            "note": "text",
        }

    runner = Runner(
        model, opt, loader, val_loader=val, test_loader=val, val_step=step, loss_fn=CE, max_epochs=1
    )
    metrics = runner.run()
    with torch.no_grad():
        acc = sum(float((model(x).argmax(1) == y).float().sum()) for x, y in val) / 10
    assert metrics["val/acc"] == pytest.approx(acc)
    assert metrics["val/seen"] == pytest.approx((4 * 4 + 4 * 4 + 2 * 2) / 10)
    assert "val/note" not in metrics
    assert "val/outputs" not in metrics
    assert runner.test()["test/acc"] == pytest.approx(acc)

    runner = Runner(
        model,
        opt,
        loader,
        val_loader=val,
        val_step=step,
        loss_fn=CE,
        max_epochs=1,
        aspects=[Evaluate(metrics={"acc": lambda outputs, targets: 0.0})],
    )
    with pytest.raises(RunnerError, match="the step returns 'acc' and metrics= has one"):
        runner.run()


def test_a_numpy_scalar_in_a_val_step_dict_is_averaged_as_the_loss_is() -> None:
    """A val_step's further scalar computed with numpy (np.float32, np.int64: no Python
    float) is averaged as val/<name>, as a tensor or a float is; it was left out."""
    import numpy as np

    model, opt, loader = _parts()
    val = DataLoader(TensorDataset(torch.randn(10, 4), torch.randint(0, 3, (10,))), batch_size=4)

    def step(runner: Runner, batch: Any) -> dict[str, Any]:
        x, y = batch
        out = runner.model(x)
        hits = (out.argmax(1) == y).numpy()
        return {"loss": CE(out, y), "acc": hits.mean(dtype=np.float32), "hits": hits.sum()}

    runner = Runner(model, opt, loader, val_loader=val, val_step=step, loss_fn=CE, max_epochs=1)
    metrics = runner.run()
    with torch.no_grad():
        acc = sum(float((model(x).argmax(1) == y).float().sum()) for x, y in val) / 10
        hits = sum(float((model(x).argmax(1) == y).sum()) * len(y) for x, y in val) / 10
    assert metrics["val/acc"] == pytest.approx(acc)
    assert metrics["val/hits"] == pytest.approx(hits)


def test_run_and_test_return_the_metrics_as_they_were_then() -> None:
    """A copy: a later test() or run() does not change what an earlier call returned."""
    model, opt, loader = _parts()
    runner = Runner(
        model, opt, loader, val_loader=loader, test_loader=loader, loss_fn=CE, max_epochs=1
    )
    first = runner.run()
    kept = dict(first)
    tested = runner.test()
    runner.max_epochs = 2
    second = runner.run()
    assert first == kept
    assert "test/loss" not in first
    assert "test/loss" in tested
    assert second["val/loss"] != first["val/loss"]


@pytest.mark.parametrize("how", ["limits reached", "stopped", "stopped at the limits"])
def test_run_of_a_finished_runner_says_why_it_returns_at_once(how: str) -> None:
    """run() again with nothing left to do (the limits reached, or stop() called) trains
    no iteration and says so, with what to change to go on: only what would let it go
    on (the hint offered clearing stop_reason for a run at its limits, and raising the
    limits for a stopped one, where neither changes anything)."""
    model, opt, loader = _parts()
    runner = Runner(model, opt, loader, loss_fn=CE, max_epochs=1)
    if how != "stopped":
        runner.run()
    if how != "limits reached":
        runner.stop("enough")
    done = runner.iter
    with structlog.testing.capture_logs() as logs:
        runner.run()
    assert runner.iter == done
    [event] = [e for e in logs if e["event"] == "runner.finished"]
    stopped = how != "limits reached"
    assert event["reason"] == ("enough" if stopped else "max_epochs / max_iters reached")
    assert ("runner.stop_reason = None" in event["hint"]) is stopped
    assert ("raise max_epochs" in event["hint"]) is (how != "stopped")
    for step in (["stop_reason"] if stopped else []) + (["max_epochs"] if how != "stopped" else []):
        if step == "stop_reason":
            runner.stop_reason = None
        else:
            runner.max_epochs = 2
    runner.run()
    assert runner.iter > done  # what the hint said was enough to go on


@pytest.mark.parametrize(
    ("stage", "where"),
    [
        ("train_iter", "before"),  # before the iteration: it is trained again, nothing lost
        ("train_iter", "after"),  # in the advice after it: the iteration counts as done
        ("train_epoch", "after"),  # in the advice after an epoch (validation, say)
    ],
)
def test_run_again_after_a_break_in_the_advice_after_a_stage_says_what_did_not_run(
    stage: str, where: str
) -> None:
    """Ctrl-C in the advice that runs after an iteration or an epoch, then run() again:
    that iteration or epoch is counted, and its later advice never ran for it, which is
    reported with how to continue exactly; a break before the stage reports nothing."""
    model, opt, loader = _parts()
    runner = Runner(model, opt, loader, loss_fn=CE, max_epochs=2)
    fired: list[bool] = []

    def ctrl_c(ctx: ah.CallContext) -> None:
        if not fired and ctx.runner.epoch == 1:
            fired.append(True)
            raise KeyboardInterrupt

    getattr(runner.weaver, where)(stage)(ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        runner.run()
    with structlog.testing.capture_logs() as logs:
        runner.run()
    reports = [e for e in logs if e["event"] == "runner.stage_unfinished"]
    if where == "before":
        assert reports == []
    else:
        [report] = reports
        assert report["stage"] == stage
        assert "resume from the last checkpoint" in report["hint"]


@pytest.mark.parametrize("rank", [0, 1])
def test_what_run_says_as_it_starts_comes_from_rank_0_only(
    rank: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run with nothing left to do, and one after a break in the advice after an
    iteration, is the same on every rank: rank 0 says it once for all of them."""
    monkeypatch.setattr(Runner, "rank", property(lambda runner: rank))
    model, opt, loader = _parts()
    runner = Runner(model, opt, loader, loss_fn=CE, max_epochs=2)
    fired: list[bool] = []

    def ctrl_c(ctx: ah.CallContext) -> None:
        if not fired and ctx.runner.iter == 3:
            fired.append(True)
            raise KeyboardInterrupt

    runner.weaver.after("train_iter")(ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        runner.run()
    with structlog.testing.capture_logs() as logs:
        runner.run()
        runner.run()
    said = sorted(e["event"] for e in logs if e["event"].startswith("runner."))
    assert said == (["runner.finished", "runner.stage_unfinished"] if rank == 0 else [])


def test_evaluate_weights_batches_by_their_size_when_the_targets_are_a_dict() -> None:
    """Multi-task style targets ({'cls': y}): batches of 8, 8 and 2 count 8, 8 and 2."""
    torch.manual_seed(0)
    rows = [{"x": torch.randn(4), "targets": {"cls": torch.tensor(i % 3)}} for i in range(18)]
    model = torch.nn.Linear(4, 3)
    loader = DataLoader(rows, batch_size=8)

    def val_step(runner: Runner, batch: Any) -> dict[str, Any]:
        outputs = runner.model(batch["x"])
        targets = batch["targets"]
        return {"outputs": outputs, "targets": targets, "loss": CE(outputs, targets["cls"])}

    def train_step(runner: Runner, batch: Any) -> torch.Tensor:
        return CE(runner.model(batch["x"]), batch["targets"]["cls"])

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    runner = Runner(
        model,
        opt,
        loader,
        val_loader=loader,
        train_step=train_step,
        val_step=val_step,
        max_epochs=1,
    )
    metrics = runner.run()
    with torch.no_grad():
        expected = sum(float(CE(model(b["x"]), b["targets"]["cls"])) * len(b["x"]) for b in loader)
    assert metrics["val/loss"] == pytest.approx(expected / 18, rel=1e-6)


def test_evaluate_by_iteration_validates_the_end_of_a_run_over_a_loader_without_len() -> None:
    """max_epochs over an IterableDataset: the run's last iteration is known only when the
    loader runs out; the final model is validated then, once."""
    model, opt, _ = _parts()
    stream = DataLoader(_Stream(), batch_size=2)  # 3 batches an epoch, no len()
    val = DataLoader(TensorDataset(torch.randn(4, 4), torch.randint(0, 3, (4,))), batch_size=4)
    seen: list[int] = []
    runner = Runner(
        model,
        opt,
        stream,
        val_loader=val,
        loss_fn=CE,
        max_epochs=3,
        aspects=[Evaluate(4, by_epoch=False)],
    )
    runner.weaver.before("val_epoch")(lambda ctx: seen.append(ctx.runner.iter))
    runner.run()
    assert seen == [4, 8, 9]


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (
            lambda outputs, targets: (outputs.argmax(1) == targets).float(),
            r"Tensor of shape \(4,\)",
        ),
        (lambda outputs, targets: None, "NoneType"),
        (lambda outputs, targets: "0.5", "str"),
    ],
)
def test_a_metric_that_gives_no_number_is_refused_naming_it(value: Any, shown: str) -> None:
    """A per-sample tensor, None or a text for a batch: the error names the metric and
    what it gave (torch's own says only that a tensor has 4 elements)."""
    val = DataLoader(TensorDataset(torch.randn(4, 4), torch.randint(0, 3, (4,))), batch_size=4)
    runner = _runner(val_loader=val, max_epochs=1, aspects=[Evaluate(metrics={"acc": value})])
    with pytest.raises(RunnerError, match=f"'acc' gave {shown}"):
        runner.run()


def test_metric_values_may_be_numbers_numpy_scalars_or_one_element_tensors() -> None:
    """Each is averaged as a float."""
    np = pytest.importorskip("numpy")
    val = DataLoader(TensorDataset(torch.randn(4, 4), torch.randint(0, 3, (4,))), batch_size=4)
    metrics = {
        "a_int": lambda o, t: 1,
        "b_numpy": lambda o, t: np.float32(0.5),
        "c_tensor": lambda o, t: torch.tensor([0.25]),
        "d_bool": lambda o, t: True,
    }
    runner = _runner(val_loader=val, max_epochs=1, aspects=[Evaluate(metrics=metrics)])
    found = runner.run()
    assert [found[f"val/{name}"] for name in metrics] == [1.0, 0.5, 0.25, 1.0]


def test_a_metric_named_loss_beside_the_steps_loss_is_refused() -> None:
    """Both would be val/loss: the metric used to replace the step's loss silently."""
    val = DataLoader(TensorDataset(torch.randn(4, 4), torch.randint(0, 3, (4,))), batch_size=4)
    evaluate = Evaluate(metrics={"loss": lambda outputs, targets: 123.0})
    runner = _runner(val_loader=val, max_epochs=1, aspects=[evaluate])
    with pytest.raises(RunnerError, match="rename the metric"):
        runner.run()
    # Without a loss from the step (no loss_fn, a model giving logits) it is the loss.
    runner = _runner(val_loader=val, max_epochs=1, aspects=[evaluate], train_step=_ce_step)
    runner.loss_fn = None
    assert runner.run()["val/loss"] == 123.0


def _ce_step(runner: Runner, batch: Any) -> Any:
    return CE(runner.model(batch[0]), batch[1])


def test_evaluate_interval_true_is_refused() -> None:
    """Evaluate(True) is not an interval of one."""
    with pytest.raises(ah.errors.InvalidOptionError, match="interval"):
        Evaluate(True)


@pytest.mark.parametrize("value", [None, "no", 0, 1.0])
def test_evaluate_by_epoch_that_is_not_a_bool_is_refused(value: Any) -> None:
    """Evaluate(by_epoch=None) would validate every ``interval`` iterations without a word."""
    with pytest.raises(
        ah.errors.InvalidOptionError, match=r"Evaluate\(by_epoch=.*must be True or False"
    ):
        Evaluate(by_epoch=value)


def test_a_validation_loader_with_no_batches_is_reported() -> None:
    """A generator used up by the first validation: the next one warns instead of letting
    early stopping and the best checkpoint judge the old figures again."""
    model, opt, loader = _parts()
    batches = ((x, y) for x, y in [(torch.randn(4, 4), torch.randint(0, 3, (4,)))])
    runner = Runner(model, opt, loader, val_loader=batches, loss_fn=CE, max_epochs=3)
    with pytest.warns(RuntimeWarning, match="val_loader gave no batches") as caught:
        runner.run()
    assert len([w for w in caught if "gave no batches" in str(w.message)]) == 1  # once


def test_a_validation_without_batches_is_reported_by_rank_0_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In a distributed run the ranks add up their counts, so all would report an empty
    validation alike: rank 0 says it, as it does the repeated-sample warning."""
    import warnings

    monkeypatch.setattr(Runner, "rank", property(lambda runner: 1))
    model, opt, loader = _parts()
    runner = Runner(model, opt, loader, val_loader=[], loss_fn=CE, max_epochs=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runner.run()
    assert not [w for w in caught if "gave no batches" in str(w.message)]


@pytest.mark.parametrize("rank", [0, 1])
def test_end_of_run_advice_warnings_come_from_rank_0_only(
    rank: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a run without validation (or a plateau's mode) is told, every rank would tell
    alike: rank 0 says it once (rank 0 is shown to say it at all)."""
    import warnings

    from aspecthook.train.aspects import EarlyStopping, LRSchedule

    monkeypatch.setattr(Runner, "rank", property(lambda runner: rank))
    model, opt, loader = _parts()
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min")
    runner = Runner(
        model,
        opt,
        loader,
        val_loader=loader,  # but no Evaluate: nothing validates
        loss_fn=CE,
        max_epochs=1,
        work_dir=tmp_path,
        aspects=[
            EarlyStopping(monitor="val/acc"),
            LRSchedule(plateau, monitor="val/acc"),
            Checkpoint(save_best="val/acc"),
        ],
        default_aspects=False,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runner.run()
    said = sorted(str(w.message).split(" ")[0] for w in caught)
    expected = sorted(
        [
            "Checkpoint(save_best='val/acc')",
            "EarlyStopping",
            "ReduceLROnPlateau(mode='min')",
            "ReduceLROnPlateau",  # never stepped
        ]
    )
    assert said == (expected if rank == 0 else [])


def test_a_run_resumed_from_its_last_iteration_does_not_validate_that_model_again(
    tmp_path: Path,
) -> None:
    """Evaluate(by_epoch=False) validated iteration 16, the run's last; the checkpoint of
    that iteration (written before the epoch's end) resumes without validating again."""

    def run(resume: str | None) -> list[int]:
        model, opt, loader = _parts(n=16, batch_size=2)  # 8 batches an epoch
        seen: list[int] = []
        runner = Runner(
            model,
            opt,
            loader,
            val_loader=loader,
            loss_fn=CE,
            max_epochs=2,
            work_dir=tmp_path,
            aspects=[
                Evaluate(5, by_epoch=False),
                Checkpoint(interval=4, by_epoch=False, resume=resume),
            ],
        )
        runner.weaver.before("val_epoch")(lambda ctx: seen.append(ctx.runner.iter))
        runner.run()
        return seen

    assert run(None) == [5, 10, 15, 16]
    assert run("auto") == []


def test_tracked_calls_of_advice_the_dispatcher_filters_by_iteration() -> None:
    """Logger's after_train_iter runs on the window before each log point, a test the
    runner's dispatcher makes itself: tracked, those are the calls counted."""
    model, opt, loader = _parts(n=32)
    runner = Runner(
        model,
        opt,
        loader,
        loss_fn=CE,
        max_iters=20,
        aspects=[Logger(interval=5, window=2, json_file=None)],
    )
    with ah.track_calls():
        runner.run()
    calls = {r.advice: r.calls for r in runner.describe() if r.joinpoint == "train_iter"}
    assert calls["logger.after_train_iter"] == 8  # iterations 4, 5, 9, 10, 14, 15, 19, 20


def test_the_training_signatures_resolve_at_run_time() -> None:
    """typing.get_type_hints resolves Runner.from_config and every training aspect's
    constructor (tools that build objects from annotations read them)."""
    import typing

    from aspecthook.train import aspects

    assert typing.get_type_hints(Runner.from_config)
    for name in aspects.__all__:
        kind = getattr(aspects, name)
        if isinstance(kind, type):
            assert typing.get_type_hints(kind.__init__), name


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_cuda_device_on_a_machine_without_one_is_refused_when_the_runner_is_built() -> None:
    """device='cuda' where torch has no CUDA is a RunnerError saying what to give; torch
    raises a bare AssertionError ('Torch not compiled with CUDA enabled') there."""
    model, opt, loader = _parts()
    with pytest.raises(RunnerError, match=r"device='cuda' cannot take the model .*device='cpu'"):
        Runner(model, opt, loader, loss_fn=CE, max_epochs=1, device="cuda")


@pytest.mark.parametrize(
    ("keyword", "value", "message"),
    [
        ("model", torch.nn.Linear, r"model=.*Linear.* is not a torch.nn.Module: give an instance"),
        ("model", "resnet", r"model='resnet' is not a torch.nn.Module"),
        ("optimizer", None, r"optimizer=None is not an optimizer .*torch.optim.SGD"),
        ("optimizer", torch.optim.SGD, r"optimizer=.*SGD.* is not an optimizer"),
        ("train_loader", "data", r"train_loader='data' is not a data loader: give an iterable"),
        ("val_loader", 5, r"val_loader=5 is not a data loader"),
        ("test_loader", 5, r"test_loader=5 is not a data loader"),
        ("loss_fn", "mse", r"loss_fn='mse' is not callable"),
        ("train_step", 5, r"train_step=5 is not callable"),
        ("val_step", 5, r"val_step=5 is not callable"),
        ("scheduler", "cosine", r"scheduler='cosine' is not an LR scheduler"),
        ("aspects", Logger, r"aspects=.*Logger.* is not a list of aspects: give instances"),
        ("aspects", "Logger", r"aspects='Logger' is not a list of aspects"),
        ("aspects", 5, r"aspects=5 is not a list of aspects"),
        ("work_dir", 5, r"work_dir=5 is not a path: give a folder"),
        ("device", "gpu", r"device='gpu' cannot take the model .*device='cpu'"),
        ("seed", "1", r"seed='1' is not an int"),
        ("default_aspects", "no", r"default_aspects='no' is not True or False"),
    ],
)
def test_a_part_of_the_wrong_kind_is_refused_when_the_runner_is_built(
    keyword: str, value: Any, message: str
) -> None:
    """Runner(...) names a part of the wrong kind (a class for an instance, a name for an
    object, a truthy string for a bool) at once, not as an AttributeError in the loop."""
    model, opt, loader = _parts()
    parts: dict[str, Any] = {"model": model, "optimizer": opt, "train_loader": loader}
    kwargs: dict[str, Any] = {"loss_fn": CE, "max_epochs": 1}
    (parts if keyword in parts else kwargs)[keyword] = value
    with pytest.raises(RunnerError, match=message):
        Runner(parts["model"], parts["optimizer"], parts["train_loader"], **kwargs)


class _OneInputLoss(torch.nn.Module):
    def forward(self, outputs: torch.Tensor) -> torch.Tensor:
        return outputs.mean()


def _one(batch: Any) -> Any:
    return batch


def _three(runner: Runner, batch: Any, scale: float) -> Any:
    return batch


@pytest.mark.parametrize(
    ("keyword", "value", "message"),
    [
        ("train_step", _one, r"train_step=_one\(batch: 'Any'\) -> 'Any' cannot be called as "),
        ("train_step", _three, r"train_step\(runner, batch\) \(missing a required argument"),
        ("val_step", _one, r"val_step=_one.* cannot be called as val_step\(runner, batch\)"),
        ("loss_fn", _one, r"loss_fn=_one.* cannot be called as loss_fn\(outputs, targets\)"),
        ("loss_fn", _OneInputLoss(), r"loss_fn=_OneInputLoss\(\).forward\(outputs: "),
        ("loss_fn", torch.nn.CrossEntropyLoss, r"loss_fn=CrossEntropyLoss is the class, not an"),
    ],
)
def test_a_step_that_cannot_take_its_arguments_is_refused_when_the_runner_is_built(
    keyword: str, value: Any, message: str
) -> None:
    """train_step / val_step (runner, batch) and loss_fn (outputs, targets) whose signature
    cannot take those two arguments are a RunnerError naming the call and giving an
    example, before training, not a bare TypeError at the first iteration."""
    model, opt, loader = _parts()
    kwargs: dict[str, Any] = {"loss_fn": CE, "max_epochs": 1, keyword: value}
    with pytest.raises(RunnerError, match=message) as caught:
        Runner(model, opt, loader, **kwargs)
    said = str(caught.value)
    assert "e.g. " in said or "give loss_fn=CrossEntropyLoss(...)" in said


def _step(runner: Runner, batch: Any, scale: float = 1.0, *rest: Any, **options: Any) -> Any:
    x, y = batch
    return CE(runner.model(x), y) * scale


class _Steps:
    def train(self, runner: Runner, batch: Any) -> Any:
        return _step(runner, batch)


@pytest.mark.parametrize(
    "steps",
    [
        {"train_step": _step, "val_step": _step},
        {"train_step": lambda *args: _step(*args)},
        {"train_step": _Steps().train},
        {"loss_fn": torch.nn.CrossEntropyLoss()},
        {"loss_fn": max, "train_step": _step},  # no signature to read: not checked
        {"loss_fn": torch.nn.functional.cross_entropy},
    ],
    ids=["defaults-and-varargs", "star-args", "bound-method", "loss-module", "builtin", "func"],
)
def test_steps_that_can_take_their_arguments_are_accepted(steps: dict[str, Any]) -> None:
    """Optional, *args and **kwargs parameters, bound methods, loss modules and callables
    without a readable signature (a builtin) pass the check, and the run trains."""
    model, opt, loader = _parts()
    kwargs: dict[str, Any] = {"loss_fn": CE, "max_iters": 2, **steps}
    if "val_step" in steps:
        kwargs["val_loader"] = loader
    runner = Runner(model, opt, loader, **kwargs)
    runner.run()
    assert runner.iter == 2
