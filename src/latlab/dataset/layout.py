"""The dataset's layout: its tables and their columns, its partitions, its manifest.

This module owns every name in a dataset directory (docs/dataset.md documents them)::

    DATASET/
      latlab-dataset.json                  the manifest: schema, minor version, every
                                           committed file (its table, runs, rows, minor)
                                           and every run (its directory, partition)
      segments/scenario=S/date=D/part-B-N.parquet
      summaries/…, runs/…, labels/…        the same partitions, one file per ingest chunk

The manifest is the commit point: a file is part of the dataset once the manifest lists
it, so a crash while files are written leaves the dataset as it was (the files not listed
are removed by the next ingest). A column has the minor version that added it: files of
an older minor lack it, and readers give it as NULL (``missing_columns``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from latlab.errors import UserInputError

SCHEMA_NAME = "latlab.dataset"
MAJOR = 1
MINOR = 0
SCHEMA = f"{SCHEMA_NAME}/{MAJOR}"
MANIFEST_NAME = "latlab-dataset.json"
LOCK_NAME = ".latlab-dataset.lock"  # held by an ingest (flock)
PARQUET_SUFFIX = ".parquet"
TMP_SUFFIX = ".tmp"  # a file being written: .NAME.tmp (hidden from Spark, DuckDB globs)
MANIFEST_TMP = f".{MANIFEST_NAME}{TMP_SUFFIX}"  # the next manifest, before its rename
PARTITION_KEYS = ("scenario", "date")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class DatasetError(UserInputError, ValueError):
    """A dataset directory latlab cannot use, or a question it cannot answer (one line,
    naming the dataset or the option)."""


@dataclass(frozen=True)
class Column:
    """One column of a table: its Arrow and SQL types and the minor version that added it."""

    name: str
    type: pa.DataType
    sql: str
    doc: str
    since: int = 0


def _c(name: str, kind: str, doc: str, since: int = 0) -> Column:
    types = {
        "string": (pa.string(), "STRING"),
        "int64": (pa.int64(), "BIGINT"),
        "int32": (pa.int32(), "INT"),
        "double": (pa.float64(), "DOUBLE"),
        "bool": (pa.bool_(), "BOOLEAN"),
    }
    arrow, sql = types[kind]
    return Column(name, arrow, sql, doc, since)


RUN_ID = _c("run_id", "string", "the run's id (16 hex digits of its start, name and host)")
STREAM_COLUMNS = (
    RUN_ID,
    _c("stream_index", "int32", "the stream's number in the run (0-based)"),
    _c("stream", "string", "the stream's path without its SSRC (the same across runs)"),
)
STAT_NAMES = ("min_ms", "mean_ms", "p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms")
STREAM_COUNTS = ("units", "complete_units", "lost", "late", "duplicated", "reordered")

TABLES: dict[str, tuple[Column, ...]] = {
    "segments": (
        *STREAM_COLUMNS,
        _c("unit", "int64", "the unit's number in the stream's journeys (0-based)"),
        _c("unit_start_ns", "int64", "the unit's media position (ns of origin running time)"),
        _c("segment", "int32", "the segment's number on the path (0-based)"),
        _c("kind", "string", "the segment's kind (docs/architecture.md)"),
        _c("from_probe", "string", "the probe the segment starts at"),
        _c("to_probe", "string", "the probe the segment ends at"),
        _c("time_ns", "int64", "the unit's time in the segment; NULL if it missed a probe"),
        _c("at_ns", "int64", "CLOCK_MONOTONIC when the unit passed to_probe; NULL if not"),
        _c("complete", "bool", "the unit passed every probe (statistics use these)"),
        _c("lost", "bool", "the unit left a host and never reached the next"),
        _c("late", "bool", "the unit reached a host but not its later probes (not lost)"),
    ),
    "summaries": (
        *STREAM_COLUMNS,
        _c("stream_id", "string", "the stream's id in the run (with its SSRC)"),
        _c("media", "string", "audio or video"),
        _c("figure", "string", "end_to_end, segment, kind or phase"),
        _c("name", "string", "end to end, the segment's to_probe, the kind or the phase"),
        _c("segment", "int32", "a segment's number on the path; NULL for the others"),
        _c("kind", "string", "a segment's or kind's kind; NULL for the others"),
        _c("from_probe", "string", "where the span starts"),
        _c("to_probe", "string", "where the span ends"),
        _c("count", "int64", "complete units"),
        *(_c(n, "double", f"summary.json's {n}") for n in STAT_NAMES),
        _c("negative", "int64", "units with a negative time"),
        *(_c(n, "int64", f"the stream's {n} (summary.json)") for n in STREAM_COUNTS),
    ),
    "runs": (
        RUN_ID,
        _c("run_dir", "string", "the run directory (absolute, as ingested)"),
        _c("sweep_dir", "string", "the sweep directory it is a point of; NULL if none"),
        _c("point", "string", "the sweep point's name; NULL if none"),
        _c("name", "string", "the scenario's name (run.json)"),
        _c("run_kind", "string", "scenario or record (run.json kind)"),
        _c("scenario_file", "string", "the scenario file as given to latlab run"),
        _c("status", "string", "ok or interrupted (run.json)"),
        _c("started_at", "string", "ISO-8601 UTC start (run.json)"),
        _c("started_ns", "int64", "the same in ns since the Unix epoch"),
        _c("duration_s", "double", "measured duration (run.json)"),
        _c("unit_ms", "double", "the unit of media analysed"),
        _c("hostname", "string", "env.json hostname"),
        _c("latlab_version", "string", "env.json"),
        _c("gstreamer_version", "string", "env.json"),
        _c("chromium_version", "string", "the first browser's version (run.json); NULL"),
        _c("kernel", "string", "env.json"),
        _c("python_version", "string", "env.json"),
        _c("machine", "string", "env.json"),
        _c("cpu_count", "int32", "env.json"),
        _c("revision", "string", "the system under test's revision (--revision)"),
        _c("streams", "int32", "streams in the run"),
        _c("units", "int64", "units over all streams"),
        _c("ingested_at", "string", "ISO-8601 UTC time of the ingest"),
    ),
    "labels": (
        RUN_ID,
        _c("key", "string", "a label, sweep variable, scenario param or run fact"),
        _c("value", "string", "its value as text"),
        _c("origin", "string", "label, sweep, param or run (which one gave the value)"),
    ),
}
TABLE_NAMES = tuple(TABLES)


def arrow_schema(table: str) -> pa.Schema:
    """The Arrow schema of a table's files (without the partition columns)."""
    return pa.schema([pa.field(c.name, c.type) for c in TABLES[table]])


