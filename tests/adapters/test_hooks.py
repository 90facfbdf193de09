"""OpenMMLab-style hooks and Keras-style callbacks run on the Runner as aspects."""

from __future__ import annotations

import enum
import subprocess
import sys
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import aspecthook as ah
from aspecthook.adapters import (
    KerasCallback,
    MMHook,
    as_aspect,
    from_keras_callback,
    from_mmengine_hook,
)
from aspecthook.adapters._methods import MM_METHODS
from aspecthook.errors import AdviceSignatureError, AspectDefinitionError, RunnerError
from aspecthook.train import Runner

N, BATCH = 12, 4  # three batches per epoch
VAL_N = 8  # two validation batches


def _runner(aspects: list[Any], **kwargs: Any) -> Runner:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    data = TensorDataset(torch.randn(N, 4), torch.randint(0, 3, (N,)))
    val = TensorDataset(torch.randn(VAL_N, 4), torch.randint(0, 3, (VAL_N,)))
    if "max_iters" not in kwargs:
        kwargs.setdefault("max_epochs", 2)
    return Runner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        DataLoader(data, batch_size=BATCH),
        val_loader=DataLoader(val, batch_size=BATCH),
        loss_fn=torch.nn.functional.cross_entropy,
        aspects=aspects,
        **kwargs,
    )


# -- OpenMMLab-style hooks -----------------------------------------------------------------


class Hook:
    """A stand-in for mmengine's ``Hook``: every method a no-op, ``priority`` NORMAL."""

    priority: Any = "NORMAL"

    def before_run(self, runner: Any) -> None: ...
    def after_run(self, runner: Any) -> None: ...
    def before_train_epoch(self, runner: Any) -> None: ...
    def after_train_epoch(self, runner: Any) -> None: ...
    def before_train_iter(self, runner: Any, batch_idx: int, data_batch: Any = None) -> None: ...
    def after_train_iter(
        self, runner: Any, batch_idx: int, data_batch: Any = None, outputs: Any = None
    ) -> None: ...
    def before_val_epoch(self, runner: Any) -> None: ...
    def after_val_epoch(self, runner: Any, metrics: Any = None) -> None: ...
    def before_val_iter(self, runner: Any, batch_idx: int, data_batch: Any = None) -> None: ...
    def after_val_iter(
        self, runner: Any, batch_idx: int, data_batch: Any = None, outputs: Any = None
    ) -> None: ...


class RecordingHook(Hook):
    """Overrides some methods and records what each received."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def before_run(self, runner: Any) -> None:
        self.calls.append(("before_run", runner))

    def before_train_iter(self, runner: Any, batch_idx: int, data_batch: Any = None) -> None:
        self.calls.append(("before_train_iter", batch_idx, data_batch))

    def after_train_iter(
        self, runner: Any, batch_idx: int, data_batch: Any = None, outputs: Any = None
    ) -> None:
        self.calls.append(("after_train_iter", batch_idx, outputs))

    def after_train_epoch(self, runner: Any) -> None:
        self.calls.append(("after_train_epoch", runner.epoch))

    def after_val_iter(
        self, runner: Any, batch_idx: int, data_batch: Any = None, outputs: Any = None
    ) -> None:
        self.calls.append(("after_val_iter", batch_idx))

    def after_val_epoch(self, runner: Any, metrics: Any = None) -> None:
        self.calls.append(("after_val_epoch", dict(metrics)))

    def after_run(self, runner: Any) -> None:
        self.calls.append(("after_run",))


def test_mm_hook_gets_openmmlab_arguments_from_the_run() -> None:
    """runner, batch_idx, data_batch, outputs and metrics arrive as OpenMMLab passes them."""
    hook = RecordingHook()
    runner = _runner([MMHook(hook)])
    runner.run()
    assert hook.calls[0] == ("before_run", runner)
    before = [c for c in hook.calls if c[0] == "before_train_iter"]
    assert [c[1] for c in before] == [0, 1, 2, 0, 1, 2]
    x, y = before[0][2]
    assert x.shape == (BATCH, 4)
    assert y.shape == (BATCH,)
    after = [c for c in hook.calls if c[0] == "after_train_iter"]
    assert [c[1] for c in after] == [0, 1, 2, 0, 1, 2]
    assert all(isinstance(c[2]["loss"], torch.Tensor) for c in after)
    val_epochs = [c[1] for c in hook.calls if c[0] == "after_val_epoch"]
    assert len(val_epochs) == 2
    assert "loss" in val_epochs[0]  # without its prefix, as OpenMMLab's evaluator gives it
    assert hook.calls[-1] == ("after_run",)


def test_mm_hook_calls_only_the_methods_a_hook_overrides() -> None:
    """Methods inherited from a base named Hook are no-ops and get no advice."""
    aspect = MMHook(RecordingHook())
    names = {a.name.rpartition(".")[2] for a in aspect.make_advice()}
    assert "before_train_epoch" not in names
    assert "before_val_epoch" not in names
    assert {"before_run", "after_train_iter", "after_val_epoch", "after_run"} <= names


def test_mm_hook_orders_stages_as_openmmlab_does() -> None:
    """Within a run: before_run, iterations, validation inside the epoch, after_run."""
    hook = RecordingHook()
    _runner([hook], max_epochs=1).run()
    assert [c[0] for c in hook.calls] == [
        "before_run",
        *["before_train_iter", "after_train_iter"] * 3,
        "after_val_iter",
        "after_val_iter",
        "after_val_epoch",
        "after_train_epoch",
        "after_run",
    ]


def test_validation_batch_index_restarts_every_validation_epoch() -> None:
    """after_val_iter's batch_idx counts 0, 1 in each validation pass."""
    hook = RecordingHook()
    _runner([hook]).run()
    assert [c[1] for c in hook.calls if c[0] == "after_val_iter"] == [0, 1, 0, 1]


def test_mmcv_style_hook_methods_take_only_the_runner() -> None:
    """Hooks written for mmcv 1.x (runner only) are called with the runner only."""
    seen: list[str] = []

    class OldHook:
        def before_train_iter(self, runner: Any) -> None:
            seen.append(f"iter {runner.iter}")

        def after_val_epoch(self, runner: Any) -> None:
            seen.append("val")

    _runner([MMHook(OldHook())], max_epochs=1).run()
    assert seen == ["iter 0", "iter 1", "iter 2", "val"]


def test_hooks_that_override_only_the_generic_methods_are_called() -> None:
    """mmengine's ``Hook.after_train_iter`` hands the call to ``self._after_iter(...,
    mode='train')`` (mmcv 1.x: ``after_iter``); hooks like ``IterTimerHook`` override only
    those, and get every stage through them."""
    seen: list[tuple[Any, ...]] = []

    class Hook:  # the delegating shape of mmengine's base class
        def _before_epoch(self, runner: Any, mode: str = "train") -> None: ...
        def _after_iter(
            self,
            runner: Any,
            batch_idx: int,
            data_batch: Any = None,
            outputs: Any = None,
            mode: str = "train",
        ) -> None: ...
        def before_train_epoch(self, runner: Any) -> None:
            self._before_epoch(runner, mode="train")

        def after_train_iter(
            self, runner: Any, batch_idx: int, data_batch: Any = None, outputs: Any = None
        ) -> None:
            self._after_iter(runner, batch_idx, data_batch, outputs, mode="train")

        def after_val_iter(
            self, runner: Any, batch_idx: int, data_batch: Any = None, outputs: Any = None
        ) -> None:
            self._after_iter(runner, batch_idx, data_batch, outputs, mode="val")

    class TimerLike(Hook):
        def _before_epoch(self, runner: Any, mode: str = "train") -> None:
            seen.append(("epoch", mode))

        def _after_iter(
            self,
            runner: Any,
            batch_idx: int,
            data_batch: Any = None,
            outputs: Any = None,
            mode: str = "train",
        ) -> None:
            seen.append(("iter", mode, batch_idx))

    _runner([MMHook(TimerLike())], max_epochs=1).run()
    assert seen == [
        ("epoch", "train"),
        ("iter", "train", 0),
        ("iter", "train", 1),
        ("iter", "train", 2),
        ("iter", "val", 0),
        ("iter", "val", 1),
    ]


