"""Frame effects: how I-frames and P-frames differ in size and in time on the way.

An I-frame is several times larger than a P-frame; through a link whose rate was
set from the average bitrate its packets queue, so its last byte arrives later
than its first. Per frame type: count, encoded size, transport phase and the
wait from a frame's first byte delivered to its last.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from latlab.analysis.segments import StreamAnalysis
from latlab.analysis.stats import Samples
from latlab.stitch.mpegts_path import FIRST_BYTE, LAST_BYTE
from latlab.stitch.position import MISSING

FIGURES = ("count", "p50_ms", "p99_ms", "max_ms", "mean_ms")


def frame_effects(stream: StreamAnalysis) -> dict[str, Any] | None:
    """Per frame type ("I", "P"): sizes and times, over the frames that completed the path."""
    j = stream.journeys
    if j.unit_keyframe is None or j.unit_bytes is None:
        return None
    complete = j.complete
    keyframe, size = j.unit_keyframe[complete], j.unit_bytes[complete]
    measures: dict[str, np.ndarray] = {}
    if "transport" in stream.phases:
        measures["transport"] = stream.phases["transport"].values_ns
    assembly = [s for s in stream.segments if s.from_probe.endswith(FIRST_BYTE)]
    if assembly:
        measures["first_to_last_byte"] = assembly[-1].values_ns
    measures.update(_link_measures(stream))
    out: dict[str, Any] = {}
    for label, mask in (("I", keyframe), ("P", ~keyframe & (size >= 0))):
        if not mask.any():
            continue
        sizes = size[mask]
        entry: dict[str, Any] = {
            "frames": int(mask.sum()),
            "bytes_p50": float(np.median(sizes)),
            "bytes_max": int(sizes.max()),
        }
        for name, values in measures.items():
            known = mask & (values != MISSING_SPAN)
            stats = Samples(values[known]).describe()
            entry[name] = {k: stats[k] for k in FIGURES}
        out[label] = entry
    return out


MISSING_SPAN = np.iinfo(np.int64).min


def _link_measures(stream: StreamAnalysis) -> dict[str, np.ndarray]:
    """Per complete frame, through each emulated link: first packet in to last out
    (``link_crossing``) and first packet out to last out (``link_drain``, the time
    the frame's packets took to leave a bottleneck).
    """
    j = stream.journeys
    complete = j.complete
    out: dict[str, np.ndarray] = {}
    columns = {n: i for i, n in enumerate(j.probe_names)}
    for name, last_out in j.extra.items():
        if not (name.startswith("link/") and name.endswith(":out" + LAST_BYTE)):
            continue
        link = name.removesuffix(":out" + LAST_BYTE)
        first_in = columns.get(f"{link}:in{FIRST_BYTE}")
        first_out = columns.get(f"{link}:out{FIRST_BYTE}")
        if first_in is None or first_out is None:
            continue
        last = last_out[complete]
        seen = last != MISSING
        for key, column in (("link_crossing", first_in), ("link_drain", first_out)):
            span = last - j.times[complete, column]
            out[key] = np.where(seen, span, MISSING_SPAN)
    return out


def frames_held(stream: StreamAnalysis) -> list[float | None]:
    """Per segment of a video stream: its p50 in frames (how many frames a stage holds)."""
    unit_ms = stream.journeys.unit_ns / 1e6
    return [
        None if not np.isfinite(s.stats["p50_ms"]) else round(float(s.stats["p50_ms"]) / unit_ms, 2)
        for s in stream.segments
    ]
