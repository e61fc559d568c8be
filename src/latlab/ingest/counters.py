"""Wrapping counters (RTP sequence numbers and timestamps, PES PTS) made monotonic."""

from __future__ import annotations

import numpy as np


def unwrap(values: np.ndarray, modulus: int) -> np.ndarray:
    """A counter that wraps at ``modulus``, unwrapped along the array's order.

    A step of more than half the modulus down is a wrap forward, up a wrap back.
    """
    out = values.astype(np.int64)
    if len(out) < 2:
        return out
    step = np.diff(out)
    wraps = np.cumsum((step < -modulus // 2).astype(np.int64) - (step > modulus // 2))
    return np.concatenate([out[:1], out[1:] + wraps * modulus])
