"""Find the paths media takes through a run: pad links inside a process, RTP or MPEG-TS across.

A path is the ordered list of probes one stream passes, from the source element
that produced the media to the sink that rendered it. Inside a process it follows
pad links (each probe names its peer element); across processes it follows the
RTP SSRC from a sink that sent packets to a source that received them, or, for a
transport stream, the PES starts (PID and PTS) both sides saw.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from latlab.ingest.events import EventTable, Probe
from latlab.ingest.trace_format import Kind, PadFlag
from latlab.stitch.kinds import NETWORK_SINKS
from latlab.stitch.mpegts import TS_DEMUXERS, TS_MUXERS, demux_pad_carries, pes_keys, pid_of_mux_pad

MAX_PATH_LENGTH = 256
NETWORK_SOURCES = {"nicesrc", "udpsrc", "srtsrc", "tcpclientsrc", "ristsrc", "latlab-linkemu"}
MAX_WALK_STEPS = 20_000  # a graph of bins can have more paths than are worth listing


@dataclass(frozen=True)
class StreamPath:
    """One stream's path: probes in order, and the SSRC (or TS PID) it crossed the network with."""

    probes: tuple[int, ...]
    ssrc: int | None
    pid: int | None = None

    @property
    def origin(self) -> int:
        """The first probe (the source element's src pad)."""
        return self.probes[0]


class _Index:
    """Per-probe facts needed to walk the graph, computed column-wise once."""

    def __init__(self, table: EventTable) -> None:
        self.table = table
        self.steps = 0  # walk steps taken
        self.counts = np.array([table.probe_count(p.index) for p in table.probes])
        self.is_rtp = np.zeros(len(table.probes), bool)
        self.ssrcs: dict[int, set[int]] = {}
        for p in table.probes:
            rtp = table.probe_column(p.index, "is_rtp")
            self.is_rtp[p.index] = rtp.mean() > 0.5 if len(rtp) else False
            self.ssrcs[p.index] = _distinct(table.probe_column(p.index, "ssrc")[rtp])
        self.by_element: dict[tuple[int, str], list[Probe]] = defaultdict(list)
        for p in table.probes:
            if p.kind == Kind.PUSH:
                self.by_element[(p.process, p.element)].append(p)
        self.render: dict[tuple[int, str], Probe] = {
            (p.process, p.element): p for p in table.probes if p.kind == Kind.DONE
        }
        self.pes: dict[int, np.ndarray] = {}  # probe -> sorted PES keys it carried
        for p in table.probes:
            pes = table.pes_of(p.index)
            if len(pes):
                self.pes[p.index] = np.unique(pes_keys(pes.select(pes.pts >= 0)))


def _distinct(values: np.ndarray) -> set[int]:
    """Distinct values, fast when they are all the same (one SSRC per pad)."""
    if len(values) == 0:
        return set()
    if np.all(values == values[0]):
        return {int(values[0])}
    return {int(v) for v in np.unique(values)}


def _payloaded(index: _Index, probes: list[int]) -> int | None:
    """The SSRC a path's units were payloaded into, when its packets never left the
    process (or were not seen elsewhere, e.g. after an SFU rewrote them): that of the
    first pad on it that carried RTP of one SSRC. After it, a pad where several streams
    meet (a funnel) is read for that SSRC's packets only."""
    for probe in probes:
        if index.is_rtp[probe] and len(index.ssrcs[probe]) == 1:
            return next(iter(index.ssrcs[probe]))
    return None


def find_paths(table: EventTable) -> list[StreamPath]:
    """Every path from a media source to a sink, following RTP across processes."""
    index = _Index(table)
    paths: list[StreamPath] = []
    for probe in table.probes:
        if _is_media_origin(probe, index):
            for probes, via in _walk(index, probe, _Via(), depth=0):
                ssrc = via.ssrc if via.ssrc is not None else _payloaded(index, probes)
                paths.append(StreamPath(tuple(probes), ssrc, via.pid))
    paths = _best_per_route(paths, index.counts)
    carried = {path.ssrc for path in paths}
    return paths + _paths_from_outside(index, carried)


