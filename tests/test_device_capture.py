"""Capture instants of audio devices from their deliveries, and when samples leave an audio
sink's ring buffer (synthetic, known answers)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from latlab.stitch.devices import DeviceRing, device_ring, written_contiguously
from latlab.stitch.journeys import device_capture_times
from latlab.stitch.position import Ranges

MS = 1_000_000
DISCONT, RESYNC = 1 << 6, 1 << 7  # GstBufferFlags


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
    beyond the alignment threshold (50 ms of lost audio) realigns it to the schedule.

    The buffer after lost audio comes flagged DISCONT (a depayloader after a gap, or a
    sender's capture DISCONT that the payloader marks and rtpL16depay turns into RESYNC),
    and GstAudioBaseSink resyncs on such a flag at once; an unflagged jump waits for its
    discont-wait (next test)."""
    n, period = 200, 10 * MS
    running = np.arange(n, dtype=np.int64) * period
    running[100:] += 50 * MS  # a gap the sink does not bridge
    skew = np.linspace(0, 4 * MS, n).astype(np.int64)  # the PTS creep 4 ms over the run
    schedule = 7_000 * MS + running + skew
    duration = np.full(n, period)
    duration[10] = -1  # no duration: taken from the next buffer's running time
    flags = np.zeros(n, np.int64)
    flags[100] = DISCONT
    presented = written_contiguously(schedule, duration, running, flags)
    assert np.array_equal(presented[:100], 7_000 * MS + np.arange(100) * period)
    assert np.array_equal(presented[100:], schedule[100] + np.arange(100) * period)


def test_an_unflagged_jump_realigns_only_after_the_discont_wait() -> None:
    """GstAudioBaseSink (1.22, discont-wait 1 s) takes a schedule more than 40 ms off the
    samples before as a discontinuity only once it has been off for 1 s of schedule;
    a jump that shrinks below 40 ms before then never moves the playout. (A link delay
    stepped from 5 to 45 ms made rtpjitterbuffer's PTS jump 46 ms: the sink's log said
    "Unexpected discontinuity ... +43.3 ms, resyncing" one second later, and the black
    box moved by 43.3 ms then, not at the jump.)"""
    n, period = 300, 10 * MS
    running = np.arange(n, dtype=np.int64) * period
    duration = np.full(n, period)
    steady = 2_000 * MS + running
    jumped = steady + np.where(np.arange(n) >= 100, 50 * MS, 0)
    presented = written_contiguously(jumped, duration, running)
    assert np.array_equal(presented[:200], steady[:200])  # off for 1 s: still contiguous
    assert np.array_equal(presented[200:], jumped[200:])  # then at its schedule
    # a jitter buffer that jumps 45 ms and skews back below 40 ms within the second
    back = steady + np.where(np.arange(n) >= 100, 45 * MS - (np.arange(n) - 100) * 100_000, 0)
    back[200:] = steady[200:]
    assert np.array_equal(written_contiguously(back, duration, running), steady)


def _ring(alignment: int, delay: int = 20 * MS) -> DeviceRing:
    """A device with 10 ms periods and a ring of two, the sink calibrated at t = 1 s
    (``alignment`` before the device's first cycle, known exactly)."""
    return DeviceRing(
        first_cycle_ns=1_000 * MS + alignment,
        cycle_ns=10 * MS,
        segment_ns=10 * MS,
        segments=2,
        delay_ns=delay,
        alignment_ns=alignment,
        alignment_low_ns=alignment,
        alignment_high_ns=alignment,
    )


def test_after_the_ring_buffer_ran_dry_a_later_schedule_wins() -> None:
    """The streaming thread stalls for 60 ms: the device took the segments after the
    samples written so far (played silence), so GstAudioBaseSink does not write behind
    the segment being read: a schedule later than the samples before is taken at once;
    one earlier keeps the contiguous place (whose samples are then skipped as late)."""
    n, period = 100, 10 * MS
    ring = _ring(3 * MS, delay=5 * MS)  # delay 5 ms: the device keeps the sink's clock
    running = np.arange(n, dtype=np.int64) * period
    duration = np.full(n, period)
    calls = ring.calibrated_ns + running + 5 * MS  # each render 5 ms after the one before
    calls[50:] += 65 * MS  # the stall: buffer 50 is pushed 65 ms late
    for moved, expected_at in ((5 * MS, 540 * MS), (-5 * MS, 535 * MS)):
        schedule = ring.calibrated_ns + 35 * MS + running + np.where(running >= 500 * MS, moved, 0)
        placed = written_contiguously(schedule, duration, running, None, calls, ring)
        assert np.array_equal(placed[:50], schedule[:50])
        assert placed[50] == ring.calibrated_ns + expected_at
        assert np.array_equal(np.diff(placed[50:]), duration[51:])
    # a shorter stall whose place after the samples before is taken only if the sink
    # calibrated as early as the renders allow (alignment 3 ms), not at 9 ms: not moved
    calls[50:] = ring.first_cycle_ns + 531 * MS + running[50:] - running[50]
    schedule = ring.calibrated_ns + 35 * MS + running + np.where(running >= 500 * MS, 5 * MS, 0)
    placed = written_contiguously(schedule, duration, running, None, calls, ring)
    assert placed[50] == ring.calibrated_ns + 540 * MS  # known to be 3 ms: it ran dry
    uncertain = replace(ring, alignment_high_ns=9 * MS)
    placed = written_contiguously(schedule, duration, running, None, calls, uncertain)
    assert placed[50] == ring.calibrated_ns + 535 * MS
    no_stall = ring.calibrated_ns + running + 5 * MS
    placed = written_contiguously(schedule, duration, running, None, no_stall, ring)
    assert np.array_equal(placed, ring.calibrated_ns + 35 * MS + running)


