"""Time-coded test audio: codes written by ``latlab signal generate`` are found by
``latlab signal decode`` at their planted instants through real GStreamer codecs and
resamplers; bad recordings give one line naming the file and what was found."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from scipy.io import wavfile

from latlab.signal.channels import Codec, delay, gst_channel
from latlab.signal.timecode import decode, generate
from latlab.signal.wavio import read_wav, write_wav
from tests.conftest import latlab

RATE = 48000
PLANTED = 4321
"""Samples of silence put before the codes: the delay the decoder must find."""
TOLERANCE_S = 1e-4

needs_gst = pytest.mark.skipif(shutil.which("gst-launch-1.0") is None, reason="no GStreamer")


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def test_audio(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """20 s of codes written by the CLI, and its codes.json."""
    out = tmp_path_factory.mktemp("signal") / "test.wav"
    result = latlab("signal", "generate", "--out", str(out), "--duration", "20")
    assert result.returncode == 0, result.stderr
    return out, json.loads(out.with_name("test.wav.codes.json").read_text())


@pytest.fixture(scope="module")
def delayed(test_audio: tuple[Path, dict]) -> Path:
    """The test audio behind PLANTED samples of silence."""
    path, _ = test_audio
    audio = read_wav(path)
    out = path.with_name("delayed.wav")
    write_wav(out, delay(audio.samples, PLANTED), audio.rate)
    return out


def decoded_json(path: Path) -> dict:
    result = latlab("signal", "decode", str(path), "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def timing_errors(sent: dict, received: dict, planted_s: float) -> tuple[np.ndarray, int]:
    """Received minus (sent + planted) per code found, and how many sent codes were missed."""
    sent_time = {c["index"]: c["time_s"] for c in sent["codes"]}
    errors = [c["time_s"] - sent_time[c["index"]] - planted_s for c in received["codes"]]
    return np.array(errors), len(sent_time) - len({c["index"] for c in received["codes"]})


def test_generated_codes_decode_at_their_instants(test_audio: tuple[Path, dict]) -> None:
    path, sent = test_audio
    assert sent["sample_rate"] == RATE and len(sent["codes"]) == 98
    assert [c["index"] for c in sent["codes"]] == list(range(98))
    assert sent["codes"][1]["time_s"] - sent["codes"][0]["time_s"] == pytest.approx(0.2)
    received = decoded_json(path)
    errors, missed = timing_errors(sent, received, 0.0)
    assert missed == 0 and np.max(np.abs(errors)) < 1e-6
    assert min(c["confidence"] for c in received["codes"]) > 0.99


@needs_gst
@pytest.mark.parametrize("bitrate", [32000, 16000])
def test_planted_delay_through_opus(delayed: Path, test_audio: tuple[Path, dict], bitrate: int):
    """GStreamer opusenc/opusdec: every code found, at the planted delay within 0.1 ms."""
    out = delayed.with_name(f"opus{bitrate}.wav")
    gst_channel(delayed, out, RATE, Codec(bitrate))
    errors, missed = timing_errors(test_audio[1], decoded_json(out), PLANTED / RATE)
    assert missed == 0
    assert np.max(np.abs(errors)) <= TOLERANCE_S, errors


@needs_gst
def test_latency_per_code_from_the_codes_file(delayed: Path, test_audio: tuple[Path, dict]) -> None:
    """decode --codes: every code's latency is the planted delay (within 0.1 ms)."""
    out = delayed.with_name("opus-latency.wav")
    gst_channel(delayed, out, RATE, Codec(32000))
    codes_file = test_audio[0].with_name("test.wav.codes.json")
    result = latlab("signal", "decode", str(out), "--json", "--codes", str(codes_file))
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    latencies = np.array([code["latency_ms"] for code in document["codes"]])
    assert len(latencies) == document["sent_codes"] == 98
    assert np.max(np.abs(latencies - PLANTED / RATE * 1000)) <= TOLERANCE_S * 1000
    assert document["latency_ms"]["p50"] == pytest.approx(PLANTED / RATE * 1000, abs=0.1)
    table = latlab("signal", "decode", str(out), "--codes", str(codes_file))
    assert "latency against" in table.stdout and "98 of 98 sent codes" in table.stdout


@needs_gst
@pytest.mark.parametrize("rate", [44100, 16000])
def test_resampled_recording(delayed: Path, test_audio: tuple[Path, dict], rate: int) -> None:
    """A recording at another rate (audioresample after Opus): times in seconds still match."""
    out = delayed.with_name(f"opus-{rate}.wav")
    gst_channel(delayed, out, rate, Codec(32000))
    received = decoded_json(out)
    assert received["sample_rate"] == rate
    errors, missed = timing_errors(test_audio[1], received, PLANTED / RATE)
    assert missed == 0
    assert np.max(np.abs(errors)) <= TOLERANCE_S, errors


