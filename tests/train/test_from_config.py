"""Runner.from_config: runs from mappings and YAML/TOML files through the registries."""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from _fixtures import CountingDataset, one_thread
from structlog.testing import capture_logs
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader

from aspecthook import Priority
from aspecthook.adapters import MMHook
from aspecthook.errors import (
    ConfigError,
    InvalidOptionError,
    UnknownAspectError,
    UnknownPriorityError,
)
from aspecthook.registry import ASPECTS, Registry
from aspecthook.train import (
    DATASETS,
    LOSSES,
    MODELS,
    OPTIMIZERS,
    SCHEDULERS,
    RandomClassification,
    Runner,
    seed_everything,
)
from aspecthook.train import aspects as train_aspects
from aspecthook.train.aspects import (
    Checkpoint,
    DistSamplerSeed,
    Evaluate,
    IterTimer,
    LRSchedule,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "configs" / "train.yaml"


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    with one_thread():
        yield


def _config(**changes: Any) -> dict[str, Any]:
    """A small config: MLP with dropout, SGD + StepLR, shuffled generated data, 12 iters."""
    layers = [
        {"type": "Linear", "in_features": 8, "out_features": 16},
        {"type": "ReLU"},
        {"type": "Dropout", "p": 0.2},
        {"type": "Linear", "in_features": 16, "out_features": 3},
    ]
    config: dict[str, Any] = {
        "seed": 0,
        "model": {"type": "Sequential", "layers": layers},
        "optimizer": {"type": "SGD", "lr": 0.1, "momentum": 0.9},
        "scheduler": {"type": "StepLR", "step_size": 4, "gamma": 0.5},
        "loss_fn": "cross_entropy",
        "train_loader": {
            "dataset": {"type": "RandomClassification", "n": 64, "features": 8, "classes": 3},
            "batch_size": 8,
            "shuffle": True,
        },
        "max_iters": 12,
        "aspects": [{"type": "ParamSchedulerHook", "by_epoch": False}],
    }
    config.update(changes)
    return config


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_dict_config_trains_like_the_hand_built_runner() -> None:
    """A dict config ends at the same parameters and LR as the same runner built by hand."""
    built = Runner.from_config(_config())
    built.run()

    seed_everything(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(16, 3)
    )
    start = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = DataLoader(RandomClassification(64, 8, 3), batch_size=8, shuffle=True)
    hand = Runner(
        model,
        optimizer,
        loader,
        scheduler=StepLR(optimizer, step_size=4, gamma=0.5),
        loss_fn=torch.nn.functional.cross_entropy,
        max_iters=12,
        seed=0,
        aspects=[LRSchedule(by_epoch=False)],
    )
    hand.run()

    assert built.iter == hand.iter == 12
    assert built.loss_fn is torch.nn.functional.cross_entropy
    assert isinstance(built.scheduler, StepLR)
    assert built.optimizer.param_groups[0]["lr"] == hand.optimizer.param_groups[0]["lr"] == 0.0125
    for ours, theirs, before in zip(
        built.model.parameters(), model.parameters(), start, strict=True
    ):
        assert torch.equal(ours, theirs)
        assert not torch.equal(ours, before)


def test_yaml_example_builds_and_runs(tmp_path: Path) -> None:
    """examples/configs/train.yaml trains, validates, logs and keeps checkpoints: it runs its
    max_epochs (its val/loss falls at every validation), keeps the last max_keep epochs and
    the best by val/loss."""
    runner = Runner.from_config(EXAMPLE, work_dir=tmp_path)
    with capture_logs() as logs:
        metrics = runner.run()
    assert isinstance(runner.model, torch.nn.Sequential)
    assert isinstance(runner.get_aspect(Checkpoint), Checkpoint)
    assert isinstance(runner.get_aspect(IterTimer), IterTimer)
    config = yaml.safe_load(EXAMPLE.read_text())
    epochs, loader = config["max_epochs"], config["train_loader"]
    per_epoch = math.ceil(loader["dataset"]["n"] / loader["batch_size"])
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    val = [r["val/loss"] for r in map(json.loads, lines) if r["mode"] == "val"]
    # One validation per epoch, each better than the one before: EarlyStopping never
    # loses patience, so the run ends at the config's max_epochs, not stopped.
    assert len(val) == epochs
    assert all(b < a for a, b in itertools.pairwise(val))
    assert (runner.epoch, runner.iter, runner.stop_reason) == (epochs, epochs * per_epoch, None)
    assert metrics["val/loss"] == val[-1] < math.log(10)  # better than chance (10 classes)
    assert any(e["event"] == "train" for e in logs)
    saved = {p.name for p in tmp_path.iterdir()}
    hooks = [a for a in config["aspects"] if isinstance(a, dict)]
    checkpoint = next(a for a in hooks if a["type"] == "CheckpointHook")
    kept = {f"epoch_{e}.pt" for e in range(epochs - checkpoint["max_keep"] + 1, epochs + 1)}
    best = f"best_val_loss_epoch_{val.index(min(val)) + 1}.pt"
    assert saved == {"latest", "metrics.jsonl", best} | kept


def test_toml_config_builds_and_runs(tmp_path: Path) -> None:
    """A .toml file is read with tomllib and trains like its YAML twin."""
    path = _write(
        tmp_path,
        "run.toml",
        """\
        max_iters = 3
        device = "cpu"
        loss_fn = "MSELoss"
        model = {type = "Linear", in_features = 8, out_features = 1}
        optimizer = {type = "Adam", lr = 0.01}
        [train_loader]
        dataset = {type = "RandomRegression", n = 24, features = 8}
        batch_size = 8
        """,
    )
    runner = Runner.from_config(path)
    runner.run()
    assert runner.iter == 3
    assert isinstance(runner.optimizer, torch.optim.Adam)
    assert isinstance(runner.loss_fn, torch.nn.MSELoss)


def test_openmmlab_aliases_resolve_to_our_aspects() -> None:
    """CheckpointHook & co. are our classes, and ASPECTS knows every training aspect."""
    assert ASPECTS.get("CheckpointHook") is ASPECTS.get("Checkpoint") is Checkpoint
    for alias, name in train_aspects.ALIASES.items():
        assert ASPECTS.get(alias) is getattr(train_aspects, name), alias
    shipped = set(train_aspects.__all__) - {"ALIASES"}
    assert shipped | set(train_aspects.ALIASES) <= set(ASPECTS.names())
    assert all(isinstance(ASPECTS.get(name), type) for name in ASPECTS.names())  # all load
    runner = Runner.from_config(_config(aspects=[{"type": "CheckpointHook", "interval": 3}]))
    checkpoint = runner.get_aspect(Checkpoint)
    assert isinstance(checkpoint, Checkpoint)
    assert checkpoint.interval == 3


def test_package_module_paths_resolve(tmp_path: Path) -> None:
    """'package.module:Name' types build models, datasets and aspects not registered."""
    runner = Runner.from_config(
        _config(
            model={"type": "torch.nn:Linear", "in_features": 1, "out_features": 1},
            loss_fn="torch.nn:MSELoss",
            train_loader={"dataset": {"type": "_fixtures:CountingDataset", "n": 8}},
            aspects=["aspecthook.train.aspects:IterTimer"],
            scheduler=None,
            max_iters=4,
        )
    )
    runner.run()
    assert isinstance(runner.train_loader, DataLoader)
    assert isinstance(runner.train_loader.dataset, CountingDataset)
    assert runner.train_loader.dataset.calls == 4
    assert isinstance(runner.get_aspect(IterTimer), IterTimer)


def test_losses_are_classes_built_or_functions_bound() -> None:
    """A loss class is instantiated; a loss function's options are bound with partial."""
    runner = Runner.from_config(_config(loss_fn={"type": "CrossEntropyLoss", "reduction": "sum"}))
    assert isinstance(runner.loss_fn, torch.nn.CrossEntropyLoss)
    assert runner.loss_fn.reduction == "sum"
    runner = Runner.from_config(_config(loss_fn={"type": "cross_entropy", "label_smoothing": 0.1}))
    assert isinstance(runner.loss_fn, functools.partial)
    assert runner.loss_fn.keywords == {"label_smoothing": 0.1}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"model": {"type": "Linaer"}}, r"^model\.type: unknown model type 'Linaer'; "),
        ({"optimizer": "Adamm"}, r"^optimizer: unknown optimizer type 'Adamm'; "),
        ({"loss_fn": "CrossEntropyLos"}, r"^loss_fn: unknown loss type 'CrossEntropyLos'; "),
        (
            {"aspects": [{"type": "IterTimerHook"}, {"type": "CheckpontHook"}]},
            r"^aspects\[1\]\.type: unknown aspect type 'CheckpontHook'; ",
        ),
    ],
)
def test_unknown_type_names_the_key_and_the_closest_match(
    changes: dict[str, Any], message: str
) -> None:
    """An unknown type names its key path, the closest known name and the known ones."""
    with pytest.raises(ConfigError, match=message) as info:
        Runner.from_config(_config(**changes))
    assert "did you mean" in str(info.value)
    assert "Known types:" in str(info.value)
    assert isinstance(info.value.__cause__, UnknownAspectError)
    assert info.value.file == ""


