"""A receiving browser's stages past its receiver transform, per unit, in unmodified Chromium.

**Audio** (NetEq, then the renderer), from Chromium's own trace (``ingest.chrome_trace``)
and the page's records (``ingest.browser_playout``):

* ``decoded``: the NetEq call (``NetEqImpl::GetAudio``, one per 10 ms of output) that
  decoded the frame, its ``AudioDecoder::Decode`` slice. No trace event names the packet
  it decodes, but the page polls ``getSynchronizationSources()`` every 10 ms, and a
  receiver's source entry takes the RTP timestamp of the packets NetEq decoded in a call
  and that call's time (whole milliseconds): each entry is the decode slice nearest its
  time. A frame no entry names gets the decode between the two that do when the frames
  received between them and the decodes between them are as many (NetEq decodes what
  it received, in RTP order); otherwise none. Observed per unit.
* ``rendered-est``: when NetEq handed the frame's first sample to the mixer: the decode
  call's samples come after those NetEq's sync buffer held ahead of them, so the sample
  went out in the call ``F // 480`` calls later at offset ``F % 480``, where ``F`` is
  the sync buffer's future length at the decode plus Opus's algorithmic delay (the
  decoded audio of a packet begins with the 312 samples, 6.5 ms, the encoder looked
  ahead: Chromium's Opus at 48 kHz). ``F`` comes from NetEq's sample accounting: every
  sample it output was decoded, concealed or inserted by time stretching, or is one
  removed by it, so ``F = overlap + emitted + concealed + inserted - removed - output``
  (getStats' ``jitterBufferEmittedCount``, ``concealedSamples``,
  ``insertedSamplesForDeceleration``, ``removedSamplesForAcceleration``,
  ``totalSamplesReceived``) when getStats read them (the ``GetReceiveStats`` slice),
  carried to each call by the trace's decodes (960 samples each) and outputs (480 each);
  ``overlap`` is the 30 samples (5 per 8 kHz) NetEq keeps as look-ahead. Between two
  stats reads (200 ms) where the counters moved (time stretching, concealment), the
  change is placed where NetEq's decode rule (it decodes when fewer than 480 samples
  are left ahead) says it happened. Estimated: per unit, but from counters per interval.
* ``played-est``: when the output device plays that sample: the renderer call's
  reported output delay (``WebRtcAudioRenderer::Render``'s ``delay_timestamp`` plus
  ``playout_delay``) plus the sample's offset in its 10 ms block. Estimated: the delay
  is what Chromium reports for the device.
* ``tap-played-est`` (a page that records its remote audio for the black box, through
  the AudioWorklet tap, instead of ``played-est``): the WebAudio sink's FIFO takes each
  10 ms block NetEq output (``SINK_PUSH``), its converter pulls them in order (a pull
  that finds the FIFO short is an underrun: 480 samples of silence), and every render
  quantum takes 128 of the converter's samples; the tap's records place each quantum on
  its AudioContext's timeline, and the context's output timestamps say when that frame
  played (the same line that times the black box's recording). Needs the trace's
  ``disabled-by-default-mediastream`` category; estimated like ``played-est``.

**Video**, from ``requestVideoFrameCallback`` on the remote track and the video
receiver's source entries: ``decode-start`` (``decoded`` less the frame's
``processingDuration``), ``decoded`` (the source entry's time: the decoded frame handed
to the renderer, whole milliseconds, centred: +0.5 ms), ``presented`` (its
``presentationTime``: handed to the compositor). Observed per frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from latlab.ingest.browser_records import BrowserLog
from latlab.ingest.chrome_trace import (
    CONTEXT_QUANTUM,
    CONTEXT_REQUEST,
    SINK_FULL,
    SINK_PULL,
    SINK_PUSH,
    SINK_QUANTUM,
    SINK_UNDERRUN,
    STATS_READ,
    ChromeSlices,
)
from latlab.stitch.kinds import JITTERBUFFER, PLAYOUT, PROCESSING
from latlab.stitch.position import MISSING

RATE = 48_000  # NetEq's and the AudioContext's rate for Opus
BLOCK = RATE // 100  # NetEq's output per call: 10 ms
OVERLAP = 5 * RATE // 8000  # NetEq's look-ahead (Expand's overlap length)
OPUS_LOOKAHEAD = 312  # samples at 48 kHz: libopus's 2.5 ms + 4 ms of delay compensation
QUANTUM = 128  # a WebAudio render quantum
NS = 1_000_000_000
ANCHOR_WINDOW_NS = (-2_000_000, 4_000_000)  # decode - source entry (whole ms, floored)
STATS_READ_WITHIN_NS = 50_000_000  # a getStats call's read of NetEq's counters
MS_CENTRE_NS = 500_000
COUNTERS = (
    "jitterBufferEmittedCount",
    "concealedSamples",
    "insertedSamplesForDeceleration",
    "removedSamplesForAcceleration",
    "totalSamplesReceived",
)
GET_AUDIO, DECODE, MIX = "NetEqImpl::GetAudio", "AudioDecoder::Decode", "AudioMixerImpl::Mix"
RENDER = "WebRtcAudioRenderer::Render"
# A video frame's decoder output splits the receiver phase into buffer, decode and render;
# NetEq decodes inside its buffer, so an audio path has no such split.
VIDEO_KLASS = "Codec/Decoder/Video"


@dataclass
class Stage:
    """One probe after the receiver transform: its name (without the process), the kind
    of the segment that ends at it, its decoder class (for phases) and its times."""

    name: str
    kind: str
    klass: str
    times: np.ndarray


def receiver_stages(
    log: BrowserLog,
    ssrc: int,
    video: bool,
    rtp_ts: np.ndarray,
    received_rtp: np.ndarray,
    offset: np.ndarray | int = 0,
    codec_delay: int = 0,
) -> list[Stage]:
    """The receiving browser's stages for units of frames ``rtp_ts`` (MISSING where a unit
    has no frame), ``offset`` samples into them (audio); ``received_rtp`` are all the
    frames of the SSRC its receiver transform saw. ``codec_delay``: samples by which the
    decoded audio lags its RTP time where the journey did not count it at the sender
    (Opus's look-ahead, ``OPUS_LOOKAHEAD``, for a sender latlab does not follow into its
    encoder). Empty where the records hold none."""
    if video:
        return _video(log, ssrc, rtp_ts)
    offset = np.broadcast_to(np.asarray(offset, np.int64), np.shape(rtp_ts))
    return _audio(log, ssrc, np.asarray(rtp_ts, np.int64), received_rtp, offset, codec_delay)


def _unwrap_near(values: np.ndarray, reference: int) -> np.ndarray:
    """RTP timestamps (u32) as int64 near ``reference`` (within 2**31)."""
    values = np.asarray(values, np.int64)
    return reference + ((values - reference + (1 << 31)) & 0xFFFF_FFFF) - (1 << 31)


# --- audio -----------------------------------------------------------------------


@dataclass
class _Lane:
    """One receive stream's NetEq calls: the i-th ``GetAudio`` of each mixer call."""

    calls_ns: np.ndarray  # GetAudio starts
    decode_ns: np.ndarray  # Decode starts, in time order
    decode_call: np.ndarray  # the call (index into calls_ns) of each decode