def _paths_from_outside(index: _Index, carried: set[int | None]) -> list[StreamPath]:
    """Paths of RTP streams that no traced process sent (a browser's, an untraced
    sender's): from where their packets were first seen (the emulated link that carried
    them, else the receiving sources) through the traced processes that received them."""
    processes = index.table.processes
    found: list[StreamPath] = []
    for ssrc in sorted(set().union(*index.ssrcs.values()) - carried):
        sources = [
            p
            for p in index.table.probes
            if p.kind == Kind.PUSH
            and p.element_is_source
            and index.is_rtp[p.index]
            and ssrc in index.ssrcs[p.index]
        ]
        links = [p for p in sources if processes[p.process].kind == "link"]
        for start in links or sources:
            for probes, _ in _walk(index, start, _Via(ssrc=ssrc), depth=0):
                traced = (index.table.probes[i].process for i in probes)
                if any(processes[process].kind != "link" for process in traced):
                    found.append(StreamPath(tuple(probes), ssrc))
    return _through_paths(_best_per_route(found, index.counts))


def _through_paths(paths: list[StreamPath]) -> list[StreamPath]:
    """Leave out a path that stops at an element another path of the same stream goes on
    through (a bin's own sink pad: webrtcbin's, a decoding bin's)."""
    kept = []
    for path in paths:
        stem = path.probes[:-1]
        goes_on = any(
            other.ssrc == path.ssrc
            and len(other.probes) > len(path.probes)
            and other.probes[: len(stem)] == stem
            for other in paths
        )
        if not goes_on:
            kept.append(path)
    return kept


def _best_per_route(paths: list[StreamPath], counts: np.ndarray) -> list[StreamPath]:
    """One path per (origin, end, SSRC), as a bin's ghost and proxy pads give several
    ways through the same elements: the one whose thinnest probe carried most events
    (a detour through RTCP pads carries few), then the one through most probes."""
    best: dict[tuple[int, int, int | None], tuple[tuple[int, int], StreamPath]] = {}
    for path in paths:
        key = (path.probes[0], path.probes[-1], path.ssrc)
        score = (int(counts[list(path.probes)].min()), len(path.probes))
        if key not in best or score > best[key][0]:
            best[key] = (score, path)
    return [path for _, path in best.values()]


@dataclass(frozen=True)
class _Via:
    """What a path crossed processes with so far (an RTP SSRC, or a TS PID) and the
    processes it has been through (a stream does not come back to one)."""

    ssrc: int | None = None
    pid: int | None = None
    hosts: frozenset[int] = frozenset()

    def leaving(self, process: int, ssrc: int | None = None) -> _Via:
        """The same crossing after leaving ``process`` (with this SSRC, if given)."""
        return _Via(self.ssrc if ssrc is None else ssrc, self.pid, self.hosts | {process})


def _is_media_origin(probe: Probe, index: _Index) -> bool:
    return (
        probe.kind == Kind.PUSH
        # a source, or an element that pulls from one (untraced: pulls are not pushes)
        and (probe.element_is_source or probe.element_pulls)
        and not probe.pad_flags & PadFlag.GHOST_OR_PROXY  # a bin's pad, not its source's
        # what arrives from a network was made elsewhere
        and "Network" not in probe.klass
        and probe.factory not in NETWORK_SOURCES
        and not index.is_rtp[probe.index]
        and probe.index not in index.pes
        and index.counts[probe.index] > 0
    )


_Continuations = list[tuple[list[int], _Via]]


