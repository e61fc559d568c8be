"""Combine the traces of a run into one columnar event table.

Contract (what stitching consumes): an ``EventTable`` whose columns are numpy
arrays of equal length, one row per observation, and a probe table naming each
probe ``process/element:pad``. Times are CLOCK_MONOTONIC nanoseconds of the
host the process ran on; ``clock_domain`` names that clock per process.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from latlab.ingest.trace_format import EVENT_DTYPE, EventFlag, Kind, PadFlag
from latlab.ingest.trace_reader import ClockRecord, PadInfo, Trace, TraceError, read_trace


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

    @property
    def is_render(self) -> bool:
        """True for the instant a sink rendered a buffer."""
        return self.kind == Kind.DONE

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

    parts: list[dict[str, np.ndarray]]
    probes: list[Probe]
    processes: list[ProcessTrace]
    bounds: np.ndarray  # per probe: [start, stop) within its process's part
    threads: list[tuple[int, int, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return sum(len(part["t_ns"]) for part in self.parts)

    def probe_count(self, probe: int) -> int:
        """How many events a probe has."""
        return int(self.bounds[probe, 1] - self.bounds[probe, 0])

    def probe_column(self, probe: int, name: str) -> np.ndarray:
        """One column of one probe's events (a view)."""
        part = self.parts[self.probes[probe].process]
        return part[name][self.bounds[probe, 0] : self.bounds[probe, 1]]

    @property
    def columns(self) -> dict[str, np.ndarray]:
        """All events, every process, as one set of columns (copies)."""
        return {c: np.concatenate([part[c] for part in self.parts]) for c in COLUMNS}

    def probe_by_name(self, name: str) -> Probe:
        """Look a probe up by its name."""
        for probe in self.probes:
            if probe.name == name:
                return probe
        raise KeyError(name)

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


def find_traces(run_dir: Path) -> list[Path]:
    """Trace files of a run directory (``traces/*.lltrace``, or the directory itself)."""
    trace_dir = run_dir / "traces" if (run_dir / "traces").is_dir() else run_dir
    return sorted(trace_dir.glob("*.lltrace"))


def load_traces(paths: list[Path]) -> EventTable:
    """Read and combine trace files, one at a time. Raises TraceError if none is usable."""
    builder = _TableBuilder()
    errors: list[str] = []
    for path in paths:
        try:
            trace = read_trace(path)
        except TraceError as exc:
            errors.append(str(exc))
            continue
        builder.add(trace)
        del trace
    if not builder.processes:
        raise TraceError(errors[0] if errors else "no trace files found")
    table = builder.build()
    for message in errors:
        table.processes.append(
            ProcessTrace(-1, "?", 0, Path(message.split(":")[0]), "", [], {}, 0, False, [message])
        )
    return table


class _TableBuilder:
    """Accumulates per-process columns; probes are numbered in the order they are met."""

    def __init__(self) -> None:
        self.probes: list[Probe] = []
        self.processes: list[ProcessTrace] = []
        self.threads: list[tuple[int, int, str]] = []
        self.parts: list[dict[str, np.ndarray]] = []
        self.names: list[str] = []

    def add(self, trace: Trace) -> None:
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
            )
        )
        thread_base = len(self.threads)
        thread_ids = sorted(trace.threads)
        self.threads.extend((index, *trace.threads[i]) for i in thread_ids)
        self.parts.append(_columns(trace, index, name, self.probes, thread_base, thread_ids))

    def build(self) -> EventTable:
        bounds = np.zeros((len(self.probes), 2), np.int64)
        for part in self.parts:
            counts = np.bincount(part["probe"], minlength=len(self.probes))
            stops = np.cumsum(counts)
            present = counts > 0
            bounds[present, 0] = (stops - counts)[present]
            bounds[present, 1] = stops[present]
        return EventTable(self.parts, self.probes, self.processes, bounds, self.threads)


def _columns(
    trace: Trace,
    proc: int,
    proc_name: str,
    probes: list[Probe],
    thread_base: int,
    thread_ids: list[int],
) -> dict[str, np.ndarray]:
    """One process's events as columns, grouped by probe (a stable radix sort)."""
    ev = trace.events
    kind = ev["kind"]
    codes = ev["pad_id"].astype(np.int64) * 2 + (kind == Kind.DONE)
    lookup = np.full(int(codes.max(initial=0)) + 1, -1, np.int16)
    first_caps = _first_caps(trace)
    for code in np.flatnonzero(np.bincount(codes[kind != Kind.EOS])):
        pad_id, probe_kind = divmod(int(code), 2)
        info = trace.pads.get(pad_id) or PadInfo(pad_id, 1, 0, f"pad{pad_id}", "src", *[""] * 6)
        lookup[code] = len(probes)
        probes.append(_make_probe(len(probes), proc, proc_name, info, Kind(probe_kind), first_caps))
    probe = lookup[codes]
    order = np.argsort(probe, kind="stable")  # a radix sort on int16
    order = order[np.count_nonzero(probe < 0) :]  # EOS records sort first (probe -1)
    # Gather whole records as rows of eight-byte words: one fast pass instead of one per field.
    words = ev.view(np.uint64).reshape(-1, EVENT_DTYPE.itemsize // 8)
    ev = np.take(words, order, axis=0).view(EVENT_DTYPE).reshape(-1)
    thread_lookup = np.full(max(thread_ids, default=0) + 2, -1, np.int32)
    thread_lookup[thread_ids] = thread_base + np.arange(len(thread_ids), dtype=np.int32)
    flags = ev["event_flags"]
    return {
        "process": np.full(len(ev), proc, np.int16),
        "probe": probe[order],
        "t_ns": ev["t_ns"].view(np.int64),
        "pts": ev["pts"].view(np.int64),  # none (all ones) reads as -1
        "duration": ev["duration"].view(np.int64),
        "size": ev["size"],
        "buffer_flags": ev["buffer_flags"],
        "is_rtp": (flags & EventFlag.RTP) != 0,
        "ssrc": ev["rtp_ssrc"],
        "seq": ev["rtp_seq"],
        "rtp_ts": ev["rtp_ts"],
        "pt": ev["rtp_pt"] & 0x7F,
        "marker": (flags & EventFlag.MARKER) != 0,
        "kind": ev["kind"],
        "thread": thread_lookup[np.minimum(ev["thread_idx"], len(thread_lookup) - 1)],
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
        name=f"{proc_name}/{element}:{pad}",
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
    )


def caps_field(caps: str, name: str) -> str | None:
    """Read one field of a serialised caps string, e.g. ``clock-rate`` -> ``"48000"``."""
    match = re.search(rf"(?:^|[,\s]){re.escape(name)}=(?:\([a-z0-9]+\))?\"?([^,;\"]+)", caps)
    return match.group(1).strip() if match else None


def load_run(run_dir: Path) -> EventTable:
    """Read all traces of a run directory."""
    paths = find_traces(run_dir)
    if not paths:
        raise TraceError(f"{run_dir}: no trace files (*.lltrace) found")
    return load_traces(paths)
