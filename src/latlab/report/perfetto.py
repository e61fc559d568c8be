"""Export a run's journeys as a trace for the Perfetto UI (Chrome trace-event JSON).

Layout of the trace (docs/reports.md):

* one Perfetto *process* per traced process, named ``HOST / PROCESS (pid N)`` so the
  processes of a host sort together; pids and tids in the file are small synthetic
  numbers (the real ones are in the names), so traces of several machines cannot clash;
* one *thread track* per (thread where a segment ends, segment), named after the
  thread (its name and tid from the trace) and the segment; a segment whose end probe
  has no thread (a browser's transform, an emulated link) gets a per-stream track in
  that probe's process. Units overlap in time (a jitter buffer holds several at once),
  and Perfetto needs the slices of one track to nest, so overlapping units of one
  segment are spread over numbered lanes (extra tracks ``… #2``, ``… #3``);
* one complete slice (``"ph":"X"``) per unit per segment, from the unit's time at the
  segment's first probe to its time at the last. A zero or negative segment (a unit seen
  downstream first) is drawn 1 ns long after the previous slice, so a unit's slices
  always follow each other; the true value is in the slice's args (``segment_ns``);
* one flow per unit (flow events v2: ``bind_id`` with ``flow_out`` / ``flow_in``) from
  its first slice through every later one, across threads, processes and hosts.

The writer is columnar: each (stream, segment) block of slices is formatted as JSON
text with Arrow compute kernels and written as one buffer; no per-event Python object
is built.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from latlab.analysis.segments import StreamAnalysis
from latlab.stitch.journeys import Journeys
from latlab.stitch.position import MISSING

# Perfetto files a process-level event (no tid) under tid = pid, so tids start above
# every pid (pids are 1, 2, ... per process).
TID_BASE = 1 << 20
BLOCK_UNITS = 100_000  # units formatted at once (bounds the memory of one text block)
FLOW_ID_STRIDE = 1 << 32  # bind_id = stream * stride + unit + 1
NO_FLOW, FLOW_OUT, FLOW_STEP, FLOW_IN = 0, 1, 2, 3
FLOW_TEXT = (
    "",
    ',"bind_id":{},"flow_out":true',
    ',"bind_id":{},"flow_in":true,"flow_out":true',
    ',"bind_id":{},"flow_in":true',
)


@dataclass
class ExportResult:
    """What a Perfetto export wrote."""

    path: Path
    streams: int = 0
    units: int = 0
    slices: int = 0
    flows: int = 0  # units followed by a flow (each an arrow chain across its slices)
    flow_arrows: int = 0  # arrows between consecutive slices of a unit
    tracks: int = 0
    processes: int = 0
    bytes: int = 0


@dataclass
class _Track:
    tid: int
    pid: int
    name: str
    sort_key: tuple


@dataclass
class _Layout:
    """Synthetic pids per process and tids per (thread or stream, segment, lane) track."""

    processes: list[dict[str, Any]]  # traced processes: name, pid, kind, hostname
    threads: list[tuple[int, int, str]]  # per global thread: process index, tid, name
    hosts: dict[str, str]
    pids: dict[str, int] = field(default_factory=dict)
    process_names: dict[int, str] = field(default_factory=dict)
    tracks: dict[tuple, _Track] = field(default_factory=dict)

    def pid(self, process: str) -> int:
        """The synthetic pid of a process (by its name in probe names)."""
        if process not in self.pids:
            pid = len(self.pids) + 1
            self.pids[process] = pid
            real = next((p["pid"] for p in self.processes if p["name"] == process), None)
            host = self.hosts.get(process) or _host_of(self.processes, process)
            label = f"{host} / {process}" + (f" (pid {real})" if real else "")
            self.process_names[pid] = label
        return self.pids[process]

    def track(self, key: tuple, pid: int, name: str) -> int:
        """The tid of a track, created on first use (tids are unique in the whole trace)."""
        if key not in self.tracks:
            self.tracks[key] = _Track(TID_BASE + len(self.tracks) + 1, pid, name, key)
        return self.tracks[key].tid


def export_perfetto(run_dir: Path, out: Path, unit_ms: float | None = None) -> ExportResult:
    """Analyse ``run_dir`` (its summary.json is left as it is) and write its Perfetto trace."""
    from latlab.pipeline import analysis_of

    analysis = analysis_of(run_dir, unit_ms, write=unit_ms is None)  # not another unit
    errors = [
        [seg.get("clock_err_ms") if seg.get("cross_domain") else None for seg in s["segments"]]
        for s in analysis.summary.get("streams", [])
    ]
    return write_perfetto(
        analysis.streams, analysis.processes, analysis.threads, analysis.meta, out,
        clock_errors=errors if analysis.summary.get("clocks") else None,
        clocks=analysis.summary.get("clocks"),
    )  # fmt: skip


def write_perfetto(
    streams: list[StreamAnalysis],
    processes: list[dict[str, Any]],
    threads: list[tuple[int, int, str]],
    run: dict[str, Any],
    out: Path,
    *,
    clock_errors: list[list[float | None]] | None = None,
    clocks: dict[str, Any] | None = None,
) -> ExportResult:
    """Write the Chrome trace-event JSON of ``streams`` to ``out``; ``clock_errors``: per
    stream and segment the clock error of a segment between clock domains (its slices'
    ``clock_err_ms``), ``clocks``: summary.json's (in ``otherData``)."""
    hosts = {p["name"]: p.get("host", "") for p in run.get("processes", []) if "name" in p}
    emulated = [link["between"] for link in run.get("links", []) if link.get("log")]
    if emulated:  # link logs are one process, "link", in the event table
        hosts["link"] = "link " + ", ".join("-".join(pair) for pair in emulated)
    layout = _Layout(processes, threads, hosts)
    result = ExportResult(Path(out), streams=len(streams))
    with open(out, "wb") as f:
        f.write(b'{"displayTimeUnit":"ns","traceEvents":[\n')
        events = _EventWriter(f)
        for index, stream in enumerate(streams):
            errors = clock_errors[index] if clock_errors and index < len(clock_errors) else None
            _write_stream(events, index, stream.journeys, layout, result, errors)
        for line in _metadata_lines(layout):
            events.write(b",\n" + line)
        info = _trace_info(run) | ({"clocks": clocks} if clocks else {})
        f.write(b'\n],\n"otherData":' + _json_line(info) + b"}\n")
        result.bytes = f.tell()
    result.tracks = len(layout.tracks)
    result.processes = len(layout.pids)
    return result


