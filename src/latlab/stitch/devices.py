"""Device time in journeys: the capture period and the playout buffer of audio devices.

The tracer sees an audio sink's ``done`` when the push into the sink returned:
for an audio sink that is when the samples were written into its ring buffer,
not when they left the device. When the run's ``[devices]`` (run.json) put an
audio server behind the path's last element, :func:`add_device_playout`
appends two estimated probes:

* ``PROCESS/SINK:device``: when the samples leave the sink's ring buffer for the
  audio server. A GStreamer sink schedules a buffer at ``base_time + running_time +
  latency`` on the pipeline clock (the tracer records all three) and writes its ring
  buffer contiguously from there (:func:`written_contiguously`). How the ring buffer
  lines up with the device's periods is not in the pushes: against the black box on
  JACK the estimate was 0.6 to 9.9 ms early over seventeen runs, within one period (a full
  ring buffer, the estimate this replaced, was 34 ms late). Without a clock or latency
  record it falls back to the render plus a full ring buffer (periods x period of the
  device), an upper bound.
* ``PROCESS/SINK:output``: when they leave the device: plus the playback latency the
  server reported (JACK's port latency, the dummy driver's periods), if it reported one.

Both are estimates, not observations; summary.json marks their segments
``"device": true, "estimated": true``. ``pulsesink`` writes its samples into the
server's stream as it renders (``SERVER_STREAM_SINKS``), so its ``device`` is the
render. Its schedule put the samples 0 ms after the render in most runs but 7.4 and
21.5 ms after it in two, where a PulseAudio black box
(``scenarios/l16-pulse-blackbox.toml``) then left +2.5 and -12.7 ms unexplained; with
the render, +9.9 and +9.8 ms, and +2.2 to +10.0 ms over ten runs: the samples' wait
in the server's stream buffer, which this estimate does not model, and how each
reader's periods line up with the null sink's renders.

The capture segment of a path whose origin is an audio device source
(``jackaudiosrc``, ``pulsesrc``, ``alsasrc``) is device time too: it runs from
the capture instant of the unit's first sample (from the source's deliveries:
:func:`latlab.stitch.journeys.device_capture_times`) to the source's push, so it
holds the capture period.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from latlab.ingest.events import EventTable
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
        leaves_sink = render
    else:
        leaves_sink = scheduled_presentation(journeys, table, sink)
    if leaves_sink is None:
        leaves_sink = np.where(render != MISSING, render + ring_buffer_ns(device), MISSING)
    out = _append_probe(journeys, DEVICE_PROBE, leaves_sink)
    server_ns = server_playback_ns(device)
    if server_ns > 0:
        leaves_device = np.where(leaves_sink != MISSING, leaves_sink + server_ns, MISSING)
        out = _append_probe(out, OUTPUT_PROBE, leaves_device)
    return out


def scheduled_presentation(journeys: Journeys, table: EventTable, sink: int) -> np.ndarray | None:
    """Per unit: when the sink presents its first sample (CLOCK_MONOTONIC ns), never
    before the render; None without the pipeline's clock or latency records.

    The sink schedules a buffer at ``base_time + running_time + latency`` on the
    pipeline clock but writes its ring buffer contiguously, as long as the schedule
    stays within its alignment threshold of where the samples already written put the
    next one (:func:`written_contiguously`). A unit that starts later in a buffer than
    the buffer's first unit is presented that much later."""
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
    presented = written_contiguously(schedule, duration, running)
    render = journeys.times[:, -1]
    seen = render != MISSING
    at = np.minimum(np.searchsorted(rendered, render), len(rendered) - 1)
    matched = seen & (rendered[at] == render)
    if not matched.any():
        return None
    buffers, buffer_of_unit = np.unique(render, return_inverse=True)
    first_start = np.full(len(buffers), np.iinfo(np.int64).max)
    np.minimum.at(first_start, buffer_of_unit, journeys.unit_start)
    into_buffer = journeys.unit_start - first_start[buffer_of_unit]
    scheduled = presented[at] + into_buffer
    typical = int(np.median(scheduled[matched] - render[matched]))
    scheduled = np.where(matched, scheduled, render + typical)
    return np.where(seen, np.maximum(scheduled, render), MISSING)


def written_contiguously(
    schedule: np.ndarray, duration: np.ndarray, running: np.ndarray
) -> np.ndarray:
    """When each buffer leaves an audio sink's ring buffer, from its schedule.

    ``GstAudioBaseSink`` places the first buffer by its schedule, then writes each one
    right after the samples before it; it realigns to the schedule only when the two
    are more than its alignment threshold apart (say after a gap). So small moves of
    the schedule, such as a jitter buffer's skew correction of the PTS, do not move
    the playout. Buffers are in render order; a duration that is missing is taken from
    the running time of the next buffer."""
    following = np.append(running[1:] - running[:-1], 0)
    length = np.where(duration > 0, duration, np.maximum(following, 0))
    written = np.concatenate([[0], np.cumsum(length[:-1])])
    offset = schedule - written  # where the schedule would put the first sample
    placed = np.empty_like(offset)
    start, anchor = 0, offset[0]
    while start < len(offset):  # once per realignment, not per buffer
        apart = np.flatnonzero(np.abs(offset[start:] - anchor) > ALIGNMENT_THRESHOLD_NS)
        end = start + apart[0] if len(apart) else len(offset)
        placed[start:end] = anchor
        if end < len(offset):
            anchor = offset[end]
        start = end
    return written + placed


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
