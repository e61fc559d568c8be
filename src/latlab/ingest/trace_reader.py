"""Read one latlab trace file (docs/trace-format.md) into columnar arrays.

The reader is defensive: a truncated or partly corrupt file yields everything
that was complete before the damage, and says what was lost in ``Trace.problems``.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np

from latlab.ingest.trace_format import (
    EVENT_DTYPE,
    HEADER_DTYPE,
    HEADER_SIZE,
    MAGIC,
    RECORD_SIZE,
    VERSION,
    Chunk,
)


class TraceError(Exception):
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

    def string(self) -> str:
        (length,) = self.unpack("<H")
        raw = bytes(self.data[self.pos : self.pos + length])
        if len(raw) != length:
            raise struct.error("string runs past the chunk")
        self.pos += length
        return raw.decode("utf-8", errors="replace")

    def at_end(self) -> bool:
        return self.pos >= len(self.data)


def read_trace(path: Path | str) -> Trace:
    """Read a trace file; raises TraceError only when nothing in it can be used.

    Event payloads are read straight into one preallocated record array, so
    memory stays at about the size of the file.
    """
    path = Path(path)
    try:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(HEADER_SIZE)
            header = _read_header(path, head)
            trace = Trace(
                path=path, pid=int(header["pid"]), start_mono_ns=int(header["start_mono_ns"])
            )
            f.seek(int(header["header_size"]))
            trace.events = _read_chunks(trace, f, size)
    except OSError as exc:
        raise TraceError(f"{path}: cannot read trace: {exc.strerror or exc}") from None
    if not trace.complete and not trace.problems:
        trace.problems.append("no END record: the process did not close its trace cleanly")
    return trace


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


def _read_chunks(trace: Trace, f: BinaryIO, size: int) -> np.ndarray:
    """Walk the chunks; return the events. Damage is recorded in trace.problems."""
    records = np.empty(max(size - HEADER_SIZE, 0) // RECORD_SIZE, EVENT_DTYPE)
    raw = memoryview(records.view(np.uint8))
    count = 0
    offset = f.tell()
    while offset < size:
        head = f.read(8)
        if len(head) < 8:
            trace.problems.append(f"truncated at byte {offset}: partial chunk header")
            break
        ctype, length = struct.unpack("<II", head)
        if offset + 8 + length > size:
            trace.problems.append(
                f"truncated at byte {offset}: chunk of {length} bytes, {size - offset - 8} present"
            )
            break
        offset += 8 + length
        if ctype == Chunk.EVENTS:
            usable = length - length % RECORD_SIZE
            if usable != length:
                trace.problems.append(f"corrupt EVENTS chunk at byte {offset - length - 8}")
            f.readinto(raw[count * RECORD_SIZE : count * RECORD_SIZE + usable])
            f.seek(length - usable, os.SEEK_CUR)
            count += usable // RECORD_SIZE
            continue
        payload = f.read(length)
        try:
            _apply_chunk(trace, ctype, memoryview(payload))
        except (struct.error, UnicodeDecodeError):
            trace.problems.append(f"corrupt chunk of type {ctype} at byte {offset - length - 8}")
    return records[:count]


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
    elif ctype == Chunk.END:
        _, _, dropped = cur.unpack("<QQQ")
        trace.dropped = max(trace.dropped, dropped)
        trace.complete = True
