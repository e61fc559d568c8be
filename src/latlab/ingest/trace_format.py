"""Constants and record layouts of the latlab trace format (docs/trace-format.md)."""

from __future__ import annotations

from enum import IntEnum

import numpy as np

MAGIC = b"LLTRACE\0"
VERSION = 1
HEADER_SIZE = 32
RECORD_SIZE = 80
NONE_U64 = np.uint64(0xFFFF_FFFF_FFFF_FFFF)

HEADER_DTYPE = np.dtype(
    [
        ("magic", "S8"),
        ("version", "<u2"),
        ("header_size", "<u2"),
        ("record_size", "<u2"),
        ("reserved0", "<u2"),
        ("pid", "<u4"),
        ("reserved1", "<u4"),
        ("start_mono_ns", "<u8"),
    ]
)

EVENT_DTYPE = np.dtype(
    [
        ("t_ns", "<u8"),
        ("pts", "<u8"),
        ("dts", "<u8"),
        ("duration", "<u8"),
        ("offset", "<u8"),
        ("offset_end", "<u8"),
        ("pad_id", "<u4"),
        ("thread_idx", "<u4"),
        ("size", "<u4"),
        ("buffer_flags", "<u4"),
        ("rtp_ssrc", "<u4"),
        ("rtp_ts", "<u4"),
        ("rtp_seq", "<u2"),
        ("rtp_pt", "u1"),
        ("kind", "u1"),
        ("event_flags", "u1"),
        ("reserved", "u1"),
        ("list_index", "<u2"),
    ]
)
assert EVENT_DTYPE.itemsize == RECORD_SIZE
assert HEADER_DTYPE.itemsize == HEADER_SIZE


class Chunk(IntEnum):
    """Chunk types."""

    INFO = 1
    PAD = 2
    THREAD = 3
    EVENTS = 4
    CAPS = 5
    CLOCK = 6
    DROPS = 7
    END = 8
    STATS = 9
    SEGMENT = 10
    LATENCY = 11


class Kind(IntEnum):
    """Event kinds."""

    PUSH = 0
    DONE = 1
    EOS = 2
    PES = 3
    FWD = 4  # an SFU forwarded a packet on one subscriber leg (latlab-sfu)


class EventFlag:
    """Bits of an event record's flags byte."""

    RTP = 1
    MARKER = 2
    IN_LIST = 4
    RANDOM_ACCESS = 8  # pes records: the TS packet's random_access_indicator


class PadFlag:
    """Bits of a PAD chunk's flags."""

    SRC = 1
    PEER_IS_SINK = 2
    GHOST_OR_PROXY = 4
    ELEMENT_IS_SOURCE = 8
    ELEMENT_IS_SINK = 16
    ELEMENT_PULLS = 32  # a sink pad of the element is in pull mode (wavparse after filesrc)


class ClockFlag:
    """Bits of a CLOCK chunk's flags."""

    SYSTEM_MONOTONIC = 1
