"""Journeys of frames between browsers, from their transforms' records and the link logs.

A browser cannot load the tracer; its page records every encoded frame at the
sender's and the receiver's ``RTCRtpScriptTransform`` (docs/browser-records.md).
A frame is the unit: its SSRC and RTP timestamp name it at both transforms and,
through the clear RTP header of its SRTP packets, on an emulated link. Per
direction the journey is: capture (the frame's capture time) -> encoded (sender
transform) -> link in -> link out -> received (its last packet arrived, per the
frame's metadata) -> receiver transform, and then the receiving browser's own
stages (``stitch.browser_receiver``): for audio NetEq's decode, the renderer and the
output device; for video the frame buffer, the decoder and the compositor.

An audio frame's capture is the capture callback (the sending browser's trace) that
delivered its first 10 ms: Chromium's ``captureTime`` for the frame is that callback's,
in whole milliseconds; the nearest callback is the frame's. A video frame's capture is
its ``captureTime`` at the sender if Chromium gives one, else the abs-capture-time the
receiver's transform read (whole milliseconds).
"""

from __future__ import annotations

import itertools

import numpy as np

from latlab.ingest.browser_records import BrowserFrames, BrowserLog
from latlab.ingest.chrome_trace import AUDIO_FUNCTIONS
from latlab.ingest.counters import unwrap
from latlab.ingest.events import EventTable
from latlab.stitch.browser_receiver import OPUS_LOOKAHEAD, Stage, receiver_stages
from latlab.stitch.journeys import Journeys
from latlab.stitch.kinds import NETWORK, PROCESSING
from latlab.stitch.paths import StreamPath
from latlab.stitch.position import MISSING

AUDIO_RATE = 48_000  # Opus RTP clock
VIDEO_RATE = 90_000
RTP_WRAP = 1 << 32
CAPTURE_CALL = AUDIO_FUNCTIONS[0]  # the capture callback, one per 10 ms captured
CAPTURE_SNAP_NS = 5_000_000  # a frame's captureTime to its capture callback: within half
MIN_STAGE_SHARE = 0.5  # a receiver stage is shown if it places at least half the units


def browser_journeys(logs: list[BrowserLog], table: EventTable | None) -> list[Journeys]:
    """One journey set per (sender, receiver, SSRC) whose frames both transforms saw."""
    out = []
    for sender, receiver in itertools.permutations(logs, 2):
        sent = sender.frames.select(sender.frames.send)
        got = receiver.frames.select(~receiver.frames.send)
        for ssrc in np.intersect1d(np.unique(sent.ssrc), np.unique(got.ssrc)):
            journeys = _direction(sender, receiver, sent, got, int(ssrc), table)
            if journeys is not None:
                out.append(journeys)
    return out


def capture_ns(log: BrowserLog | None, sent: BrowserFrames) -> np.ndarray:
    """Each sent frame's capture: for audio the capture of its first coded sample, the
    sending browser's capture callback that delivered its first 10 ms (the callback
    nearest its ``captureTime``, in Chromium's trace; else the ``captureTime``) less
    Opus's look-ahead (a frame codes the 6.5 ms before its RTP time first: its decoded
    audio lags its timestamps by that much); for video the ``captureTime``; MISSING where
    Chromium gave none."""
    times = sent.capture_ns.copy()
    calls = log.functions.of(CAPTURE_CALL).start_ns if log and log.functions else np.zeros(0)
    if len(calls) >= 2:
        at = np.clip(np.searchsorted(calls, times), 1, len(calls) - 1)
        nearest = np.where(np.abs(calls[at] - times) < np.abs(calls[at - 1] - times), at, at - 1)
        snap = sent.audio & (times != MISSING)
        snap &= np.abs(calls[nearest] - times) < CAPTURE_SNAP_NS
        times = np.where(snap, calls[nearest], times)
    lookahead = OPUS_LOOKAHEAD * 1_000_000_000 // AUDIO_RATE
    return np.where(sent.audio & (times != MISSING), times - lookahead, times)


def with_stages(
    columns: list[np.ndarray],
    names: list[str],
    kinds: list[str],
    klass: list[str],
    receiver: str,
    stages: list[Stage],
    reached: np.ndarray,
) -> None:
    """Append the receiver's stages that place at least ``MIN_STAGE_SHARE`` of the units
    that ``reached`` its transform, in order, up to the first that does not."""
    for stage in stages:
        placed = (stage.times != MISSING) & reached
        if placed.sum() < MIN_STAGE_SHARE * max(int(reached.sum()), 1):
            break
        columns.append(stage.times)
        names.append(f"{receiver}/{stage.name}")
        kinds.append(stage.kind)
        klass.append(stage.klass)  # fmt: skip


