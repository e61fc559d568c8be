"""Distribution statistics of latency samples (vectorised)."""

from __future__ import annotations

import math

import numpy as np

PERCENTILES = {"p50_ms": 50.0, "p90_ms": 90.0, "p99_ms": 99.0, "p999_ms": 99.9}
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


def describe(values_ns: np.ndarray) -> dict[str, float | int]:
    """count, min, mean, p50, p90, p99, p99.9 and max of nanosecond samples, in ms."""
    values = np.asarray(values_ns, dtype=np.float64) / NS_PER_MS
    if len(values) == 0:
        return {
            "count": 0,
            "min_ms": math.nan,
            "mean_ms": math.nan,
            **{k: math.nan for k in PERCENTILES},
            "max_ms": math.nan,
        }
    pct = np.percentile(values, list(PERCENTILES.values()))
    return {
        "count": len(values),
        "min_ms": float(values.min()),
        "mean_ms": float(values.mean()),
        **{k: float(v) for k, v in zip(PERCENTILES, pct, strict=True)},
        "max_ms": float(values.max()),
    }


def bucket_width_ms(values_ms: np.ndarray, target_buckets: int = 16) -> float:
    """A round bucket width giving about ``target_buckets`` buckets over p0.1..p99.9."""
    if len(values_ms) == 0:
        return 1.0
    lo, hi = np.percentile(values_ms, [0.1, 99.9])
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
    values = np.asarray(values_ns, dtype=np.float64) / NS_PER_MS
    if len(values) == 0:
        return []
    width = width_ms or bucket_width_ms(values)
    lo, hi = np.percentile(values, [0.1, 99.9])
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
