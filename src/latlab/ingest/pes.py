"""PES records: where each MPEG-TS elementary-stream packet (a video frame, an audio frame) starts.

The tracer writes one ``pes`` record (event kind 3, ``docs/trace-format.md``) for
every PES start it finds in a buffer of transport-stream packets, at any pad. This
module turns those records into columns the stitcher joins on: the PES PTS in
90 kHz ticks crosses processes and hosts unchanged inside the transport stream.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from latlab.ingest.counters import unwrap
from latlab.ingest.trace_format import EVENT_DTYPE

PES_KIND = 3
RANDOM_ACCESS_FLAG = 8
AT_DONE_FLAG = 16  # an emulated link's record at a packet's release (its ``out`` probe)
PTS_WRAP = 1 << 33  # PES timestamps are 33-bit counts of a 90 kHz clock
NONE = -1


@dataclass
class PesTable:
    """PES starts seen at pads, one row each, in the order the tracer recorded them.

    ``pts``/``dts`` are 90 kHz ticks (``NONE`` if absent); ``prev_end_ns`` and
    ``prev_es_bytes`` describe the previous PES of the same PID at the same pad:
    when the buffer holding its last byte was pushed, and its elementary-stream
    size (``NONE`` if unknown).
    """

    pad_id: np.ndarray  # uint32
    t_ns: np.ndarray  # int64, push of the buffer holding the PES start
    pid: np.ndarray  # int32
    stream_id: np.ndarray  # uint8
    pts: np.ndarray  # int64
    dts: np.ndarray  # int64
    prev_end_ns: np.ndarray  # int64
    prev_es_bytes: np.ndarray  # int64
    random_access: np.ndarray  # bool
    thread_idx: np.ndarray  # uint32
    at_done: np.ndarray  # bool: belongs to the pad's render (done) probe

    def __len__(self) -> int:
        return len(self.t_ns)

    def select(self, mask: np.ndarray) -> PesTable:
        """The rows where ``mask`` is true."""
        return PesTable(**{name: getattr(self, name)[mask] for name in _FIELDS})


_FIELDS = tuple(PesTable.__dataclass_fields__)


def pes_table(records: np.ndarray) -> PesTable:
    """Columns of the ``pes`` records among ``records`` (a structured EVENT array)."""
    pes = records[records["kind"] == PES_KIND]

    def time(name: str) -> np.ndarray:
        return pes[name].view(np.int64)  # none (all ones) reads as -1

    return PesTable(
        pad_id=pes["pad_id"].copy(),
        t_ns=time("t_ns").copy(),
        pid=pes["rtp_ssrc"].astype(np.int32),
        stream_id=pes["rtp_pt"].copy(),
        pts=time("pts").copy(),
        dts=time("dts").copy(),
        prev_end_ns=time("offset").copy(),
        prev_es_bytes=time("offset_end").copy(),
        random_access=(pes["event_flags"] & RANDOM_ACCESS_FLAG) != 0,
        thread_idx=pes["thread_idx"].copy(),
        at_done=(pes["event_flags"] & AT_DONE_FLAG) != 0,
    )


def empty_pes_table() -> PesTable:
    """A table without rows."""
    return pes_table(np.empty(0, EVENT_DTYPE))


def ticks_to_ns(ticks: np.ndarray) -> np.ndarray:
    """90 kHz ticks to nanoseconds, unwrapping the 33-bit counter along the array's order."""
    return unwrap(ticks, PTS_WRAP) * 100_000 // 9
