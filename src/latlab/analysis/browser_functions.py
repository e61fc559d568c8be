"""The libwebrtc study's per-call stages, from Chromium's own trace of its audio functions.

``getStats()`` gives lifetime sums, and libwebrtc's audio ``totalProcessingDelay``
ends when NetEq takes a packet out to decode it, so decoding itself is in no
counter (and ``jitterBufferDelay`` counts whole 10 ms NetEq ticks, so the two
cannot be subtracted to find it). Chromium's trace has a slice per call of each
function instead: these are the distributions over calls, every 10 ms of audio
(each 20 ms Opus packet for the encoder and decoder).

Per stream: the sending browser's capture interval, audio processing and encode;
the receiving browser's decode, NetEq's ``GetAudio`` (decoding, concealment, time
stretching for one 10 ms block), the mixer, the renderer's pull (mixing and
resampling to the device rate) and the output device's callback interval.
"""

from __future__ import annotations

import numpy as np

from latlab.analysis.browser_intervals import describe_ms
from latlab.ingest.browser_records import BrowserLog
from latlab.ingest.chrome_trace import ChromeSlices

# stage -> (function, measured: the "duration" of each call or the "interval" between calls)
SENDER_STAGES = {
    "capture_interval": ("AudioInputDevice::AudioThreadCallback::Process", "interval"),
    "audio_processing": ("ChannelSend::ProcessAndEncodeAudio", "duration"),
    "encode": ("AudioEncoder::Encode", "duration"),
}
RECEIVER_STAGES = {
    "decode": ("AudioDecoder::Decode", "duration"),
    "neteq_get_audio": ("NetEqImpl::GetAudio", "duration"),
    "mix": ("AudioMixerImpl::Mix", "duration"),
    "render_pull": ("WebRtcAudioRenderer::Render", "duration"),
    "playout_interval": ("AudioOutputDevice::FireRenderCallback", "interval"),
}


def function_figures(
    sender: BrowserLog | None,
    receiver: BrowserLog | None,
    window: tuple[int, int] | None = None,
) -> dict[str, dict]:
    """Per stage, the distribution over calls (ms) of the browsers at either end, over
    the calls that started in ``window`` (CLOCK_MONOTONIC ns; the measured window)."""
    out: dict[str, dict] = {}
    for log, stages in ((sender, SENDER_STAGES), (receiver, RECEIVER_STAGES)):
        if log is None or log.functions is None:
            continue
        calls = log.functions.within(*window) if window else log.functions
        for name, (function, measure) in stages.items():
            values = _values_ms(calls.of(function), measure)
            if len(values):
                out[name] = describe_ms(values)
    return out


def _values_ms(calls: ChromeSlices, measure: str) -> np.ndarray:
    """Each call's duration, or the interval between consecutive calls on each thread."""
    if measure == "duration":
        return calls.duration_ns / 1e6
    order = np.lexsort((calls.start_ns, calls.track))
    track, start = calls.track[order], calls.start_ns[order]
    same_thread = track[1:] == track[:-1]
    return np.diff(start)[same_thread] / 1e6