def test_a_type_written_as_a_key_says_to_write_type() -> None:
    """aspects: [{LoggerHook: {interval: 4}}] is shown the mapping to write."""
    with pytest.raises(ConfigError, match=r"^aspects\[0\]\.type: must name") as info:
        Runner.from_config(_config(aspects=[{"LoggerHook": {"interval": 4}}]))
    assert "write {type: LoggerHook, interval: 4}" in str(info.value)


def test_unknown_dataset_type_in_a_file_names_the_file(tmp_path: Path) -> None:
    """From a file, the error starts with the file, then the key path."""
    path = _write(
        tmp_path,
        "run.yaml",
        """\
        max_epochs: 1
        model: {type: Linear, in_features: 8, out_features: 3}
        optimizer: {type: SGD, lr: 0.1}
        train_loader: {dataset: {type: RandomClasification}}
        """,
    )
    with pytest.raises(ConfigError) as info:
        Runner.from_config(path)
    assert str(info.value).startswith(
        f"{path}: train_loader.dataset.type: unknown dataset type 'RandomClasification'; "
        "did you mean 'RandomClassification'? Known types: RandomClassification, RandomRegression"
    )
    assert (info.value.file, info.value.key) == (str(path), "train_loader.dataset.type")


@pytest.mark.parametrize(
    ("changes", "key", "message"),
    [
        (
            {"model": {"type": "Linear", "in_feature": 8, "out_features": 3}},
            "model.in_feature",
            "Linear does not take 'in_feature' (did you mean 'in_features'?); "
            "its parameters are: in_features, out_features, bias, device, dtype",
        ),
        (
            {"aspects": [{"type": "CheckpointHook", "intervl": 2}]},
            "aspects[0].intervl",
            "CheckpointHook does not take 'intervl' (did you mean 'interval'?); "
            "its parameters are: interval, by_epoch,",
        ),
        (
            {"scheduler": {"type": "StepLR"}},
            "scheduler.step_size",
            "StepLR needs 'step_size'; its parameters are: optimizer, step_size, gamma",
        ),
        (
            {"train_loader": {"dataset": "RandomClassification", "batch_sise": 4}},
            "train_loader.batch_sise",
            "DataLoader does not take 'batch_sise' (did you mean 'batch_size'?)",
        ),
        (
            {"loss_fn": {"type": "cross_entropy", "smoothing": 0.1}},
            "loss_fn.smoothing",
            "cross_entropy does not take 'smoothing' (did you mean 'label_smoothing'?); "
            "its parameters are: weight, size_average, ignore_index, reduce, reduction,",
        ),
    ],
)
def test_wrong_parameter_names_the_component_and_its_parameters(
    changes: dict[str, Any], key: str, message: str
) -> None:
    """A parameter the type does not take (or a missing one) lists the valid ones."""
    with pytest.raises(ConfigError) as info:
        Runner.from_config(_config(**changes))
    assert info.value.key == key
    assert str(info.value).startswith(f"{key}: {message}")


def test_top_level_x_keys_hold_yaml_anchors_and_are_left_alone(tmp_path: Path) -> None:
    """A top-level key starting with 'x-' is the file's own (a block to anchor from, as in
    compose files): not refused and not built; what merges from it is."""
    path = _write(
        tmp_path,
        "run.yaml",
        """\
        x-sgd: &sgd {type: SGD, lr: 0.25}
        x-notes: trained for the docs
        model: {type: Linear, in_features: 8, out_features: 3}
        optimizer: {<<: *sgd, momentum: 0.5}
        loss_fn: cross_entropy
        train_loader:
          dataset: {type: RandomClassification, n: 16, features: 8, classes: 3}
          batch_size: 8
        max_iters: 2
        """,
    )
    runner = Runner.from_config(path, work_dir=tmp_path / "work", default_aspects=False)
    group = runner.optimizer.param_groups[0]
    assert (type(runner.optimizer).__name__, group["lr"], group["momentum"]) == ("SGD", 0.25, 0.5)
    with pytest.raises(ConfigError, match=r"^common: .* a key starting with 'x-'$"):
        Runner.from_config(_config(common={"lr": 0.1}))  # not a typo of a key: a block


