"""``QuantileSketch``: streaming quantiles within 1% in bounded memory (DDSketch).

``Timed`` folds each join point's durations into one (``_Stats``, which also counts the
calls that raised). Apart from ``_timed`` because it is a data structure of its own, with
no aspect in it: ``Timed`` only feeds it batches and reads quantiles back.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Sequence

__all__ = ["RELATIVE_ACCURACY", "QuantileSketch"]

#: Relative error of every quantile ``QuantileSketch`` reports (DDSketch's alpha).
RELATIVE_ACCURACY = 0.01

# Module-level aliases: one global lookup on the hot path instead of a module attribute.
_log = math.log
_ceil = math.ceil
_INFINITIES = (math.inf, -math.inf)


def _refused(value: float) -> ValueError:
    """The error for a value the sketch cannot count: negative, NaN or infinite."""
    return ValueError(
        f"QuantileSketch.add({value!r}): values must be finite numbers >= 0 "
        "(durations, sizes); leave out or clean NaN and infinite ones before adding them"
    )


class QuantileSketch:
    """Streaming quantiles of non-negative values with 1% relative error, bounded memory.

    DDSketch (Masson, Rim and Lee, VLDB 2019): a value ``x > 0`` counts in bucket
    ``ceil(log(x) / log(gamma))`` with ``gamma = (1 + a) / (1 - a)`` and ``a = 0.01``.
    Bucket ``i`` holds ``(gamma**(i-1), gamma**i]`` and answers with
    ``2 * gamma**i / (gamma + 1)``, within ``a`` of every value in it, so a quantile is
    within 1% of the exact one (the value of rank ``floor(q * (n - 1))``); ``q`` 0 and 1
    give the exact min and max. Memory is one dict entry per occupied bucket: values
    spanning a ratio ``r`` need about ``log(r) / 0.02`` buckets (1 ns .. 1 hour: ~1,450).
    ``max_buckets`` caps any input by merging the lowest buckets, which only blurs the
    lowest quantiles.

    Bucket membership is decided by comparison with ``gamma**i`` itself (``_key``), so
    ``add`` and ``add_many`` agree exactly even for values on a bucket boundary.
    """

    __slots__ = ("_buckets", "_zeros", "count", "max", "max_buckets", "min", "total")

    _gamma = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
    _inv_log_gamma = 1 / math.log(_gamma)

    def __init__(self, max_buckets: int = 2048) -> None:
        if not isinstance(max_buckets, int) or isinstance(max_buckets, bool) or max_buckets < 1:
            raise ValueError(f"max_buckets={max_buckets!r}: give an int >= 1")
        self._buckets: Counter[int] = Counter()
        self._zeros = 0
        self.max_buckets = max_buckets
        self.count = 0
        self.total: float = 0
        self.min = math.inf
        self.max = -math.inf

    def add(self, value: float) -> None:
        """Count one value (a duration in any unit); negative, NaN and infinite values are
        refused with ``ValueError`` (NaN fails both comparisons, an infinity ``_key``)."""
        if value > 0:
            try:
                key = self._key(value)
            except OverflowError:  # ceil(log(inf)): the only value _key cannot place
                raise _refused(value) from None
            buckets = self._buckets
            buckets[key] = buckets.get(key, 0) + 1
            if len(buckets) > self.max_buckets:
                self._collapse_lowest()
        elif value == 0:
            self._zeros += 1
        else:
            raise _refused(value)
        self.count += 1
        self.total += value
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value

    def add_many(self, values: Sequence[float]) -> None:
        """Count a batch of values, as ``add`` does each, with less work per value.

        The batch is sorted (in C) and then counted a bucket at a time: one key for the
        bucket's first value and one ``bisect`` for where the bucket ends. The durations
        of one join point fill few buckets, so a batch costs a handful of logarithms
        instead of one per value (a logarithm costs more than the rest of a timed call's
        bookkeeping on the machines we measured; counting equal values first with a
        ``Counter`` measured slower than the sort).

        A batch with a negative, NaN or infinite value is refused whole, as ``add`` refuses
        the value, and leaves the sketch unchanged. The batch's sum (needed for ``total``
        anyway) is NaN or infinite exactly when such a value is in it or finite values add
        up past float range, so only then is the batch scanned value by value: NaN sorts
        anywhere, so the sorted batch's ends alone cannot tell.
        """
        # Long on purpose: this is Timed's fold, run every ``_BATCH`` calls of a timed
        # join point; ``_key`` is inlined and no step is a helper, to keep it call-free.
        if not values:
            return
        ordered = sorted(values)
        total = sum(ordered)
        if total != total or total in _INFINITIES:  # NaN or infinite: find the value
            for value in ordered:
                if value != value or value in _INFINITIES:
                    raise _refused(value)
        low = ordered[0]  # the least value: no NaN is left to disturb the order
        if not low >= 0:
            raise _refused(low)
        buckets = self._buckets
        gamma, inv_log_gamma = self._gamma, self._inv_log_gamma
        n = len(ordered)
        i = bisect_right(ordered, 0) if not low else 0
        self._zeros += i
        while i < n:
            value = ordered[i]
            # _key inlined, keeping gamma**key for the bisect (this loop is Timed's fold).
            key = _ceil(_log(value) * inv_log_gamma)
            try:
                bound = gamma**key
                if value > bound:
                    key += 1
                    bound = gamma**key
                elif value <= gamma ** (key - 1):
                    key -= 1
                    bound = gamma**key
            except OverflowError:  # beyond float range: one value at a time, as add does
                end = i + 1
            else:
                end = bisect_right(ordered, bound, i + 1)
            buckets[key] = buckets.get(key, 0) + end - i
            i = end
        while len(buckets) > self.max_buckets:
            self._collapse_lowest()
        self.count += n
        self.total += total
        self.min = min(self.min, low)
        self.max = max(self.max, ordered[-1])

    @classmethod
    def _key(cls, value: float) -> int:
        """The bucket of ``value > 0``: the ``i`` with ``gamma**(i-1) < value <= gamma**i``.

        ``ceil(log(value) / log(gamma))`` is that ``i`` up to rounding; the two comparisons
        settle values on a boundary, so ``add_many`` can find a bucket's end by bisecting
        on ``gamma**i`` and agree with ``add`` exactly.
        """
        key = _ceil(_log(value) * cls._inv_log_gamma)
        try:
            if value > cls._gamma**key:
                key += 1
            elif value <= cls._gamma ** (key - 1):
                key -= 1
        except OverflowError:  # beyond float range at the top: the top key stands
            pass
        return key

    def _collapse_lowest(self) -> None:
        buckets = self._buckets
        lowest = buckets.pop(min(buckets))
        buckets[min(buckets)] += lowest

    @property
    def bucket_count(self) -> int:
        """How many buckets are in use: the sketch's memory, in counters."""
        return len(self._buckets) + (1 if self._zeros else 0)

    def quantile(self, q: float) -> float:
        """The ``q``-quantile (``0 <= q <= 1``) within 1%; ``nan`` when empty."""
        return self.quantiles((q,))[0]

    def quantiles(self, qs: Iterable[float]) -> list[float]:
        """Several quantiles in one pass over the buckets."""
        wanted = sorted((float(q), i) for i, q in enumerate(qs))
        if any(not 0 <= q <= 1 for q, _ in wanted):
            raise ValueError(f"quantiles must be within 0..1, got {[q for q, _ in wanted]}")
        result = [math.nan] * len(wanted)
        if not self.count:
            return result
        items = iter(sorted(self._buckets.items()))
        seen, value = self._zeros, 0.0
        for q, i in wanted:
            rank = q * (self.count - 1)
            if rank <= 0 or rank >= self.count - 1:
                result[i] = self.min if rank <= 0 else self.max
                continue
            while seen <= rank:
                key, n = next(items, (None, 0))
                if key is None:
                    value = self.max
                    break
                seen += n
                value = self._bucket_value(key)
            result[i] = min(max(value, self.min), self.max)
        return result

    def _bucket_value(self, key: int) -> float:
        """The value bucket ``key`` answers with (past float range: clamped by the caller)."""
        try:
            return 2 * self._gamma**key / (self._gamma + 1)
        except OverflowError:
            return math.inf


class _Stats(QuantileSketch):
    """A join point's sketch of durations (ns) plus how many of those calls raised."""

    __slots__ = ("errors",)

    def __init__(self) -> None:
        super().__init__()
        self.errors = 0
