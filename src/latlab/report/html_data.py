"""What the HTML report plots, computed columnar from a run's journeys and files.

:func:`run_model` turns an analysed run (summary.json, ``StreamAnalysis`` per stream,
the run directory) into one JSON-ready dict: per stream the waterfall, the tail
split, per-segment histograms and CDFs, the per-unit scatter of each probe's time
relative to the first probe, the end-to-end, loss and concealment series, and the
findings; per run the CPU series and, for a run with a time-coded signal, the black box
against the probes per code (``blackbox.parquet``). Statistics come from every unit; only what is
drawn point by point (scatter, series) is decimated to ``max_points`` per line,
keeping each bucket's minimum and maximum so spikes and gaps stay visible.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from latlab.analysis.segments import StreamAnalysis
from latlab.ingest.browser_records import BrowserLog, read_browser_logs
from latlab.report import findings as fnd
from latlab.report.blackbox import estimated_segments
from latlab.rundir import BLACKBOX_FILE, RESOURCES_FILE
from latlab.rundir import RESOURCES_SYSTEM as SYSTEM
from latlab.stitch.kinds import CAPTURE, JITTERBUFFER, SINK_WAIT
from latlab.stitch.position import MISSING

MAX_POINTS = 4000  # per scatter line and series
HIST_BINS = 40
CDF_STEPS = np.concatenate([np.linspace(0, 99, 100), [99.5, 99.9, 99.95, 99.99, 100.0]])
SERIES_BINS = 200  # loss series: at most this many time bins
DIGITS = 4  # ms figures in the data: 0.1 µs
CHARTS = {  # anchor suffix -> the stream model's key of that chart's data, in page order
    "waterfall": "waterfall",
    "tail": "tail",
    "scatter": "scatter",
    "e2e": "e2e",
    "loss": "loss",
    "conceal": "concealment",
    "jb": "jitter_buffer",
}


def decimate_minmax(x: np.ndarray, y: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_points`` of the points (in x order): each bucket's min and max of y."""
    n = len(x)
    if n <= max_points:
        return x, y
    buckets = max(max_points // 2, 1)
    size = -(-n // buckets)
    buckets = -(-n // size)
    padded = np.full(buckets * size, np.nan)
    padded[:n] = y
    rows = padded.reshape(buckets, size)
    base = np.arange(buckets) * size
    keep = np.unique(np.concatenate([base + np.nanargmin(rows, 1), base + np.nanargmax(rows, 1)]))
    return x[keep], y[keep]


def _round(values: np.ndarray, digits: int = DIGITS) -> list[float | None]:
    """Rounded figures for the JSON data; NaN and infinities become null."""
    rounded = np.round(np.asarray(values, np.float64), digits)
    finite = np.isfinite(rounded)
    if finite.all():
        return rounded.tolist()
    return np.where(finite, rounded.astype(object), None).tolist()


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(float(value), DIGITS)


def short_probe(name: str, previous: str | None = None) -> str:
    """A probe without its process when the previous probe is in the same process."""
    if previous and "/" in name and name.split("/", 1)[0] == previous.split("/", 1)[0]:
        return name.split("/", 1)[1]
    return name


class StreamView:
    """The columns of one stream the report draws from."""

    def __init__(self, stream: StreamAnalysis, t0_ns: int) -> None:
        j = stream.journeys
        self.analysis = stream
        self.journeys = j
        self.unit_s = j.unit_ns / 1e9
        self.probes = j.probe_names
        self.complete = j.complete
        self.t_s = self._unit_times(t0_ns)
        done = j.times[self.complete]
        self.segments_ns = np.diff(done, axis=1)
        self.e2e_ns = done[:, -1] - done[:, 0] if done.shape[1] else np.empty(0, np.int64)

    def _unit_times(self, t0_ns: int) -> np.ndarray:
        """Seconds from the run's start at which each unit passed the first probe where it did.

        Units missing there are placed by their media position between their neighbours.
        """
        j = self.journeys
        first = j.times[:, 0] if j.times.shape[1] else np.empty(0, np.int64)
        seen = first != MISSING
        if not seen.any():
            return (j.unit_start - (j.unit_start[0] if len(j.unit_start) else 0)) / 1e9
        placed = np.interp(j.unit_start, j.unit_start[seen], first[seen].astype(np.float64))
        return (placed - t0_ns) / 1e9


def segment_labels(view: StreamView) -> list[str]:
    """Each segment named by its end probe (process shown when it changes)."""
    out, previous = [], view.probes[0] if view.probes else None
    for name in view.probes[1:]:
        out.append(short_probe(name, previous))
        previous = name
    return out


def waterfall(view: StreamView, summary_stream: dict[str, Any]) -> dict[str, Any]:
    """Rows along the path: each segment's p50 and p99, each starting where the previous ended."""
    segs = summary_stream["segments"]
    p50 = np.array([s["p50_ms"] or 0.0 for s in segs])
    p99 = np.array([s["p99_ms"] or 0.0 for s in segs])
    e2e = summary_stream["end_to_end"]
    return {
        "labels": segment_labels(view),
        "kinds": [s["kind"] for s in segs],
        "p50": _round(p50),
        "p99": _round(p99),
        "p50_start": _round(np.concatenate([[0.0], np.cumsum(p50)[:-1]])),
        "p99_start": _round(np.concatenate([[0.0], np.cumsum(p99)[:-1]])),
        "e2e_p50": _finite(e2e["p50_ms"]),
        "e2e_p99": _finite(e2e["p99_ms"]),
    }


def tail_chart(view: StreamView) -> dict[str, Any] | None:
    """Mean per segment of the median units against the worst 1 % of units."""
    if not len(view.e2e_ns):
        return None
    split = fnd.tail_split(view.segments_ns)
    return {
        "labels": segment_labels(view),
        "median": _round(split.median_ns / 1e6),
        "worst": _round(split.worst_ns / 1e6),
        "median_units": split.median_units,
        "worst_units": split.worst_units,
    }


def histogram_range(sorted_ms: np.ndarray) -> tuple[float, float]:
    """Where the bulk of a distribution lies: 3 interquartile ranges around the quartiles,
    widened to reach p1 and p95, never past the extremes. A heavy tail would squash every
    bar into one: it lands in the end bin, and the CDF, the waterfall (p99) and the tail
    plot show it."""
    if not len(sorted_ms):
        return 0.0, 1.0
    p1, q25, q75, p95 = np.percentile(sorted_ms, [1.0, 25.0, 75.0, 95.0])
    iqr = q75 - q25
    lo = max(float(sorted_ms[0]), min(p1, q25 - 3 * iqr))
    hi = min(float(sorted_ms[-1]), max(p95, q75 + 3 * iqr))
    return float(lo), float(hi)


def distribution(values_ns: np.ndarray, title: str, kind: str) -> dict[str, Any]:
    """Histogram (its bulk, outliers in the end bins) and CDF of one segment, in ms."""
    ms = np.sort(values_ns.astype(np.float64) / 1e6)
    lo, hi = histogram_range(ms)
    if hi <= lo:
        lo, hi = lo - 0.005, hi + 0.005
    counts, edges = np.histogram(np.clip(ms, lo, hi), HIST_BINS, (lo, hi))
    p50, p99 = np.percentile(ms, [50, 99]) if len(ms) else (math.nan, math.nan)
    return {
        "title": title,
        "kind": kind,
        "count": len(ms),
        "edges": _round(edges),
        "counts": counts.tolist(),
        "beyond": int((ms > hi).sum() + (ms < lo).sum()),
        "cdf_x": _round(np.percentile(ms, CDF_STEPS)) if len(ms) else [],
        "cdf_y": _round(CDF_STEPS / 100.0, 6),
        "p50": _finite(float(p50)),
        "p99": _finite(float(p99)),
        "max": _finite(float(ms[-1])) if len(ms) else None,
    }


def distributions(view: StreamView) -> list[dict[str, Any]]:
    """One distribution per segment, then end to end."""
    labels = segment_labels(view)
    kinds = view.journeys.segment_kinds
    out = [
        distribution(view.segments_ns[:, i], labels[i], kinds[i])
        for i in range(view.segments_ns.shape[1])
    ]
    out.append(distribution(view.e2e_ns, "end to end", "end_to_end"))
    return out


def scatter(view: StreamView, max_points: int) -> dict[str, Any]:
    """Per probe, each unit's time there relative to the first probe, over the run."""
    times = view.journeys.times
    first = times[:, 0]
    lines = []
    for j, name in enumerate(view.probes):  # one decimated line per probe
        seen = (first != MISSING) & (times[:, j] != MISSING)
        y = (times[seen, j] - first[seen]) / 1e6
        x, y = decimate_minmax(view.t_s[seen], y, max_points)
        lines.append({"probe": name, "x": _round(x, 3), "y": _round(y), "units": int(seen.sum())})
    return {"lines": lines}


def e2e_series(view: StreamView, max_points: int) -> dict[str, Any]:
    """End-to-end latency of each complete unit over the run (decimated min/max)."""
    x, y = decimate_minmax(view.t_s[view.complete], view.e2e_ns / 1e6, max_points)
    return {"x": _round(x, 3), "y": _round(y), "units": len(view.e2e_ns)}


def bin_width_s(span_s: float, unit_s: float) -> float:
    """A round bin width giving at most SERIES_BINS bins over the span, not below one unit."""
    target = max(span_s / SERIES_BINS, unit_s)
    for step in (0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60):
        if step >= target:
            return float(step)
    return float(math.ceil(target / 60) * 60)


def loss_series(view: StreamView) -> dict[str, Any]:
    """Units that did not complete their journey (lost or late), per time bin."""
    if not len(view.t_s):
        return {"x": [], "y": [], "bin_s": 0.0, "incomplete": 0}
    start = float(view.t_s.min())
    width = bin_width_s(float(view.t_s.max()) - start, view.unit_s)
    index = np.floor((view.t_s - start) / width).astype(np.int64)
    counts = np.bincount(index, weights=(~view.complete).astype(np.float64))
    centres = start + (np.arange(len(counts)) + 0.5) * width
    return {
        "x": _round(centres, 3),
        "y": counts.astype(np.int64).tolist(),
        "bin_s": width,
        "incomplete": int((~view.complete).sum()),
    }


def concealment_series(
    log: BrowserLog | None, ssrc: int | None, t0_ns: int
) -> dict[str, Any] | None:
    """Concealed samples in % of received ones, per browser stats interval."""
    if log is None or ssrc is None:
        return None
    rows = log.stats_counters("inbound-rtp", ssrc, ("concealedSamples", "totalSamplesReceived"))
    if len(rows) < 2:
        return None
    delta = np.diff(rows[:, 1:], axis=0)
    grew = delta[:, 1] > 0
    pct = np.where(grew, 100.0 * delta[:, 0] / np.where(grew, delta[:, 1], 1.0), 0.0)
    t_s = (rows[1:, 0] - t0_ns) / 1e9
    step = float(np.median(np.diff(rows[:, 0]))) / 1e9
    return {"x": _round(t_s, 3), "y": _round(pct, 3), "step_s": step}


def jitter_buffer_series(stream: StreamAnalysis, t0_ns: int) -> dict[str, Any] | None:
    """A browser's jitter-buffer delay and its target per stats interval (ms)."""
    timeline = stream.timeline
    if not timeline or not len(timeline.get("t_ns", [])):
        return None
    t_s = (np.asarray(timeline["t_ns"], np.float64) - t0_ns) / 1e9
    return {
        "x": _round(t_s, 3),
        "delay": [_finite(v) for v in np.asarray(timeline["jitter_buffer_ms"], np.float64)],
        "target": [_finite(v) for v in np.asarray(timeline["target_ms"], np.float64)],
    }


def cpu_series(run_dir: Path, t0_ns: int) -> dict[str, Any] | None:
    """CPU (user + system, % of one core) per process between consecutive samples."""
    path = run_dir / RESOURCES_FILE
    if not path.is_file():
        return None
    table = pq.read_table(path, columns=["t_ns", "process", "user_s", "system_s"])
    process = np.asarray(table.column("process").to_numpy(zero_copy_only=False), dtype=object)
    t_ns = table.column("t_ns").to_numpy()
    cpu_s = table.column("user_s").to_numpy() + table.column("system_s").to_numpy()
    lines = []
    for name in sorted(set(process.tolist()) - {SYSTEM}):  # one line per process
        rows = np.flatnonzero(process == name)
        rows = rows[np.argsort(t_ns[rows], kind="stable")]
        dt = np.diff(t_ns[rows]) / 1e9
        ok = dt > 0
        pct = 100.0 * np.diff(cpu_s[rows])[ok] / dt[ok]
        x = ((t_ns[rows][1:][ok] - t0_ns) / 1e9).astype(np.float64)
        lines.append({"process": name, "x": _round(x, 3), "y": _round(pct, 2)})
    return {"lines": lines} if lines else None


def run_start_ns(meta: dict[str, Any], streams: Sequence[StreamAnalysis]) -> int:
    """The instant the report's time axes count from: the measured window's start."""
    start = meta.get("measure_start_monotonic_ns")
    if isinstance(start, int) and start > 0:
        return start
    firsts = [
        int(s.journeys.times[s.journeys.times[:, 0] != MISSING, 0].min())
        for s in streams
        if s.journeys.times.size and (s.journeys.times[:, 0] != MISSING).any()
    ]
    return min(firsts) if firsts else 0


def stream_model(
    index: int,
    stream: StreamAnalysis,
    summary_stream: dict[str, Any],
    context: RunContext,
) -> dict[str, Any]:
    """Everything drawn and said about one stream."""
    view = StreamView(stream, context.t0_ns)
    prefix = f"s{index}"
    complete = len(view.e2e_ns) > 0
    receiver = context.browser(view.probes[-1]) if view.probes else None
    model: dict[str, Any] = {
        "anchor": prefix,
        "id": summary_stream["id"],
        "unit_ms": stream.journeys.unit_ns / 1e6,
        "units": summary_stream["units"],
        "complete_units": summary_stream["complete_units"],
        "waterfall": waterfall(view, summary_stream) if complete else None,
        "tail": tail_chart(view),
        "distributions": distributions(view) if complete else [],
        "scatter": scatter(view, context.max_points),
        "e2e": e2e_series(view, context.max_points) if complete else None,
        "loss": loss_series(view),
        "concealment": concealment_series(receiver, stream.journeys.path.ssrc, context.t0_ns),
        "jitter_buffer": jitter_buffer_series(stream, context.t0_ns),
    }
    shown = {f"{prefix}-{suffix}" for suffix, key in CHARTS.items() if model.get(key)}
    model["findings"] = [
        f if f.anchor in shown else replace(f, anchor=prefix)  # its plot has no data: the section
        for f in stream_findings(view, summary_stream, model, context)
    ]
    return model


class RunContext:
    """What every stream of a run shares: time origin, run.json, browsers, summary."""

    def __init__(
        self,
        run_dir: Path,
        meta: dict[str, Any],
        summary: dict[str, Any],
        t0_ns: int,
        max_points: int,
    ) -> None:
        self.run_dir = run_dir
        self.meta = meta
        self.summary = summary
        self.t0_ns = t0_ns
        self.max_points = max_points
        self._browsers: dict[str, BrowserLog] | None = None

    def browser(self, probe: str) -> BrowserLog | None:
        """The browser log of the process a probe belongs to, if it is a browser."""
        if self._browsers is None:
            try:
                self._browsers = {log.process: log for log in read_browser_logs(self.run_dir)}
            except (OSError, ValueError):
                self._browsers = {}
        return self._browsers.get(probe.split("/", 1)[0])

    def configured_latency(self) -> dict[str, float]:
        """Per process, the pipeline latency it configured (summary.json traces)."""
        return {
            t["process"]: float(t["configured_latency_ms"])
            for t in self.summary.get("traces", [])
            if t.get("configured_latency_ms") is not None
        }

    def process(self, name: str) -> dict[str, Any]:
        """A process's entry in run.json (empty when the run has none)."""
        for entry in self.meta.get("processes", []):
            if entry.get("name") == name:
                return entry
        return {}

    def argv(self, process: str) -> list[str]:
        """What a process ran (run.json), for the properties its pipeline set."""
        return [str(a) for a in self.process(process).get("argv", [])]

    def jitterbuffer_ms(self, process: str) -> tuple[str, float] | None:
        """The jitter-buffer latency a process configured, and where it was set."""
        latency = element_property(self.argv(process), "rtpjitterbuffer", "latency")
        if latency is not None:
            return "rtpjitterbuffer latency", latency
        webrtc = self.process(process).get("webrtc") or {}
        if isinstance(webrtc.get("jitterbuffer_ms"), int | float):
            return "webrtcbin latency", float(webrtc["jitterbuffer_ms"])
        return None

    def device_capture_ms(self, process: str) -> tuple[str, float] | None:
        """The capture latency the audio device on a process's host reported, with its name."""
        host = self.process(process).get("host")
        for device in self.meta.get("devices", []):
            reported = device.get("reported_latency") or {}
            latency = reported.get("capture_ms")  # pulse's null-sink monitor reports 0
            if device.get("host") == host and isinstance(latency, int | float) and latency > 0:
                return f"{device['server']} device {device['name']}", float(latency)
        return None


def stream_findings(
    view: StreamView, summary_stream: dict[str, Any], model: dict[str, Any], ctx: RunContext
) -> list[fnd.Finding]:
    """The findings of one stream, in the order a reader asks: where, tail, config, anomalies."""
    prefix = model["anchor"]
    out: list[fnd.Finding] = []
    kinds = view.journeys.segment_kinds
    if len(view.e2e_ns):
        anchors = (f"{prefix}-waterfall", f"{prefix}-tail")
        out += fnd.median_and_tail(view.segments_ns, view.probes[1:], kinds, anchors)
    out += configured_findings(view, summary_stream, ctx, f"{prefix}-waterfall")
    out += fnd.cadence_irregularities(
        view.journeys.times, view.probes, MISSING, f"{prefix}-scatter"
    )
    if len(view.e2e_ns):
        series = np.full(len(view.complete), np.nan)
        series[view.complete] = view.e2e_ns / 1e6
        out += fnd.periodicity(series, view.unit_s, f"{prefix}-e2e")
    t_start = float(view.t_s.min()) if len(view.t_s) else 0.0
    out += fnd.bursts(
        "loss", ~view.complete, view.unit_s, "units", f"{prefix}-loss", t0_s=t_start,
        meaning="did not complete (lost, or late at a later probe)",
    )  # fmt: skip
    conceal = model.get("concealment")
    if conceal:
        concealing = np.asarray(conceal["y"]) > 0
        t_first = conceal["x"][0] - conceal["step_s"] if conceal["x"] else 0.0
        out += fnd.bursts(
            "concealment", concealing, conceal["step_s"], "intervals", f"{prefix}-conceal",
            t0_s=t_first, meaning="concealed samples",
        )  # fmt: skip
    return out


def _process(probe: str) -> str:
    return probe.split("/", 1)[0] if "/" in probe else ""


def process_spans(probes: list[str]) -> dict[str, tuple[int, int]]:
    """Per process on the path, the indices of its first and last probe."""
    spans: dict[str, tuple[int, int]] = {}
    for i, probe in enumerate(probes):
        name = _process(probe)
        first = spans.get(name, (i, i))[0]
        spans[name] = (first, i)
    return spans


def element_property(argv: list[str], factory: str, prop: str) -> float | None:
    """A numeric property set on the first ``factory`` element of a gst-launch argv."""
    try:
        start = argv.index(factory)
    except ValueError:
        return None
    for token in argv[start + 1 :]:
        if token == "!":
            return None
        key, _, value = token.partition("=")
        if key == prop:
            try:
                return float(value)
            except ValueError:
                return None
    return None


def configured_findings(
    view: StreamView, stream: dict[str, Any], ctx: RunContext, anchor: str
) -> list[fnd.Finding]:
    """Configured against achieved: pipeline latency per process, jitter buffer, SRT, browser."""
    if not len(view.e2e_ns):
        return []
    done = view.journeys.times[view.complete]
    out = []
    spans = process_spans(view.probes)
    kinds = view.journeys.segment_kinds
    for process, configured in ctx.configured_latency().items():
        if process not in spans or configured <= 0:  # 0: nothing in it waits
            continue
        a, b = spans[process]
        # The latency is what the process's clocked sinks wait out: compare where the path
        # ends (playout) or leaves through a network sink, not at a hand-off inside a bin.
        if b <= a or not (b == len(view.probes) - 1 or kinds[b - 1] == SINK_WAIT):
            continue
        span = f"{short_probe(view.probes[a])} → {short_probe(view.probes[b])}"
        out.append(
            fnd.configured_vs_achieved(
                f"{process} pipeline latency", configured, done[:, b] - done[:, a], span, anchor
            )
        )
    out += _jitterbuffer_findings(view, ctx, anchor)
    out += _device_findings(view, ctx, anchor)
    out += _srt_findings(stream, ctx, anchor)
    intervals = stream.get("intervals", {})
    if "jitter_buffer_target" in intervals and "jitter_buffer" in intervals:
        target, delay = intervals["jitter_buffer_target"], intervals["jitter_buffer"]
        out.append(
            fnd.Finding(
                "configured",
                f"Browser jitter buffer: its own target p50 {delay_text(target)}, achieved "
                f"delay p50 {delay_text(delay)} over {int(delay['count'])} stats intervals.",
                f"{view_anchor(anchor)}-jb",
            )
        )
    return out


def delay_text(figures: dict[str, Any]) -> str:
    """``12.3 ms (p99 45.6 ms)`` from interval figures."""
    return f"{figures['p50_ms']:.1f} ms (p99 {figures['p99_ms']:.1f} ms)"


def view_anchor(anchor: str) -> str:
    """The stream prefix of a chart anchor (``s0-waterfall`` -> ``s0``)."""
    return anchor.split("-", 1)[0]


def _jitterbuffer_findings(view: StreamView, ctx: RunContext, anchor: str) -> list[fnd.Finding]:
    """A jitter buffer's configured latency (``rtpjitterbuffer latency=N``, webrtcbin's
    ``latency``) against the segment ending at that jitter buffer."""
    out = []
    for i, kind in enumerate(view.journeys.segment_kinds):
        if kind != JITTERBUFFER:
            continue
        probe = view.probes[i + 1]
        configured = ctx.jitterbuffer_ms(_process(probe))
        if configured is None:
            continue
        span = f"{short_probe(view.probes[i])} → {short_probe(probe)}"
        out.append(fnd.configured_vs_achieved(*configured, view.segments_ns[:, i], span, anchor))
    return out


def _device_findings(view: StreamView, ctx: RunContext, anchor: str) -> list[fnd.Finding]:
    """An audio device's reported capture latency against the measured capture segment."""
    if not view.probes or view.journeys.segment_kinds[:1] != [CAPTURE]:
        return []
    configured = ctx.device_capture_ms(_process(view.probes[0]))
    if configured is None:
        return []
    what, latency = configured
    span = f"{short_probe(view.probes[0])} → {short_probe(view.probes[1])}"
    return [
        fnd.configured_vs_achieved(
            f"{what} capture latency (reported)", latency, view.segments_ns[:, 0], span, anchor
        )
    ]


def _srt_findings(stream: dict[str, Any], ctx: RunContext, anchor: str) -> list[fnd.Finding]:
    """SRT latency (TSBPD prediction: latency + RTT/2) against the transport phase."""
    entries = ctx.summary.get("srt") or []
    receiving = [e for e in entries if e.get("factory") == "srtsrc"] or entries
    predicted = next((e["tsbpd_prediction_ms"] for e in receiving if e.get("tsbpd_prediction_ms")),
                     None)  # fmt: skip
    transport = stream.get("phases", {}).get("transport")
    if predicted is None or not transport or transport.get("p50_ms") is None:
        return []
    latency = receiving[0].get("negotiated_latency_ms")
    over = transport["p50_ms"] - predicted
    text = (
        f"SRT latency: negotiated {latency:g} ms, TSBPD prediction (latency + RTT/2) "
        f"{predicted:.1f} ms; transport phase achieved p50 {transport['p50_ms']:.1f} ms, "
        f"p99 {transport['p99_ms']:.1f} ms ({'+' if over >= 0 else '-'}{abs(over):.1f} ms)."
    )
    return [fnd.Finding("configured", text, anchor, notable=abs(over) > 0.1 * predicted)]


def run_model(
    run_dir: Path,
    meta: dict[str, Any],
    summary: dict[str, Any],
    streams: Sequence[StreamAnalysis],
    max_points: int = MAX_POINTS,
) -> dict[str, Any]:
    """The whole report's data for one run (JSON-ready apart from ``findings`` objects)."""
    t0 = run_start_ns(meta, streams)
    ctx = RunContext(run_dir, meta, summary, t0, max_points)
    models = [
        stream_model(i, s, summary_stream, ctx)
        for i, (s, summary_stream) in enumerate(zip(streams, summary["streams"], strict=True))
    ]
    return {
        "kind": "run",
        "name": summary["run"].get("name") or run_dir.name,
        "run": summary["run"],
        "streams": models,
        "cpu": cpu_series(run_dir, t0),
        "resources": summary.get("resources"),
        "traces": summary.get("traces", []),
        "blackbox": blackbox_model(run_dir, summary, t0),
    }


BLACKBOX_ANCHOR = "blackbox"
BLACKBOX_COLUMNS = ("black_box_ms", "probed_ms", "unexplained_ms")


def blackbox_codes(path: Path) -> dict[str, np.ndarray] | None:
    """The codes counted in the measured window from ``blackbox.parquet`` (None if unreadable)."""
    try:
        table = pq.read_table(path, columns=["in_window", "inject_ns", *BLACKBOX_COLUMNS])
    except (OSError, ValueError, KeyError):  # pyarrow's errors are OSError / ValueError
        return None
    keep = table.column("in_window").to_numpy(zero_copy_only=False).astype(bool)
    columns = {
        name: table.column(name).to_numpy(zero_copy_only=False).astype(np.float64)[keep]
        for name in ("inject_ns", *BLACKBOX_COLUMNS)
    }
    order = np.argsort(columns["inject_ns"], kind="stable")
    return {name: values[order] for name, values in columns.items()}


def blackbox_series(codes: dict[str, np.ndarray], t0_ns: int) -> dict[str, Any] | None:
    """Black box, probed and unexplained ms of each code over its injection time."""
    inject = codes["inject_ns"]
    if not np.isfinite(codes["black_box_ms"]).any():
        return None
    origin = t0_ns if t0_ns > 0 else float(np.nanmin(inject))
    since = "the run started" if t0_ns > 0 else "the first code"
    return {
        "x": _round((inject - origin) / 1e9, 3),
        "x_label": f"s since {since} (code injected)",
        **{name.removesuffix("_ms"): _round(codes[name]) for name in BLACKBOX_COLUMNS},
    }


def blackbox_distribution(codes: dict[str, np.ndarray]) -> dict[str, Any] | None:
    """The unexplained time's histogram and CDF over the codes matched to a unit."""
    unexplained = codes["unexplained_ms"]
    values_ns = unexplained[np.isfinite(unexplained)] * 1e6
    if not len(values_ns):
        return None
    return {**distribution(values_ns, "unexplained", "unexplained"), "noun": "codes"}


def blackbox_model(run_dir: Path, summary: dict[str, Any], t0_ns: int) -> dict[str, Any] | None:
    """The black box against the probes (summary.json ``blackbox``), None without a signal.

    A file problem stays ``{"error": line}``; a ``blackbox.parquet`` that cannot be read
    leaves the table and findings without the per-code charts.
    """
    box = summary.get("blackbox")
    if not box:
        return None
    if box.get("error"):
        error = str(box["error"])
        text = f"Black box: no figures, its files could not be used: {error}"
        found = [fnd.Finding("blackbox", text, BLACKBOX_ANCHOR, notable=True)]
        return {"anchor": BLACKBOX_ANCHOR, "error": error, "findings": found}
    codes = blackbox_codes(run_dir / BLACKBOX_FILE)
    series = blackbox_series(codes, t0_ns) if codes is not None else None
    dist = blackbox_distribution(codes) if codes is not None else None
    series_anchor = f"{BLACKBOX_ANCHOR}-series" if series else BLACKBOX_ANCHOR
    estimated = estimated_segments(summary, box.get("stream"))
    unexplained = fnd.black_box_unexplained(
        box["black_box"], box["probed"], box["unexplained"], estimated,
        f"{BLACKBOX_ANCHOR}-dist" if dist else series_anchor,
    )  # fmt: skip
    stream_ids = [s.get("id") for s in summary.get("streams", [])]
    carrier = box.get("stream")
    return {
        "anchor": BLACKBOX_ANCHOR,
        "stream": carrier,
        "stream_index": stream_ids.index(carrier) if carrier in stream_ids else None,
        "codes": box["codes"],
        "estimated": estimated,
        "parquet": codes is not None,
        "series": series,
        "distribution": dist,
        "findings": unexplained + fnd.black_box_missing(box["codes"], series_anchor),
    }


def to_json(model: dict[str, Any]) -> str:
    """The model as JSON safe inside a ``<script>`` element (no ``<``, ``>`` or ``&``)."""

    def default(value: Any) -> Any:
        if isinstance(value, fnd.Finding):
            return {"topic": value.topic, "text": value.text, "anchor": value.anchor}
        if isinstance(value, np.generic):
            return value.item()
        raise TypeError(f"cannot encode {type(value).__name__}")

    text = json.dumps(model, default=default, allow_nan=False, separators=(",", ":"))
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(char, escape)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
