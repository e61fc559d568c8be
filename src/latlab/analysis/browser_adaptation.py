"""How a call adapts when its link changes: the jitter buffer and the send rate over time.

Each pair of consecutive ``getStats()`` samples is one interval: its jitter-buffer
delay and target (increments over emitted samples) and the sender's rate
(Δ bytesSent). For each change in an emulated link's schedule, the settling time
is how long after the change the jitter-buffer target first came within 10 % (of
the move) of the level it held in the last second before the next change (or the
end of the run); a target that did not move has none.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from latlab.ingest.browser_records import BrowserLog
from latlab.ingest.link_log import LinkLog

SETTLED_SHARE = 0.1
MIN_CHANGE_MS = 1.0  # a target that moved less than this did not change
LEVEL_WINDOW_NS = 1_000_000_000
BASELINE_WINDOW_NS = 2_000_000_000


def timeline(
    sender: BrowserLog | None, receiver: BrowserLog | None, ssrc: int
) -> dict[str, np.ndarray]:
    """Per stats interval: its end (CLOCK_MONOTONIC ns), jitter buffer and target (ms),
    and the sender's rate (kbit/s, from its own stats nearest in time). Without a
    receiving browser (a traced peer received), there are no intervals."""
    out: dict[str, np.ndarray] = {"t_ns": np.empty(0, np.int64)}
    if receiver is None:
        return out
    rx = receiver.stats_counters("inbound-rtp", ssrc, JB_COUNTERS)
    if len(rx) >= 2:
        delta = np.diff(rx[:, 1:], axis=0)
        grew = delta[:, 1] > 0
        emitted = np.where(grew, delta[:, 1], np.nan)
        out = {
            "t_ns": rx[1:, 0].astype(np.int64),
            "jitter_buffer_ms": delta[:, 0] / emitted * 1000,
            "target_ms": delta[:, 2] / emitted * 1000,
        }
    tx = sender.stats_counters("outbound-rtp", ssrc, ("bytesSent",)) if sender else np.empty(0)
    if len(tx) >= 2 and len(out["t_ns"]):
        rate = np.diff(tx[:, 1]) * 8 / (np.diff(tx[:, 0]) / 1e9) / 1000
        idx = np.clip(np.searchsorted(tx[1:, 0], out["t_ns"]), 0, len(rate) - 1)
        out["send_kbit_s"] = rate[idx]
    return out


JB_COUNTERS = ("jitterBufferDelay", "jitterBufferEmittedCount", "jitterBufferTargetDelay")


def schedule_steps(links: list[LinkLog]) -> list[dict[str, Any]]:
    """Every scheduled link change: when (CLOCK_MONOTONIC ns), on which link, what it set."""
    steps = []
    for log in links:
        config = log.info.get("config") or {}
        for entry in config.get("schedule", []):
            steps.append(
                {
                    "t_ns": log.start_ns + round(float(entry["at_s"]) * 1e9),
                    "at_s": float(entry["at_s"]),
                    "link": log.info.get("name", log.path.stem),
                    "set": entry.get("set", {}),
                }
            )
    return sorted(steps, key=lambda s: s["t_ns"])


def adaptation(series: dict[str, np.ndarray], steps: list[dict[str, Any]]) -> list[dict]:
    """Per link change: the target before, the level it settled at, and how long it took."""
    t, target = series["t_ns"], series.get("target_ms")
    if target is None or not len(t):
        return []
    out = []
    for i, step in enumerate(steps):
        end = steps[i + 1]["t_ns"] if i + 1 < len(steps) else int(t[-1]) + 1
        before = target[(t >= step["t_ns"] - BASELINE_WINDOW_NS) & (t < step["t_ns"])]
        level = target[(t >= end - LEVEL_WINDOW_NS) & (t < end)]
        after = (t >= step["t_ns"]) & (t < end)
        if not len(before) or not len(level) or not after.any():
            continue
        base, new = float(np.nanmedian(before)), float(np.nanmedian(level))
        changed = abs(new - base) >= MIN_CHANGE_MS
        inside = np.flatnonzero(np.abs(target[after] - new) <= abs(new - base) * SETTLED_SHARE)
        reached = changed and len(inside) > 0
        settle = (t[after][inside[0]] - step["t_ns"]) / 1e9 if reached else None
        out.append(
            {
                "at_s": step["at_s"],
                "link": step["link"],
                "set": step["set"],
                "target_before_ms": base,
                "target_after_ms": new,
                "changed": changed,
                "settled_s": settle,
            }
        )
    return out
