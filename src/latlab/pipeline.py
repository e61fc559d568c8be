"""The composition point: a run directory becomes its :class:`RunAnalysis` here, and only
here (ingest -> stitch -> analysis -> summary.json, kept in the run directory so that
later reports read it instead of stitching again: :mod:`latlab.analysis.store`)."""

from __future__ import annotations

import json
import tomllib
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from latlab import rundir
from latlab.analysis import store
from latlab.analysis.clock_apply import Aligner, annotate_summary
from latlab.analysis.cost import process_costs
from latlab.analysis.element_stats import srt_summary, stats_table
from latlab.analysis.loads import load_figures
from latlab.analysis.resources import summarize_resources
from latlab.analysis.segments import StreamAnalysis, analyze, measured_window
from latlab.analysis.sfu_dwell import sfu_dwell
from latlab.analysis.summary import build_summary, read_summary, write_summary
from latlab.analysis.summary import summary_json as summary_json  # for the CLI's --json
from latlab.ingest.browser_records import BrowserLog, read_browser_logs
from latlab.ingest.events import EventTable, load_run
from latlab.ingest.link_events import read_link_logs
from latlab.ingest.link_log import (
    LinkLog,
    late_release_problems,
    release_summary,
    traffic_summary,
)
from latlab.rundir import (
    BLACKBOX_FILE,
    ELEMENT_STATS_FILE,
    ENV_FILE,
    EVENTS_FILE,
    FORWARDING_FILE,
    RESOURCES_FILE,
    SCENARIO_FILE,
    SUMMARY_FILE,
    RunDirError,
    read_run,
)
from latlab.signal.errors import SignalError


def run_metadata(run_dir: Path) -> dict[str, Any]:
    """run.json of a run directory (plus the scenario's unit), or a stand-in for bare traces."""
    meta = read_run(run_dir) or {"name": run_dir.name}
    scenario_path = run_dir / SCENARIO_FILE
    if "unit_ms" not in meta and scenario_path.is_file():
        with suppress(tomllib.TOMLDecodeError, OSError, ValueError, TypeError):
            analysis = tomllib.loads(scenario_path.read_text()).get("analysis", {})
            meta["unit_ms"] = float(analysis.get("unit_ms", 10.0))
    return meta


def link_summary(log: LinkLog) -> dict[str, Any]:
    """What crossed one emulated link, per direction, protocol and port, and how exactly
    its emulator kept the schedule (summary.json)."""
    release = release_summary(log)
    return {
        "log": log.path.name,
        "directions": list(log.directions.values()),
        "complete": log.closed,
        "problems": log.problems + late_release_problems(release),
        "traffic": traffic_summary(log),
        "release": release,
    }


@dataclass
class RunAnalysis:
    """A run directory turned into its analysis: run.json, summary.json's contents and
    every stream's journeys and statistics. The events (``table``) are read again only
    when asked for (the Perfetto export); ``processes`` and ``threads`` name the traced
    processes and their threads without them."""

    run_dir: Path
    meta: dict[str, Any]
    summary: dict[str, Any]
    streams: list[StreamAnalysis]
    processes: list[dict[str, Any]]
    threads: list[tuple[int, int, str]]
    reused: bool = False  # read from the run's stored analysis, not analysed now
    _table: EventTable | None = field(default=None, repr=False)

    @property
    def table(self) -> EventTable:
        """The run's events (read from its traces if the analysis was stored)."""
        if self._table is None:
            self._table = load_run(self.run_dir, read_link_logs(self.run_dir), allow_no_traces=True)
        return self._table


def analysis_of(
    run_dir: Path, unit_ms: float | None = None, *, write: bool = True, reuse: bool = True
) -> RunAnalysis:
    """The analysis of ``run_dir``: the one stored in it when that is current (same inputs,
    same analysis code, same unit; ``reuse``), else analysed now and, with ``write``,
    stored (summary.json, events.parquet, analysis/ ...) for the next report."""
    run_dir = Path(run_dir)
    meta = run_metadata(run_dir)
    unit = unit_ms or float(meta.get("unit_ms", 10.0))
    if reuse:
        stored = _stored(run_dir, meta, unit)
        if stored is not None:
            return stored
    inputs = store.fingerprint(run_dir)
    analysis, outputs = _analyze(run_dir, meta, unit)
    if write:
        _write(analysis, outputs, unit, inputs)
    return analysis