class _EventWriter:
    """Writes the events of the array; each chunk starts with ``,\\n`` (dropped the first time)."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f = f
        self.first = True

    def write(self, chunk: bytes | memoryview) -> None:
        """Append events (a chunk of ``,\\n{...}`` lines)."""
        if self.first and len(chunk):
            chunk, self.first = chunk[2:], False
        self.f.write(chunk)


def _trace_info(run: dict[str, Any]) -> dict[str, Any]:
    return {
        "generator": "latlab export --perfetto",
        "run": run.get("name", ""),
        "started_at": run.get("started_at", ""),
        "clock": "CLOCK_MONOTONIC",
    }


def _json_line(event: dict[str, Any]) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode()


def _metadata_lines(layout: _Layout) -> Iterator[bytes]:
    """Process and thread names and sort orders (Perfetto groups tracks by process)."""
    for pid, label in sorted(layout.process_names.items(), key=lambda item: item[1]):
        host = label.split(" / ", 1)[0]
        yield _meta("process_name", pid, None, {"name": label})
        yield _meta("process_labels", pid, None, {"labels": f"host {host}"})
        yield _meta("process_sort_index", pid, None, {"sort_index": pid})
    ordered = sorted(layout.tracks.values(), key=lambda t: t.sort_key)
    for order, track in enumerate(ordered):
        yield _meta("thread_name", track.pid, track.tid, {"name": track.name})
        yield _meta("thread_sort_index", track.pid, track.tid, {"sort_index": order})


def _meta(name: str, pid: int, tid: int | None, args: dict[str, Any]) -> bytes:
    event: dict[str, Any] = {"ph": "M", "name": name, "pid": pid}
    if tid is not None:
        event["tid"] = tid
    return _json_line(event | {"args": args})


def _write_stream(
    f: _EventWriter,
    index: int,
    j: Journeys,
    layout: _Layout,
    result: ExportResult,
    clock_errors: list[float | None] | None = None,
) -> None:
    """All slices of one stream, one (segment, block of units) at a time."""
    times = j.times
    present = (times[:, :-1] != MISSING) & (times[:, 1:] != MISSING)
    running = _ordered_times(times)
    roles = _flow_roles(present)
    result.units += len(times)
    result.slices += int(present.sum())
    chained = present.sum(axis=1)
    result.flows += int((chained >= 2).sum())
    result.flow_arrows += int(np.maximum(chained - 1, 0).sum())
    for k in range(times.shape[1] - 1):
        tids = _segment_tids(index, j, k, present[:, k], running, layout)
        for lo in range(0, len(times), BLOCK_UNITS):
            rows = np.flatnonzero(present[lo : lo + BLOCK_UNITS, k]) + lo
            if len(rows):
                err = clock_errors[k] if clock_errors and k < len(clock_errors) else None
                block = _slice_block(index, j, k, rows, running, roles, tids[rows], layout, err)
                f.write(block)


def _ordered_times(times: np.ndarray) -> np.ndarray:
    """Each unit's probe times made strictly increasing along its journey (ns).

    A unit's slices must follow each other for its flow to be read in order, also where a
    segment is zero or negative (a unit seen downstream first): such a slice is drawn
    1 ns long after the previous one. ``max(t_j - j for j <= k) + k`` does it without a loop.
    """
    steps = np.arange(times.shape[1], dtype=np.int64)
    shifted = np.where(times == MISSING, np.iinfo(np.int64).min // 2, times - steps)
    return np.maximum.accumulate(shifted, axis=1) + steps


def _flow_roles(present: np.ndarray) -> np.ndarray:
    """Each slice's place in its unit's flow: none, first (out), middle (step), last (in)."""
    count = present.sum(axis=1)
    first = np.argmax(present, axis=1)
    last = present.shape[1] - 1 - np.argmax(present[:, ::-1], axis=1)
    column = np.arange(present.shape[1])
    roles = np.full(present.shape, FLOW_STEP, np.int8)
    roles[column[None, :] == first[:, None]] = FLOW_OUT
    roles[column[None, :] == last[:, None]] = FLOW_IN
    roles[(count < 2)[:, None] | ~present] = NO_FLOW
    return roles


def _segment_tids(
    stream: int, j: Journeys, k: int, present: np.ndarray, running: np.ndarray, layout: _Layout
) -> np.ndarray:
    """The track (tid) of each unit's slice of segment ``k``: the end probe's thread, a lane."""
    tids = np.zeros(len(present), np.int64)
    threads = j.threads[:, k + 1]
    start, end = running[:, k], running[:, k + 1]
    for thread in np.unique(threads[present]):
        rows = np.flatnonzero(present & (threads == thread))
        lanes, lane_count = _lanes(start[rows], end[rows])
        pid, key, name = _track_identity(stream, j, k, int(thread), layout)
        lane_tids = np.array(
            [
                layout.track((*key, lane), pid, name + (f" #{lane + 1}" if lane else ""))
                for lane in range(lane_count)
            ]
        )
        tids[rows] = lane_tids[lanes]
    return tids


def _track_identity(stream: int, j: Journeys, k: int, thread: int, layout: _Layout) -> tuple:
    """(pid, sort key, name) of the tracks of segment ``k`` ending on ``thread``."""
    label = _segment_label(j, k)
    if thread != MISSING and thread < len(layout.threads):
        process_index, tid, thread_name = layout.threads[thread]
        process = layout.processes[process_index]["name"]
        pid = layout.pid(process)
        return pid, (pid, 0, tid, stream, k), f"{thread_name} [{tid}] · {label}"
    process = j.probe_names[k + 1].split("/", 1)[0]
    pid = layout.pid(process)
    return pid, (pid, 1, 0, stream, k), f"stream {stream + 1} · {label}"


def _segment_label(j: Journeys, k: int) -> str:
    """A segment's name: the probe it ends at (without its process) and its kind."""
    to_probe = j.probe_names[k + 1].split("/", 1)[-1]
    return f"{to_probe} ({j.segment_kinds[k]})"


