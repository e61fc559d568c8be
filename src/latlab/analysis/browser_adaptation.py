"""How a call adapts when its link changes: jitter buffer, send rate and latency over time.

Each pair of consecutive ``getStats()`` samples is one interval: its jitter-buffer
delay and target (increments over emitted samples), the sender's rate (Δ bytesSent)
and the median end-to-end latency of the frames that arrived in it. For each change
in an emulated link's schedule and each of target, send rate and latency, the
settling time is how long after the change the series first came within 10 % (of
the move) of the level it held in the last second before the next change (or the
end of the run); a series that moved less than 5 % did not change and has none.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from latlab.ingest.browser_records import BrowserLog
from latlab.ingest.link_log import LinkLog

SETTLED_SHARE = 0.1
MIN_CHANGE = 0.05  # a level that moved less than 5 % did not change
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


def latency_per_interval(
    t_ns: np.ndarray, arrived_ns: np.ndarray, e2e_ns: np.ndarray
) -> np.ndarray:
    """Per stats interval ending at ``t_ns``: the median end-to-end latency (ms) of the
    units that completed their journey in it (NaN where none did)."""
    out = np.full(len(t_ns), np.nan)
    if not len(t_ns) or not len(arrived_ns):
        return out
    interval = np.searchsorted(t_ns, arrived_ns, side="left")  # (t[i-1], t[i]] -> i
    inside = (interval > 0) & (interval < len(t_ns))
    interval, values = interval[inside], e2e_ns[inside] / 1e6
    order = np.lexsort((values, interval))
    interval, values = interval[order], values[order]
    bins, first, counts = np.unique(interval, return_index=True, return_counts=True)
    lower = values[first + (counts - 1) // 2]
    upper = values[first + counts // 2]
    out[bins] = (lower + upper) / 2
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


# series of the timeline -> what its adaptation entry calls it
ADAPTING = {"target_ms": "target", "send_kbit_s": "send_rate", "latency_ms": "latency"}


def adaptation(series: dict[str, np.ndarray], steps: list[dict[str, Any]]) -> list[dict]:
    """Per link change: for the jitter-buffer target, the send rate and the latency, the
    level before, the level it settled at, and how long it took (``settled_s``)."""
    t = series["t_ns"]
    if not len(t):
        return []
    out = []
    for i, step in enumerate(steps):
        end = steps[i + 1]["t_ns"] if i + 1 < len(steps) else int(t[-1]) + 1
        entry: dict[str, Any] = {"at_s": step["at_s"], "link": step["link"], "set": step["set"]}
        for name, label in ADAPTING.items():
            if name in series:
                settled = _settling(t, series[name], step["t_ns"], end)
                if settled is not None:
                    entry[label] = settled
        if "target" in entry:  # the first fields of this record (kept for readers of them)
            entry.update(
                target_before_ms=entry["target"]["before"],
                target_after_ms=entry["target"]["after"],
                changed=entry["target"]["changed"],
                settled_s=entry["target"]["settled_s"],
            )
        if len(entry) > 3:
            out.append(entry)
    return out


def _settling(t: np.ndarray, values: np.ndarray, start: int, end: int) -> dict | None:
    """The level before ``start``, the level held in the last second before ``end``, and
    when the series first came within SETTLED_SHARE of the move of that level."""
    before = values[(t >= start - BASELINE_WINDOW_NS) & (t < start)]
    level = values[(t >= end - LEVEL_WINDOW_NS) & (t < end)]
    after = (t >= start) & (t < end)
    before, level = before[np.isfinite(before)], level[np.isfinite(level)]
    if not len(before) or not len(level) or not after.any():
        return None
    base, new = float(np.median(before)), float(np.median(level))
    move = abs(new - base)
    changed = move >= MIN_CHANGE * max(abs(base), 1.0)
    inside = np.flatnonzero(np.abs(values[after] - new) <= move * SETTLED_SHARE)
    settle = (t[after][inside[0]] - start) / 1e9 if changed and len(inside) else None
    return {"before": base, "after": new, "changed": changed, "settled_s": settle}
