"""Journeys: for each unit of media, the time it passed each probe of its path.

Contract (what analysis consumes): ``Journeys`` holds a units x probes matrix of
CLOCK_MONOTONIC nanoseconds (``MISSING`` where a unit did not pass a probe), the
thread of each passage, the probe names and the kind of each segment between
consecutive probes, plus per-stream counts of lost, late, duplicated and
reordered packets.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, partial

import numpy as np

from latlab.ingest.counters import unwrap
from latlab.ingest.events import EventTable, Probe
from latlab.ingest.trace_reader import ClockRecord
from latlab.ingest.workers import parallel_map
from latlab.stitch.kinds import CAPTURE, segment_kind
from latlab.stitch.mpegts import PesFrames
from latlab.stitch.mpegts_path import mpegts_stages
from latlab.stitch.paths import StreamPath, find_paths
from latlab.stitch.position import (
    MISSING,
    PacketTable,
    ProbeEvents,
    Ranges,
    RtpClock,
    empty_ranges,
    first_covering,
    learn_packet_table,
    learn_rtp_clock_table,
    mapped_ranges,
    raw_ranges,
    receiver_knots,
    rtp_ranges,
)

CLOCK_RATE = re.compile(r"clock-rate=\(int\)(\d+)")
RTP_MEDIA = re.compile(r"media=\(string\)(audio|video)")
STATE_PLAYING = 4
NONE_TIME = 0xFFFF_FFFF_FFFF_FFFF
MAX_CAPTURE_NS = 10_000_000_000


@dataclass
class Journeys:
    """The journeys of one stream's units."""

    stream_id: str
    media: str
    unit_ns: int
    path: StreamPath
    probe_names: list[str]
    segment_kinds: list[str]
    unit_start: np.ndarray  # positions, ns of origin running time
    times: np.ndarray  # (units, probes) int64 CLOCK_MONOTONIC ns, MISSING if not passed
    threads: np.ndarray  # (units, probes) int32 global thread index, MISSING if unknown
    clock_domains: list[str]
    counts: dict[str, int] = field(default_factory=dict)
    probe_klass: list[str] = field(default_factory=list)  # element klass per probe
    unit_bytes: np.ndarray | None = None  # per unit: encoded size (TS paths), -1 unknown
    unit_keyframe: np.ndarray | None = None  # per unit: a random-access (I) frame
    extra: dict[str, np.ndarray] = field(default_factory=dict)  # per unit: instants off the path
    unit_is_frame: bool = False  # a unit is one coded frame (video, browser audio)
    rtp_clock: RtpClock | None = None  # positions on the RTP clock (sender not traced)

    @cached_property
    def complete(self) -> np.ndarray:
        """Units that passed every probe."""
        return np.all(self.times != MISSING, axis=1)


class _ProbeColumns:
    """Per-probe views of the event columns (the table is grouped by probe)."""

    def __init__(self, table: EventTable) -> None:
        self.table = table

    def events(self, probe: int) -> ProbeEvents:
        """A probe's events; their ``pts`` are running time (see EventTable.running_pts)."""

        def fetch(name: str) -> np.ndarray:
            if name == "pts":
                return self.table.running_pts(probe)
            return self.table.probe_column(probe, name)

        return ProbeEvents(fetch)


def build_journeys(table: EventTable, unit_ms: float = 10.0) -> list[Journeys]:
    """Stitch the journeys of every stream found in the run."""
    columns = _ProbeColumns(table)
    journeys = []
    for path in find_paths(table):
        built = _stream_journeys(table, columns, path, round(unit_ms * 1e6))
        if built is not None:
            journeys.append(built)
    return _drop_dead_ends(journeys)


def _drop_dead_ends(journeys: list[Journeys]) -> list[Journeys]:
    """Leave out paths no unit completed when another from the same origin has some
    (inside webrtcbin an RTP path also reaches the RTCP pads, which carry no media)."""
    alive = {j.probe_names[0] for j in journeys if j.complete.any()}
    return [j for j in journeys if j.complete.any() or j.probe_names[0] not in alive]


