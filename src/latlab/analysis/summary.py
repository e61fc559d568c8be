"""summary.json, schema ``latlab.summary/1`` (fields are only ever added, never renamed)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from latlab.analysis.frames import frame_effects, frames_held
from latlab.analysis.segments import SegmentStats, StreamAnalysis
from latlab.ingest.events import EventTable
from latlab.rundir import SUMMARY_SCHEMA
from latlab.stitch.devices import segment_device_flags

SCHEMA = SUMMARY_SCHEMA
STAT_KEYS = ("count", "min_ms", "mean_ms", "p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms")


def build_summary(
    run: dict[str, Any], table: EventTable, streams: list[StreamAnalysis]
) -> dict[str, Any]:
    """The summary of a run: run metadata, per-stream segments and end to end, trace health."""
    return {
        "schema": SCHEMA,
        "run": {
            "name": run.get("name", ""),
            "scenario": run.get("scenario", ""),
            "started_at": run.get("started_at", ""),
            "duration_s": float(run.get("duration_s", 0.0)),
            "params": run.get("params", {}),
        },
        "streams": [_with_device_flags(_stream(s), s, table) for s in streams],
        "traces": [
            {
                "process": p.name,
                "pid": p.pid,
                "file": p.path.name,
                "clock_domain": p.clock_domain,
                "complete": p.complete,
                "dropped_events": p.dropped,
                "problems": p.problems,
                "configured_latency_ms": None
                if p.configured_latency_ns is None
                else p.configured_latency_ns / 1e6,
            }
            for p in table.processes
        ],
    }


def _with_device_flags(out: dict[str, Any], s: StreamAnalysis, table: EventTable) -> dict:
    """Mark each segment ``"device": true|false`` (device playout also ``"estimated"``)."""
    flags_list = segment_device_flags(s.journeys, table)
    for segment, flags in zip(out["segments"], flags_list, strict=True):
        segment.update(flags)
    return out


def _stats(seg: SegmentStats) -> dict[str, Any]:
    stats: dict[str, Any] = {k: _finite(seg.stats[k]) for k in STAT_KEYS}
    stats["negative"] = int((seg.values_ns < 0).sum())  # units seen downstream first
    return stats


def _finite(value: float | int) -> float | int | None:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _stream(s: StreamAnalysis) -> dict[str, Any]:
    out = _stream_core(s)
    if s.journeys.media == "video":
        for segment, held in zip(out["segments"], frames_held(s), strict=True):
            segment["frames_held_p50"] = held
    effects = frame_effects(s)
    if effects:
        out["frames"] = effects
    if s.intervals:
        out["intervals"] = s.intervals
    if s.functions:
        out["browser_functions"] = s.functions
    if s.timeline and len(s.timeline["t_ns"]):
        out["timeline"] = {
            name: [None if not math.isfinite(v) else round(float(v), 3) for v in values]
            for name, values in s.timeline.items()
            if name != "t_ns"
        } | {"t_ns": [int(v) for v in s.timeline["t_ns"]]}
    if s.adaptation:
        out["adaptation"] = s.adaptation
    return out


def _stream_core(s: StreamAnalysis) -> dict[str, Any]:
    j = s.journeys
    units_total = len(j.unit_start)
    return {
        "id": j.stream_id,
        "media": j.media,
        "unit": f"{j.unit_ns / 1e6:g}ms",
        "unit_is_frame": j.unit_is_frame,
        "units": units_total,
        "complete_units": int(j.complete.sum()),
        "lost": j.counts.get("lost", 0),
        "late": j.counts.get("late", 0),
        "duplicated": j.counts.get("duplicated", 0),
        "reordered": j.counts.get("reordered", 0),
        "ssrc": j.path.ssrc,
        "probes": j.probe_names,
        "clock_domains": sorted(set(j.clock_domains)),
        "segments": [
            {
                "from": seg.from_probe,
                "to": seg.to_probe,
                "kind": seg.kind,
                **_stats(seg),
                "histogram": seg.histogram,
            }
            for seg in s.segments
        ],
        "end_to_end": {
            "from": s.end_to_end.from_probe,
            "to": s.end_to_end.to_probe,
            **_stats(s.end_to_end),
            "histogram": s.end_to_end.histogram,
        },
        "phases": {
            name: {"from": seg.from_probe, "to": seg.to_probe, **_stats(seg)}
            for name, seg in s.phases.items()
        },
        "kinds": {
            kind: {"from": seg.from_probe, "to": seg.to_probe, **_stats(seg)}
            for kind, seg in s.kinds.items()
        },
        "cadence": {name: {k: _finite(v) for k, v in c.items()} for name, c in s.cadence.items()},
        "thread_handoffs": s.handoffs,
    }


def summary_json(summary: dict[str, Any]) -> str:
    """summary.json's text: strict JSON, so a figure that does not exist (NaN: the
    statistics of no samples) is null; :func:`read_summary` reads it back as NaN."""
    return json.dumps(_finite_or_null(summary), indent=1, allow_nan=False) + "\n"


def write_summary(summary: dict[str, Any], path: Path) -> None:
    """Write summary.json."""
    path.write_text(summary_json(summary))


def read_summary(text: str) -> Any:
    """summary.json's text as written: the null figures of a description of no samples
    (``count`` 0) are NaN again, as the analysis gave them (ValueError if not JSON)."""
    return json.loads(text, object_hook=_nan_where_no_samples)


def _finite_or_null(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_or_null(v) for v in value]
    return value


def _nan_where_no_samples(found: dict[str, Any]) -> dict[str, Any]:
    if found.get("count") != 0 or "p50_ms" not in found:
        return found
    return {k: math.nan if v is None and k.endswith("_ms") else v for k, v in found.items()}
