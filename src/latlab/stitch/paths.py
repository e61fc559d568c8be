"""Find the paths media takes through a run: pad links inside a process, RTP across processes.

A path is the ordered list of probes one stream passes, from the source element
that produced the media to the sink that rendered it. Inside a process it follows
pad links (each probe names its peer element); across processes it follows the
RTP SSRC from a sink that sent packets to a source that received them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from latlab.ingest.events import EventTable, Probe
from latlab.ingest.trace_format import Kind

MAX_PATH_LENGTH = 256


@dataclass(frozen=True)
class StreamPath:
    """One stream's path: probes in order, and the SSRC it crossed the network with."""

    probes: tuple[int, ...]
    ssrc: int | None

    @property
    def origin(self) -> int:
        """The first probe (the source element's src pad)."""
        return self.probes[0]


class _Index:
    """Per-probe facts needed to walk the graph, computed column-wise once."""

    def __init__(self, table: EventTable) -> None:
        self.table = table
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


def _distinct(values: np.ndarray) -> set[int]:
    """Distinct values, fast when they are all the same (one SSRC per pad)."""
    if len(values) == 0:
        return set()
    if np.all(values == values[0]):
        return {int(values[0])}
    return {int(v) for v in np.unique(values)}


def find_paths(table: EventTable) -> list[StreamPath]:
    """Every path from a media source to a sink, following RTP across processes."""
    index = _Index(table)
    paths: list[StreamPath] = []
    for probe in table.probes:
        if _is_media_origin(probe, index):
            for probes, ssrc in _walk(index, probe, ssrc=None, depth=0):
                paths.append(StreamPath(tuple(probes), ssrc))
    if not paths:  # receive-only traces: start at a source that carried RTP
        for probe in table.probes:
            if probe.element_is_source and index.is_rtp[probe.index]:
                for ssrc in sorted(index.ssrcs.get(probe.index, ())):
                    for probes, _ in _walk(index, probe, ssrc=ssrc, depth=0):
                        paths.append(StreamPath(tuple(probes), ssrc))
    return paths


def _is_media_origin(probe: Probe, index: _Index) -> bool:
    return (
        probe.kind == Kind.PUSH
        and probe.element_is_source
        and not index.is_rtp[probe.index]
        and index.counts[probe.index] > 0
    )


def _walk(
    index: _Index, probe: Probe, ssrc: int | None, depth: int
) -> list[tuple[list[int], int | None]]:
    """All continuations from ``probe`` to a render probe (depth-first)."""
    if depth > MAX_PATH_LENGTH:
        return []
    key = (probe.process, probe.peer_element)
    results: list[tuple[list[int], int | None]] = []
    render = index.render.get(key)
    if render is not None:
        results += _after_render(index, probe, render, ssrc, depth)
    for nxt in index.by_element.get(key, []):
        if nxt.index != probe.index:
            for rest, rest_ssrc in _walk(index, nxt, ssrc, depth + 1):
                results.append(([probe.index, *rest], rest_ssrc))
    return results


def _after_render(
    index: _Index, probe: Probe, render: Probe, ssrc: int | None, depth: int
) -> list[tuple[list[int], int | None]]:
    """End the path at a sink, or cross to the processes that received its RTP packets."""
    here = [probe.index, render.index]
    if not index.ssrcs.get(probe.index):  # carried no RTP (a link may carry other traffic too)
        return [(here, ssrc)]
    results: list[tuple[list[int], int | None]] = []
    for packet_ssrc in sorted(index.ssrcs.get(probe.index, ())):
        if ssrc is not None and packet_ssrc != ssrc:
            continue
        for receiver in _receivers(index, probe.process, packet_ssrc):
            for rest, _ in _walk(index, receiver, packet_ssrc, depth + 1):
                results.append(([*here, *rest], packet_ssrc))
    return results or [(here, ssrc)]


def _receivers(index: _Index, sender_process: int, ssrc: int) -> list[Probe]:
    """The next hop of ``ssrc``'s packets: source pads in other processes that carried them.

    From a host the next hop is the emulated link when one carried the packets;
    from a link it is a host.
    """
    processes = index.table.processes
    candidates = [
        p
        for p in index.table.probes
        if p.process != sender_process
        and p.element_is_source
        and ssrc in index.ssrcs.get(p.index, ())
    ]
    from_link = processes[sender_process].kind == "link"
    links = [p for p in candidates if processes[p.process].kind == "link"]
    if from_link:
        return [p for p in candidates if processes[p.process].kind != "link"]
    return links or candidates
