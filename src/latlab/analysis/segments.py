"""Per-stream analysis: segment and end-to-end distributions, cadence and thread hand-offs.

Contract (what reports consume): ``StreamAnalysis`` per stream, with segment
statistics computed over the units that completed their journey, so segment
means add up to the end-to-end mean.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from latlab.analysis.stats import describe, distribution_table
from latlab.ingest.events import EventTable
from latlab.stitch.journeys import Journeys, build_journeys
from latlab.stitch.position import MISSING

IRREGULAR_FACTOR = 1.5


@dataclass
class SegmentStats:
    """One segment between two consecutive probes of a path."""

    from_probe: str
    to_probe: str
    kind: str
    stats: dict[str, float | int]
    histogram: list[dict]
    values_ns: np.ndarray = field(repr=False)


@dataclass
class StreamAnalysis:
    """Everything measured about one stream."""

    journeys: Journeys
    segments: list[SegmentStats]
    end_to_end: SegmentStats
    cadence: dict[str, dict]
    handoffs: dict[str, float | int | list]


def analyze(table: EventTable, unit_ms: float = 10.0) -> list[StreamAnalysis]:
    """Stitch journeys and compute the statistics of every stream of a run."""
    cadence = probe_cadence(table)
    return [_analyze_stream(j, cadence) for j in build_journeys(table, unit_ms)]


def _analyze_stream(journeys: Journeys, cadence: dict[str, dict]) -> StreamAnalysis:
    times = journeys.times[journeys.complete]
    names = journeys.probe_names
    deltas = np.diff(times, axis=1)
    segments = [
        _segment(names[i], names[i + 1], journeys.segment_kinds[i], deltas[:, i])
        for i in range(len(names) - 1)
    ]
    e2e = _segment(names[0], names[-1], "end_to_end", times[:, -1] - times[:, 0])
    path_cadence = {n: cadence[n] for n in names if n in cadence}
    return StreamAnalysis(journeys, segments, e2e, path_cadence, _handoffs(journeys))


def _segment(a: str, b: str, kind: str, values: np.ndarray) -> SegmentStats:
    return SegmentStats(a, b, kind, describe(values), distribution_table(values), values)


def _handoffs(journeys: Journeys) -> dict[str, float | int | list]:
    """Thread hand-offs per journey: consecutive probes seen on different threads."""
    threads = journeys.threads[journeys.complete]
    known = (threads[:, 1:] != MISSING) & (threads[:, :-1] != MISSING)
    changes = np.sum(known & (threads[:, 1:] != threads[:, :-1]), axis=1)
    if len(changes) == 0:
        return {"mean": 0.0, "min": 0, "max": 0, "table": []}
    counts = np.bincount(changes)
    values = np.flatnonzero(counts)
    counts = counts[values]
    return {
        "mean": float(changes.mean()),
        "min": int(changes.min()),
        "max": int(changes.max()),
        "table": [
            {"handoffs": int(v), "count": int(c)} for v, c in zip(values, counts, strict=True)
        ],
    }


def probe_cadence(table: EventTable) -> dict[str, dict]:
    """Per probe, the distribution of intervals between consecutive buffers.

    ``irregular`` counts intervals longer than 1.5x the median: periods that
    doubled up (the thesis's figure 3.14).
    """
    out: dict[str, dict] = {}
    for p in table.probes:
        times = np.sort(table.probe_column(p.index, "t_ns"))
        intervals = np.diff(times)
        intervals = intervals[intervals > 0]  # buffers of one list share a time
        if len(intervals) == 0:
            continue
        stats = describe(intervals)
        median_ns = np.median(intervals)
        stats["irregular"] = int(np.sum(intervals > IRREGULAR_FACTOR * median_ns))
        out[p.name] = stats
    return out
