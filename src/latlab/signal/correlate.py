"""Reference correlation: the sent audio against the received, without time codes.

* **Latency over time**: the received audio in windows (1 s every 250 ms by
  default); each window's lag against the sent audio is the peak of their
  normalised cross-correlation, searched over ``0..max_latency`` on an 8 kHz
  copy, then refined at the recordings' rate (parabola through the peak).
* **Disruptions** located in time and counted: latency *steps* between
  consecutive windows (samples inserted: latency grows; removed: it shrinks;
  a time-stretching jitter buffer shows up here), *dropouts* (10 ms frames,
  aligned by the latency, where the sent audio is active and the received
  holds 30 dB less than the recording's usual gain) and *distortions* (frames
  whose aligned correlation falls below 0.5 and whose level is more than 6 dB
  off the usual gain: concealment, clicks, glitches; a waveform change alone is
  not counted, since codecs code unvoiced speech as shaped noise).
* **PESQ** (ITU-T P.862 through the ``pesq`` package), narrowband (8 kHz) and
  wideband (16 kHz), per aligned chunk of 10 s, when the audio is speech.

Everything is columnar: windows are correlated in batches of FFTs, frames
are compared as matrices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import fft as sfft

from latlab.signal.errors import SignalError
from latlab.signal.wavio import resample

COARSE_RATE = 8000
FRAME_S = 0.01
DROPOUT_DB = -30.0
DISTORTED_BELOW = 0.5
DISTORTED_LEVEL_DB = 6.0
"""A distorted frame's level also differs this much from the usual gain: a codec that
codes unvoiced speech as shaped noise changes the waveform, not the level."""
STEP_MS = 0.25
"""Latency change between consecutive windows that counts as a step."""
SILENT_RMS = 10 ** (-60 / 20)
MIN_CORRELATION = 0.3
"""Windows whose best correlation stays below this have no latency (NaN)."""
PESQ_CHUNK_S = 10.0
_NEIGHBOURS = 3


@dataclass(frozen=True)
class LatencySeries:
    """Latency per window of the received audio (NaN where either side was silent)."""

    time_s: np.ndarray
    """Centre of each window in the received audio."""
    latency_s: np.ndarray
    correlation: np.ndarray


@dataclass(frozen=True)
class Disruptions:
    """Disruptions, columnar: kind (``inserted``, ``removed``, ``dropout``, ``distorted``),
    where they start in the received audio, how long they last, and for steps their size."""

    kind: np.ndarray
    start_s: np.ndarray
    duration_s: np.ndarray
    size_ms: np.ndarray

    def counts(self) -> dict[str, int]:
        kinds, counts = np.unique(self.kind, return_counts=True)
        return {str(k): int(c) for k, c in zip(kinds, counts, strict=True)}


@dataclass(frozen=True)
class Comparison:
    """Everything ``compare`` measured."""

    rate: int
    latency: LatencySeries
    disruptions: Disruptions
    pesq: dict[str, float | list[float]] | None


def _windows(signal: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    """Rows of ``signal[start : start + length]`` (zeros outside the signal)."""
    index = starts[:, None] + np.arange(length)[None, :]
    inside = (index >= 0) & (index < len(signal))
    return np.where(inside, signal[np.clip(index, 0, max(len(signal) - 1, 0))], np.float32(0))


def _best_lags(
    received: np.ndarray,
    sent: np.ndarray,
    starts: np.ndarray,
    length: int,
    lag_lo: np.ndarray,
    span: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Per window: the lag in ``lag_lo .. lag_lo + span`` with the highest normalised
    correlation of ``received[start:start+length]`` with ``sent[start-lag : ...]``, with
    a parabola's fraction, and that correlation."""
    n_fft = sfft.next_fast_len(length + span + length, real=True)
    lags_out = np.empty(len(starts))
    peaks = np.empty(len(starts))
    for batch in np.array_split(np.arange(len(starts)), max(1, len(starts) // 32)):
        if len(batch) == 0:
            continue
        rec = _windows(received, starts[batch], length)
        ref = _windows(sent, starts[batch] - lag_lo[batch] - span, length + span)
        spectrum = sfft.rfft(ref, n_fft, axis=1) * np.conj(sfft.rfft(rec, n_fft, axis=1))
        corr = sfft.irfft(spectrum, n_fft, axis=1)[:, : span + 1]  # corr[j]: lag = lo + span - j
        squares = np.concatenate([np.zeros((len(batch), 1)), np.cumsum(ref**2, axis=1)], axis=1)
        ref_energy = squares[:, length : length + span + 1] - squares[:, : span + 1]
        rec_energy = np.sum(rec.astype(np.float64) ** 2, axis=1)[:, None]
        floor = length * SILENT_RMS**2  # silence (and FFT rounding in it) correlates with nothing
        audible = (ref_energy > floor) & (rec_energy > floor)
        rho = np.where(audible, corr / np.sqrt(np.maximum(ref_energy * rec_energy, floor**2)), 0.0)
        best = np.clip(np.argmax(rho, axis=1), 1, span - 1)
        rows = np.arange(len(batch))
        left, mid, right = (rho[rows, best + k] for k in (-1, 0, 1))
        curvature = left - 2 * mid + right
        concave = curvature < 0
        shift = np.where(concave, 0.5 * (left - right) / np.where(concave, curvature, -1), 0)
        lags_out[batch] = lag_lo[batch] + span - (best + np.clip(shift, -1, 1))
        peaks[batch] = mid
    return lags_out, peaks


def latency_series(
    sent: np.ndarray,
    received: np.ndarray,
    rate: int,
    window_s: float = 1.0,
    hop_s: float = 0.25,
    max_latency_s: float = 2.0,
) -> LatencySeries:
    """Latency of each window of ``received`` against ``sent`` (same rate)."""
    coarse_sent = resample(sent, rate, COARSE_RATE)
    coarse_received = resample(received, rate, COARSE_RATE)
    hop = max(1, round(hop_s * COARSE_RATE))
    length = round(window_s * COARSE_RATE)
    starts = np.arange(0, max(1, len(coarse_received) - length + 1), hop)
    span = round(max_latency_s * COARSE_RATE)
    coarse, _ = _best_lags(
        coarse_received, coarse_sent, starts, length, np.zeros(len(starts), np.int64), span
    )
    scale = rate / COARSE_RATE
    fine_span = int(np.ceil(4 * scale)) + 4
    fine_lo = np.round(coarse * scale).astype(np.int64) - fine_span // 2
    fine_starts = np.round(starts * scale).astype(np.int64)
    fine_length = round(window_s * rate)
    lags, peaks = _best_lags(received, sent, fine_starts, fine_length, fine_lo, fine_span)
    rec_rms = np.sqrt(np.mean(_windows(received, fine_starts, fine_length) ** 2, axis=1))
    valid = (rec_rms > SILENT_RMS) & (peaks >= MIN_CORRELATION)
    latency = _without_isolated(np.where(valid, lags / rate, np.nan))
    return LatencySeries((fine_starts + fine_length / 2) / rate, latency, np.where(valid, peaks, 0))


def _without_isolated(latency: np.ndarray) -> np.ndarray:
    """NaN for a window whose latency differs by more than a step from both valid
    neighbours while they agree with each other (a lost packet's concealment or a
    repeated sound matched elsewhere); a real step has one side that agrees."""
    valid = np.flatnonzero(np.isfinite(latency))
    if len(valid) < 3:
        return latency
    values = latency[valid]
    prev, this, succ = values[:-2], values[1:-1], values[2:]
    step = STEP_MS / 1000
    isolated = (np.abs(this - prev) > step) & (np.abs(this - succ) > step)
    isolated &= np.abs(prev - succ) <= step
    out = latency.copy()
    out[valid[1:-1][isolated]] = np.nan
    return out


def _runs(flags: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start index and length of each run of True."""
    edges = np.diff(np.concatenate([[0], flags.astype(np.int8), [0]]))
    starts = np.flatnonzero(edges == 1)
    return starts, np.flatnonzero(edges == -1) - starts


def _runs_across(flags: np.ndarray, bridge: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Runs of ``flags`` joined across ``bridge`` frames between them (a dropout goes on
    through the pause between two syllables); each run starts and ends on a flagged frame."""
    starts, lengths = _runs(flags | bridge)
    flagged = np.flatnonzero(flags)
    if len(flagged) == 0:
        return starts[:0], lengths[:0]
    first = flagged[np.minimum(np.searchsorted(flagged, starts), len(flagged) - 1)]
    last = flagged[np.maximum(np.searchsorted(flagged, starts + lengths) - 1, 0)]
    keep = (first >= starts) & (first < starts + lengths)
    return first[keep], last[keep] - first[keep] + 1


def _frame_match(
    sent: np.ndarray, received: np.ndarray, frame: int, lags: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per frame of ``received`` (lag per frame, in samples): its energy, the energy of the
    sent frame it aligns with, and their normalised correlation; in chunks of frames.
    (``find_disruptions`` scores two silent frames as a match, one silent as none.)"""
    n_frames = len(lags)
    out = np.zeros((3, n_frames))
    for chunk in np.array_split(np.arange(n_frames), max(1, n_frames // 8192)):
        if len(chunk) == 0:
            continue
        rec = received[chunk[0] * frame : (chunk[-1] + 1) * frame].reshape(len(chunk), frame)
        rec = rec.astype(np.float64)
        ref = _windows(sent, chunk * frame - lags[chunk], frame).astype(np.float64)
        rec_energy, ref_energy = np.sum(rec**2, axis=1), np.sum(ref**2, axis=1)
        corr = np.sum(rec * ref, axis=1) / np.sqrt(np.maximum(rec_energy * ref_energy, 1e-30))
        out[:, chunk] = rec_energy, ref_energy, corr
    return out[0], out[1], out[2]


def find_disruptions(
    sent: np.ndarray, received: np.ndarray, rate: int, latency: LatencySeries
) -> Disruptions:
    """Steps in the latency, dropouts and distorted frames (see the module's docstring).

    Each 10 ms frame is aligned by the best of the latencies of the windows centred
    near it (``_NEIGHBOURS`` either side), so a step is located to the frame where the
    best one changes."""
    valid = np.isfinite(latency.latency_s)
    times, lat = latency.time_s[valid], np.round(latency.latency_s[valid] * rate)
    frame = round(FRAME_S * rate)
    n_frames = len(received) // frame
    if len(times) == 0 or n_frames == 0:
        raise SignalError("the received audio matches the sent audio nowhere")
    centres = (np.arange(n_frames) + 0.5) * frame / rate
    after = np.searchsorted(times, centres)
    best = np.full((3, n_frames), -np.inf)
    lag = np.zeros(n_frames)
    for offset in range(-_NEIGHBOURS, _NEIGHBOURS):
        candidate = lat[np.clip(after + offset, 0, len(times) - 1)]
        match = np.stack(_frame_match(sent, received, frame, candidate.astype(np.int64)))
        silent = match[:2] <= frame * SILENT_RMS**2
        match[2] = np.where(silent[0] | silent[1], silent[0] & silent[1], match[2])
        better = match[2] > best[2]
        best[:, better], lag[better] = match[:, better], candidate[better]
    rec_energy, ref_energy, corr = best
    active = ref_energy > frame * SILENT_RMS**2 * 100
    ratio = rec_energy / np.maximum(ref_energy, 1e-30)
    usual = np.median(ratio[active]) if active.any() else 1.0
    dropout = active & (ratio < usual * 10 ** (DROPOUT_DB / 10))
    off_level = np.abs(10 * np.log10(np.maximum(ratio / usual, 1e-30))) > DISTORTED_LEVEL_DB
    distorted = active & ~dropout & (corr < DISTORTED_BELOW) & off_level
    good = np.flatnonzero(active & ~dropout & ~distorted)
    change = np.diff(lag[good]) / rate * 1000
    step = np.abs(change) > STEP_MS
    kinds = [np.where(change[step] > 0, "inserted", "removed")]
    starts_s = [good[1:][step] * frame / rate]
    durations, sizes = [np.zeros(int(step.sum()))], [change[step]]
    quiet = ~active & (rec_energy / usual <= frame * SILENT_RMS**2 * 100)
    for name, flags in (("dropout", dropout), ("distorted", distorted)):
        run_start, run_length = _runs_across(flags, quiet)
        kinds.append(np.full(len(run_start), name))
        starts_s.append(run_start * frame / rate)
        durations.append(run_length * frame / rate)
        sizes.append(np.full(len(run_start), np.nan))
    order = np.argsort(np.concatenate(starts_s), kind="stable")
    return Disruptions(
        np.concatenate(kinds).astype(str)[order],
        np.concatenate(starts_s)[order],
        np.concatenate(durations)[order],
        np.concatenate(sizes)[order],
    )


def pesq_scores(
    sent: np.ndarray, received: np.ndarray, rate: int, latency_s: float
) -> dict[str, float | list[float]]:
    """PESQ MOS-LQO, narrowband and wideband, per 10 s chunk aligned by ``latency_s``."""
    try:
        from pesq import NoUtterancesError, PesqError, pesq
    except ImportError as exc:
        from latlab.signal.mos import PESQ_MISSING

        raise SignalError(f"{PESQ_MISSING} ({exc})") from None

    shift = max(0, round(latency_s * rate))
    aligned = received[shift:]
    length = min(len(sent), len(aligned))
    scores: dict[str, float | list[float]] = {}
    for mode, mode_rate in (("nb", 8000), ("wb", 16000)):
        ref = resample(sent[:length], rate, mode_rate).astype(np.float64)
        deg = resample(aligned[:length], rate, mode_rate).astype(np.float64)
        chunk = round(PESQ_CHUNK_S * mode_rate)
        values: list[float] = []
        for start in range(0, max(1, len(ref) - chunk // 2), chunk):
            try:
                values.append(
                    float(
                        pesq(
                            mode_rate, ref[start : start + chunk], deg[start : start + chunk], mode
                        )
                    )
                )
            except (NoUtterancesError, PesqError):
                values.append(float("nan"))
        scores[f"{mode}_chunks"] = values
        finite = [v for v in values if np.isfinite(v)]
        scores[mode] = float(np.mean(finite)) if finite else float("nan")
    return scores


def compare(
    sent: np.ndarray,
    sent_rate: int,
    received: np.ndarray,
    rate: int,
    *,
    window_s: float = 1.0,
    hop_s: float = 0.25,
    max_latency_s: float = 2.0,
    with_pesq: bool = False,
) -> Comparison:
    """Latency over time, disruptions and (optionally) PESQ of ``received`` against ``sent``."""
    if len(received) < window_s * rate or len(sent) < window_s * sent_rate:
        raise SignalError(f"both recordings must be longer than the {window_s:g} s window")
    sent = resample(sent, sent_rate, rate)
    latency = latency_series(sent, received, rate, window_s, hop_s, max_latency_s)
    disruptions = find_disruptions(sent, received, rate, latency)
    scores = None
    if with_pesq:
        finite = latency.latency_s[np.isfinite(latency.latency_s)]
        scores = pesq_scores(sent, received, rate, float(np.median(finite)) if len(finite) else 0)
    return Comparison(rate, latency, disruptions, scores)
