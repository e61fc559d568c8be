"""One journey per frame across a browser and a traced GStreamer peer (webrtcbin).

A traced peer's stream is stitched from its probes (``stitch.journeys``); the browser
on the other end recorded the same frames at its transforms (``stitch.browser``).
Both name a frame by SSRC and RTP timestamp, so a traced stream is extended with the
browser's leg of the same SSRC:

* sent by the browser: its capture and sender transform come before the packets the
  traced peer received (the stream's positions are on its RTP clock, ``RtpClock``);
* sent by the traced peer: the browser's frame arrival and receiver transform come
  after the packets left the peer (or the emulated link); each unit's RTP timestamp
  is read at the peer's payloader, where media time became RTP time; then the
  browser's own stages (``stitch.browser_receiver``: NetEq, the renderer, the output
  device) for the unit's last sample.

A unit is ``unit_ms`` of audio (two per 20 ms Opus frame): a unit's capture is its
frame's capture plus the unit's offset in the frame; the other browser probes are
the first event covering the unit's end, as everywhere else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from latlab.ingest.browser_records import BrowserFrames, BrowserLog
from latlab.ingest.events import EventTable
from latlab.stitch.browser import capture_ns, take_at, with_stages
from latlab.stitch.browser_receiver import OPUS_LOOKAHEAD, receiver_stages
from latlab.stitch.journeys import Journeys, clock_rate
from latlab.stitch.kinds import NETWORK, PROCESSING
from latlab.stitch.position import MISSING, RtpClock

BROWSER_CLOCK = "monotonic@localhost"  # page times are mapped onto CLOCK_MONOTONIC
NS = 1_000_000_000


def join_browser_legs(
    journeys: list[Journeys], logs: list[BrowserLog], table: EventTable
) -> list[Journeys]:
    """``journeys`` with each traced stream extended by the browser leg of its SSRC."""
    out = []
    for j in journeys:
        ssrc = j.path.ssrc
        for log in logs if ssrc is not None else []:
            frames = log.frames.select(log.frames.ssrc == ssrc)
            sent, got = frames.select(frames.send), frames.select(~frames.send)
            if len(sent.t_ns) and j.rtp_clock is not None:
                j = _after_browser_sender(j, log, sent, j.rtp_clock)
            elif len(got.t_ns) and j.rtp_clock is None:
                unit_rtp = unit_rtp_at_payloader(j, table)
                if unit_rtp is not None:
                    j = _before_browser_receiver(j, log, got, *unit_rtp)
        out.append(j)
    return out


def _after_browser_sender(
    j: Journeys, log: BrowserLog, sent: BrowserFrames, clock: RtpClock
) -> Journeys:
    """Prepend the sending browser's capture and sender transform."""
    browser = log.process
    position = clock.position_ns(sent.rtp_ts)
    at_start = _frame_of(position, j.unit_start)
    at_end = _frame_of(position, j.unit_start + j.unit_ns - 1)
    frame_capture = take_at(capture_ns(log, sent), at_start)
    capture = np.where(
        frame_capture != MISSING,  # also where no frame holds the unit
        frame_capture + j.unit_start - take_at(position, at_start),
        MISSING,
    )
    encoded = take_at(sent.t_ns, at_end)
    end = j.probe_names[-1].split("/", 1)[0]
    return _with_columns(
        j,
        before=[(f"{browser}/capture", capture), (f"{browser}/sender-transform", encoded)],
        kinds_before=[PROCESSING, NETWORK],  # encode; then pacer, socket, network
        stream_id=f"{browser}->{end} ssrc={j.path.ssrc:08x}",
    )