def _stream_journeys(
    table: EventTable, columns: _ProbeColumns, path: StreamPath, unit_ns: int
) -> Journeys | None:
    path_probes = [table.probes[i] for i in path.probes]
    video = _media(path_probes[0].caps) == "video"
    if video:
        unit_ns = _frame_ns(columns.events(path_probes[0].index)) or unit_ns
    sent, extra, rtp_clock = None, {}, None
    if path.pid is not None:
        ts_path = mpegts_stages(table, columns, path_probes, path.pid)
        sent, extra = ts_path.sent, ts_path.extra
        stages = [(p, suffix, _made(r)) for p, suffix, r in ts_path.stages]
    else:
        makers, rtp_clock = _ranges_along_path(path_probes, columns, path.ssrc)
        stages = [(p, "", make) for p, make in zip(path_probes, makers, strict=True)]
    probes = [p for p, _, _ in stages]
    origin = stages[0][2]()
    if len(origin.start) == 0:
        return None
    # A video unit is a frame: the grid is the frames' own PTS, not a regular step.
    unit_start = np.unique(origin.start) if video else _unit_grid(origin, unit_ns)
    unit_end = unit_start + unit_ns - 1
    step = None if video else unit_ns
    # Column 0 is left for the capture instant; each probe's passages are written in place.
    times_matrix = _column_matrix(len(unit_start), len(stages) + 1, np.int64)
    threads_matrix = _column_matrix(len(unit_start), len(stages) + 1, np.int32)
    outputs = [(times_matrix[:, k + 1], threads_matrix[:, k + 1]) for k in range(len(stages))]
    makers = [_made(origin), *(make for _, _, make in stages[1:]), *map(_made, extra.values())]
    outputs += [None] * len(extra)
    passages = parallel_map(
        lambda task: first_covering(task[0](), unit_end, step, out=task[1]),
        list(zip(makers, outputs, strict=True)),
    )
    extra_times = dict(zip(extra, (t for t, _ in passages[len(stages) :]), strict=True))
    names = [p.name + suffix for p, suffix, _ in stages]
    klass = [p.klass for p in probes]
    kinds = [segment_kind(a, b) for a, b in itertools.pairwise(probes)]
    if probes[0].factory in DEVICE_SOURCES:
        capture = device_capture_times(origin, unit_start)
    elif rtp_clock is None:
        capture = _capture_times(table, probes[0], unit_start, times_matrix[:, 1])
    else:  # packets from elsewhere: their capture is the sender's to tell
        capture = None
    if capture is None:
        times_matrix, threads_matrix = times_matrix[:, 1:], threads_matrix[:, 1:]
    else:
        times_matrix[:, 0] = capture
        threads_matrix[:, 0] = MISSING
        names = [f"{names[0].rsplit(':', 1)[0]}:{CAPTURE}", *names]
        kinds = [CAPTURE, *kinds]
        klass = ["", *klass]
    keep = _steady_window(times_matrix[:, -1])
    domains = [table.processes[p.process].clock_domain for p in probes]
    journeys = Journeys(
        stream_id=_stream_id(probes, path.ssrc),
        media=_path_media(probes),
        unit_ns=unit_ns,
        path=path,
        probe_names=names,
        segment_kinds=kinds,
        unit_start=unit_start[keep],
        times=times_matrix[keep],
        threads=threads_matrix[keep],
        clock_domains=domains,
        probe_klass=klass,
        unit_is_frame=video,
        rtp_clock=rtp_clock,
    )
    if sent is not None:
        journeys.unit_bytes, journeys.unit_keyframe = _frame_facts(sent, journeys.unit_start)
    journeys.extra = {name: t[keep] for name, t in extra_times.items()}
    links = {i for i, proc in enumerate(table.processes) if proc.kind == "link"}
    journeys.counts = _packet_counts(
        probes, columns, path.ssrc, journeys, capture is not None, links
    )
    return journeys


