"""Evaluate in a distributed run: the samples a ``DistributedSampler`` repeats to even out
the ranks' shards are left out of the metrics, or a warning says they could not be.

Ranks run as gloo processes forked from a forkserver that has torch imported (a fresh
interpreter costs seconds of imports per rank).
"""

from __future__ import annotations

import math
import multiprocessing
import sys
from pathlib import Path
from typing import Any

import _evaluate_worker
import pytest
import torch
from _evaluate_worker import BATCH_SIZES, evaluations
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from aspecthook.train import Runner
from aspecthook.train._data import shard_padding
from aspecthook.train.aspects import Evaluate

needs_gloo = pytest.mark.skipif(
    sys.platform == "win32" or not torch.distributed.is_available(), reason="needs gloo"
)


@pytest.fixture(scope="module")
def forkserver() -> multiprocessing.context.ForkServerContext:
    """Processes forked from a server that has torch, its compiler stack (which the
    first optimizer imports) and the worker imported."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch", "torch._dynamo", "_evaluate_worker"])
    return context


def _two_ranks(
    forkserver: multiprocessing.context.ForkServerContext, tmp_path: Path, step: str
) -> list[dict[str, Any]]:
    """Both ranks' evaluations (``_evaluate_worker.rank_main``) and their warnings."""
    out = tmp_path / "out"
    args = (str(tmp_path / "init"), str(out), step)
    ranks = [forkserver.Process(target=_evaluate_worker.rank_main, args=(r, *args)) for r in (0, 1)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(120)
        if process.is_alive():
            process.kill()
    assert [process.exitcode for process in ranks] == [0, 0]
    return [torch.load(f"{out}.{r}", weights_only=True) for r in (0, 1)]


def _assert_close(got: dict[str, float], expected: dict[str, float], key: str) -> None:
    assert math.isclose(got[key], expected[key], rel_tol=1e-6), (key, got[key], expected[key])


@needs_gloo
def test_two_ranks_measure_a_dataset_of_odd_length_as_one_process_does(
    tmp_path: Path, forkserver: multiprocessing.context.ForkServerContext
) -> None:
    """7 samples over 2 ranks (rank 1's shard ends with a repeat), batches of 1, 2 and 3,
    shuffled or not: every rank's val/acc, val/loss, test/acc and test/loss are those of
    one process over the whole dataset, and nothing is warned."""
    ranks = _two_ranks(forkserver, tmp_path, "loss_fn")
    whole = evaluations("loss_fn", None)
    assert len(whole) == 4 * len(BATCH_SIZES) * 2
    for got in ranks:
        assert got["warnings"] == []
        assert got["metrics"].keys() == whole.keys()
        for key in whole:
            _assert_close(got["metrics"], whole, key)


@needs_gloo
def test_a_loss_that_cannot_be_recomputed_is_warned_about_once(
    tmp_path: Path, forkserver: multiprocessing.context.ForkServerContext
) -> None:
    """A val_step that returns its own loss: the metrics are still exact, and so is the
    loss where the repeat is alone in its batch; where it shares one (batches of 2) the
    loss counts it, and rank 0 warns once per loader, saying how many and what to do."""
    ranks = _two_ranks(forkserver, tmp_path, "val_step")
    whole = evaluations("val_step", None)
    for got in ranks:
        for key in whole:
            if "/loss/batch2/" not in key:
                _assert_close(got["metrics"], whole, key)
    assert ranks[1]["warnings"] == []
    messages = ranks[0]["warnings"]
    assert len(messages) == 4  # val and test, shuffled or not, of the batches of 2
    assert {m.split(" counts")[0] for m in messages} == {
        "RuntimeWarning: Evaluate: val/loss",
        "RuntimeWarning: Evaluate: test/loss",
    }
    for message in messages:
        assert "counts 1 sample twice" in message
        assert "give the Runner loss_fn= and no val_step" in message
        assert "drop_last=True" in message


def _positions(n: int, world: int, rank: int) -> list[int]:
    """The positions in DistributedSampler's padded index list that ``rank`` gets."""
    total = math.ceil(n / world) * world
    return list(range(rank, total, world))


@pytest.mark.parametrize("n", [1, 2, 5, 7, 8, 10])
@pytest.mark.parametrize("world", [2, 3, 4])
def test_shard_padding_finds_the_repeated_sample_in_the_last_batch(n: int, world: int) -> None:
    """For every rank, batch size, order and drop_last: the padding reported is the
    positions past the dataset's end that the rank's loader yields, and they are the
    last samples of its last batch."""
    data = TensorDataset(torch.arange(n))
    for rank in range(world):
        positions = _positions(n, world, rank)
        for size in (1, 2, 3):
            for drop_last in (False, True):
                for shuffle in (False, True):
                    sampler = DistributedSampler(data, world, rank, shuffle=shuffle)
                    loader = DataLoader(data, batch_size=size, sampler=sampler, drop_last=drop_last)
                    batches = [len(batch[0]) for batch in loader]
                    yielded = positions[: sum(batches)]
                    repeated = sum(p >= n for p in yielded)
                    assert all(p >= n for p in yielded[len(yielded) - repeated :])
                    padding = shard_padding(loader)
                    if not repeated:
                        assert padding is None
                        continue
                    assert padding == (repeated, len(batches), batches[-1])


def test_shard_padding_is_none_without_a_distributed_sampler() -> None:
    """A plain loader, a list of batches, and a sampler that pads nothing: no padding."""
    data = TensorDataset(torch.arange(7))
    assert shard_padding(DataLoader(data, batch_size=2)) is None
    assert shard_padding([torch.zeros(2)]) is None
    no_padding = DistributedSampler(data, 2, 1, drop_last=True)
    assert shard_padding(DataLoader(data, batch_size=2, sampler=no_padding)) is None


def test_shard_padding_of_an_unbatched_loader_is_its_last_step() -> None:
    """batch_size=None: each step is one sample, and the last one is the repeat."""
    data = TensorDataset(torch.arange(7))
    loader = DataLoader(data, batch_size=None, sampler=DistributedSampler(data, 2, 1))
    assert shard_padding(loader) == (1, 4, 1)


def _validating(loader: Any, step: Any, metrics: dict[str, Any]) -> Runner:
    """A runner that validates ``loader`` with ``step`` and ``Evaluate(metrics=...)``."""
    model = torch.nn.Linear(1, 1)
    return Runner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loader,
        val_loader=loader,
        val_step=step,
        max_epochs=1,
        aspects=[Evaluate(metrics=metrics)],
    )


