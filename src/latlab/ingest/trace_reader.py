"""Read one latlab trace file (docs/trace-format.md) into columnar arrays.

The reader is defensive: a truncated or partly corrupt file yields everything
that was complete before the damage, and says what was lost in ``Trace.problems``.
Files are memory-mapped: event records are gathered from where they lie, in
whatever order the caller needs, without first copying the file.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from latlab.errors import UserInputError
from latlab.ingest.trace_format import (
    EVENT_DTYPE,
    HEADER_DTYPE,
    HEADER_SIZE,
    MAGIC,
    RECORD_SIZE,
    VERSION,
    Chunk,
)

# INFO key of a tracer that caught a panic of its own and stopped (docs/trace-format.md).
FAULT_KEY = "tracer_fault"


class TraceError(UserInputError):
    """A trace file that cannot be used at all; ``str()`` is one line naming the file."""


@dataclass
class PadInfo:
    """A pad that carried data in a traced process."""

    pad_id: int
    flags: int
    pipeline_id: int
    element: str
    pad: str
    factory: str
    klass: str
    peer_element: str
    peer_pad: str
    peer_factory: str
    path: str


@dataclass
class ClockRecord:
    """A sample of a pipeline's clock against CLOCK_MONOTONIC."""

    pipeline_id: int
    mono_ns: int
    clock_ns: int
    base_time: int
    state: int
    flags: int
    pipeline: str
    clock: str


@dataclass
class StatsRecord:
    """One reading of an element's ``stats`` property (a STATS chunk)."""

    t_ns: int
    element: str
    factory: str
    fields: dict


@dataclass
class SegmentRecord:
    """A segment event seen at a pad (a SEGMENT chunk); times in ns, none is -1."""

    pad_id: int
    t_ns: int
    format: int  # GstFormat: 3 = time
    flags: int
    rate: float
    applied_rate: float
    base: int
    offset: int
    start: int
    stop: int
    time: int
    position: int
    duration: int


@dataclass
class Trace:
    """Everything one trace file holds."""

    path: Path
    pid: int
    start_mono_ns: int
    info: dict[str, str] = field(default_factory=dict)
    pads: dict[int, PadInfo] = field(default_factory=dict)
    threads: dict[int, tuple[int, str]] = field(default_factory=dict)
    caps: list[tuple[int, int, str]] = field(default_factory=list)
    clocks: list[ClockRecord] = field(default_factory=list)
    stats: list[StatsRecord] = field(default_factory=list)
    segments: list[SegmentRecord] = field(default_factory=list)
    latencies: list[tuple[int, int, int]] = field(default_factory=list)  # pad, t_ns, latency
    events: np.ndarray = field(default_factory=lambda: np.empty(0, EVENT_DTYPE))
    dropped: int = 0
    complete: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def process(self) -> str:
        """The latlab process name the tracer recorded (falls back to the pid)."""
        return self.info.get("process") or f"pid{self.pid}"


class _Cursor:
    """Sequential reader of little-endian fields from a bytes payload."""

    def __init__(self, data: bytes | memoryview) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def unpack(self, fmt: str) -> tuple:
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return values

    def string(self, errors: str = "replace") -> str:
        """The next u16-length-prefixed UTF-8 string; ``errors`` as for ``bytes.decode``."""
        (length,) = self.unpack("<H")
        raw = bytes(self.data[self.pos : self.pos + length])
        if len(raw) != length:
            raise struct.error("string runs past the chunk")
        self.pos += length
        return raw.decode("utf-8", errors=errors)

    def at_end(self) -> bool:
        return self.pos >= len(self.data)


def read_trace(path: Path | str) -> Trace:
    """Read a trace file; raises TraceError only when nothing in it can be used."""
    with open_trace(path) as (trace, records):
        trace.events = records.gather()
    return trace


class EventRecords:
    """The event records of a memory-mapped trace file, read where they lie.

    Records sit in EVENTS chunks between chunk headers; ``offsets`` holds the
    byte offset of each complete record, in file order.
    """

    def __init__(self, data: mmap.mmap | bytes, offsets: np.ndarray) -> None:
        self.data = data
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.offsets)

    def field(self, name: str) -> np.ndarray:
        """One field of every record, in file order."""
        dtype, offset = EVENT_DTYPE.fields[name][:2]
        return self._at_every_byte(dtype, offset)[self.offsets]

    def gather(self, rows: np.ndarray | None = None) -> np.ndarray:
        """Whole records (those of ``rows`` in that order, else all) as one EVENT_DTYPE array."""
        offsets = self.offsets if rows is None else self.offsets[rows]
        return self._at_every_byte(np.dtype((np.void, RECORD_SIZE)))[offsets].view(EVENT_DTYPE)

    def _at_every_byte(self, dtype: np.dtype, offset: int = 0) -> np.ndarray:
        """A view whose element i is the value stored at byte ``i + offset`` of the file."""
        count = max(len(self.data) - offset - dtype.itemsize + 1, 0)
        if count == 0:  # a file too short to hold a record (no offsets point into it)
            return np.empty(0, dtype)
        return np.ndarray((count,), dtype, buffer=self.data, offset=offset, strides=(1,))


