"""Distribution statistics of latency samples (vectorised)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

PERCENTILES = {"p50_ms": 50.0, "p90_ms": 90.0, "p99_ms": 99.0, "p999_ms": 99.9}
BUCKET_RANGE = (0.1, 99.9)  # percentiles the distribution tables span
NS_PER_MS = 1e6
NICE_STEPS_MS = (
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.25,
    0.5,
    1,
    2,
    2.5,
    5,
    10,
    20,
    25,
    50,
    100,
    200,
    250,
    500,
    1000,
    2000,
    5000,
)


class Samples:
    """Nanosecond samples sorted once; their statistics and buckets are read off the sorted copy.

    Every figure equals what numpy gives on the samples as they came (the mean
    is summed in their own order).
    """

    def __init__(self, values_ns: np.ndarray) -> None:
        values_ns = np.asarray(values_ns)
        self.count = len(values_ns)
        self.mean_ms = float(_to_ms(values_ns).mean()) if self.count else math.nan
        self.sorted_ns = np.sort(values_ns)
        self.sorted_ms = _to_ms(self.sorted_ns)
        quantiles = [*PERCENTILES.values(), *BUCKET_RANGE]
        pct = sorted_percentiles(self.sorted_ms, quantiles) if self.count else [math.nan] * 6
        self.percentiles = dict(zip(quantiles, (float(v) for v in pct), strict=True))

    def median_ns(self) -> float:
        """The median in ns, as ``np.median`` gives it (the mean of the middle one or two)."""
        middle = self.count // 2
        return float(np.median(self.sorted_ns[middle - 1 + self.count % 2 : middle + 1]))

    def describe(self) -> dict[str, float | int]:
        """count, min, mean, p50, p90, p99, p99.9 and max, in ms."""
        if self.count == 0:
            return _empty_description()
        return {
            "count": self.count,
            "min_ms": float(self.sorted_ms[0]),
            "mean_ms": self.mean_ms,
            **{k: self.percentiles[q] for k, q in PERCENTILES.items()},
            "max_ms": float(self.sorted_ms[-1]),
        }

    def distribution_table(self, width_ms: float | None = None) -> list[dict]:
        """Buckets of the distribution (see ``distribution_table``)."""
        if self.count == 0:
            return []
        lo, hi = (self.percentiles[q] for q in BUCKET_RANGE)
        return _buckets(self.sorted_ms, lo, hi, width_ms or _nice_width(lo, hi))


def sorted_percentiles(sorted_values: np.ndarray, percentiles: list[float]) -> np.ndarray:
    """``np.percentile(values, percentiles)`` of already sorted values, without a partition.

    Follows numpy's default ("linear") method step by step, so the results are
    the same to the last bit.
    """
    n = len(sorted_values)
    virtual = (n - 1) * np.true_divide(np.asarray(percentiles, np.float64), 100)
    below = np.floor(virtual)
    above = below + 1
    at_end = virtual >= n - 1
    below[at_end] = above[at_end] = -1
    below_i, above_i = below.astype(np.intp), above.astype(np.intp)
    gamma = virtual - below_i
    a, b = sorted_values[below_i], sorted_values[above_i]
    diff = b - a
    result = a + diff * gamma
    np.subtract(b, diff * (1 - gamma), out=result, where=gamma >= 0.5)
    return result


def _to_ms(values_ns: np.ndarray) -> np.ndarray:
    return np.asarray(values_ns, dtype=np.float64) / NS_PER_MS


def _empty_description() -> dict[str, float | int]:
    return {
        "count": 0,
        "min_ms": math.nan,
        "mean_ms": math.nan,
        **{k: math.nan for k in PERCENTILES},
        "max_ms": math.nan,
    }


def describe(values_ns: np.ndarray) -> dict[str, float | int]:
    """count, min, mean, p50, p90, p99, p99.9 and max of nanosecond samples, in ms."""
    return Samples(values_ns).describe()


def _nice_width(lo: float, hi: float, target_buckets: int = 16) -> float:
    span = max(hi - lo, 1e-9)
    for step in NICE_STEPS_MS:
        if span / step <= target_buckets:
            return step
    return NICE_STEPS_MS[-1]


def distribution_table(values_ns: np.ndarray, width_ms: float | None = None) -> list[dict]:
    """Buckets of a distribution, like the WebRTC study's tables: value, count, share.

    Each bucket is ``[lo_ms, hi_ms)``; empty buckets inside the range are kept so
    gaps show. Outliers beyond p99.9 are gathered in a last bucket whose ``hi_ms``
    is the maximum (and whose ``open`` is true); those below p0.1 join the first.
    """
    return Samples(values_ns).distribution_table(width_ms)


def _buckets(values: np.ndarray, lo: float, hi: float, width: float) -> list[dict]:
    """Bucket rows of ms samples between the percentiles ``lo`` and ``hi``."""
    first, last = int(np.floor(lo / width)), int(np.floor(hi / width))
    index = np.clip(np.floor(values / width).astype(np.int64), first, last + 1) - first
    counts = np.bincount(index, minlength=last - first + 2)
    total = counts.sum()
    rows = [
        {
            "lo_ms": round((first + i) * width, 6),
            "hi_ms": round((first + i + 1) * width, 6),
            "count": int(c),
            "share": float(c / total),
        }
        for i, c in enumerate(counts[:-1])
    ]
    if counts[-1]:
        rows.append(
            {
                "lo_ms": round((last + 1) * width, 6),
                "hi_ms": float(values.max()),
                "count": int(counts[-1]),
                "share": float(counts[-1] / total),
                "open": True,
            }
        )
    return rows


def median_interval(values: np.ndarray, level: float = 0.99) -> dict[str, Any] | None:
    """A distribution-free confidence interval for the median of independent samples:
    the order statistics x(k) and x(n+1-k) with the largest k whose coverage (from the
    binomial distribution with p = 1/2) is at least ``level``; with too few samples for
    that, the range (x(1), x(n)) and the coverage it has. ``lo``, ``hi`` (in the values'
    unit) and ``coverage`` (the interval's own, at least ``level`` where the samples
    allow); None without samples."""
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    n = len(ordered)
    if not n:
        return None
    k = 1
    while k + 1 <= n // 2 and _order_coverage(n, k + 1) >= level:
        k += 1
    return {"lo": float(ordered[k - 1]), "hi": float(ordered[n - k]),
            "coverage": round(_order_coverage(n, k), 4)}  # fmt: skip


def _order_coverage(n: int, k: int) -> float:
    """P(x(k) <= median <= x(n+1-k)) for n samples: 1 - 2 P(Bin(n, 1/2) < k)."""
    below = sum(math.comb(n, i) for i in range(k)) / 2**n
    return 1.0 - 2.0 * below