def test_without_a_hook_base_any_method_with_the_name_counts() -> None:
    """A plain object's callable attributes named like hook methods become advice."""
    seen: list[int] = []

    class Plain:
        def after_train_epoch(self, runner: Any) -> None:
            seen.append(runner.epoch)

    hook = Plain()
    hook.before_run = lambda runner: seen.append(-1)  # type: ignore[attr-defined]
    _runner([hook]).run()
    assert seen == [-1, 0, 1]  # the epoch that just ran, as OpenMMLab counts it


class _MMPriority(enum.Enum):
    """Like mmengine's Priority: a plain Enum of ints."""

    HIGH = 30
    LOW = 70


@pytest.mark.parametrize("priority", ["LOW", 70, _MMPriority.LOW])
def test_hook_priority_orders_it_among_aspects(priority: Any) -> None:
    """A 'LOW' hook (name, int or enum member) runs after a NORMAL aspect at the same stage."""
    order: list[str] = []

    class Late(Hook):
        def before_train_iter(self, runner: Any, batch_idx: int, data_batch: Any = None) -> None:
            order.append("hook")

    Late.priority = priority

    class Normal(ah.Aspect):
        def before_train_iter(self, ctx: ah.CallContext) -> None:
            order.append("aspect")

    runner = _runner([Late(), Normal()], max_iters=1)
    runner.run()
    assert order == ["aspect", "hook"]
    rows = runner.describe().for_joinpoint("train_iter")
    assert [r.priority for r in rows if r.advice == "late.before_train_iter"] == [70]


def test_priority_argument_overrides_the_hooks_own() -> None:
    """MMHook(hook, priority=...) wins over hook.priority."""
    hook = RecordingHook()
    assert MMHook(hook, priority="HIGHEST").priority == "HIGHEST"
    assert from_mmengine_hook(hook).priority == "NORMAL"


def test_hook_method_with_a_wrong_signature_is_refused_when_wrapped() -> None:
    """A method that cannot take OpenMMLab's arguments fails at MMHook(), not mid-run."""

    class Broken(Hook):
        def after_train_iter(self) -> None:  # type: ignore[override]
            pass

    with pytest.raises(AdviceSignatureError, match=r"Broken.after_train_iter\(\).*runner"):
        MMHook(Broken())


def test_objects_that_are_no_hook_are_refused() -> None:
    """A class instead of an instance, or an object without hook methods, is refused."""
    with pytest.raises(AspectDefinitionError, match=r"RecordingHook\(\)"):
        MMHook(RecordingHook)
    with pytest.raises(AspectDefinitionError, match="none of the OpenMMLab hook methods"):
        MMHook(object())
    with pytest.raises(AspectDefinitionError, match="none of the Keras callback methods"):
        KerasCallback(object())


def test_runner_wraps_hook_objects_and_refuses_other_objects() -> None:
    """Runner(aspects=[hook]) wraps hook-like objects; anything else is a RunnerError."""
    hook = RecordingHook()
    runner = _runner([hook])
    adapted = runner.get_aspect(MMHook)
    assert isinstance(adapted, MMHook)
    assert adapted.target is hook
    assert adapted.name == "recording_hook"
    with pytest.raises(RunnerError, match="aspects= takes Aspect instances"):
        _runner([object()])
    with pytest.raises(RunnerError, match="aspects= takes Aspect instances"):
        _runner([RecordingHook])


def test_as_aspect_picks_the_adapter_by_the_methods_present() -> None:
    """as_aspect: aspects pass through, hooks become MMHook, callbacks KerasCallback."""
    aspect = ah.Aspect()
    assert as_aspect(aspect) is aspect
    assert isinstance(as_aspect(RecordingHook()), MMHook)
    assert isinstance(as_aspect(RecordingCallback()), KerasCallback)
    assert as_aspect(object()) is None


def test_describe_lists_the_hook_methods_at_their_join_points() -> None:
    """Runner.describe() shows each wrapped method as advice of the hook's aspect."""
    runner = _runner([RecordingHook()])
    rows = runner.describe()
    assert "recording_hook.after_train_iter" in rows.advice_names("train_iter", "after")
    assert "recording_hook.after_val_epoch" in rows.advice_names("val_epoch", "after")