def _before_browser_receiver(
    j: Journeys, log: BrowserLog, got: BrowserFrames, unit_end_rtp: np.ndarray, rate: int
) -> Journeys:
    """Append the receiving browser's frame arrival and receiver transform, and its own
    stages, for the frame that holds the unit's last sample (the first event covering
    the unit's end, as everywhere)."""
    browser = log.process
    known = unit_end_rtp != MISSING
    clock = RtpClock(int(unit_end_rtp[known][0]) if known.any() else 0, rate)
    position = clock.position_ns(got.rtp_ts)
    unit_end = clock.position_ns(unit_end_rtp)
    at_end = np.where(known, _frame_of(position, unit_end), -1)
    after = [
        (f"{browser}/received", take_at(got.receive_ns, at_end)),
        (f"{browser}/receiver-transform", take_at(got.t_ns, at_end)),
    ]
    kinds, klass = [NETWORK, PROCESSING], ["", ""]
    frame_rtp = take_at(got.rtp_ts, at_end)
    offset = np.where(at_end >= 0, (unit_end - take_at(position, at_end)) * rate // NS, 0)
    ssrc = int(j.path.ssrc or 0)  # a traced encoder's look-ahead is counted at the decoder
    stages = receiver_stages(log, ssrc, False, frame_rtp, got.rtp_ts, offset, OPUS_LOOKAHEAD)
    columns, names = [t for _, t in after], [n for n, _ in after]
    with_stages(columns, names, kinds, klass, browser, stages, after[-1][1] >= 0)
    origin = j.probe_names[0].split("/", 1)[0]
    joined = _with_columns(
        j,
        after=list(zip(names, columns, strict=True)),
        kinds_after=kinds,
        klass_after=klass,
        stream_id=f"{origin}->{browser} ssrc={j.path.ssrc:08x}",
    )
    left = j.times[:, -1] != MISSING
    arrived = joined.times[:, len(j.probe_names) + 1] != MISSING  # its receiver transform
    joined.counts = {**j.counts, "lost": j.counts.get("lost", 0) + int((left & ~arrived).sum())}
    return joined


def unit_rtp_at_payloader(j: Journeys, table: EventTable) -> tuple[np.ndarray, int] | None:
    """Each unit's last sample as an RTP timestamp, from the first probe of the path that
    carried the stream's RTP packets with media time (the payloader's source pad)."""
    probes = [table.probes[i] for i in j.path.probes]
    for probe in probes:
        is_rtp = table.probe_column(probe.index, "is_rtp")
        pts = table.running_pts(probe.index)
        mine = is_rtp & (table.probe_column(probe.index, "ssrc") == j.path.ssrc) & (pts >= 0)
        if not mine.any():
            continue
        pts, rtp = pts[mine], table.probe_column(probe.index, "rtp_ts")[mine].astype(np.int64)
        order = np.argsort(pts, kind="stable")
        pts, rtp = pts[order], rtp[order]
        unit_end = j.unit_start + j.unit_ns - 1
        idx = np.searchsorted(pts, unit_end, side="right") - 1
        ok = idx >= 0
        idx = np.maximum(idx, 0)
        rate = clock_rate(probes)
        ticks = (unit_end - pts[idx]) * rate // NS
        return np.where(ok, (rtp[idx] + ticks) & 0xFFFF_FFFF, MISSING), rate
    return None


def _frame_of(frame_position: np.ndarray, unit_position: np.ndarray) -> np.ndarray:
    """Index of the frame whose span holds each position (-1 if none)."""
    if len(frame_position) < 2:
        return np.full(len(unit_position), -1, np.int64)
    order = np.argsort(frame_position, kind="stable")
    ordered = frame_position[order]
    frame_ns = int(np.median(np.diff(np.unique(ordered))))
    idx = np.searchsorted(ordered, unit_position, side="right") - 1
    inside = (idx >= 0) & (unit_position < ordered[np.maximum(idx, 0)] + frame_ns)
    return np.where(inside, order[np.maximum(idx, 0)], -1)


def _with_columns(
    j: Journeys,
    stream_id: str,
    before: Sequence[tuple[str, np.ndarray]] = (),
    after: Sequence[tuple[str, np.ndarray]] = (),
    kinds_before: Sequence[str] = (),
    kinds_after: Sequence[str] = (),
    klass_after: Sequence[str] = (),
) -> Journeys:
    """``j`` with browser probes added before and after its own."""
    first = [np.where(t < 0, MISSING, t) for _, t in before]
    last = [np.where(t < 0, MISSING, t) for _, t in after]
    times = np.column_stack([*first, j.times, *last]).astype(np.int64)
    unknown = np.full((len(times), 1), MISSING, np.int32)
    threads = np.column_stack([unknown] * len(first) + [j.threads] + [unknown] * len(last))
    out = replace(
        j,
        stream_id=stream_id,
        probe_names=[n for n, _ in before] + j.probe_names + [n for n, _ in after],
        segment_kinds=[*kinds_before, *j.segment_kinds, *kinds_after],
        times=np.asfortranarray(times),
        threads=np.asfortranarray(threads.astype(np.int32)),
        clock_domains=[BROWSER_CLOCK] * len(first) + j.clock_domains + [BROWSER_CLOCK] * len(last),
        probe_klass=[""] * len(first) + j.probe_klass + list(klass_after or [""] * len(last)),
    )
    out.counts = j.counts
    return out
