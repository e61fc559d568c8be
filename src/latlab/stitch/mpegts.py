"""Stitching through MPEG-TS: frames followed by the PTS in their PES headers.

A transport stream carries no RTP, so the join across processes is the PES
start: its PID and 33-bit PTS are written by the muxer and read back unchanged
wherever the stream goes (SRT, UDP, files). Three mappings are learned from the
observed events, none assumed:

* sender: PES PTS -> media position. The muxer stamps ``running time + C``;
  ``C`` is the offset most pairs of (muxer input, PES) of equal elementary-stream
  size agree on. Each PES then snaps to the muxer input position it came from.
* network: the same (PID, PTS) at a receiver's source is the same frame.
* receiver: a demuxer's output buffer is the PES whose bytes it holds: the latest
  PES completed before the output with the same size, and among equal sizes the
  one whose PTS offset agrees with the others. The demuxer's output PTS then maps
  every later probe of the receiver (parser, decoder, sink) to positions.

At a transport-stream probe a frame has two instants: its first byte (the buffer
holding its PES start) and its last byte (the buffer holding the last TS packet
of its PID before the next PES start).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from latlab.ingest.pes import PTS_WRAP, PesTable, ticks_to_ns
from latlab.stitch.position import MISSING, ProbeEvents, Ranges, empty_ranges

TS_MUXERS = {"mpegtsmux", "mpegtsmux2"}
TS_DEMUXERS = {"tsdemux"}
SIZE_SHIFT = 38  # composite (size, time) keys: time in 100 us steps below this bit
TIME_STEP_NS = 100_000
CANDIDATES = 6  # completed PES considered per demuxer output (it may hold a few)
SNAP_TOLERANCE_NS = 1_000_000  # a PES PTS is within 90 kHz rounding of its input position


@dataclass
class PesFrames:
    """PES starts at one probe, with their positions and first/last-byte instants."""

    keys: np.ndarray  # (pid << 33) | pts ticks
    position: np.ndarray  # media position, MISSING where unknown
    end: np.ndarray  # end of the frame's media range (its input buffer's), MISSING if unknown
    first_ns: np.ndarray  # push of the buffer with the PES start
    last_ns: np.ndarray  # push of the buffer with its last byte, MISSING if unknown
    es_bytes: np.ndarray  # elementary-stream bytes, MISSING if unknown
    random_access: np.ndarray
    thread: np.ndarray


def pes_keys(pes: PesTable) -> np.ndarray:
    """One integer per PES start: its PID and PTS."""
    return (pes.pid.astype(np.int64) << 33) | (pes.pts % PTS_WRAP)


def _with_completion(pes: PesTable, thread: np.ndarray) -> PesFrames:
    """Each PES start with its last-byte time and size (told by the next start of its PID)."""
    n = len(pes)
    last = np.full(n, MISSING, np.int64)
    size = np.full(n, MISSING, np.int64)
    order = np.lexsort((np.arange(n), pes.pid))  # by PID, then recording order
    same_pid_next = pes.pid[order[1:]] == pes.pid[order[:-1]]
    here, nxt = order[:-1][same_pid_next], order[1:][same_pid_next]
    last[here] = pes.prev_end_ns[nxt]
    size[here] = pes.prev_es_bytes[nxt]
    has_pts = pes.pts >= 0
    return PesFrames(
        keys=np.where(has_pts, pes_keys(pes), MISSING),
        position=np.full(n, MISSING, np.int64),
        end=np.full(n, MISSING, np.int64),
        first_ns=pes.t_ns,
        last_ns=last,
        es_bytes=size,
        random_access=pes.random_access,
        thread=thread,
    )


def _composite(size: np.ndarray, t_ns: np.ndarray, t0: int) -> np.ndarray:
    return (size.astype(np.int64) << SIZE_SHIFT) | ((t_ns - t0) // TIME_STEP_NS)


def _latest_equal_size_before(
    size: np.ndarray, t_ns: np.ndarray, want_size: np.ndarray, before_ns: np.ndarray
) -> np.ndarray:
    """For each query, the index of the latest event of equal size at or before the time."""
    t0 = int(min(t_ns.min(initial=0), before_ns.min(initial=0)))
    keys = _composite(size, t_ns, t0)
    order = np.argsort(keys, kind="stable")
    query = _composite(want_size, before_ns, t0)
    idx = np.searchsorted(keys[order], query, side="right") - 1
    found = idx >= 0
    hit = order[np.maximum(idx, 0)]
    found &= size[hit] == want_size
    return np.where(found, hit, -1)


MuxInputs = dict[int, tuple[Ranges, np.ndarray]]  # PID -> (ranges, ES sizes) entering the mux


def sender_frames(pes: PesTable, thread: np.ndarray, inputs: MuxInputs, pid: int) -> PesFrames:
    """One PID's PES starts at a muxer, with the position of the input buffer each carries.

    ``pes`` holds every PID's PES starts at the muxer's output, ``inputs`` every
    input stream (range starts are positions: running time). The muxer adds one
    offset to the running time of all its streams, so the PIDs whose PES carry
    their input unchanged (video) tell it for those that do not (AAC gains a
    header).
    """
    offset = _mux_offset(pes, thread, inputs)
    mine = pes.select(pes.pid == pid)
    frames = _with_completion(mine, thread[pes.pid == pid])
    if offset is None or pid not in inputs:
        return frames
    ranges, _ = inputs[pid]
    order = np.argsort(ranges.start, kind="stable")
    grid, ends = ranges.start[order], ranges.end[order]
    position = _snap(ticks_to_ns(mine.pts % PTS_WRAP) - offset, grid)
    placed = (frames.keys >= 0) & (position >= 0)
    frames.position = np.where(placed, position, MISSING)
    idx = np.clip(np.searchsorted(grid, position), 0, max(len(grid) - 1, 0))
    frames.end = np.where(placed, ends[idx] if len(ends) else MISSING, MISSING)
    frames.end = _through_next_pes(frames.position, frames.end)
    return frames


def _through_next_pes(position: np.ndarray, end: np.ndarray) -> np.ndarray:
    """A PES holds everything up to the next PES start (a muxer may put several audio
    frames in one PES): extend each range to the next placed position."""
    placed = np.flatnonzero(position >= 0)
    order = placed[np.argsort(position[placed], kind="stable")]
    out = end.copy()
    nxt = position[order[1:]]
    out[order[:-1]] = np.maximum(end[order[:-1]], nxt)
    return out


def _mux_offset(pes: PesTable, thread: np.ndarray, inputs: MuxInputs) -> int | None:
    """PES PTS (ns) minus input running time: what most equal-size pairs agree on."""
    offsets = []
    for pid, (ranges, sizes) in inputs.items():
        frames = _with_completion(pes.select(pes.pid == pid), thread[pes.pid == pid])
        known = (frames.es_bytes >= 0) & (frames.keys >= 0)
        if not known.any() or not len(ranges.start):
            continue
        j = _latest_equal_size_before(
            sizes, ranges.t_ns, frames.es_bytes[known], frames.first_ns[known]
        )
        pts_ns = ticks_to_ns(frames.keys[known] & (PTS_WRAP - 1))
        offsets.append((pts_ns - ranges.start[np.maximum(j, 0)])[j >= 0])
    found = np.concatenate(offsets) if offsets else np.empty(0, np.int64)
    return _mode(found, SNAP_TOLERANCE_NS) if len(found) else None


def _mode(values: np.ndarray, width: int) -> int:
    """The median of the values in the most populated bin of ``width``."""
    bins = values // width
    uniq, counts = np.unique(bins, return_counts=True)
    best = uniq[np.argmax(counts)]
    near = values[np.abs(bins - best) <= 1]
    return int(np.median(near))


def _snap(values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Each value replaced by the nearest grid point within tolerance, else MISSING."""
    if not len(grid):
        return np.full(len(values), MISSING, np.int64)
    nearest = grid[_nearest(grid, values)]
    return np.where(np.abs(nearest - values) <= SNAP_TOLERANCE_NS, nearest, MISSING)