def _direction(
    sender_log: BrowserLog,
    receiver_log: BrowserLog,
    sent: BrowserFrames,
    got: BrowserFrames,
    ssrc: int,
    table: EventTable | None,
) -> Journeys | None:
    sender, receiver = sender_log.process, receiver_log.process
    sent, got = sent.select(sent.ssrc == ssrc), got.select(got.ssrc == ssrc)
    order = np.argsort(unwrap(sent.rtp_ts, RTP_WRAP), kind="stable")
    sent = sent.select(order)
    rtp = unwrap(sent.rtp_ts, RTP_WRAP)
    keep = np.concatenate([[True], rtp[1:] != rtp[:-1]])  # one unit per frame
    sent, rtp = sent.select(keep), rtp[keep]
    if len(rtp) < 2:
        return None
    audio = bool(sent.audio[0])
    rate = AUDIO_RATE if audio else VIDEO_RATE
    unit_start = (rtp - rtp[0]) * 1_000_000_000 // rate
    unit_ns = int(np.median(np.diff(unit_start)))
    at_receiver = lookup(got.rtp_ts, sent.rtp_ts)
    capture = capture_ns(sender_log, sent)
    if not audio and (capture == MISSING).all():  # Chromium gives sent video frames none
        capture = take_at(got.abs_capture_ns, at_receiver)
    columns = [capture, sent.t_ns]
    names = [f"{sender}/capture", f"{sender}/sender-transform"]
    kinds = [PROCESSING]  # capture -> encoded frame: audio processing, encoding, look-ahead
    for name, times in link_columns(table, ssrc, sent.rtp_ts):
        columns.append(times)
        names.append(name)
        kinds.append(NETWORK)
    transform = take_at(got.t_ns, at_receiver)
    columns += [take_at(got.receive_ns, at_receiver), transform]
    names += [f"{receiver}/received", f"{receiver}/receiver-transform"]
    kinds += [NETWORK, PROCESSING]
    klass = [""] * len(names)
    stages = receiver_stages(receiver_log, ssrc, not audio, sent.rtp_ts, got.rtp_ts)
    with_stages(columns, names, kinds, klass, receiver, stages, transform >= 0)
    times = np.column_stack(columns).astype(np.int64)
    times = np.where(times < 0, MISSING, times)
    transformed = names.index(f"{receiver}/receiver-transform")
    reached = np.flatnonzero(times[:, transformed] != MISSING)
    rows = slice(reached[0], reached[-1] + 1) if len(reached) else slice(0, 0)
    return Journeys(
        stream_id=f"{sender}->{receiver} ssrc={ssrc:08x}",
        media="audio" if audio else "video",
        unit_ns=unit_ns,
        path=StreamPath((), ssrc),
        probe_names=names,
        segment_kinds=kinds,
        unit_start=unit_start[rows],
        times=np.asfortranarray(times[rows]),
        threads=np.full(times[rows].shape, MISSING, np.int32, order="F"),
        clock_domains=["monotonic@localhost"] * len(names),
        counts=_counts(times[rows], transformed),
        probe_klass=klass,
        unit_is_frame=True,
    )


def lookup(haystack: np.ndarray, needles: np.ndarray) -> np.ndarray:
    """Index of each needle's first occurrence in haystack, -1 if absent."""
    if not len(haystack):
        return np.full(len(needles), -1, np.int64)
    order = np.argsort(haystack, kind="stable")
    idx = np.minimum(np.searchsorted(haystack[order], needles), len(haystack) - 1)
    return np.where(haystack[order][idx] == needles, order[idx], -1)


def take_at(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``values[idx]``, ``MISSING`` where ``idx`` is -1 (no such frame)."""
    return np.where(idx >= 0, values[np.maximum(idx, 0)] if len(values) else MISSING, MISSING)


def link_columns(
    table: EventTable | None, ssrc: int, rtp_ts: np.ndarray
) -> list[tuple[str, np.ndarray]]:
    """The first packet of each frame entering and leaving the emulated link that carried it."""
    if table is None:
        return []
    out = []
    for probe in table.probes:
        if table.processes[probe.process].kind != "link":
            continue
        is_rtp = table.probe_column(probe.index, "is_rtp")
        mine = is_rtp & (table.probe_column(probe.index, "ssrc") == ssrc)
        if not mine.any():
            continue
        t_ns = table.probe_column(probe.index, "t_ns")[mine]
        ts = table.probe_column(probe.index, "rtp_ts")[mine].astype(np.int64)
        order = np.lexsort((t_ns, ts))  # per RTP timestamp, earliest first
        ts, t_ns = ts[order], t_ns[order]
        first = np.concatenate([[True], ts[1:] != ts[:-1]])
        idx = lookup(ts[first], rtp_ts)
        out.append((probe.name, take_at(t_ns[first], idx)))
    return out


def _counts(times: np.ndarray, transformed: int) -> dict[str, int]:
    """Frames sent that never reached the receiver's transform (lost or dropped)."""
    sent = times[:, 1] != MISSING
    arrived = times[:, transformed] != MISSING
    return {"lost": int((sent & ~arrived).sum()), "late": 0, "duplicated": 0, "reordered": 0}