@needs_gst
def test_lost_packets_leave_no_gap_in_the_sequence(
    delayed: Path, test_audio: tuple[Path, dict]
) -> None:
    """5 % of Opus packets dropped and concealed: codes whose bits broke are inferred from
    their neighbours, none is wrong, and times stay within 0.1 ms."""
    out = delayed.with_name("loss.wav")
    packets = gst_channel(delayed, out, RATE, Codec(32000, loss=0.05))
    assert packets is not None and packets.dropped >= 5, packets
    received = decoded_json(out)
    errors, missed = timing_errors(test_audio[1], received, PLANTED / RATE)
    assert missed <= 2
    assert np.max(np.abs(errors)) <= TOLERANCE_S, errors


def test_sub_sample_delay() -> None:
    """A delay of 0.37 samples (applied as a linear phase) is measured to 0.02 samples."""
    signal = generate(5, RATE, 0.2)
    spectrum = np.fft.rfft(signal.samples)
    freqs = np.fft.rfftfreq(len(signal.samples))
    shifted = np.fft.irfft(spectrum * np.exp(-2j * np.pi * freqs * 0.37), len(signal.samples))
    found = decode(shifted.astype(np.float32), RATE)
    assert np.array_equal(found.index, signal.index)
    error_samples = (found.time_s - signal.time_s) * RATE - 0.37
    assert np.max(np.abs(error_samples)) < 0.02


def test_codes_mixed_into_other_audio(tmp_path: Path) -> None:
    """--mix: codes under a tone with vibrato (louder than the codes, below their band) and
    a tone inside their band (10 dB below them) are all found."""
    t = np.arange(10 * 16000) / 16000
    tones = 0.3 * np.sin(2 * np.pi * (220 * t - 30 / np.pi * np.cos(np.pi * t)))
    tones += 0.03 * np.sin(2 * np.pi * 1320 * t)
    mix = tmp_path / "tones.wav"
    write_wav(mix, tones.astype(np.float32), 16000)
    out = tmp_path / "mixed.wav"
    result = latlab("signal", "generate", "--out", str(out), "--duration", "10", "--mix", str(mix))
    assert result.returncode == 0, result.stderr
    sent = json.loads(out.with_name("mixed.wav.codes.json").read_text())
    _, missed = timing_errors(sent, decoded_json(out), 0.0)
    assert missed == 0


def test_table_output(test_audio: tuple[Path, dict]) -> None:
    result = latlab("signal", "decode", str(test_audio[0]))
    assert result.returncode == 0, result.stderr
    assert "98 codes in 20.0 s at 48000 Hz" in result.stdout and "0.500000" in result.stdout


