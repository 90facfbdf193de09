"""Per-iteration cost of the Runner and of each training aspect, with near-free torch work.

``bench/loop.py`` times whole runs of a small model, where an iteration takes about
550 µs and the host's noise (a few percent between runs) hides differences of a
microsecond. This script makes the torch part of an iteration as cheap as it can be, so
that the Runner's own work is a large part of it and is measured to a fraction of a
microsecond:

* the model is an identity ``nn.Module`` (the module call is kept: the Runner makes it);
* the loss is a 0-d leaf tensor that requires grad, returned by ``loss_fn(output, y)``:
  ``backward()`` only sets its ``.grad``;
* the optimizer is a real ``SGD`` over one parameter that never gets a gradient, and the
  scheduler a real ``CosineAnnealingLR`` stepped every iteration (about 4 µs, the
  largest part of an iteration here);
* the batches are a list of ``(loss, 0)`` pairs, 250 an epoch.

The hand-written loop does the same work with the same objects, and a structlog record
every 50 iterations (the sink drops it, as in ``bench/loop.py``). Each configuration
builds a fresh ``Runner`` per run (setup included, as in ``bench/loop.py``) with the named
aspects: ``lr`` (``LRSchedule(by_epoch=False)``), ``timer`` (``IterTimer``), ``logger``
(``Logger(interval=50, json_file=None)``) and ``checkpoint`` (``Checkpoint`` with an
interval that is never reached: its per-iteration test and its set-up only). Runs are
interleaved in an order shuffled per round; reported per configuration: the minimum and
the median µs per iteration, and the median over rounds of its time minus the hand-written
loop's in the same round, per iteration.

What it shows (``docs/performance.md``, session 12): Python work between torch calls
costs several times what ``timeit`` says, because the torch work in between evicts it from
the caches; two clock readings a run of ``IterTimer`` takes cost about a microsecond here,
not 0.1 µs.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loop import configure_sink  # the shared sink that drops records

from aspecthook.train import Runner
from aspecthook.train.aspects import Checkpoint, IterTimer, Logger, LRSchedule

LOG_EVERY = 50
ASPECTS: dict[str, Callable[[], Any]] = {
    "lr": lambda: LRSchedule(by_epoch=False),
    "timer": IterTimer,
    "logger": lambda: Logger(interval=LOG_EVERY, json_file=None),
    "checkpoint": lambda: Checkpoint(interval=10**9, by_epoch=False, save_last=False),
}


class Identity(nn.Module):
    def forward(self, x: Any) -> Any:
        return x


def passthrough(output: Any, target: Any) -> Any:
    return output


def parts(iters: int) -> tuple[nn.Module, torch.optim.Optimizer, Any, list[Any]]:
    model = nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=iters)
    loss = torch.zeros((), requires_grad=True)
    return model, optimizer, scheduler, [(loss, 0)] * 250


def hand(iters: int, folder: str) -> float:
    _, optimizer, scheduler, batches = parts(iters)
    model = Identity()
    log = structlog.get_logger("bench")
    start = time.perf_counter()
    it = 0
    while it < iters:
        for x, y in batches:
            loss = passthrough(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            it += 1
            if it % LOG_EVERY == 0:
                log.info("train", iter=it, loss=loss.item(), lr=optimizer.param_groups[0]["lr"])
            if it >= iters:
                break
    return time.perf_counter() - start


def runner(names: tuple[str, ...]) -> Callable[[int, str], float]:
    def run(iters: int, folder: str) -> float:
        model, optimizer, scheduler, batches = parts(iters)
        start = time.perf_counter()
        built = Runner(
            model,
            optimizer,
            batches,
            scheduler=scheduler,
            loss_fn=passthrough,
            max_iters=iters,
            work_dir=folder,
            aspects=[ASPECTS[name]() for name in names],
        )
        built.model = Identity()  # after the optimizer check, which wants its parameters
        built.run()
        built.close()
        return time.perf_counter() - start

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--iters", type=int, default=3000, help="iterations a run (3000)")
    parser.add_argument("--rounds", type=int, default=30, help="interleaved rounds (30)")
    parser.add_argument(
        "--configs",
        default="lr;lr,timer;lr,logger;lr,checkpoint;lr,timer,logger,checkpoint",
        help="';'-separated Runner configurations, each a ','-separated list of "
        f"{', '.join(ASPECTS)}",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the per-round order")
    args = parser.parse_args(argv)
    configs = [tuple(c.split(",")) for c in args.configs.split(";") if c]
    unknown = {name for config in configs for name in config} - set(ASPECTS)
    if unknown:
        parser.error(f"unknown aspects {sorted(unknown)}; choose from {', '.join(ASPECTS)}")
    if args.iters < 1 or args.rounds < 1:
        parser.error("--iters and --rounds must be positive")

    configure_sink()
    torch.set_num_threads(1)
    variants: dict[str, Callable[[int, str], float]] = {"hand-written loop": hand}
    variants |= {",".join(config): runner(config) for config in configs}
    times: dict[str, list[float]] = {key: [] for key in variants}
    order = list(variants)
    rng = random.Random(args.seed)
    for key in order:  # warm-up, untimed
        with tempfile.TemporaryDirectory() as folder:
            variants[key](args.iters, folder)
    for _ in range(args.rounds):
        rng.shuffle(order)
        for key in order:
            with tempfile.TemporaryDirectory() as folder:
                gc.collect()
                times[key].append(variants[key](args.iters, folder) / args.iters * 1e6)

    base = times["hand-written loop"]
    print(f"{args.iters} iterations a run, {args.rounds} rounds; µs per iteration")
    print(f"{'variant':34} {'min':>8} {'median':>8} {'- hand (paired median)':>24}")
    for key, values in times.items():
        extra = statistics.median(v - b for v, b in zip(values, base, strict=True))
        print(f"{key:34} {min(values):8.2f} {statistics.median(values):8.2f} {extra:24.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
