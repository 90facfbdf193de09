"""Batches of one epoch, resumable at a batch offset without loading the skipped batches.

A map-style ``DataLoader`` draws batches of indices from its batch sampler and only then
loads them. To resume ``k`` batches into an epoch we iterate a copy of the loader whose
batch sampler drops the first ``k`` index lists: the dataset's ``__getitem__`` is never
called for them. Iterable datasets have no indices to skip, and a ``DataLoader``
subclass may do its own work per batch: both are advanced by iteration (the skipped
batches are loaded and dropped).

Resuming draws no random numbers: the interrupted run drew this epoch's (the
``DataLoader`` iterator's base seed, anything the skipped batches used) before its
checkpoint captured the RNG states, so drawing them again here would shift every later
random number (dropout, augmentation) and the resumed run would no longer match.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import sys
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import torch
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, IterableDataset

__all__ = [
    "EpochLength",
    "ShardPadding",
    "SkipBatchSampler",
    "epoch_batches",
    "iters_left",
    "loader_length",
    "planned_iters",
    "shard_padding",
]


def loader_length(loader: Any) -> int | None:
    """``len(loader)`` in batches, or None for a loader without a length (``len()``
    raising ``TypeError``, or ``NotImplementedError`` as some streaming loaders do)."""
    try:
        return len(loader)
    except (TypeError, NotImplementedError):
        return None


def planned_iters(runner: Any) -> int | None:
    """The run's number of iterations, when it is known before it ends: ``max_iters``, or
    ``max_epochs`` times the loader's length."""
    if runner.max_iters is not None:
        return int(runner.max_iters)
    per_epoch = loader_length(runner.train_loader)
    return None if per_epoch is None else int(runner.max_epochs) * per_epoch


class EpochLength:
    """The iterations of a whole epoch, measured in a run by ``max_epochs`` over a loader
    without a length (an ``IterableDataset``): its aspect calls ``start`` in
    ``before_train_epoch`` and ``end`` in ``after_train_epoch``, once per epoch."""

    __slots__ = ("_origin", "value")

    def __init__(self) -> None:
        self._origin = 0  # the run's iteration before the epoch's first batch
        self.value: int | None = None  # the latest whole epoch's iterations, once one ran

    def start(self, runner: Any) -> None:
        # A resumed epoch began inner_iter batches before the run's iteration.
        self._origin = runner.iter - runner.inner_iter

    def end(self, runner: Any) -> None:
        # inner_iter is 0 once the loader ran out (end_epoch); a stop inside it leaves it.
        if not runner.inner_iter and runner.iter > self._origin:
            self.value = runner.iter - self._origin


def iters_left(runner: Any, per_epoch: int | None = None) -> int | None:
    """The iterations left in the run: ``planned_iters`` less those run; for a run by
    ``max_epochs`` over a loader without a length, once ``per_epoch`` (an
    ``EpochLength``'s value) is known, the epochs left times it less the iterations of the
    current epoch; None while neither is known."""
    total = planned_iters(runner)
    if total is not None:
        return max(total - int(runner.iter), 0)
    if per_epoch is None or runner.max_epochs is None:
        return None
    done = int(runner.inner_iter)  # iterations of the current epoch
    return max((int(runner.max_epochs) - int(runner.epoch)) * per_epoch - done, 0)


class ShardPadding(NamedTuple):
    """Where the samples a ``DistributedSampler`` repeated to even out the ranks' shards
    are in this rank's pass over a loader: the last ``repeated`` samples of its last
    batch, the ``steps``-th; ``steps`` is 0 where the loader's batches cannot be told
    (a batch sampler of another kind)."""

    repeated: int  #: trailing samples of this rank's shard that repeat other samples
    steps: int  #: batches in a pass over the loader (0: the padded one is not known)
    last: int  #: samples in the last batch (1 for a loader that does not batch)