def _frame_facts(sent: PesFrames, unit_start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each unit's encoded size and whether it is a random-access frame, from the PES sent."""
    known = sent.position >= 0
    position = sent.position[known]
    order = np.argsort(position, kind="stable")
    position = position[order]
    size, keyframe = sent.es_bytes[known][order], sent.random_access[known][order]
    if not len(position):
        return np.full(len(unit_start), MISSING, np.int64), np.zeros(len(unit_start), bool)
    idx = np.clip(np.searchsorted(position, unit_start), 0, len(position) - 1)
    hit = position[idx] == unit_start  # PES positions snap to the frames' own PTS
    return np.where(hit, size[idx], MISSING), hit & keyframe[idx]


def _frame_ns(origin: ProbeEvents) -> int | None:
    """A video source's frame duration: its buffers' duration, else the PTS step."""
    durations = origin.duration[origin.duration > 0]
    if len(durations):
        return int(np.median(durations))
    pts = np.unique(origin.pts[origin.pts >= 0])
    return int(np.median(np.diff(pts))) if len(pts) > 1 else None


RangesMaker = Callable[[], Ranges]


def _made(ranges: Ranges) -> RangesMaker:
    """A maker of ranges already computed."""
    return lambda: ranges


def _ranges_along_path(
    probes: list[Probe], columns: _ProbeColumns, ssrc: int | None
) -> tuple[list[RangesMaker], RtpClock | None]:
    """For every probe, a function mapping its events to media ranges.

    The mappings are learned here, in path order (each from the probes before it);
    the mapping itself is left to the returned functions, so that the probes' ranges
    can be computed at once on several threads. Where the path starts with packets
    (their sender was not traced), positions are counted on their RTP clock, which is
    returned too.
    """
    out: list[RangesMaker] = []
    table: PacketTable | None = None
    clock: RtpClock | None = None
    knots: tuple[np.ndarray, np.ndarray] | None = None
    origin_process = probes[0].process
    last_rtp: ProbeEvents | None = None
    for probe in probes:
        ev = columns.events(probe.index)
        is_rtp = ssrc is not None and bool(np.any(ev.is_rtp & (ev.ssrc == ssrc)))
        if is_rtp:
            if table is None and probe is probes[0]:
                table, clock = learn_rtp_clock_table(ev, ssrc, clock_rate(probes))
            elif table is None:
                table = learn_packet_table(ev, ssrc)
            out.append(partial(rtp_ranges, ev, table, ssrc))
            last_rtp, knots = ev, None
        elif probe.process == origin_process or table is None:
            out.append(partial(raw_ranges, ev))
        else:
            if knots is None and last_rtp is not None:
                knots = receiver_knots(last_rtp, table, ssrc)
            out.append(partial(mapped_ranges, ev, knots) if knots else empty_ranges)
    return out, clock


def clock_rate(probes: list[Probe]) -> int:
    """The RTP clock rate named in the caps along a path (Opus's 48 kHz if none does)."""
    for probe in probes:
        found = CLOCK_RATE.search(probe.caps)
        if found:
            return int(found.group(1))
    return 48_000


def _unit_grid(origin: Ranges, unit_ns: int) -> np.ndarray:
    first, last = int(origin.start.min()), int(origin.end.max())
    count = max((last - first) // unit_ns, 0)
    return first + unit_ns * np.arange(count, dtype=np.int64)


def _steady_window(last_probe: np.ndarray) -> slice:
    """Units between the first and the last that reached the final probe.

    Units before the receiver was ready or still in flight when the run stopped
    are left out; every loss in between counts.
    """
    reached = np.flatnonzero(last_probe != MISSING)
    return slice(reached[0], reached[-1] + 1) if len(reached) else slice(0, 0)


def _column_matrix(rows: int, columns: int, dtype: type) -> np.ndarray:
    """An uninitialised (units, probes) matrix stored column by column."""
    return np.empty((rows, columns), dtype, order="F")


DEVICE_SOURCES = {"jackaudiosrc", "pulsesrc", "alsasrc", "pipewiresrc", "osssrc", "oss4src"}
DELIVERY_WINDOW = 200  # buffers per window of the delivery envelope (device clock drift)
DELIVERY_QUANTILE = 5  # percent: the envelope ignores a few early pushes at start-up


def device_capture_times(origin: Ranges, unit_start: np.ndarray) -> np.ndarray:
    """When each unit's first sample was captured by an audio device, from its deliveries.

    A capture device hands a buffer over once its last sample is in, so a sample at
    media position ``s`` was captured at ``c + s``, where ``c`` is the low envelope of
    the offset between a buffer's push and its end position: pushes are not early (a
    blocked streaming thread only makes them late), except a few at start-up, which
    a low quantile rather than the minimum leaves out. ``c`` is taken per window of
    buffers to follow the device clock's drift. The source's PTS are not trusted for
    the phase: GstAudioBaseSrc aligns them to the clock at start-up, anywhere within
    a period.
    """
    order = np.argsort(origin.end, kind="stable")
    end, pushed = origin.end[order], origin.t_ns[order]
    offset = (pushed - end).astype(np.float64)
    windows = -(-len(offset) // DELIVERY_WINDOW)
    padded = np.full(windows * DELIVERY_WINDOW, np.nan)
    padded[: len(offset)] = offset
    by_window = padded.reshape(windows, DELIVERY_WINDOW)
    floor = np.rint(np.nanpercentile(by_window, DELIVERY_QUANTILE, axis=1)).astype(np.int64)
    window = np.minimum(np.searchsorted(end, unit_start, side="right"), len(end) - 1)
    return unit_start + floor[window // DELIVERY_WINDOW]


def _capture_times(
    table: EventTable, origin: Probe, unit_start: np.ndarray, first_push: np.ndarray
) -> np.ndarray | None:
    """When each unit's first sample was captured, for a live source on a known clock."""
    clocks = playing_clocks(table, origin)
    if not clocks:
        return None
    capture = clock_to_mono(clocks, clocks[-1].base_time + unit_start)
    seen = first_push != MISSING
    waited = first_push[seen] - capture[seen]
    if not len(waited) or not 0 <= np.median(waited) <= MAX_CAPTURE_NS:
        return None  # not a live source: its PTS do not say when it captured
    return capture


def playing_clocks(table: EventTable, probe: Probe) -> list[ClockRecord]:
    """The clock samples of the probe's pipeline while it was playing (with a base time)."""
    return [
        c
        for c in table.processes[probe.process].clocks
        if c.pipeline_id == probe.pipeline_id
        and c.state == STATE_PLAYING
        and c.base_time != NONE_TIME
        and c.clock_ns != NONE_TIME
    ]


def clock_to_mono(clocks: list[ClockRecord], clock_times: np.ndarray) -> np.ndarray:
    """Map pipeline-clock times to CLOCK_MONOTONIC through the recorded clock samples."""
    clock_ns = np.array([c.clock_ns for c in clocks], np.float64)
    mono_ns = np.array([c.mono_ns for c in clocks], np.float64)
    order = np.argsort(clock_ns)
    clock_ns, mono_ns = clock_ns[order], mono_ns[order]
    x = clock_times.astype(np.float64)
    y = np.interp(x, clock_ns, mono_ns)
    y = np.where(x < clock_ns[0], mono_ns[0] + (x - clock_ns[0]), y)
    y = np.where(x > clock_ns[-1], mono_ns[-1] + (x - clock_ns[-1]), y)
    return np.rint(y).astype(np.int64)


def _path_media(probes: list[Probe]) -> str:
    """Audio or video: the first probe whose caps say (RTP caps name it as ``media``)."""
    for probe in probes:
        kind = _media(probe.caps)
        if kind == "other" and probe.caps.startswith("application/x-rtp"):
            found = RTP_MEDIA.search(probe.caps)
            kind = found.group(1) if found else kind
        if kind != "other":
            return kind
    return "other"


def _media(caps: str) -> str:
    kind = caps.split("/", 1)[0]
    return kind if kind in ("audio", "video") else "other"


def _stream_id(probes: list[Probe], ssrc: int | None) -> str:
    origin, last = probes[0].name.rsplit(":", 1)[0], probes[-1].name.rsplit(":", 1)[0]
    suffix = f" ssrc={ssrc:08x}" if ssrc is not None else ""
    return f"{origin}->{last}{suffix}"


def _packet_counts(
    probes: list[Probe],
    columns: _ProbeColumns,
    ssrc: int | None,
    journeys: Journeys,
    has_capture: bool,
    link_processes: set[int],
) -> dict[str, int]:
    """Lost and late units; duplicated and reordered packets where each host received them.

    A unit is lost when it left one host and never reached the next (whatever an
    emulated link in between did); late when it reached a host but not its later
    probes (e.g. a jitter buffer dropped it).
    """
    offset = 1 if has_capture else 0
    present = journeys.times != MISSING
    lost = np.zeros(len(present), bool)
    late = np.zeros(len(present), bool)
    duplicated = reordered = 0
    hosts = [j for j, p in enumerate(probes) if p.process not in link_processes]
    for before, j in itertools.pairwise(hosts):
        if probes[j].process == probes[before].process:
            continue
        lost |= present[:, before + offset] & ~present[:, j + offset]
        for k in hosts:
            if k > j and probes[k].process == probes[j].process:
                late |= present[:, j + offset] & ~present[:, k + offset]
        if ssrc is not None:
            arrivals = columns.events(probes[j].index)
            arrivals = arrivals.select(arrivals.is_rtp & (arrivals.ssrc == ssrc))
            duplicated += _duplicates(arrivals)
            reordered += _reordered(arrivals)
    return {
        "lost": int(lost.sum()),
        "late": int((late & ~lost).sum()),
        "duplicated": duplicated,
        "reordered": reordered,
    }


def _duplicates(ev: ProbeEvents) -> int:
    keys = np.sort(ev.packet_keys())
    return int(np.count_nonzero(keys[1:] == keys[:-1]))


def _reordered(ev: ProbeEvents) -> int:
    """Packets that arrived after a packet with a higher (unwrapped) sequence number."""
    if len(ev.t_ns) < 2:
        return 0
    extended = unwrap(ev.seq[np.argsort(ev.t_ns, kind="stable")], 1 << 16)
    return int(np.sum(extended[1:] < np.maximum.accumulate(extended)[:-1]))
