"""A receiving browser's stages per unit (stitch.browser_receiver), on a synthetic Chromium
with known answers: NetEq called every 10 ms by the renderer, a frame decoded every other
call, a sync buffer of a known size ahead of each decode, the renderer's reported output
delay, the WebAudio sink's FIFO and the AudioContext's quanta, and video frames presented.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from latlab.analysis.browser_intervals import interval_figures
from latlab.ingest.browser_playout import Playout, Presented, read_playout
from latlab.ingest.browser_records import BrowserFrames, BrowserLog
from latlab.ingest.chrome_trace import (
    CONTEXT_QUANTUM,
    CONTEXT_REQUEST,
    FUNCTIONS,
    SINK_PULL,
    SINK_PUSH,
    SINK_QUANTUM,
    SINK_UNDERRUN,
    STATS_READ,
    ChromeSlices,
)
from latlab.stitch.browser import capture_ns
from latlab.stitch.browser_receiver import (
    BLOCK,
    OPUS_LOOKAHEAD,
    OVERLAP,
    RATE,
    _switch,
    receiver_stages,
)
from latlab.stitch.position import MISSING

MS = 1_000_000
T0 = 10_000 * MS
CALLS = 400
FRAMES = 150
R0 = 4_294_000_000  # RTP timestamps wrap after about 2 s
SSRC, OTHER = 0x1111, 0x2222
DEPTH = 8  # calls between a frame's arrival and its decode
AHEAD = 258  # samples in NetEq's sync buffer before each decode
DELAY_MS = 30.0  # the renderer's reported output delay


class Trace:
    """Slices for ChromeSlices: (function, start, duration, args)."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, int, int, tuple[float, float, float]]] = []

    def add(self, name: str, start: int, duration: int = 0, *args: float) -> None:
        values = (*args, *(np.nan,) * 3)[:3]
        self.rows.append((name, start, duration, values))

    def slices(self) -> ChromeSlices:
        rows = sorted(self.rows, key=lambda r: r[1])
        args = np.array([r[3] for r in rows], np.float64).reshape(-1, 3)
        return ChromeSlices(
            np.array([FUNCTIONS.index(r[0]) for r in rows], np.int64),
            np.zeros(len(rows), np.uint64),
            np.array([r[1] for r in rows], np.int64),
            np.array([r[2] for r in rows], np.int64),
            args[:, 0].copy(),
            args[:, 1].copy(),
            args[:, 2].copy(),
        )


def call_ns(k: int) -> int:
    return T0 + 10 * MS * k + 30_000


def decode_call(j: int) -> int:
    return 2 * j + DEPTH


def _neteq(trace: Trace, lanes: int = 1) -> None:
    """The renderer's calls, each mixing ``lanes`` streams; stream 0 decodes frame j in
    call 2 j + DEPTH, stream 1 (another SSRC) in the calls between."""
    for k in range(CALLS):
        start = T0 + 10 * MS * k
        trace.add("WebRtcAudioRenderer::Render", start, 900_000, start / MS, DELAY_MS)
        trace.add("AudioMixerImpl::Mix", start + 10_000, 800_000)
        for lane in range(lanes):
            at = call_ns(k) + 300_000 * lane
            trace.add("NetEqImpl::GetAudio", at, 200_000)
            decodes = (k - DEPTH) % 2 == 0 if lane == 0 else (k - DEPTH) % 2 == 1
            if decodes and 0 <= (k - DEPTH) // 2 < FRAMES:
                trace.add("AudioDecoder::Decode", at + 20_000, 50_000)


def _stats(trace: Trace) -> list[tuple[int, list[dict]]]:
    """getStats every 200 ms, each read by the worker 3 ms later, between calls; the
    counters say the sync buffer held AHEAD samples before each decode."""
    rows = []
    for read_call in range(DEPTH + 1, CALLS, 20):  # read just before call read_call
        read = T0 + 10 * MS * read_call - 2 * MS
        trace.add(STATS_READ, read, 10_000)
        decodes = len([j for j in range(FRAMES) if decode_call(j) < read_call])
        ahead = AHEAD if (read_call - DEPTH) % 2 == 0 else AHEAD + BLOCK
        emitted = 960 * decodes
        total = emitted - (ahead - OVERLAP)
        report = {
            "type": "inbound-rtp",
            "ssrc": SSRC,
            "jitterBufferEmittedCount": emitted,
            "concealedSamples": 0,
            "insertedSamplesForDeceleration": 0,
            "removedSamplesForAcceleration": 0,
            "totalSamplesReceived": total,
        }
        rows.append((read - 3 * MS, [report]))
    return rows


