"""``latlab ingest RUN_DIR… --into DATASET``: append runs to a dataset.

Each run's analysis is read through :func:`latlab.pipeline.analysis_of` (its stored
analysis while current, else analysed now and stored) and turned into rows
(:mod:`latlab.dataset.rows`). Runs are written in chunks: per chunk, one Parquet file
per table and partition, each written under a hidden temporary name and renamed, then
the manifest is rewritten the same way, which commits the chunk. Until that rename the
dataset reads as before; files left by a crash are not in the manifest and the next
ingest removes them. One ingest at a time holds the dataset's lock.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from latlab.dataset import layout
from latlab.dataset.layout import (
    LOCK_NAME,
    MINOR,
    PARQUET_SUFFIX,
    TABLE_NAMES,
    TMP_SUFFIX,
    DatasetError,
    Manifest,
    partition_dir,
)
from latlab.dataset.rows import labels_table, runs_table, segments_table, summaries_table
from latlab.dataset.sources import (
    RUN_KEYS,
    Candidate,
    RunFacts,
    Skip,
    candidates,
    label_keys,
    read_facts,
)
from latlab.errors import LatlabError
from latlab.rundir import SUMMARY_SCHEMA

CHUNK_ROWS = 4_000_000  # segment rows held before a chunk is written and committed
COMPRESSION = "zstd"


def _quiet(_text: str) -> None:
    """A ``report`` that says nothing."""


@dataclass
class IngestOptions:
    """What ``latlab ingest`` adds to every run, and whether a run already in the dataset
    is replaced."""

    labels: dict[str, str] = field(default_factory=dict)
    revision: str | None = None
    replace: bool = False


@dataclass
class IngestResult:
    """What an ingest did."""

    ingested: list[tuple[str, Path]] = field(default_factory=list)  # run id, directory
    replaced: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # one line each, naming the run
    rows: int = 0  # segment rows written
    cleaned: int = 0  # files a crashed ingest left, removed
    seconds: float = 0.0


@dataclass
class _Run:
    facts: RunFacts
    tables: dict[str, pa.Table]


def parse_labels(texts: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` labels (DatasetError naming a malformed one or a reserved key)."""
    labels = {}
    for text in texts:
        key, sep, value = text.partition("=")
        key = key.strip()
        if not sep or not key:
            raise DatasetError(f"--label {text!r}: expected KEY=VALUE, e.g. build=4711")
        if key in RUN_KEYS:
            raise DatasetError(f"--label {text!r}: {key!r} is a run fact; choose another key")
        labels[key] = value
    return labels


def ingest(
    paths: Sequence[Path],
    dataset: Path,
    options: IngestOptions | None = None,
    *,
    report: Callable[[str], None] = _quiet,
) -> IngestResult:
    """Append the runs of ``paths`` (run or sweep directories) to ``dataset`` (created if
    absent); runs that cannot be ingested are skipped with their reason."""
    options = options or IngestOptions()
    start = time.perf_counter()
    root = _usable(Path(dataset))
    result = IngestResult()
    with _locked(root):
        _create_if_new(root)
        manifest = layout.read_manifest(root)
        result.cleaned = _remove_uncommitted(root, manifest)
        writer = _ChunkWriter(root, manifest, result)
        found = candidates(paths)
        for number, candidate in enumerate(found, 1):
            report(f"ingesting {number}/{len(found)}: {candidate.run_dir}")
            run = _read(candidate, options, manifest, writer, result)
            if run is not None:
                writer.add(run)
        writer.commit()
    result.seconds = time.perf_counter() - start
    return result


def _usable(root: Path) -> Path:
    """``root`` as a dataset to ingest into: one already, or absent or an empty directory
    (made here; its manifest is written under the lock, so that ingests started together
    into a new dataset create it once)."""
    if not layout.is_dataset(root):
        _refuse_foreign(root)
        root.mkdir(parents=True, exist_ok=True)
    return root


def _create_if_new(root: Path) -> None:
    """Under the lock: write the empty manifest of a new dataset (the first ingest in)."""
    if layout.is_dataset(root):
        return
    _refuse_foreign(root)
    layout.write_manifest(root, Manifest())


