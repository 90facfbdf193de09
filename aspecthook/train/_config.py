"""``Runner.from_config``: a training run described by a mapping or a YAML / TOML file.

Every part is built from a registry by its ``type`` name (a registered name, a plugin,
a fallback name of torch, or a ``'package.module:Name'`` path) with the other keys as
keyword parameters, checked against the constructor's signature before it is called::

    seed: 0                                  # seeds python, numpy and torch first
    model:                                   # MODELS (falls back to torch.nn)
      type: Sequential                       # Sequential takes a list of layers
      layers:
        - {type: Linear, in_features: 32, out_features: 10}
    optimizer: {type: SGD, lr: 0.1}          # OPTIMIZERS (torch.optim); params: the model's
    scheduler: {type: StepLR, step_size: 2}  # SCHEDULERS (torch.optim.lr_scheduler)
    loss_fn: cross_entropy                   # LOSSES (torch.nn losses, functional losses)
    train_loader:                            # a torch DataLoader: dataset + its options
      dataset: {type: RandomClassification, n: 256, features: 32, classes: 10}
      batch_size: 16
      shuffle: true
    max_epochs: 2
    aspects: [IterTimerHook, {type: CheckpointHook, interval: 1}]   # ASPECTS

YAML is read with ``yaml.safe_load``'s loader only (a key written twice is refused), and
a ``'package.module:Name'`` path must name a class of the part's kind (a
``torch.nn.Module`` for ``model`` and ``loss_fn``, an ``Aspect`` or hook class for
``aspects``...): the module is imported (as ``import`` would, running its top-level code)
and nothing in it is called unless it is such a class, so a file never calls an arbitrary
function. A factory function (``torchvision.models:resnet18``) is registered in code first
(``MODELS.register(resnet18)``) and named; ``train_step`` and ``val_step`` are given in
code (``Runner.from_config(path, train_step=fn)``).
Every problem is a ``ConfigError`` naming the key path of the bad value
(``aspects[2].type``) and, when the config came from a file, the file.

The registries are defined in ``_registries``, the generic steps of building one part
from its registry entry in ``_config_parts``, the wording of the errors in
``_config_messages``, and what tells an object built in code from a config value in
``_config_values``.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from .._aspect import Aspect
from .._config import _SUFFIXES, _parse_toml, _parse_yaml, _without_extensions
from ..errors import (
    AspectDefinitionError,
    AspectHookError,
    RunnerError,
)
from ..registry import ASPECTS, Parameters
from ._checks import _check_work_dir
from ._config_messages import (
    _NO_FUNCTION,
    _error,
    _kind,
    _needs_pointcut,
    _option_key,
    _user,
)
from ._config_parts import _PartBuilder
from ._config_values import _callable_object, _dataset_object, _is_factory, _loader_object
from ._registries import DATASETS, LOSSES, MODELS, OPTIMIZERS, SCHEDULERS
from ._runner import seed_everything

__all__ = [
    "DATASETS",
    "KEYS",
    "LOSSES",
    "MODELS",
    "OPTIMIZERS",
    "SCHEDULERS",
    "read_config",
    "runner_kwargs",
]

ConfigLike = Mapping[str, Any] | str | os.PathLike[str]

#: The top-level keys of a runner config (``*_dataloader`` are OpenMMLab's names).
KEYS = (
    "aspects",
    "default_aspects",
    "device",
    "loss_fn",
    "max_epochs",
    "max_iters",
    "model",
    "optimizer",
    "scheduler",
    "seed",
    "test_dataloader",
    "test_loader",
    "train_dataloader",
    "train_loader",
    "train_step",
    "val_dataloader",
    "val_loader",
    "val_step",
    "work_dir",
)
_LOADERS = ("train_loader", "val_loader", "test_loader")
#: Each loader key and its OpenMMLab name, both ways.
_LOADER_TWINS = {
    **{key: key.replace("_loader", "_dataloader") for key in _LOADERS},
    **{key.replace("_loader", "_dataloader"): key for key in _LOADERS},
}
_BUILT_IN_CODE = "pass a DataLoader built in code (Runner.from_config(path, {key}=DataLoader(...)))"
#: DataLoader options a config cannot build (no registry makes them), and what to do.
_LOADER_OBJECTS = {
    "sampler": "a config cannot build a sampler: write shuffle: true (or false) beside "
    "batch_size, or " + _BUILT_IN_CODE,
    "batch_sampler": "a config cannot build a batch sampler: write batch_size, shuffle and "
    "drop_last, or " + _BUILT_IN_CODE,
    "collate_fn": "a config cannot name a function: leave it out for DataLoader's "
    "default_collate, give the function itself in code ({key}={{'dataset': ..., "
    "'collate_fn': my_collate}}), or " + _BUILT_IN_CODE,
    "worker_init_fn": "a config cannot name a function: give the function itself in code "
    "({key}={{'dataset': ..., 'worker_init_fn': my_init}}), or " + _BUILT_IN_CODE,
    "generator": "give a torch.Generator in code, or leave it out: seed: seeds torch's "
    "default generator, which DataLoader shuffles with; or " + _BUILT_IN_CODE,
}


# -- reading --------------------------------------------------------------------------------


#: Either of these sets the run's length: an override of one replaces the other too.
_LENGTHS = {"max_epochs": "max_iters", "max_iters": "max_epochs"}


def runner_kwargs(config: ConfigLike, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``Runner(...)`` that ``config`` (plus ``overrides``) describes.

    ``overrides`` replace top-level keys; a None value removes the key. The run's length
    is one setting: overriding ``max_iters`` drops the file's ``max_epochs`` and the other
    way round (unless the override gives both).
    """
    file, data = read_config(config)
    data = _without_extensions(data)
    for key in overrides:  # an override replaces the key under either of its names
        data.pop(_LOADER_TWINS.get(key, key), None)
        length = _LENGTHS.get(key)
        if length is not None and length not in overrides and overrides[key] is not None:
            data.pop(length, None)
    data.update(overrides)
    build = _Builder(file, overridden=frozenset(overrides) if file else frozenset())
    build.check_keys("", data, KEYS)
    return build.runner_kwargs({k: v for k, v in data.items() if v is not None})


