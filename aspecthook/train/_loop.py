"""The training loop, made only of join points.

Each function here is declared as a join point of every ``Runner`` (bound to it, under the
name of the function), and calls the next level through the runner, so every step of the
run can be advised. There is no LR, logging, checkpoint, timing, evaluation, EMA, AMP or
clipping code in this module: those are aspects in ``aspecthook.train.aspects``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._reports import report_finished

if TYPE_CHECKING:
    from ._runner import Runner

__all__ = [
    "backward",
    "forward",
    "optimizer_step",
    "run",
    "test_epoch",
    "test_iter",
    "train_epoch",
    "train_iter",
    "val_epoch",
    "val_iter",
]


_NO_BATCH: Any = object()  # what train_epoch's batch is while the loader gave none


def run(runner: Runner) -> dict[str, Any]:
    """Train until ``max_epochs`` / ``max_iters`` or ``runner.stop()``; return the metrics."""
    runner.settled_iter, runner.settled_epoch = runner.iter, runner.epoch  # after a resume
    if runner.finished:  # nothing to do (run() again at the end, or resumed there): say why
        report_finished(runner)
    while not runner.finished:
        runner.train_epoch()
        runner.settled_epoch = runner.epoch  # the epoch's advice all ran (run() again)
    return runner.metrics


def train_epoch(runner: Runner) -> None:
    """One pass over the training data (resuming mid-epoch where a checkpoint left off).

    A run that finishes on the epoch's last batch (``max_iters`` a multiple of its length,
    or a stop there) ends the epoch too, as running out of batches would.
    """
    runner.model.train()
    batch = _NO_BATCH
    for batch in runner.epoch_batches():
        runner.train_iter(batch)
        runner.settled_iter = runner.iter  # the iteration's advice all ran (run() again)
        if runner.finished:
            if runner.epoch_consumed():
                runner.end_epoch()
            break
    else:
        runner.end_epoch(empty=batch is _NO_BATCH)


def train_iter(runner: Runner, batch: Any) -> dict[str, Any]:
    """forward -> backward -> optimizer_step for one batch; returns the step's outputs.

    While none of the three has advice (``runner.inner_idle``), their bodies run here
    instead: the same statements, without three join-point calls an iteration (about 1%
    of a small model's iteration). Advice on any of them sends every call through them.
    """
    if runner.inner_idle:
        runner.outputs = outputs = runner.compute_train_step(batch)  # forward
        outputs["loss"].backward()  # backward
        optimizer = runner.optimizer  # optimizer_step
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    else:
        runner.outputs = outputs = runner.forward(batch)
        runner.backward(outputs["loss"])
        runner.optimizer_step()
    runner.iter += 1
    runner.inner_iter += 1
    return outputs


def forward(runner: Runner, batch: Any) -> dict[str, Any]:
    """The user's step (``train_step`` or ``loss_fn(model(x), y)``) as a dict with ``loss``."""
    return runner.compute_train_step(batch)


def backward(runner: Runner, loss: Any) -> None:
    """Back-propagate ``loss``."""
    loss.backward()


def optimizer_step(runner: Runner) -> None:
    """Apply and clear the gradients."""
    runner.optimizer.step()
    runner.optimizer.zero_grad(set_to_none=True)


def val_epoch(runner: Runner) -> dict[str, Any]:
    """One pass over the validation data without gradients; returns ``runner.metrics``."""
    with runner.evaluating():
        for batch in runner.eval_batches(runner.val_loader):
            runner.val_iter(batch)
    return runner.metrics


def val_iter(runner: Runner, batch: Any) -> dict[str, Any]:
    """The validation step for one batch; returns its outputs."""
    return runner.compute_eval_step(batch)


def test_epoch(runner: Runner) -> dict[str, Any]:
    """One pass over the test data without gradients; returns ``runner.metrics``."""
    with runner.evaluating():
        for batch in runner.eval_batches(runner.test_loader):
            runner.test_iter(batch)
    return runner.metrics


def test_iter(runner: Runner, batch: Any) -> dict[str, Any]:
    """The test step for one batch; returns its outputs."""
    return runner.compute_eval_step(batch)