def _lanes(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, int]:
    """Spread intervals over the fewest round-robin lanes in which none overlap.

    In start order, interval ``i`` overlaps the ``c_i`` intervals after it that start
    before it ends; with ``K = 1 + max c_i`` lanes taken in turn, every lane's
    intervals follow each other (interval ``i + K`` starts after ``i`` ends).
    """
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    overlapping = np.searchsorted(s, e, side="left") - np.arange(len(s)) - 1
    count = int(max(1, overlapping.max(initial=0) + 1))
    lanes = np.empty(len(s), np.int64)
    lanes[order] = np.arange(len(s)) % count
    return lanes, count


def _slice_block(
    stream: int,
    j: Journeys,
    k: int,
    rows: np.ndarray,
    running: np.ndarray,
    roles: np.ndarray,
    tids: np.ndarray,
    layout: _Layout,
    clock_err_ms: float | None = None,
) -> memoryview:
    """The JSON text of one block of slices of segment ``k`` (each line starts with ",\\n");
    a segment between clock domains carries its clock error (``clock_err_ms``)."""
    start, end = running[rows, k], running[rows, k + 1]
    value = j.times[rows, k + 1] - j.times[rows, k]
    pids = _pids_of(tids, layout)
    head = json.dumps(_segment_label(j, k))
    category = json.dumps(j.segment_kinds[k])
    flow_ids = stream * FLOW_ID_STRIDE + rows + 1
    parts = [
        ',\n{"ph":"X","name":',
        head,
        ',"cat":',
        category,
        ',"pid":',
        _text(pids),
        ',"tid":',
        _text(tids),
        ',"ts":',
        _micros(start),
        ',"dur":',
        _micros(end - start),
        _flow_text(roles[rows, k], flow_ids),
        ',"args":{"unit":',
        _text(rows),
        ',"position_ns":',
        _text(j.unit_start[rows]),
        ',"segment_ns":',
        _text(value),
        "" if clock_err_ms is None else f',"clock_err_ms":{json.dumps(clock_err_ms)}',
        "}}",
    ]
    joined = pc.binary_join_element_wise(*parts, "")
    return _concatenated(joined)


