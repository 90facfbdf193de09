"""``EMA``: an exponential moving average of the weights, through torch's ``AveragedModel``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from ..._aspect import Aspect
from ..._context import CallContext
from ..._priority import Priority
from ...errors import InvalidOptionError

__all__ = ["EMA"]


class EMA(Aspect):
    """Keeps ``AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay))`` updated.

    Updated after every ``update_every``-th optimizer step (steps skipped by
    ``GradAccumulation`` or ``NaNGuard`` do not count) from iteration ``start_iter`` on;
    before that the EMA weights follow the live ones (copied after each step), so the
    average starts from the weights trained so far and an evaluation before ``start_iter``
    sees them, not the initial ones. With ``use_for_eval`` (default) validation and test
    run on the EMA weights: they are swapped into the model for the epoch and swapped back
    afterwards. Its state (the averaged weights, the update and step counts) is part of
    checkpoints. With ``use_for_eval``, a checkpoint's ``model`` holds the EMA weights (the
    ones validated, so ``save_best`` keeps the weights its score was measured on, ready to
    load for inference) and EMA's state the live ones; a resume swaps them back.
    """

    name = "ema"
    priority = Priority.NORMAL

    def __init__(
        self,
        decay: float = 0.999,
        *,
        update_every: int = 1,
        start_iter: int = 0,
        use_buffers: bool = True,
        use_for_eval: bool = True,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        if not 0.0 < decay < 1.0:
            raise InvalidOptionError(
                f"EMA(decay={decay!r}) must be between 0 and 1 (e.g. 0.999)",
                option="decay",
                value=decay,
            )
        self.decay = decay
        self.update_every = update_every
        self.start_iter = start_iter
        self.use_buffers = use_buffers
        self.use_for_eval = use_for_eval
        self.averaged: AveragedModel | None = None
        self._backup: list[torch.Tensor] | None = None
        self._steps = 0  # optimizer steps taken (update_every counts these)

    def before_run(self, ctx: CallContext) -> None:
        if self.averaged is None:
            self._build(ctx.runner.model)

    def _build(self, model: torch.nn.Module) -> AveragedModel:
        self.averaged = AveragedModel(
            model,
            multi_avg_fn=get_ema_multi_avg_fn(self.decay),  # type: ignore[no-untyped-call]
            use_buffers=self.use_buffers,
        )
        return self.averaged

    def after_optimizer_step(self, ctx: CallContext) -> None:
        runner = ctx.runner
        if self.averaged is None or ctx.skipped:
            return
        self._steps += 1
        if runner.iter < self.start_iter:  # not started: follow the live weights
            _copy(self._tensors(self.averaged.module), self._tensors(runner.model))
        elif self._steps % self.update_every == 0:
            self.averaged.update_parameters(runner.model)

    def before_val_epoch(self, ctx: CallContext) -> None:
        if self.use_for_eval:
            self._swap_in(ctx.runner.model)

    def after_val_epoch(self, ctx: CallContext) -> None:
        self._swap_out(ctx.runner.model)

    def on_error_val_epoch(self, ctx: CallContext) -> None:
        self._swap_out(ctx.runner.model)

    before_test_epoch = before_val_epoch
    after_test_epoch = after_val_epoch
    on_error_test_epoch = on_error_val_epoch

    def _tensors(self, model: torch.nn.Module) -> list[torch.Tensor]:
        tensors: list[torch.Tensor] = list(model.parameters())
        if self.use_buffers:
            tensors += list(model.buffers())
        return tensors

    def _swap_in(self, model: torch.nn.Module) -> None:
        if self.averaged is None or self._backup is not None:
            return
        live = self._tensors(model)
        self._backup = [t.detach().clone() for t in live]
        _copy(live, self._tensors(self.averaged.module))

    def _swap_out(self, model: torch.nn.Module) -> None:
        if self._backup is None:
            return
        _copy(self._tensors(model), self._backup)
        self._backup = None

    def state_dict(self) -> dict[str, Any]:
        if self.averaged is None:
            return {}
        return {"averaged": self.averaged.state_dict(), "steps": self._steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "averaged" in state and self.averaged is not None:
            self.averaged.load_state_dict(state["averaged"])
        self._steps = int(state.get("steps", self._steps))

    def pack_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """The runner's state with the EMA weights as its ``model`` and the live weights in
        this aspect's state (``use_for_eval``), as OpenMMLab's EMA hook saves them."""
        own = state.get("aspects", {}).get(self.name)
        if not self.use_for_eval or not own or "swapped" in own or self.averaged is None:
            return state
        module = self.averaged.module
        keys = [name for name, _ in module.named_parameters()]
        if self.use_buffers:
            keys += [name for name, _ in module.named_buffers()]
        return _exchange(state, self.name, [k for k in keys if k in state["model"]], True)

    def unpack_state(self, state: Mapping[str, Any]) -> Mapping[str, Any]:
        """Undo ``pack_state``: the live weights back under ``model``."""
        own = state.get("aspects", {}).get(self.name)
        if not own or "swapped" not in own:
            return state
        return _exchange(state, self.name, list(own["swapped"]), False)


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