def test_unknown_top_level_key_lists_the_valid_keys(tmp_path: Path) -> None:
    """A misspelt top-level key is refused, with the closest key and every valid one."""
    path = _write(tmp_path, "run.yaml", "max_epoch: 2\n")
    with pytest.raises(ConfigError) as info:
        Runner.from_config(path)
    assert str(info.value) == (
        f"{path}: max_epoch: is not a known key (did you mean 'max_epochs'?); valid keys: "
        "aspects, default_aspects, device, loss_fn, max_epochs, max_iters, model, optimizer, "
        "scheduler, seed, test_dataloader, test_loader, train_dataloader, train_loader, "
        "train_step, val_dataloader, val_loader, val_step, work_dir"
    )
    with pytest.raises(ConfigError, match=r"^max_iter: is not a known key"):
        Runner.from_config(_config(), max_iter=3)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"max_epochs": 2}, r"^max_iters: is given with max_epochs: .* not both"),
        ({"max_iters": None}, r"^give max_epochs \(epoch-based training\) or max_iters"),
        ({"max_iters": "3"}, r"^max_iters: must be a positive int, not str '3'"),
        ({"model": 5}, r"^model: must be a model type name or a mapping \{type: Name"),
        ({"device": "gpu9"}, r"^device: is not a torch device"),
        ({"optimizer": {"type": "SGD", "params": []}}, r"^optimizer\.params: is filled in by"),
        ({"train_loader": {"batch_size": 4}}, r"^train_loader: must be a mapping with dataset:"),
        ({"aspects": [{"level": 1}]}, r"^aspects\[0\]\.type: must name the aspect type"),
        ({"aspects": ["collections:OrderedDict"]}, r"^aspects\[0\]: .*OrderedDict, not an Aspect"),
        ({"train_dataloader": {"dataset": "RandomRegression"}}, r"^train_dataloader: is another"),
        ({"model": {"type": "Linear", "in_features": -1, "out_features": 1}}, r"^model: Linear\("),
    ],
)
def test_bad_values_name_their_key(changes: dict[str, Any], message: str) -> None:
    """Limits, values the runner fills in, malformed parts and failing constructors."""
    with pytest.raises(ConfigError, match=message):
        Runner.from_config(_config(**changes))


@pytest.mark.parametrize(
    ("key", "says"),
    [
        ("train_cfg", r"write max_epochs: or max_iters: at the top level"),
        ("default_hooks", r"list them under aspects: \[\.\.\.\]"),
        ("custom_hooks", r"list them under aspects: \[\.\.\.\]"),
        ("default_scope", r"no registry scopes here"),
        ("val_evaluator", r"the Evaluate aspect's"),
        ("val_cfg", r"remove val_cfg"),
        ("test_cfg", r"remove test_cfg"),
    ],
)
def test_an_openmmlab_top_level_key_says_where_its_settings_go(key: str, says: str) -> None:
    """OpenMMLab's train_cfg is not told 'did you mean train_step?' (nor default_hooks
    'default_aspects'): the error says where its settings go here, and not to keep it
    under an 'x-' key (val_cfg was told both to remove it and where to keep it)."""
    with pytest.raises(ConfigError, match=rf"^{key}: is not a known key \(.*{says}") as info:
        Runner.from_config(_config(**{key: {}}))
    assert "did you mean" not in str(info.value)
    assert "'x-'" not in str(info.value)


def test_openmmlab_load_from_is_told_apart_from_a_resume() -> None:
    """OpenMMLab's load_from loads the weights only (a fine-tune starts at epoch 0); it was
    told to become Checkpoint's resume:, which also restores the counters, optimizer and
    schedule, so a fine-tune from a finished run's file would have trained nothing. The
    error now says how to load the weights, and that resume: is for resume=True."""
    with pytest.raises(ConfigError, match=r"^load_from: .*weights only") as info:
        Runner.from_config(_config(load_from="pretrained.pt"))
    message = str(info.value)
    assert "load_state_dict" in message
    assert "resume=True" in message


def test_openmmlab_load_from_does_not_say_to_resume_from_an_openmmlab_file() -> None:
    """The Checkpoint aspect's resume: reads only the checkpoints that aspect saves: the
    error said to give it the OpenMMLab file's path to go on with that run, which fails
    on such a file. It says to start from the file's weights instead."""
    with pytest.raises(ConfigError) as info:
        Runner.from_config(_config(load_from="pretrained.pt"))
    message = str(info.value)
    assert "with the file's path" not in message
    assert "cannot be continued here: start from its weights as above" in message
    assert "resume: takes only the checkpoints that aspect saves" in message


def test_openmmlab_load_from_says_how_to_load_a_file_weights_only_refuses() -> None:
    """An OpenMMLab checkpoint holds objects of its own (its message hub's buffers) beside
    the weights, which torch.load refuses by default (weights_only=True) with a page-long
    message: the error says to re-save the weights alone, once, where the file is trusted,
    and to load that; it said only torch.load(path)['state_dict'], which fails on one."""
    with pytest.raises(ConfigError) as info:
        Runner.from_config(_config(load_from="pretrained.pt"))
    message = str(info.value)
    assert "weights_only=True refuses" in message
    assert "torch.save(torch.load(path, weights_only=False)['state_dict'], 'weights.pt')" in message
    assert "where you trust the file" in message


@pytest.mark.parametrize("value", [True, False])
def test_openmmlab_resume_false_is_not_told_to_resume(value: bool) -> None:
    """OpenMMLab configs often hold resume = False (its default runtime's): it was told to
    become Checkpoint's resume: auto, which turns resuming on. The error says which of its
    values that is, and that False needs nothing."""
    with pytest.raises(ConfigError, match=r"^resume: ") as info:
        Runner.from_config(_config(resume=value))
    message = str(info.value)
    assert "resume=True is the Checkpoint aspect's resume: auto" in message
    assert "resume=False" in message
    assert "remove the key" in message


def test_overrides_replace_top_level_keys(tmp_path: Path) -> None:
    """Keyword overrides replace keys of the file, None removes one, Aspects pass as they are."""
    timer = IterTimer()
    runner = Runner.from_config(
        EXAMPLE, work_dir=tmp_path, max_epochs=None, max_iters=2, aspects=[timer], val_loader=None
    )
    runner.run()
    assert runner.iter == 2
    assert runner.val_loader is None
    assert runner.get_aspect(IterTimer) is timer
    assert runner.get_aspect(Checkpoint) is None


def test_yaml_is_read_with_safe_load_only(tmp_path: Path) -> None:
    """A YAML tag that would build a Python object is refused."""
    path = _write(tmp_path, "evil.yaml", "seed: !!python/object/apply:os.getpid []\n")
    with pytest.raises(ConfigError, match=r"evil\.yaml: cannot be read: .*python/object"):
        Runner.from_config(path)


def test_yaml_key_written_twice_is_refused(tmp_path: Path) -> None:
    """Two `optimizer:` blocks are an error, not the second one silently used."""
    path = _write(
        tmp_path,
        "run.yaml",
        """\
        max_iters: 1
        model: {type: Linear, in_features: 8, out_features: 3}
        optimizer: {type: SGD, lr: 0.1}
        train_loader: {dataset: RandomClassification}
        optimizer: {type: Adam, lr: 0.001}
        """,
    )
    with pytest.raises(
        ConfigError, match=r"run\.yaml: is not valid YAML: line 5.*'optimizer' is written twice"
    ):
        Runner.from_config(path)