def test_a_batch_that_cannot_be_cut_is_counted_whole_and_warned_about(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rank 1 of 2 (its world size faked, no process group: its shard alone is measured)
    whose step returns outputs as a list: the batch holding the repeat cannot be cut, so
    the metric counts it (as before) and a RuntimeWarning says so, once."""
    monkeypatch.setattr(Runner, "world_size", property(lambda runner: 2))
    data = TensorDataset(torch.arange(7.0), torch.arange(7.0))
    loader = DataLoader(data, batch_size=2, sampler=DistributedSampler(data, 2, 1, shuffle=False))

    def step(runner: Runner, batch: Any) -> dict[str, Any]:
        return {"outputs": batch[0].tolist(), "targets": batch[1]}

    runner = _validating(loader, step, {"first": lambda outputs, targets: outputs[0]})
    with pytest.warns(RuntimeWarning, match=r"val/first counts 1 sample twice.*could not be cut"):
        runner.val_epoch()
    assert runner.metrics["val/first"] == (1 * 2 + 5 * 2) / 4  # batches [1, 3] and [5, 0]
    runner.val_epoch()  # warned once


def test_a_val_steps_own_scalar_is_counted_whole_and_warned_about(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rank 1 of 2 (world size faked): a further scalar val_step returns is a mean over
    its batch, so the batch holding the repeated sample counts it whole (the metrics
    computed from outputs and targets are still exact), and the warning says to compute
    it with metrics= instead."""
    monkeypatch.setattr(Runner, "world_size", property(lambda runner: 2))
    data = TensorDataset(torch.arange(7.0), torch.arange(7.0))
    loader = DataLoader(data, batch_size=2, sampler=DistributedSampler(data, 2, 1, shuffle=False))

    def step(runner: Runner, batch: Any) -> dict[str, Any]:
        return {"outputs": batch[0], "targets": batch[1], "mean": batch[0].mean()}

    runner = _validating(loader, step, {"first": lambda outputs, targets: outputs[0]})
    with pytest.warns(RuntimeWarning, match=r"val/mean counts 1 sample twice.*metrics=\.\.\."):
        runner.val_epoch()
    assert runner.metrics["val/mean"] == (2 * 2 + 2.5 * 2) / 4  # [1, 3], [5, 0]: 4 samples
    assert runner.metrics["val/first"] == (1 * 2 + 5 * 1) / 3  # [5, 0] cut to [5]


def test_a_val_steps_loss_and_own_scalar_counted_whole_are_each_told_their_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rank 1 of 2 (world size faked): val_step returns a loss and a further scalar, both
    means over the batch that holds the repeated sample. The warning tells each its fix:
    loss_fn= for the loss (a metrics= entry named 'loss' is refused beside the step's),
    metrics= for the scalar; it told both to use metrics=."""
    monkeypatch.setattr(Runner, "world_size", property(lambda runner: 2))
    data = TensorDataset(torch.arange(7.0), torch.arange(7.0))
    loader = DataLoader(data, batch_size=2, sampler=DistributedSampler(data, 2, 1, shuffle=False))

    def step(runner: Runner, batch: Any) -> dict[str, Any]:
        x, y = batch
        return {"outputs": x, "targets": y, "loss": (x - y).abs().mean(), "mean": x.mean()}

    runner = _validating(loader, step, {})
    with pytest.warns(RuntimeWarning, match="val/loss, val/mean count 1 sample twice") as caught:
        runner.val_epoch()
    [message] = [str(w.message) for w in caught]
    assert "give the Runner loss_fn= and no val_step" in message
    assert "Evaluate(metrics=...)" in message


def test_a_list_with_one_entry_per_sample_is_not_cut_as_a_batchs_parts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Targets as a list with one tensor per sample (a detection model's boxes, say), whose
    tensors happen to have as many rows as the batch has samples: cutting each tensor's
    rows, as for a tuple of batched tensors, kept the repeated sample and cut the real
    ones (a silent, wrong value). A list as long as the batch cannot be told from a batch's
    parts, so it is counted whole and warned about, as other values that cannot be cut."""
    monkeypatch.setattr(Runner, "world_size", property(lambda runner: 2))
    # rank 1 of 2 over 7 samples: indices [1, 3, 5] and the repeat 0, one batch of 4
    data = TensorDataset(torch.arange(7.0), torch.arange(7.0)[:, None].expand(7, 4))
    loader = DataLoader(data, batch_size=4, sampler=DistributedSampler(data, 2, 1, shuffle=False))

    def step(runner: Runner, batch: Any) -> dict[str, Any]:
        return {"outputs": batch[0], "targets": list(batch[1])}  # 4 tensors of 4 values

    def total(outputs: Any, targets: Any) -> float:
        return sum(float(t.sum()) for t in targets) / len(targets)

    runner = _validating(loader, step, {"total": total})
    with pytest.warns(RuntimeWarning, match=r"val/total counts 1 sample twice.*could not be cut"):
        runner.val_epoch()
    assert runner.metrics["val/total"] == (4 + 12 + 20 + 0) / 4  # counted whole, not 27 / 4


def test_the_loss_recomputed_without_the_repeat_is_computed_as_under_amp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under AMP the step's outputs are bfloat16 and autocast computes the loss in float32;
    the loss Evaluate recomputes for the batch holding a repeated sample (after autocast
    has ended) takes the outputs up to float32 too, so it is the loss of those samples as
    the step would have computed it (in bfloat16 it was off by about 4e-3)."""
    from aspecthook.train.aspects import AMP

    monkeypatch.setattr(Runner, "world_size", property(lambda runner: 2))
    # rank 1 of 2 over 7 samples: indices [1, 3, 5] and the repeat 0, one batch of 4
    inputs = torch.randn(7, 3, generator=torch.Generator().manual_seed(0))
    data = TensorDataset(inputs, torch.tensor([0, 1, 2, 0, 1, 2, 0]))
    loader = DataLoader(data, batch_size=4, sampler=DistributedSampler(data, 2, 1, shuffle=False))
    model = torch.nn.Linear(3, 3)
    runner = Runner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loader,
        val_loader=loader,
        loss_fn=torch.nn.functional.cross_entropy,
        max_epochs=1,
        aspects=[Evaluate(), AMP()],
    )
    runner.val_epoch()
    x, y = data.tensors[0][[1, 3, 5]], data.tensors[1][[1, 3, 5]]
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        expected = torch.nn.functional.cross_entropy(model(x), y).item()
    assert runner.metrics["val/loss"] == pytest.approx(expected, rel=1e-6)


class _WeightedRunner(Runner):
    """A runner whose evaluation step computes its own loss: loss_fn's plus a penalty."""

    def compute_eval_step(self, batch: Any) -> dict[str, Any]:
        outputs = self.model(batch[0])
        assert self.loss_fn is not None
        loss = self.loss_fn(outputs, batch[1]) + 100.0
        return {"outputs": outputs, "targets": batch[1], "loss": loss}


def test_a_loss_of_an_overridden_compute_eval_step_is_not_recomputed_with_loss_fn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rank 1 of 2 (world size faked) of a Runner subclass whose compute_eval_step adds a
    penalty to loss_fn's loss: the batch holding the repeated sample is counted whole and
    a RuntimeWarning names the override. Its loss was recomputed as loss_fn's alone for
    that batch, a silently wrong val/loss."""
    monkeypatch.setattr(Runner, "world_size", property(lambda runner: 2))
    # rank 1 of 2 over 7 samples: batches [1, 3] and [5, 0], the 0 a repeat
    data = TensorDataset(torch.arange(7.0)[:, None], torch.zeros(7, 1))
    loader = DataLoader(data, batch_size=2, sampler=DistributedSampler(data, 2, 1, shuffle=False))
    model = torch.nn.Linear(1, 1)
    with torch.no_grad():
        model.weight.fill_(1.0)
        model.bias.zero_()
    runner = _WeightedRunner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loader,
        val_loader=loader,
        loss_fn=torch.nn.functional.l1_loss,
        max_epochs=1,
        aspects=[Evaluate()],
    )
    with pytest.warns(RuntimeWarning, match="val/loss counts 1 sample twice") as caught:
        runner.val_epoch()
    [message] = [str(w.message) for w in caught]
    assert "_WeightedRunner.compute_eval_step, which is overridden" in message
    assert "compute the loss in the Runner's loss_fn=" in message
    assert runner.metrics["val/loss"] == pytest.approx((102.0 * 2 + 102.5 * 2) / 4)
