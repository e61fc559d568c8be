"""Combine the traces of a run into one columnar event table.

Contract (what stitching consumes): an ``EventTable`` whose columns are numpy
arrays of equal length, one row per observation, and a probe table naming each
probe ``process/element:pad``. Times are CLOCK_MONOTONIC nanoseconds of the
host the process ran on; ``clock_domain`` names that clock per process.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from latlab.ingest.link_events import merge_link_logs, read_link_logs
from latlab.ingest.link_log import LinkLog
from latlab.ingest.pes import PES_KIND, PesTable, empty_pes_table, pes_table
from latlab.ingest.trace_format import EVENT_DTYPE, EventFlag, Kind, PadFlag
from latlab.ingest.trace_reader import (
    ClockRecord,
    PadInfo,
    SegmentRecord,
    StatsRecord,
    Trace,
    TraceError,
    open_trace,
)
from latlab.ingest.workers import parallel_map
from latlab.rundir import TRACE_SUFFIX
from latlab.rundir import trace_dir as rundir_traces


@dataclass
class Probe:
    """A point where time is observed: a pad push, or a sink's render (``done``)."""

    index: int
    name: str
    process: int
    element: str
    pad: str
    kind: Kind
    factory: str
    klass: str
    pad_flags: int
    pipeline_id: int
    peer_element: str
    peer_factory: str
    caps: str
    pad_id: int = 0
    peer_pad: str = ""

    @property
    def is_render(self) -> bool:
        """True for the instant a sink rendered a buffer."""
        return self.kind == Kind.DONE

    @property
    def element_pulls(self) -> bool:
        """True when the probe's element pulls its input (nothing upstream pushes)."""
        return bool(self.pad_flags & PadFlag.ELEMENT_PULLS) and not self.is_render

    @property
    def element_is_source(self) -> bool:
        """True when the probe's element is a source element."""
        return bool(self.pad_flags & PadFlag.ELEMENT_IS_SOURCE) and not self.is_render


@dataclass
class ProcessTrace:
    """One traced process of the run."""

    index: int
    name: str
    pid: int
    path: Path
    hostname: str
    clocks: list[ClockRecord]
    threads: dict[int, tuple[int, str]]
    dropped: int
    complete: bool
    problems: list[str]
    kind: str = "gstreamer"  # or "link": an emulated link's log
    pes: PesTable = field(default_factory=empty_pes_table)
    stats: list[StatsRecord] = field(default_factory=list)  # elements' ``stats`` readings
    segments: dict[int, PadSegments] = field(default_factory=dict)  # time segments by pad
    latencies: list[tuple[int, int, int]] = field(default_factory=list)  # pad, t_ns, latency ns

    @property
    def configured_latency_ns(self) -> int | None:
        """The latency the process's pipeline configured last (its sinks wait it out)."""
        if not self.latencies:
            return None
        last_t = max(t for _, t, _ in self.latencies)
        return max(lat for _, t, lat in self.latencies if t >= last_t - 1_000_000)

    @property
    def clock_domain(self) -> str:
        """The clock this process's times are in."""
        return f"monotonic@{self.hostname or 'localhost'}"


COLUMNS = (
    "process",
    "probe",
    "t_ns",
    "pts",
    "duration",
    "size",
    "buffer_flags",
    "is_rtp",
    "ssrc",
    "seq",
    "rtp_ts",
    "pt",
    "marker",
    "kind",
    "thread",
)