def _inside(outer: ChromeSlices, inner_ns: np.ndarray) -> np.ndarray:
    """Index of the ``outer`` slice (in time order) holding each instant, -1 if none."""
    if not len(outer.start_ns):
        return np.full(len(inner_ns), -1, np.int64)
    at = np.searchsorted(outer.start_ns, inner_ns, side="right") - 1
    ok = at >= 0
    at = np.maximum(at, 0)
    ok &= inner_ns <= outer.start_ns[at] + outer.duration_ns[at]
    return np.where(ok, at, -1)


def _lanes(trace: ChromeSlices) -> list[_Lane]:
    """The NetEq calls per receive stream: the mixer calls each stream's ``GetAudio`` in
    the same order every time, so a call's rank in its mixer call names its stream."""
    calls, decodes = trace.of(GET_AUDIO), trace.of(DECODE)
    if not len(calls.start_ns):
        return []
    mix = _inside(trace.of(MIX), calls.start_ns)
    first = np.r_[True, mix[1:] != mix[:-1]] | (mix < 0)
    start = np.maximum.accumulate(np.where(first, np.arange(len(mix)), 0))
    rank = np.arange(len(mix)) - start
    call_of = _inside(calls, decodes.start_ns)
    lanes = []
    for lane in np.unique(rank):
        index = np.flatnonzero(rank == lane)
        held = np.isin(call_of, index)
        lanes.append(
            _Lane(
                calls.start_ns[index],
                decodes.start_ns[held],
                np.searchsorted(index, call_of[held]),
            )
        )
    return lanes