def test_recording_without_codes(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    path = tmp_path / "speechless.wav"
    write_wav(path, (0.1 * rng.standard_normal(3 * RATE)).astype(np.float32), RATE)
    line = one_line_error(latlab("signal", "decode", str(path)))
    assert str(path) in line and "no time codes in 3.0 s" in line and "best sync" in line


def test_silent_recording(tmp_path: Path) -> None:
    path = tmp_path / "silent.wav"
    write_wav(path, np.zeros(2 * RATE, dtype=np.float32), RATE)
    line = one_line_error(latlab("signal", "decode", str(path)))
    assert str(path) in line and "silent (all samples are zero over 2.0 s)" in line


def test_clipped_recording(tmp_path: Path, test_audio: tuple[Path, dict]) -> None:
    rate, data = wavfile.read(test_audio[0])
    path = tmp_path / "clipped.wav"
    wavfile.write(path, rate, np.clip(data.astype(np.int32) * 8, -32768, 32767).astype(np.int16))
    line = one_line_error(latlab("signal", "decode", str(path)))
    assert str(path) in line and "clipped (" in line and "98 codes found anyway" in line
    assert latlab("signal", "decode", str(path), "--allow-clipped").returncode == 0


def test_wrong_sample_rate_in_header(tmp_path: Path, test_audio: tuple[Path, dict]) -> None:
    """A 48 kHz recording labelled 44.1 kHz: the codes do not fit; the message says which
    rate they fit."""
    _, data = wavfile.read(test_audio[0])
    path = tmp_path / "labelled-44100.wav"
    wavfile.write(path, 44100, data)
    line = one_line_error(latlab("signal", "decode", str(path)))
    assert str(path) in line and "the codes fit 48000 Hz" in line


def test_unsupported_rate_and_not_a_wav(tmp_path: Path) -> None:
    low = tmp_path / "low.wav"
    wavfile.write(low, 4000, np.zeros(8000, dtype=np.int16))
    line = one_line_error(latlab("signal", "decode", str(low)))
    assert str(low) in line and "4000 Hz is below 8000 Hz" in line
    text = tmp_path / "notes.wav"
    text.write_text("not audio\n")
    line = one_line_error(latlab("signal", "decode", str(text)))
    assert str(text) in line and "not a readable WAV file" in line
    short = tmp_path / "short.wav"
    write_wav(short, np.full(480, 0.1, dtype=np.float32), RATE)
    assert "shorter than one code" in one_line_error(latlab("signal", "decode", str(short)))


def test_interval_shorter_than_a_code(tmp_path: Path) -> None:
    out = tmp_path / "x.wav"
    line = one_line_error(latlab("signal", "generate", "--out", str(out), "--interval-ms", "50"))
    assert "interval 50 ms is shorter than one code" in line and not out.exists()


def speech_like(seconds: float, rate: int, seed: int = 1) -> np.ndarray:
    """Voiced syllables: a glottal pulse train with gliding pitch through two formants that
    change every 250 ms; no long pauses."""
    from scipy.signal import lfilter

    rng = np.random.default_rng(seed)
    n = int(seconds * rate)
    t = np.arange(n) / rate
    pitch = 140 + 40 * np.sin(2 * np.pi * 0.3 * t) + 15 * np.sin(2 * np.pi * 3.1 * t)
    pulses = (np.diff(np.floor(np.cumsum(pitch / rate)), prepend=0) > 0).astype(float)
    out = np.zeros(n)
    syllable = int(0.25 * rate)
    for start in range(0, n, syllable):
        seg = pulses[start : start + syllable]
        seg = seg + 0.01 * rng.standard_normal(len(seg))
        for formant in (rng.uniform(300, 900), rng.uniform(1000, 2600)):
            r, w = 0.96, 2 * np.pi * formant / rate
            seg = lfilter([1 - r], [1, -2 * r * np.cos(w), r * r], seg)
        out[start : start + len(seg)] = seg * np.hanning(len(seg)) ** 0.5
    return (0.3 * out / np.max(np.abs(out))).astype(np.float32)


def test_compare_finds_latency_steps_and_dropouts(tmp_path: Path) -> None:
    """Received = sent 30 ms later at half the level, 100 ms lost at 3 s, 10 ms of silence
    inserted at 5 s, 5 ms removed at 8 s: the latency series and the events say so."""
    sent = speech_like(12, RATE)
    received = delay(sent, int(0.030 * RATE)) * 0.5
    received[int(3.0 * RATE) : int(3.1 * RATE)] = 0
    at = int(5.0 * RATE)
    received = np.concatenate([received[:at], np.zeros(int(0.01 * RATE)), received[at:]])
    at = int(8.0 * RATE)
    received = np.concatenate([received[:at], received[at + int(0.005 * RATE) :]])
    write_wav(tmp_path / "sent.wav", sent, RATE)
    write_wav(tmp_path / "received.wav", received.astype(np.float32), RATE)
    result = latlab(
        "signal", "compare", str(tmp_path / "sent.wav"), str(tmp_path / "received.wav"), "--json"
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    series = {round(w["time_s"], 2): w["latency_ms"] for w in document["series"]}
    assert series[2.0] == pytest.approx(30, abs=0.02)
    assert series[6.5] == pytest.approx(40, abs=0.02)
    assert series[10.0] == pytest.approx(35, abs=0.02)
    events = document["disruptions"]["events"]
    steps = [e for e in events if e["kind"] in ("inserted", "removed")]
    assert [e["kind"] for e in steps] == ["inserted", "removed"]
    assert steps[0]["start_s"] == pytest.approx(5.0, abs=0.02)
    assert steps[0]["size_ms"] == pytest.approx(10, abs=0.05)
    assert steps[1]["start_s"] == pytest.approx(8.0, abs=0.02)
    assert steps[1]["size_ms"] == pytest.approx(-5, abs=0.05)
    lost = [e for e in events if e["kind"] == "dropout" and abs(e["start_s"] - 3.0) < 0.02]
    assert len(lost) == 1 and lost[0]["duration_s"] >= 0.08


@needs_gst
@pytest.mark.skipif(
    importlib.util.find_spec("pesq") is None, reason="PESQ is optional: pip install -e '.[pesq]'"
)
def test_pesq_through_opus(tmp_path: Path) -> None:
    """PESQ (narrow- and wideband): a copy scores near the top, Opus at 16 kbit/s lower."""
    from latlab.signal.correlate import pesq_scores

    sent = speech_like(10, RATE)
    write_wav(tmp_path / "sent.wav", sent, RATE)
    gst_channel(tmp_path / "sent.wav", tmp_path / "opus.wav", RATE, Codec(16000))
    coded = read_wav(tmp_path / "opus.wav").samples
    copy, opus = pesq_scores(sent, sent, RATE, 0.0), pesq_scores(sent, coded, RATE, 0.0)
    for mode in ("nb", "wb"):
        assert copy[mode] > 4.4
        assert 1.0 < opus[mode] < copy[mode] - 0.1


def test_compare_without_a_match(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    write_wav(tmp_path / "sent.wav", speech_like(4, RATE), RATE)
    noise = tmp_path / "noise.wav"
    write_wav(noise, (0.1 * rng.standard_normal(4 * RATE)).astype(np.float32), RATE)
    line = one_line_error(latlab("signal", "compare", str(tmp_path / "sent.wav"), str(noise)))
    assert str(noise) in line and "matches the sent audio nowhere" in line
