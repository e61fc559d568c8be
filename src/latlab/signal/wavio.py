"""Reading and writing the WAV files of ``latlab signal``, with one-line errors for bad files."""

from __future__ import annotations

import struct
import warnings
from dataclasses import dataclass
from math import gcd
from pathlib import Path

import numpy as np

from latlab.signal.errors import SignalError

MIN_RATE = 8000
"""Lowest sample rate accepted: the codes' band reaches 3.4 kHz."""


@dataclass(frozen=True)
class Audio:
    """Mono audio as float32 in [-1, 1] with its sample rate and where it came from."""

    samples: np.ndarray
    rate: int
    path: Path
    full_scale_fraction: float
    """Share of samples at the format's full scale (clipping), before any conversion."""

    @property
    def duration_s(self) -> float:
        return len(self.samples) / self.rate


def _to_float(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Samples as float32 in [-1, 1], and a mask of samples at the format's full scale."""
    if data.dtype == np.uint8:
        ints = data.astype(np.int16) - 128
        return ints.astype(np.float32) / 128.0, (ints <= -128) | (ints >= 127)
    if np.issubdtype(data.dtype, np.integer):
        info = np.iinfo(data.dtype)
        return data.astype(np.float32) / -float(info.min), (data <= info.min) | (data >= info.max)
    floats = data.astype(np.float32)
    return floats, np.abs(floats) >= 0.9999


def read_wav(path: Path, channel: int = 0) -> Audio:
    """One channel of a WAV file; a missing or unreadable file or a bad channel: SignalError."""
    from scipy.io import wavfile  # imported when used: scipy.io takes 0.15 s to load

    if not path.is_file():
        raise SignalError(f"{path}: no such file")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", wavfile.WavFileWarning)
            rate, data = wavfile.read(path, mmap=False)
    except (ValueError, EOFError, OSError, struct.error) as exc:
        raise SignalError(f"{path}: not a readable WAV file ({exc})") from None
    except Exception as exc:  # scipy's reader on a damaged file (e.g. no fmt chunk)
        raise SignalError(f"{path}: not a readable WAV file ({type(exc).__name__})") from None
    if rate < MIN_RATE:
        raise SignalError(
            f"{path}: sample rate {rate} Hz is below {MIN_RATE} Hz; the time codes reach 3.4 kHz"
        )
    if data.ndim == 1:
        data = data[:, None]
    if not 0 <= channel < data.shape[1]:
        raise SignalError(f"{path}: has {data.shape[1]} channel(s), no channel {channel}")
    samples, full_scale = _to_float(data[:, channel])
    fraction = float(full_scale.mean()) if len(samples) else 0.0
    return Audio(samples, int(rate), path, fraction)


def write_wav(path: Path, samples: np.ndarray, rate: int) -> None:
    """Write mono float samples in [-1, 1] as 16-bit PCM."""
    from scipy.io import wavfile

    ints = np.clip(np.round(samples * 32767.0), -32768, 32767).astype(np.int16)
    wavfile.write(path, rate, ints)


def resample(samples: np.ndarray, rate_from: int, rate_to: int) -> np.ndarray:
    """Band-limited polyphase resampling between two integer rates."""
    from scipy.signal import resample_poly  # imported when used: scipy.signal takes 0.7 s

    if rate_from == rate_to:
        return samples
    common = gcd(rate_from, rate_to)
    return resample_poly(samples, rate_to // common, rate_from // common).astype(np.float32)