def summary_of(run_dir: Path, unit_ms: float | None = None) -> dict[str, Any]:
    """summary.json of ``run_dir``: the stored one when the stored analysis is current
    (nothing else is read), else from an analysis made and stored now."""
    run_dir = Path(run_dir)
    unit = unit_ms or float(run_metadata(run_dir).get("unit_ms", 10.0))
    summary = _stored_summary(run_dir)
    if summary is not None and store.current_manifest(run_dir, unit, summary) is not None:
        return summary
    return analysis_of(run_dir, unit, reuse=False).summary


def analyze_run(
    run_dir: Path, unit_ms: float | None = None, *, write: bool = True
) -> tuple[dict[str, Any], EventTable, list[StreamAnalysis]]:
    """Analyse the traces of ``run_dir`` now (summary, events, streams); with ``write``,
    store the analysis in it. Reports use :func:`analysis_of`, which reuses a stored one."""
    analysis = analysis_of(run_dir, unit_ms, write=write, reuse=False)
    return analysis.summary, analysis.table, analysis.streams


def _stored(run_dir: Path, meta: dict[str, Any], unit_ms: float) -> RunAnalysis | None:
    """The run's stored analysis, if current."""
    summary = _stored_summary(run_dir)
    if summary is None:
        return None
    kept = store.read(run_dir, unit_ms, summary)
    if kept is None:
        return None
    return RunAnalysis(run_dir, meta, summary, kept.streams, kept.processes, kept.threads, True)


@dataclass
class _Outputs:
    """What a fresh analysis writes besides summary.json and its store."""

    element_stats: pa.Table
    blackbox_codes: pa.Table | None
    forwarding: pa.Table | None