def receiver_frames(pes: PesTable, thread: np.ndarray, sender: PesFrames) -> PesFrames:
    """A receiver's PES starts, positioned by the same (PID, PTS) at the sender."""
    frames = _with_completion(pes, thread)
    known = sender.keys >= 0
    keys, position, end = sender.keys[known], sender.position[known], sender.end[known]
    order = np.argsort(keys, kind="stable")
    keys, position, end = keys[order], position[order], end[order]
    if not len(keys):
        return frames
    idx = np.minimum(np.searchsorted(keys, frames.keys), len(keys) - 1)
    found = (keys[idx] == frames.keys) & (frames.keys >= 0)
    frames.position = np.where(found, position[idx], MISSING)
    frames.end = np.where(found, end[idx], MISSING)
    return frames


def frame_ranges(frames: PesFrames, which: str) -> Ranges:
    """Ranges of a TS probe: each positioned frame at its first or last byte."""
    t_ns = frames.first_ns if which == "first" else frames.last_ns
    ok = (frames.position >= 0) & (frames.end > frames.position) & (t_ns >= 0)
    return Ranges(frames.position[ok], frames.end[ok], t_ns[ok], frames.thread[ok])


def done_ranges(first: Ranges, done: ProbeEvents) -> Ranges:
    """A sink's render instants for the buffers that held each frame's first byte.

    The render (``done``) of a buffer follows its push on the same thread: the
    first ``done`` at or after the push is the one that rendered it.
    """
    t_done = np.sort(done.t_ns)
    if not len(t_done) or not len(first.t_ns):
        return empty_ranges()
    idx = np.searchsorted(t_done, first.t_ns, side="left")
    ok = idx < len(t_done)
    t_ns = t_done[np.minimum(idx, len(t_done) - 1)]
    return Ranges(first.start[ok], first.end[ok], t_ns[ok], first.thread[ok])