def test_number_written_as_text_gets_a_yaml_hint(tmp_path: Path) -> None:
    """`lr: 1e-3` is text in YAML 1.1; the error says to write 1.0e-3."""
    path = _write(
        tmp_path,
        "run.yaml",
        """\
        max_iters: 1
        model: {type: Linear, in_features: 8, out_features: 3}
        optimizer: {type: SGD, lr: 1e-3}
        train_loader: {dataset: RandomClassification}
        """,
    )
    with pytest.raises(ConfigError, match=r"optimizer\.lr: is the string '1e-3'.*write 1\.0e-3"):
        Runner.from_config(path)


def test_user_registered_model_is_built_by_name() -> None:
    """@MODELS.register() makes a model class of the user's available to configs."""

    @MODELS.register()
    class ConfigTestNet(torch.nn.Module):
        def __init__(self, features: int, classes: int, hidden: int = 4) -> None:
            super().__init__()
            self.body = torch.nn.Sequential(
                torch.nn.Linear(features, hidden), torch.nn.Linear(hidden, classes)
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.body(x)  # type: ignore[no-any-return]

    model = {"type": "ConfigTestNet", "features": 8, "classes": 3, "hidden": 5}
    runner = Runner.from_config(_config(model=model, max_iters=2))
    runner.run()
    assert isinstance(runner.model, ConfigTestNet)
    assert runner.model.body[0].out_features == 5
    with pytest.raises(ConfigError, match=r"^model\.hiden: ConfigTestNet does not take 'hiden'"):
        Runner.from_config(_config(model={**model, "hiden": 5}))


def test_registered_names_shadow_the_torch_fallback() -> None:
    """A registered name wins over a fallback name instead of clashing with it."""
    registry = Registry("model", fallback=lambda: {"Linear": torch.nn.Linear})
    assert registry.get("Linear") is torch.nn.Linear

    @registry.register(name="Linear")
    def linear(size: int) -> torch.nn.Module:
        return torch.nn.Linear(size, size)

    assert registry.get("Linear") is linear
    assert registry.names() == ["Linear"]


def test_registries_fall_back_to_torch_names() -> None:
    """MODELS, OPTIMIZERS, SCHEDULERS and LOSSES know torch's own types by name."""
    assert MODELS.get("Conv2d") is torch.nn.Conv2d
    assert "Module" not in MODELS
    assert OPTIMIZERS.get("AdamW") is torch.optim.AdamW
    assert SCHEDULERS.get("OneCycleLR") is torch.optim.lr_scheduler.OneCycleLR
    assert SCHEDULERS.get("ReduceLROnPlateau") is torch.optim.lr_scheduler.ReduceLROnPlateau
    assert LOSSES.get("nll_loss") is torch.nn.functional.nll_loss
    assert LOSSES.get("BCEWithLogitsLoss") is torch.nn.BCEWithLogitsLoss
    assert "relu" not in LOSSES
    assert DATASETS.names() == ["RandomClassification", "RandomRegression"]


def test_a_path_to_a_callable_of_another_kind_is_refused_before_it_runs(
    tmp_path: Path,
) -> None:
    """``{type: 'os:system'}`` as the model: refused as not a Module class, never called."""
    marker = tmp_path / "ran"
    config = _config(model={"type": "os:system", "command": f"touch {marker}"})
    with pytest.raises(ConfigError, match=r"^model\.type: .*not a torch\.nn\.Module class"):
        Runner.from_config(config)
    assert not marker.exists()


class _CountingHook:
    """An OpenMMLab-style hook: a plain class with a hook method."""

    calls = 0

    def before_train_iter(self, runner: Any, batch_idx: int, data_batch: Any = None) -> None:
        type(self).calls += 1


@pytest.mark.parametrize(
    ("entry", "hint"),
    [
        (
            {"type": "EMAHook", "momentum": 0.0002},
            r"momentum is 1 - decay here: write decay: 0\.9998$",
        ),
        ({"type": "EMAHook", "begin_iter": 10}, r"write start_iter: 10$"),
        ({"type": "EMAHook", "interval": 5}, r"is update_every here: write update_every: 5$"),
        ({"type": "EMAHook", "update_buffers": True}, r"write use_buffers: True$"),
        ({"type": "EMAHook", "begin_epoch": 2}, r"write start_iter: \(begin_epoch times"),
        ({"type": "EMAHook", "ema_type": "ExponentialMovingAverage"}, r"remove ema_type$"),
        ({"type": "EMAHook", "strict_load": True}, r"remove strict_load$"),
        ({"type": "GradientCumulativeOptimizerHook", "cumulative_iters": 4}, r"write steps: 4$"),
        ({"type": "CheckpointHook", "out_dir": "ckpt"}, r"write work_dir: at the top level"),
        ({"type": "EmptyCacheHook", "after_iter": True}, r"write interval: 1"),
        # Told "did you mean 'save_best'?" alone, which is another thing altogether.
        ({"type": "CheckpointHook", "save_begin": 3}, r"not save_best.*remove save_begin"),
    ],
)
def test_an_openmmlab_parameter_under_its_hook_name_says_what_to_write(
    entry: dict[str, Any], hint: str
) -> None:
    """An OpenMMLab hook's own parameter with another name here (EMAHook's momentum) is
    refused with what to write, beyond the list of parameters."""
    name = next(k for k in entry if k != "type")
    with pytest.raises(ConfigError, match=rf"^aspects\[0\]\.{name}: .*{hint}"):
        Runner.from_config(_config(aspects=[entry]))


@pytest.mark.parametrize(
    "entry",
    [
        {"type": "CheckpointHook", "out_dir": "ckpt"},
        {"type": "EmptyCacheHook", "after_iter": True},
        {"type": "EMAHook", "momentum": 0.0002},
    ],
    ids=["out_dir", "after_iter", "momentum"],
)
def test_what_to_write_for_an_openmmlab_parameter_is_a_sentence(entry: dict[str, Any]) -> None:
    """The hint after the list of parameters starts a sentence of its own, capitalised."""
    with pytest.raises(ConfigError) as caught:
        Runner.from_config(_config(aspects=[entry]))
    assert re.search(r"order_before\. [A-Z]", str(caught.value)), str(caught.value)


def test_hook_objects_and_classes_are_aspects_in_a_config() -> None:
    """As Runner(aspects=[...]) takes them: a hook object, or its class by path."""
    _CountingHook.calls = 0
    Runner.from_config(_config(aspects=[_CountingHook()], max_iters=2)).run()
    Runner.from_config(_config(aspects=[f"{__name__}:_CountingHook"], max_iters=2)).run()
    assert _CountingHook.calls == 4


class _IntervalHook:
    """An OpenMMLab-style hook with a parameter of its own (and none named priority)."""

    def __init__(self, interval: int = 1) -> None:
        self.interval = interval

    def after_train_iter(self, runner: Any, batch_idx: int, **kwargs: Any) -> None:
        pass


def test_a_hook_entry_in_a_config_sets_its_priority_as_openmmlab_configs_do() -> None:
    """{type: Hook, interval: 2, priority: LOW}: the priority is the adapter's, the rest
    the hook's own parameters."""
    entry = {"type": f"{__name__}:_IntervalHook", "interval": 2, "priority": "LOW"}
    runner = Runner.from_config(_config(aspects=[entry]))
    (hook,) = [a for a in runner.aspects if isinstance(a, MMHook)]
    assert hook.target.interval == 2
    row = next(r for r in runner.describe() if r.aspect == hook.name)
    assert row.priority == int(Priority.LOW)


def _made_timed(**options: Any) -> IterTimer:
    return IterTimer(**options)


def test_priority_in_a_config_entry_of_an_aspect_factory_is_the_factorys() -> None:
    """A factory of aspects gets priority: with its other parameters, as before."""
    entry = {"type": _made_timed, "priority": 10}
    runner = Runner.from_config(_config(aspects=[entry]))
    timer = runner.get_aspect(IterTimer)
    assert timer is not None
    row = next(r for r in runner.describe() if r.aspect == timer.name)
    assert row.priority == 10


def test_an_override_of_the_runs_length_replaces_the_files_other_limit() -> None:
    """max_epochs in the override, max_iters in the file (or the other way round): the
    override sets the run's length, as one setting; both in the override stay an error."""
    by_epochs = Runner.from_config(_config(), max_epochs=2)
    assert (by_epochs.max_epochs, by_epochs.max_iters) == (2, None)
    file_by_epochs = _config(max_iters=None, max_epochs=5)
    by_iters = Runner.from_config(file_by_epochs, max_iters=3)
    assert (by_iters.max_epochs, by_iters.max_iters) == (None, 3)
    with pytest.raises(ConfigError, match="not both"):
        Runner.from_config(_config(), max_epochs=2, max_iters=3)


def test_an_override_replaces_the_loader_under_either_name() -> None:
    """A file's val_dataloader is replaced by a val_loader override (None: removed)."""
    loader = {"dataset": {"type": "RandomClassification", "n": 16, "features": 8, "classes": 3}}
    config = _config(val_dataloader=loader)
    assert Runner.from_config(config, val_loader=None).val_loader is None
    replaced = Runner.from_config(config, val_loader={**loader, "batch_size": 4})
    assert replaced.val_loader is not None
    assert replaced.val_loader.batch_size == 4


def test_objects_built_in_code_override_a_files_parts() -> None:
    """A model, optimizer, scheduler or loader built in code replaces the file's entry as
    it is (loss_fn and aspects already could)."""
    from torch.utils.data import TensorDataset

    model = torch.nn.Linear(8, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scheduler = StepLR(optimizer, step_size=1)
    data = TensorDataset(torch.randn(8, 8), torch.randint(0, 3, (8,)))
    train, val = DataLoader(data, batch_size=4), DataLoader(data, batch_size=8)
    runner = Runner.from_config(
        _config(),
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        train_loader=train,
        val_dataloader=val,
    )
    assert runner.model is model
    assert runner.optimizer is optimizer
    assert runner.scheduler is scheduler
    assert (runner.train_loader, runner.val_loader) == (train, val)
    built = Runner.from_config(_config(), model=model)
    assert built.optimizer.param_groups[0]["params"][0] is model.weight


def test_train_step_and_val_step_are_given_in_code_not_named_by_a_file() -> None:
    """A function as an override (or in a dict config) is the step; a path in a file is
    refused: the file would also choose the batches it is called with."""
    seen: list[int] = []

    def val_step(runner: Runner, batch: Any) -> dict[str, Any]:
        seen.append(len(batch[0]))
        return {"loss": torch.tensor(0.0)}

    loader = {"dataset": {"type": "RandomClassification", "n": 8, "features": 8, "classes": 3}}
    config = _config(val_loader=loader, max_iters=None, max_epochs=1)
    Runner.from_config(config, val_step=val_step).run()
    assert seen
    with pytest.raises(ConfigError, match=r"^train_step: must be a function .* given in code"):
        Runner.from_config(_config(train_step="torch:save"))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("loss_fn", "torch:save"),
        ("model", {"type": "torch.nn.init:zeros_"}),
        ("aspects", [{"type": "subprocess:Popen", "args": "true"}]),
    ],
)
def test_a_path_must_name_a_class_of_its_part(key: str, value: Any) -> None:
    """A function, or a class of another kind, by path: refused before anything is called
    (a factory function is registered in code and named instead)."""
    with pytest.raises(ConfigError, match=r"not (a torch\.nn\.Module|an Aspect)"):
        Runner.from_config(_config(**{key: value}))


