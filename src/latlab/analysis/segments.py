"""Per-stream analysis: segment and end-to-end distributions, cadence and thread hand-offs.

Contract (what reports consume): ``StreamAnalysis`` per stream, with segment
statistics computed over the units that completed their journey, so segment
means add up to the end-to-end mean.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from latlab.analysis.browser_adaptation import (
    adaptation,
    latency_per_interval,
    schedule_steps,
    timeline,
)
from latlab.analysis.browser_functions import function_figures
from latlab.analysis.browser_intervals import interval_figures
from latlab.analysis.phases import phase_bounds
from latlab.analysis.sfu_journeys import sfu_journeys, sfu_legs_of_traced
from latlab.analysis.stats import Samples
from latlab.ingest.browser_records import BrowserLog
from latlab.ingest.events import EventTable
from latlab.ingest.link_log import LinkLog
from latlab.ingest.workers import in_background, parallel_map
from latlab.stitch.browser import browser_journeys
from latlab.stitch.browser_legs import join_browser_legs
from latlab.stitch.devices import add_device_playout
from latlab.stitch.journeys import Journeys, build_journeys
from latlab.stitch.kinds import ordered
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
    phases: dict[str, SegmentStats] = field(default_factory=dict)
    intervals: dict[str, Any] = field(default_factory=dict)  # browser stages per stats interval
    timeline: dict[str, np.ndarray] = field(default_factory=dict)  # per stats interval
    adaptation: list[dict[str, Any]] = field(default_factory=list)  # per link schedule change
    functions: dict[str, Any] = field(default_factory=dict)  # browsers' audio functions, per call
    kinds: dict[str, SegmentStats] = field(default_factory=dict)  # per-unit sums per kind
    clock: Any = None  # across clock domains: analysis.clock_apply.StreamClock


def analyze(
    table: EventTable,
    unit_ms: float = 10.0,
    run: dict | None = None,
    browsers: Sequence[BrowserLog] = (),
    links: Sequence[LinkLog] = (),
    forwarded: pa.Table | None = None,
    aligner: Callable[[list[Journeys]], list[tuple[Journeys, Any]]] | None = None,
) -> list[StreamAnalysis]:
    """Stitch journeys and compute the statistics of every stream of a run.

    ``run`` (run.json) adds device playout probes where a path ends in an audio device;
    ``browsers`` are the run's browser records: one stream per direction and SSRC, with
    the browser's own stages per stats interval and, against the changes in ``links``'
    schedules, how the call adapted; ``forwarded`` (a captured SFU host's matched packets,
    :mod:`latlab.analysis.sfu_dwell`) joins the browsers of a room into one journey per
    publisher stream and subscriber leg through the SFU. ``aligner``
    (:class:`latlab.analysis.clock_apply.Aligner`) moves the journeys of a run of several
    clock domains onto one before their statistics.
    """
    cadence = in_background(lambda: probe_cadence(table))
    journeys = build_journeys(table, unit_ms)
    if run and run.get("devices"):
        journeys = [add_device_playout(j, table, run) for j in journeys]
    journeys = join_browser_legs(journeys, list(browsers), table)
    through = sfu_legs_of_traced(journeys, list(browsers), forwarded, table)
    if through:  # a traced publisher's streams continue through the SFU, leg by leg
        continued = {j.path.ssrc for j in through}
        journeys = [j for j in journeys if j.path.ssrc not in continued] + through
    aligned = aligner(journeys) if aligner is not None else [(j, None) for j in journeys]
    streams = []
    for j, clock in aligned:
        streams.append(analyze_journeys(j, cadence()))
        streams[-1].clock = clock
    by_name = {log.process: log for log in browsers}
    steps = schedule_steps(list(links))
    window = measured_window(run or {})
    for stream in streams:  # a traced peer's stream to or from a browser
        j = stream.journeys
        sender, receiver = (
            by_name.get(n.split("/", 1)[0]) for n in (j.probe_names[0], j.probe_names[-1])
        )
        if sender or receiver:
            _add_browser_figures(stream, sender, receiver, steps, window)
    for j in browser_journeys(list(browsers), table):
        stream = analyze_journeys(j, {})
        sender, receiver = (name.split("/", 1)[0] for name in (j.probe_names[0], j.probe_names[-1]))
        _add_browser_figures(stream, by_name[sender], by_name[receiver], steps, window)
        streams.append(stream)
    streams += [analyze_journeys(j, {}) for j in sfu_journeys(list(browsers), forwarded, table)]
    return streams


def _add_browser_figures(
    stream: StreamAnalysis,
    sender: BrowserLog | None,
    receiver: BrowserLog | None,
    steps: list[dict[str, Any]],
    window: tuple[int, int] | None = None,
) -> None:
    """The browsers' own stages per stats interval and per call of their audio functions
    (in the measured ``window``), and how the call adapted to ``steps``."""
    ssrc = stream.journeys.path.ssrc or 0
    stream.intervals = interval_figures(sender, receiver, ssrc)
    stream.timeline = timeline(sender, receiver, ssrc)
    if len(stream.timeline["t_ns"]):
        complete = stream.journeys.complete
        arrived = stream.journeys.times[complete, -1]
        stream.timeline["latency_ms"] = latency_per_interval(
            stream.timeline["t_ns"], arrived, stream.end_to_end.values_ns
        )
    stream.adaptation = adaptation(stream.timeline, steps)
    stream.functions = function_figures(sender, receiver, window)


def measured_window(run: dict[str, Any]) -> tuple[int, int] | None:
    """The run's measured window on CLOCK_MONOTONIC (run.json), if it has one."""
    start, end = run.get("measure_start_monotonic_ns"), run.get("measure_end_monotonic_ns")
    return (int(start), int(end)) if start and end else None