def _log(trace: Trace, stats: list, playout: Playout, received: np.ndarray) -> BrowserLog:
    frames = BrowserFrames(
        send=np.zeros(len(received), bool),
        audio=np.ones(len(received), bool),
        ssrc=np.full(len(received), SSRC, np.int64),
        rtp_ts=received,
        seq=np.full(len(received), MISSING, np.int64),
        t_ns=np.zeros(len(received), np.int64),
        bytes=np.zeros(len(received), np.int64),
        capture_ns=np.full(len(received), MISSING, np.int64),
        receive_ns=np.full(len(received), MISSING, np.int64),
        abs_capture_ns=np.full(len(received), MISSING, np.int64),
    )
    log = BrowserLog("bob", Path("bob.jsonl"), 0, frames, stats=stats)
    log.functions = trace.slices()
    log.playout = playout
    return log


def _rtp(j: np.ndarray) -> np.ndarray:
    return (R0 + 960 * np.asarray(j, np.int64)) % (1 << 32)


def _sources(frames: np.ndarray, ssrc: int = SSRC) -> Playout:
    """Source entries for ``frames``: the decode call's time in whole milliseconds."""
    times = np.array([call_ns(decode_call(j)) // MS * MS for j in frames], np.int64)
    return Playout(
        source_video=np.zeros(len(frames), bool),
        source_ssrc=np.full(len(frames), ssrc, np.int64),
        source_ns=times,
        source_rtp=_rtp(frames),
    )


def expected_at(position: int, j: int) -> int:
    k = decode_call(j) + position // BLOCK
    return call_ns(k) + (position % BLOCK) * 1_000_000_000 // RATE


def test_audio_stages_of_every_frame() -> None:
    trace = Trace()
    _neteq(trace, lanes=2)  # another stream mixed in the same calls
    stats = _stats(trace)
    anchored = np.arange(0, FRAMES, 10)  # a source entry every 10th frame only
    frames = np.arange(FRAMES)
    log = _log(trace, stats, _sources(anchored), _rtp(frames))
    stages = receiver_stages(log, SSRC, False, _rtp(frames), _rtp(frames))
    assert [s.name for s in stages] == ["decoded", "rendered-est", "played-est"]
    assert [s.kind for s in stages] == ["jitterbuffer", "jitterbuffer", "playout"]
    decoded, rendered, played = (s.times for s in stages)
    j = np.arange(20, 120)
    assert decoded[j].tolist() == [call_ns(decode_call(i)) + 20_000 for i in j]
    assert rendered[j].tolist() == [expected_at(AHEAD, i) for i in j]
    # the renderer's call holding the sample: its reported delay, plus the offset
    block = AHEAD * 1_000_000_000 // RATE
    first = [T0 + 10 * MS * decode_call(i) + int(DELAY_MS * MS) + block for i in j]
    assert played[j].tolist() == first


def test_a_sender_whose_encoder_is_not_followed_adds_the_codec_delay() -> None:
    trace = Trace()
    _neteq(trace)
    frames = np.arange(FRAMES)
    log = _log(trace, _stats(trace), _sources(frames), _rtp(frames))
    stages = receiver_stages(log, SSRC, False, _rtp(frames), _rtp(frames), 0, OPUS_LOOKAHEAD)
    assert [s.name for s in stages] == ["decoded", "rendered-est", "lookahead-est", "played-est"]
    assert stages[2].times[40] == expected_at(AHEAD + OPUS_LOOKAHEAD, 40)
    block = (AHEAD + OPUS_LOOKAHEAD) % BLOCK * 1_000_000_000 // RATE
    second = T0 + 10 * MS * (decode_call(40) + 1) + int(DELAY_MS * MS) + block
    assert stages[3].times[40] == second


def test_a_frame_a_sample_into_its_frame() -> None:
    trace = Trace()
    _neteq(trace)
    frames = np.arange(FRAMES)
    log = _log(trace, _stats(trace), _sources(frames), _rtp(frames))
    (_, rendered, _) = receiver_stages(log, SSRC, False, _rtp([40]), _rtp(frames), offset=700)
    assert rendered.times.tolist() == [expected_at(AHEAD + 700, 40)]


def test_frames_between_anchors_need_as_many_decodes() -> None:
    """Frame 60 was received but never decoded (NetEq dropped it late): between the
    source entries of frames 50 and 70 there are 19 decodes for 20 frames, so none of
    them is placed; frame 90 was lost on the way, and the 19 frames received between 80
    and 100 had 19 decodes: placed."""
    trace = Trace()
    _neteq(trace)
    frames = np.arange(FRAMES)
    late = trace.rows.index(next(r for r in trace.rows if r[0] == "AudioDecoder::Decode"
                                 and r[1] == call_ns(decode_call(60)) + 20_000))  # fmt: skip
    trace.rows.pop(late)
    lost = trace.rows.index(next(r for r in trace.rows if r[0] == "AudioDecoder::Decode"
                                 and r[1] == call_ns(decode_call(90)) + 20_000))  # fmt: skip
    trace.rows.pop(lost)
    received = np.delete(frames, 90)
    log = _log(trace, _stats(trace), _sources(np.arange(0, FRAMES, 10)), _rtp(received))
    decoded = receiver_stages(log, SSRC, False, _rtp(frames), _rtp(received))[0].times
    assert (decoded[51:70] == MISSING).all()
    assert decoded[50] != MISSING and decoded[70] != MISSING
    assert decoded[90] == MISSING
    assert decoded[91:100].tolist() == [call_ns(decode_call(i)) + 20_000 for i in range(91, 100)]


def test_no_trace_no_stages() -> None:
    log = _log(Trace(), [], Playout(), _rtp(np.arange(10)))
    log.functions = None
    assert receiver_stages(log, SSRC, False, _rtp(np.arange(10)), _rtp(np.arange(10))) == []


def test_counters_moving_inside_an_interval_switch_where_the_decode_rule_says() -> None:
    """Forward from the last read the buffer held 258 samples before decodes; NetEq then
    inserted 240 (preemptive expand) at the decode of call 6: from there the backward
    accounting from the next read holds, which breaks the rule nowhere."""
    decodes = np.array([True, False] * 6)
    forward = np.tile([AHEAD, AHEAD + BLOCK], 6).astype(float)
    backward = forward + 240
    out = _switch(forward, backward, decodes)
    # before the switch the forward figures, then the backward ones
    s = int(np.argmax(out != forward))
    assert out[:s].tolist() == forward[:s].tolist() and out[s:].tolist() == backward[s:].tolist()


def test_tap_path_through_the_fifo_and_the_context() -> None:
    """A page that records plays through its tap: each NetEq block is pushed into the
    sink's FIFO, pulled in order (the first pull finds it empty: silence), 128 samples
    per render quantum, and the context plays quanta after its device's reported delay
    and the frames its FIFO held."""
    trace = Trace()
    _neteq(trace)
    for k in range(CALLS):
        trace.add(SINK_PUSH, call_ns(k) + 250_000, 5_000)
    # the context: a device callback every 10 ms renders the quanta that cover its 480
    # frames, in a burst, behind the 32 frames its FIFO held; the converter pulls a block
    # whenever it runs dry
    quanta = pulled = 0
    for c in range(CALLS - 4):
        t = T0 + 5 * MS + 10 * MS * c
        trace.add(CONTEXT_REQUEST, t, 900_000, t / MS, DELAY_MS, 32.0)
        while quanta * 128 < 480 * (c + 1):
            at = t + 10_000 + 100_000 * (quanta % 5)
            trace.add(CONTEXT_QUANTUM, at, 60_000)
            trace.add(SINK_QUANTUM, at + 5_000, 40_000)
            while pulled * 480 < (quanta + 1) * 128:
                trace.add(SINK_PULL, at + 10_000, 3_000)
                if pulled == 0:
                    trace.add(SINK_UNDERRUN, at + 11_000)
                pulled += 1
            quanta += 1
    frames = np.arange(FRAMES)
    playout = _sources(frames)
    playout.recorded = True
    log = _log(trace, _stats(trace), playout, _rtp(frames))
    stages = receiver_stages(log, SSRC, False, _rtp(frames), _rtp(frames))
    assert [s.name for s in stages][-1] == "tap-played-est"
    tap = stages[-1].times
    slices = log.functions
    quanta = slices.of(CONTEXT_QUANTUM).start_ns
    requests = slices.of(CONTEXT_REQUEST)
    for j in (30, 77):
        position = AHEAD
        k = decode_call(j) + position // BLOCK
        converter = (k + 1) * BLOCK + position % BLOCK  # the first pull was silence
        q = converter // 128
        r = np.searchsorted(requests.start_ns, quanta[q], side="right") - 1
        rank = q - np.searchsorted(quanta, requests.start_ns[r])
        played = (requests.arg0[r] + requests.arg1[r]) * MS
        played += (32 + 128 * rank + converter % 128) * 1e9 / RATE
        assert tap[j] == pytest.approx(played, abs=2)


def test_video_stages_from_presented_frames() -> None:
    rtp = np.array([900, 3900, 6900], np.int64)
    shown = Presented(
        rtp_ts=rtp[:2],
        receive_ns=np.array([1, 2]) * MS,
        capture_ns=np.full(2, MISSING),
        presentation_ns=np.array([120, 150]) * MS,
        expected_display_ns=np.array([125, 155]) * MS,
        processing_ns=np.array([2, 3]) * MS,
    )
    playout = Playout(
        source_video=np.ones(3, bool),
        source_ssrc=np.full(3, SSRC),
        source_ns=np.array([100, 130, 160]) * MS,
        source_rtp=rtp,
        presented=shown,
    )
    log = _log(Trace(), [], playout, rtp)
    start, decoded, presented = receiver_stages(log, SSRC, True, rtp, rtp)
    assert decoded.times.tolist() == [100.5 * MS, 130.5 * MS, 160.5 * MS]
    assert start.times.tolist() == [98.5 * MS, 127.5 * MS, MISSING]
    assert presented.times.tolist() == [120 * MS, 150 * MS, MISSING]
    assert [s.kind for s in (start, decoded, presented)] == [
        "jitterbuffer",
        "processing",
        "playout",
    ]


def test_playout_records_are_read_and_damaged_entries_left_out() -> None:
    entries = [
        ["audio", SSRC, 1000, 960],
        ["video", OTHER, 1001.0, 3000],
        ["audio", SSRC, "x", 1920],
        "junk",
    ]
    shown = {"rtp_ts": 3000, "presentation_ms": 1010.5, "processing_ms": 1.25, "receive_ms": None}
    by_type = {
        "sources": [{"entries": entries}, {"entries": "junk"}],
        "presented": [{"frames": [shown, {"rtp_ts": None, "presentation_ms": 1}]}],
        "signal_audio": [{"frame": 0}],
    }
    playout = read_playout(by_type, offset_ns=5 * MS)
    assert playout.recorded
    assert playout.sources_of(SSRC, video=False)[0].tolist() == [1005 * MS]
    assert playout.sources_of(OTHER, video=True)[1].tolist() == [3000]
    shown = playout.presented
    assert shown.rtp_ts.tolist() == [3000]
    assert shown.presentation_ns.tolist() == [1015.5 * MS]
    assert shown.processing_ns.tolist() == [1.25 * MS]  # a duration: no clock offset
    assert shown.receive_ns.tolist() == [MISSING]


def test_sources_fall_back_on_the_stats_sampling_sync_records() -> None:
    sync = [{"sources": [{"source": SSRC, "timestamp": 2000, "rtpTimestamp": 960}]}]
    playout = read_playout({"sync": sync}, offset_ns=0)
    assert playout.sources_of(SSRC, video=False)[1].tolist() == [960]


def test_capture_is_the_callback_of_the_first_10_ms_less_the_look_ahead() -> None:
    """Chromium stamps an audio frame with its first 10 ms's capture time, in whole
    milliseconds (here 1.04 ms early); the callback in the trace is exact."""
    calls = T0 + 10 * MS * np.arange(100) + 123_456
    trace = Trace()
    for t in calls:
        trace.add("AudioInputDevice::AudioThreadCallback::Process", int(t), 50_000)
    stamped = np.array([calls[10] - 1_040_000, calls[12] - 1_040_000, MISSING, calls[80]])
    sent = BrowserFrames(
        send=np.ones(4, bool), audio=np.array([True, True, True, False]),
        ssrc=np.full(4, SSRC), rtp_ts=np.arange(4), seq=np.full(4, MISSING),
        t_ns=np.zeros(4, np.int64), bytes=np.zeros(4, np.int64), capture_ns=stamped,
        receive_ns=np.full(4, MISSING), abs_capture_ns=np.full(4, MISSING),
    )  # fmt: skip
    log = _log(trace, [], Playout(), np.zeros(0, np.int64))
    lookahead = OPUS_LOOKAHEAD * 1_000_000_000 // RATE
    assert capture_ns(log, sent).tolist() == [
        calls[10] - lookahead,
        calls[12] - lookahead,
        MISSING,
        calls[80],  # video: as stamped
    ]


def test_video_decode_and_freezes_per_stats_interval() -> None:
    """getStats' totalDecodeTime per frame decoded, and the time frozen per interval."""
    stats = []
    for k in range(6):  # every 200 ms: 6 frames decoded in 9 ms, 40 ms frozen from the 3rd
        report = {
            "type": "inbound-rtp",
            "ssrc": SSRC,
            "totalDecodeTime": 0.009 * k,
            "framesDecoded": 6 * k,
            "totalFreezesDuration": 0.04 * max(k - 2, 0),
        }
        stats.append((k * 200 * MS, [report]))  # fmt: skip
    log = _log(Trace(), stats, Playout(), np.zeros(0, np.int64))
    figures = interval_figures(None, log, SSRC)
    assert figures["decode"]["p50_ms"] == pytest.approx(1.5)
    assert figures["frozen"]["count"] == 5
    assert figures["frozen"]["max_ms"] == pytest.approx(40.0)
    assert figures["frozen"]["p50_ms"] == pytest.approx(40.0)  # 0, 0, 40, 40, 40