def test_a_scheduler_object_of_any_kind_overrides_a_files_scheduler() -> None:
    """Any scheduler object built in code (not only torch's) is used as it is, as
    Runner(scheduler=...) takes it."""

    class Warmup:
        def __init__(self, optimizer: torch.optim.Optimizer) -> None:
            self.optimizer = optimizer

        def step(self) -> None: ...

        def state_dict(self) -> dict[str, Any]:
            return {}

        def load_state_dict(self, state: dict[str, Any]) -> None: ...

    model = torch.nn.Linear(8, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scheduler = Warmup(optimizer)
    runner = Runner.from_config(_config(), model=model, optimizer=optimizer, scheduler=scheduler)
    assert runner.scheduler is scheduler


_YAML_RUN = """\
model: {type: Linear, in_features: 8, out_features: 3}
optimizer: {type: SGD, lr: 0.1}
train_loader: {dataset: {type: RandomClassification, n: 16, features: 8, classes: 3}}
max_iters: 2
"""


@pytest.mark.parametrize(
    ("text", "key", "write"),
    [
        ("scheduler: {type: CosineAnnealingLR, T_max: 4, eta_min: 1e-6}", "eta_min", "1.0e-6"),
        ("scheduler: {type: StepLR, step_size: 1, gamma: 5e-1}", "gamma", "5.0e-1"),
        ("scheduler: {type: ReduceLROnPlateau, threshold: 1e-4}", "threshold", "1.0e-4"),
        ("scheduler: {type: StepLR, step_size: 1, gamma: 2E+3}", "gamma", "2.0E+3"),
        ("loss_fn: {type: cross_entropy, label_smoothing: 1e-1}", "label_smoothing", "1.0e-1"),
        # No default, annotated 'float | list[float]': refused at its key, not at torch's
        ("scheduler: {type: OneCycleLR, max_lr: 1e-3, total_steps: 4}", "max_lr", "1.0e-3"),
    ],
)
def test_a_number_yaml_reads_as_text_is_refused_before_training(
    tmp_path: Path, text: str, key: str, write: str
) -> None:
    """`1e-6` is text to PyYAML: refused where a number is expected (schedulers and
    functional losses do not check it, and the run would fail mid-epoch), with the
    spelling YAML reads as a number."""
    path = _write(tmp_path, "run.yaml", _YAML_RUN + text + "\n")
    part = text.partition(":")[0]
    with pytest.raises(ConfigError, match=rf"is the string .*write {re.escape(write)}\b") as info:
        Runner.from_config(path)
    assert info.value.key == f"{part}.{key}"
    assert "a '.' and a signed exponent" in str(info.value)


def test_a_quoted_number_is_told_to_drop_the_quotes() -> None:
    """A quoted number YAML would read unquoted ('0.5', '8') is told so, not given a
    1e-3 example that has nothing to do with it."""
    scheduler = {"type": "StepLR", "step_size": 1, "gamma": "0.5"}
    with pytest.raises(ConfigError, match=r"^scheduler\.gamma: .*write 0\.5 without quotes"):
        Runner.from_config(_config(scheduler=scheduler))
    model = {"type": "Linear", "in_features": "8", "out_features": 3}  # no default, 'int'
    with pytest.raises(ConfigError, match=r"^model\.in_features: .*write 8 without quotes") as info:
        Runner.from_config(_config(model=model))
    assert "1e-3" not in str(info.value)


@pytest.mark.parametrize(
    ("key", "value", "where", "spelt"),
    [
        (
            "model",
            {"type": "Linear", "in_features": 8, "out_features": 3, "bias": "false"},
            r"model\.bias",
            "false",
        ),
        ("optimizer", {"type": "Adam", "amsgrad": "False"}, r"optimizer\.amsgrad", "false"),
        (
            "train_loader",
            {
                "dataset": {"type": "RandomClassification", "n": 8, "features": 8},
                "batch_size": 4,
                "shuffle": "yes",
            },
            r"train_loader\.shuffle",
            "true",
        ),
    ],
)
def test_a_quoted_boolean_is_refused_not_read_as_true(
    key: str, value: Any, where: str, spelt: str
) -> None:
    """'false' for a bool parameter of torch (Linear's bias, DataLoader's shuffle: 'bool |
    None') is a non-empty string, true to torch: refused at its key, told how to write it."""
    with pytest.raises(ConfigError, match=rf"^{where}: is the string .*write {spelt} without"):
        Runner.from_config(_config(**{key: value}))


def test_text_for_a_number_parameter_is_refused_at_its_key() -> None:
    """SGD(lr='fast') failed inside torch ('<' not supported between str and float) with
    the optimizer's key: it is refused at optimizer.lr, saying to write a number."""
    with pytest.raises(ConfigError, match=r"^optimizer\.lr: is the string 'fast', not a number"):
        Runner.from_config(_config(optimizer={"type": "SGD", "lr": "fast"}))
    layer = {"type": "Conv1d", "in_channels": 1, "out_channels": 1, "kernel_size": 1}
    model = {"type": "Sequential", "layers": [{**layer, "padding": "same"}, {"type": "Flatten"}]}
    assert Runner.from_config(_config(model=model)).model[0].padding == "same"  # 'str | int'


def test_a_string_a_bool_parameter_cannot_mistake_is_let_through() -> None:
    """Only text YAML would read as a boolean is refused: Conv1d's padding: same stays."""
    layer = {"type": "Conv1d", "in_channels": 1, "out_channels": 1, "kernel_size": 1}
    model = {"type": "Sequential", "layers": [{**layer, "padding": "same"}, {"type": "Flatten"}]}
    assert Runner.from_config(_config(model=model)).model[0].padding == "same"


def test_a_quoted_number_for_an_int_without_a_default_is_refused_before_training() -> None:
    """StepLR(step_size='2') is taken by torch and fails at the first step: a parameter
    annotated int (here the string annotation 'int') refuses a quoted number when read."""
    scheduler = {"type": "StepLR", "step_size": "2"}
    with pytest.raises(ConfigError, match=r"^scheduler\.step_size: .*write 2 without quotes"):
        Runner.from_config(_config(scheduler=scheduler))


@pytest.mark.parametrize("value", [[{"type": "StepLR", "step_size": 1}], 3, 0.5, True])
def test_a_scheduler_that_is_not_one_is_refused(value: Any) -> None:
    """A list (OpenMMLab's param_scheduler: [...]), number or bool under scheduler: is
    refused, not handed to the run to fail at its first step."""
    with pytest.raises(ConfigError, match=r"^scheduler: ") as info:
        Runner.from_config(_config(scheduler=value))
    if isinstance(value, list):
        assert "SequentialLR" in str(info.value)


def test_chained_schedulers_are_written_as_one_sequential_lr() -> None:
    """What the list error tells users to write builds (SequentialLR of two)."""
    scheduler = {
        "type": "SequentialLR",
        "schedulers": [
            {"type": "LinearLR", "start_factor": 0.1, "total_iters": 2},
            {"type": "StepLR", "step_size": 1},
        ],
        "milestones": [2],
    }
    runner = Runner.from_config(_config(scheduler=scheduler))
    assert isinstance(runner.scheduler, torch.optim.lr_scheduler.SequentialLR)


@pytest.mark.parametrize("name", ["Timed", "Logged", "Recorder"])
def test_an_aspect_without_a_pointcut_is_told_to_take_one_in_config_terms(name: str) -> None:
    """Timed, Logged, Recorder advise no join point of their own: the error says to write
    pointcut: in the entry, not to call Python (Timed(pointcut=...), register())."""
    with pytest.raises(
        ConfigError, match=rf"^aspects\[0\]: .*\{{type: {name}, pointcut: 'train_\*'\}}"
    ):
        Runner.from_config(_config(aspects=[name]))
    runner = Runner.from_config(_config(aspects=[{"type": name, "pointcut": "train_*"}]))
    assert type(runner.aspects[-1]).__name__ == name


@pytest.mark.parametrize(
    "aspect", ["ParamSchedulerHook", {"type": "LRSchedule", "warmup": "linear", "warmup_iters": 2}]
)
def test_an_lr_schedule_without_a_scheduler_is_refused_at_its_key(aspect: Any) -> None:
    """LRSchedule in a config without scheduler: is a ConfigError at its aspects[i] key
    when the config is read, saying what to add, not a RunnerError when the run starts."""
    config = _config(aspects=["IterTimerHook", aspect])
    del config["scheduler"]
    with pytest.raises(ConfigError, match=r"^aspects\[1\]: .*add scheduler: \{type: StepLR"):
        Runner.from_config(config)


def test_a_warm_up_alone_is_written_with_a_constant_scheduler() -> None:
    """The warm-up the error suggests ({type: ConstantLR, factor: 1.0}) ramps, then holds."""
    aspect = {"type": "LRSchedule", "warmup": "linear", "warmup_iters": 3, "by_epoch": False}
    scheduler = {"type": "ConstantLR", "factor": 1.0}
    runner = Runner.from_config(_config(aspects=[aspect], scheduler=scheduler, max_iters=5))
    runner.run()
    assert runner.optimizer.param_groups[0]["lr"] == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("scheduler", "where"),
    [
        ({"type": "LambdaLR", "lr_lambda": "lambda epoch: 0.95**epoch"}, "lr_lambda"),
        ({"type": "MultiplicativeLR", "lr_lambda": 0.95}, "lr_lambda"),
        ({"type": "CyclicLR", "base_lr": 0.01, "max_lr": 0.1, "scale_fn": "exp"}, "scale_fn"),
    ],
)
def test_a_scheduler_function_written_in_a_file_is_refused_with_the_way_out(
    scheduler: dict[str, Any], where: str
) -> None:
    """LambdaLR's lr_lambda as text or a number is refused at its key, saying to build the
    scheduler in code, not 'str' object is not callable at the first step."""
    with pytest.raises(ConfigError, match=rf"^scheduler\.{where}: .*scheduler=lambda optimizer"):
        Runner.from_config(_config(scheduler=scheduler))
    fn = functools.partial(pow, 0.95)
    runner = Runner.from_config(
        _config(scheduler=None),
        scheduler=lambda optimizer: torch.optim.lr_scheduler.LambdaLR(optimizer, fn),
    )
    runner.run()