def _refuse_foreign(root: Path) -> None:
    """DatasetError when ``root`` holds something other than a dataset or one being
    created (its lock, its first manifest before the rename). The manifest is looked for
    after the entries: an ingest that created the dataset meanwhile wrote it first."""
    ours = (LOCK_NAME, layout.MANIFEST_TMP)
    foreign = root.exists() and (
        not root.is_dir() or any(entry.name not in ours for entry in root.iterdir())
    )
    if foreign and not layout.is_dataset(root):
        raise DatasetError(
            f"{root}: exists and is not a latlab dataset (no {layout.MANIFEST_NAME})"
        )


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _remove_uncommitted(root: Path, manifest: Manifest) -> int:
    """Remove the table files the manifest does not list (left by a crashed ingest)."""
    removed = 0
    for table in TABLE_NAMES:
        directory = root / table
        if not directory.is_dir():
            continue
        for path in directory.rglob("*"):
            name = path.name
            if not path.is_file() or not name.endswith((PARQUET_SUFFIX, TMP_SUFFIX)):
                continue
            if str(path.relative_to(root)) not in manifest.files:
                path.unlink()
                removed += 1
    return removed


def _read(
    c: Candidate,
    options: IngestOptions,
    manifest: Manifest,
    writer: _ChunkWriter,
    result: IngestResult,
) -> _Run | None:
    """A candidate's rows, or None (the reason in ``result.skipped``)."""
    from latlab.pipeline import analysis_of

    now = datetime.now(UTC).isoformat(timespec="seconds")
    try:
        facts, run = read_facts(c, options.revision, now)
        _check_new(facts, c, options, manifest, writer)
        analysis = analysis_of(c.run_dir)
    except Skip as exc:
        result.skipped.append(str(exc))
        return None
    except (LatlabError, OSError) as exc:
        result.skipped.append(_reason(c.run_dir, exc))
        return None
    if analysis.summary.get("schema") != SUMMARY_SCHEMA:
        found = analysis.summary.get("schema")
        result.skipped.append(f"{c.run_dir}: summary.json has unknown schema {found!r}")
        return None
    streams = analysis.streams
    facts.row |= {
        "unit_ms": float(analysis.meta.get("unit_ms", 10.0)),
        "streams": len(streams),
        "units": sum(len(s.journeys.unit_start) for s in streams),
    }
    facts.keys = label_keys(facts, run, c.values, options.labels)
    tables = {
        "summaries": summaries_table(facts.run_id, analysis.summary),
        "runs": runs_table(facts.row),
        "labels": labels_table(facts.run_id, facts.keys),
    }
    segments = segments_table(facts.run_id, streams)
    if segments is not None:
        tables["segments"] = segments
    return _Run(facts, tables)


