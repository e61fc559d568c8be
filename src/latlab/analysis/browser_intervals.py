"""What a browser does with a stream after its receiver transform, per stats interval.

``getStats()`` counters are lifetime sums; latlab samples them every 200 ms and
turns each interval's increments into that interval's average (a jitter buffer
delay is ``Δ jitterBufferDelay / Δ jitterBufferEmittedCount``), so the result is
a distribution over intervals, not one lifetime average.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from latlab.analysis.stats import Samples
from latlab.ingest.browser_records import BrowserLog

NTP_UNIX_OFFSET_MS = 2_208_988_800_000
FIGURES = ("count", "p50_ms", "p90_ms", "p99_ms", "max_ms", "mean_ms")

# name -> (report type, numerator, denominator, scale to ms)
RATIOS = {
    "jitter_buffer": ("inbound-rtp", "jitterBufferDelay", "jitterBufferEmittedCount", 1000.0),
    "jitter_buffer_target": (
        "inbound-rtp",
        "jitterBufferTargetDelay",
        "jitterBufferEmittedCount",
        1000.0,
    ),
    "jitter_buffer_minimum": (
        "inbound-rtp",
        "jitterBufferMinimumDelay",
        "jitterBufferEmittedCount",
        1000.0,
    ),
    # receipt of a sample's first packet -> decoded; it includes the jitter buffer wait
    "processing": ("inbound-rtp", "totalProcessingDelay", "jitterBufferEmittedCount", 1000.0),
    "playout": ("media-playout", "totalPlayoutDelay", "totalSamplesCount", 1000.0),
    "pacer": ("outbound-rtp", "totalPacketSendDelay", "packetsSent", 1000.0),
    # video: decoding per frame decoded
    "decode": ("inbound-rtp", "totalDecodeTime", "framesDecoded", 1000.0),
}
DIFFS = {  # name -> (report type, counter, scale to ms): the counter's increase per interval
    "frozen": ("inbound-rtp", "totalFreezesDuration", 1000.0),  # video: time spent frozen
}
SHARES = {  # name -> (report type, part, whole): a share in % per interval
    "concealed_pct": ("inbound-rtp", "concealedSamples", "totalSamplesReceived"),
}


def interval_figures(
    sender: BrowserLog | None, receiver: BrowserLog | None, ssrc: int
) -> dict[str, Any]:
    """Per-interval distributions of a stream's browser-side stages (and capture -> playout).

    ``None`` for an end that is not a browser (a traced webrtcbin peer).
    """
    out: dict[str, Any] = {}
    for name, (kind, num, den, scale) in RATIOS.items():
        log = sender if kind == "outbound-rtp" else receiver
        if log is None:
            continue
        values = _ratios(log.stats_counters(kind, ssrc, (num, den))[:, 1:], scale)
        if len(values):
            out[name] = describe_ms(values)
    if receiver is None:
        return out
    for name, (kind, part, whole) in SHARES.items():
        values = _ratios(receiver.stats_counters(kind, ssrc, (part, whole))[:, 1:], 100.0)
        if len(values):
            out[name] = describe_ms(values)  # in %, not ms
    for name, (kind, counter, scale) in DIFFS.items():
        values = np.diff(receiver.stats_counters(kind, ssrc, (counter,))[:, 1]) * scale
        if len(values):
            out[name] = describe_ms(values)
    e2e = capture_to_playout_ms(receiver, ssrc)
    if len(e2e):
        out["capture_to_playout"] = describe_ms(e2e)
    return out


def _ratios(series: np.ndarray, scale: float) -> np.ndarray:
    """Each interval's Δnumerator / Δdenominator, where the denominator grew."""
    if len(series) < 2:
        return np.empty(0)
    delta = np.diff(series, axis=0)
    grew = delta[:, 1] > 0
    return delta[grew, 0] / delta[grew, 1] * scale


def capture_to_playout_ms(receiver: BrowserLog, ssrc: int) -> np.ndarray:
    """Per sync sample: when the source's frame played minus its abs-capture-time (ms)."""
    values = []
    for _, sources in receiver.sync:
        for source in sources:
            capture, played = source.get("captureTimestamp"), source.get("timestamp")
            if source.get("source") != ssrc or capture is None or played is None:
                continue
            values.append(played - (capture - NTP_UNIX_OFFSET_MS))
    return np.array(values, np.float64)


def describe_ms(values: np.ndarray) -> dict[str, float]:
    """count, p50/p90/p99/max/mean of values in ms."""
    stats = Samples(np.rint(values * 1e6).astype(np.int64)).describe()
    return {k: float(stats[k]) for k in FIGURES}