def _anchors(lane: _Lane, source_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per source entry, the lane's decode nearest it (-1 beyond the window), and the
    offsets (decode less entry) of the entries that found one."""
    d = lane.decode_ns
    if not len(d) or not len(source_ns):
        return np.full(len(source_ns), -1), np.zeros(0)
    at = np.minimum(np.searchsorted(d, source_ns), len(d) - 1)
    before = np.maximum(at - 1, 0)
    nearest = np.where(np.abs(d[at] - source_ns) < np.abs(d[before] - source_ns), at, before)
    delta = d[nearest] - source_ns
    ok = (delta >= ANCHOR_WINDOW_NS[0]) & (delta <= ANCHOR_WINDOW_NS[1])
    return np.where(ok, nearest, -1), delta[ok]


def _decode_of_frames(
    frames: np.ndarray, anchor_decode: np.ndarray, anchor_rtp: np.ndarray
) -> np.ndarray:
    """Per received frame (sorted unique RTP timestamps), the decode that used it (-1 if
    not known): the anchors' own, and between two anchors in order where as many frames
    as decodes lie between them."""
    ok = (anchor_decode >= 0) & np.isin(anchor_rtp, frames)
    dec, rtp = anchor_decode[ok], anchor_rtp[ok]
    order = np.lexsort((dec, rtp))
    dec, rtp = dec[order], rtp[order]
    # one decode per frame and one frame per decode, both in order
    keep = np.r_[True, rtp[1:] != rtp[:-1]]
    dec, rtp = dec[keep], rtp[keep]
    keep = dec > np.maximum.accumulate(np.r_[-1, dec[:-1]])  # a rising subsequence
    dec, rtp = dec[keep], rtp[keep]
    out = np.full(len(frames), -1, np.int64)
    if not len(dec):
        return out
    fa = np.searchsorted(frames, rtp)
    out[fa] = dec
    consistent = np.r_[np.diff(fa) == np.diff(dec), False]
    f = np.arange(len(frames))
    a = np.searchsorted(fa, f, side="right") - 1
    between = (a >= 0) & (out < 0)
    a = np.maximum(a, 0)
    between &= consistent[a]
    out[between] = dec[a[between]] + f[between] - fa[a[between]]
    return out


def _future(lane: _Lane, log: BrowserLog, ssrc: int, frame_samples: int) -> np.ndarray:
    """Per call of the lane, the samples NetEq's sync buffer held ahead before it
    (float, NaN where no stats read reaches)."""
    n = len(lane.calls_ns)
    out = np.full(n, np.nan)
    trace = log.functions
    rows = log.stats_counters("inbound-rtp", ssrc, COUNTERS)
    if trace is None or not len(rows) or not n:
        return out
    reads = trace.of(STATS_READ).start_ns
    if not len(reads):
        return out
    # the read nearest the page's sample (the call page stamps it before its getStats
    # call, the room pages after theirs)
    at = np.clip(np.searchsorted(reads, rows[:, 0]), 1, max(len(reads) - 1, 1))
    at = np.where(np.abs(reads[at] - rows[:, 0]) < np.abs(reads[at - 1] - rows[:, 0]), at, at - 1)
    found = np.abs(reads[at] - rows[:, 0]) < STATS_READ_WITHIN_NS
    rows, read_ns = rows[found], reads[at[found]]
    if not len(rows):
        return out
    held = rows[:, 1] + rows[:, 2] + rows[:, 3] - rows[:, 4] - rows[:, 5]
    decoded = np.bincount(lane.decode_call, minlength=n) * frame_samples
    change = np.r_[0, np.cumsum(decoded - BLOCK)]  # before call k: change[k]
    k_read = np.searchsorted(lane.calls_ns, read_ns)  # calls before each read
    base = OVERLAP + held - change[k_read]  # F before call k = base + change[k]
    decodes = decoded > 0
    bounds = np.r_[0, k_read, n]
    bases = np.r_[base[0], base, base[-1]]
    for j in range(len(bounds) - 1):  # per stats interval (200 ms), not per event
        lo, hi = bounds[j], bounds[j + 1]
        if hi <= lo:
            continue
        forward = bases[j] + change[lo:hi]
        backward = bases[j + 1] + change[lo:hi]
        if bases[j] == bases[j + 1]:
            out[lo:hi] = forward
            continue
        out[lo:hi] = _switch(forward, backward, decodes[lo:hi])
    return out


def _switch(forward: np.ndarray, backward: np.ndarray, decodes: np.ndarray) -> np.ndarray:
    """Within an interval where the counters moved: the earliest switch from the forward
    to the backward accounting that breaks NetEq's decode rule least (it decodes when
    fewer than a block is left ahead of its look-ahead)."""

    def broken(f: np.ndarray) -> np.ndarray:
        return (decodes & (f - OVERLAP >= BLOCK)) | (~decodes & (f - OVERLAP < BLOCK))

    cost = np.r_[0, np.cumsum(broken(forward))] + np.r_[np.cumsum(broken(backward)[::-1])[::-1], 0]
    s = int(np.argmin(cost))
    return np.r_[forward[:s], backward[s:]]


def _audio(
    log: BrowserLog,
    ssrc: int,
    rtp_ts: np.ndarray,
    received: np.ndarray,
    offset: np.ndarray,
    codec_delay: int,
) -> list[Stage]:
    trace = log.functions
    known = rtp_ts != MISSING
    if trace is None or not known.any():
        return []
    reference = int(rtp_ts[known][0])
    frames = np.unique(_unwrap_near(received, reference))
    if len(frames) < 2:
        return []
    frame_samples = int(np.median(np.diff(frames)))
    source_ns, source_rtp = log.playout.sources_of(ssrc, video=False)
    source_rtp = _unwrap_near(source_rtp, reference)
    best: tuple[int, _Lane | None, np.ndarray] = (0, None, np.zeros(0))
    for lane in _lanes(trace):
        decode, delta = _anchors(lane, source_ns)
        if len(delta) > best[0]:
            best = (len(delta), lane, decode)
    _, lane, anchor_decode = best
    if lane is None:
        return []
    decode_of = _decode_of_frames(frames, anchor_decode, source_rtp)
    units = _unwrap_near(rtp_ts, reference)
    at = np.clip(np.searchsorted(frames, units), 0, len(frames) - 1)
    dec = np.where(known & (frames[at] == units), decode_of[at], -1)
    has = dec >= 0
    decoded = np.where(has, lane.decode_ns[np.maximum(dec, 0)], MISSING)
    stages = [Stage("decoded", JITTERBUFFER, "", decoded)]
    # samples ahead of the frame: the sync buffer, frames decoded before it in that call
    call = lane.decode_call[np.maximum(dec, 0)]
    rank = np.zeros(len(lane.decode_call), np.int64)
    if len(rank):
        same = np.r_[False, lane.decode_call[1:] == lane.decode_call[:-1]]
        group = np.maximum.accumulate(np.where(~same, np.arange(len(rank)), 0))
        rank = np.arange(len(rank)) - group
    ahead = _future(lane, log, ssrc, frame_samples)[call] + frame_samples * rank[np.maximum(dec, 0)]
    ahead = np.clip(ahead, OVERLAP, None)
    ok = has & np.isfinite(ahead)
    ahead = np.where(ok, ahead, 0).astype(np.int64) + offset

    def output(position: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(placed, call, offset in its block) of NetEq output positions past the decode."""
        out_call = call + position // BLOCK
        placed = ok & (out_call < len(lane.calls_ns))
        return placed, np.minimum(out_call, len(lane.calls_ns) - 1), position % BLOCK

    def at(placed: np.ndarray, out_call: np.ndarray, within: np.ndarray) -> np.ndarray:
        return np.where(placed, lane.calls_ns[out_call] + within * NS // RATE, MISSING)

    placed, out_call, within = output(ahead)
    stages.append(Stage("rendered-est", JITTERBUFFER, "", at(placed, out_call, within)))
    if codec_delay:
        placed, out_call, within = output(ahead + codec_delay)
        stages.append(Stage("lookahead-est", PROCESSING, "", at(placed, out_call, within)))
    if log.playout.recorded:
        tap = _tap_played(trace, lane, out_call, within)
        stages.append(Stage("tap-played-est", PLAYOUT, "", np.where(placed, tap, MISSING)))
    else:
        block = _device_played(trace, lane.calls_ns[out_call])
        played = np.where(placed & (block != MISSING), block + within * NS // RATE, MISSING)
        stages.append(Stage("played-est", PLAYOUT, "", played))
    return stages


def _device_played(trace: ChromeSlices, call_ns: np.ndarray) -> np.ndarray:
    """When the output device plays the first sample of the renderer call holding each
    NetEq call: the call's reported delay (MISSING where it reported none)."""
    render = trace.of(RENDER)
    at = _inside(render, call_ns)
    if not len(render.start_ns):
        return np.full(len(call_ns), MISSING, np.int64)
    played = (render.arg0 + render.arg1)[np.maximum(at, 0)] * 1e6
    good = (at >= 0) & (render.arg0[np.maximum(at, 0)] > 0) & np.isfinite(played)
    return np.where(good, np.rint(np.nan_to_num(played)), MISSING).astype(np.int64)


def _tap_played(
    trace: ChromeSlices, lane: _Lane, call: np.ndarray, within: np.ndarray
) -> np.ndarray:
    """When the tap's AudioContext played sample ``within`` of each NetEq call's block,
    through the WebAudio sink's FIFO, its converter, the render quanta and the context's
    output (MISSING where the trace does not reach)."""
    pushes, full = trace.of(SINK_PUSH), trace.of(SINK_FULL).start_ns
    dropped = np.zeros(len(pushes.start_ns), bool)
    if len(full):
        held = _inside(pushes, full)
        dropped[held[held >= 0]] = True
    push_ns = pushes.start_ns[~dropped]
    pulls, quanta = trace.of(SINK_PULL), trace.of(SINK_QUANTUM)
    missing = np.full(len(call), MISSING, np.int64)
    if not len(push_ns) or not len(pulls.start_ns) or not len(quanta.start_ns):
        return missing
    # Quanta before the sink knew the track's format took nothing from the converter: its
    # first sample went out in the quantum of its first pull.
    first = _inside(quanta, pulls.start_ns[:1])[0]
    quanta = quanta.start_ns[max(first, 0) :]
    silent = np.zeros(len(pulls.start_ns), bool)
    under = _inside(pulls, trace.of(SINK_UNDERRUN).start_ns)
    silent[under[under >= 0]] = True
    consumed = np.flatnonzero(~silent)  # the m-th block out of the FIFO: this pull
    push_call = np.searchsorted(lane.calls_ns, push_ns, side="right") - 1
    m = np.searchsorted(push_call, call)  # the push of each call's block
    ok = (m < len(push_call)) & (m < len(consumed))
    m = np.minimum(m, max(min(len(consumed), len(push_call)) - 1, 0))
    ok &= push_call[m] == call
    converter = consumed[m] * BLOCK + within  # the converter's sample: 128 per quantum
    quantum = converter // QUANTUM
    ok &= quantum < len(quanta)
    played = _context_played(trace, quanta[np.minimum(quantum, len(quanta) - 1)])
    ok &= played != MISSING
    return np.where(ok, played + (converter % QUANTUM) * NS // RATE, MISSING)


def _context_played(trace: ChromeSlices, quantum_ns: np.ndarray) -> np.ndarray:
    """When the AudioContext's output device plays the first frame of the render quanta
    at ``quantum_ns``: each device callback's request renders quanta behind the frames
    its FIFO holds, and plays them after the delay it reports."""
    requests, rendered = trace.of(CONTEXT_REQUEST), trace.of(CONTEXT_QUANTUM).start_ns
    at = _inside(trace.of(CONTEXT_QUANTUM), quantum_ns)
    request = _inside(requests, rendered)
    if not len(requests.start_ns) or not len(rendered):
        return np.full(len(quantum_ns), MISSING, np.int64)
    first = np.r_[True, request[1:] != request[:-1]]
    rank = np.arange(len(request)) - np.maximum.accumulate(
        np.where(first, np.arange(len(request)), 0)
    )
    r = request[np.maximum(at, 0)]
    stamp, delay, held = (
        a[np.maximum(r, 0)] for a in (requests.arg0, requests.arg1, requests.arg2)
    )
    frames = held + QUANTUM * rank[np.maximum(at, 0)]
    played = (stamp + delay) * 1e6 + frames * NS / RATE
    ok = (at >= 0) & (r >= 0) & (stamp > 0) & np.isfinite(played)
    return np.where(ok, np.rint(np.nan_to_num(played)), MISSING).astype(np.int64)


# --- video -----------------------------------------------------------------------


def _video(log: BrowserLog, ssrc: int, rtp_ts: np.ndarray) -> list[Stage]:
    shown = log.playout.presented
    source_ns, source_rtp = log.playout.sources_of(ssrc, video=True)
    if not len(shown.rtp_ts) and not len(source_ns):
        return []
    rtp = np.asarray(rtp_ts, np.int64)
    decoded = _by_rtp(source_rtp, source_ns + MS_CENTRE_NS, rtp)
    presented = _by_rtp(shown.rtp_ts, shown.presentation_ns, rtp)
    processing = _by_rtp(shown.rtp_ts, shown.processing_ns, rtp)
    start = np.where((decoded != MISSING) & (processing != MISSING), decoded - processing, MISSING)
    return [
        Stage("decode-start", JITTERBUFFER, "", start),
        Stage("decoded", PROCESSING, VIDEO_KLASS, decoded),
        Stage("presented", PLAYOUT, "", presented),
    ]


def _by_rtp(keys: np.ndarray, values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The value of each wanted RTP timestamp's first entry (MISSING if none)."""
    if not len(keys):
        return np.full(len(wanted), MISSING, np.int64)
    order = np.argsort(keys, kind="stable")
    at = np.clip(np.searchsorted(keys[order], wanted), 0, len(keys) - 1)
    hit = (keys[order][at] == wanted) & (wanted != MISSING)
    return np.where(hit, values[order][at], MISSING)
