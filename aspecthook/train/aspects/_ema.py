"""``EMA``: an exponential moving average of the weights, through torch's ``AveragedModel``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from ..._aspect import Aspect, AspectOptions
from ..._context import CallContext, Proceed
from ..._priority import Priority
from ..._typing import Unpack
from ...errors import InvalidOptionError
from .._wrappers import unwrapped, without_wrapper_prefix
from ._options import check_count, check_flags, is_real

__all__ = ["EMA"]


class EMA(Aspect):
    """Keeps ``AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay))`` updated.

    Updated from iteration ``start_iter`` on (counted from 1, as ``Logger`` counts them and
    OpenMMLab's ``begin_iter`` does) after the first optimizer step and every
    ``update_every``-th one after it (steps skipped by ``GradAccumulation`` or ``NaNGuard``
    do not count): steps 1, n + 1, 2n + 1 ... of the average, as OpenMMLab's
    ``ExponentialMovingAverage(interval=n)`` updates; the first update copies the live
    weights (``AveragedModel``'s), and between updates the average stays as it is. Before
    ``start_iter`` the EMA weights follow the live ones (copied after each step), so the
    average starts from the weights trained so far and an evaluation before it sees them,
    not the initial ones. After the run the model holds the live weights, as after
    OpenMMLab's; the EMA weights are in ``averaged.module``. With ``use_for_eval`` (default)
    validation and test run on the EMA weights: they are swapped into the model for the
    epoch and swapped back afterwards. Its state (the averaged weights, the update and step
    counts) is part of checkpoints. With ``use_for_eval``, a checkpoint's ``model`` holds
    the EMA weights (the ones validated, so ``save_best`` keeps the weights its score was
    measured on, ready to load for inference) and EMA's state the live ones; a resume swaps
    them back. A model in a ``DistributedDataParallel`` / ``DataParallel`` wrapper is
    averaged without it, so the EMA weights saved fit the bare model, as the checkpoint's
    ``model`` does.
    """

    name = "ema"
    needs_runner = True
    priority = Priority.NORMAL

    def __init__(
        self,
        decay: float = 0.999,
        *,
        update_every: int = 1,
        start_iter: int = 0,
        use_buffers: bool = True,
        use_for_eval: bool = True,
        **options: Unpack[AspectOptions],
    ) -> None:
        super().__init__(**options)
        check_flags("EMA", use_buffers=use_buffers, use_for_eval=use_for_eval)
        update_every = check_count("EMA", "update_every", update_every, lowest=1)
        start_iter = check_count("EMA", "start_iter", start_iter, lowest=0)
        if not is_real(decay) or not 0.0 < decay < 1.0:
            raise InvalidOptionError(
                f"EMA(decay={decay!r}) must be between 0 and 1 (e.g. 0.999)",
                option="decay",
                value=decay,
            )
        self.decay = float(decay)
        self.update_every = update_every
        self.start_iter = start_iter
        self.use_buffers = use_buffers
        self.use_for_eval = use_for_eval
        self.averaged: AveragedModel | None = None
        self._steps = 0  # optimizer steps since the average started (update_every's count)
        self._pending: dict[str, Any] | None = None  # loaded before the average was built
        self._loaded = False  # the average came from a checkpoint
        self._started = False  # the first epoch of this process began
        self._unpacked_keys: list[str] = []  # what the loaded state had exchanged (pack_state)

    def before_run(self, ctx: CallContext) -> None:
        if self.averaged is None:
            self._build(unwrapped(ctx.runner.model))

    def before_train_epoch(self, ctx: CallContext) -> None:
        if self._started:
            return
        self._started = True
        runner = ctx.runner
        if runner.iter and not self._loaded and self.averaged is not None:
            # Resumed from a checkpoint without this aspect's state (EMA added on resume):
            # the average starts from the weights trained so far, not the initial ones.
            _copy(self._tensors(self.averaged.module), self._tensors(unwrapped(runner.model)))

    def _build(self, model: torch.nn.Module) -> AveragedModel:
        self.averaged = AveragedModel(
            model,
            multi_avg_fn=get_ema_multi_avg_fn(self.decay),  # type: ignore[no-untyped-call]
            use_buffers=self.use_buffers,
        )
        if self._pending is not None:
            self._load_averaged(self._pending)
            self._pending = None
        return self.averaged

    def after_optimizer_step(self, ctx: CallContext) -> None:
        runner = ctx.runner
        if self.averaged is None or ctx.skipped:
            return
        model = unwrapped(runner.model)
        # runner.iter is the iterations done before this one: this is iteration iter + 1,
        # counted from 1 as start_iter counts (OpenMMLab's begin_iter counts them so too).
        if runner.iter + 1 < self.start_iter:
            # Not started: follow the live weights, so a validation or checkpoint before
            # the average starts has no untrained model.
            _copy(self._tensors(self.averaged.module), self._tensors(model))
            return
        # The steps since the start, from 0, as OpenMMLab's averaged models count their
        # calls: the 0th (a copy: AveragedModel's first update) and every
        # update_every-th after it update; the average stays as it is in between.
        if self._steps % self.update_every == 0:
            self.averaged.update_parameters(model)
        self._steps += 1

    def around_val_epoch(self, ctx: CallContext, proceed: Proceed) -> Any:
        """Validation on the EMA weights (``use_for_eval``); the live ones are back after
        it, whatever happens. Around advice nests, so two EMA aspects restore in the
        reverse order of their swaps and the live weights come back last."""
        if not self.use_for_eval:
            return proceed()
        model = unwrapped(ctx.runner.model)
        if self.averaged is None:  # a runner that loaded a checkpoint and tests, unrun
            self._build(model)
        backup = self._swap_in(model)
        try:
            return proceed()
        finally:
            _copy(self._tensors(model), backup)

    around_test_epoch = around_val_epoch

    def _tensors(self, model: torch.nn.Module) -> list[torch.Tensor]:
        tensors: list[torch.Tensor] = list(model.parameters())
        if self.use_buffers:
            tensors += list(model.buffers())
        return tensors

    def _swap_in(self, model: torch.nn.Module) -> list[torch.Tensor]:
        """Put the EMA weights into ``model``; return copies of the live ones."""
        assert self.averaged is not None
        live = self._tensors(model)
        backup = [t.detach().clone() for t in live]
        _copy(live, self._tensors(self.averaged.module))
        return backup

    def state_dict(self) -> dict[str, Any]:
        if self.averaged is None:  # not built: a loaded average is saved again as it came
            return (
                {} if self._pending is None else {"averaged": self._pending, "steps": self._steps}
            )
        return {"averaged": self.averaged.state_dict(), "steps": self._steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "averaged" in state:
            self._loaded = True
            if self.averaged is not None:
                self._load_averaged(state["averaged"])
            else:  # applied when the average is built (before_run, or a test without run)
                self._pending = state["averaged"]
        self._steps = int(state.get("steps", self._steps))

    def _load_averaged(self, state: Mapping[str, Any]) -> None:
        """Load an ``AveragedModel`` state, one saved around a wrapped model included
        (``module.module.`` keys)."""
        assert self.averaged is not None
        inner = {k[len("module.") :]: v for k, v in state.items() if k.startswith("module.")}
        inner = dict(without_wrapper_prefix(inner, self.averaged.module))
        rest = {k: v for k, v in state.items() if not k.startswith("module.")}
        self.averaged.load_state_dict({**rest, **{f"module.{k}": v for k, v in inner.items()}})

    def pack_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """The runner's state with the EMA weights as its ``model`` and the live weights in
        this aspect's state (``use_for_eval``), as OpenMMLab's EMA hook saves them."""
        own = state.get("aspects", {}).get(self.name)
        if not self.use_for_eval or not own or "swapped" in own:
            return state
        if self.averaged is None:  # a loaded state not yet built: packed as it was saved
            keys = self._unpacked_keys
        else:
            module = self.averaged.module
            # Every name of a shared (tied) tensor: the state dict has each, and loading it
            # keeps the last one, so all must hold the EMA weights.
            keys = [name for name, _ in module.named_parameters(remove_duplicate=False)]
            if self.use_buffers:
                keys += [name for name, _ in module.named_buffers(remove_duplicate=False)]
        if not keys:
            return state
        return _exchange(state, self.name, [k for k in keys if k in state["model"]], True)

    def unpack_state(self, state: Mapping[str, Any]) -> Mapping[str, Any]:
        """Undo ``pack_state``: the live weights back under ``model``."""
        own = state.get("aspects", {}).get(self.name)
        if not own or "swapped" not in own:
            return state
        self._unpacked_keys = list(own["swapped"])
        return _exchange(state, self.name, list(own["swapped"]), False)


def unpack_orphan(state: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """Undo an EMA aspect's ``pack_state`` when the runner loading ``state`` has no aspect
    of that name: the live weights go back under ``model`` (pure data, no aspect needed)."""
    own = state.get("aspects", {}).get(name)
    if not isinstance(own, Mapping) or "swapped" not in own or "averaged" not in own:
        return state
    return _exchange(state, name, list(own["swapped"]), False)


def _exchange(state: Mapping[str, Any], name: str, keys: list[str], pack: bool) -> dict[str, Any]:
    """``state`` with ``model[key]`` and the averaged ``module.<key>`` exchanged for
    ``keys``; the aspect's state lists them (``swapped``) while they are exchanged."""
    own = dict(state["aspects"][name])
    model, averaged = dict(state["model"]), dict(own["averaged"])
    for key in keys:
        inner = f"module.{key}"
        model[key], averaged[inner] = averaged[inner], model[key]
    own["averaged"] = averaged
    if pack:
        own["swapped"] = keys
    else:
        own.pop("swapped", None)
    return {**state, "model": model, "aspects": {**state["aspects"], name: own}}


def _copy(dst: list[torch.Tensor], src: list[torch.Tensor]) -> None:
    """Copy ``src`` into ``dst``, tensor by tensor (the same model's, in the same order)."""
    with torch.no_grad():
        for to, value in zip(dst, src, strict=True):
            to.copy_(value)
