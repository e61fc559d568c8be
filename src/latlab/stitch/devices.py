"""Device time in journeys: the capture period and the playout buffer of audio devices.

The tracer sees an audio sink's ``done`` when the push into the sink returned:
for an audio sink that is when the samples were written into its ring buffer,
not when they left the device. When the run's ``[devices]`` (run.json) put an
audio server behind the path's last element, :func:`add_device_playout`
appends a final probe ``PROCESS/SINK:device`` at the estimated instant the
samples leave the device: the render instant plus the sink's ring buffer
(periods x period of the device) plus the playback latency the server reported.
It is an estimate from configuration and the server's report, not an
observation; summary.json marks it ``"device": true, "estimated": true``.

The capture segment of a path whose origin is an audio device source
(``jackaudiosrc``, ``pulsesrc``, ``alsasrc``) is device time too: it runs from
the capture instant of the unit's first sample (its PTS) to the source's push,
so it holds the capture period (and the capture latency the element reports).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from latlab.ingest.events import EventTable
from latlab.stitch.journeys import CAPTURE, Journeys
from latlab.stitch.position import MISSING

DEVICE_SOURCES = {"jackaudiosrc", "pulsesrc", "alsasrc", "pipewiresrc", "osssrc"}
DEVICE_SINKS = {"jackaudiosink", "pulsesink", "alsasink", "pipewiresink", "osssink"}
DEVICE_PROBE = "device"
PLAYOUT = "playout"


def device_playout_ns(device: dict[str, Any]) -> int:
    """Estimated time from an audio sink's render to the samples leaving ``device``.

    The sink's ring buffer (``buffer_us``: periods x period) plus the playback
    latency the server reported during the run (else at start, else none).
    """
    reported = device.get("reported_latency_in_run") or device.get("reported_latency") or {}
    server_ms = float(reported.get("playback_ms", 0.0))
    return round(int(device.get("buffer_us", 0)) * 1000 + server_ms * 1e6)


def _host_device(run: dict[str, Any], process: str) -> dict[str, Any] | None:
    """The device on the host of ``process`` (a run.json process name), if any."""
    hosts = {p.get("name"): p.get("host") for p in run.get("processes", [])}
    host = hosts.get(process)
    for device in run.get("devices") or []:
        if host is not None and device.get("host") == host:
            return device
    return None


def add_device_playout(journeys: Journeys, table: EventTable, run: dict[str, Any]) -> Journeys:
    """``journeys`` with a final ``SINK:device`` probe when its sink plays to a device."""
    last = table.probes[journeys.path.probes[-1]]
    if not last.is_render or last.factory not in DEVICE_SINKS:
        return journeys
    process = table.processes[last.process].name
    device = _host_device(run, process)
    if device is None:
        return journeys
    delay = device_playout_ns(device)
    render = journeys.times[:, -1]
    leaves = np.where(render != MISSING, render + delay, MISSING)
    times = np.column_stack([journeys.times, leaves]).astype(journeys.times.dtype)
    threads = np.column_stack(
        [journeys.threads, np.full(len(leaves), MISSING, journeys.threads.dtype)]
    )
    name = f"{journeys.probe_names[-1].rsplit(':', 1)[0]}:{DEVICE_PROBE}"
    out = replace(
        journeys,
        probe_names=[*journeys.probe_names, name],
        segment_kinds=[*journeys.segment_kinds, PLAYOUT],
        probe_klass=[*journeys.probe_klass, "Audio/Device"],
        times=np.asfortranarray(times),
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
        to_probe = journeys.probe_names[i + 1]
        if to_probe.endswith(f":{DEVICE_PROBE}") and i == len(journeys.segment_kinds) - 1:
            flags.append({"device": True, "estimated": True})
        elif kind == CAPTURE and i == 0 and origin.factory in DEVICE_SOURCES:
            flags.append({"device": True})
        else:
            flags.append({"device": False})
    return flags
