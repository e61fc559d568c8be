"""Device time in journeys: the capture period and the playout buffer of audio devices.

The tracer sees an audio sink's ``done`` when the push into the sink returned:
for an audio sink that is when the samples were written into its ring buffer,
not when they left the device. When the run's ``[devices]`` (run.json) put an
audio server behind the path's last element, :func:`add_device_playout`
appends two estimated probes:

* ``PROCESS/SINK:device``: when the samples leave the sink's ring buffer for the
  audio server. A GStreamer sink schedules a buffer at ``base_time + running_time +
  latency`` on the pipeline clock (the tracer records all three) and places it in its
  ring buffer as ``GstAudioBaseSink`` does (:func:`written_contiguously`): after the
  samples before it, by its schedule only on a DISCONT or RESYNC flag, after its
  discont-wait, once its ring buffer ran dry, or after a skew correction. Those
  positions matched the sink's own log (``GST_DEBUG=audiobasesink:6``) to 0.04 ms for
  every buffer of 24 JACK runs at 10 ms periods, eight of them with planted stalls, and
  to 0.4 ms in 16 more (seven at 20 ms periods, where the sink corrects its clock skew
  at start-up, and realigns 20 ms earlier in most) but for the buffer at that
  correction in four. What the pushes do not show is how the sink's position 0 lines
  up with the device's cycles: the device takes the first segment at its first cycle
  after the sink calibrated its clock (as its streaming thread resumed once playing),
  0 to one period later, and every sample leaves that much after its place. The renders
  bound it (:func:`device_ring`); the estimate takes the first cycle the bounds allow
  after the pipeline went to playing, the same for a whole run. Against the black box on
  JACK at 10 ms periods over 20 runs it was early by 0.02 to 0.29 ms in 19 and late by
  2.8 ms in one, whose sink thread resumed that late (the trace does not show it);
  within 0.3 ms from code to code. (The least alignment the bounds allow, the estimate
  before, was early by 0.9 to 7.5 ms in the same runs; with the bounds taken from the
  schedule's places alone and the skew corrected only when every alignment had passed,
  20 ms runs read -12.6 to +8.0 ms.) It never puts a buffer before its render returned
  where the ring explains that return (:func:`released_after`). Without a clock or
  latency record it falls back to the render plus a full ring buffer (periods x period
  of the device), an upper bound; where no alignment explains the renders, to the
  schedule's places, never before the render. Units whose render began after the device
  had taken their segment were skipped as late: they never leave it (``MISSING``,
  counted ``late``).
* ``PROCESS/SINK:output``: when they leave the device: plus the playback latency the
  server reported (JACK's port latency, the dummy driver's periods), if it reported one.

Both are estimates, not observations; summary.json marks their segments
``"device": true, "estimated": true``. ``pulsesink`` writes its samples into the
server's stream as it renders (``SERVER_STREAM_SINKS``), at the end of the stream's
queue, which the server's sink then takes in order: its ``device`` is the render plus
the queue ahead of the unit's first sample (:func:`stream_playout`), from the queue the
server reported during the run (run.json ``devices[].streams``: PulseAudio's "current
latency" of the stream, sampled by the lab). Without those reports it is the render,
and the wait in the stream's queue (+2.2 to +10.0 ms over ten runs of
``scenarios/l16-pulse-blackbox.toml``) was the black box's unexplained time.

The capture segment of a path whose origin is an audio device source
(``jackaudiosrc``, ``pulsesrc``, ``alsasrc``) is device time too: it runs from
the capture instant of the unit's first sample (from the source's deliveries:
:func:`latlab.stitch.journeys.device_capture_times`) to the source's push, so it
holds the capture period.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from latlab.ingest.events import EventTable
from latlab.ingest.trace_format import Kind
from latlab.stitch.journeys import Journeys, clock_to_mono, playing_clocks
from latlab.stitch.kinds import CAPTURE, PLAYOUT
from latlab.stitch.position import MISSING

DEVICE_SOURCES = {"jackaudiosrc", "pulsesrc", "alsasrc", "pipewiresrc", "osssrc"}
DEVICE_SINKS = {"jackaudiosink", "pulsesink", "alsasink", "pipewiresink", "osssink"}
# Sinks whose ring buffer is the audio server's stream: they hand samples to the server
# as they render, so their schedule does not say when the server takes them.
SERVER_STREAM_SINKS = {"pulsesink"}
DEVICE_PROBE = "device"
OUTPUT_PROBE = "output"
ALIGNMENT_THRESHOLD_NS = 40_000_000  # GstAudioBaseSink alignment-threshold default
DISCONT_WAIT_NS = 1_000_000_000  # GstAudioBaseSink discont-wait default
SKEW_TOLERANCE_NS = 20_000_000  # half of GstAudioBaseSink's drift-tolerance default (40 ms)
SKEW_FILTER = 32  # the sink averages the skew as (31 * average + skew) / 32
RESYNC_FLAGS = (1 << 6) | (1 << 7)  # GST_BUFFER_FLAG_DISCONT | GST_BUFFER_FLAG_RESYNC
SINK_PROVIDED_CLOCK = "GstAudioSinkClock"  # the clock a GstAudioBaseSink provides
CALIBRATION_SLACK_NS = 200_000  # how early the device may take the first segment
CYCLE_WINDOW = 200  # renders per window of the device cycles' phase (follows a drift)
CYCLE_BINS = 100  # of the period: the densest bin holds the renders that waited
CYCLE_CLUSTER_NS = 1_000_000  # renders this close to the densest bin count
CYCLE_MIN_RENDERS = 10
CYCLE_QUANTILE = 5  # percent: the low edge of the cluster, the fastest wake-ups
ALIGNMENT_STEP_NS = 1_000_000  # the alignments tried against the renders
ALIGNMENT_FINE_NS = 100_000  # and at the edges of the best
ROOM_TOLERANCE_NS = 500_000  # a render may return this much before the cycles found
WAIT_NS = 1_000_000  # a render that took longer waited for room
MISFIT_SHARE = 0.02  # more renders than this unexplained: the model does not hold
# the device's segment counter moves as its cycle begins, a little before the renders it
# wakes return (the cycles found are their low edge, 0.1 to 0.2 ms after JACK's cycle)
CYCLE_EARLY_NS = 500_000
QUEUE_REPORTS = 5  # reports of a stream's queue on each side of an instant (50 ms apart)
ESTIMATED_KLASS = "Audio/Device"  # the klass of the probes add_device_playout appends


def ring_buffer_ns(device: dict[str, Any]) -> int:
    """A full ring buffer of ``device`` (periods x period): the fallback playout estimate."""
    return int(device.get("buffer_us", 0)) * 1000


def server_playback_ns(device: dict[str, Any]) -> int:
    """The playback latency the server reported during the run (else at start, else 0)."""
    reported = device.get("reported_latency_in_run") or device.get("reported_latency") or {}
    return round(float(reported.get("playback_ms", 0.0)) * 1e6)


def _host_device(run: dict[str, Any], process: str) -> dict[str, Any] | None:
    """The device on the host of ``process`` (a run.json process name), if any."""
    hosts = {p.get("name"): p.get("host") for p in run.get("processes", [])}
    host = hosts.get(process)
    for device in run.get("devices") or []:
        if host is not None and device.get("host") == host:
            return device
    return None


def add_device_playout(journeys: Journeys, table: EventTable, run: dict[str, Any]) -> Journeys:
    """``journeys`` with ``SINK:device`` (and ``SINK:output``) when its sink plays to a device."""
    sink = journeys.path.probes[-1] if journeys.path.probes else None
    last = table.probes[sink] if sink is not None else None
    if last is None or not last.is_render or last.factory not in DEVICE_SINKS:
        return journeys
    device = _host_device(run, table.processes[last.process].name)
    if device is None:
        return journeys
    render = journeys.times[:, -1]
    if last.factory in SERVER_STREAM_SINKS:
        leaves_sink = stream_playout(journeys, table, sink, device)
    else:
        leaves_sink = scheduled_presentation(journeys, table, sink, device)
    if leaves_sink is None:
        leaves_sink = np.where(render != MISSING, render + ring_buffer_ns(device), MISSING)
    out = _append_probe(journeys, DEVICE_PROBE, leaves_sink)
    server_ns = server_playback_ns(device)
    if server_ns > 0:
        leaves_device = np.where(leaves_sink != MISSING, leaves_sink + server_ns, MISSING)
        out = _append_probe(out, OUTPUT_PROBE, leaves_device)
    dropped = int(np.count_nonzero((render != MISSING) & (leaves_sink == MISSING)))
    if dropped:  # rendered too late to be played: the sink skipped them
        out.counts = {**journeys.counts, "late": journeys.counts.get("late", 0) + dropped}
    return out


def stream_playout(
    journeys: Journeys, table: EventTable, sink: int, device: dict[str, Any]
) -> np.ndarray:
    """Per unit: when its first sample leaves a sink that writes into the server's stream
    (``pulsesink``): its render, plus its wait in the stream's queue in the server.

    The sink writes each buffer at the end of its stream's queue as it renders (a render
    waits until the server asks for a segment), and the server's sink takes the queue's
    samples in order, so a buffer's first sample leaves once the queue that was ahead of
    it has gone: the queue right after the write (:func:`queue_after_write_ns`, from the
    server's reports) less what follows that sample in the buffer. Without the server's
    reports of the stream, the render."""
    render = journeys.times[:, -1]
    seen = render != MISSING
    probe = table.probes[sink]
    rendered = table.probe_column(sink, "t_ns")
    order = np.argsort(rendered, kind="stable")
    rendered, duration = rendered[order], table.probe_column(sink, "duration")[order]
    reports = [
        s for s in device.get("streams") or [] if s.get("pid") == table.processes[probe.process].pid
    ]
    queue = queue_after_write_ns(reports, rendered, render)
    if queue is None or not seen.any():
        return render
    at = np.minimum(np.searchsorted(rendered, render), len(rendered) - 1)
    matched = seen & (rendered[at] == render) & (duration[at] > 0)
    buffer_ns = np.where(matched, duration[at], journeys.unit_ns)
    # from the unit's first sample to the end of the buffer that completes it: the rest
    # of that buffer, or the whole unit where units are longer than buffers
    behind = np.maximum(buffer_ns - _into_buffer(journeys), journeys.unit_ns)
    return np.where(seen, render + queue - behind, MISSING)


def queue_after_write_ns(
    reports: list[dict[str, Any]], written: np.ndarray, at: np.ndarray
) -> np.ndarray | None:
    """Around each instant of ``at``: how much of a stream the server held right after
    the client's writes (ns of samples), from its reports of the stream's queue
    (``streams`` of run.json: when each request went out, how long its reply took, the
    queue) and when the writes were made (``written``, sorted); None without a report
    after a write.

    Between two writes the server's sink takes samples from the queue at the sample
    rate, so a report ``since`` after the last write, of a queue ``q``, says the queue
    was ``q + since`` right after that write. A report is placed at the middle of its
    request and reply; one of an empty queue (the sink ran dry, and waits) says nothing.
    That level moves when the writes fall behind the sink or catch up (by 6 ms in runs
    on a loaded machine), so an instant takes the median of the ``QUEUE_REPORTS``
    reports on each side of it (a write that reached the server after a report was
    taken makes that report a write short)."""
    if not reports or not len(written):
        return None
    sent = np.concatenate([np.asarray(r["t_ns"], np.int64) for r in reports])
    reply = np.concatenate([np.asarray(r["reply_ns"], np.int64) for r in reports])
    queue = np.concatenate([np.asarray(r["queue_us"], np.float64) for r in reports]) * 1000
    taken = sent + reply // 2
    order = np.argsort(taken, kind="stable")
    taken, queue = taken[order], queue[order]
    last = np.searchsorted(written, taken, side="right") - 1
    useful = (last >= 0) & (queue > 0)
    if not useful.any():
        return None
    taken = taken[useful]
    level = queue[useful] + (taken - written[last[useful]])
    padded = np.pad(level, QUEUE_REPORTS, mode="reflect")  # no end weighs more
    windows = np.lib.stride_tricks.sliding_window_view(padded, 2 * QUEUE_REPORTS + 1)
    around = np.median(windows, axis=1)
    nearest = np.clip(np.searchsorted(taken, at), 0, len(taken) - 1)
    return np.rint(around[nearest]).astype(np.int64)


def _into_buffer(journeys: Journeys) -> np.ndarray:
    """How far into the buffer it was rendered with each unit starts (media ns)."""
    render = journeys.times[:, -1]
    buffers, buffer_of_unit = np.unique(render, return_inverse=True)
    first_start = np.full(len(buffers), np.iinfo(np.int64).max)
    np.minimum.at(first_start, buffer_of_unit, journeys.unit_start)
    return journeys.unit_start - first_start[buffer_of_unit]


def scheduled_presentation(
    journeys: Journeys, table: EventTable, sink: int, device: dict[str, Any] | None = None
) -> np.ndarray | None:
    """Per unit: when its first sample leaves the sink's ring buffer (CLOCK_MONOTONIC ns),
    at the earliest the trace allows; ``MISSING`` where the ring buffer skipped it as late
    (without the device's cycles: never before the render); None without the pipeline's
    clock or latency records.

    The sink schedules a buffer at ``base_time + running_time + latency`` on the pipeline
    clock and places it in its ring buffer as ``GstAudioBaseSink`` does
    (:func:`written_contiguously`); with the ``device`` behind it (run.json) and the
    pushes into the sink, the renders tell when the device takes each segment, which the
    sink's late-sample and clock-skew rules need, and bound how its ring lines up with
    them (:func:`device_ring`). A sample leaves that alignment after its place: the
    device's first cycle after the sink's calibration, as soon as the renders allow, and
    no earlier than the render of its buffer returned where the ring explains that return
    (:func:`released_after`).
    A unit that starts later in a buffer than the buffer's first unit is presented that
    much later."""
    probe = table.probes[sink]
    clocks = playing_clocks(table, probe)
    latency = table.processes[probe.process].configured_latency_ns
    running = table.running_pts(sink)
    timed = running >= 0
    if not clocks or latency is None or not timed.any():
        return None
    rendered = table.probe_column(sink, "t_ns")[timed]
    order = np.argsort(rendered, kind="stable")
    rendered, running = rendered[order], running[timed][order]
    schedule = clock_to_mono(clocks, clocks[-1].base_time + running + latency).astype(np.int64)
    duration = table.probe_column(sink, "duration")[timed][order]
    flags = table.probe_column(sink, "buffer_flags")[timed][order]
    calls = _calls_into_sink(table, sink, timed, order)
    ring = None
    if device is not None and calls is not None and clocks[-1].clock != SINK_PROVIDED_CLOCK:
        # the pipeline runs on another clock: the sink slaves its ring buffer to it
        start = clock_to_mono(clocks, np.array([clocks[-1].base_time + latency]))[0]
        ring = device_ring(
            rendered, calls, schedule, duration, running, flags,
            playing_ns=max(clocks[0].mono_ns, int(start) - ring_buffer_ns(device)),
            device=device,
        )  # fmt: skip
    presented = written_contiguously(schedule, duration, running, flags, calls, ring)
    render = journeys.times[:, -1]
    seen = render != MISSING
    at = np.minimum(np.searchsorted(rendered, render), len(rendered) - 1)
    matched = seen & (rendered[at] == render)
    if not matched.any():
        return None
    scheduled = presented[at] + _into_buffer(journeys)
    typical = int(np.median(scheduled[matched] - render[matched]))
    scheduled = np.where(matched, scheduled, render + typical)
    if ring is None or calls is None:
        return np.where(seen, np.maximum(scheduled, render), MISSING)
    # the device took the segment of the unit's last sample before the render began,
    # even for the latest alignment the renders allow: the ring buffer skipped the
    # samples as late. A render that began before but returned after may have written
    # them in time (its thread held up after writing) or not: they keep their place,
    # which is where a black box times a code damaged by the skip (by its whole frame).
    last = scheduled + journeys.unit_ns - 1 + ring.alignment_high_ns
    skipped = matched & (ring.segment_taken(last) < calls[at])
    # every sample leaves the alignment after its place: the device's first cycle after
    # the sink's calibration, as soon as the renders allow (device_ring). Against the
    # black box over 20 runs: 0.02 to 0.29 ms early in 19, 2.8 ms late in one whose sink
    # thread resumed late (the least alignment was early by 0.9 to 7.5 ms)
    leaves = scheduled + ring.alignment_ns
    floor = released_after(presented, buffer_lengths(duration, running), rendered, calls, ring)
    leaves = np.where(matched, np.maximum(leaves, floor[at]), leaves)
    return np.where(seen & ~skipped, leaves, MISSING)


def released_after(
    placed: np.ndarray,
    length: np.ndarray,
    rendered: np.ndarray,
    calls: np.ndarray,
    ring: DeviceRing,
) -> np.ndarray:
    """Per buffer (render order): an instant its first sample did not leave the sink
    before, where the ring shows one (else the smallest int64).

    A buffer no longer than the ring less a segment goes out in at most ``segments``
    segments, so its first sample leaves at least a cycle after the device made room for
    its last one (took the segment ``segments`` before that sample's), and after its
    render began: a render that did not wait for room, or waited just until the device
    made it, returned before the first sample left (in 16 logged JACK runs, 5.4 ms or
    more before). One that returned later than that (its thread held up after it had
    written, a stall) may have let it go before it returned: there the instant is the
    latest return the ring explains. The room is taken for the latest alignment the
    renders allow, and a return explained within 1 ms of it."""
    cycles = int(np.rint(ring.segments * ring.cycle_ns))
    room = ring.segment_taken(placed + length - 1 + ring.alignment_high_ns) - cycles
    returned = np.minimum(rendered, np.maximum(calls, room) + CYCLE_CLUSTER_NS)
    whole = length <= (ring.segments - 1) * ring.segment_ns
    return np.where(whole, returned, np.iinfo(np.int64).min)


def _calls_into_sink(
    table: EventTable, sink: int, timed: np.ndarray, order: np.ndarray
) -> np.ndarray | None:
    """When each render began: the push into the sink (the same pad's ``push`` record),
    in the renders' order; None if the pushes do not pair with the renders."""
    probe = table.probes[sink]
    pushes = [
        p.index
        for p in table.probes
        if p.process == probe.process and p.pad_id == probe.pad_id and p.kind == Kind.PUSH
    ]
    if len(pushes) != 1:
        return None
    pushed = np.sort(table.probe_column(pushes[0], "t_ns"), kind="stable")
    done = table.probe_column(sink, "t_ns")
    if len(pushed) < len(done):
        return None
    by_time = np.argsort(done, kind="stable")
    called = pushed[: len(done)].astype(np.int64)
    if np.any(called > done[by_time]):  # a push returns (done) before the next begins
        return None
    calls = np.empty(len(done), np.int64)
    calls[by_time] = called
    return calls[timed][order]


@dataclass(frozen=True)
class DeviceRing:
    """The device behind a sink that slaves its ring buffer to the pipeline clock.

    The device takes one segment of the ring buffer per cycle, the first at
    ``first_cycle_ns``, then every ``cycle_ns``. The sink counts positions from the
    instant it set its clock's calibration (as its first render began, once playing),
    ``alignment_ns`` before that first cycle: a buffer it places by its schedule ``s``
    leaves at ``s + alignment_ns``. The renders bound the alignment to
    ``[alignment_low_ns, alignment_high_ns]``; ``alignment_ns`` is a best guess in it."""

    first_cycle_ns: int
    cycle_ns: float
    segment_ns: int
    segments: int
    delay_ns: int  # the device latency the sink's clock subtracts (its playback latency)
    alignment_ns: int
    alignment_low_ns: int
    alignment_high_ns: int
    sample_ns: float = 1e9 / 48_000  # one sample: the sink aligns in whole samples

    @property
    def calibrated_ns(self) -> int:
        """When the sink calibrated its clock (its ring buffer's position 0), best guess."""
        return self.first_cycle_ns - self.alignment_ns

    def segment_taken(self, leaves_ns: np.ndarray) -> np.ndarray:
        """When the device took the segment holding samples that leave at ``leaves_ns``."""
        cycles = np.floor((np.asarray(leaves_ns, np.float64) - self.first_cycle_ns) / self.cycle_ns)
        return (self.first_cycle_ns + cycles * self.cycle_ns).astype(np.int64)

    def segments_done(self, t_ns: np.ndarray) -> np.ndarray:
        """How many segments the device had taken by each instant."""
        done = np.floor((np.asarray(t_ns, np.float64) - self.first_cycle_ns) / self.cycle_ns) + 1
        return np.maximum(done, 0).astype(np.int64)

    def exactly(self, alignment: int, calibrated: int) -> DeviceRing:
        """This device with the alignment known to be ``alignment`` and the calibration
        near ``calibrated`` (its first cycle the one nearest ``calibrated + alignment``)."""
        k = np.rint((calibrated + alignment - self.first_cycle_ns) / self.cycle_ns)
        first = int(np.rint(self.first_cycle_ns + k * self.cycle_ns))
        return replace(
            self,
            first_cycle_ns=first,
            alignment_ns=alignment,
            alignment_low_ns=alignment,
            alignment_high_ns=alignment,
        )


def written_contiguously(
    schedule: np.ndarray,
    duration: np.ndarray,
    running: np.ndarray,
    flags: np.ndarray | None = None,
    calls: np.ndarray | None = None,
    ring: DeviceRing | None = None,
) -> np.ndarray:
    """Where ``GstAudioBaseSink`` puts each buffer in its ring buffer, on the schedule's
    timeline (CLOCK_MONOTONIC ns; with a ``ring``, a buffer leaves ``ring.alignment_ns``
    later).

    The sink places the first buffer, and any buffer flagged DISCONT or RESYNC, by its
    schedule, and writes every other one right after the samples before it (so small
    moves of the schedule, such as a jitter buffer's skew correction of the PTS, do not
    move the playout). It realigns to the schedule only when the two have been more than
    its alignment threshold (40 ms) apart for its discont-wait (1 s of schedule); or at
    once when the place after the samples before was already taken by the device (the
    ring buffer ran dry), if the schedule is later. A sink slaved to another clock also
    tracks the skew between the device and that clock and, past half its drift tolerance
    (20 ms), moves its schedule by the skew (and realigns unless it was writing the other
    way, by whole samples). Those two rules need the ``ring`` and when each render began
    (``calls``), and are applied only where every alignment the renders allow agrees: the
    ring ran dry even for the latest; the skew was corrected for every alignment in the
    bounds (each when its own average passed the tolerance, by its own average then) and
    each realigned, or none did. The move is the best guess's, made once the last of them
    has made it. Buffers are in render order; a duration that is missing is taken from
    the running time of the next buffer."""
    n = len(schedule)
    length = buffer_lengths(duration, running)
    flagged = np.zeros(n, bool) if flags is None else (flags & RESYNC_FLAGS) != 0
    modelled = ring is not None and calls is not None
    slaving: list[_SkewSlaving] = []
    guess = 0
    if ring is not None and calls is not None:
        done = ring.segments_done(calls + CYCLE_EARLY_NS) * ring.segment_ns
        # the first sample the device had not taken, on the schedule's timeline, for the
        # latest alignment the renders allow (the one that leaves the most room)
        read_up_to = (ring.first_cycle_ns - ring.alignment_high_ns + done).tolist()
        device_time = np.maximum(done - ring.delay_ns, 0).tolist()  # the sink's own clock
        since_first_cycle = (calls - ring.first_cycle_ns).tolist()
        alignments = sorted({ring.alignment_low_ns, ring.alignment_ns, ring.alignment_high_ns})
        slaving = [_SkewSlaving(a, ring.sample_ns) for a in alignments]
        guess = alignments.index(ring.alignment_ns)
    placed = [0] * n
    sched, lengths, flag = schedule.tolist(), length.tolist(), flagged.tolist()
    following_place = None  # where the samples written so far end (the sink's next sample)
    discont_since = None
    shift = 0  # how far the skew corrections every alignment made moved the schedule
    made = 0  # how many of them
    last_align = 0
    for i in range(n):
        if modelled:
            for each in slaving:
                each.observe(device_time[i], since_first_cycle[i], last_align)
            while all(len(each.corrections) > made for each in slaving):
                corrections = [each.corrections[made] for each in slaving]
                shift += corrections[guess][0]
                if all(resync for _, resync in corrections):
                    following_place = None
                made += 1
        wanted = sched[i] - shift
        if following_place is None or flag[i]:
            place = wanted
        else:
            align = following_place - wanted
            resync = False
            if abs(align) >= ALIGNMENT_THRESHOLD_NS:
                if discont_since is None:
                    discont_since = wanted
                elif wanted - discont_since >= DISCONT_WAIT_NS:
                    resync, discont_since = True, None
            else:
                discont_since = None
            if modelled and align < 0 and following_place < read_up_to[i]:
                resync = True  # the samples before ran out: the place after them is gone
            place = wanted if resync else following_place
            last_align = 0 if resync else align
        placed[i] = place
        following_place = place + lengths[i]
    return np.array(placed, np.int64)


class _SkewSlaving:
    """``GstAudioBaseSink``'s skew slaving for one alignment of the ring buffer: per render,
    the skew between its device clock (segments taken less the device's delay) and the
    pipeline clock since the calibration, averaged (31/32); past half the drift tolerance
    it moves its calibration by the average (``corrections``: the move of the schedule
    and whether the sink realigned, as it does unless it was aligning, in whole samples,
    the same way by less)."""

    def __init__(self, alignment: int, sample_ns: float) -> None:
        self.alignment = alignment
        self.sample_ns = sample_ns
        self.shift = 0  # how far its corrections moved the schedule (earlier: > 0)
        self.average: int | None = None
        self.corrections: list[tuple[int, bool]] = []

    def observe(self, device_time: int, since_first_cycle: int, last_align: int) -> None:
        skew = device_time - max(since_first_cycle + self.alignment - self.shift, 0)
        self.average = (
            skew if self.average is None else _trunc_div(31 * self.average + skew, SKEW_FILTER)
        )
        drift = self.average
        if abs(drift) <= SKEW_TOLERANCE_NS:
            return
        # the device runs ahead of (> 0) or behind (< 0) the clock
        self.shift -= drift
        self.average = 0
        aligned = int(last_align / self.sample_ns)  # toward zero, as whole samples
        moved = int(abs(drift) / self.sample_ns)
        resync = aligned < 0 or aligned > moved if drift > 0 else aligned > 0 or -aligned > moved
        self.corrections.append((-drift, resync))


def buffer_lengths(duration: np.ndarray, running: np.ndarray) -> np.ndarray:
    """Each buffer's duration; a missing one is the running time to the next buffer."""
    following = np.append(running[1:] - running[:-1], 0)
    return np.where(duration > 0, duration, np.maximum(following, 0)).astype(np.int64)


def _trunc_div(a: int, b: int) -> int:
    """C's integer division (toward zero)."""
    return -(-a // b) if a < 0 else a // b


def device_ring(
    rendered: np.ndarray,
    calls: np.ndarray,
    schedule: np.ndarray,
    duration: np.ndarray,
    running: np.ndarray,
    flags: np.ndarray,
    playing_ns: int,
    device: dict[str, Any],
) -> DeviceRing | None:
    """When the device behind a slaved sink takes the segments of its ring buffer, from
    the renders; None if the renders do not show it.

    A render that has to wait for room returns as the device takes a segment (the sink
    is woken by the device's cycle), so the renders cluster just after the device's
    cycles: their phase (a low edge of the densest 0.1 ms of render returns modulo the
    device's period, per window of renders, following a drift) gives the cycles. Where
    the sink puts its samples then says, for each alignment of its position 0 with the
    device's cycles, when the device made room for each buffer's last sample (it took
    the segment ``segments`` before that sample's): no render returns before that, and
    one that waited for room returns just then. Each alignment from 0 to one period is
    tried with the sink's rules applied as for that alignment alone (a skew correction,
    when it comes, realigns or not by then, a period or more); the alignments whose
    placements fit the renders best are the bounds (:func:`_misfits`). The sink
    calibrated once playing, as its first render began (not before the pipeline went to
    playing, the first push into it, nor the upstream latency after the base time), and
    the device took the first segment at its first cycle after that: the best guess is
    the first cycle the bounds allow. The guess takes the calibration as soon as it
    could have been; the sink's streaming thread resumed up to 4 ms later under load,
    which the trace does not show."""
    period = int(device.get("period_us", 0)) * 1000
    segments = int(device.get("periods", 0))
    if period <= 0 or segments <= 0 or len(rendered) < 2:
        return None
    cycles = _device_cycles(rendered, period)
    if cycles is None:
        return None
    first_cycle, cycle = cycles
    calibrated = max(int(playing_ns), int(calls[0]))
    base = DeviceRing(
        first_cycle_ns=int(np.rint(first_cycle)),
        cycle_ns=cycle,
        segment_ns=period,
        segments=segments,
        delay_ns=server_playback_ns(device),
        alignment_ns=0,
        alignment_low_ns=0,
        alignment_high_ns=0,
        sample_ns=1e9 / int(device.get("rate") or 48_000),
    )
    length = buffer_lengths(duration, running)
    misfits: dict[int, int] = {}

    def fit(alignment: int) -> int:
        if alignment not in misfits:
            ring = base.exactly(alignment, calibrated)
            placed = written_contiguously(schedule, duration, running, flags, calls, ring)
            misfits[alignment] = _misfits(placed, length, rendered, calls, ring)
        return misfits[alignment]

    for alignment in range(-CALIBRATION_SLACK_NS, period, ALIGNMENT_STEP_NS):
        fit(alignment)
    best = min(misfits.values())
    if best > MISFIT_SHARE * len(rendered):  # no alignment explains the renders
        return None
    # the calibration was not before the pipeline played (nor before the first push):
    # the device took the first segment at its first cycle after that, at the earliest
    k = np.ceil((calibrated - CALIBRATION_SLACK_NS - first_cycle) / cycle)
    first = int(np.rint(first_cycle + k * cycle))
    # of the runs of best alignments (a step apart), the one that needs the sink's thread
    # to have resumed least late after that
    soonest = first - calibrated
    good = sorted(a for a, m in misfits.items() if m == best)
    runs = np.split(np.array(good), np.flatnonzero(np.diff(good) > ALIGNMENT_STEP_NS) + 1)

    def lateness(run: np.ndarray) -> int:
        if run[0] <= soonest:
            return max(soonest - int(run[-1]), 0)
        return soonest + period - int(run[-1])  # a cycle later

    nearest = min(runs, key=lateness)
    low, high = int(nearest[0]), int(nearest[-1])
    # the edges to a finer step (the placements change where a skew correction moves)
    for alignment in range(low - ALIGNMENT_FINE_NS, low - ALIGNMENT_STEP_NS, -ALIGNMENT_FINE_NS):
        if alignment < -CALIBRATION_SLACK_NS or fit(alignment) != best:
            break
        low = alignment
    for alignment in range(high + ALIGNMENT_FINE_NS, high + ALIGNMENT_STEP_NS, ALIGNMENT_FINE_NS):
        if alignment >= period or fit(alignment) != best:
            break
        high = alignment
    # the first cycle the bounds allow, as soon after the calibration as they allow
    while first - calibrated < low:
        first = int(np.rint(first + cycle))
    alignment = min(first - calibrated, high)
    return replace(
        base,
        first_cycle_ns=first,
        alignment_ns=alignment,
        alignment_low_ns=low,
        alignment_high_ns=high,
    )


def _misfits(
    placed: np.ndarray,
    length: np.ndarray,
    rendered: np.ndarray,
    calls: np.ndarray,
    ring: DeviceRing,
) -> int:
    """How many renders the placements do not explain, with the ``ring``'s alignment: a
    render that returned before the device made room for its last sample (took the
    segment ``segments`` before it), or one that waited (returned more than 1 ms after
    it began, just after a device cycle) beyond the cycle that made its room."""
    last = placed + length - 1 + ring.alignment_ns
    room = ring.segment_taken(last) - int(np.rint(ring.segments * ring.cycle_ns))
    early = rendered < room - ROOM_TOLERANCE_NS
    near_cycle = np.mod(rendered - ring.first_cycle_ns + CYCLE_CLUSTER_NS, ring.cycle_ns)
    waited = (rendered - calls > WAIT_NS) & (near_cycle < 2 * CYCLE_CLUSTER_NS)
    late = waited & (rendered > np.maximum(room, calls) + CYCLE_CLUSTER_NS)
    return int(np.count_nonzero(early | late))


def _device_cycles(rendered: np.ndarray, period: int) -> tuple[float, float] | None:
    """(a cycle start, the cycle period) of the device, from when renders returned."""
    reference = int(rendered[0])
    centres, phases = [], []
    for at in range(0, len(rendered), CYCLE_WINDOW):
        window = rendered[at : at + CYCLE_WINDOW]
        phase = (window - reference) % period
        counts = np.bincount((phase * CYCLE_BINS // period).astype(np.int64), minlength=CYCLE_BINS)
        mode = (int(np.argmax(counts)) + 0.5) * period / CYCLE_BINS
        near = (phase - mode + period / 2) % period - period / 2  # circular, around the mode
        close = near[np.abs(near) < CYCLE_CLUSTER_NS]
        if len(close) >= CYCLE_MIN_RENDERS:
            centres.append(float(np.median(window)))
            phases.append(mode + float(np.percentile(close, CYCLE_QUANTILE)))
    if not phases:
        return None
    unwrapped = np.unwrap(np.array(phases), period=period)
    slope = 0.0
    if len(phases) > 1:
        slope = float(np.polyfit(np.array(centres) - reference, unwrapped, 1)[0])
    intercept = float(np.mean(unwrapped - slope * (np.array(centres) - reference)))
    return reference + intercept / (1 - slope), period / (1 - slope)


def _append_probe(journeys: Journeys, probe: str, times: np.ndarray) -> Journeys:
    """``journeys`` with one more (estimated, device) probe of the last element."""
    threads = np.column_stack(
        [journeys.threads, np.full(len(times), MISSING, journeys.threads.dtype)]
    )
    all_times = np.column_stack([journeys.times, times]).astype(journeys.times.dtype)
    name = f"{journeys.probe_names[-1].rsplit(':', 1)[0]}:{probe}"
    out = replace(
        journeys,
        probe_names=[*journeys.probe_names, name],
        segment_kinds=[*journeys.segment_kinds, PLAYOUT],
        probe_klass=[*journeys.probe_klass, ESTIMATED_KLASS],
        times=np.asfortranarray(all_times),
        threads=np.asfortranarray(threads),
        clock_domains=[*journeys.clock_domains, journeys.clock_domains[-1]],
    )
    out.counts = journeys.counts
    return out


def segment_device_flags(journeys: Journeys, table: EventTable) -> list[dict[str, Any]]:
    """Per segment: ``{"device": bool}`` (plus ``"estimated": True`` for a device probe)."""
    if not journeys.path.probes:  # a browser stream: no GStreamer probe, no device seen
        return [{"device": False} for _ in journeys.segment_kinds]
    origin = table.probes[journeys.path.probes[0]]
    flags: list[dict[str, Any]] = []
    for i, kind in enumerate(journeys.segment_kinds):
        if journeys.probe_klass[i + 1] == ESTIMATED_KLASS:
            flags.append({"device": True, "estimated": True})
        elif kind == CAPTURE and i == 0 and origin.factory in DEVICE_SOURCES:
            flags.append({"device": True})
        else:
            flags.append({"device": False})
    return flags