def shard_padding(loader: Any) -> ShardPadding | None:
    """The padding in this rank's shard of ``loader``'s dataset, or None when it has none.

    ``DistributedSampler(drop_last=False)`` extends its index list with its own head to
    ``num_samples * num_replicas`` and gives rank ``r`` the positions ``r, r + R, ...``:
    the positions past the dataset's end (fewer than ``R``) are the last one of some
    ranks' shards, shuffled or not. Only torch's own sampling is known: a sampler that
    overrides ``__iter__`` is taken to have no padding.
    """
    if not isinstance(loader, DataLoader) or isinstance(loader.dataset, IterableDataset):
        return None
    batches = loader.batch_sampler
    sampler = loader.sampler if batches is None else getattr(batches, "sampler", None)
    if not isinstance(sampler, DistributedSampler):
        return None
    if type(sampler).__iter__ is not DistributedSampler.__iter__:
        return None
    count = sampler.num_samples
    last_position = sampler.rank + (count - 1) * sampler.num_replicas
    if not count or last_position < len(sampler.dataset):  # type: ignore[arg-type]
        return None  # drop_last=True, a length the ranks divide, or not this rank
    if batches is None:  # batch_size=None: one sample a step
        return ShardPadding(repeated=1, steps=count, last=1)
    if not isinstance(batches, BatchSampler) or type(batches).__iter__ is not BatchSampler.__iter__:
        # batches of its own making
        return ShardPadding(repeated=1, steps=0, last=0)
    size = batches.batch_size
    if batches.drop_last and count % size:
        return None  # the loader drops the shard's tail, padding included
    steps = len(batches)
    return ShardPadding(repeated=1, steps=steps, last=count - (steps - 1) * size)


class SkipBatchSampler:
    """A batch sampler that yields ``inner``'s batches from the ``skip``-th on."""

    def __init__(self, inner: Iterable[list[int]], skip: int) -> None:
        self.inner = inner
        self.skip = skip

    def __iter__(self) -> Iterator[list[int]]:
        return itertools.islice(iter(self.inner), self.skip, None)

    def __len__(self) -> int:
        return max(len(self.inner) - self.skip, 0)  # type: ignore[arg-type]


def epoch_batches(loader: Iterable[Any], skip: int) -> Iterator[Any]:
    """Iterate ``loader`` for one epoch, starting after ``skip`` batches."""
    if skip <= 0:
        return iter(loader)
    with _rng_untouched(loader):
        return _skipped(loader, skip)


def _skipped(loader: Iterable[Any], skip: int) -> Iterator[Any]:
    # A plain DataLoader over a map-style dataset is rebuilt around a skipping batch
    # sampler. A subclass is iterated as it is (its own __iter__ may change the batches),
    # as is an iterable dataset (it has no indices to skip).
    if (
        type(loader) is DataLoader
        and loader.batch_sampler is not None
        and not isinstance(loader.dataset, IterableDataset)
    ):
        resumed: DataLoader[Any] = DataLoader(
            loader.dataset,
            batch_sampler=SkipBatchSampler(loader.batch_sampler, skip),
            num_workers=loader.num_workers,
            collate_fn=loader.collate_fn,
            pin_memory=loader.pin_memory,
            timeout=loader.timeout,
            worker_init_fn=loader.worker_init_fn,
            multiprocessing_context=loader.multiprocessing_context,
            generator=loader.generator,
            persistent_workers=loader.persistent_workers,
            **_newer_options(loader),
        )
        return iter(resumed)
    batches = iter(loader)
    # Skip now, not lazily, so whatever the skipped batches draw stays inside _rng_untouched.
    next(itertools.islice(batches, skip, skip), None)
    return batches


def _newer_options(loader: DataLoader[Any]) -> dict[str, Any]:
    """The loader's options that only newer torch versions have (``in_order``: 2.6)."""
    names = ("prefetch_factor", "pin_memory_device", "in_order")
    return {name: getattr(loader, name) for name in names if hasattr(loader, name)}


@contextlib.contextmanager
def _rng_untouched(loader: Iterable[Any]) -> Iterator[None]:
    """Give torch's global generator, ``loader.generator``, python's ``random`` and numpy's
    global generator back as they were: batches skipped by loading them (an iterable
    dataset, a ``DataLoader`` subclass) may draw from any of them."""
    generator = getattr(loader, "generator", None)
    owned = [generator] if isinstance(generator, torch.Generator) else []
    states = [g.get_state() for g in owned]
    state = torch.get_rng_state()
    python = random.getstate()
    numpy = sys.modules.get("numpy")  # only if something imported it
    numpy_state = numpy.random.get_state() if numpy is not None else None
    try:
        yield
    finally:
        torch.set_rng_state(state)
        for g, saved in zip(owned, states, strict=True):
            g.set_state(saved)
        random.setstate(python)
        if numpy is not None:
            numpy.random.set_state(numpy_state)
