"""From a run directory to its summary: ingest -> stitch -> analysis -> summary.json."""

from __future__ import annotations

import tomllib
from contextlib import suppress
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from latlab.analysis.blackbox import CODES_FILE as BLACKBOX_CODES_FILE
from latlab.analysis.blackbox import BlackBoxError, black_box_summary
from latlab.analysis.element_stats import srt_summary, stats_table
from latlab.analysis.segments import StreamAnalysis, analyze, measured_window
from latlab.ingest.browser_records import read_browser_logs
from latlab.ingest.events import EventTable, load_run
from latlab.ingest.link_events import read_link_logs
from latlab.ingest.link_log import LinkLog, traffic_summary
from latlab.lab.resources import RESOURCES_FILE, summarize_resources
from latlab.report.summary import build_summary, write_summary
from latlab.rundir import read_run

SUMMARY_FILE = "summary.json"
EVENTS_FILE = "events.parquet"
ELEMENT_STATS_FILE = "element-stats.parquet"


def run_metadata(run_dir: Path) -> dict[str, Any]:
    """run.json of a run directory (plus the scenario's unit), or a stand-in for bare traces."""
    meta = read_run(run_dir) or {"name": run_dir.name}
    scenario_path = run_dir / "scenario.toml"
    if "unit_ms" not in meta and scenario_path.is_file():
        with suppress(tomllib.TOMLDecodeError, OSError, ValueError, TypeError):
            analysis = tomllib.loads(scenario_path.read_text()).get("analysis", {})
            meta["unit_ms"] = float(analysis.get("unit_ms", 10.0))
    return meta


def link_summary(log: LinkLog) -> dict[str, Any]:
    """What crossed one emulated link: per direction, protocol and port (summary.json)."""
    return {
        "log": log.path.name,
        "directions": list(log.directions.values()),
        "complete": log.closed,
        "problems": log.problems,
        "traffic": traffic_summary(log),
    }


def analyze_run(
    run_dir: Path, unit_ms: float | None = None, *, write: bool = True
) -> tuple[dict[str, Any], EventTable, list[StreamAnalysis]]:
    """Analyse the traces of ``run_dir``; writes summary.json and events.parquet there."""
    meta = run_metadata(run_dir)
    unit = unit_ms or float(meta.get("unit_ms", 10.0))
    link_logs = read_link_logs(run_dir)
    browsers = read_browser_logs(run_dir)
    table = load_run(run_dir, link_logs, allow_no_traces=bool(browsers))
    streams = analyze(table, unit, meta, browsers, link_logs)
    summary = build_summary(meta, table, streams)
    resources = summarize_resources(
        run_dir / RESOURCES_FILE,
        meta.get("measure_start_monotonic_ns"),
        meta.get("measure_end_monotonic_ns"),
    )
    if resources is not None:
        summary["resources"] = resources
    if link_logs:
        summary["links"] = [link_summary(log) for log in link_logs]
    blackbox, blackbox_codes = _black_box(run_dir, table, streams, meta)
    if blackbox is not None:
        summary["blackbox"] = blackbox
    element_stats = stats_table(table)
    srt = srt_summary(element_stats)
    if srt:
        summary["srt"] = srt
    if write:
        write_summary(summary, run_dir / SUMMARY_FILE)
        table.write_parquet(run_dir / EVENTS_FILE)
        if element_stats.num_rows:
            pq.write_table(element_stats, run_dir / ELEMENT_STATS_FILE)
        if blackbox_codes is not None:
            pq.write_table(blackbox_codes, run_dir / BLACKBOX_CODES_FILE)
    return summary, table, streams


def _black_box(
    run_dir: Path, table: EventTable, streams: list[StreamAnalysis], meta: dict[str, Any]
) -> tuple[dict[str, Any] | None, pa.Table | None]:
    """summary.json's ``blackbox`` (a run with ``[signal]``; a file problem as ``error``)
    and the per-code table."""
    journeys = [s.journeys for s in streams]
    try:
        found = black_box_summary(run_dir, journeys, measured_window(meta), table, meta)
    except BlackBoxError as exc:
        return {"error": str(exc)}, None
    return found if found is not None else (None, None)
