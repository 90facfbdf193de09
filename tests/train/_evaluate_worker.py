"""The ranks of ``test_evaluate_distributed``: evaluations over a ``DistributedSampler``
whose shards it pads, run in processes forked from a forkserver (see that test file).

:func:`evaluations` is also what the test runs in one process over the whole dataset, so
both sides build the same model, data, metric and step.
"""

from __future__ import annotations

import datetime
import warnings
from typing import Any

import torch
from _fixtures import make_dataset, make_model
from torch.utils.data import DataLoader, DistributedSampler

from aspecthook.train import Runner
from aspecthook.train.aspects import Evaluate

N_SAMPLES = 7  # over 2 ranks: rank 1's shard ends with a repeat of a rank 0 sample
BATCH_SIZES = (1, 2, 3)  # the repeat alone in a batch (1, 3) or beside a real sample (2)


def accuracy(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return (outputs.argmax(1) == targets).float().mean()


def loss_from_val_step(runner: Runner, batch: Any) -> dict[str, Any]:
    """A step that computes its own loss (as a model returning one does): Evaluate cannot
    recompute it without the repeated sample."""
    outputs = runner.model(batch[0])
    loss = torch.nn.functional.cross_entropy(outputs, batch[1])
    return {"outputs": outputs, "targets": batch[1], "loss": loss}


def evaluations(step: str, shard: tuple[int, int] | None) -> dict[str, float]:
    """``val/*`` and ``test/*`` of one untrained model for each batch size and sampler
    order, over this rank's ``shard`` (rank, world size) or, with None, the whole data."""
    model = make_model()
    loss_fn = torch.nn.functional.cross_entropy if step == "loss_fn" else None
    val_step = loss_from_val_step if step == "val_step" else None
    data = make_dataset(N_SAMPLES, seed=3)
    results: dict[str, float] = {}
    for shuffle in (False, True):
        for size in BATCH_SIZES:
            if shard is None:
                loader = DataLoader(data, batch_size=size)
            else:
                rank, world = shard
                sampler = DistributedSampler(data, world, rank, shuffle=shuffle, seed=5)
                loader = DataLoader(data, batch_size=size, sampler=sampler)
            runner = Runner(
                model,
                torch.optim.SGD(model.parameters(), lr=0.1),
                loader,
                val_loader=loader,
                test_loader=loader,
                loss_fn=loss_fn,
                val_step=val_step,
                max_epochs=1,
                aspects=[Evaluate(metrics={"acc": accuracy})],
            )
            runner.val_epoch()
            runner.test()
            for key, value in runner.metrics.items():
                results[f"{key}/batch{size}/shuffle{int(shuffle)}"] = value
    return results


def rank_main(rank: int, init_file: str, out_file: str, step: str) -> None:
    """One of two gloo ranks: its :func:`evaluations` and the warnings they gave, to
    ``OUT_FILE.<rank>``."""
    torch.set_num_threads(1)
    dist = torch.distributed
    dist.init_process_group(
        "gloo",
        init_method=f"file://{init_file}",
        rank=rank,
        world_size=2,
        timeout=datetime.timedelta(seconds=20),
    )
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results = evaluations(step, (rank, 2))
        messages = [f"{w.category.__name__}: {w.message}" for w in caught]
        torch.save({"metrics": results, "warnings": messages}, f"{out_file}.{rank}")
    finally:
        dist.destroy_process_group()
