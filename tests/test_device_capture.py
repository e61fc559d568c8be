"""Capture instants of audio devices from their deliveries, and when samples leave an audio
sink's ring buffer (synthetic, known answers)."""

from __future__ import annotations

import numpy as np

from latlab.stitch.devices import written_contiguously
from latlab.stitch.journeys import device_capture_times
from latlab.stitch.position import Ranges

MS = 1_000_000


def _deliveries(n: int, period: int, drift_ppm: float, seed: int = 1):
    """A device capturing in real time on a clock that drifts; its pushes, some late."""
    rng = np.random.default_rng(seed)
    start = np.arange(n, dtype=np.int64) * period  # media positions (PTS phase is arbitrary)
    end = start + period
    captured_end = 5_000 * MS + (end * (1 + drift_ppm * 1e-6)).astype(np.int64)
    wake = rng.integers(20_000, 80_000, n)  # the streaming thread wakes 20..80 us later
    late = rng.random(n) < 0.1
    pushed = captured_end + wake + np.where(late, rng.integers(1, 8 * MS, n), 0)
    pushed[:3] -= period  # start-up: the first buffers go out early
    return Ranges(start, end, pushed, np.zeros(n, np.int32)), start, captured_end - end


def test_capture_instants_follow_the_device_clock() -> None:
    ranges, start, true_offset = _deliveries(3000, 10 * MS, drift_ppm=80)
    capture = device_capture_times(ranges, start)
    error = capture - (start + true_offset)
    # the envelope sits at the fastest wake-ups (about 20 us) and follows the drift
    assert np.all(np.abs(error[10:]) < 150_000), np.abs(error).max()


def test_a_blocked_thread_does_not_move_the_capture_instants() -> None:
    ranges, start, true_offset = _deliveries(1000, 5 * MS, drift_ppm=0, seed=4)
    blocked = ranges.t_ns.copy()
    blocked[500:600] += 30 * MS  # downstream held the source's thread
    capture = device_capture_times(Ranges(ranges.start, ranges.end, blocked, ranges.thread), start)
    assert np.all(np.abs(capture[10:] - (start + true_offset)[10:]) < 150_000)


def test_ring_buffer_is_written_contiguously_until_the_schedule_is_too_far_off() -> None:
    """A jitter buffer's skew correction moves the PTS (and the schedule) by a few ms:
    the sink keeps writing after the samples before, so playout does not move. A jump
    beyond the alignment threshold (50 ms of lost audio) realigns it to the schedule."""
    n, period = 200, 10 * MS
    running = np.arange(n, dtype=np.int64) * period
    running[100:] += 50 * MS  # a gap the sink does not bridge
    skew = np.linspace(0, 4 * MS, n).astype(np.int64)  # the PTS creep 4 ms over the run
    schedule = 7_000 * MS + running + skew
    duration = np.full(n, period)
    duration[10] = -1  # no duration: taken from the next buffer's running time
    presented = written_contiguously(schedule, duration, running)
    assert np.array_equal(presented[:100], 7_000 * MS + np.arange(100) * period)
    assert np.array_equal(presented[100:], schedule[100] + np.arange(100) * period)
