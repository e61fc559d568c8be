"""The MPEG-TS mappings on synthetic streams with known answers."""

from __future__ import annotations

import numpy as np

from latlab.ingest.pes import PTS_WRAP, PesTable, ticks_to_ns
from latlab.stitch.mpegts import (
    demux_pad_carries,
    demuxer_knots,
    frame_ranges,
    pid_of_mux_pad,
    receiver_frames,
    sender_frames,
)
from latlab.stitch.position import MISSING, ProbeEvents, Ranges

FRAME_NS = 33_333_333
MUX_OFFSET_TICKS = 3600 * 90_000  # what the muxer adds to running time (any constant works)
PID = 65
RNG = np.random.default_rng(7)


def _frames(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions (frame PTS) and encoded sizes: an I-frame every 30, P-frames varying."""
    position = (np.arange(n, dtype=np.int64) * 1_000_000_000) // 30
    size = RNG.integers(400, 1200, n)
    size[::30] = RNG.integers(8000, 12000, len(size[::30]))
    return position, size


def _pes(
    t_ns: np.ndarray, pts_ticks: np.ndarray, size: np.ndarray, last_ns: np.ndarray
) -> PesTable:
    """PES records as the tracer writes them: the previous PES's end and size on each start."""
    n = len(t_ns)
    prev_end = np.concatenate([[-1], last_ns[:-1]])
    prev_bytes = np.concatenate([[-1], size[:-1]])
    return PesTable(
        pad_id=np.ones(n, np.uint32),
        t_ns=t_ns.astype(np.int64),
        pid=np.full(n, PID, np.int32),
        stream_id=np.full(n, 0xE0, np.uint8),
        pts=pts_ticks.astype(np.int64),
        dts=np.full(n, -1, np.int64),
        prev_end_ns=prev_end.astype(np.int64),
        prev_es_bytes=prev_bytes.astype(np.int64),
        random_access=(np.arange(n) % 30) == 0,
        thread_idx=np.ones(n, np.uint32),
        at_done=np.zeros(n, bool),
    )


def _events(**columns: np.ndarray) -> ProbeEvents:
    return ProbeEvents(lambda name: columns[name])


def test_sender_positions_come_from_the_mux_offset_despite_a_regular_cadence() -> None:
    position, size = _frames(120)
    t_in = 5_000_000_000 + position + 2_000_000  # encoded 2 ms after capture
    ticks = (position * 9 // 100_000 + MUX_OFFSET_TICKS) % PTS_WRAP
    t_pes = t_in + 300_000
    pes = _pes(t_pes, ticks, size, t_pes + 100_000)
    inputs = {PID: (Ranges(position, position + FRAME_NS, t_in, np.zeros(120, np.int32)), size)}
    frames = sender_frames(pes, np.zeros(120, np.int32), inputs, PID)
    # every frame but the last (whose size the next PES start would have told) is placed
    np.testing.assert_array_equal(frames.position, position)
    first = frame_ranges(frames, "first")
    np.testing.assert_array_equal(first.t_ns, t_pes)


def test_receiver_joins_on_pid_and_pts_and_demuxer_output_maps_by_size() -> None:
    position, size = _frames(90)
    ticks = (position * 9 // 100_000 + MUX_OFFSET_TICKS) % PTS_WRAP
    t_in = 1_000_000_000 + position
    sent = sender_frames(
        _pes(t_in + 100_000, ticks, size, t_in + 200_000),
        np.zeros(90, np.int32),
        {PID: (Ranges(position, position + FRAME_NS, t_in, np.zeros(90, np.int32)), size)},
        PID,
    )
    # The receiver lost frame 10; each PES completes 150 ms later and the demuxer hands
    # frame k out only when frame k+1 starts (it holds one frame).
    keep = np.arange(90) != 10
    first = t_in[keep] + 150_000_000
    last = first + 1_000_000
    received = receiver_frames(
        _pes(first, ticks[keep], size[keep], last), np.zeros(89, np.int32), sent
    )
    np.testing.assert_array_equal(received.position, position[keep])
    out_t = np.concatenate([first[1:], [first[-1] + FRAME_NS]]) + 50_000
    recv_pts = position[keep] + 777_777_777 + RNG.integers(-2_000_000, 2_000_000, 89)  # skew
    knots_x, knots_y = demuxer_knots(_events(pts=recv_pts, t_ns=out_t, size=size[keep]), received)
    # the last frame's size is unknown (no PES start followed): its PTS offset places it
    expected = dict(zip(recv_pts, position[keep], strict=True))
    assert dict(zip(knots_x, knots_y, strict=True)) == expected


def test_equal_sizes_are_told_apart_by_the_pts_offset() -> None:
    position = (np.arange(60, dtype=np.int64) * 1_000_000_000) // 30
    size = np.full(60, 500)  # a static picture: every P-frame the same size
    size[0] = 9000
    ticks = position * 9 // 100_000
    t_in = position
    sent = sender_frames(
        _pes(t_in + 10, ticks, size, t_in + 20),
        np.zeros(60, np.int32),
        {PID: (Ranges(position, position + FRAME_NS, t_in, np.zeros(60, np.int32)), size)},
        PID,
    )
    assert (sent.position[:-1] == position[:-1]).all()
    first = t_in + 80_000_000
    received = receiver_frames(_pes(first, ticks, size, first + 1000), np.zeros(60, np.int32), sent)
    out_t = np.concatenate([first[2:], first[-2:] + 2 * FRAME_NS]) + 10  # holds two frames
    knots_x, knots_y = demuxer_knots(
        _events(pts=position + 5_000_000, t_ns=out_t, size=size), received
    )
    np.testing.assert_array_equal(knots_y, knots_x - 5_000_000)
    assert len(knots_x) >= 58


def test_pts_wraps_are_unwrapped_in_order() -> None:
    ticks = np.array([PTS_WRAP - 3000, PTS_WRAP - 1, 2999], np.int64)
    ns = ticks_to_ns(ticks)
    assert abs(ns[2] - ns[0] - 5999 * 100_000 / 9) <= 1


def test_pad_names() -> None:
    assert pid_of_mux_pad("sink_65") == 65
    assert pid_of_mux_pad("video") is None
    assert demux_pad_carries("video_0_0041", 65)
    assert not demux_pad_carries("audio_0_0042", 65)
    assert MISSING == -1


def test_a_pid_whose_pes_adds_a_header_takes_the_offset_of_the_others() -> None:
    """AAC gains a 7-byte ADTS header in its PES: sizes never match, the video PID's offset does."""
    video_pos, video_size = _frames(60)
    audio_pos = (np.arange(90, dtype=np.int64) * 1024 * 1_000_000_000) // 48_000
    audio_size = RNG.integers(300, 400, 90)
    n_v, n_a = len(video_pos), len(audio_pos)
    pos = np.concatenate([video_pos, audio_pos])
    ticks = (pos * 9 // 100_000 + MUX_OFFSET_TICKS) % PTS_WRAP
    t_pes = 2_000_000_000 + pos + 500_000
    es = np.concatenate([video_size, audio_size + 7])
    order = np.argsort(t_pes, kind="stable")
    pid = np.concatenate([np.full(n_v, PID), np.full(n_a, PID + 1)])[order]
    pes = _pes(t_pes[order], ticks[order], es[order], t_pes[order] + 1000)
    pes.pid = pid.astype(np.int32)
    for p in (PID, PID + 1):  # the tracer reports each PES's size on its PID's next start
        rows = np.flatnonzero(pid == p)
        pes.prev_es_bytes[rows] = np.concatenate([[-1], es[order][rows][:-1]])
        pes.prev_end_ns[rows] = np.concatenate([[-1], t_pes[order][rows][:-1] + 1000])
    threads = np.zeros(n_v + n_a, np.int32)
    frame_a = 1024 * 1_000_000_000 // 48_000
    inputs = {
        PID: (Ranges(video_pos, video_pos + FRAME_NS, 2_000_000_000 + video_pos, threads[:n_v]),
              video_size),
        PID + 1: (Ranges(audio_pos, audio_pos + frame_a, 2_000_000_000 + audio_pos, threads[:n_a]),
                  audio_size),
    }  # fmt: skip
    audio = sender_frames(pes, threads, inputs, PID + 1)
    np.testing.assert_array_equal(audio.position, audio_pos)
    # each PES reaches the next one (a muxer may pack several audio frames in one)
    np.testing.assert_array_equal(audio.end[:-1], audio_pos[1:])
    assert audio.end[-1] - audio.position[-1] == frame_a