def test_failing_hook_with_errors_log_does_not_stop_training() -> None:
    """errors='log' applies to the wrapped methods like to any advice."""

    class Failing(Hook):
        def after_train_iter(self, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError("boom")

    runner = _runner([MMHook(Failing(), errors="log")], max_epochs=1)
    runner.run()
    assert runner.iter == N // BATCH


def test_hook_reading_its_runner_outside_a_run_is_told_what_to_do() -> None:
    """At a join point of the user's own called outside a run, a hook that reads its runner
    gets a RunnerError naming the hook, the attribute and the join point (not an
    AttributeError on None); a hook that never reads it runs as usual."""

    class Reads(Hook):
        def after_train_iter(self, runner: Any, *args: Any, **kwargs: Any) -> None:
            print(runner.iter)

    seen: list[Any] = []

    class Ignores(Hook):
        def before_train_iter(self, runner: Any, batch_idx: int, data_batch: Any = None) -> None:
            seen.append(data_batch)

    @ah.joinpoint("train_iter")
    def train_iter(batch: Any) -> dict[str, Any]:
        return {"loss": 0.0}

    handle = ah.register(MMHook(Ignores()))
    train_iter("batch")
    handle.remove()
    assert seen == ["batch"]

    ah.register(MMHook(Reads()))
    with pytest.raises(
        RunnerError, match=r"Reads\.after_train_iter read runner\.iter.*'train_iter'.*outside a run"
    ):
        train_iter("batch")


# -- Keras-style callbacks -----------------------------------------------------------------


class Callback:
    """A stand-in for keras.callbacks.Callback: no-op methods, set_model / set_params."""

    def __init__(self) -> None:
        self.model: Any = None
        self.params: dict[str, Any] = {}

    def set_model(self, model: Any) -> None:
        self.model = model

    def set_params(self, params: dict[str, Any]) -> None:
        self.params = params

    def on_train_begin(self, logs: Any = None) -> None: ...
    def on_train_end(self, logs: Any = None) -> None: ...
    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None: ...
    def on_epoch_end(self, epoch: int, logs: Any = None) -> None: ...
    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.on_batch_begin(batch, logs)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.on_batch_end(batch, logs)

    def on_batch_begin(self, batch: int, logs: Any = None) -> None: ...
    def on_batch_end(self, batch: int, logs: Any = None) -> None: ...
    def on_test_begin(self, logs: Any = None) -> None: ...
    def on_test_end(self, logs: Any = None) -> None: ...
    def on_test_batch_begin(self, batch: int, logs: Any = None) -> None: ...
    def on_test_batch_end(self, batch: int, logs: Any = None) -> None: ...


class RecordingCallback(Callback):
    """Records every callback call with its arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, ...]] = []

    def on_train_begin(self, logs: Any = None) -> None:
        self.calls.append(("train_begin", logs))

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.calls.append(("epoch_begin", epoch))

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.calls.append(("batch_end", batch, logs))

    def on_test_begin(self, logs: Any = None) -> None:
        self.calls.append(("test_begin",))

    def on_test_batch_end(self, batch: int, logs: Any = None) -> None:
        self.calls.append(("test_batch_end", batch))

    def on_test_end(self, logs: Any = None) -> None:
        self.calls.append(("test_end", logs))

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.calls.append(("epoch_end", epoch, logs))

    def on_train_end(self, logs: Any = None) -> None:
        self.calls.append(("train_end", logs))


def test_keras_callback_is_called_in_keras_order() -> None:
    """train_begin, per epoch: epoch_begin, batches, validation, epoch_end; train_end."""
    callback = RecordingCallback()
    _runner([KerasCallback(callback)], max_epochs=1).run()
    assert [c[0] for c in callback.calls] == [
        "train_begin",
        "epoch_begin",
        "batch_end",
        "batch_end",
        "batch_end",
        "test_begin",
        "test_batch_end",
        "test_batch_end",
        "test_end",
        "epoch_end",
        "train_end",
    ]


def test_keras_logs_are_built_from_outputs_and_metrics() -> None:
    """Batch logs hold the loss as a float; epoch logs the mean loss (the epoch's last batch
    logs: see the running-mean test) and val_ metrics."""
    callback = RecordingCallback()
    runner = _runner([callback])
    runner.run()
    batches = [c for c in callback.calls if c[0] == "batch_end"]
    assert [c[1] for c in batches] == [0, 1, 2, 0, 1, 2]
    assert all(set(c[2]) == {"loss"} and isinstance(c[2]["loss"], float) for c in batches)
    epochs = [c for c in callback.calls if c[0] == "epoch_end"]
    assert [c[1] for c in epochs] == [0, 1]
    last = epochs[-1][2]
    assert last["loss"] == pytest.approx(batches[-1][2]["loss"])
    assert last["val_loss"] == pytest.approx(runner.metrics["val/loss"])
    test_end = [c[1] for c in callback.calls if c[0] == "test_end"]
    assert test_end[-1] == {"loss": pytest.approx(runner.metrics["val/loss"])}
    assert callback.calls[-1] == ("train_end", last)
    assert [c[1] for c in callback.calls if c[0] == "test_batch_end"] == [0, 1, 0, 1]


def test_keras_callback_gets_the_model_and_params() -> None:
    """set_model receives the runner's model, set_params the epochs and steps."""
    callback = RecordingCallback()
    runner = _runner([callback], max_epochs=3)
    runner.run()
    assert callback.model is runner.model
    assert callback.params == {"epochs": 3, "steps": N // BATCH, "verbose": 0}


def test_model_stop_training_stops_the_run() -> None:
    """A callback that sets model.stop_training (Keras EarlyStopping style) ends the run."""

    class StopAfterTwo(Callback):
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if epoch == 1:
                self.model.stop_training = True

    runner = _runner([StopAfterTwo()], max_epochs=10)
    runner.run()
    assert runner.epoch == 2
    assert runner.stop_reason is not None
    assert "stop_training" in runner.stop_reason


def test_stop_training_in_a_batch_stops_after_that_iteration() -> None:
    """A stop request from on_train_batch_end ends the run after that iteration."""

    class StopAtBatch(Callback):
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if batch == 1:
                self.model.stop_training = True

    runner = _runner([StopAtBatch()], max_epochs=10)
    runner.run()
    assert runner.iter == 2


def _recording_hook(priority: str, calls: list[tuple[str, str]]) -> Any:
    """A hook at ``priority`` with every OpenMMLab method, each recording (method, priority)."""

    def record(method: str) -> Any:
        return lambda self, *args, **kwargs: calls.append((method, priority))

    methods = {method: record(method) for method in MM_METHODS}
    return type(f"{priority.title()}Hook", (), {"priority": priority, **methods})()


def test_hooks_of_priority_very_low_run_before_lowest_in_every_stage() -> None:
    """OpenMMLab runs a VERY_LOW hook before a LOWEST one in each of its stages; given the
    LOWEST hook first, the stages run for all hooks in turn (before_train, after_train,
    before/after_val, before/after_test) ran it first: both fell in the last band."""
    calls: list[tuple[str, str]] = []
    hooks = [_recording_hook("LOWEST", calls), _recording_hook("VERY_LOW", calls)]
    runner = _runner(hooks, max_epochs=1, test_loader=[(torch.randn(2, 4), torch.tensor([0, 1]))])
    runner.run()
    runner.test()
    stages = {method for method, _ in calls}
    assert stages == set(MM_METHODS)
    for method in MM_METHODS:
        order = [priority for name, priority in calls if name == method]
        assert order[:2] == ["VERY_LOW", "LOWEST"], method


def test_stop_training_in_on_train_begin_trains_one_batch_as_keras_fit() -> None:
    """Keras's fit sees the flag first at the end of a batch: a stop asked for in
    on_train_begin trains one batch, validates that epoch and calls on_epoch_end with its
    val_ logs, then ends the run (it used to train nothing and call no epoch method)."""

    class StopAtOnce(Callback):
        def __init__(self) -> None:
            super().__init__()
            self.epochs: list[tuple[int, dict[str, float]]] = []

        def on_train_begin(self, logs: Any = None) -> None:
            self.model.stop_training = True

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self.epochs.append((epoch, dict(logs)))

    callback = StopAtOnce()
    runner = _runner([callback], max_epochs=10)
    runner.run()
    assert runner.iter == 1
    assert [(epoch, sorted(logs)) for epoch, logs in callback.epochs] == [(0, ["loss", "val_loss"])]


class _EpochEnds(Callback):
    """Keeps the logs each on_epoch_end is given."""

    def __init__(self) -> None:
        super().__init__()
        self.logs: list[dict[str, float]] = []

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.logs.append(dict(logs))


def test_an_epoch_a_callback_stopped_inside_is_validated_as_keras_fit() -> None:
    """Keras's fit validates the epoch in which a callback stopped training (when it
    validates that epoch at all): on_epoch_end gets val_ logs, once, whichever of two
    callbacks asked for the stop."""

    class StopAtBatch(Callback):
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if batch == 1:
                self.model.stop_training = True

    first, passes = _EpochEnds(), []
    runner = _runner([first, StopAtBatch()], max_epochs=10)
    runner.weaver.before("val_epoch")(lambda ctx: passes.append(ctx.runner.iter))
    runner.run()
    assert (runner.iter, passes) == (2, [2])
    assert [sorted(logs) for logs in first.logs] == [["loss", "val_loss"]]


def test_epoch_logs_of_batches_without_samples_are_zero_as_keras_means() -> None:
    """An epoch whose batches hold no samples gives loss 0.0 (Keras's Mean divides by
    its count of samples with divide_no_nan); it raised ZeroDivisionError."""

    callback = _EpochEnds()
    model = torch.nn.Linear(4, 3)
    empty = [(torch.randn(0, 4), torch.randint(0, 3, (0,)))] * 2
    runner = Runner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        empty,
        loss_fn=torch.nn.functional.cross_entropy,
        max_epochs=1,
        aspects=[callback],
    )
    runner.run()
    assert callback.logs == [{"loss": 0.0}]


def test_plain_callback_with_a_model_attribute_gets_the_model() -> None:
    """Without set_model, an existing `model` attribute is assigned."""

    class Plain:
        model = None

        def on_train_begin(self, logs: Any = None) -> None:
            pass

    callback = Plain()
    runner = _runner([from_keras_callback(callback)], max_iters=1)
    runner.run()
    assert callback.model is runner.model


def test_keras2_batch_names_are_used_when_not_overridden() -> None:
    """on_batch_end (Keras 2) runs when on_train_batch_end is the base class's."""
    seen: list[int] = []

    class Old(Callback):
        def on_batch_end(self, batch: int, logs: Any = None) -> None:
            seen.append(batch)

    aspect = KerasCallback(Old())
    names = [a.name.rpartition(".")[2] for a in aspect.make_advice()]
    assert "on_train_batch_end" not in names
    _runner([aspect], max_epochs=1).run()
    assert seen == [0, 1, 2]


def test_keras_method_with_a_wrong_signature_is_refused_when_wrapped() -> None:
    """A callback method that cannot take (epoch, logs) fails at KerasCallback()."""

    class Broken(Callback):
        def on_epoch_end(self) -> None:  # type: ignore[override]
            pass

    with pytest.raises(AdviceSignatureError, match=r"on_epoch_end\(epoch, logs\)"):
        KerasCallback(Broken())


def test_adapters_never_import_torch() -> None:
    """aspecthook.adapters and the torch-hook weaving load without importing torch."""
    code = (
        "import sys, aspecthook, aspecthook.adapters, aspecthook._torch_hooks; "
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_high_priority_hook_sees_this_validations_metrics() -> None:
    """Evaluate puts the metrics in place before any other after_val_epoch advice, so a
    hook of priority HIGH gets this validation's values, as mmengine passes them."""
    seen: list[Any] = []

    class Watch(Hook):
        priority = "HIGH"

        def after_val_epoch(self, runner: Any, metrics: Any = None) -> None:
            seen.append(dict(metrics))

    runner = _runner([Watch()], max_epochs=2)
    final: list[Any] = []
    runner.weaver.after("val_epoch", priority="LOWEST")(
        lambda ctx: final.append({k[4:]: v for k, v in ctx.runner.metrics.items()})
    )
    runner.run()
    assert seen == final
    assert len(seen) == 2
    assert seen[0] != seen[1]


def test_keras_epoch_logs_have_val_metrics_only_when_the_epoch_validated() -> None:
    """Validation every 2nd epoch and at the run's end: epochs 0 and 2 have no val_loss
    (no stale value from an earlier validation either), and on_train_end gets the last
    epoch's logs even without on_epoch_end."""
    from aspecthook.train.aspects import Evaluate

    epochs: list[Any] = []
    ends: list[Any] = []

    class Epochs(Callback):
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            epochs.append(sorted(logs))

    class End(Callback):
        def on_train_end(self, logs: Any = None) -> None:
            ends.append(sorted(logs))

    _runner([Evaluate(interval=2), Epochs(), End()], max_epochs=5).run()
    validated = ["loss", "val_loss"]
    assert epochs == [["loss"], validated, ["loss"], validated, validated]
    assert ends == [validated]


@pytest.mark.parametrize("prefix", ["val", "valid"])
def test_keras_epoch_logs_have_this_validations_metrics_named_as_keras_does(prefix: str) -> None:
    """Epoch-end logs have 'val_<name>' for the validation's metrics, whatever Evaluate's
    prefix, and none of a test pass's metrics still in runner.metrics (Keras's fit puts
    only the loss, the metrics and their val_ versions there)."""
    from aspecthook.train.aspects import Evaluate

    epochs: list[Any] = []

    class Epochs(Callback):
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            epochs.append(sorted(logs))

    runner = _runner([Evaluate(prefix=prefix), Epochs()], max_epochs=1)
    runner.test_loader = runner.val_loader
    runner.test()  # leaves 'test/loss' in runner.metrics
    runner.run()
    assert f"{prefix}/loss" in runner.metrics
    assert "test/loss" in runner.metrics
    assert epochs == [["loss", "val_loss"]]


def test_a_callback_with_predict_methods_is_told_they_will_not_be_called() -> None:
    """A callback overriding on_predict_* next to methods that run is adapted with a
    warning naming them, as MMHook warns about checkpoint methods."""

    class Predicts(Callback):
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            pass

        def on_predict_batch_end(self, batch: int, logs: Any = None) -> None:
            pass

    with pytest.warns(UserWarning, match=r"on_predict_batch_end will not be called"):
        KerasCallback(Predicts())


def test_a_hook_class_that_happens_to_be_named_hook_is_not_its_own_base() -> None:
    """Only a base class named Hook/Callback marks no-op methods: a user's own class of
    that name has its methods called."""
    calls: list[int] = []

    class Hook:  # the user's class, no OpenMMLab base
        def before_train_iter(self, runner: Any, batch_idx: int, data_batch: Any = None) -> None:
            calls.append(batch_idx)

    _runner([MMHook(Hook())], max_epochs=1).run()
    assert calls == [0, 1, 2]


def test_before_train_runs_after_every_before_run_and_sees_a_resumed_run(
    tmp_path: Any,
) -> None:
    """As OpenMMLab: all hooks' before_run, then the resume, then all before_train (and
    after_train before any after_run)."""
    from aspecthook.train.aspects import Checkpoint

    _runner([Checkpoint()], max_epochs=1, work_dir=tmp_path).run()
    calls: list[tuple[str, str, int]] = []

    class Stages(Hook):
        def __init__(self, tag: str) -> None:
            self.tag = tag

        def before_run(self, runner: Any) -> None:
            calls.append((self.tag, "before_run", runner.iter))

        def before_train(self, runner: Any) -> None:
            calls.append((self.tag, "before_train", runner.iter))

        def after_train(self, runner: Any) -> None:
            calls.append((self.tag, "after_train", runner.iter))

        def after_run(self, runner: Any) -> None:
            calls.append((self.tag, "after_run", runner.iter))

    hooks = [MMHook(Stages("a"), name="a"), MMHook(Stages("b"), name="b")]
    _runner([*hooks, Checkpoint(resume="auto")], max_epochs=2, work_dir=tmp_path).run()
    assert calls == [
        ("a", "before_run", 0),
        ("b", "before_run", 0),
        ("a", "before_train", 3),
        ("b", "before_train", 3),
        ("a", "after_train", 6),
        ("b", "after_train", 6),
        ("a", "after_run", 6),
        ("b", "after_run", 6),
    ]


def test_train_stages_keep_the_hooks_priority_order() -> None:
    """Hooks given as [LOW, HIGH]: HIGH's before_train and after_train come first, as
    OpenMMLab calls every stage in priority order."""
    calls: list[str] = []

    class Stages(Hook):
        def __init__(self, tag: str, priority: str) -> None:
            self.tag, self.priority = tag, priority

        def before_train(self, runner: Any) -> None:
            calls.append(f"{self.tag}.before_train")

        def after_train(self, runner: Any) -> None:
            calls.append(f"{self.tag}.after_train")

    _runner([Stages("low", "LOW"), Stages("high", "HIGH")], max_epochs=1).run()
    assert calls == ["high.before_train", "low.before_train", "high.after_train", "low.after_train"]


def test_a_hook_gets_a_fresh_dict_of_its_loops_metrics() -> None:
    """after_val_epoch gets this validation's metrics in a dict of its own (as OpenMMLab
    passes its evaluator's results), not runner.metrics, which later epochs change."""
    history: list[dict[str, Any]] = []

    class History(Hook):
        def after_val_epoch(self, runner: Any, metrics: Any = None) -> None:
            history.append(metrics)

    runner = _runner([History()], max_epochs=2)
    runner.metrics["test/loss"] = 1.0  # another loop's value: not handed to val hooks
    runner.run()
    assert len(history) == 2
    assert all(m is not runner.metrics for m in history)
    assert history[0] != history[1]
    assert all(set(m) == {"loss"} for m in history)


def test_a_hook_with_checkpoint_methods_is_told_they_will_not_be_called() -> None:
    """A hook overriding before_save_checkpoint / after_load_checkpoint next to methods
    that run is adapted with a warning naming them (they used to be left out silently)."""

    class Keeps(Hook):
        def after_train_iter(self, runner: Any, **kwargs: Any) -> None:
            pass

        def before_save_checkpoint(self, runner: Any, checkpoint: Any) -> None:
            pass

    with pytest.warns(UserWarning, match=r"before_save_checkpoint will not be called"):
        MMHook(Keeps())


def test_a_hook_reads_the_loaders_by_openmmlab_names() -> None:
    """runner.train_dataloader / val_dataloader (what mmengine's hooks read) are the
    runner's loaders."""
    seen: list[Any] = []

    class Sizes(Hook):
        def before_train(self, runner: Any) -> None:
            seen.extend([runner.train_dataloader, runner.val_dataloader, runner.test_dataloader])

    runner = _runner([Sizes()], max_epochs=1)
    runner.run()
    assert seen == [runner.train_loader, runner.val_loader, runner.test_loader]


class CountingHelpers(Hook):
    """mmengine ``Hook``'s counter helpers, with its formulas."""

    def every_n_train_iters(self, runner: Any, n: int) -> bool:
        return bool((runner.iter + 1) % n == 0)

    def every_n_epochs(self, runner: Any, n: int) -> bool:
        return bool((runner.epoch + 1) % n == 0)

    def is_last_train_iter(self, runner: Any) -> bool:
        return bool(runner.iter + 1 == runner.max_iters)

    def is_last_train_epoch(self, runner: Any) -> bool:
        return bool(runner.epoch + 1 == runner.max_epochs)


@pytest.mark.parametrize("limit", [{"max_epochs": 2}, {"max_iters": 6}])
def test_openmmlab_counter_helpers_hold_where_they_would_in_openmmlab(
    limit: dict[str, int],
) -> None:
    """In after_train_iter / after_train_epoch, runner.iter / epoch are the index that just
    ran (OpenMMLab counts it after those hooks), and max_iters of a run by epochs is
    max_epochs x the loader's length: every_n_* and is_last_* fire where mmengine's do."""
    seen: list[tuple[Any, ...]] = []

    class Probe(CountingHelpers):
        def after_train_iter(
            self, runner: Any, batch_idx: int, data_batch: Any = None, outputs: Any = None
        ) -> None:
            seen.append(("iter", runner.iter, self.every_n_train_iters(runner, 3)))
            if self.is_last_train_iter(runner):
                seen.append(("last iter", runner.iter))

        def after_train_epoch(self, runner: Any) -> None:
            seen.append(("epoch", runner.epoch, self.every_n_epochs(runner, 2)))
            if self.is_last_train_epoch(runner):
                seen.append(("last epoch", runner.epoch))

    runner = _runner([Probe()], **limit)
    runner.run()
    assert (runner.iter, runner.epoch) == (6, 2)  # the runner's own counters are unchanged
    assert [row for row in seen if row[0] == "iter"] == [("iter", i, i in (2, 5)) for i in range(6)]
    assert ("last iter", 5) in seen
    assert [row for row in seen if row[0] == "epoch"] == [("epoch", 0, False), ("epoch", 1, True)]
    if "max_epochs" in limit:
        assert seen[-1] == ("last epoch", 1)


class _Stream(torch.utils.data.IterableDataset[Any]):
    """Batches from a stream: its DataLoader has ``__len__``, which raises ``TypeError``."""

    def __iter__(self) -> Any:
        g = torch.Generator().manual_seed(0)
        for _ in range(N):
            yield torch.randn(4, generator=g), torch.tensor(1)


def _streaming_runner(aspects: list[Any]) -> Runner:
    model = torch.nn.Linear(4, 3)
    return Runner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        DataLoader(_Stream(), batch_size=BATCH),
        loss_fn=torch.nn.functional.cross_entropy,
        max_epochs=1,
        aspects=aspects,
    )


def test_max_iters_of_a_run_by_epochs_over_a_loader_without_a_length_is_none() -> None:
    """A hook reading runner.max_iters of a run by epochs over a stream (its loader's len()
    raises) gets None, as the run's length is not known, instead of the run failing."""
    seen: list[Any] = []

    class Probe(CountingHelpers):
        def after_train_iter(
            self, runner: Any, batch_idx: int, data_batch: Any = None, outputs: Any = None
        ) -> None:
            seen.append(runner.max_iters)

    runner = _streaming_runner([Probe()])
    runner.run()
    assert runner.iter == N // BATCH
    assert seen == [None] * (N // BATCH)


def test_keras_params_of_a_loader_without_a_length_have_no_steps() -> None:
    """Keras's params['steps'] is None for a stream (its loader's len() raises), as for a
    loader without __len__, instead of the run failing in on_train_begin."""
    params: list[Any] = []

    class Begins(Callback):
        def on_train_begin(self, logs: Any = None) -> None:
            params.append(dict(self.params))

    _streaming_runner([Begins()]).run()
    assert params == [{"epochs": 1, "steps": None, "verbose": 0}]


def test_a_hooks_own_state_dict_goes_into_the_runners_state() -> None:
    """A hook with state_dict() / load_state_dict() keeps its state in the run's state
    (checkpoints), restored into the hook of a new runner."""

    class Counter(Hook):
        def __init__(self) -> None:
            self.seen = 0

        def after_train_iter(self, runner: Any, **kwargs: Any) -> None:
            self.seen += 1

        def state_dict(self) -> dict[str, int]:
            return {"seen": self.seen}

        def load_state_dict(self, state: dict[str, int]) -> None:
            self.seen = state["seen"]

    runner = _runner([Counter()], max_epochs=1)
    runner.run()
    state = runner.state_dict()
    assert state["aspects"]["counter"] == {"seen": 3}
    fresh = Counter()
    _runner([fresh], max_epochs=1).load_state_dict(state)
    assert fresh.seen == 3


# -- regressions ------------------------------------------------------------------------------


def test_an_object_with_nothing_the_adapter_would_call_is_refused() -> None:
    """A PyTorch Lightning-style callback (no-op on_train_batch_end ... with Lightning's
    signature, the user's on_train_epoch_end) or a hook overriding only methods without
    a join point here would never be called: refused, naming what it defines."""

    class Callback:  # lightning.pytorch.Callback's shape
        def on_train_batch_end(
            self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
        ) -> None: ...
        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None: ...
        def on_test_end(self, trainer: Any, pl_module: Any) -> None: ...

    class EpochPrinter(Callback):
        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None: ...

    class ResumeFixer(Hook):
        def after_load_checkpoint(self, runner: Any, checkpoint: Any) -> None: ...

    with pytest.raises(AspectDefinitionError, match=r"EpochPrinter.*on_train_epoch_end"):
        as_aspect(EpochPrinter())
    with pytest.raises(AspectDefinitionError, match=r"ResumeFixer.*after_load_checkpoint"):
        as_aspect(ResumeFixer())
    with pytest.raises(AspectDefinitionError, match="none of its methods would ever be called"):
        _runner([EpochPrinter()])

    class Bare(Hook):  # only the base's no-ops
        pass

    only_no_ops = r"MMHook\(Bare\): none of its.*defines none.*base class \S*test_hooks.Hook"
    with pytest.raises(AspectDefinitionError, match=only_no_ops):
        MMHook(Bare())


def test_a_project_base_class_named_hook_keeps_its_own_methods() -> None:
    """A project's own base class named Hook (subclassing the real, no-op one) defines
    methods its hooks inherit: they are called; only the root-most Hook's are no-ops."""
    seen: list[tuple[str, int]] = []

    class ProjectHook(Hook):
        def after_train_iter(
            self, runner: Any, batch_idx: int, data_batch: Any = None, outputs: Any = None
        ) -> None:
            seen.append(("after_train_iter", batch_idx))

    ProjectHook.__name__ = ProjectHook.__qualname__ = "Hook"  # as mylib.hooks.Hook

    class MyHook(ProjectHook):
        def before_train_epoch(self, runner: Any) -> None:
            seen.append(("before_train_epoch", runner.epoch))

    _runner([MyHook()], max_epochs=1).run()
    assert seen == [("before_train_epoch", 0), *[("after_train_iter", i) for i in range(3)]]


def test_hooks_get_the_metrics_under_evaluates_own_prefix() -> None:
    """With Evaluate(prefix='valid') a hook's after_val_epoch gets the 'valid/...' metrics
    and a callback's on_test_end the same without the prefix."""
    from aspecthook.train.aspects import Evaluate

    hook, callback = RecordingHook(), RecordingCallback()
    runner = _runner([Evaluate(prefix="valid"), hook, callback], max_epochs=1)
    runner.run()
    assert set(runner.metrics) == {"valid/loss"}
    assert [c[1] for c in hook.calls if c[0] == "after_val_epoch"] == [
        {"loss": runner.metrics["valid/loss"]}
    ]
    loss = runner.metrics["valid/loss"]
    assert [c[1] for c in callback.calls if c[0] == "test_end"] == [{"loss": loss}]


def test_validation_and_test_stages_run_for_every_hook_in_turn() -> None:
    """As OpenMMLab's loops call them: every hook's before_val, then every hook's
    before_val_epoch, ... after_val_epoch, then every after_val (the same for test)."""
    order: list[str] = []

    class Tracer(Hook):
        def __init__(self, tag: str, priority: str) -> None:
            self.tag, self.priority = tag, priority

        def before_val(self, runner: Any) -> None:
            order.append(f"{self.tag}.before_val")

        def before_val_epoch(self, runner: Any) -> None:
            order.append(f"{self.tag}.before_val_epoch")

        def after_val_epoch(self, runner: Any, metrics: Any = None) -> None:
            order.append(f"{self.tag}.after_val_epoch")

        def after_val(self, runner: Any) -> None:
            order.append(f"{self.tag}.after_val")

        def before_test(self, runner: Any) -> None:
            order.append(f"{self.tag}.before_test")

        def before_test_epoch(self, runner: Any) -> None:
            order.append(f"{self.tag}.before_test_epoch")

        def after_test_epoch(self, runner: Any, metrics: Any = None) -> None:
            order.append(f"{self.tag}.after_test_epoch")

        def after_test(self, runner: Any) -> None:
            order.append(f"{self.tag}.after_test")

    test = DataLoader(TensorDataset(torch.randn(VAL_N, 4), torch.randint(0, 3, (VAL_N,))))
    runner = _runner([Tracer("a", "HIGH"), Tracer("b", "NORMAL")], max_epochs=1)
    runner.test_loader = test
    runner.run()
    runner.test()
    stages = [f"{m}_{mode}{e}" for mode in ("val", "test") for m, e in _STAGES]
    assert order == [f"{tag}.{stage}" for stage in stages for tag in "ab"]


_STAGES = [("before", ""), ("before", "_epoch"), ("after", "_epoch"), ("after", "")]


def test_a_callback_used_only_for_testing_gets_the_model_and_params() -> None:
    """runner.test() without run(): the callback gets the model first, as Keras's
    evaluate() gives it."""
    seen: list[Any] = []

    class SaveIfGood(Callback):
        def on_test_end(self, logs: Any = None) -> None:
            seen.append((self.model, self.params))

    data = TensorDataset(torch.randn(VAL_N, 4), torch.randint(0, 3, (VAL_N,)))
    runner = _runner([SaveIfGood()], max_epochs=3, test_loader=DataLoader(data, batch_size=BATCH))
    runner.test()
    assert seen == [(runner.model, {"epochs": 1, "steps": VAL_N // BATCH, "verbose": 0})]


@pytest.mark.parametrize("priority", ["HIGHEST", "HIGH", "ABOVE_NORMAL"])
def test_keras_epoch_end_follows_the_epochs_validation_whatever_the_priority(
    priority: str,
) -> None:
    """on_epoch_end comes after the epoch's validation (its on_test_* calls) and has its
    val_ metrics, as in Keras's fit, also for a callback ordered ahead of Evaluate."""
    callback = RecordingCallback()
    runner = _runner([KerasCallback(callback, priority=priority)], max_epochs=1)
    runner.run()
    names = [c[0] for c in callback.calls]
    assert names.index("test_end") < names.index("epoch_end")
    epoch_end = next(c for c in callback.calls if c[0] == "epoch_end")
    assert epoch_end[2]["val_loss"] == pytest.approx(runner.metrics["val/loss"])


def test_keras_epoch_logs_average_every_scalar_the_batches_log() -> None:
    """A step that returns more than the loss ('acc'): epoch-end logs hold the epoch's mean
    of each, as Keras's fit gives every metric, so a callback monitoring 'acc' finds it."""
    callback = RecordingCallback()
    steps: list[dict[str, float]] = []

    def step(runner: Runner, batch: Any) -> dict[str, Any]:
        x, y = batch
        out = runner.model(x)
        acc = (out.argmax(1) == y).float().mean()
        loss = torch.nn.functional.cross_entropy(out, y)
        steps.append({"loss": loss.item(), "acc": acc.item()})
        return {"loss": loss, "acc": acc}

    _runner([callback], max_epochs=1, train_step=step).run()
    logs = next(c[2] for c in callback.calls if c[0] == "epoch_end")
    assert set(logs) == {"loss", "acc", "val_loss"}
    for key in ("loss", "acc"):
        assert logs[key] == pytest.approx(sum(b[key] for b in steps) / len(steps))


def test_keras_test_batch_logs_hold_no_predictions_or_targets() -> None:
    """The runner's evaluation step returns the batch's outputs and targets beside its
    loss; a one-sample batch made them one-element tensors, which came out in the batch
    logs as if they were metrics. Logs hold the loss (and metrics) only, as Keras's do."""
    logs: list[Any] = []

    class TestBatches(Callback):
        def on_test_batch_end(self, batch: int, logs_: Any = None) -> None:
            logs.append(logs_)

    runner = _runner([TestBatches()], max_epochs=1)
    one = TensorDataset(torch.randn(BATCH + 1, 4), torch.randint(0, 3, (BATCH + 1,)))
    runner.val_loader = DataLoader(one, batch_size=BATCH)  # its last batch: one sample
    runner.run()
    assert [sorted(batch) for batch in logs] == [["loss"], ["loss"]]


def test_keras_params_of_a_run_by_iterations_count_its_epochs() -> None:
    """A run by max_iters gives params['epochs'] the epochs it spans (Keras's is always an
    int, which callbacks do arithmetic with), not None."""
    callback = RecordingCallback()
    _runner([callback], max_iters=4).run()  # three batches an epoch: two epochs
    assert callback.params == {"epochs": 2, "steps": N // BATCH, "verbose": 0}


def test_stop_training_set_in_a_test_pass_outside_a_run_stops_no_later_run() -> None:
    """Keras's evaluate() has no training to stop: a callback setting model.stop_training
    in runner.test() left the runner stopped, so the run after it trained nothing."""

    class StopOnTest(Callback):
        def on_test_end(self, logs: Any = None) -> None:
            self.model.stop_training = True

    runner = _runner([StopOnTest()], max_epochs=2)
    runner.test_loader = runner.val_loader
    runner.test()
    assert runner.stop_reason is None
    runner.run()
    assert runner.epoch == 1  # the validation in the run stops it, as Keras's fit would


def test_a_hook_stops_the_run_through_train_loop_stop_training() -> None:
    """OpenMMLab's hooks (its EarlyStoppingHook) stop training with
    ``runner.train_loop.stop_training = True`` and read the loop's counters there; the
    adapted runner had no ``train_loop`` (AttributeError)."""
    seen: list[Any] = []

    class StopAfterFirstValidation(Hook):
        def after_val_epoch(self, runner: Any, metrics: Any = None) -> None:
            loop = runner.train_loop
            seen.append((loop.epoch, loop.max_epochs, loop.max_iters, loop.stop_training))
            assert loop.dataloader is runner.train_loader
            loop.stop_training = True

    runner = _runner([StopAfterFirstValidation()], max_epochs=3)
    runner.run()
    per_epoch = len(runner.train_loader)
    assert seen == [(1, 3, 3 * per_epoch, False)]
    assert runner.epoch == 1
    assert "train_loop.stop_training" in (runner.stop_reason or "")


def _running_means(values: list[float], per_pass: int) -> list[float]:
    """The mean of each value and those before it in its pass of ``per_pass`` values."""
    return [sum(values[i - i % per_pass : i + 1]) / (i % per_pass + 1) for i in range(len(values))]


def test_keras_batch_logs_hold_the_running_mean_since_the_epoch_began() -> None:
    """Keras's batch logs hold each metric aggregated since the epoch (or the evaluation)
    began, this batch included, not the batch's own value; the adapter gave the latter.
    They start again at each epoch and each validation, and the epoch's logs are the
    epoch's last batch logs, as Keras's fit gives them."""
    losses: dict[str, list[float]] = {"train": [], "val": []}
    logs: dict[str, list[float]] = {"train": [], "val": []}
    epochs: list[float] = []

    class Raw(ah.Aspect):
        def after_train_iter(self, ctx: ah.CallContext) -> None:
            losses["train"].append(ctx.result["loss"].item())

        def after_val_iter(self, ctx: ah.CallContext) -> None:
            losses["val"].append(ctx.result["loss"].item())

    class Batches(Callback):
        def on_train_batch_end(self, batch: int, logs_: Any = None) -> None:
            logs["train"].append(logs_["loss"])

        def on_test_batch_end(self, batch: int, logs_: Any = None) -> None:
            logs["val"].append(logs_["loss"])

        def on_epoch_end(self, epoch: int, logs_: Any = None) -> None:
            epochs.append(logs_["loss"])

    _runner([Raw(), Batches()], max_epochs=2).run()
    per_epoch, per_val = N // BATCH, -(-VAL_N // BATCH)
    assert len(losses["train"]) == 2 * per_epoch
    assert len(losses["val"]) == 2 * per_val
    assert logs["train"] == pytest.approx(_running_means(losses["train"], per_epoch))
    assert logs["val"] == pytest.approx(_running_means(losses["val"], per_val))
    assert epochs == [logs["train"][per_epoch - 1], logs["train"][-1]]


def test_keras_batch_logs_of_a_callback_without_epoch_methods_are_running_means() -> None:
    """A callback with only on_train_batch_end (no on_epoch_end to need the epoch's sums)
    gets the running means too, starting again at each epoch."""
    losses: list[float] = []
    logs: list[float] = []

    class Raw(ah.Aspect):
        def after_train_iter(self, ctx: ah.CallContext) -> None:
            losses.append(ctx.result["loss"].item())

    class Batches(Callback):
        def on_train_batch_end(self, batch: int, logs_: Any = None) -> None:
            logs.append(logs_["loss"])

    _runner([Raw(), KerasCallback(Batches(), priority="LOWEST")], max_epochs=2).run()
    assert logs == pytest.approx(_running_means(losses, N // BATCH))


def test_keras_logs_weigh_each_batch_by_its_samples() -> None:
    """Keras's fit and evaluate weigh each batch's loss by its number of samples, so a
    short last batch counts for what it holds; the adapter gave every batch the same
    weight, and the last test batch's logs differed from on_test_end's val/loss."""
    sizes: dict[str, list[int]] = {"train": [], "val": []}
    losses: dict[str, list[float]] = {"train": [], "val": []}
    logs: dict[str, Any] = {"test_batches": []}

    class Raw(ah.Aspect):
        def after_train_iter(self, ctx: ah.CallContext) -> None:
            sizes["train"].append(len(ctx.args[0][1]))
            losses["train"].append(ctx.result["loss"].item())

        def after_val_iter(self, ctx: ah.CallContext) -> None:
            sizes["val"].append(len(ctx.args[0][1]))
            losses["val"].append(ctx.result["loss"].item())

    class Logs(Callback):
        def on_epoch_end(self, epoch: int, logs_: Any = None) -> None:
            logs["epoch"] = logs_

        def on_test_batch_end(self, batch: int, logs_: Any = None) -> None:
            logs["test_batches"].append(logs_["loss"])

        def on_test_end(self, logs_: Any = None) -> None:
            logs["test_end"] = logs_

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    data = TensorDataset(torch.randn(10, 4), torch.randint(0, 3, (10,)))
    runner = Runner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        DataLoader(data, batch_size=4),  # batches of 4, 4 and 2
        val_loader=DataLoader(data, batch_size=4),
        loss_fn=torch.nn.functional.cross_entropy,
        max_epochs=1,
        aspects=[Raw(), Logs()],
    )
    runner.run()

    def weighted(mode: str) -> float:
        pairs = zip(losses[mode], sizes[mode], strict=True)
        return sum(loss * n for loss, n in pairs) / sum(sizes[mode])

    assert sizes == {"train": [4, 4, 2], "val": [4, 4, 2]}
    assert logs["epoch"]["loss"] == pytest.approx(weighted("train"))
    assert logs["test_batches"][-1] == pytest.approx(weighted("val"))
    assert logs["test_end"]["loss"] == pytest.approx(runner.metrics["val/loss"])
    assert logs["test_batches"][-1] == pytest.approx(logs["test_end"]["loss"])


def test_a_test_pass_by_itself_gives_running_means_from_its_own_start() -> None:
    """runner.test() (Keras's evaluate()): on_test_batch_end's logs aggregate from that
    pass's first batch, not from a training epoch's or an earlier pass's."""
    losses: list[float] = []
    logs: list[float] = []

    class Raw(ah.Aspect):
        def after_test_iter(self, ctx: ah.CallContext) -> None:
            losses.append(ctx.result["loss"].item())

    class TestBatches(Callback):
        def on_test_batch_end(self, batch: int, logs_: Any = None) -> None:
            logs.append(logs_["loss"])

    runner = _runner([Raw(), TestBatches()], max_epochs=1)
    runner.test_loader = runner.val_loader
    runner.test()
    runner.test()
    assert len(losses) == 2 * -(-VAL_N // BATCH)
    assert logs == pytest.approx(_running_means(losses, -(-VAL_N // BATCH)))


@pytest.mark.parametrize("where", ["runner", "train_loop"])
def test_a_run_by_iterations_has_one_epoch_as_openmmlabs_iteration_loop(where: str) -> None:
    """OpenMMLab's IterBasedTrainLoop sets max_epochs to 1 and its runner's max_epochs
    follows the loop; the adapted runner gave None for a run limited by max_iters. The
    runner's own max_epochs stays None: only the hook's view translates it."""
    seen: list[Any] = []

    class Probe(Hook):
        def before_run(self, runner: Any) -> None:
            seen.append((runner if where == "runner" else runner.train_loop).max_epochs)

    runner = _runner([Probe()], max_iters=N // BATCH)  # one pass over the loader
    runner.run()
    assert seen == [1]
    assert runner.max_epochs is None
    by_epochs = _runner([Probe()], max_epochs=2)  # a run by epochs keeps its own
    by_epochs.run()
    assert seen == [1, 2]


def test_a_run_by_iterations_over_several_passes_ends_its_last_epoch_where_it_ends() -> None:
    """A run by max_iters that spans passes over the loader calls the epoch hooks at each;
    max_epochs is the passes it spans, so is_last_train_epoch holds at the pass that ends
    the run and at no other (with max_epochs 1 it held at the first pass only)."""
    last: list[bool] = []

    class Probe(Hook):
        def after_train_epoch(self, runner: Any) -> None:
            last.append(runner.epoch + 1 == runner.max_epochs)  # is_last_train_epoch

    runner = _runner([Probe()], max_iters=3 * (N // BATCH))
    runner.run()
    assert last == [False, False, True]


@pytest.mark.parametrize("declared", ["attribute", "enum"])
def test_a_hook_whose_priority_is_none_runs_at_openmmlabs_default(declared: str) -> None:
    """A hook whose priority is None (an attribute set from an optional argument, or an
    enum member of value None) runs at NORMAL, OpenMMLab's Hook default, rather than being
    refused: mmengine's get_priority() raises TypeError for it, but None reads here as
    "no priority of its own", as MMHook(priority=None) does."""

    class NoPriority(enum.Enum):
        UNSET = None

    class Unset(Hook):
        def __init__(self, priority: Any = None) -> None:
            self.priority = priority

        def before_train_iter(self, runner: Any, batch_idx: int, data_batch: Any = None) -> None:
            pass

    hook = Unset(None if declared == "attribute" else NoPriority.UNSET)
    runner = _runner([hook], max_iters=1)
    runner.run()
    rows = runner.describe().for_joinpoint("train_iter")
    assert [r.priority for r in rows if r.advice == "unset.before_train_iter"] == [50]
    assert MMHook(hook).priority == ah.Priority.NORMAL


@pytest.mark.parametrize("stateful", [False, True], ids=["plain", "own-state"])
def test_keras_logs_after_a_mid_epoch_resume_are_the_uninterrupted_runs(
    tmp_path: Any, stateful: bool
) -> None:
    """A run resumed in the middle of an epoch gives the batch and epoch logs the
    uninterrupted run gives, bit for bit: the checkpoint holds the epoch's running means
    (they started again at the resume, covering the batches since). A callback with a
    state of its own keeps it in the same checkpoint."""
    from aspecthook.train.aspects import Checkpoint

    class Logs(Callback):
        def __init__(self) -> None:
            self.batches: list[tuple[int, float]] = []
            self.epochs: list[tuple[int, float]] = []
            self.seen = 0

        def on_train_batch_end(self, batch: int, logs_: Any = None) -> None:
            self.batches.append((batch, logs_["loss"]))
            self.seen += 1

        def on_epoch_end(self, epoch: int, logs_: Any = None) -> None:
            self.epochs.append((epoch, logs_["loss"]))

    class Stateful(Logs):
        def state_dict(self) -> dict[str, Any]:
            return {"seen": self.seen}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.seen = state["seen"]

    kind = Stateful if stateful else Logs
    whole = kind()
    _runner([whole], max_iters=6, work_dir=tmp_path / "whole").run()  # epochs of 3 batches

    first = kind()
    saving = [first, Checkpoint(by_epoch=False, interval=4)]
    _runner(saving, max_iters=4, work_dir=tmp_path / "parts").run()  # stops at 1 of epoch 1
    second = kind()
    resuming = [second, Checkpoint(resume="auto", by_epoch=False, interval=4)]
    _runner(resuming, max_iters=6, work_dir=tmp_path / "parts").run()
    assert first.batches + second.batches == whole.batches
    assert second.epochs == whole.epochs[1:]  # (the first run ended inside epoch 1)
    assert second.seen == (6 if stateful else 2)


class _EpochLogs(Callback):
    def __init__(self) -> None:
        super().__init__()
        self.batches: list[tuple[int, float]] = []
        self.epochs: list[tuple[int, float]] = []

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.batches.append((batch, logs["loss"]))

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.epochs.append((epoch, logs["loss"]))


def test_keras_logs_of_a_run_continued_by_run_again_are_the_uninterrupted_runs() -> None:
    """run() again on a runner whose last run ended inside an epoch goes on with that
    epoch's running means: they started again, covering the batches since."""
    whole = _EpochLogs()
    _runner([whole], max_iters=6).run()  # epochs of 3 batches
    parts = _EpochLogs()
    runner = _runner([parts], max_iters=4)
    runner.run()  # ends at batch 1 of epoch 1
    runner.max_iters = 6
    runner.run()
    assert parts.batches == whole.batches
    assert parts.epochs[2:] == whole.epochs[1:]  # (the first run ended inside epoch 1)


def test_keras_a_checkpoint_at_an_epochs_start_drops_means_loaded_before() -> None:
    """Loading a checkpoint taken at an epoch's start after one taken inside an epoch
    leaves none of the latter's means: the epoch's logs are its own batches'."""
    inside = _runner([_EpochLogs()], max_iters=4)
    inside.run()  # ends at batch 1 of epoch 1
    at_start = _runner([_EpochLogs()], max_iters=3)
    at_start.run()  # ends with epoch 0
    whole = _EpochLogs()
    _runner([whole], max_iters=6).run()
    logs = _EpochLogs()
    runner = _runner([logs], max_iters=6)
    runner.load_state_dict(inside.state_dict())
    runner.load_state_dict(at_start.state_dict())
    runner.run()
    assert logs.epochs == whole.epochs[1:]


@pytest.mark.parametrize(
    "own", [{"epoch": 3, "best": 0.5}, 5], ids=["keys-of-the-adapter", "not-a-dict"]
)
def test_keras_a_checkpoint_of_the_previous_format_restores_the_callbacks_state(
    own: Any,
) -> None:
    """A checkpoint written before the adapter kept the means holds the callback's own
    state as it is, whatever its keys or type: it is restored, not read as the adapter's."""

    class Stateful(_EpochLogs):
        restored: Any = None

        def state_dict(self) -> Any:
            return own

        def load_state_dict(self, state: Any) -> None:
            self.restored = state

    callback = Stateful()
    adapter = KerasCallback(callback)
    adapter.load_state_dict(own)
    assert callback.restored == own
    adapter.load_state_dict(adapter.state_dict())  # the adapter's own format round-trips
    assert callback.restored == own


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_keras_running_means_of_a_half_precision_loss_are_summed_in_float32(
    dtype: torch.dtype,
) -> None:
    """A loss in bfloat16 / float16 (a model in half precision, a loss computed outside
    AMP's autocast) is summed at least in float32: in its own dtype the sum stops
    growing once its spacing passes the values added (bfloat16 stays at 256 adding 1.0)
    or overflows (float16 past 65504), and the mean was far off."""
    batches = 300
    value = 1.0 if dtype == torch.bfloat16 else 300.0  # float16: 300 x 300 > 65504
    means: list[float] = []

    class Epochs(Callback):
        def on_epoch_end(self, epoch: int, logs_: Any = None) -> None:
            means.append(logs_["loss"])

    model = torch.nn.Linear(1, 1)

    def step(runner: Runner, batch: Any) -> torch.Tensor:
        return (runner.model(batch[0]).sum() * 0 + value).to(dtype)

    Runner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        DataLoader(TensorDataset(torch.zeros(batches, 1)), batch_size=1),
        train_step=step,
        max_epochs=1,
        aspects=[Epochs()],
    ).run()
    assert means == pytest.approx([value])


@pytest.mark.parametrize(
    ("attribute", "hint"),
    [
        ("message_hub", "runner.outputs"),
        ("optim_wrapper", "runner.optimizer"),
        ("logger", "logging"),
        ("param_schedulers", "runner.scheduler"),
        ("val_loop", "runner.val_loader"),
    ],
)
def test_a_hook_reading_an_openmmlab_runner_attribute_the_runner_lacks_is_told_instead(
    attribute: str, hint: str
) -> None:
    """A hook reading an attribute of OpenMMLab's runner that this runner does not have
    gets an AttributeError naming the hook, the attribute and what to read instead, not
    Python's bare "'Runner' object has no attribute"; hasattr() and getattr() with a
    default still work."""
    seen: list[Any] = []

    class Reads(Hook):
        def before_train_epoch(self, runner: Any) -> None:
            seen.append((hasattr(runner, attribute), getattr(runner, attribute, "none")))
            getattr(runner, attribute)

    with pytest.raises(AttributeError) as raised:
        _runner([Reads()], max_epochs=1).run()
    message = str(raised.value)
    assert f"Reads.before_train_epoch read runner.{attribute}" in message
    assert hint in message
    assert seen == [(False, "none")]


class _Monitor(Callback):
    def on_epoch_end(self, epoch: int, logs: Any = None) -> None: ...


class _Counting(Hook):
    def __init__(self) -> None:
        self.epochs = 0

    def after_train_epoch(self, runner: Any) -> None:
        self.epochs += 1

    def state_dict(self) -> dict[str, Any]:
        return {"epochs": self.epochs}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epochs = state["epochs"]


@pytest.mark.parametrize(("kind", "adapter"), [(_Monitor, "KerasCallback"), (_Counting, "MMHook")])
def test_two_objects_of_one_class_given_as_they_are_are_told_how_to_name_them(
    kind: type, adapter: str
) -> None:
    """Two callbacks (or stateful hooks) of one class given to the runner as they are get
    one name each, which checkpoints cannot tell apart: the error says to wrap one in its
    adapter with a name, since the object itself takes no name=; at add_aspect() too."""
    name = "_monitor" if kind is _Monitor else "_counting"
    wrap = rf"{adapter}\({kind.__name__}\(\.\.\.\), name='{name}_2'\)"
    with pytest.raises(RunnerError, match=wrap):
        _runner([kind(), kind()])
    runner = _runner([kind()])
    with pytest.raises(RunnerError, match=wrap):
        runner.add_aspect(kind())
    wrapped = _runner([kind(), as_aspect(kind(), name=f"{name}_2")])  # as the error says
    assert {a.name for a in wrapped.aspects} >= {name, f"{name}_2"}


def test_hooks_of_one_priority_keep_the_order_given_wrapped_or_not() -> None:
    """Ties run in the order given, as OpenMMLab registers hooks, whether a hook was given
    as it is or already wrapped in MMHook: an adapter is not a shipped aspect."""
    order: list[str] = []

    class First(Hook):
        def before_train_epoch(self, runner: Any) -> None:
            order.append("first")

    class Second(Hook):
        def before_train_epoch(self, runner: Any) -> None:
            order.append("second")

    _runner([First(), MMHook(Second())], max_epochs=1).run()
    assert order == ["first", "second"]
