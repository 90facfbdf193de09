"""The ``Runner``: owns the model parts, the counters and a weaver; runs the join-point loop.

Everything a run does besides forward/backward/step is an aspect registered on the
runner's own (local) weaver, so aspects given to one runner never advise another, while
module-level advice (``@before('train_iter')``) reaches every runner.
"""

from __future__ import annotations

import contextlib
import os
import random
import types
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar, overload

import torch

from .._aspect import Aspect
from .._context import CURRENT_RUNNER
from .._describe import Description
from .._handle import Handle
from .._typing import Self
from .._weaver import Weaver
from ..errors import InvalidOptionError, RunnerError
from . import _loop
from ._checks import (
    _check_can_run,
    _check_limits,
    _check_open,
    _check_optimizer,
    _check_parts,
    _check_scheduler,
    _check_settings,
    _check_step_signatures,
    _check_work_dir,
    _explain_no_grad,
    _on_device,
)
from ._data import epoch_batches, loader_length
from ._given_aspects import adapt_unique, shipped
from ._reports import report_near_misses, report_unfinished_stage
from ._state import load_runner_state, runner_state
from ._steps import _PAIRS, _as_outputs, _is_scalar, _move, _snapshot, _split_batch, _Tensor
from .aspects._options import is_integer

__all__ = ["JOINPOINTS", "Runner", "seed_everything"]

F = TypeVar("F", bound=Callable[..., Any])
A = TypeVar("A", bound=Aspect)

JOINPOINTS = (
    "run",
    "train_epoch",
    "train_iter",
    "forward",
    "backward",
    "optimizer_step",
    "val_epoch",
    "val_iter",
    "test_epoch",
    "test_iter",
)


#: The runner attribute that counts the completed calls of a join point (its calls are
#: numbered by it: see ``JoinPoint.counter``).
COUNTERS = {"train_iter": "iter", "train_epoch": "epoch"}

#: The join points inside train_iter, inlined there while none has advice.
INNER = ("forward", "backward", "optimizer_step")


def seed_everything(seed: int) -> None:
    """Seed python ``random``, numpy (when installed) and torch."""
    if not is_integer(seed):
        raise InvalidOptionError(
            f"seed_everything({seed!r}): a seed is an int, e.g. seed_everything(0)",
            option="seed",
            value=seed,
        )
    seed = int(seed)  # numpy's integers too: python's random refuses np.int64
    random.seed(seed)
    torch.manual_seed(seed)
    with contextlib.suppress(ImportError):
        import numpy

        numpy.random.seed(seed % 2**32)


