"""Write latlab trace files from Python.

The GStreamer tracer writes traces natively; this writer produces the same
format for synthetic runs with known answers (tests, benchmarks) and for
probes implemented in Python.
"""

from __future__ import annotations

import struct
from pathlib import Path
from types import TracebackType
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


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<H", len(raw)) + raw


class TraceWriter:
    """Write one trace file chunk by chunk (a context manager; closing writes END)."""

    def __init__(self, path: Path | str, pid: int, start_mono_ns: int = 0) -> None:
        self._file: BinaryIO = open(path, "wb")  # noqa: SIM115 - closed in close()
        header = np.zeros(1, HEADER_DTYPE)
        header["magic"] = MAGIC
        header["version"] = VERSION
        header["header_size"] = HEADER_SIZE
        header["record_size"] = RECORD_SIZE
        header["pid"] = pid
        header["start_mono_ns"] = start_mono_ns
        self._file.write(header.tobytes())
        self._events = 0

    def _chunk(self, ctype: Chunk, payload: bytes) -> None:
        self._file.write(struct.pack("<II", ctype, len(payload)) + payload)

    def info(self, **values: str) -> None:
        """Write an INFO chunk."""
        self._chunk(Chunk.INFO, b"".join(_string(k) + _string(v) for k, v in values.items()))

    def pad(
        self,
        pad_id: int,
        element: str,
        pad: str = "src",
        *,
        flags: int = 1,
        pipeline_id: int = 1,
        factory: str = "",
        klass: str = "",
        peer_element: str = "",
        peer_pad: str = "sink",
        peer_factory: str = "",
        path: str = "pipeline0",
    ) -> None:
        """Write a PAD chunk."""
        names = (element, pad, factory, klass, peer_element, peer_pad, peer_factory, path)
        payload = struct.pack("<IIQ", pad_id, flags, pipeline_id)
        self._chunk(Chunk.PAD, payload + b"".join(_string(n) for n in names))

    def thread(self, idx: int, tid: int, name: str) -> None:
        """Write a THREAD chunk."""
        self._chunk(Chunk.THREAD, struct.pack("<II", idx, tid) + _string(name))

    def caps(self, pad_id: int, t_ns: int, caps: str) -> None:
        """Write a CAPS chunk."""
        self._chunk(Chunk.CAPS, struct.pack("<IQ", pad_id, t_ns) + _string(caps))

    def clock(
        self,
        pipeline_id: int,
        mono_ns: int,
        clock_ns: int,
        base_time: int,
        *,
        state: int = 4,
        flags: int = 1,
        pipeline: str = "pipeline0",
        clock: str = "GstSystemClock",
    ) -> None:
        """Write a CLOCK chunk."""
        fields = struct.pack("<QQQQII", pipeline_id, mono_ns, clock_ns, base_time, state, flags)
        self._chunk(Chunk.CLOCK, fields + _string(pipeline) + _string(clock))

    def segment(
        self, pad_id: int, t_ns: int, *, start: int = 0, base: int = 0, rate: float = 1.0
    ) -> None:
        """Write a SEGMENT chunk for a time segment (offset 0, other times none)."""
        none = -1
        fields = struct.pack("<IQIIdd", pad_id, t_ns, 3, 0, rate, 1.0)
        fields += struct.pack("<7q", base, 0, start, none, 0, start, none)
        self._chunk(Chunk.SEGMENT, fields)

    def events(self, records: np.ndarray) -> None:
        """Write an EVENTS chunk from an array of EVENT_DTYPE records."""
        records = np.ascontiguousarray(records, dtype=EVENT_DTYPE)
        self._chunk(Chunk.EVENTS, records.tobytes())
        self._events += len(records)

    def close(self, t_ns: int = 0, dropped: int = 0, *, clean: bool = True) -> None:
        """Close the file, with an END chunk unless ``clean`` is False (a crash)."""
        if clean:
            self._chunk(Chunk.END, struct.pack("<QQQ", t_ns, self._events, dropped))
        self._file.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._file.closed:
            self.close()