def read_config(config: ConfigLike) -> tuple[str, dict[str, Any]]:
    """``(file, data)``: a mapping as it is (file ``''``), or a YAML / TOML file parsed."""
    if isinstance(config, Mapping):
        return "", dict(config)
    if not isinstance(config, (str, os.PathLike)):
        raise _error(
            "", "", f"give a mapping or the path of a .yaml or .toml file, not {_kind(config)}"
        )
    file = os.fspath(config)
    kind = _SUFFIXES.get(Path(file).suffix.lower())
    if kind is None:
        raise _error(file, "", "unknown file type: name it *.yaml, *.yml or *.toml")
    try:
        text = Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _error(file, "", f"cannot read it: {exc}") from None
    data = _parse_yaml(file, text) if kind == "yaml" else _parse_toml(file, text)
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise _error(
            file, "", f"must be a mapping with the keys {', '.join(KEYS)}, not {_kind(data)}"
        )
    return file, dict(data)


# -- building -------------------------------------------------------------------------------


class _Builder(_PartBuilder):
    """Builds the parts of one config; every error names ``file`` and the key path."""

    def __init__(self, file: str, *, overridden: frozenset[str] = frozenset()) -> None:
        super().__init__(file, overridden=overridden)
        self.written: dict[str, str] = {}  # train_loader & co. -> the key the config used

    def runner_kwargs(self, data: dict[str, Any]) -> dict[str, Any]:
        """Seed, then build model, optimizer, scheduler, loss, loaders, aspects in order."""
        data = self.loader_aliases(data)
        for required in ("model", "optimizer", "train_loader"):
            if required not in data:
                raise self.error(
                    required, "is missing: a runner needs model, optimizer and train_loader"
                )
        kwargs = self.settings(data)
        if kwargs.get("seed") is not None:
            self.seed(kwargs["seed"])  # before the model, so its initial weights repeat
        # Objects built in code (a dict config, or overrides of a file) are used as given.
        model = data["model"]
        if not isinstance(model, torch.nn.Module):
            model = self.model("model", model)
        if "device" in kwargs:
            model = self.to_device(model, kwargs["device"])
        optimizer = data["optimizer"]
        if not isinstance(optimizer, torch.optim.Optimizer):
            optimizer = self.build(OPTIMIZERS, "optimizer", optimizer, params=model.parameters())
        kwargs.update(model=model, optimizer=optimizer)
        if "scheduler" in data:
            kwargs["scheduler"] = self.scheduler_entry(data["scheduler"], optimizer)
        if "loss_fn" in data:
            loss = data["loss_fn"]
            kwargs["loss_fn"] = loss if _callable_object(loss) else self.loss("loss_fn", loss)
        for key in ("train_step", "val_step"):
            if key in data:
                kwargs[key] = self.step(key, data[key])
        for key in _LOADERS:
            if key in data:
                kwargs[key] = self.loader(self.written.get(key, key), data[key])
        kwargs["aspects"] = self.aspects(data.get("aspects", []))
        if "scheduler" not in kwargs:
            self.check_schedule(kwargs["aspects"])
        return kwargs

    def check_schedule(self, aspects: list[Aspect]) -> None:
        """An ``LRSchedule`` with no scheduler of its own in a config without ``scheduler:``
        is refused at its key now, not by the run's first join point."""
        from .aspects._lr import LRSchedule

        for i, aspect in enumerate(aspects):
            if isinstance(aspect, LRSchedule) and aspect.scheduler is None:
                raise self.error(
                    f"aspects[{i}]",
                    "LRSchedule steps the runner's scheduler, and this config has none: add "
                    "scheduler: {type: StepLR, step_size: 10} (any torch.optim.lr_scheduler "
                    "class; for a warm-up alone, {type: ConstantLR, factor: 1.0}), or remove "
                    "this aspect",
                )

    def loader_aliases(self, data: dict[str, Any]) -> dict[str, Any]:
        """``train_dataloader`` & co. renamed to ``train_loader``; both at once is an error."""
        for ours in _LOADERS:
            theirs = ours.replace("_loader", "_dataloader")
            if theirs in data:
                if ours in data:
                    raise self.error(theirs, f"is another name for {ours}: give only one of them")
                data[ours] = data.pop(theirs)
                self.written[ours] = theirs
        return data

    def settings(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """The plain values: limits, seed, device, work_dir, default_aspects (checked)."""
        settings = self.limits(data)
        if "device" in data:
            try:
                settings["device"] = torch.device(data["device"])
            except (RuntimeError, TypeError, ValueError) as exc:
                raise self.error("device", f"is not a torch device: {exc}") from exc
        if "work_dir" in data:
            if not isinstance(data["work_dir"], (str, os.PathLike)):
                raise self.error("work_dir", f"must be a path, not {_kind(data['work_dir'])}")
            try:
                settings["work_dir"] = _check_work_dir(data["work_dir"])
            except RunnerError as exc:
                raise self.error("work_dir", str(exc)) from exc
        if "default_aspects" in data:
            value = data["default_aspects"]
            if not isinstance(value, bool):
                raise self.error("default_aspects", f"must be true or false, not {_kind(value)}")
            settings["default_aspects"] = value
        return settings

    def limits(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """``max_epochs`` or ``max_iters`` (exactly one, a positive int) and ``seed``."""
        epochs, iters = data.get("max_epochs"), data.get("max_iters")
        if epochs is not None and iters is not None:
            raise self.error(
                "max_iters",
                "is given with max_epochs: give max_epochs (epoch-based training) or "
                "max_iters (iteration-based training), not both",
            )
        if epochs is None and iters is None:
            raise self.error(
                "", "give max_epochs (epoch-based training) or max_iters (iteration-based)"
            )
        limits: dict[str, Any] = {}
        for key in ("max_epochs", "max_iters", "seed"):
            value = data.get(key)
            if value is not None and (type(value) is not int or (key != "seed" and value < 1)):
                kind = "an int" if key == "seed" else "a positive int"
                raise self.error(key, f"must be {kind}, not {_kind(value)}")
            limits[key] = value
        return limits

    def seed(self, seed: int) -> None:
        """Seed python, numpy and torch; a seed torch cannot take is an error at ``seed``."""
        try:
            seed_everything(seed)
        except (ValueError, OverflowError, RuntimeError) as exc:
            raise self.error(
                "seed", f"torch cannot take it ({exc}): give an int up to 2**64 - 1"
            ) from exc

    def to_device(self, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        """The model on ``device``, moved before the optimizer takes its parameters."""
        try:
            return model.to(device)
        except (RuntimeError, AssertionError) as exc:  # torch without CUDA asserts
            raise self.error("device", f"cannot move the model to {device}: {exc}") from exc

    # -- parts ------------------------------------------------------------------------------

    def model(self, key: str, cfg: Any) -> torch.nn.Module:
        """A model; ``torch.nn.Sequential`` takes ``layers: [...]``, each built as a model."""
        factory, label, params = self.resolve(MODELS, key, cfg)
        if factory is torch.nn.Sequential:
            layers = params.pop("layers", [])
            if not isinstance(layers, list):
                raise self.error(f"{key}.layers", f"must be a list of layers, not {_kind(layers)}")
            if params:
                raise self.error(
                    f"{key}.{next(iter(params))}", "Sequential takes only layers: [...]"
                )
            built = [
                layer
                if isinstance(layer, torch.nn.Module)
                else self.model(f"{key}.layers[{i}]", layer)
                for i, layer in enumerate(layers)
            ]
            return torch.nn.Sequential(*built)
        model = self.call(key, label, factory, params)
        if not isinstance(model, torch.nn.Module):
            raise self.error(key, f"{label} made {_kind(model)}, not a torch.nn.Module")
        return model

    def scheduler_entry(self, cfg: Any, optimizer: torch.optim.Optimizer) -> Any:
        """``scheduler:`` built, or a scheduler object (or factory) built in code as it is;
        a list (OpenMMLab's ``param_scheduler: [...]``) or a plain value is refused."""
        if isinstance(cfg, (list, tuple)):
            raise self.error(
                "scheduler",
                "is a list: give one scheduler. To chain several (OpenMMLab's "
                "param_scheduler: [...]), write {type: SequentialLR, schedulers: [...], "
                "milestones: [...]}; for a warm-up, give the LRSchedule aspect warmup: linear "
                "and warmup_iters: N",
            )
        if isinstance(cfg, (Mapping, str, bytes, int, float)):  # bool is an int
            return self.scheduler("scheduler", cfg, optimizer)  # plain values: refused
        return cfg

    def scheduler(self, key: str, cfg: Any, optimizer: torch.optim.Optimizer) -> Any:
        """A scheduler on ``optimizer``; ``schedulers: [...]`` (SequentialLR) are built too."""
        factory, label, params = self.resolve(SCHEDULERS, key, cfg, optimizer=optimizer)
        inner = params.get("schedulers")
        if isinstance(inner, list):
            params["schedulers"] = [
                self.scheduler(f"{key}.schedulers[{i}]", item, optimizer)
                for i, item in enumerate(inner)
            ]
        elif isinstance(inner, (Mapping, str)):  # torch would fail on it with no key to name
            raise self.error(
                f"{key}.schedulers",
                f"must be a list, [{{type: Name, ...}}, ...], not {_kind(inner)}",
            )
        for name in ("lr_lambda", "scale_fn"):  # LambdaLR, MultiplicativeLR; CyclicLR
            if isinstance(params.get(name), (str, Mapping, int, float)):
                raise self.error(f"{key}.{name}", _NO_FUNCTION.format(label=label, name=name))
        return self.call(key, label, factory, params, shown=_user(cfg))

    def loss(self, key: str, cfg: Any) -> Callable[..., Any]:
        """A loss class is instantiated; a loss function is used as it is (params bound)."""
        factory, label, params = self.resolve(LOSSES, key, cfg)
        if inspect.isclass(factory):
            loss: Callable[..., Any] = self.call(key, label, factory, params)
            return loss
        accepted = Parameters.of(factory)
        if accepted is not None:  # the inputs (those without defaults) come at each call
            options = {k: v for k, v in accepted.defaults.items() if k not in accepted.required}
            self.check(key, label, replace(accepted, defaults=options, required=()), params)
        return functools.partial(factory, **params) if params else factory

    def step(self, key: str, value: Any) -> Callable[..., Any]:
        """``train_step`` / ``val_step``: a function given in code (a dict config or an
        override). A file cannot name one: it would choose what the function is called
        with (the batches come from the file too)."""
        if isinstance(value, str) or not callable(value):
            raise self.error(
                key,
                f"must be a function (runner, batch) given in code, not {_kind(value)}: pass "
                f"it as Runner.from_config(path, {key}=my_step)",
            )
        step: Callable[..., Any] = value
        return step

    def loader(self, key: str, cfg: Any) -> Any:
        """A ``DataLoader`` of ``dataset`` (built from DATASETS) with the other options, or
        a loader object built in code, as it is."""
        if _loader_object(cfg):
            return cfg
        if not isinstance(cfg, Mapping) or "dataset" not in cfg:
            raise self.error(
                key,
                "must be a mapping with dataset: {type: Name, ...} and DataLoader options "
                f"such as batch_size and shuffle, not {_kind(cfg)}",
            )
        options = {k: v for k, v in cfg.items() if k != "dataset"}
        for name, advice in _LOADER_OBJECTS.items():
            if isinstance(options.get(name), (Mapping, str)):
                what = _kind(options[name])
                raise self.error(f"{key}.{name}", f"is {what}: {advice.format(key=key)}")
        dataset = cfg["dataset"]
        if not _dataset_object(dataset):  # else a dataset built in code, as it is
            dataset = self.build(DATASETS, f"{key}.dataset", dataset)
        loader: DataLoader[Any] = self.call(
            key, "DataLoader", DataLoader, {"dataset": dataset, **options}, shown=options
        )
        return loader

    def aspects(self, cfg: Any) -> list[Aspect]:
        """Each item built from ASPECTS; an ``Aspect`` instance (dict configs) as it is."""
        if not isinstance(cfg, (list, tuple)):
            raise self.error(
                "aspects",
                f"must be a list of names or {{type: Name, ...}} mappings, not {_kind(cfg)}",
            )
        return [self.aspect(f"aspects[{i}]", item) for i, item in enumerate(cfg)]

    def aspect(self, key: str, item: Any) -> Aspect:
        """One aspect, its advice made once to check the options the weaver checks then
        (``errors:``, an adapter's ``priority:``): a bad one is a ConfigError at ``key``."""
        from ..adapters import as_aspect

        made = aspect = None
        options: dict[str, Any] = {}
        if isinstance(item, Mapping) and "priority" in item:
            item, options = self._hook_priority(key, item)
        if isinstance(item, (str, Mapping)) or _is_factory(item):
            made = self.build(ASPECTS, key, item)
        try:
            # An OpenMMLab-style hook or Keras-style callback (given or built) is wrapped,
            # as Runner(aspects=[...]) wraps it.
            aspect = as_aspect(item if made is None else made, **options)
            if aspect is not None:
                aspect.make_advice()
        except AspectDefinitionError as exc:
            raise self.error(key, _needs_pointcut(aspect) or str(exc)) from exc
        except (AspectHookError, TypeError, ValueError) as exc:
            given = item if isinstance(item, Mapping) else {}
            raise self.error(_option_key(key, exc, {**given, **options}), str(exc)) from exc
        if aspect is None:
            what = _kind(item if made is None else made)
            raise self.error(
                key,
                f"{'made ' if made is not None else 'is '}{what}, which is not an Aspect, "
                "an OpenMMLab-style hook or a Keras-style callback",
            )
        return aspect

    def _hook_priority(
        self, key: str, item: Mapping[str, Any]
    ) -> tuple[Mapping[str, Any], dict[str, Any]]:
        """A hook or callback class's ``priority:`` goes to its adapter, as OpenMMLab's
        ``custom_hooks`` entries set it, unless the class takes one itself."""
        factory, _, _ = self.resolve(ASPECTS, key, item)
        if not isinstance(factory, type) or issubclass(factory, Aspect):
            return item, {}  # an aspect class or a factory: priority is its own parameter
        try:
            takes = "priority" in inspect.signature(factory).parameters
        except (TypeError, ValueError):
            takes = False
        if takes:
            return item, {}
        rest = {k: v for k, v in item.items() if k != "priority"}
        return rest, {"priority": item["priority"]}