class Runner:
    """A training run whose loop is nothing but join points.

    ``runner.run()`` trains and returns the final metrics. Aspects see the run through
    this object (``ctx.runner``): ``model``, ``optimizer``, ``scheduler``, the loaders,
    the counters ``epoch`` / ``iter`` / ``inner_iter``, ``outputs``, ``metrics``,
    ``work_dir``, ``rank``, ``world_size``, ``stop(reason)``, ``state_dict()``.
    """

    __aspecthook_runner__ = True

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        train_loader: Iterable[Any],
        *,
        val_loader: Iterable[Any] | None = None,
        test_loader: Iterable[Any] | None = None,
        scheduler: Any = None,
        loss_fn: Callable[..., torch.Tensor] | None = None,
        train_step: Callable[[Runner, Any], Any] | None = None,
        val_step: Callable[[Runner, Any], Any] | None = None,
        max_epochs: int | None = None,
        max_iters: int | None = None,
        aspects: Iterable[Aspect | Any] = (),  # Any: hook objects, see add_aspect
        work_dir: str | os.PathLike[str] | None = None,
        device: str | torch.device | None = None,
        seed: int | None = None,
        default_aspects: bool = True,
    ) -> None:
        loaders = {"train_loader": train_loader, "val_loader": val_loader}
        steps = {"loss_fn": loss_fn, "train_step": train_step, "val_step": val_step}
        _check_parts(model, optimizer, {**loaders, "test_loader": test_loader}, steps)
        _check_step_signatures(steps)
        _check_limits(max_epochs, max_iters)
        _check_settings(aspects, seed, default_aspects)
        _check_scheduler(scheduler, optimizer)
        _check_optimizer(optimizer, model)
        self.device, self.model = _on_device(model, device)
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.train_loader = train_loader
        self.val_loader = val_loader
        self.test_loader = test_loader
        self.loss_fn = loss_fn
        self.train_step = train_step
        self.val_step = val_step
        self.max_epochs = max_epochs
        self.max_iters = max_iters
        self.work_dir = _check_work_dir(work_dir)
        self.seed = None if seed is None else int(seed)  # numpy's integers too
        if seed is not None:
            seed_everything(seed)
        self._start_counters()
        self._running = False  # inside run(): a second, nested run() is refused
        self._closed = False  # close() removed the aspects: run() and test() are refused
        self.weaver = Weaver(f"runner@{id(self):x}", local=True)
        self._declare_joinpoints()
        self._register_aspects(aspects, default_aspects)

    def _start_counters(self) -> None:
        """The counters and state of a run that has not started."""
        self.epoch = 0
        self.iter = 0
        self.inner_iter = 0
        self.outputs: dict[str, Any] = {}
        self.metrics: dict[str, Any] = {}
        self.stop_reason: str | None = None
        self._interrupted = False  # the last run() raised (see _drop_interrupted_gradients)
        #: The iteration and the epoch whose ``train_iter`` / ``train_epoch`` calls last
        #: returned, advice included (set by ``_loop``; see ``report_unfinished_stage``).
        self.settled_iter = 0
        self.settled_epoch = 0

    def _declare_joinpoints(self) -> None:
        """Declare the loop's functions (``_loop``) as this runner's join points."""
        self._run_joinpoint: Callable[[], dict[str, Any]]
        # Each join point is an instance attribute that its join point keeps current
        # (``JoinPoint.publish``): the loop function itself while it has no advice, a
        # dispatcher generated for its advice otherwise. The loop looks the attribute up
        # on every call, so an idle join point costs the loop nothing. The proxies are
        # kept here: they are what ``weave``, ``describe`` and module-level advice see.
        self._proxies: dict[str, Callable[..., Any]] = {}
        #: Whether forward, backward and optimizer_step all have no advice: train_iter
        #: then runs their bodies inline (see ``_loop.train_iter``). Kept current with
        #: the attributes.
        self.inner_idle = True
        for name in JOINPOINTS:
            bound = types.MethodType(getattr(_loop, name), self)
            # train_iter and train_epoch number their calls by the run's counters, so
            # every=n means every n-th iteration (epoch) of the run, a resumed one too.
            counter = COUNTERS.get(name)
            proxy: Any = self.weaver._declare(bound, name, counter=counter)
            self._proxies[name] = proxy
            attribute = "_run_joinpoint" if name == "run" else name
            proxy._self_joinpoint.publish(_AttributeSink(self, attribute))

    def _register_aspects(self, aspects: Iterable[Aspect | Any], default_aspects: bool) -> None:
        """Adapt ``aspects`` (after the default ones) and register them on the weaver."""
        aspects = list(aspects)
        if default_aspects:
            aspects = [*self._default_aspects(aspects), *aspects]
        # Shipped aspects first, so a custom aspect of equal priority runs after them
        # (ties run in registration order); the given order is kept within each group.
        # An adapter (MMHook, KerasCallback) the user made holds a hook of theirs: theirs.
        aspects.sort(key=lambda a: not shipped(a))
        self.aspects: list[Aspect] = []
        for aspect in aspects:
            self.aspects.append(adapt_unique(aspect, self.aspects))
        # One registration for all of them: each join point's dispatcher is built once,
        # not once per aspect that advises it.
        self._handles: list[Handle] = [self.weaver.register(self.aspects)]

    @classmethod
    def from_config(
        cls, config: Mapping[str, Any] | str | os.PathLike[str], /, **overrides: Any
    ) -> Self:
        """A runner built from a mapping or a YAML (``safe_load``) / TOML file.

        ``model``, ``optimizer``, ``scheduler``, ``loss_fn``, the loaders' ``dataset`` and
        ``aspects`` are ``{type: Name, **parameters}`` resolved in ``aspecthook.train``'s
        ``MODELS`` / ``OPTIMIZERS`` / ``SCHEDULERS`` / ``LOSSES`` / ``DATASETS`` and
        ``aspecthook.registry.ASPECTS``; ``overrides`` replace top-level keys (None removes
        one). ``seed`` is applied before the model is built. A bad value raises
        ``ConfigError`` naming the file and key path. Keys: ``aspecthook.train._config``.
        """
        from ._config import runner_kwargs

        return cls(**runner_kwargs(config, overrides))

    # -- join points (replaced per instance in __init__ by advised proxies) ---------------

    def run(self) -> dict[str, Any]:
        """Train until the limits or ``stop()``; return the metrics as they are at its end
        (a copy: ``runner.metrics`` goes on changing with later runs and tests).

        Calls the ``run`` join point with this runner as ``ctx.runner`` for every advised
        call made meanwhile, including the user's own join points (``Runner.joinpoint``).
        """
        _check_can_run("run", closed=self._closed, running=self._running)
        if loader_length(self.train_loader) == 0:
            raise RunnerError(
                "train_loader has no batches (len() == 0; with drop_last=True the dataset "
                "must hold at least one full batch): give it data or a smaller batch_size"
            )
        report_near_misses(self, JOINPOINTS)
        if self._interrupted:
            report_unfinished_stage(self)
            self._drop_interrupted_gradients()
        token = CURRENT_RUNNER.set(self)
        self._running = True
        try:
            return _snapshot(self._run_joinpoint())
        except BaseException as exc:
            self._interrupted = True
            # A backward() of a loss without grad_fn: say why (only on this error path).
            _explain_no_grad(exc, self.outputs.get("loss"), self.optimizer)
            raise
        finally:
            self._running = False
            CURRENT_RUNNER.reset(token)

    def _drop_interrupted_gradients(self) -> None:
        """After a run() that raised (Ctrl-C in a notebook, say): the iteration it broke
        off may have back-propagated without stepping, and is trained again, so its
        gradients are dropped, or the next step would count that batch twice. An aspect
        that keeps gradients across iterations (``GradAccumulation``) says whether they
        are still whole (``keeps_gradients``)."""
        self._interrupted = False
        for aspect in self.aspects:
            keeps = getattr(aspect, "keeps_gradients", None)
            if callable(keeps) and keeps(self):
                return
        self.optimizer.zero_grad(set_to_none=True)

    def test(self) -> dict[str, Any]:
        """Run the test loop over ``test_loader`` once; return the metrics (``Evaluate``
        puts its results there as ``'test/<name>'``), a copy as ``run()`` returns."""
        _check_can_run("test", closed=self._closed, running=False)
        if self.test_loader is None:
            raise RunnerError("runner.test() needs a test_loader: give Runner(test_loader=...)")
        token = CURRENT_RUNNER.set(self)
        try:
            return _snapshot(self.test_epoch())
        finally:
            CURRENT_RUNNER.reset(token)

    @overload
    def joinpoint(self, name: F) -> F: ...

    @overload
    def joinpoint(self, name: str | None = None) -> Callable[[F], F]: ...

    def joinpoint(self, name: Any = None) -> Any:
        """Declare one of your callables a join point of this run (advised by its aspects):
        ``@runner.joinpoint``, ``@runner.joinpoint()`` or ``@runner.joinpoint('augment')``."""
        _check_open("joinpoint", closed=self._closed)
        return self.weaver.joinpoint(name)

    def train_epoch(self) -> None:
        _loop.train_epoch(self)

    def train_iter(self, batch: Any) -> dict[str, Any]:
        return _loop.train_iter(self, batch)

    def forward(self, batch: Any) -> dict[str, Any]:
        return _loop.forward(self, batch)

    def backward(self, loss: torch.Tensor) -> None:
        _loop.backward(self, loss)

    def optimizer_step(self) -> None:
        _loop.optimizer_step(self)

    def val_epoch(self) -> dict[str, Any]:
        return _loop.val_epoch(self)

    def val_iter(self, batch: Any) -> dict[str, Any]:
        return _loop.val_iter(self, batch)

    def test_epoch(self) -> dict[str, Any]:
        return _loop.test_epoch(self)

    def test_iter(self, batch: Any) -> dict[str, Any]:
        return _loop.test_iter(self, batch)

    # -- aspects ------------------------------------------------------------------------

    def add_aspect(self, aspect: Aspect | Any) -> Handle:
        """Register ``aspect`` on this runner only; its state joins ``state_dict()``.

        OpenMMLab-style hooks and Keras-style callbacks are wrapped first
        (``aspecthook.adapters.as_aspect``).
        """
        _check_open("add_aspect", closed=self._closed)
        aspect = adapt_unique(aspect, self.aspects)
        handle = self.weaver.register(aspect)
        self.aspects.append(aspect)
        self._handles.append(handle)
        return handle

    @overload
    def get_aspect(self, kind: type[A]) -> A | None: ...

    @overload
    def get_aspect(self, kind: str) -> Aspect | None: ...

    def get_aspect(self, kind: type[Aspect] | str) -> Aspect | None:
        """The first registered aspect of this type (or with this name), else None."""
        for aspect in self.aspects:
            if (isinstance(kind, str) and aspect.name == kind) or (
                isinstance(kind, type) and isinstance(aspect, kind)
            ):
                return aspect
        return None

    def _default_aspects(self, given: list[Aspect]) -> list[Aspect]:
        from .aspects import DistSamplerSeed, Evaluate, LRSchedule

        defaults: list[Aspect] = []
        if not any(isinstance(a, DistSamplerSeed) for a in given):
            defaults.append(DistSamplerSeed())
        if self.scheduler is not None and not any(isinstance(a, LRSchedule) for a in given):
            defaults.append(LRSchedule())  # torch's convention: one scheduler step per epoch
        loaders = self.val_loader is not None or self.test_loader is not None
        if loaders and not any(isinstance(a, Evaluate) for a in given):
            defaults.append(Evaluate())
        return defaults

    # -- the protocol aspects use --------------------------------------------------------

    @property
    def rank(self) -> int:
        """This process's rank in the default process group (0 without one). Read when
        asked, so a group initialised after the runner was built counts too."""
        return _dist_info()[0]

    @property
    def world_size(self) -> int:
        """The number of ranks in the default process group (1 without one)."""
        return _dist_info()[1]

    # OpenMMLab's names of the loaders, which its hooks read (``runner.train_dataloader``).
    @property
    def train_dataloader(self) -> Iterable[Any]:
        """``train_loader``, under the name OpenMMLab's runner gives it (for its hooks)."""
        return self.train_loader

    @property
    def val_dataloader(self) -> Iterable[Any] | None:
        """``val_loader``, under OpenMMLab's name."""
        return self.val_loader

    @property
    def test_dataloader(self) -> Iterable[Any] | None:
        """``test_loader``, under OpenMMLab's name."""
        return self.test_loader

    @property
    def finished(self) -> bool:
        """Whether the run reached its limits or was stopped."""
        if self.stop_reason is not None:
            return True
        if self.max_iters is not None and self.iter >= self.max_iters:
            return True
        return self.max_epochs is not None and self.epoch >= self.max_epochs

    def stop(self, reason: str) -> None:
        """Ask the loop to stop after the current iteration; ``reason`` is kept."""
        self.stop_reason = reason

    def end_epoch(self, *, empty: bool = False) -> None:
        """Count the epoch that just ended; one whose loader gave no batch at all
        (``empty``, nothing consumed before a resume either) is refused, or a run by
        ``max_iters`` would spin forever."""
        if empty and self.inner_iter == 0:
            raise RunnerError(
                f"train_loader gave no batch in epoch {self.epoch}: an iterable dataset "
                "must yield at least one batch each time it is iterated"
            )
        self.epoch += 1
        self.inner_iter = 0

    def epoch_consumed(self) -> bool:
        """Whether this epoch's batches are all used (False when the loader has no length)."""
        length = loader_length(self.train_loader)
        return length is not None and self.inner_iter >= length

    def epoch_batches(self) -> Iterator[Any]:
        """This epoch's batches, after the ``inner_iter`` already consumed (on resume).

        Without a ``device`` it is the loader's own iterator: the loop then costs nothing
        per batch on top of the loader (no generator to resume, no call).
        """
        return self._on_device(epoch_batches(self.train_loader, self.inner_iter))

    def eval_batches(self, loader: Iterable[Any] | None) -> Iterator[Any]:
        """The batches of a validation or test ``loader`` (none if it is None), on the
        runner's device when it has one, as ``epoch_batches`` gives training batches."""
        return self._on_device(iter(loader if loader is not None else ()))

    def _on_device(self, batches: Iterator[Any]) -> Iterator[Any]:
        return batches if self.device is None else map(self.to_device, batches)

    def to_device(self, batch: Any) -> Any:
        """Move the tensors in ``batch`` to the runner's device (if one was given)."""
        device = self.device
        if device is None:
            return batch
        return _move(batch, device, device.type == "cuda")

    @contextlib.contextmanager
    def evaluating(self) -> Iterator[None]:
        """Eval mode and no gradients for the block; the previous mode comes back."""
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                yield
        finally:
            self.model.train(was_training)

    def compute_train_step(self, batch: Any) -> dict[str, Any]:
        """Run the user's step and return a dict with a scalar ``loss`` tensor."""
        # Runs every iteration: the common case (loss_fn on an (x, y) batch, a 0-d loss
        # returned) comes first and is written out here, with the fewest tests; every other
        # case (and a one-element loss) goes through the checks in _as_outputs.
        loss_fn = self.loss_fn
        train_step = self.train_step
        if train_step is None and loss_fn is not None and type(batch) in _PAIRS and len(batch) == 2:
            # A plain read: ``self.model(...)`` is a method lookup on an instance attribute,
            # which the interpreter cannot specialise.
            model = self.model
            result = loss_fn(model(batch[0]), batch[1])
            # ``ndim`` is an attribute read, ``numel()`` a call through torch's parser.
            if type(result) is _Tensor and not result.ndim:
                return {"loss": result}
            return _as_outputs(result, where="the model")
        result = train_step(self, batch) if train_step is not None else self._default_step(batch)
        if type(result) is _Tensor and not result.ndim:
            return {"loss": result}
        return _as_outputs(result, where="train_step" if train_step else "the model")

    def compute_eval_step(self, batch: Any) -> dict[str, Any]:
        """The validation/test step: ``val_step`` or model output, targets and loss."""
        if self.val_step is not None:
            result = self.val_step(self, batch)
            if isinstance(result, dict):
                return result
            if _is_scalar(result):  # a loss, as train_step returns one
                return {"loss": result}
            # The model's outputs, however the step got them: measured against the
            # batch's targets, as the default step's are.
            return self._eval_result(result, _split_batch(batch)[1])
        inputs, targets = _split_batch(batch)
        return self._eval_result(self.model(inputs), targets)

    def _eval_result(self, outputs: Any, targets: Any) -> dict[str, Any]:
        """The evaluation step's dict for the model's ``outputs`` on a batch's ``targets``:
        both, and the loss (``loss_fn``'s, or the model's own)."""
        result = {"outputs": outputs, "targets": targets}
        if self.loss_fn is not None and targets is not None:
            result["loss"] = self.loss_fn(outputs, targets)
        elif self.loss_fn is None and isinstance(outputs, Mapping) and "loss" in outputs:
            result["loss"] = outputs["loss"]  # a model that computes its own loss
        return result

    def _default_step(self, batch: Any) -> Any:
        inputs, targets = _split_batch(batch)
        outputs = self.model(inputs)
        if self.loss_fn is None:
            return outputs
        return self.loss_fn(outputs, targets)

    # -- state --------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Model, optimizer, scheduler, counters and every aspect's own state.

        The model's state is the one inside a ``DistributedDataParallel`` / ``DataParallel``
        wrapper (no ``module.`` before its keys), so a checkpoint of a distributed run
        loads into the bare model, and one of a single process into a wrapped one.
        """
        return runner_state(self)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what ``state_dict()`` saved."""
        load_runner_state(self, state)

    def describe(self) -> Description:
        """This run's join points with the advice at each, in order (data and a table)."""
        return self.weaver.describe()

    def close(self) -> None:
        """Unregister this runner's aspects and close its weaver; ``run()``, ``test()``,
        ``add_aspect()`` and ``joinpoint()`` are refused after it (``describe()`` and
        events still work). Calling it again does nothing."""
        self._closed = True
        for handle in reversed(self._handles):
            handle.remove()
        self._handles.clear()
        self.weaver.close()

    def __repr__(self) -> str:
        limit = f"max_iters={self.max_iters}" if self.max_iters else f"max_epochs={self.max_epochs}"
        return f"<Runner epoch={self.epoch} iter={self.iter} {limit}>"


def _dist_info() -> tuple[int, int]:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class _AttributeSink:
    """Sets a runner attribute to what its join point publishes (weakly: the join point
    must not keep a closed runner alive)."""

    __slots__ = ("attribute", "runner")

    def __init__(self, runner: Runner, attribute: str) -> None:
        self.runner = weakref.ref(runner)
        self.attribute = attribute

    def __call__(self, fn: Callable[..., Any]) -> None:
        runner = self.runner()
        if runner is None:
            return
        setattr(runner, self.attribute, fn)
        if self.attribute in INNER:
            # The attribute is the bare loop function exactly while the point is idle.
            runner.inner_idle = all(
                getattr(getattr(runner, name, None), "__func__", None) is getattr(_loop, name)
                for name in INNER
            )