def partition_value(text: str) -> str:
    """A partition directory's value: letters, digits, ``.``, ``_``, ``-`` (others ``_``)."""
    return _UNSAFE.sub("_", text) or "_"


def partition_dir(table: str, scenario: str, date: str) -> str:
    """``TABLE/scenario=S/date=D`` (relative to the dataset)."""
    return f"{table}/scenario={partition_value(scenario)}/date={partition_value(date)}"


@dataclass
class Manifest:
    """The dataset's manifest: what is committed."""

    minor: int = MINOR
    files: dict[str, dict[str, Any]] = field(default_factory=dict)  # path -> facts
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)  # run id -> facts

    def table_files(self, table: str) -> list[str]:
        """The committed files of ``table`` (relative paths), sorted."""
        return sorted(p for p, f in self.files.items() if f["table"] == table)

    def oldest_minor(self, table: str) -> int:
        """The oldest minor version among ``table``'s files (``MINOR`` if none)."""
        minors = [f.get("minor", 0) for f in self.files.values() if f["table"] == table]
        return min(minors, default=MINOR)

    def newest_minor(self, table: str) -> int:
        """The newest minor version among ``table``'s files."""
        minors = [f.get("minor", 0) for f in self.files.values() if f["table"] == table]
        return max(minors, default=MINOR)

    def to_json(self) -> dict[str, Any]:
        """The manifest document."""
        return {"schema": SCHEMA, "minor": self.minor, "files": self.files, "runs": self.runs}


def missing_columns(table: str, newest_minor: int) -> list[Column]:
    """Columns of ``table`` that no file written at ``newest_minor`` or before has."""
    return [c for c in TABLES[table] if c.since > newest_minor]


def is_dataset(root: Path) -> bool:
    """Whether ``root`` holds a dataset manifest."""
    return (Path(root) / MANIFEST_NAME).is_file()


def read_manifest(root: Path) -> Manifest:
    """The manifest of the dataset at ``root`` (DatasetError naming it when unusable)."""
    path = Path(root) / MANIFEST_NAME
    if not Path(root).is_dir():
        raise DatasetError(f"{root}: no such dataset")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DatasetError(f"{root}: not a latlab dataset (no {MANIFEST_NAME})") from None
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else None
        raise DatasetError(f"{path}: unknown schema {found!r} (this latlab reads {SCHEMA})")
    try:
        return Manifest(int(data.get("minor", 0)), dict(data["files"]), dict(data["runs"]))
    except (KeyError, TypeError, ValueError):
        raise DatasetError(f"{path}: damaged manifest (files, runs)") from None


def write_manifest(root: Path, manifest: Manifest) -> None:
    """Commit ``manifest``: written beside, flushed to disk, then renamed over the old one."""
    path = Path(root) / MANIFEST_NAME
    tmp = path.with_name(MANIFEST_TMP)
    with open(tmp, "w", encoding="utf-8") as out:
        json.dump(manifest.to_json(), out, separators=(",", ":"))
        out.flush()
        os.fsync(out.fileno())
    tmp.replace(path)
    fsync_dir(Path(root))


def fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