def demuxer_knots(out: ProbeEvents, frames: PesFrames) -> tuple[np.ndarray, np.ndarray]:
    """Knots mapping a demuxer's output PTS to positions (see the module docstring).

    The PTS offset comes from outputs whose size only one recently completed PES
    has (it drifts while the demuxer's clock recovery settles, so each output uses
    the offset of the sure matches around it in time); then every output takes the
    frame at its PTS plus that offset, if the sizes agree (or the frame's size is
    unknown: the last PES of a stream).
    """
    events = out.select(out.pts >= 0)
    placed = frames.position >= 0
    sized = placed & (frames.last_ns >= 0) & (frames.es_bytes >= 0)
    sure = _sure_offsets(events, frames, sized)
    if sure is None:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    local = np.rint(np.interp(events.t_ns, *sure)).astype(np.int64)
    frame_ns = int(np.median((frames.end - frames.position)[sized]))
    pos, size = frames.position[placed], frames.es_bytes[placed]
    by_pos = np.argsort(pos, kind="stable")
    row = by_pos[_nearest(pos[by_pos], events.pts + local)]
    close = np.abs(pos[row] - events.pts - local) < frame_ns / 2
    chosen = close & ((size[row] == events.size) | (size[row] < 0))
    recv_pts, position = events.pts[chosen], pos[row[chosen]]
    order = np.argsort(recv_pts, kind="stable")
    recv_pts, position = recv_pts[order], position[order]
    distinct = np.concatenate([[True], recv_pts[1:] != recv_pts[:-1]])
    return recv_pts[distinct], position[distinct]


def _sure_offsets(
    events: ProbeEvents, frames: PesFrames, sized: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """(output time, position minus demuxer PTS) of the outputs only one recent PES fits."""
    order = np.argsort(frames.last_ns[sized], kind="stable")
    last, size, pos = (a[sized][order] for a in (frames.last_ns, frames.es_bytes, frames.position))
    if not len(last) or not len(events.t_ns):
        return None
    newest = np.searchsorted(last, events.t_ns, side="right") - 1
    cand = newest[:, None] - np.arange(CANDIDATES)[None, :]
    valid = cand >= 0
    cand = np.maximum(cand, 0)
    valid &= size[cand] == events.size[:, None]
    matches = valid.sum(axis=1)
    if not matches.any():
        return None
    sure = matches == 1 if (matches == 1).any() else matches > 0
    first_match = np.argmax(valid, axis=1)
    offset = (pos[cand] - events.pts[:, None])[sure, first_match[sure]]
    t_sure = events.t_ns[sure]
    # one wrong sure match (two frames of equal size) must not steer its neighbours
    keep = np.abs(offset - _running_median(offset)) < int(np.median(np.diff(np.sort(pos)))) / 2
    order = np.argsort(t_sure[keep], kind="stable")
    return t_sure[keep][order].astype(np.float64), offset[keep][order].astype(np.float64)


def _running_median(values: np.ndarray, half: int = 4) -> np.ndarray:
    """Median of each value's neighbourhood (``half`` on each side)."""
    padded = np.pad(values.astype(np.float64), half, mode="edge")
    windows = np.lib.stride_tricks.sliding_window_view(padded, 2 * half + 1)
    return np.median(windows, axis=1)


def _nearest(sorted_values: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Index of the sorted value nearest each query."""
    i = np.clip(np.searchsorted(sorted_values, queries), 1, max(len(sorted_values) - 1, 1))
    below = sorted_values[i - 1]
    above = sorted_values[np.minimum(i, len(sorted_values) - 1)]
    return np.where(np.abs(queries - below) <= np.abs(above - queries), i - 1, i)


def pid_of_mux_pad(pad_name: str) -> int | None:
    """The PID mpegtsmux gives a stream from its sink pad's name (``sink_65`` -> 65)."""
    prefix, _, number = pad_name.rpartition("_")
    return int(number) if prefix == "sink" and number.isdigit() else None


def demux_pad_carries(pad_name: str, pid: int) -> bool:
    """Whether a tsdemux source pad (``video_0_0041``) carries the PID."""
    return pad_name.lower().endswith(f"_{pid:04x}")