def _pids_of(tids: np.ndarray, layout: _Layout) -> np.ndarray:
    lookup = np.zeros(len(layout.tracks) + 1, np.int64)
    for track in layout.tracks.values():
        lookup[track.tid - TID_BASE] = track.pid
    return lookup[tids - TID_BASE]


def _text(values: np.ndarray) -> pa.Array:
    return pc.cast(pa.array(np.asarray(values, np.int64)), pa.string())


def _micros(ns: np.ndarray) -> pa.Array:
    """Nanoseconds as exact decimal microseconds (the trace-event unit): ``123.456``."""
    ns = np.asarray(ns, np.int64)
    whole = _text(ns // 1000)
    fraction = pc.utf8_lpad(_text(ns % 1000), 3, padding="0")
    return pc.binary_join_element_wise(whole, fraction, ".")


def _flow_text(roles: np.ndarray, flow_ids: np.ndarray) -> pa.Array:
    """The flow fields of each slice, by its role in its unit's flow."""
    ids = _text(flow_ids)
    pieces = [t.split("{}") for t in FLOW_TEXT]
    before = pc.take(pa.array([p[0] for p in pieces]), pa.array(roles.astype(np.int64)))
    after = pc.take(
        pa.array([p[-1] if len(p) > 1 else "" for p in pieces]), pa.array(roles.astype(np.int64))
    )
    with_id = pc.binary_join_element_wise(before, ids, after, "")
    return pc.if_else(pa.array(roles != NO_FLOW), with_id, "")


def _concatenated(strings: pa.Array) -> memoryview:
    """The bytes of a string array's values, end to end (a view, no copy)."""
    offsets = np.frombuffer(strings.buffers()[1], np.int32, len(strings) + 1, strings.offset * 4)
    data = strings.buffers()[2]
    return memoryview(data)[offsets[0] : offsets[-1]] if data is not None else memoryview(b"")


def _host_of(processes: list[dict[str, Any]], process: str) -> str:
    """A process's host when run.json does not say: the link for a link log, else its hostname."""
    trace = next((p for p in processes if p["name"] == process), None)
    if trace is None:
        return "browser" if process else "?"
    if trace.get("kind") == "link":
        return "link"
    return trace.get("hostname") or "localhost"
