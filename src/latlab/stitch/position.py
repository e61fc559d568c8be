"""Media positions: where each observed buffer sits in its stream's own timeline.

Positions are nanoseconds in the running time of the stream's origin (the PTS
of the source that produced the media). Each probe's events are mapped there:

* raw media in the origin process: its PTS and duration;
* RTP packets anywhere: looked up by (sequence number, RTP timestamp) in the
  table the payloader's output taught us (each packet's PTS and the next one's);
* raw media in a receiving process: its PTS, mapped through the knots that the
  receiver's last RTP probe gives (receiver PTS of each packet -> its position).

Every mapping is learned from observed events; nothing assumes a clock rate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

MISSING = -1


class _Column:
    """A column of ``ProbeEvents``, fetched on first use."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, events: ProbeEvents, owner: type | None = None) -> np.ndarray:
        return events.column(self.name)


class ProbeEvents:
    """The events of one probe, as columns fetched on first use.

    ``fetch(name)`` gives a column of all the probe's events; ``rows``, if
    given, picks some of them (in order).
    """

    t_ns = _Column()
    pts = _Column()
    duration = _Column()
    thread = _Column()
    is_rtp = _Column()
    ssrc = _Column()
    seq = _Column()
    rtp_ts = _Column()
    size = _Column()

    def __init__(self, fetch: Callable[[str], np.ndarray], rows: np.ndarray | None = None) -> None:
        self._fetch = fetch
        self._rows = rows
        self._columns: dict[str, np.ndarray] = {}

    def column(self, name: str) -> np.ndarray:
        """One column of the selected events."""
        if name not in self._columns:
            values = self._fetch(name)
            self._columns[name] = values if self._rows is None else values[self._rows]
        return self._columns[name]

    def select(self, mask: np.ndarray) -> ProbeEvents:
        """The events where ``mask`` is true."""
        if mask.all():
            return self
        rows = np.flatnonzero(mask)
        return ProbeEvents(self._fetch, rows if self._rows is None else self._rows[rows])

    def packet_keys(self) -> np.ndarray:
        """(sequence number, RTP timestamp) packed into one integer per packet."""
        return (self.seq.astype(np.int64) << 32) | self.rtp_ts.astype(np.int64)


@dataclass
class Ranges:
    """Media ranges [start, end) of a probe's events, with their times and threads."""

    start: np.ndarray
    end: np.ndarray
    t_ns: np.ndarray
    thread: np.ndarray


def empty_ranges() -> Ranges:
    """Ranges of no event."""
    empty = np.empty(0, np.int64)
    return Ranges(empty, empty, empty, np.empty(0, np.int32))


@dataclass
class PacketTable:
    """What the first RTP probe of a stream teaches: each packet's media range."""

    keys: np.ndarray  # sorted packet keys
    start: np.ndarray
    end: np.ndarray


def _distinct_sorted(values: np.ndarray) -> np.ndarray:
    """Distinct values of a sorted array (cheaper than np.unique)."""
    if len(values) == 0:
        return values
    return values[np.concatenate([[True], values[1:] != values[:-1]])]


def _ends_from_starts(start: np.ndarray) -> np.ndarray:
    """End of each range = the next distinct start; the last gets the median step."""
    order = np.argsort(start, kind="stable")
    sorted_start = start[order]
    uniq = _distinct_sorted(sorted_start)
    if len(uniq) < 2:
        return start + 1
    step = int(np.median(np.diff(uniq)))
    nxt_idx = np.searchsorted(uniq, sorted_start, side="right")
    nxt = np.where(
        nxt_idx < len(uniq), uniq[np.minimum(nxt_idx, len(uniq) - 1)], sorted_start + step
    )
    end = np.empty_like(start)
    end[order] = nxt
    return end


def raw_ranges(ev: ProbeEvents) -> Ranges:
    """Ranges of raw media whose PTS is already a position (origin process)."""
    ok = ev.pts >= 0
    ev = ev.select(ok)
    end = np.where(ev.duration > 0, ev.pts + ev.duration, -1)
    if np.any(end < 0):
        guessed = _ends_from_starts(ev.pts)
        end = np.where(end < 0, guessed, end)
    return Ranges(ev.pts, end, ev.t_ns, ev.thread)


def learn_packet_table(ev: ProbeEvents, ssrc: int) -> PacketTable:
    """Learn each packet's media range from the probe where packets are made (payloader)."""
    ev = ev.select(ev.is_rtp & (ev.ssrc == ssrc) & (ev.pts >= 0))
    keys, first = np.unique(ev.packet_keys(), return_index=True)
    start = ev.pts[first]
    end = _ends_from_starts(start)
    # Packets of equal PTS (a frame split over several packets) share the frame's range.
    return PacketTable(keys, start, end)


@dataclass(frozen=True)
class RtpClock:
    """Positions counted on a stream's RTP clock: ``base`` is the RTP timestamp at
    position 0 and ``rate`` the clock rate (Hz)."""

    base: int
    rate: int

    def position_ns(self, rtp_ts: np.ndarray) -> np.ndarray:
        """Positions of (32-bit) RTP timestamps near the base, in ns."""
        ticks = ((rtp_ts.astype(np.int64) - self.base + (1 << 31)) & 0xFFFF_FFFF) - (1 << 31)
        return ticks * 1_000_000_000 // self.rate


def learn_rtp_clock_table(ev: ProbeEvents, ssrc: int, rate: int) -> tuple[PacketTable, RtpClock]:
    """Each packet's media range from its RTP timestamp, where packets enter the trace
    with no media time of their own (sent by a process latlab did not trace)."""
    ev = ev.select(ev.is_rtp & (ev.ssrc == ssrc))
    keys, first = np.unique(ev.packet_keys(), return_index=True)
    ordered = np.sort(first)
    clock = RtpClock(int(ev.rtp_ts[ordered[0]]) if len(ordered) else 0, rate)
    start = clock.position_ns(ev.rtp_ts[first])
    return PacketTable(keys, start, _ends_from_starts(start)), clock