def _reason(run_dir: Path, exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text if str(run_dir) in text else f"{run_dir}: {text}"


def _check_new(
    facts: RunFacts,
    c: Candidate,
    options: IngestOptions,
    manifest: Manifest,
    writer: _ChunkWriter,
) -> None:
    """Skip a run given twice in this ingest, or already in the dataset (unless replaced)."""
    earlier = writer.pending_dirs.get(facts.run_id)
    if earlier is not None:
        raise Skip(f"{c.run_dir}: the same run as {earlier} (run {facts.run_id})")
    known = manifest.runs.get(facts.run_id)
    if known is not None and not options.replace:
        raise Skip(
            f"{c.run_dir}: already in the dataset as run {facts.run_id} (from "
            f"{known.get('dir')}); --replace replaces it"
        )


class _ChunkWriter:
    """Holds runs' rows until a chunk is full, then writes and commits it."""

    def __init__(self, root: Path, manifest: Manifest, result: IngestResult) -> None:
        self.root = root
        self.manifest = manifest
        self.result = result
        self.batch = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{os.urandom(3).hex()}"
        self.chunk = 0
        self.runs: list[_Run] = []
        self.rows = 0
        self.pending_dirs: dict[str, str] = {}

    def add(self, run: _Run) -> None:
        """Hold a run's rows; commit when the chunk is full."""
        self.runs.append(run)
        self.pending_dirs[run.facts.run_id] = run.facts.row["run_dir"]
        segments = run.tables.get("segments")
        self.rows += segments.num_rows if segments is not None else 0
        if self.rows >= CHUNK_ROWS:
            self.commit()

    def commit(self) -> None:
        """Write the held runs (replacing those already in the dataset) and commit them."""
        if not self.runs:
            return
        manifest = Manifest(
            max(self.manifest.minor, MINOR), dict(self.manifest.files), dict(self.manifest.runs)
        )
        replaced = {r.facts.run_id for r in self.runs if r.facts.run_id in manifest.runs}
        superseded = self._drop_runs(manifest, replaced)
        for (scenario, date), runs in self._partitions().items():
            for table in TABLE_NAMES:
                parts = [r.tables[table] for r in runs if table in r.tables]
                if parts:
                    self._write(manifest, table, partition_dir(table, scenario, date), parts)
        for run in self.runs:
            f = run.facts
            manifest.runs[f.run_id] = {
                "dir": f.row["run_dir"],
                "scenario": f.scenario,
                "date": f.date,
                "ingested_at": f.row["ingested_at"],
            }
        layout.write_manifest(self.root, manifest)  # the commit
        self.manifest.files, self.manifest.runs = manifest.files, manifest.runs
        for path in superseded:
            (self.root / path).unlink(missing_ok=True)
        self.result.ingested += [(r.facts.run_id, Path(r.facts.row["run_dir"])) for r in self.runs]
        self.result.replaced += sorted(replaced)
        self.result.rows += self.rows
        self.runs, self.rows = [], 0
        self.chunk += 1

    def _partitions(self) -> dict[tuple[str, str], list[_Run]]:
        groups: dict[tuple[str, str], list[_Run]] = defaultdict(list)
        for run in self.runs:
            groups[(run.facts.scenario, run.facts.date)].append(run)
        return groups

    def _write(self, manifest: Manifest, table: str, directory: str, parts: list[pa.Table]) -> None:
        relative = f"{directory}/part-{self.batch}-{self.chunk:04d}{PARQUET_SUFFIX}"
        data = pa.concat_tables(parts)
        runs = sorted(set(pc.unique(data.column("run_id")).cast(pa.string()).to_pylist()))
        write_file(self.root, relative, data)
        manifest.files[relative] = {
            "table": table,
            "runs": runs,
            "rows": data.num_rows,
            "minor": MINOR,
        }

    def _drop_runs(self, manifest: Manifest, run_ids: set[str]) -> list[str]:
        """Rewrite the files holding ``run_ids`` without them (in ``manifest``); the
        files they supersede, to delete once committed."""
        superseded = []
        for path, facts in list(manifest.files.items()):
            if not run_ids.intersection(facts["runs"]):
                continue
            superseded.append(path)
            del manifest.files[path]
            kept = [r for r in facts["runs"] if r not in run_ids]
            if kept:
                data = pq.read_table(self.root / path, partitioning=None)
                mask = pc.is_in(data.column("run_id"), pa.array(kept, pa.string()))
                relative = path.removesuffix(PARQUET_SUFFIX) + f"-r{self.batch}{PARQUET_SUFFIX}"
                write_file(self.root, relative, data.filter(mask))
                manifest.files[relative] = facts | {"runs": kept, "rows": int(pc.sum(mask).as_py())}
        for run_id in run_ids:
            manifest.runs.pop(run_id, None)
        return superseded


def write_file(root: Path, relative: str, data: pa.Table) -> None:
    """Write a table file: under a hidden temporary name, flushed, then renamed."""
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}{TMP_SUFFIX}")
    pq.write_table(data, tmp, compression=COMPRESSION)
    with open(tmp, "rb") as written:
        os.fsync(written.fileno())
    tmp.replace(path)


def summary_line(result: IngestResult, dataset: Path) -> str:
    """What an ingest did, in one line."""
    runs = len(result.ingested)
    rate = runs / result.seconds if result.seconds else 0.0
    parts = [
        f"ingested {runs} run{'s' * (runs != 1)} ({result.rows:,} unit-segment rows) "
        f"into {dataset} in {result.seconds:.1f} s ({rate:.1f} runs/s)"
    ]
    if result.replaced:
        parts.append(f"replaced {len(result.replaced)}")
    if result.skipped:
        parts.append(f"skipped {len(result.skipped)}")
    if result.cleaned:
        parts.append(f"removed {result.cleaned} files an interrupted ingest left")
    return "; ".join(parts)


def describe(manifest: Manifest) -> dict[str, Any]:
    """Counts of a manifest: runs, files per table, rows per table."""
    rows: dict[str, int] = defaultdict(int)
    files: dict[str, int] = defaultdict(int)
    for facts in manifest.files.values():
        rows[facts["table"]] += int(facts.get("rows", 0))
        files[facts["table"]] += 1
    return {"runs": len(manifest.runs), "files": dict(files), "rows": dict(rows)}
