"""The stages of a path that crosses processes as an MPEG transport stream.

Walks the probes of a :class:`~latlab.stitch.paths.StreamPath` whose crossing is a
TS PID and maps every probe's events to media positions with the mappings of
:mod:`latlab.stitch.mpegts`. A receiving source probe becomes two stages: the
first byte of each frame delivered, then its last byte.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from latlab.ingest.events import EventTable, Probe
from latlab.ingest.pes import PesTable
from latlab.ingest.trace_format import Kind
from latlab.stitch.mpegts import (
    MuxInputs,
    PesFrames,
    demuxer_knots,
    done_ranges,
    frame_ranges,
    pid_of_mux_pad,
    receiver_frames,
    sender_frames,
)
from latlab.stitch.position import ProbeEvents, Ranges, empty_ranges, mapped_ranges, raw_ranges

Stage = tuple[Probe, str, Ranges]  # probe, label suffix, the media ranges it saw
FIRST_BYTE = " first byte"
LAST_BYTE = " last byte"


class _Columns(Protocol):
    def events(self, probe: int) -> ProbeEvents: ...


@dataclass
class TsPath:
    """What walking a TS path gives: its stages, the frames sent, and instants off the path."""

    stages: list[Stage]
    sent: PesFrames | None  # positions, ES sizes, random-access flags; None without a muxer
    extra: dict[str, Ranges] = field(default_factory=dict)  # e.g. a link's last byte out


def mpegts_stages(table: EventTable, columns: _Columns, probes: list[Probe], pid: int) -> TsPath:
    """Every stage of a TS path with the media ranges its events cover, and the frames sent."""
    walker = _Walker(table, columns.events, pid)
    stages: list[Stage] = []
    for probe in probes:
        stages += walker.stages_of(probe)
    return TsPath(stages, walker.sent, walker.extra)


class _Walker:
    """The mappings learned so far along one path."""

    def __init__(
        self,
        table: EventTable,
        events: Callable[[int], ProbeEvents],
        pid: int,
    ) -> None:
        self.table, self.events, self.pid = table, events, pid
        self.origin_process: int | None = None
        self.previous: tuple[Ranges, np.ndarray] | None = None  # last raw probe: ranges, sizes
        self.sent: PesFrames | None = None
        self.sent_first: Ranges | None = None
        self.received: PesFrames | None = None  # at the latest TS probe of the receiver
        self.knots: tuple[np.ndarray, np.ndarray] | None = None
        self.extra: dict[str, Ranges] = {}  # instants of each frame off the path

    def stages_of(self, probe: Probe) -> list[Stage]:
        if self.origin_process is None:
            self.origin_process = probe.process
        ev = self.events(probe.index)
        pes = self._pes(probe)
        if probe.process == self.origin_process:
            return [(probe, "", self._sender_ranges(probe, ev, pes))]
        if len(pes) and self.sent is not None:
            frames = receiver_frames(pes, self._threads(probe, pes), self.sent)
            if self.table.processes[probe.process].kind == "link":
                return self._link_stages(probe, frames)
            last = (probe, "", frame_ranges(frames, "last"))
            arrival = self.received is None  # else further on (a queue): frames leave it
            self.received = frames  # the demuxer reads from the latest TS probe
            if not arrival:
                return [last]
            return [(probe, FIRST_BYTE, frame_ranges(frames, "first")), last]
        if self.knots is None and self.received is not None:
            self.knots = demuxer_knots(ev, self.received)
        return [(probe, "", mapped_ranges(ev, self.knots) if self.knots else empty_ranges())]

    def _link_stages(self, probe: Probe, frames: PesFrames) -> list[Stage]:
        """An emulated link: a frame's first packet in (or out) on the path, its last aside.

        The last packet out of a rate-limited link can come after the receiver
        already has the frame's first bytes, so it is kept off the path (``extra``).
        """
        self.extra[f"{probe.name}{LAST_BYTE}"] = frame_ranges(frames, "last")
        return [(probe, FIRST_BYTE, frame_ranges(frames, "first"))]

    def _sender_ranges(self, probe: Probe, ev: ProbeEvents, pes: PesTable) -> Ranges:
        if len(pes) and self.previous is not None:
            every_pid = self.table.pes_of(probe.index)
            inputs = self._mux_inputs(probe)
            inputs.setdefault(self.pid, self.previous)
            threads = self._threads(probe, every_pid)
            self.sent = sender_frames(every_pid, threads, inputs, self.pid)
            self.sent_first = frame_ranges(self.sent, "first")
            return self.sent_first
        if probe.is_render and self.sent_first is not None:
            return done_ranges(self.sent_first, ev)
        timed = ev.select(ev.pts >= 0)
        ranges = raw_ranges(timed)
        self.previous = (ranges, timed.size)
        return ranges

    def _mux_inputs(self, mux_src: Probe) -> MuxInputs:
        """Every stream entering the muxer, by the PID its sink pad's name gives it."""
        inputs: MuxInputs = {}
        for probe in self.table.probes:
            pid = pid_of_mux_pad(probe.peer_pad)
            if (
                pid is not None
                and probe.process == mux_src.process
                and probe.peer_element == mux_src.element
                and probe.kind == Kind.PUSH
            ):
                ev = self.events(probe.index)
                timed = ev.select(ev.pts >= 0)
                inputs[pid] = (raw_ranges(timed), timed.size)
        return inputs

    def _pes(self, probe: Probe) -> PesTable:
        pes = self.table.pes_of(probe.index)
        return pes.select(pes.pid == self.pid)

    def _threads(self, probe: Probe, pes: PesTable) -> np.ndarray:
        lookup = self.table.parts[probe.process].thread_lookup
        return lookup[np.minimum(pes.thread_idx, len(lookup) - 1)]