def _lookup_packets(ev: ProbeEvents, table: PacketTable) -> tuple[np.ndarray, np.ndarray]:
    """Each event's row in the packet table, and whether its packet is there at all."""
    keys = ev.packet_keys()
    idx = np.searchsorted(table.keys, keys)
    if len(table.keys) == 0:
        return idx, np.zeros(len(keys), bool)
    np.minimum(idx, len(table.keys) - 1, out=idx)
    return idx, table.keys[idx] == keys


def rtp_ranges(ev: ProbeEvents, table: PacketTable, ssrc: int) -> Ranges:
    """Ranges of RTP packets, looked up in the packet table."""
    ev = ev.select(ev.is_rtp & (ev.ssrc == ssrc))
    idx, found = _lookup_packets(ev, table)
    idx = idx[found]
    return Ranges(table.start[idx], table.end[idx], ev.t_ns[found], ev.thread[found])


def receiver_knots(ev: ProbeEvents, table: PacketTable, ssrc: int) -> tuple[np.ndarray, np.ndarray]:
    """Knots mapping a receiver's PTS to positions, from its RTP probe nearest the raw media."""
    ev = ev.select(ev.is_rtp & (ev.ssrc == ssrc) & (ev.pts >= 0))
    idx, found = _lookup_packets(ev, table)
    recv_pts = ev.pts[found]
    pos = table.start[idx[found]]
    if not _non_decreasing(recv_pts):
        order = np.argsort(recv_pts, kind="stable")
        recv_pts, pos = recv_pts[order], pos[order]
    first = np.concatenate([[True], recv_pts[1:] != recv_pts[:-1]])
    return recv_pts[first], pos[first]


def map_through_knots(pts: np.ndarray, knots_x: np.ndarray, knots_y: np.ndarray) -> np.ndarray:
    """Map receiver PTS to positions: the latest knot at or before it, plus the offset.

    Offsets from a packet's PTS are media time (a depayloader, decoder or
    splitter counts samples from it), even where the packets' own PTS are
    stretched by a skew-correcting jitter buffer, so nothing is interpolated.
    """
    if len(knots_x) == 0:
        return np.full(len(pts), MISSING, np.int64)
    i = np.maximum(np.searchsorted(knots_x, pts, side="right") - 1, 0)
    return knots_y[i] + (pts - knots_x[i])


def mapped_ranges(ev: ProbeEvents, knots: tuple[np.ndarray, np.ndarray]) -> Ranges:
    """Ranges of raw media in a receiving process: PTS mapped through the knots, durations kept."""
    ok = ev.pts >= 0
    ev = ev.select(ok)
    start = map_through_knots(ev.pts, *knots)
    end = start + ev.duration
    if np.any(ev.duration <= 0):
        end = np.where(ev.duration > 0, end, _ends_from_starts(start))
    return Ranges(start, end, ev.t_ns, ev.thread)


def _non_decreasing(values: np.ndarray) -> bool:
    return bool(np.all(values[1:] >= values[:-1]))


def first_covering(
    ranges: Ranges,
    positions: np.ndarray,
    grid_step: int | None = None,
    out: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """For each position, the time (and thread) of the earliest event whose range covers it.

    ``positions`` are sorted; ``grid_step``, if given, says they are evenly
    spaced by that many ns (which makes the search linear). Returns
    ``(t_ns, thread)`` (int64, int32) with MISSING where no event covers the
    position, written into ``out`` if given.
    """
    if out is None:
        out = (np.empty(len(positions), np.int64), np.empty(len(positions), np.int32))
    t_out, thr_out = out
    if len(ranges.start) == 0 or len(positions) == 0:
        t_out[:] = MISSING
        thr_out[:] = MISSING
        return t_out, thr_out
    start, end, t_ns, thread = ranges.start, ranges.end, ranges.t_ns, ranges.thread
    if not (_non_decreasing(start) and _non_decreasing(t_ns)):  # else already in order
        order = np.lexsort((t_ns, start))
        start, end, t_ns, thread = start[order], end[order], t_ns[order], thread[order]
    new_start = start[1:] != start[:-1]
    if not new_start.all():  # keep the earliest event of each distinct start
        first = np.flatnonzero(np.concatenate([[True], new_start]))
        start, end = start[first], np.maximum.reduceat(end, first)
        t_ns, thread = t_ns[first], thread[first]
    idx = _count_at_or_below(start, positions, grid_step) - 1
    covered = idx >= 0
    np.maximum(idx, 0, out=idx)
    covered &= positions < end[idx]
    np.take(t_ns, idx, out=t_out, mode="clip")
    np.take(thread.astype(np.int32, copy=False), idx, out=thr_out, mode="clip")
    uncovered = ~covered
    t_out[uncovered] = MISSING
    thr_out[uncovered] = MISSING
    return t_out, thr_out


def _count_at_or_below(
    sorted_values: np.ndarray, positions: np.ndarray, grid_step: int | None
) -> np.ndarray:
    """For each sorted position, how many of the sorted values are <= it."""
    if grid_step is None:
        return np.searchsorted(sorted_values, positions, side="right")
    # The first grid position at or above each value: ceil((value - p0) / step).
    first_at_or_above = -((positions[0] - sorted_values) // grid_step)
    np.clip(first_at_or_above, 0, len(positions), out=first_at_or_above)
    counts = np.bincount(first_at_or_above, minlength=len(positions) + 1)[:-1]
    return np.cumsum(counts)