def _walk(
    index: _Index,
    probe: Probe,
    via: _Via,
    depth: int,
    seen: frozenset[int] = frozenset(),
    packets: frozenset[int] = frozenset(),
) -> _Continuations:
    """All continuations from ``probe`` to a render probe (depth-first).

    A probe is visited once per path (a bin's ghost pads lead back into the bin), a
    pad whose RTP packets share no SSRC with the last RTP pad of the path
    (``packets``) is not the same stream (webrtcbin's send and receive paths cross the
    same elements), and the walk gives up after ``MAX_WALK_STEPS`` steps.
    """
    index.steps += 1
    if depth > MAX_PATH_LENGTH or index.steps > MAX_WALK_STEPS:
        return []
    if probe.peer_factory in TS_MUXERS and via.pid is None:
        via = _Via(via.ssrc, pid_of_mux_pad(probe.peer_pad), via.hosts)
    key = (probe.process, probe.peer_element)
    results: _Continuations = []
    render = index.render.get(key)
    if render is not None:
        results += _after_render(index, probe, render, via, depth, packets)
    seen = seen | {probe.index}
    packets = frozenset(index.ssrcs.get(probe.index) or packets)
    for nxt in index.by_element.get(key, []):
        theirs = index.ssrcs.get(nxt.index)
        other_stream = bool(packets and theirs and packets.isdisjoint(theirs))
        if nxt.index in seen or other_stream or not _carries(nxt, via):
            continue
        for rest, rest_via in _walk(index, nxt, via, depth + 1, seen, packets):
            results.append(([probe.index, *rest], rest_via))
    return results


def _carries(probe: Probe, via: _Via) -> bool:
    """Whether a demuxer's source pad carries the path's PID (any other pad: yes)."""
    return (
        probe.factory not in TS_DEMUXERS or via.pid is None or demux_pad_carries(probe.pad, via.pid)
    )


def _after_render(
    index: _Index,
    probe: Probe,
    render: Probe,
    via: _Via,
    depth: int,
    packets: frozenset[int] = frozenset(),
) -> _Continuations:
    """End the path at a sink, or cross to the processes that received its packets.

    A network sink fed encrypted packets (SRTP) shows no RTP header; it sends the
    SSRCs (``packets``) the path carried last.
    """
    here = [probe.index, render.index]
    if probe.index in index.pes:
        return _across_ts(index, probe, here, via, depth)
    ssrcs = index.ssrcs.get(probe.index) or (packets if render.factory in NETWORK_SINKS else set())
    if not ssrcs:  # carried no RTP (a link may carry other traffic too)
        return [(here, via)]
    results: _Continuations = []
    for packet_ssrc in sorted(ssrcs):
        if via.ssrc is not None and packet_ssrc != via.ssrc:
            continue
        onward = via.leaving(probe.process, packet_ssrc)
        for receiver in _receivers(index, probe.process, packet_ssrc):
            if receiver.process in onward.hosts:
                continue
            for rest, _ in _walk(index, receiver, onward, depth + 1):
                results.append(([*here, *rest], onward))
    return results or [(here, via)]


def _across_ts(
    index: _Index, probe: Probe, here: list[int], via: _Via, depth: int
) -> _Continuations:
    """Cross to the sources in other processes that received the same PES starts."""
    keys = index.pes[probe.index]
    if via.pid is not None:
        keys = keys[(keys >> 33) == via.pid]
    candidates = [
        receiver
        for receiver in index.table.probes
        if receiver.index in index.pes
        and receiver.process != probe.process
        and receiver.element_is_source
        and len(np.intersect1d(keys, index.pes[receiver.index], assume_unique=True))
    ]
    results: _Continuations = []
    onward = via.leaving(probe.process)
    for receiver in _next_hop(index, probe.process, candidates):
        if receiver.process in onward.hosts:
            continue
        for rest, _ in _walk(index, receiver, onward, depth + 1):
            results.append(([*here, *rest], via))
    return results or [(here, via)]


def _receivers(index: _Index, sender_process: int, ssrc: int) -> list[Probe]:
    """The next hop of ``ssrc``'s packets: source pads in other processes that carried them."""
    candidates = [
        p
        for p in index.table.probes
        if p.process != sender_process
        and p.element_is_source
        and ssrc in index.ssrcs.get(p.index, ())
    ]
    return _next_hop(index, sender_process, candidates)


def _next_hop(index: _Index, sender_process: int, candidates: list[Probe]) -> list[Probe]:
    """Of the sources that saw a stream, the next hop from ``sender_process``: from a host
    the emulated link when one carried it (else the hosts), from a link a host."""
    processes = index.table.processes
    links = [p for p in candidates if processes[p.process].kind == "link"]
    if processes[sender_process].kind == "link":
        return [p for p in candidates if processes[p.process].kind != "link"]
    return links or candidates