@pytest.mark.parametrize("inner", [{"type": "StepLR", "step_size": 1}, "StepLR"])
def test_sub_schedulers_that_are_not_a_list_are_refused_at_their_key(inner: Any) -> None:
    """SequentialLR's schedulers: written as one mapping is refused at scheduler.schedulers,
    not passed to torch, whose error names no key ('at index 0 should have optimizer')."""
    scheduler = {"type": "SequentialLR", "milestones": [2], "schedulers": inner}
    with pytest.raises(ConfigError, match=r"^scheduler\.schedulers: must be a list, \[\{type: "):
        Runner.from_config(_config(scheduler=scheduler))


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("sampler", {"type": "DefaultSampler", "shuffle": True}),
        ("batch_sampler", "BatchSampler"),
        ("collate_fn", {"type": "default_collate"}),
        ("collate_fn", "default_collate"),
        ("worker_init_fn", "numpy:random.seed"),
        ("generator", {"seed": 0}),
    ],
)
def test_loader_options_a_config_cannot_build_are_refused(option: str, value: Any) -> None:
    """A sampler, collate function, worker init or generator written as a name or mapping
    is refused at its key (under the loader's name as written), saying what to do."""
    loader = {**_config()["train_loader"], option: value}
    config = _config(train_loader=None, train_dataloader=loader)
    with pytest.raises(ConfigError, match=rf"^train_dataloader\.{option}: ") as info:
        Runner.from_config(config)
    assert "DataLoader" in str(info.value)
    if option == "sampler":
        assert "shuffle: true" in str(info.value)