def analyze_journeys(journeys: Journeys, cadence: dict[str, dict]) -> StreamAnalysis:
    """The statistics of one stream from its journeys: per segment, end to end, phases,
    kinds (per-unit sums) and thread hand-offs; ``cadence`` is the run's per-probe cadence."""
    complete = journeys.complete
    times = [journeys.times[complete, j] for j in range(journeys.times.shape[1])]
    names = journeys.probe_names
    spans = [(i, i + 1, journeys.segment_kinds[i]) for i in range(len(names) - 1)]
    spans.append((0, len(names) - 1, "end_to_end"))

    def segment(span: tuple[int, int, str]) -> SegmentStats:
        a, b, kind = span
        return _segment(names[a], names[b], kind, times[b] - times[a])

    bounds = phase_bounds(journeys)
    spans += [(a, b, "phase") for a, b in bounds.values()]
    stats = parallel_map(segment, spans)
    segments, e2e = stats[: len(names) - 1], stats[len(names) - 1]
    phases = dict(zip(bounds, stats[len(names) :], strict=True))
    path_cadence = {n: cadence[n] for n in names if n in cadence}
    analysis = StreamAnalysis(journeys, segments, e2e, path_cadence, _handoffs(journeys), phases)
    analysis.kinds = kind_sums(segments)
    return analysis


def kind_sums(segments: Sequence[SegmentStats]) -> dict[str, SegmentStats]:
    """Per segment kind (in path order), the time each complete unit spent in segments of
    that kind: per-unit sums, so a kind's figures are its own distribution, not a sum of
    percentiles."""
    totals: dict[str, np.ndarray] = {}
    spans: dict[str, tuple[str, str]] = {}
    for seg in segments:
        values = seg.values_ns.astype(np.int64)
        totals[seg.kind] = totals[seg.kind] + values if seg.kind in totals else values
        first = spans.get(seg.kind, (seg.from_probe, seg.to_probe))[0]
        spans[seg.kind] = (first, seg.to_probe)
    return {k: _segment(*spans[k], k, totals[k]) for k in ordered(set(totals))}


def _segment(a: str, b: str, kind: str, values: np.ndarray) -> SegmentStats:
    samples = Samples(values)
    return SegmentStats(a, b, kind, samples.describe(), samples.distribution_table(), values)


def _handoffs(journeys: Journeys) -> dict[str, float | int | list]:
    """Thread hand-offs per journey: consecutive probes seen on different threads."""
    complete = journeys.complete
    threads = [journeys.threads[complete, j] for j in range(journeys.threads.shape[1])]
    changes = np.zeros(int(complete.sum()), np.int64)
    for before, after in itertools.pairwise(threads):
        changes += (before != MISSING) & (after != MISSING) & (before != after)
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
        times = table.probe_column(p.index, "t_ns")
        if not np.all(times[1:] >= times[:-1]):
            times = np.sort(times)
        intervals = np.diff(times)
        intervals = intervals[intervals > 0]  # buffers of one list share a time
        if len(intervals) == 0:
            continue
        samples = Samples(intervals)
        stats = samples.describe()
        limit = IRREGULAR_FACTOR * samples.median_ns()
        stats["irregular"] = len(intervals) - int(
            np.searchsorted(samples.sorted_ns, limit, "right")
        )
        out[p.name] = stats
    return out
