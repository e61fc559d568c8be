"""Journeys of frames through an SFU: a publisher's transforms, the SFU host's capture,
a subscriber's transforms.

A browser in a room records every encoded frame at its transforms
(``www/frames.js``): the publisher's sender transform names a frame by the SSRC and RTP
timestamp it sends, a subscriber's receiver transform by those of the leg it receives,
which the SFU rewrote. The SFU host's capture, matched packet by packet
(:mod:`latlab.analysis.sfu_dwell`), joins the two: each forwarded packet carries its
egress SSRC and timestamp and those of the ingress packet it came from. So each frame's
journey, per publisher stream (a simulcast layer) and subscriber leg, is::

    [PUB/capture] -> PUB/sender-transform -> [link] -> HOST/ingress
      -> HOST/egress:SUB -> [link] -> SUB/received -> SUB/receiver-transform
      -> [SUB's own stages]

where the subscriber's own stages (``stitch.browser_receiver``: NetEq's decode, the
renderer and its output device for audio; the frame buffer, the decoder and the
compositor for video) follow the frame under the leg's SSRC and timestamp.

A publisher traced by latlab's tracer (a webrtcbin peer in the room) has its own
pipeline's journeys instead, one per 10 ms of audio: :func:`sfu_legs_of_traced`
extends each with the packet that carried the unit's end (its RTP timestamp read at the
payloader) through the SFU and the frame of it the subscriber's transform saw::

    pub/src:src -> ... -> pub/nicesink0:sink -> HOST/ingress -> HOST/egress:SUB
      -> SUB/received -> SUB/receiver-transform -> [SUB's own stages]

where ``HOST/ingress`` and ``HOST/egress:SUB`` are the first packet of the frame to
arrive at the SFU host and the first of it to leave for that subscriber (one kernel
clock: the ``forwarding`` segment between them has no clock error). A video frame's
journey starts at the sender transform: Chromium gives its encoded video frames no
capture time (audio frames have one). A unit is a frame
the SFU forwarded to that leg: frames of a layer the leg did not get at the time are
not counted; a forwarded frame that never reached the subscriber's transform is lost
(between the first and the last frame that did: before the subscriber's page recorded
and after it stopped, nothing is known).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from latlab.ingest.browser_records import BrowserFrames, BrowserLog
from latlab.ingest.counters import unwrap
from latlab.ingest.events import EventTable
from latlab.stitch.browser import (
    AUDIO_RATE,
    RTP_WRAP,
    VIDEO_RATE,
    capture_ns,
    link_columns,
    lookup,
    take_at,
    with_stages,
)
from latlab.stitch.browser_legs import unit_rtp_at_payloader
from latlab.stitch.browser_receiver import OPUS_LOOKAHEAD, receiver_stages
from latlab.stitch.journeys import Journeys
from latlab.stitch.kinds import FORWARDING, NETWORK, PROCESSING
from latlab.stitch.paths import StreamPath
from latlab.stitch.position import MISSING

BROWSER_CLOCK = "monotonic@localhost"


@dataclass(frozen=True)
class _Leg:
    """The frames of one publisher stream forwarded on one subscriber leg, per frame (by
    the publisher's RTP timestamp): first arrival, first departure, egress timestamp."""

    host: str
    source_ts: np.ndarray
    ingress_ns: np.ndarray
    egress_ns: np.ndarray
    egress_ts: np.ndarray
    layer: int


def sfu_journeys(
    logs: list[BrowserLog], forwarded: pa.Table | None, table: EventTable | None
) -> list[Journeys]:
    """One journey set per (publisher stream, subscriber leg) whose frames both ends'
    transforms recorded and the SFU host's capture matched."""
    if forwarded is None or not logs:
        return []
    matched = forwarded.filter(pc.equal(forwarded.column("status"), "matched"))
    if not matched.num_rows:
        return []
    senders = _by_ssrc(logs, send=True)
    receivers = _by_ssrc(logs, send=False)
    by_name = {log.process: log for log in logs}
    out = []
    keys = np.unique(_columns(matched, "ssrc", "source_ssrc").T, axis=0)
    for egress_ssrc, source_ssrc in keys:
        if egress_ssrc not in receivers or source_ssrc not in senders:
            continue
        rows = matched.filter(
            pc.and_(pc.equal(matched.column("ssrc"), int(egress_ssrc)),
                    pc.equal(matched.column("source_ssrc"), int(source_ssrc)))
        )  # fmt: skip
        for host in set(rows.column("host").to_pylist()):
            leg = _leg(rows.filter(pc.equal(rows.column("host"), host)), host)
            journeys = _journeys(senders[source_ssrc], receivers[egress_ssrc], leg, table, by_name)
            if journeys is not None:
                out.append(journeys)
    return out


def sfu_legs_of_traced(
    journeys: list[Journeys], logs: list[BrowserLog], forwarded: pa.Table | None,
    table: EventTable | None,
) -> list[Journeys]:  # fmt: skip
    """Each traced publisher stream that an SFU forwarded, continued through the SFU to
    every subscriber leg whose transforms recorded it (one journey set per leg; the
    stream's longest path is the one continued)."""
    if forwarded is None or table is None or not logs:
        return []
    matched = forwarded.filter(pc.equal(forwarded.column("status"), "matched"))
    receivers = _by_ssrc(logs, send=False)
    by_name = {log.process: log for log in logs}
    longest: dict[int, Journeys] = {}
    for j in journeys:
        ssrc = j.path.ssrc
        if ssrc is not None and len(j.probe_names) > len(
            longest[ssrc].probe_names if ssrc in longest else ()
        ):
            longest[ssrc] = j
    out = []
    for ssrc, j in longest.items():
        rows = matched.filter(pc.equal(matched.column("source_ssrc"), ssrc))
        unit_rtp = unit_rtp_at_payloader(j, table) if rows.num_rows else None
        if unit_rtp is None:
            continue
        for egress_ssrc in np.unique(rows.column("ssrc").to_numpy()):
            if int(egress_ssrc) not in receivers:
                continue
            leg_rows = rows.filter(pc.equal(rows.column("ssrc"), int(egress_ssrc)))
            for host in set(leg_rows.column("host").to_pylist()):
                leg = _leg(leg_rows.filter(pc.equal(leg_rows.column("host"), host)), host)
                receiver = receivers[int(egress_ssrc)]
                extended = _traced_leg(j, unit_rtp[0], leg, receiver, by_name[receiver[0]])
                if extended is not None:
                    out.append(extended)
    return out


def _traced_leg(
    j: Journeys,
    unit_end_rtp: np.ndarray,
    leg: _Leg,
    receiver: tuple[str, BrowserFrames],
    log: BrowserLog,
) -> Journeys | None:
    """``j`` continued through ``leg``: the packet (frame) holding each unit's end, then
    the subscriber's own stages for the unit's last sample (the publisher's encoder is
    not followed into: its look-ahead is counted at the subscriber's decoder)."""
    sub, got = receiver
    order = np.argsort(leg.source_ts, kind="stable")
    ts = leg.source_ts[order]
    if len(ts) < 2:
        return None
    span = int(np.median(np.diff(ts)))  # a packet's duration on the RTP clock
    at = np.searchsorted(ts, unit_end_rtp, side="right") - 1
    inside = (unit_end_rtp != MISSING) & (at >= 0)
    inside &= unit_end_rtp < ts[np.maximum(at, 0)] + span
    packet = np.where(inside, order[np.maximum(at, 0)], -1)
    at_sub = np.where(packet >= 0, lookup(got.rtp_ts, take_at(leg.egress_ts, packet)), -1)
    columns = [take_at(leg.ingress_ns, packet), take_at(leg.egress_ns, packet),
               take_at(got.receive_ns, at_sub), take_at(got.t_ns, at_sub)]  # fmt: skip
    names = [f"{leg.host}/ingress", f"{leg.host}/egress:{sub}", f"{sub}/received",
             f"{sub}/receiver-transform"]  # fmt: skip
    kinds, klass = [NETWORK, FORWARDING, NETWORK, PROCESSING], [""] * 4
    frame_ts = take_at(leg.egress_ts, packet)
    offset = np.where(packet >= 0, unit_end_rtp - take_at(leg.source_ts, packet), 0)
    stages = receiver_stages(log, int(got.ssrc[0]), False, frame_ts, got.rtp_ts, offset,
                             OPUS_LOOKAHEAD)  # fmt: skip
    with_stages(columns, names, kinds, klass, sub, stages, columns[3] >= 0)
    times = np.column_stack([j.times, *columns]).astype(np.int64)
    times = np.where(times < 0, MISSING, times)
    transformed = len(j.probe_names) + 3
    reached = np.flatnonzero(times[:, transformed] != MISSING)
    if not len(reached):
        return None
    rows = slice(reached[0], reached[-1] + 1)
    unknown = np.full((len(times), len(names)), MISSING, np.int32)
    layer = f" layer {leg.layer}" if leg.layer >= 0 else ""
    origin = j.probe_names[0].split("/", 1)[0]
    return replace(
        j,
        stream_id=f"{origin}->{leg.host}->{sub} ssrc={j.path.ssrc:08x}{layer}",
        probe_names=[*j.probe_names, *names],
        segment_kinds=[*j.segment_kinds, *kinds],
        unit_start=j.unit_start[rows],
        times=np.asfortranarray(times[rows]),
        threads=np.asfortranarray(np.column_stack([j.threads, unknown])[rows]),
        clock_domains=[*j.clock_domains, *([BROWSER_CLOCK] * len(names))],
        probe_klass=[*j.probe_klass, *klass],
        counts=_counts(times[rows], transformed),
        extra={k: v[rows] for k, v in j.extra.items()},
        unit_bytes=None if j.unit_bytes is None else j.unit_bytes[rows],
        unit_keyframe=None if j.unit_keyframe is None else j.unit_keyframe[rows],
    )


def _columns(t: pa.Table, *names: str) -> np.ndarray:
    return np.stack([t.column(n).to_numpy().astype(np.int64) for n in names])


def _by_ssrc(logs: list[BrowserLog], send: bool) -> dict[int, tuple[str, BrowserFrames]]:
    """Each SSRC a browser sent (or received) with that browser's frames of it."""
    out = {}
    for log in logs:
        frames = log.frames.select(log.frames.send == send)
        for ssrc in np.unique(frames.ssrc):
            out[int(ssrc)] = (log.process, frames.select(frames.ssrc == ssrc))
    return out


def _leg(rows: pa.Table, host: str) -> _Leg:
    """Per source frame (RTP timestamp), its first packet in and first packet out."""
    source_ts, ingress, egress, egress_ts = _columns(
        rows, "source_rtp_ts", "ingress_ns", "egress_ns", "rtp_ts"
    )
    order = np.lexsort((egress, source_ts))
    source_ts, ingress, egress, egress_ts = (a[order] for a in (source_ts, ingress, egress,
                                                                egress_ts))  # fmt: skip
    first = np.concatenate([[True], source_ts[1:] != source_ts[:-1]])
    starts = np.flatnonzero(first)
    layers = rows.column("layer").to_numpy()
    return _Leg(
        host=host,
        source_ts=source_ts[first],
        ingress_ns=np.minimum.reduceat(ingress, starts),
        egress_ns=egress[first],
        egress_ts=egress_ts[first],
        layer=int(layers[0]) if len(layers) else -1,
    )


def _journeys(
    sender: tuple[str, BrowserFrames],
    receiver: tuple[str, BrowserFrames],
    leg: _Leg,
    table: EventTable | None,
    logs: dict[str, BrowserLog],
) -> Journeys | None:
    (pub, sent), (sub, got) = sender, receiver
    order = np.argsort(unwrap(sent.rtp_ts, RTP_WRAP), kind="stable")
    sent = sent.select(order)
    rtp = unwrap(sent.rtp_ts, RTP_WRAP)
    keep = np.concatenate([[True], rtp[1:] != rtp[:-1]])  # one unit per frame
    sent, rtp = sent.select(keep), rtp[keep]
    at_sfu = lookup(leg.source_ts, sent.rtp_ts)
    forwarded = at_sfu >= 0
    if forwarded.sum() < 2:
        return None
    sent, rtp, at_sfu = sent.select(forwarded), rtp[forwarded], at_sfu[forwarded]
    audio = bool(sent.audio[0])
    unit_start = (rtp - rtp[0]) * 1_000_000_000 // (AUDIO_RATE if audio else VIDEO_RATE)
    unit_ns = int(np.median(np.diff(unit_start)))
    egress_ts = leg.egress_ts[at_sfu]
    at_sub = lookup(got.rtp_ts, egress_ts)
    columns, names, kinds = [sent.t_ns], [f"{pub}/sender-transform"], []
    capture = capture_ns(logs.get(pub), sent)
    if (capture != MISSING).any():  # Chromium gives no capture time for video
        columns.insert(0, capture)
        names.insert(0, f"{pub}/capture")
        kinds.append(PROCESSING)
    for name, times in link_columns(table, int(sent.ssrc[0]), sent.rtp_ts):
        columns.append(times)
        names.append(name)
        kinds.append(NETWORK)
    columns += [leg.ingress_ns[at_sfu], leg.egress_ns[at_sfu]]
    names += [f"{leg.host}/ingress", f"{leg.host}/egress:{sub}"]
    kinds += [NETWORK, FORWARDING]
    for name, times in link_columns(table, int(got.ssrc[0]), egress_ts):
        columns.append(times)
        names.append(name)
        kinds.append(NETWORK)
    columns += [take_at(got.receive_ns, at_sub), take_at(got.t_ns, at_sub)]
    names += [f"{sub}/received", f"{sub}/receiver-transform"]
    kinds += [NETWORK, PROCESSING]
    klass = [""] * len(names)
    if sub in logs:
        stages = receiver_stages(logs[sub], int(got.ssrc[0]), not audio, egress_ts, got.rtp_ts)
        with_stages(columns, names, kinds, klass, sub, stages, columns[-1] >= 0)
    transformed = names.index(f"{sub}/receiver-transform")
    times = np.column_stack(columns).astype(np.int64)
    times = np.where(times < 0, MISSING, times)
    # as everywhere: units before the subscriber recorded or still in flight at the end
    # are left out, every loss in between counts
    reached = np.flatnonzero(times[:, transformed] != MISSING)
    if not len(reached):
        return None
    rows = slice(reached[0], reached[-1] + 1)
    times, unit_start = times[rows], unit_start[rows]
    layer = f" layer {leg.layer}" if leg.layer >= 0 else ""
    return Journeys(
        stream_id=f"{pub}->{leg.host}->{sub} ssrc={int(sent.ssrc[0]):08x}{layer}",
        media="audio" if audio else "video",
        unit_ns=unit_ns,
        path=StreamPath((), int(sent.ssrc[0])),
        probe_names=names,
        segment_kinds=kinds,
        unit_start=unit_start,
        times=np.asfortranarray(times),
        threads=np.full(times.shape, MISSING, np.int32, order="F"),
        clock_domains=[BROWSER_CLOCK] * len(names),
        counts=_counts(times, transformed),
        probe_klass=klass,
        unit_is_frame=True,
    )


def _counts(times: np.ndarray, transformed: int) -> dict[str, int]:
    """Forwarded frames that never reached the subscriber's transform."""
    return {"lost": int((times[:, transformed] == MISSING).sum()), "late": 0,
            "duplicated": 0, "reordered": 0}  # fmt: skip
