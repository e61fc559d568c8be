"""Synthetic channels for testing time codes: real GStreamer codecs and resamplers, plus
gain, noise and planted delay applied to sample arrays.

``gst_channel`` runs ``gst-launch-1.0``: WAV in, optionally Opus at a bitrate
with packets dropped between encoder and decoder (``identity drop-probability``;
``opusdec plc=true`` conceals them and keeps the timeline), resampled to an
output rate by ``audioresample``, WAV out.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.signal import butter, sosfilt

from latlab.signal.errors import SignalError


@dataclass(frozen=True)
class Codec:
    """Opus through GStreamer: bitrate in bit/s and the share of packets dropped."""

    bitrate: int
    loss: float = 0.0
    frame_ms: int = 20


@dataclass(frozen=True)
class Packets:
    """Opus packets that reached the dropper and how many it dropped."""

    total: int
    dropped: int


def gst_channel(
    src: Path, dst: Path, rate_out: int, codec: Codec | None = None, timeout_s: float = 600
) -> Packets | None:
    """Pass a WAV file through GStreamer (Opus if ``codec``), writing S16 mono at ``rate_out``;
    with packet loss, the packets counted from the dropper's messages (``identity
    silent=false`` under ``gst-launch-1.0 -v``)."""
    chain = ["filesrc", f"location={src}", "!", "wavparse", "!", "audioconvert", "!"]
    chain += ["audioresample", "!"]
    if codec is not None:
        chain += ["audio/x-raw,rate=48000,channels=1", "!"]
        chain += ["opusenc", f"bitrate={codec.bitrate}", f"frame-size={codec.frame_ms}", "!"]
        if codec.loss > 0:
            chain += ["identity", f"drop-probability={codec.loss}", "silent=false", "!"]
        chain += ["opusdec", "plc=true", "!", "audioconvert", "!", "audioresample", "!"]
    chain += [f"audio/x-raw,format=S16LE,rate={rate_out},channels=1", "!", "wavenc", "!"]
    chain += ["filesink", f"location={dst}"]
    lossy = codec is not None and codec.loss > 0
    result = subprocess.run(
        ["gst-launch-1.0", "-v" if lossy else "-q", *chain],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if result.returncode != 0 or not dst.is_file():
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SignalError(f"gst-launch-1.0 failed for {src}: {tail[0]}")
    if not lossy:
        return None
    passed = result.stdout.count(": last-message = chain ")
    dropped = result.stdout.count(": last-message = dropping ")
    return Packets(passed + dropped, dropped)


def delay(samples: np.ndarray, count: int) -> np.ndarray:
    """``count`` samples of silence, then the samples."""
    return np.concatenate([np.zeros(count, dtype=samples.dtype), samples])


def gain_steps(samples: np.ndarray, rate: int, levels_db: tuple[float, ...], step_s: float):
    """Gain switching through ``levels_db`` every ``step_s``, with 10 ms linear ramps (an AGC)."""
    step = max(1, round(step_s * rate))
    which = (np.arange(len(samples)) // step) % len(levels_db)
    gains = 10.0 ** (np.asarray(levels_db)[which] / 20.0)
    ramp = max(1, round(0.01 * rate))
    smoothed = np.convolve(gains, np.ones(ramp) / ramp, mode="same")
    return (samples * smoothed).astype(np.float32)


def add_noise(
    samples: np.ndarray,
    rate: int,
    snr_db: float,
    seed: int,
    band_hz: tuple[float, float] | None = None,
    active: np.ndarray | None = None,
) -> np.ndarray:
    """Gaussian noise at ``snr_db`` below the signal's power (over ``active`` samples if given),
    white or restricted to ``band_hz``."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal(len(samples))
    if band_hz is not None:
        noise = sosfilt(butter(8, band_hz, "bandpass", fs=rate, output="sos"), noise)
    reference = samples[active] if active is not None else samples
    power = float(np.mean(reference.astype(np.float64) ** 2))
    noise *= np.sqrt(power / 10.0 ** (snr_db / 10.0) / np.mean(noise**2))
    return (samples + noise).astype(np.float32)
