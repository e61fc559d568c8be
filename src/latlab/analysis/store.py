"""A run's analysis kept beside its inputs, so that later reports read it instead of
stitching the run again.

``analysis/`` in a run directory holds ``manifest.json`` (what was analysed: the analysis
code's version, the unit, every input file's size and modification time, each stream's
description) and one Arrow IPC file per stream with its journeys (``stream-N.arrow``:
unit positions, the time and thread of each unit at each probe, per-unit extras) and one
with its browser timeline (``timeline-N.arrow``). Statistics are recomputed from the
journeys (a fraction of a second even for hours of media); only ingest and stitching,
the costly part, are skipped. The store is current while the inputs and the analysis
code are the same and the unit asked for is the one stored; anything else (a missing,
stale or damaged store) is simply analysed again. Nothing here is executable: the files
are JSON and Arrow, so a run directory from elsewhere is safe to read.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from latlab.analysis.segments import StreamAnalysis, analyze_journeys
from latlab.rundir import (
    ANALYSIS_DIR,
    ANALYSIS_MANIFEST,
    ARROW_SUFFIX,
    SUMMARY_FILE,
    analysis_inputs,
    analysis_stream_file,
)
from latlab.stitch.journeys import Journeys
from latlab.stitch.paths import StreamPath
from latlab.stitch.position import RtpClock

SCHEMA = "latlab.analysis/1"
# The code whose output the store holds: a change to any of it makes a store stale.
CODE_PACKAGES = ("ingest", "stitch", "analysis")
CODE_MODULES = ("pipeline.py", "rundir.py")


@cache
def code_version() -> str:
    """A digest of the source of ingest, stitching and analysis (and what assembles a
    summary): the analysis a store holds is the one this code would compute."""
    root = Path(__file__).resolve().parents[1]
    files = sorted(
        [p for package in CODE_PACKAGES for p in (root / package).rglob("*.py")]
        + [root / module for module in CODE_MODULES]
    )
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def summary_digest(run_dir: Path) -> str | None:
    """The SHA-256 of the run's summary.json as it is on disk (None: none). The store
    keeps the one it was written with: a summary.json edited, damaged or left by another
    version makes the store stale (analysed again), never a summary read as it is."""
    try:
        return hashlib.sha256((run_dir / SUMMARY_FILE).read_bytes()).hexdigest()
    except OSError:
        return None


def fingerprint(run_dir: Path) -> dict[str, list[int]]:
    """Every input file of the run (relative path -> [size, mtime ns])."""
    out = {}
    for path in analysis_inputs(run_dir):
        stat = path.stat()
        out[str(path.relative_to(run_dir))] = [stat.st_size, stat.st_mtime_ns]
    return out


@dataclass
class Stored:
    """What a current store gives back: the streams, rebuilt from their journeys."""

    streams: list[StreamAnalysis]
    processes: list[dict[str, Any]]
    threads: list[tuple[int, int, str]]


def write(
    run_dir: Path,
    unit_ms: float,
    streams: list[StreamAnalysis],
    processes: list[dict[str, Any]],
    threads: list[tuple[int, int, str]],
    inputs: dict[str, list[int]],
) -> None:
    """Keep ``streams`` in ``run_dir/analysis`` (replacing what was there); ``inputs`` is the
    fingerprint taken before the analysis read them."""
    store = run_dir / ANALYSIS_DIR
    store.mkdir(exist_ok=True)
    for old in store.glob(f"*{ARROW_SUFFIX}"):
        old.unlink()
    for i, stream in enumerate(streams):
        _write_arrow(store / analysis_stream_file(i), _journey_columns(stream.journeys))
        _write_arrow(store / analysis_stream_file(i, "timeline"), stream.timeline)
    manifest = {
        "schema": SCHEMA,
        "code_version": code_version(),
        "unit_ms": unit_ms,
        "inputs": inputs,
        "streams": [_describe(s.journeys) for s in streams],
        "processes": processes,
        "threads": [list(t) for t in threads],
        "summary_sha256": summary_digest(run_dir),  # written just before: kept together
    }
    partial = store / (ANALYSIS_MANIFEST + ".tmp")
    partial.write_text(json.dumps(manifest), encoding="utf-8")
    partial.replace(store / ANALYSIS_MANIFEST)


def current_manifest(
    run_dir: Path, unit_ms: float, summary: dict[str, Any]
) -> dict[str, Any] | None:
    """The store's manifest if the store is current for ``unit_ms`` and ``summary``
    (summary.json) is the one it was stored with, else None."""
    try:
        manifest = json.loads(
            (run_dir / ANALYSIS_DIR / ANALYSIS_MANIFEST).read_text(encoding="utf-8")
        )
    except (OSError, ValueError):
        return None
    try:
        current = (
            isinstance(manifest, dict)
            and manifest.get("schema") == SCHEMA
            and manifest.get("code_version") == code_version()
            and manifest.get("unit_ms") == unit_ms
            and manifest.get("inputs") == fingerprint(run_dir)
            and manifest.get("summary_sha256") == summary_digest(run_dir)
            and [s.get("stream_id") for s in manifest.get("streams", [])]
            == [s.get("id") for s in summary.get("streams", [])]
        )
    except (AttributeError, TypeError):  # a damaged store: analysed again
        return None
    return manifest if current else None


def read(run_dir: Path, unit_ms: float, summary: dict[str, Any]) -> Stored | None:
    """The stored analysis of ``run_dir`` if it is current for ``unit_ms`` (and matches
    ``summary``, summary.json), else None."""
    manifest = current_manifest(run_dir, unit_ms, summary)
    if manifest is None:
        return None
    store = run_dir / ANALYSIS_DIR
    try:
        streams = [
            _stream(store, i, description, figures)
            for i, (description, figures) in enumerate(
                zip(manifest["streams"], summary["streams"], strict=True)
            )
        ]
        threads = [(int(p), int(t), str(n)) for p, t, n in manifest.get("threads", [])]
        processes = manifest.get("processes", [])
        if not isinstance(processes, list) or not all(isinstance(p, dict) for p in processes):
            return None
    # A damaged store (summary.json or the manifest edited, cut, from elsewhere): analysed
    # again, like a stale one.
    except (OSError, KeyError, IndexError, ValueError, TypeError, AttributeError,
            OverflowError, pa.ArrowException):  # fmt: skip
        return None
    return Stored(streams, processes, threads)


def _stream(store: Path, i: int, description: dict, figures: dict) -> StreamAnalysis:
    columns = _read_arrow(store / analysis_stream_file(i))
    journeys = _journeys(description, columns)
    stream = analyze_journeys(journeys, figures.get("cadence", {}))
    stream.intervals = figures.get("intervals", {})
    stream.adaptation = figures.get("adaptation", [])
    stream.functions = figures.get("browser_functions", {})
    stream.timeline = _read_arrow(store / analysis_stream_file(i, "timeline"))
    return stream


def _journey_columns(j: Journeys) -> dict[str, np.ndarray]:
    columns = {"unit_start": j.unit_start}
    for k in range(j.times.shape[1]):
        columns[f"t{k}"] = j.times[:, k]
        columns[f"h{k}"] = j.threads[:, k]
    if j.unit_bytes is not None:
        columns["unit_bytes"] = j.unit_bytes
    if j.unit_keyframe is not None:
        columns["unit_keyframe"] = j.unit_keyframe
    columns.update({f"extra:{name}": values for name, values in j.extra.items()})
    return columns


def _describe(j: Journeys) -> dict[str, Any]:
    return {
        "stream_id": j.stream_id,
        "media": j.media,
        "unit_ns": j.unit_ns,
        "path": {"probes": list(j.path.probes), "ssrc": j.path.ssrc, "pid": j.path.pid},
        "probe_names": j.probe_names,
        "segment_kinds": j.segment_kinds,
        "clock_domains": j.clock_domains,
        "counts": j.counts,
        "probe_klass": j.probe_klass,
        "unit_is_frame": j.unit_is_frame,
        "rtp_clock": None if j.rtp_clock is None else [j.rtp_clock.base, j.rtp_clock.rate],
    }


def _journeys(d: dict[str, Any], columns: dict[str, np.ndarray]) -> Journeys:
    probes = len(d["probe_names"])
    path = d["path"]
    clock = d["rtp_clock"]
    return Journeys(
        stream_id=d["stream_id"],
        media=d["media"],
        unit_ns=int(d["unit_ns"]),
        path=StreamPath(tuple(path["probes"]), path["ssrc"], path["pid"]),
        probe_names=list(d["probe_names"]),
        segment_kinds=list(d["segment_kinds"]),
        unit_start=columns["unit_start"],
        times=_matrix(columns, "t", probes, np.int64),
        threads=_matrix(columns, "h", probes, np.int32),
        clock_domains=list(d["clock_domains"]),
        counts={k: int(v) for k, v in d["counts"].items()},
        probe_klass=list(d["probe_klass"]),
        unit_bytes=columns.get("unit_bytes"),
        unit_keyframe=columns.get("unit_keyframe"),
        extra={k.split(":", 1)[1]: v for k, v in columns.items() if k.startswith("extra:")},
        unit_is_frame=bool(d["unit_is_frame"]),
        rtp_clock=None if clock is None else RtpClock(int(clock[0]), int(clock[1])),
    )


def _matrix(columns: dict[str, np.ndarray], prefix: str, probes: int, dtype: type) -> np.ndarray:
    units = len(columns["unit_start"])
    out = np.empty((units, probes), dtype)
    for k in range(probes):
        out[:, k] = columns[f"{prefix}{k}"]
    return out


def _write_arrow(path: Path, columns: dict[str, np.ndarray]) -> None:
    table = pa.table({name: np.ascontiguousarray(values) for name, values in columns.items()})
    with pa.OSFile(str(path), "wb") as sink, ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def _read_arrow(path: Path) -> dict[str, np.ndarray]:
    with pa.OSFile(str(path), "rb") as source:
        table = ipc.open_file(source).read_all()
    return {name: table[name].to_numpy() for name in table.column_names}