def _stored_summary(run_dir: Path) -> dict[str, Any] | None:
    """summary.json as stored, or None (absent or unreadable: analyse again)."""
    try:
        summary = read_summary((run_dir / SUMMARY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


def _analyze(run_dir: Path, meta: dict[str, Any], unit: float) -> tuple[RunAnalysis, _Outputs]:
    """Ingest, stitch and analyse ``run_dir`` (nothing written)."""
    link_logs = read_link_logs(run_dir)
    browsers = read_browser_logs(run_dir)
    # a run may measure without traces: browsers, a captured host, a counted process
    untraced = bool(browsers or rundir.capture_hosts(run_dir) or meta.get("costs"))
    table = load_run(run_dir, link_logs, allow_no_traces=untraced)
    forwarding, forwarded = sfu_dwell(run_dir)
    aligner = Aligner(run_dir, meta, table)
    streams = analyze(table, unit, meta, browsers, link_logs, forwarded, aligner=aligner)
    summary = build_summary(meta, table, streams)
    annotate_summary(summary, streams, aligner)
    resources = summarize_resources(
        run_dir / RESOURCES_FILE,
        meta.get("measure_start_monotonic_ns"),
        meta.get("measure_end_monotonic_ns"),
    )
    if resources is not None:
        resources["system"]["cpus"] = _cpu_count(run_dir)
        summary["resources"] = resources
    if meta.get("loads"):
        summary["loads"] = load_figures(meta["loads"])
    if meta.get("sfus"):
        summary["sfus"] = {name: {key: sfu.get(key) for key in ("server", "version", "host")}
                           for name, sfu in meta["sfus"].items()}  # fmt: skip
    if link_logs:
        summary["links"] = [link_summary(log) for log in link_logs]
    blackbox, blackbox_codes = _black_box(run_dir, table, streams, meta)
    if blackbox is not None:
        summary["blackbox"] = blackbox
    if forwarding:
        summary["forwarding"] = forwarding
    quality = _quality(run_dir, meta, browsers, link_logs, forwarded)
    if quality is not None:
        summary["quality"] = quality
    if meta.get("costs"):
        summary["costs"] = process_costs(run_dir, meta, _egress_by_host(forwarded))
    element_stats = stats_table(table)
    srt = srt_summary(element_stats)
    if srt:
        summary["srt"] = srt
    processes = [
        {"name": p.name, "pid": p.pid, "kind": p.kind, "hostname": p.hostname}
        for p in table.processes
    ]
    threads = list(table.threads)
    analysis = RunAnalysis(run_dir, meta, summary, streams, processes, threads, _table=table)
    return analysis, _Outputs(element_stats, blackbox_codes, forwarded)


def _cpu_count(run_dir: Path) -> int | None:
    """How many CPUs the machine that ran it had (env.json), None if unknown."""
    try:
        count = json.loads((run_dir / ENV_FILE).read_text(encoding="utf-8")).get("cpu_count")
    except (OSError, ValueError, AttributeError):
        return None
    return count if isinstance(count, int) else None


FORWARDED_STATUSES = ("matched", "ambiguous", "repeat")


def _egress_by_host(forwarded: pa.Table | None) -> dict[str, Any]:
    """Per captured host, the times its forwarded RTP packets left (forwarding.parquet):
    those with a source (matched, or ambiguous between sources) and retransmissions of
    one; not the SFU's own packets (padding, probes, blank frames: unmatched or at a
    leg's edge), which a cost per forwarded packet must not divide by."""
    if forwarded is None:
        return {}
    hosts = forwarded.column("host").to_numpy(zero_copy_only=False)
    times = forwarded.column("egress_ns").to_numpy()
    status = forwarded.column("status").to_numpy(zero_copy_only=False)
    counted = np.isin(status, FORWARDED_STATUSES)
    return {host: times[(hosts == host) & counted] for host in set(hosts.tolist())}


def _write(
    analysis: RunAnalysis, outputs: _Outputs, unit: float, inputs: dict[str, list[int]]
) -> None:
    """Store a fresh analysis in its run directory: summary.json, the events, element
    statistics, the black box's codes, and analysis/ for the next report (a cache: where
    it cannot be written, the next report analyses again)."""
    run_dir, table = analysis.run_dir, analysis.table
    write_summary(analysis.summary, run_dir / SUMMARY_FILE)
    table.write_parquet(run_dir / EVENTS_FILE)
    if outputs.element_stats.num_rows:
        pq.write_table(outputs.element_stats, run_dir / ELEMENT_STATS_FILE)
    if outputs.blackbox_codes is not None:
        pq.write_table(outputs.blackbox_codes, run_dir / BLACKBOX_FILE)
    if outputs.forwarding is not None:
        pq.write_table(outputs.forwarding, run_dir / FORWARDING_FILE)
    with suppress(OSError):
        store.write(run_dir, unit, analysis.streams, analysis.processes, analysis.threads, inputs)


def _quality(
    run_dir: Path,
    meta: dict[str, Any],
    browsers: list[BrowserLog],
    link_logs: list[LinkLog],
    forwarded: pa.Table | None,
) -> dict[str, Any] | None:
    """summary.json's ``quality`` (a room with ``quality = true``; a file problem as
    ``error``)."""
    from latlab.analysis.quality import quality_summary  # scipy.signal: 0.4 s to import

    try:
        return quality_summary(run_dir, meta, browsers, link_logs, forwarded)
    except (SignalError, RunDirError) as exc:
        return {"error": str(exc)}


def _black_box(
    run_dir: Path, table: EventTable, streams: list[StreamAnalysis], meta: dict[str, Any]
) -> tuple[dict[str, Any] | None, pa.Table | None]:
    """summary.json's ``blackbox`` (a run with ``[signal]``; a file problem as ``error``)
    and the per-code table."""
    from latlab.analysis.blackbox import BlackBoxError, black_box_summary  # scipy

    journeys = [s.journeys for s in streams]
    try:
        found = black_box_summary(run_dir, journeys, measured_window(meta), table, meta)
    except BlackBoxError as exc:
        return {"error": str(exc)}, None
    return found if found is not None else (None, None)