def test_loader_functions_given_in_code_are_used() -> None:
    """A collate function object in a dict config reaches the DataLoader."""
    from torch.utils.data import default_collate

    loader = {**_config()["train_loader"], "collate_fn": default_collate}
    runner = Runner.from_config(_config(train_loader=loader))
    assert runner.train_loader.collate_fn is default_collate


def test_objects_built_in_code_are_used_as_given_inside_parts() -> None:
    """A loss object (a module with a class weight, a partial), a dataset object inside a
    loader mapping and layer objects inside a model mapping are used as they are."""
    weighted = torch.nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0, 1.0]))
    smoothed = functools.partial(torch.nn.functional.cross_entropy, label_smoothing=0.1)
    for loss in (weighted, smoothed):
        assert Runner.from_config(_config(loss_fn=loss)).loss_fn is loss
        assert Runner.from_config(_config(), loss_fn=loss).loss_fn is loss
    data = RandomClassification(16, 8, 3)
    runner = Runner.from_config(_config(train_loader={"dataset": data, "batch_size": 4}))
    assert runner.train_loader.dataset is data
    layer = torch.nn.Linear(8, 3)
    runner = Runner.from_config(_config(model={"type": "Sequential", "layers": [layer]}))
    assert runner.model[0] is layer
    runner.run()


def test_evaluate_refuses_metrics_that_are_not_functions() -> None:
    """Metrics named by text are refused when Evaluate is made, not at the first
    validation; from a config, as a ConfigError at the aspect's metrics key."""
    with pytest.raises(InvalidOptionError, match=r"'acc'.*give the function itself"):
        Evaluate(metrics={"acc": "accuracy"})
    with pytest.raises(InvalidOptionError, match=r"metrics"):
        Evaluate(metrics=["accuracy"])  # type: ignore[arg-type]
    entry = {"type": "Evaluate", "metrics": {"acc": "accuracy"}}
    with pytest.raises(ConfigError, match=r"^aspects\[0\]\.metrics: ") as info:
        Runner.from_config(_config(aspects=[entry]))
    assert isinstance(info.value.__cause__, InvalidOptionError)


def test_a_metric_function_is_added_to_a_runner_built_from_a_config() -> None:
    """What the refusal of a metric named in a file says to do works: the runner from the
    file keeps the file's aspects, and the metric added to its Evaluate is computed."""
    loader = _config()["train_loader"]
    config = _config(val_loader=loader, aspects=[*_config()["aspects"], {"type": "Evaluate"}])
    with pytest.raises(ConfigError, match=r"runner.get_aspect\(Evaluate\).metrics\['acc'\]"):
        Runner.from_config({**config, "aspects": [{"type": "Evaluate", "metrics": {"acc": "x"}}]})
    runner = Runner.from_config(config)
    evaluate = runner.get_aspect(Evaluate)
    assert isinstance(evaluate, Evaluate)
    evaluate.metrics["acc"] = lambda out, y: (out.argmax(1) == y).float().mean()
    metrics = runner.run()
    assert 0.0 <= metrics["val/acc"] <= 1.0
    assert runner.get_aspect(LRSchedule) is not None


@pytest.mark.parametrize(
    ("entry", "where"),
    [
        ({"type": "Checkpoint", "interval": 0}, "interval"),
        ({"type": "LRSchedule", "warmup": "cosine", "warmup_iters": 2}, "warmup"),
        ({"type": "Checkpoint", "priority": "VERY_LOWW"}, "priority"),
        ({"type": "GradClip", "max_norm": -1.0}, "max_norm"),
    ],
)
def test_a_bad_aspect_parameter_is_refused_at_its_own_key(
    entry: dict[str, Any], where: str
) -> None:
    """A value an aspect refuses is a ConfigError at aspects[i].<parameter>, not only at the
    entry, so the key path leads to the value to change."""
    with pytest.raises(ConfigError, match=rf"^aspects\[0\]\.{where}: "):
        Runner.from_config(_config(aspects=[entry]))


