#!/usr/bin/env python3
"""Time codes through real codecs: detection rate and timing error per channel, false
detections in speech and music without codes, decode speed against reading the file.

One test file of codes (48 kHz, a code every 200 ms) is delayed by a planted,
known number of samples and passed through channels built from GStreamer's
opusenc/opusdec (16 and 32 kbit/s; packets dropped between them with
``identity drop-probability``, concealed by ``opusdec plc=true``) and
audioresample (48 -> 44.1 and 16 kHz), then gain steps and additive Gaussian
noise (20 dB SNR against the codes' power) are applied to the decoded samples.
For every channel it prints: codes found (read from their bits, and inferred
from their neighbours when a lost packet broke the bits), wrong codes, and the
timing error against the planted instant (p50/p99 of |error| in samples at the
recording's rate and in ms, and the median signed error, the channel's bias).

False detections: an hour of speech (espeak-ng reading the licence texts in
/usr/share/common-licenses with several voices, speeds and pitches) and an hour
of music (random multi-instrument MIDI rendered by GStreamer's fluiddec with
the General MIDI soundfont in /usr/share/sounds/sf2), with no codes. Where
espeak-ng or fluiddec is missing, synthesised stand-ins are used instead
(glottal pulse trains through moving formants; harmonic tones with vibrato and
noise bursts), and the output says so. The speech also serves for channels where
it is mixed under the codes (at a level relative to the codes' RMS).

It measures and prints; it asserts nothing.

Then ``latlab signal compare``'s reference correlation on the same speech through
Opus 32k without and with 1 % loss (latency against the planted delay,
disruptions, PESQ, speed).

    .venv/bin/python bench/bench_timecode.py [--minutes 10] [--false-minutes 60]
                                             [--part all|codes|compare]
"""

from __future__ import annotations

import argparse
import shutil
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from latlab.signal.channels import Codec, add_noise, delay, gain_steps, gst_channel
from latlab.signal.timecode import COHERENCE_THRESHOLD, DESIGN, decode, generate
from latlab.signal.wavio import read_wav, resample, write_wav

RATE = 48000
INTERVAL_S = 0.2
PLANTED_SAMPLES = 23_457
SOUNDFONT = Path("/usr/share/sounds/sf2/TimGM6mb.sf2")
LICENCES = Path("/usr/share/common-licenses")
TARGET_P99_MS = 0.1
STRESS_SYNC_THRESHOLD = 0.12
TARGET_DETECTED_AT_1PCT_LOSS = 0.99


@dataclass(frozen=True)
class Condition:
    """One synthetic channel: GStreamer part, then gain steps and noise on the samples."""

    name: str
    rate: int
    codec: Codec | None = None
    gain_steps: bool = False
    noise_snr_db: float | None = None
    noise_in_band: bool = False
    speech_mixed_db: float | None = None
    """Speech added before the channel at this level relative to the codes' RMS."""


CONDITIONS = (
    Condition("wav 48 kHz (no channel)", 48000),
    Condition("resample 44.1 kHz", 44100),
    Condition("resample 16 kHz", 16000),
    Condition("opus 32k", 48000, Codec(32000)),
    Condition("opus 16k", 48000, Codec(16000)),
    Condition("opus 32k -> 44.1 kHz", 44100, Codec(32000)),
    Condition("opus 16k -> 16 kHz", 16000, Codec(16000)),
    Condition("opus 32k, gain steps", 48000, Codec(32000), gain_steps=True),
    Condition("opus 32k, noise 20 dB", 48000, Codec(32000), noise_snr_db=20),
    Condition(
        "opus 32k, in-band noise 20 dB", 48000, Codec(32000), noise_snr_db=20, noise_in_band=True
    ),
    Condition("opus 32k, loss 1%", 48000, Codec(32000, 0.01)),
    Condition("opus 16k, loss 1%", 48000, Codec(16000, 0.01)),
    Condition("opus 32k, loss 5%", 48000, Codec(32000, 0.05)),
    Condition("opus 16k, loss 5%", 48000, Codec(16000, 0.05)),
    Condition(
        "opus 16k, loss 5%, 16 kHz, gain, noise",
        16000,
        Codec(16000, 0.05),
        gain_steps=True,
        noise_snr_db=20,
    ),
    Condition("speech at -10 dB mixed, opus 32k", 48000, Codec(32000), speech_mixed_db=-10),
    Condition("speech at 0 dB mixed, opus 32k", 48000, Codec(32000), speech_mixed_db=0),
    Condition(
        "speech at 0 dB mixed, opus 32k, loss 1%", 48000, Codec(32000, 0.01), speech_mixed_db=0
    ),
)