@dataclass
class EventTable:
    """All events of a run, columnar, one part per process, grouped by probe.

    ``probe_column(probe, name)`` is a view of one probe's events (in file
    order); ``columns`` concatenates all parts (for export). Missing times (PTS,
    duration) are -1.
    """

    parts: list[ProcessColumns]
    probes: list[Probe]
    processes: list[ProcessTrace]
    bounds: np.ndarray  # per probe: [start, stop) within its process's part
    threads: list[tuple[int, int, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return sum(len(part["t_ns"]) for part in self.parts)

    def probe_count(self, probe: int) -> int:
        """How many events a probe has."""
        return int(self.bounds[probe, 1] - self.bounds[probe, 0])

    def pes_of(self, probe: int) -> PesTable:
        """The PES starts recorded at a probe's pad: at its pushes, or at its renders.

        The tracer records them at pushes; an emulated link also at releases (its
        ``out`` probe).
        """
        p = self.probes[probe]
        pes = self.processes[p.process].pes
        return pes.select((pes.pad_id == p.pad_id) & (pes.at_done == (p.kind == Kind.DONE)))

    def running_pts(self, probe: int) -> np.ndarray:
        """A probe's PTS as running time (the time the pipeline clock schedules by).

        Elements such as video encoders shift their output PTS (x264enc by 1000 h)
        and announce it in the segment, so a stream's positions are only comparable
        as running time. PTS where no time segment was seen stay as they are; none is -1.
        """
        pts = self.probe_column(probe, "pts")
        p = self.probes[probe]
        segments = self.processes[p.process].segments.get(p.pad_id)
        if segments is None:
            return pts
        return segments.running_time(self.probe_column(probe, "t_ns"), pts)

    def probe_column(self, probe: int, name: str) -> np.ndarray:
        """One column of one probe's events (a view)."""
        part = self.parts[self.probes[probe].process]
        return part[name][self.bounds[probe, 0] : self.bounds[probe, 1]]

    @property
    def columns(self) -> dict[str, np.ndarray]:
        """All events, every process, as one set of columns (copies)."""
        if not self.parts:  # a run of browsers only: no trace, no link log
            empty = ProcessColumns(
                np.empty(0, EVENT_DTYPE), 0, np.zeros(0, np.int64), np.zeros(1, np.int32)
            )
            return {c: empty[c] for c in COLUMNS}
        return {c: np.concatenate([part[c] for part in self.parts]) for c in COLUMNS}

    def to_arrow(self) -> pa.Table:
        """The events as an Arrow table with probe names as a dictionary column."""
        cols = dict(self.columns)
        names = pa.array([p.name for p in self.probes])
        probe_col = pa.DictionaryArray.from_arrays(pa.array(cols.pop("probe")), names)
        table = pa.table(cols)
        return table.append_column("probe_name", probe_col)

    def write_parquet(self, path: Path) -> None:
        """Store the events as Parquet (one file for the run)."""
        pq.write_table(self.to_arrow(), path, compression="zstd")


@dataclass
class PadSegments:
    """The time segments a pad carried, in the order they were pushed."""

    t_ns: np.ndarray
    start: np.ndarray  # start + offset: where running time 0 + base is
    base: np.ndarray
    rate: np.ndarray

    def running_time(self, t_ns: np.ndarray, pts: np.ndarray) -> np.ndarray:
        """Running time of each PTS under the segment in force when its event happened.

        As ``gst_segment_to_running_time`` for a forward segment; -1 for none or
        a PTS before the segment's start.
        """
        i = np.maximum(np.searchsorted(self.t_ns, t_ns, side="right") - 1, 0)
        start, base, rate = self.start[i], self.base[i], self.rate[i]
        inside = (pts >= 0) & (pts >= start)
        elapsed = pts - start
        if np.any(rate != 1.0):
            elapsed = np.where(rate == 1.0, elapsed, (elapsed / np.abs(rate)).astype(np.int64))
        return np.where(inside, elapsed + base, -1)


TIME_FORMAT = 3


def time_segments(records: list[SegmentRecord]) -> dict[int, PadSegments]:
    """Forward time segments per pad (others cannot map PTS to running time)."""
    by_pad: dict[int, list[SegmentRecord]] = {}
    for r in sorted(records, key=lambda r: r.t_ns):
        if r.format == TIME_FORMAT and r.rate > 0 and r.start >= 0:
            by_pad.setdefault(r.pad_id, []).append(r)
    return {
        pad: PadSegments(
            t_ns=np.array([r.t_ns for r in rs], np.int64),
            start=np.array([r.start + max(r.offset, 0) for r in rs], np.int64),
            base=np.array([max(r.base, 0) for r in rs], np.int64),
            rate=np.array([r.rate for r in rs], np.float64),
        )
        for pad, rs in by_pad.items()
    }


def find_traces(run_dir: Path) -> list[Path]:
    """Trace files of a run directory (``traces/*.lltrace``, or the directory itself)."""
    trace_dir = rundir_traces(run_dir)
    return sorted(trace_dir.glob(f"*{TRACE_SUFFIX}"))


READ_WORKERS = 2  # files read at once (each maps its file and holds a grouped copy)


def load_traces(
    paths: list[Path], extra: Sequence[Trace] = (), *, allow_empty: bool = False
) -> EventTable:
    """Read and combine trace files, two at once, and traces made in memory (``extra``).

    Raises TraceError if none is usable (unless ``allow_empty`` and there were none).
    """
    builder = _TableBuilder()
    for trace in extra:
        builder.add(group_in_memory(trace))
    errors: list[str] = []
    for grouped in parallel_map(_read_grouped, paths, READ_WORKERS):
        if isinstance(grouped, TraceError):
            errors.append(str(grouped))
        else:
            builder.add(grouped)
    if not builder.processes and (errors or not allow_empty):
        raise TraceError(errors[0] if errors else "no trace files found")
    table = builder.build()
    for message in errors:
        table.processes.append(
            ProcessTrace(-1, "?", 0, Path(message.split(":")[0]), "", [], {}, 0, False, [message])
        )
    return table


@dataclass
class _GroupedTrace:
    """A trace whose events are grouped by probe: by (pad, kind), in that order."""

    trace: Trace  # its events are grouped
    codes: np.ndarray  # per probe: pad_id * 2 + (kind == done), ascending
    counts: np.ndarray  # events per probe
    pes: PesTable = field(default_factory=empty_pes_table)  # PES starts, apart from probes


def _read_grouped(path: Path) -> _GroupedTrace | TraceError:
    """Read a trace with its events grouped by probe (in file order within a probe)."""
    try:
        with open_trace(path) as (trace, records):
            kind = records.field("kind")
            is_pes = kind == PES_KIND
            pes = pes_table(records.gather(np.flatnonzero(is_pes))) if is_pes.any() else None
            codes = records.field("pad_id").astype(np.int64)
            codes *= 2
            codes += kind == Kind.DONE
            try:
                probe_codes, probe = _probe_of_events(codes, (kind == Kind.EOS) | is_pes)
            except TooManyProbes as exc:
                raise TraceError(f"{path}: {exc}") from None
            probe[is_pes] = -1
            del codes, kind, is_pes
            order = np.argsort(probe, kind="stable")  # a radix sort on int16
            order = order[np.count_nonzero(probe < 0) :]  # events of no probe sort first (-1)
            trace.events = records.gather(order)
    except TraceError as exc:
        return exc
    counts = np.bincount(probe[probe >= 0], minlength=len(probe_codes))
    return _GroupedTrace(trace, probe_codes, counts, pes or empty_pes_table())


def group_in_memory(trace: Trace) -> _GroupedTrace:
    """Group the events of a trace made in memory (e.g. from a link log) by probe."""
    kind = trace.events["kind"]
    is_pes = kind == PES_KIND
    pes = pes_table(trace.events) if is_pes.any() else empty_pes_table()
    codes = trace.events["pad_id"].astype(np.int64) * 2 + (kind == Kind.DONE)
    probe_codes, probe = _probe_of_events(codes, (kind == Kind.EOS) | is_pes)
    probe[is_pes] = -1
    order = np.argsort(probe, kind="stable")
    trace.events = trace.events[order[np.count_nonzero(probe < 0) :]]
    counts = np.bincount(probe[probe >= 0], minlength=len(probe_codes))
    return _GroupedTrace(trace, probe_codes, counts, pes)


class TooManyProbes(ValueError):
    """A trace whose events name more pads than a table can number (a damaged file)."""


def _probe_of_events(codes: np.ndarray, is_eos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct probe codes (ascending), and each event's probe among them (int16).

    An EOS event joins its pad's push probe, or no probe (-1) if the pad pushed nothing.
    Raises TooManyProbes beyond MAX_TRACE_PROBES.
    """
    pushed = codes[~is_eos]
    if not len(codes) or int(codes.max()) <= DENSE_CODES + 4 * len(codes):
        counts = np.bincount(pushed)
        probe_codes = np.flatnonzero(counts)
        _check_probe_count(len(probe_codes))
        lookup = np.full(len(counts) + 1, -1, np.int16)
        lookup[probe_codes] = np.arange(len(probe_codes), dtype=np.int16)
        return probe_codes, lookup[np.minimum(codes, len(counts))]
    # Codes far apart (a damaged pad id): sort them rather than allocate a table that large.
    probe_codes = np.unique(pushed)
    _check_probe_count(len(probe_codes))
    at = np.searchsorted(probe_codes, codes)
    found = at < len(probe_codes)
    found[found] = probe_codes[at[found]] == codes[found]
    return probe_codes, np.where(found, at, -1).astype(np.int16)


# Pad codes (pad id x 2) up to which a dense lookup table is used (the tracer numbers pads
# from 1); and the probes one trace may have: probe numbers are int16 across a table.
DENSE_CODES = 1 << 16
MAX_TRACE_PROBES = 1 << 13
MAX_TABLE_PROBES = np.iinfo(np.int16).max
# Thread indices above this are a damaged THREAD chunk's (the tracer numbers them from 1).
MAX_THREAD_INDEX = 1 << 20


def _check_probe_count(count: int) -> None:
    if count > MAX_TRACE_PROBES:
        raise TooManyProbes(
            f"damaged: its events name {count} different pads (more than {MAX_TRACE_PROBES})"
        )


class _TableBuilder:
    """Accumulates per-process columns; probes are numbered in the order they are met."""

    def __init__(self) -> None:
        self.probes: list[Probe] = []
        self.processes: list[ProcessTrace] = []
        self.threads: list[tuple[int, int, str]] = []
        self.parts: list[ProcessColumns] = []
        self.names: list[str] = []

    def add(self, grouped: _GroupedTrace) -> None:
        trace = grouped.trace
        index = len(self.processes)
        name = trace.process
        if name in self.names:
            name = f"{name}.{trace.pid}"
        self.names.append(name)
        self.processes.append(
            ProcessTrace(
                index,
                name,
                trace.pid,
                trace.path,
                trace.info.get("hostname", ""),
                sorted(trace.clocks, key=lambda c: c.mono_ns),
                trace.threads,
                trace.dropped,
                trace.complete,
                list(trace.problems),
                trace.info.get("kind", "gstreamer"),
                grouped.pes,
                trace.stats,
                time_segments(trace.segments),
                list(trace.latencies),
            )
        )
        first_probe = len(self.probes)
        if first_probe + len(grouped.codes) > MAX_TABLE_PROBES:
            raise TraceError(f"{trace.path}: too many probes for one table (damaged traces?)")
        self._add_probes(trace, grouped.codes, index, name)
        counts = np.zeros(len(self.probes), np.int64)
        counts[first_probe:] = grouped.counts
        self.parts.append(ProcessColumns(trace.events, index, counts, self._thread_lookup(trace)))

    def _add_probes(self, trace: Trace, codes: np.ndarray, proc: int, proc_name: str) -> None:
        first_caps = _first_caps(trace)
        for code in codes:
            pad_id, probe_kind = divmod(int(code), 2)
            info = trace.pads.get(pad_id) or PadInfo(pad_id, 1, 0, f"pad{pad_id}", "src", *[""] * 6)
            probe = _make_probe(
                len(self.probes), proc, proc_name, info, Kind(probe_kind), first_caps
            )
            self.probes.append(probe)

    def _thread_lookup(self, trace: Trace) -> np.ndarray:
        """Global thread index of each of the trace's thread indices (-1 if unknown)."""
        thread_ids = sorted(i for i in trace.threads if 0 <= i <= MAX_THREAD_INDEX)
        lookup = np.full(max(thread_ids, default=0) + 2, -1, np.int32)
        lookup[thread_ids] = len(self.threads) + np.arange(len(thread_ids), dtype=np.int32)
        self.threads.extend((len(self.processes) - 1, *trace.threads[i]) for i in thread_ids)
        return lookup

    def build(self) -> EventTable:
        bounds = np.zeros((len(self.probes), 2), np.int64)
        for part in self.parts:
            counts = np.zeros(len(self.probes), np.int64)
            counts[: len(part.counts)] = part.counts
            stops = np.cumsum(counts)
            present = counts > 0
            bounds[present, 0] = (stops - counts)[present]
            bounds[present, 1] = stops[present]
        return EventTable(self.parts, self.probes, self.processes, bounds, self.threads)


class ProcessColumns(Mapping[str, np.ndarray]):
    """One process's events grouped by probe, as read-only columns made on first use.

    Record fields are views of the grouped records; derived columns (flags,
    threads, probe numbers) are computed when first asked for and kept.
    """

    def __init__(
        self, records: np.ndarray, process: int, counts: np.ndarray, thread_lookup: np.ndarray
    ) -> None:
        self.records = records
        self.process = process
        self.counts = counts  # events per probe (all probes of the table so far)
        self.thread_lookup = thread_lookup
        self._cache: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()  # analysis threads may ask for a column at once

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in COLUMNS:
            raise KeyError(name)
        with self._lock:
            if name not in self._cache:
                self._cache[name] = self._make(name)
            return self._cache[name]

    def __iter__(self) -> Iterator[str]:
        return iter(COLUMNS)

    def __len__(self) -> int:
        return len(COLUMNS)

    def _make(self, name: str) -> np.ndarray:
        ev = self.records
        if name in _RECORD_FIELDS:
            column = ev[_RECORD_FIELDS[name]]
            return column.view(np.int64) if column.dtype == np.uint64 else column
        if name == "is_rtp":
            return (ev["event_flags"] & EventFlag.RTP) != 0
        if name == "marker":
            return (ev["event_flags"] & EventFlag.MARKER) != 0
        if name == "pt":
            return ev["rtp_pt"] & 0x7F
        if name == "thread":
            lookup = self.thread_lookup
            return lookup[np.minimum(ev["thread_idx"], len(lookup) - 1)]
        if name == "process":
            return np.full(len(ev), self.process, np.int16)
        # name == "probe"
        return np.repeat(np.arange(len(self.counts), dtype=np.int16), self.counts)


# Columns that are record fields as they are (times read as int64: none is -1).
_RECORD_FIELDS = {
    "t_ns": "t_ns",
    "pts": "pts",
    "duration": "duration",
    "size": "size",
    "buffer_flags": "buffer_flags",
    "ssrc": "rtp_ssrc",
    "seq": "rtp_seq",
    "rtp_ts": "rtp_ts",
    "kind": "kind",
}


def _first_caps(trace: Trace) -> dict[int, str]:
    caps: dict[int, str] = {}
    for pad_id, _, text in sorted(trace.caps, key=lambda c: c[1]):
        caps.setdefault(pad_id, text)
    return caps


def _make_probe(
    index: int, proc: int, proc_name: str, info: PadInfo, kind: Kind, caps: dict[int, str]
) -> Probe:
    if kind == Kind.DONE:
        element, pad, factory, klass = info.peer_element, info.peer_pad, info.peer_factory, ""
    else:
        element, pad, factory, klass = info.element, info.pad, info.factory, info.klass
    return Probe(
        index=index,
        name=f"{proc_name}/{element}:{pad}" if pad else f"{proc_name}/{element}",
        process=proc,
        element=element,
        pad=pad,
        kind=kind,
        factory=factory,
        klass=klass,
        pad_flags=info.flags,
        pipeline_id=info.pipeline_id,
        peer_element=info.peer_element,
        peer_factory=info.peer_factory,
        caps=caps.get(info.pad_id, ""),
        pad_id=info.pad_id,
        peer_pad=info.peer_pad,
    )


def load_run(
    run_dir: Path, link_logs: Sequence[LinkLog] | None = None, *, allow_no_traces: bool = False
) -> EventTable:
    """Read all traces of a run directory, and the logs of its emulated links.

    ``link_logs`` are the run's link logs when the caller has read them already;
    ``allow_no_traces`` accepts a run without trace files (browsers only).
    """
    paths = find_traces(run_dir)
    if not paths and not allow_no_traces:
        raise TraceError(f"{run_dir}: no trace files (*.lltrace) found")
    link = merge_link_logs(read_link_logs(run_dir) if link_logs is None else link_logs)
    return load_traces(paths, extra=[link] if link is not None else [], allow_empty=allow_no_traces)