@contextmanager
def open_trace(path: Path | str) -> Iterator[tuple[Trace, EventRecords]]:
    """A trace's metadata, read, and its event records, mapped (valid inside the block).

    Raises TraceError only when nothing in the file can be used.
    """
    path = Path(path)
    try:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            header = _read_header(path, f.read(HEADER_SIZE))
            data = mmap.mmap(f.fileno(), size, flags=_MAP_FLAGS, prot=mmap.PROT_READ)
    except OSError as exc:
        raise TraceError(f"{path}: cannot read trace: {exc.strerror or exc}") from None
    trace = Trace(path=path, pid=int(header["pid"]), start_mono_ns=int(header["start_mono_ns"]))
    try:
        records = EventRecords(data, _walk_chunks(trace, data, int(header["header_size"])))
        if not trace.complete and not trace.problems:
            trace.problems.append("no END record: the process did not close its trace cleanly")
        if FAULT_KEY in trace.info:
            trace.problems.append(
                f"the tracer stopped recording after an internal error ({trace.info[FAULT_KEY]})"
            )
        yield trace, records
    finally:
        data.close()


_MAP_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)  # map the whole file at once


def _read_header(path: Path, data: bytes) -> np.void:
    if len(data) < HEADER_SIZE:
        raise TraceError(f"{path}: not a latlab trace (file is {len(data)} bytes, too short)")
    if data[: len(MAGIC)] != MAGIC:
        raise TraceError(f"{path}: not a latlab trace (bad magic)")
    header = np.frombuffer(data[:HEADER_SIZE], dtype=HEADER_DTYPE)[0]
    if int(header["version"]) != VERSION:
        raise TraceError(
            f"{path}: unknown trace version {int(header['version'])} (this latlab reads {VERSION})"
        )
    if int(header["record_size"]) != RECORD_SIZE:
        raise TraceError(f"{path}: unexpected event record size {int(header['record_size'])}")
    return header


def _walk_chunks(trace: Trace, data: mmap.mmap, offset: int) -> np.ndarray:
    """Apply the metadata chunks; return the byte offsets of the event records.

    Damage is recorded in trace.problems.
    """
    size = len(data)
    starts: list[int] = []
    counts: list[int] = []
    while offset < size:
        if offset + 8 > size:
            trace.problems.append(f"truncated at byte {offset}: partial chunk header")
            break
        ctype, length = struct.unpack_from("<II", data, offset)
        if offset + 8 + length > size:
            trace.problems.append(
                f"truncated at byte {offset}: chunk of {length} bytes, {size - offset - 8} present"
            )
            break
        body, offset = offset + 8, offset + 8 + length
        if ctype == Chunk.EVENTS:
            if length % RECORD_SIZE:
                trace.problems.append(f"corrupt EVENTS chunk at byte {body - 8}")
            starts.append(body)
            counts.append(length // RECORD_SIZE)
            continue
        try:
            _apply_chunk(trace, ctype, memoryview(data[body:offset]))
        except (struct.error, ValueError):  # ValueError: bad UTF-8 or JSON
            trace.problems.append(f"corrupt chunk of type {ctype} at byte {body - 8}")
    return _record_offsets(np.array(starts, np.int64), np.array(counts, np.int64))


def _record_offsets(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Byte offsets of every record, given each EVENTS chunk's first byte and record count."""
    offsets = np.arange(int(counts.sum()), dtype=np.int64)
    offsets *= RECORD_SIZE
    first_row = np.cumsum(counts) - counts
    offsets += np.repeat(starts - RECORD_SIZE * first_row, counts)
    return offsets


def _apply_chunk(trace: Trace, ctype: int, payload: memoryview) -> None:
    cur = _Cursor(payload)
    if ctype == Chunk.INFO:
        while not cur.at_end():
            key = cur.string()
            trace.info[key] = cur.string()
    elif ctype == Chunk.PAD:
        pad_id, flags, pipeline_id = cur.unpack("<IIQ")
        names = [cur.string() for _ in range(8)]
        trace.pads[pad_id] = PadInfo(pad_id, flags, pipeline_id, *names)
    elif ctype == Chunk.THREAD:
        idx, tid = cur.unpack("<II")
        trace.threads[idx] = (tid, cur.string())
    elif ctype == Chunk.CAPS:
        pad_id, t_ns = cur.unpack("<IQ")
        trace.caps.append((pad_id, t_ns, cur.string()))
    elif ctype == Chunk.CLOCK:
        fields = cur.unpack("<QQQQII")
        trace.clocks.append(ClockRecord(*fields, cur.string(), cur.string()))
    elif ctype == Chunk.DROPS:
        _, dropped = cur.unpack("<QQ")
        trace.dropped = max(trace.dropped, dropped)
    elif ctype == Chunk.STATS:
        (t_ns,) = cur.unpack("<Q")
        element, factory, text = cur.string(), cur.string(), cur.string(errors="strict")
        fields = json.loads(text)
        if not isinstance(fields, dict):
            raise ValueError("STATS payload is not a JSON object")
        trace.stats.append(StatsRecord(t_ns, element, factory, fields))
    elif ctype == Chunk.LATENCY:
        trace.latencies.append(cur.unpack("<IQQ"))
    elif ctype == Chunk.SEGMENT:
        trace.segments.append(SegmentRecord(*cur.unpack("<IQIIdd7q")))
    elif ctype == Chunk.END:
        _, _, dropped = cur.unpack("<QQQ")
        trace.dropped = max(trace.dropped, dropped)
        trace.complete = True