def run_condition(
    cond: Condition, codes: np.ndarray, speech: np.ndarray, work: Path, planted_s: np.ndarray
) -> dict:
    """Pass the codes through one channel, decode them, compare with the planted instants."""
    source, out = work / "source.wav", work / "channel.wav"
    samples = codes
    if cond.speech_mixed_db is not None:
        active = np.abs(codes) > 0
        gain = np.sqrt(np.mean(codes[active] ** 2) / np.mean(speech**2))
        gain *= 10.0 ** (cond.speech_mixed_db / 20.0)
        samples = codes + gain * np.resize(speech, len(codes))
    write_wav(source, samples, RATE)
    packets = gst_channel(source, out, cond.rate, cond.codec)
    audio = read_wav(out)
    samples = audio.samples
    if cond.gain_steps:
        samples = gain_steps(samples, audio.rate, (0.0, -12.0, -24.0, -6.0), 1.37)
    if cond.noise_snr_db is not None:
        active = np.abs(samples) > 1e-4
        band = DESIGN.band_hz if cond.noise_in_band else None
        samples = add_noise(
            samples, audio.rate, cond.noise_snr_db, seed=7, band_hz=band, active=active
        )
    found = decode(samples, audio.rate)
    known = (found.index >= 0) & (found.index < len(planted_s))
    error_s = found.time_s[known] - planted_s[found.index[known]]
    right = known & (
        np.abs(found.time_s - planted_s[np.clip(found.index, 0, len(planted_s) - 1)]) < 1e-3
    )
    unique_right = len(np.unique(found.index[right]))
    abs_err = np.abs(error_s)
    return {
        "name": cond.name,
        "loss": packets.dropped / packets.total if packets else None,
        "rate": audio.rate,
        "detected": unique_right / len(planted_s),
        "inferred": int(found.inferred[right].sum()),
        "wrong": int(len(found.index) - right.sum()),
        "p50": float(np.percentile(abs_err, 50)) if len(abs_err) else float("nan"),
        "p99": float(np.percentile(abs_err, 99)) if len(abs_err) else float("nan"),
        "bias": float(np.median(error_s)) if len(error_s) else float("nan"),
        "min_conf": float(found.confidence[right].min()) if right.any() else float("nan"),
    }


def print_conditions(results: list[dict], total: int) -> None:
    print(
        f"\n{'channel':40s} {'found':>7s} {'inferred':>8s} {'wrong':>5s} "
        f"{'p50 |err|':>19s} {'p99 |err|':>19s} {'bias ms':>8s} {'min conf':>8s} {'lost':>6s}"
    )
    for r in results:
        per_ms = r["rate"] / 1000.0
        print(
            f"{r['name']:40s} {r['detected'] * 100:6.2f}% {r['inferred']:8d} {r['wrong']:5d} "
            f"{r['p50'] * 1000 * per_ms:6.3f} smp {r['p50'] * 1000:6.4f} ms "
            f"{r['p99'] * 1000 * per_ms:6.3f} smp {r['p99'] * 1000:6.4f} ms "
            f"{r['bias'] * 1000:+8.4f} {r['min_conf']:8.3f} "
            + (f"{r['loss'] * 100:5.2f}%" if r["loss"] is not None else "     -")
        )
    print(
        f"({total} codes per channel; samples at the recording's rate; |err| against the "
        "planted instant, bias = median signed error; lost = Opus packets dropped, counted)"
    )