def test_a_skew_past_half_the_drift_tolerance_moves_the_schedule() -> None:
    """GstAudioBaseSink's skew slaving: per render it averages (31/32) the skew between
    its device clock (segments taken, less the device's delay) and the pipeline clock;
    past 20 ms it moves its schedule by the average. Here the device takes the ring's
    first segment 9.9 ms after the calibration and has a 20 ms delay, and each render
    begins 0.3 ms after a cycle: a steady skew of -20.2 ms, crossed after some 150
    renders. Writing contiguously (align 0), the sink does not realign then; a buffer
    flagged RESYNC later lands 20 ms before its schedule."""
    n, period = 400, 10 * MS
    ring = _ring(int(9.9 * MS))
    running = np.arange(n, dtype=np.int64) * period
    duration = np.full(n, period)
    schedule = ring.calibrated_ns + 35 * MS + running
    calls = ring.first_cycle_ns + running + 300_000
    flags = np.zeros(n, np.int64)
    flags[300] = RESYNC
    placed = written_contiguously(schedule, duration, running, flags, calls, ring)
    assert np.array_equal(placed[:300], schedule[:300])
    moved = schedule[300] - placed[300]
    assert 20 * MS < moved < 20.2 * MS
    assert np.array_equal(np.diff(placed[300:]), duration[301:])
    # the same device with its cycles 2 ms earlier stays within the tolerance
    steady = written_contiguously(
        schedule, duration, running, flags, calls - 2 * MS, _ring(int(7.9 * MS))
    )
    assert np.array_equal(steady, schedule)
    # with the alignment known only to lie within 7.9 to 9.9 ms the sink may or may not
    # have moved: the estimate moves only what every alignment in the bounds moves
    uncertain = replace(ring, alignment_low_ns=int(7.9 * MS))
    assert np.array_equal(
        written_contiguously(schedule, duration, running, flags, calls, uncertain), schedule
    )


def test_the_device_cycles_and_the_calibration_come_from_the_renders() -> None:
    """Renders that wait for room return just after the device's cycles (80 to 150 us
    here), others later; the sink calibrated 0.1 ms after the pipeline went to playing,
    and its device took the first segment 6.3 ms after that. The estimate finds the cycles
    within 0.2 ms and the alignment within 0.3 ms."""
    rng = np.random.default_rng(5)
    n, period = 600, 10 * MS
    playing = 5_000 * MS
    calibrated = playing + 100_000
    first_cycle = calibrated + int(6.3 * MS)
    running = np.arange(n, dtype=np.int64) * period
    schedule = calibrated + 35 * MS + running  # contiguous, as the sink writes them
    duration = np.full(n, period)
    # the last sample of buffer i is in segment (35 + 10 i + 9.99) // 10 = i + 4, so the
    # render returns once the device took segment i + 2
    returned = first_cycle + (running + 2 * period) + rng.integers(80_000, 150_000, n)
    late = rng.random(n) < 0.2
    returned[late] += rng.integers(200_000, 6 * MS, late.sum())
    calls = np.append(calibrated, returned[:-1] + 20_000)
    device = {"period_us": 10_000, "periods": 2, "reported_latency": {"playback_ms": 20.0}}
    ring = device_ring(
        returned, calls, schedule, duration, running, np.zeros(n, np.int64), playing, device
    )
    assert ring is not None
    assert abs(ring.alignment_ns - 6.3 * MS) < 300_000
    assert ring.alignment_low_ns <= 6.3 * MS <= ring.alignment_high_ns
    assert abs(ring.cycle_ns - period) < 1_000
    cycle_error = (ring.first_cycle_ns - first_cycle + period // 2) % period - period // 2
    assert abs(cycle_error) < 200_000
    assert ring.delay_ns == 20 * MS


def test_a_unit_written_after_the_device_took_its_segment_is_dropped() -> None:
    """A render that stalled after it began writes its samples once the device has
    taken their segment: GstAudioRingBuffer skips them (they never leave the sink)."""
    ring = _ring(3 * MS)
    leaves_last = ring.first_cycle_ns + np.array([125, 125, 125]) * MS  # segment 12
    written = np.array([ring.first_cycle_ns + 105 * MS, ring.first_cycle_ns + 119 * MS,
                        ring.first_cycle_ns + 121 * MS])  # fmt: skip
    taken = ring.segment_taken(leaves_last)
    assert np.array_equal(taken, np.full(3, ring.first_cycle_ns + 120 * MS))
    assert list(taken < written) == [False, False, True]