def test_bad_advice_options_of_an_aspect_are_config_errors() -> None:
    """errors: ignore (checked when the advice is made) and a bad priority of an adapted
    hook class are ConfigErrors at the parameter's key, the original error chained."""
    with pytest.raises(ConfigError, match=r"^aspects\[1\]\.errors: .*errors='ignore'") as info:
        Runner.from_config(
            _config(aspects=["IterTimerHook", {"type": "Logger", "errors": "ignore"}])
        )
    assert isinstance(info.value.__cause__, InvalidOptionError)
    entry = {"type": f"{__name__}:_IntervalHook", "priority": "SUPER"}
    with pytest.raises(ConfigError, match=r"^aspects\[0\]\.priority: .*SUPER") as info:
        Runner.from_config(_config(aspects=[entry]))
    assert isinstance(info.value.__cause__, UnknownPriorityError)


def test_errors_under_openmmlab_loader_names_use_the_key_as_written(tmp_path: Path) -> None:
    """train_dataloader: / val_dataloader: errors name those keys, which the file has."""
    path = _write(
        tmp_path,
        "run.yaml",
        """\
        model: {type: Linear, in_features: 8, out_features: 3}
        optimizer: {type: SGD, lr: 0.1}
        max_iters: 2
        train_dataloader: {dataset: RandomClassification, num_worker: 0}
        """,
    )
    with pytest.raises(ConfigError) as info:
        Runner.from_config(path)
    assert info.value.key == "train_dataloader.num_worker"
    loader = {"dataset": {"type": "RandomClasification"}}
    with pytest.raises(ConfigError) as info:
        Runner.from_config(_config(val_dataloader=loader))
    assert info.value.key == "val_dataloader.dataset.type"


def test_a_seed_torch_cannot_take_is_a_config_error() -> None:
    """seed: 2**64 is refused at its key, not a bare ValueError from torch."""
    with pytest.raises(ConfigError, match=r"^seed: ") as info:
        Runner.from_config(_config(seed=2**64))
    assert info.value.key == "seed"


def test_override_without_type_says_it_replaces_the_files_entry(tmp_path: Path) -> None:
    """`from_config(path, optimizer={'lr': 0.5})` replaces the file's optimizer whole; the
    error at the missing type says so instead of only asking for a type."""
    path = _write(
        tmp_path,
        "run.yaml",
        """\
        max_iters: 1
        model: {type: Linear, in_features: 8, out_features: 3}
        optimizer: {type: SGD, lr: 0.1}
        train_loader: {dataset: RandomClassification}
        """,
    )
    with pytest.raises(
        ConfigError,
        match=r"optimizer\.type: must name the optimizer type.*the override optimizer= "
        r"replaces the file's optimizer: whole, it is not merged into it: give the type too",
    ):
        Runner.from_config(path, optimizer={"lr": 0.5})
    runner = Runner.from_config(path, optimizer={"type": "SGD", "lr": 0.5})
    assert runner.optimizer.param_groups[0]["lr"] == 0.5


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("run.json", "{}", "unknown file type: name it *.yaml, *.yml or *.toml"),
        ("run.yaml", "", "is missing: a runner needs model, optimizer and train_loader"),
        ("run.yaml", "- model\n- optimizer\n", "must be a mapping with the keys"),
        ("run.yaml", "\udcff", "cannot read it"),
    ],
)
def test_a_config_file_that_is_no_config_is_refused_naming_the_file(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    """Another suffix, an empty file, a YAML list or bytes that are not UTF-8: a ConfigError
    that names the file and says what a config file is, not a parser's traceback."""
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        Runner.from_config(path)
    assert info.value.file == str(path)
    assert str(info.value).startswith(f"{path}: ")


def test_a_config_that_is_neither_a_mapping_nor_a_path_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"give a mapping or the path of a \.yaml or \.toml"):
        Runner.from_config(["model", "optimizer"])  # type: ignore[arg-type]


@pytest.mark.parametrize("missing", ["model", "optimizer", "train_loader"])
def test_a_config_without_a_required_part_names_it(missing: str) -> None:
    config = _config()
    del config[missing]
    with pytest.raises(ConfigError, match=rf"^{missing}: is missing") as info:
        Runner.from_config(config)
    assert info.value.key == missing


@pytest.mark.parametrize(
    ("changes", "key", "message"),
    [
        ({"work_dir": 3}, "work_dir", "must be a path, not"),
        ({"default_aspects": "no"}, "default_aspects", "must be true or false"),
        ({"aspects": "Evaluate"}, "aspects", "must be a list of names or {type: Name, ...}"),
        ({"model": {"type": "Sequential", "layers": {"type": "ReLU"}}}, "model.layers", "list"),
        (
            {"model": {"type": "Sequential", "layers": [], "bias": True}},
            "model.bias",
            "Sequential takes only layers: [...]",
        ),
    ],
)
def test_a_config_value_of_the_wrong_kind_is_refused_by_key(
    changes: dict[str, Any], key: str, message: str
) -> None:
    """A work_dir that is no path, default_aspects that is no bool, aspects that are no list,
    Sequential layers that are no list, a Sequential with other options: each is a
    ConfigError naming its key."""
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        Runner.from_config(_config(**changes))
    assert info.value.key == key


def test_default_aspects_false_in_a_config_leaves_the_defaults_out() -> None:
    """default_aspects: false builds the runner without the aspects it would add itself
    (DistSamplerSeed and the scheduler's LRSchedule), as Runner(default_aspects=False)."""
    config = _config(aspects=[])
    with_defaults = Runner.from_config(config)
    model = torch.nn.Linear(8, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(RandomClassification(64, 8, 3), batch_size=8)
    hand = Runner(model, optimizer, loader, scheduler=StepLR(optimizer, 4), max_iters=12)
    assert {type(a) for a in hand.aspects} == {DistSamplerSeed, LRSchedule}
    assert [type(a) for a in with_defaults.aspects] == [type(a) for a in hand.aspects]
    without = Runner.from_config({**config, "default_aspects": False})
    assert without.aspects == []


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "Infinity"])
def test_a_quoted_nan_or_infinity_is_told_how_yaml_spells_it(text: str) -> None:
    """'nan' or 'inf' where a number goes: the hint is YAML's own spelling, and that
    spelling is what PyYAML reads as the same float."""
    scheduler = {"type": "StepLR", "step_size": 1, "gamma": text}
    with pytest.raises(ConfigError, match=r"YAML spells it (\S+)$") as info:
        Runner.from_config(_config(scheduler=scheduler))
    assert info.value.key == "scheduler.gamma"
    spelt = str(info.value).rsplit(" ", 1)[1]
    read = yaml.safe_load(f"gamma: {spelt}")["gamma"]
    assert isinstance(read, float)
    assert str(read) == str(float(text))  # nan, inf or -inf, as Python reads the text