def _midi_vlq(value: int) -> bytes:
    out = [value & 0x7F]
    value >>= 7
    while value:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    return bytes(reversed(out))


def random_midi(path: Path, minutes: float, seed: int) -> None:
    """A format-0 MIDI file of random pieces: melodies with vibrato, chords, bass, drums;
    instruments and tempo change every piece (about two minutes)."""
    rng = np.random.default_rng(seed)
    tpq = 480
    events: list[tuple[int, bytes]] = []
    tick, end = 0, 0
    programs = (0, 4, 19, 24, 40, 41, 48, 52, 56, 61, 65, 71, 73, 80, 81, 88)
    for _ in range(int(np.ceil(minutes / 2))):  # pieces of two minutes
        tempo_us = int(rng.uniform(400_000, 900_000))
        piece_ticks = int(120e6 / tempo_us * tpq)
        events.append((tick, b"\xff\x51\x03" + tempo_us.to_bytes(3, "big")))
        for channel in range(4):
            events.append((tick, bytes([0xC0 | channel, int(rng.choice(programs))])))
        root = int(rng.integers(48, 60))
        scale = root + np.array([0, 2, 4, 5, 7, 9, 11, 12, 14, 16])
        for channel, (octave, step_beats) in enumerate(((12, 0.5), (0, 1.0), (-12, 2.0))):
            t = tick
            while t < tick + piece_ticks:
                length = int(tpq * step_beats * rng.choice([0.5, 1, 1, 2]))
                note = int(rng.choice(scale)) + octave
                velocity = int(rng.integers(50, 120))
                events.append((t, bytes([0x90 | channel, note, velocity])))
                events.append((t + length, bytes([0x80 | channel, note, 0])))
                if channel == 0:  # vibrato and an occasional bend on the melody
                    events.append((t, bytes([0xB0, 1, int(rng.integers(0, 100))])))
                    bend = int(rng.integers(0, 16384)) if rng.random() < 0.2 else 8192
                    events.append((t, bytes([0xE0, bend & 0x7F, bend >> 7])))
                t += length
        for t in range(tick, tick + piece_ticks, tpq // 2):  # drums on channel 10
            drum = int(rng.choice([35, 38, 42, 42, 46, 49, 51]))
            events.append((t, bytes([0x99, drum, int(rng.integers(60, 127))])))
            events.append((t + tpq // 4, bytes([0x89, drum, 0])))
        tick += piece_ticks
        end = tick
    events.append((end + tpq, b"\xff\x2f\x00"))
    events.sort(key=lambda e: e[0])
    track = bytearray()
    last = 0
    for t, data in events:
        track += _midi_vlq(t - last) + data
        last = t
    header = b"MThd" + struct.pack(">IHHH", 6, 0, 1, tpq)
    path.write_bytes(header + b"MTrk" + struct.pack(">I", len(track)) + bytes(track))


def music_corpus(work: Path, minutes: float) -> tuple[np.ndarray, str]:
    """Music at 48 kHz: rendered MIDI (fluiddec) if available, else synthesised tones."""
    if SOUNDFONT.is_file() and _has_element("fluiddec") and _has_element("midiparse"):
        midi, wav = work / "music.mid", work / "music.wav"
        random_midi(midi, minutes, seed=11)
        subprocess.run(
            [
                "gst-launch-1.0",
                "-q",
                "filesrc",
                f"location={midi}",
                "!",
                "midiparse",
                "!",
                "fluiddec",
                f"soundfont={SOUNDFONT}",
                "synth-gain=0.6",
                "!",
                "audioconvert",
                "!",
                "audioresample",
                "!",
                f"audio/x-raw,format=S16LE,rate={RATE},channels=1",
                "!",
                "wavenc",
                "!",
                "filesink",
                f"location={wav}",
            ],
            check=True,
            capture_output=True,
            timeout=3600,
        )
        samples = read_wav(wav).samples[: int(minutes * 60 * RATE)]
        return samples, f"random MIDI rendered by fluiddec with {SOUNDFONT.name}"
    return synthetic_music(minutes, seed=11), "synthesised harmonic tones (no fluiddec)"


def synthetic_music(minutes: float, seed: int) -> np.ndarray:
    """Notes of 8 harmonics with vibrato and decay, plus noise bursts (percussion)."""
    rng = np.random.default_rng(seed)
    n = int(minutes * 60 * RATE)
    out = np.zeros(n, dtype=np.float32)
    note_len = int(0.25 * RATE)
    t = np.arange(note_len) / RATE
    for start in range(0, n - note_len, note_len):
        f0 = 110 * 2 ** (rng.integers(0, 36) / 12)
        vibrato = 1 + 0.006 * np.sin(2 * np.pi * rng.uniform(4, 7) * t)
        phase = 2 * np.pi * f0 * np.cumsum(vibrato) / RATE
        note = sum(np.sin(k * phase) / k for k in range(1, 9)) * np.exp(-3 * t)
        if rng.random() < 0.3:
            note = note + rng.standard_normal(note_len) * np.exp(-30 * t)
        out[start : start + note_len] += 0.1 * note.astype(np.float32)
    return out


def speech_corpus(work: Path, minutes: float) -> tuple[np.ndarray, str]:
    """Speech at 48 kHz: espeak-ng reading licence texts, else a synthesised stand-in."""
    if shutil.which("espeak-ng") is None or not LICENCES.is_dir():
        return synthetic_speech(minutes, seed=5), "synthesised formant speech (no espeak-ng)"
    voices = ("en-us+m3", "en-gb+f3", "de+m1", "fr-fr+f2", "es+m4", "en-us+f4", "it+m2")
    texts = sorted(p for p in LICENCES.iterdir() if p.is_file())
    parts: list[np.ndarray] = []
    total, wanted, k = 0, int(minutes * 60 * RATE), 0
    while total < wanted:
        wav = work / "speech.wav"
        voice, text = voices[k % len(voices)], texts[k % len(texts)]
        speed, pitch = 130 + (k * 17) % 80, 20 + (k * 23) % 60
        subprocess.run(
            [
                "espeak-ng",
                "-v",
                voice,
                "-s",
                str(speed),
                "-p",
                str(pitch),
                "-w",
                str(wav),
                "-f",
                str(text),
            ],
            check=True,
            capture_output=True,
            timeout=600,
        )
        audio = read_wav(wav)
        parts.append(resample(audio.samples, audio.rate, RATE))
        total += len(parts[-1])
        k += 1
    speech = np.concatenate(parts)[:wanted]
    return speech, f"espeak-ng reading {LICENCES}/* ({len(voices)} voices, varied speed and pitch)"


def synthetic_speech(minutes: float, seed: int) -> np.ndarray:
    """Glottal pulses with moving pitch through two moving formants, syllable envelopes."""
    from scipy.signal import lfilter

    rng = np.random.default_rng(seed)
    n = int(minutes * 60 * RATE)
    pitch = 120 * (1 + 0.3 * np.sin(2 * np.pi * 0.7 * np.arange(n) / RATE))
    pulses = (np.diff(np.floor(np.cumsum(pitch / RATE)), prepend=0) > 0).astype(float)
    out = np.zeros(n)
    block = int(0.15 * RATE)
    for start in range(0, n - block, block):
        seg = pulses[start : start + block] + 0.02 * rng.standard_normal(block)
        for formant in (rng.uniform(300, 900), rng.uniform(900, 2500)):
            r, w = 0.97, 2 * np.pi * formant / RATE
            seg = lfilter([1 - r], [1, -2 * r * np.cos(w), r * r], seg)
        out[start : start + block] = seg * np.hanning(block)
    return (0.3 * out / np.max(np.abs(out))).astype(np.float32)


def _has_element(name: str) -> bool:
    return (
        subprocess.run(["gst-inspect-1.0", name], capture_output=True, check=False).returncode == 0
    )


def false_detections(name: str, samples: np.ndarray, source: str) -> None:
    start = time.perf_counter()
    found = decode(samples, RATE)
    took = time.perf_counter() - start
    minutes = len(samples) / RATE / 60
    print(
        f"{name:6s} {minutes:5.1f} min: {len(found.index)} codes found (false detections); "
        f"{found.candidates} sync candidates, {found.crc_valid} with a valid CRC, best sync "
        f"correlation {found.best_sync:.3f}; decoded in {took:.1f} s  [{source}]"
    )
    stressed = decode(samples, RATE, sync_threshold=STRESS_SYNC_THRESHOLD)
    print(
        f"       the same with the sync threshold lowered to {STRESS_SYNC_THRESHOLD} (the CRC and "
        f"the bit coherence left to reject): {len(stressed.index)} codes found; "
        f"{stressed.candidates} candidates, {stressed.crc_valid} with a valid CRC, their highest "
        f"bit coherence {stressed.best_rejected_coherence:.2f} (a code needs "
        f"{COHERENCE_THRESHOLD})"
    )


def opus_alignment(work: Path) -> None:
    """Opus's own shift of the codes against how the input lines up with its 20 ms frames."""
    signal = generate(20, RATE, INTERVAL_S)
    print("\nOpus 32k, 20 s of codes behind N samples of silence: the codes' shift in samples")
    for planted in (0, 240, 480, 960, 12345, 23457):
        source, out = work / "align.wav", work / "align-out.wav"
        write_wav(source, delay(signal.samples, planted), RATE)
        gst_channel(source, out, RATE, Codec(32000))
        found = decode(read_wav(out).samples, RATE)
        shift = (found.time_s - signal.time_s[found.index]) * RATE - planted
        print(
            f"  N = {planted:5d}: median {np.median(shift):+.3f}, "
            f"p1 {np.percentile(shift, 1):+.3f}, p99 {np.percentile(shift, 99):+.3f} "
            f"({len(found.index)}/{len(signal.index)} codes)"
        )


def decode_speed(work: Path, minutes: float) -> None:
    """Decode time of a long code file as a ratio to real time, against reading it."""
    signal = generate(minutes * 60, RATE, INTERVAL_S)
    path = work / "long.wav"
    write_wav(path, signal.samples, RATE)
    start = time.perf_counter()
    audio = read_wav(path)
    read_s = time.perf_counter() - start
    start = time.perf_counter()
    found = decode(audio.samples, audio.rate)
    decode_s = time.perf_counter() - start
    seconds = minutes * 60
    print(
        f"\ndecode speed: {seconds:.0f} s of 48 kHz audio ({len(found.index)}/{len(signal.index)}"
        f" codes) in {decode_s:.2f} s = {seconds / decode_s:.0f}x real time; anchor, reading the "
        f"file: {read_s:.3f} s ({seconds / read_s:.0f}x real time); decode/read = "
        f"{decode_s / read_s:.0f}x"
    )


def reference_correlation(work: Path, speech: np.ndarray, minutes: float) -> None:
    """``compare`` on speech behind a planted delay through Opus 32k, without and with 1 %
    loss: latency against the planted delay, disruptions, PESQ, speed against reading."""
    from latlab.signal.correlate import compare, pesq_scores
    from latlab.signal.mos import PESQ_MISSING, pesq_available

    sent = speech[: int(minutes * 60 * RATE)]
    planted = 1800
    source = work / "speech.wav"
    write_wav(source, delay(sent, planted), RATE)
    print(
        f"\nreference correlation: {minutes:g} min of speech behind {planted} samples "
        f"({planted / RATE * 1000:g} ms), Opus 32k"
    )
    for loss in (0.0, 0.01):
        out = work / "speech-out.wav"
        packets = gst_channel(source, out, RATE, Codec(32000, loss))
        start = time.perf_counter()
        received = read_wav(out).samples
        read_s = time.perf_counter() - start
        start = time.perf_counter()
        result = compare(sent, RATE, received, RATE)
        took = time.perf_counter() - start
        latency = result.latency.latency_s[np.isfinite(result.latency.latency_s)] * 1000
        p1, p50, p99 = np.percentile(latency, [1, 50, 99])
        head = int(60 * RATE)
        if pesq_available():  # an optional extra: pip install -e '.[pesq]'
            scores = pesq_scores(sent[:head], received[: head + planted], RATE, planted / RATE)
            pesq = f"PESQ (first minute) nb {scores['nb']:.2f} wb {scores['wb']:.2f}"
        else:
            pesq = PESQ_MISSING
        lost = f"{packets.dropped}/{packets.total} packets lost" if packets else "no loss"
        print(
            f"  {lost}: {len(latency)}/{len(result.latency.time_s)} windows matched, latency "
            f"p1 {p1:.3f} p50 {p50:.3f} p99 {p99:.3f} ms; disruptions "
            f"{result.disruptions.counts() or 'none'}; {pesq}; compare took {took:.1f} s = "
            f"{len(received) / RATE / took:.0f}x real time (reading the file: {read_s:.3f} s)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="code file per channel")
    parser.add_argument("--false-minutes", type=float, default=60.0, help="of speech, of music")
    parser.add_argument(
        "--part", choices=("all", "codes", "compare"), default="all", help="what to run"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-timecode-") as tmp:
        work = Path(tmp)
        speech, speech_source = speech_corpus(work, max(args.false_minutes, args.minutes))
        if args.part in ("all", "codes"):
            codes_bench(work, args, speech, speech_source)
        if args.part in ("all", "compare"):
            reference_correlation(work, speech, args.minutes)


def codes_bench(work: Path, args: argparse.Namespace, speech: np.ndarray, source: str) -> None:
    """Channels, targets, false detections, Opus alignment, decode speed."""
    signal = generate(args.minutes * 60, RATE, INTERVAL_S)
    codes = delay(signal.samples, PLANTED_SAMPLES)
    planted_s = signal.time_s + PLANTED_SAMPLES / RATE
    print(
        f"{len(signal.index)} codes every {INTERVAL_S * 1000:.0f} ms, planted delay "
        f"{PLANTED_SAMPLES} samples at {RATE} Hz; GStreamer opusenc/opusdec, audioresample"
    )
    results = [run_condition(cond, codes, speech, work, planted_s) for cond in CONDITIONS]
    print_conditions(results, len(signal.index))
    by_name = {r["name"]: r for r in results}
    opus32 = by_name["opus 32k"]["p99"] * 1000
    lossy = min(by_name["opus 32k, loss 1%"]["detected"], by_name["opus 16k, loss 1%"]["detected"])
    print(
        f"target: p99 timing error <= {TARGET_P99_MS} ms through Opus 32 kbit/s: "
        f"{opus32:.4f} ms -> {'met' if opus32 <= TARGET_P99_MS else 'NOT met'}"
    )
    print(
        f"target: >= {TARGET_DETECTED_AT_1PCT_LOSS * 100:.0f}% detected at 1% loss: "
        f"{lossy * 100:.2f}% (worse of 16k/32k) -> "
        f"{'met' if lossy >= TARGET_DETECTED_AT_1PCT_LOSS else 'NOT met'}"
    )
    print("\nfalse detections (no codes in the audio; target: none in an hour of each):")
    false_detections("speech", speech[: int(args.false_minutes * 60 * RATE)], source)
    music, music_source = music_corpus(work, args.false_minutes)
    false_detections("music", music, music_source)
    opus_alignment(work)
    decode_speed(work, args.minutes)


if __name__ == "__main__":
    main()
