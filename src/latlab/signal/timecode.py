"""Time-coded test audio: the code design, its waveforms at any sample rate, generation, decoding.

Each code is one *frame*: a synchronisation pattern (a pseudo-noise chip
sequence) followed by the code's index and a CRC, one data bit per few chips,
all BPSK-modulated on a carrier with raised-cosine chips so that the frame
occupies 290-3410 Hz (it survives narrowband telephony, 16 kHz resampling and
Opus at 16 kbit/s). The frame is defined in continuous time, so its template
is synthesised at whatever rate a recording has; nothing is resampled to decode.

A code's **reference instant** is the centre of its synchronisation pattern.
``generate`` places it on a sample of the written file; ``decode`` measures it
in a recording with sub-sample precision from the envelope of the full frame's
complex (analytic) matched-filter output, after the index was read.

Decoding, all columnar: FFT cross-correlation of the recording with the
synchronisation pattern in blocks (overlap-save), normalised by the recording's
energy under the template (so the threshold does not depend on level); local
maxima above a threshold are candidates; for all candidates at once the data
bits are read coherently against the pattern's carrier phase (a matrix product),
the CRC is checked as a GF(2) matrix product, and the frame that the bits
spell is correlated at the integer lags around the peak; a parabola through
the envelope gives the fractional lag. A candidate is a code when its CRC
passes and its bits are coherent: their projections, turned by the sync
pattern's carrier phase, lie on the real axis (``coherence``). The reported
confidence is the normalised correlation of the recording with the frame the
bits spell (1 for an undistorted code alone; lower under other sound,
distortion or noise).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import numpy as np
from scipy import fft as sfft
from scipy.ndimage import maximum_filter1d

from latlab.signal.errors import SignalError


@dataclass(frozen=True)
class CodeDesign:
    """The fixed parameters of a code frame (changing any of them is a new version)."""

    chip_rate: float = 2400.0
    carrier_hz: float = 1850.0
    rolloff: float = 0.3
    pulse_half_span: int = 4
    """Chip pulses are truncated (tapered) to this many chips either side of their centre."""
    sync_chips: int = 96
    chips_per_bit: int = 4
    index_bits: int = 20
    crc_bits: int = 12
    crc_poly: int = 0x80F
    """CRC-12 generator x^12+x^11+x^3+x^2+x+1 (without the leading term's bit)."""
    crc_xor: int = 0xA5C
    """XORed onto the CRC so that an all-zero frame is not a valid code."""

    @property
    def data_bits(self) -> int:
        return self.index_bits + self.crc_bits

    @property
    def chips(self) -> int:
        return self.sync_chips + self.data_bits * self.chips_per_bit

    @property
    def frame_s(self) -> float:
        """Duration of a frame including its chips' tails."""
        return (self.chips + 2 * self.pulse_half_span) / self.chip_rate

    @property
    def max_index(self) -> int:
        return (1 << self.index_bits) - 1

    @property
    def band_hz(self) -> tuple[float, float]:
        half = self.chip_rate * (1 + self.rolloff) / 2
        return self.carrier_hz - half, self.carrier_hz + half


DESIGN = CodeDesign()
"""Version 1 of the code design."""


@dataclass(frozen=True, eq=False)
class Template:
    """A design's waveforms sampled at one rate, relative to a frame's first sample."""

    rate: int
    ref_offset: int
    """Sample of the template at the reference instant (centre of the sync pattern)."""
    basis: np.ndarray = field(repr=False)
    """Complex (analytic) waveforms, shape (1 + data_bits, length): the sync pattern, then
    each data bit's chips; a frame is ``Re(basis[0] + sum_i sign_i * basis[1 + i])``."""

    @property
    def length(self) -> int:
        return self.basis.shape[1]


def _m_sequence(degree: int = 8, taps: tuple[int, ...] = (8, 6, 5, 4)) -> np.ndarray:
    """A maximum-length sequence of +-1 from a Fibonacci LFSR (x^8+x^6+x^5+x^4+1)."""
    state = [1] * degree
    out = np.empty((1 << degree) - 1, dtype=np.int8)
    for i in range(len(out)):
        out[i] = state[-1]
        feedback = 0
        for tap in taps:
            feedback ^= state[tap - 1]
        state = [feedback, *state[:-1]]
    return 1 - 2 * out


def _raised_cosine(t: np.ndarray, rolloff: float, half_span: float) -> np.ndarray:
    """Raised-cosine pulse (t in chips) with a Hann taper over +-half_span chips."""
    denominator = 1.0 - (2.0 * rolloff * t) ** 2
    singular = np.abs(denominator) < 1e-8
    safe = np.where(singular, 1.0, denominator)
    pulse = np.sinc(t) * np.cos(np.pi * rolloff * t) / safe
    pulse = np.where(singular, np.pi / 4 * np.sinc(1 / (2 * rolloff)), pulse)
    taper = np.where(np.abs(t) < half_span, np.cos(np.pi * t / (2 * half_span)) ** 2, 0.0)
    return pulse * taper


def chip_values(design: CodeDesign = DESIGN) -> tuple[np.ndarray, np.ndarray]:
    """The sync pattern's chips and the data chips' whitening sequence (both +-1)."""
    sequence = _m_sequence()
    needed = design.chips
    if needed > len(sequence):
        sequence = np.tile(sequence, needed // len(sequence) + 1)
    return sequence[: design.sync_chips], sequence[design.sync_chips : needed]


@cache
def template(rate: int, design: CodeDesign = DESIGN) -> Template:
    """The design's waveforms at ``rate`` (synthesised from the continuous-time definition)."""
    chip_s = 1.0 / design.chip_rate
    sync_centre = (design.sync_chips - 1) / 2
    before = (sync_centre + design.pulse_half_span) * chip_s
    after = (design.chips - 1 - sync_centre + design.pulse_half_span) * chip_s
    ref_offset = int(np.ceil(before * rate))
    length = ref_offset + int(np.ceil(after * rate)) + 1
    t = (np.arange(length) - ref_offset) / rate
    chip_t = (np.arange(design.chips) - sync_centre) * chip_s
    pulses = _raised_cosine(
        (t[None, :] - chip_t[:, None]) / chip_s, design.rolloff, design.pulse_half_span
    )
    sync, whitening = chip_values(design)
    groups = np.zeros((1 + design.data_bits, design.chips))
    groups[0, : design.sync_chips] = sync
    bit_of_chip = np.arange(design.data_bits * design.chips_per_bit) // design.chips_per_bit
    groups[1 + bit_of_chip, design.sync_chips + np.arange(len(bit_of_chip))] = whitening
    carrier = np.exp(2j * np.pi * design.carrier_hz * t)
    basis = (groups @ pulses) * carrier[None, :]
    return Template(rate, ref_offset, basis.astype(np.complex128))


@cache
def _crc_matrix(design: CodeDesign = DESIGN) -> np.ndarray:
    """GF(2) matrix mapping index bits (MSB first) to CRC bits (MSB first), zero initial value."""
    rows = np.zeros((design.index_bits, design.crc_bits), dtype=np.int64)
    top = 1 << (design.crc_bits - 1)
    mask = (1 << design.crc_bits) - 1
    for i in range(design.index_bits):
        crc = 0
        for position in range(design.index_bits):
            bit = 1 if position == i else 0
            feedback = ((crc & top) != 0) ^ bit
            crc = ((crc << 1) & mask) ^ (design.crc_poly if feedback else 0)
        rows[i] = (crc >> np.arange(design.crc_bits - 1, -1, -1)) & 1
    return rows


def _bits_msb_first(values: np.ndarray, width: int) -> np.ndarray:
    return ((values[:, None] >> np.arange(width - 1, -1, -1)[None, :]) & 1).astype(np.int64)


def frame_bits(indices: np.ndarray, design: CodeDesign = DESIGN) -> np.ndarray:
    """The data bits (index then CRC, 0/1) of each code index; shape (n, data_bits)."""
    indices = np.asarray(indices, dtype=np.int64)
    if len(indices) and (indices.min() < 0 or indices.max() > design.max_index):
        raise SignalError(f"code indices must lie in 0..{design.max_index}")
    index_bits = _bits_msb_first(indices, design.index_bits)
    crc = (index_bits @ _crc_matrix(design)) % 2
    crc ^= _bits_msb_first(np.array([design.crc_xor]), design.crc_bits)
    return np.concatenate([index_bits, crc], axis=1)


def frame_waveforms(indices: np.ndarray, rate: int, design: CodeDesign = DESIGN) -> np.ndarray:
    """Real waveforms of the frames of ``indices`` at ``rate``, unit-RMS sync; (n, length)."""
    tpl = template(rate, design)
    signs = 2.0 * frame_bits(indices, design) - 1.0
    weights = np.concatenate([np.ones((len(signs), 1)), signs], axis=1)
    return (weights @ tpl.basis.real / _sync_rms(rate, design)).astype(np.float32)


def _sync_rms(rate: int, design: CodeDesign) -> float:
    tpl = template(rate, design)
    sync = tpl.basis[0].real
    return float(np.sqrt(np.mean(sync[np.abs(sync) > 0] ** 2)))


@dataclass(frozen=True)
class GeneratedSignal:
    """Test audio with the index and reference instant of every code in it."""

    samples: np.ndarray
    rate: int
    index: np.ndarray
    time_s: np.ndarray


def code_positions(
    duration_s: float, rate: int, interval_s: float, start_s: float, design: CodeDesign = DESIGN
) -> np.ndarray:
    """Reference samples of the codes that fit whole into the duration."""
    tpl = template(rate, design)
    if interval_s * rate < tpl.length:
        raise SignalError(
            f"interval {interval_s * 1000:.0f} ms is shorter than one code "
            f"({design.frame_s * 1000:.1f} ms)"
        )
    total = round(duration_s * rate)
    first = max(round(start_s * rate), tpl.ref_offset)
    last = total - (tpl.length - tpl.ref_offset)
    if last < first:
        return np.zeros(0, dtype=np.int64)
    count = int((last - first) / (interval_s * rate)) + 1
    return first + np.round(np.arange(count) * interval_s * rate).astype(np.int64)


def generate(
    duration_s: float,
    rate: int = 48000,
    interval_s: float = 0.2,
    start_s: float = 0.5,
    level_dbfs: float = -20.0,
    design: CodeDesign = DESIGN,
) -> GeneratedSignal:
    """Codes 0, 1, 2, ... every ``interval_s`` from ``start_s``, sync RMS at ``level_dbfs``."""
    positions = code_positions(duration_s, rate, interval_s, start_s, design)
    if len(positions) > design.max_index + 1:
        raise SignalError(f"{len(positions)} codes exceed the {design.index_bits}-bit index")
    tpl = template(rate, design)
    samples = np.zeros(round(duration_s * rate), dtype=np.float32)
    gain = 10.0 ** (level_dbfs / 20.0)
    offsets = np.arange(tpl.length)
    for chunk in np.array_split(np.arange(len(positions)), max(1, len(positions) // 1000)):
        if len(chunk) == 0:
            continue
        waves = frame_waveforms(chunk, rate, design) * gain
        samples[(positions[chunk] - tpl.ref_offset)[:, None] + offsets[None, :]] = waves
    return GeneratedSignal(
        samples, rate, np.arange(len(positions)), positions.astype(np.float64) / rate
    )


@dataclass(frozen=True)
class Decoded:
    """Codes found in a recording, columnar, in order of time; plus what the search saw."""

    rate: int
    index: np.ndarray
    time_s: np.ndarray
    confidence: np.ndarray
    inferred: np.ndarray
    """True where the bits failed and the index comes from the neighbouring codes."""
    candidates: int
    """Local maxima of the sync correlation above its threshold."""
    crc_valid: int
    """Candidates whose bits passed the CRC (before the coherence check)."""
    best_sync: float
    """Highest normalised sync correlation anywhere in the recording."""
    best_sync_s: float
    best_rejected_coherence: float
    """Highest bit coherence of a candidate whose CRC passed but that was not a code."""


SYNC_THRESHOLD = 0.3
"""Normalised correlation with the sync pattern that makes a candidate."""
COHERENCE_THRESHOLD = 1.5
"""Bit coherence (``coherence``) a candidate whose CRC passed needs to be a code."""
_REFINE_LAGS = 2
_BLOCK = 1 << 18
_BATCH = 256


def _band_mask(rate: int, n_fft: int, design: CodeDesign) -> np.ndarray:
    """1 inside the codes' band, falling to 0 at its edges over 150 Hz (cosine squared),
    where the chips' raised-cosine spectrum holds little energy; 0 outside."""
    freqs = np.fft.rfftfreq(n_fft, 1.0 / rate)
    low, high = design.band_hz
    inside = np.minimum(freqs - low, high - freqs) / _MASK_TAPER_HZ
    return np.sin(np.pi / 2 * np.clip(inside, 0.0, 1.0)) ** 2


_MASK_TAPER_HZ = 150.0


@dataclass(frozen=True)
class _Candidates:
    lags: np.ndarray
    rho: np.ndarray
    frame_energy: np.ndarray
    """In-band energy of the recording under the whole frame at lags -2..2, (n, 5)."""
    best: float
    best_lag: int
    in_band: np.ndarray
    """The recording band-limited to the codes' band (zero-phase), where bits are read."""


def _sync_correlation(
    samples: np.ndarray, tpl: Template, design: CodeDesign, sync_threshold: float
) -> _Candidates:
    """Local maxima of the normalised correlation with the sync pattern above the threshold.

    Each block's spectrum is also masked to the codes' band: sound outside it (hum,
    bass, hiss above 3.4 kHz) neither disturbs the bits nor dilutes the normalisation;
    the band-limited recording is kept for reading the bits."""
    length = tpl.length
    half = length // 2
    n_lags = len(samples) - length + 1
    sync = tpl.basis[0]
    sync_norm = float(np.linalg.norm(sync.real))
    span = int(np.flatnonzero(np.abs(sync) > 0)[-1]) + 1  # energy under the sync pattern only
    n_fft = sfft.next_fast_len(_BLOCK + 2 * half + length - 1, real=True)
    spectrum_re = np.conj(sfft.rfft(sync.real, n_fft))
    spectrum_im = np.conj(sfft.rfft(sync.imag, n_fft))
    mask = _band_mask(tpl.rate, n_fft, design)
    offsets = np.arange(-_REFINE_LAGS, _REFINE_LAGS + 1)
    found_lags, found_rho, found_energy = [np.zeros(0, np.int64)], [np.zeros(0)], []
    found_energy.append(np.zeros((0, len(offsets))))
    best, best_lag = 0.0, 0
    filtered = np.zeros_like(samples)
    for start in range(0, n_lags, _BLOCK):
        lo = max(start - half, 0)
        hi = min(start + _BLOCK + half, n_lags)
        block = samples[lo : hi + length - 1]
        spectrum = sfft.rfft(block, n_fft) * mask
        real = sfft.irfft(spectrum * spectrum_re, n_fft)[: hi - lo]
        imag = sfft.irfft(spectrum * spectrum_im, n_fft)[: hi - lo]
        in_band = sfft.irfft(spectrum, n_fft)[: len(block)]
        stop = len(samples) if start + _BLOCK >= n_lags else start + _BLOCK
        filtered[start:stop] = in_band[start - lo : stop - lo]
        squares = np.concatenate([[0.0], np.cumsum(in_band.astype(np.float64) ** 2)])
        energy = squares[span : hi - lo + span] - squares[: hi - lo]
        floor = 1e-12 * span
        rho = np.hypot(real, imag) / (sync_norm * np.sqrt(np.maximum(energy, floor)))
        rho[energy <= floor] = 0.0
        peak = maximum_filter1d(rho, size=2 * half + 1, mode="constant")
        core = slice(start - lo, min(start + _BLOCK, n_lags) - lo)
        local = np.flatnonzero((rho[core] >= sync_threshold) & (rho[core] >= peak[core]))
        local += core.start
        local = local[(local + offsets[0] >= 0) & (local + offsets[-1] + length <= len(block))]
        windows = local[:, None] + offsets[None, :]
        found_lags.append(local + lo)
        found_rho.append(rho[local])
        found_energy.append(squares[windows + length] - squares[windows])
        block_best = int(np.argmax(rho[core]))
        if rho[core][block_best] > best:
            best, best_lag = float(rho[core][block_best]), block_best + start
    return _Candidates(
        np.concatenate(found_lags),
        np.concatenate(found_rho),
        np.concatenate(found_energy),
        best,
        best_lag,
        filtered,
    )


def _project(samples: np.ndarray, lags: np.ndarray, tpl: Template) -> np.ndarray:
    """Each candidate's recording at lags -2..2 around it, projected on the sync and bit
    waveforms: (n, 5, 1 + bits) complex."""
    offsets = np.arange(-_REFINE_LAGS, _REFINE_LAGS + 1)
    columns = np.arange(tpl.length)
    segments = samples[(lags[:, None, None] + offsets[None, :, None]) + columns[None, None, :]]
    basis_re, basis_im = _basis_f32(tpl)
    return (segments @ basis_re) - 1j * (segments @ basis_im)


def _read_bits(projections: np.ndarray, design: CodeDesign) -> tuple[np.ndarray, np.ndarray]:
    """Bits (0/1) read coherently against the sync pattern's carrier phase, and CRC ok."""
    bits = (_rotated_bits(projections).real >= 0).astype(np.int64)
    expected = frame_bits(_bits_to_index(bits[:, : design.index_bits]), design)
    return bits, np.all(expected == bits, axis=1)


def _rotated_bits(projections: np.ndarray) -> np.ndarray:
    """The bits' projections turned by the sync pattern's carrier phase: a code's bits lie on
    the real axis, noise spreads over both."""
    centre = projections[:, _REFINE_LAGS, :]
    phase = np.conj(centre[:, :1]) / np.maximum(np.abs(centre[:, :1]), 1e-30)
    return centre[:, 1:] * phase


def coherence(projections: np.ndarray, bits: np.ndarray) -> np.ndarray:
    """Mean of the bits' in-phase parts (signed by the bits) over the RMS of their quadrature
    parts: near 0.8 for noise that happened to pass the CRC, several for a code."""
    rotated = _rotated_bits(projections)
    in_phase = np.mean(rotated.real * (2.0 * bits - 1.0), axis=1)
    quadrature = np.sqrt(np.mean(rotated.imag**2, axis=1))
    return in_phase / np.maximum(quadrature, 1e-30)


def _refine(
    projections: np.ndarray, energy: np.ndarray, bits: np.ndarray, lags: np.ndarray, tpl: Template
) -> tuple[np.ndarray, np.ndarray]:
    """Fractional lag (parabola through the frame's envelope) and confidence of each frame."""
    weights = np.concatenate([np.ones((len(bits), 1)), 2.0 * bits - 1.0], axis=1)
    envelope = np.abs(np.einsum("nlb,nb->nl", projections, weights))
    best = np.clip(np.argmax(envelope, axis=1), 1, 2 * _REFINE_LAGS - 1)
    rows = np.arange(len(lags))
    left, mid, right = (envelope[rows, best + k] for k in (-1, 0, 1))
    curvature = left - 2 * mid + right
    concave = curvature < 0
    shift = np.where(concave, 0.5 * (left - right) / np.where(concave, curvature, -1.0), 0.0)
    fractional = lags + (best - _REFINE_LAGS) + np.clip(shift, -1.0, 1.0)
    gram = _gram(tpl)
    frame_norm = np.sqrt(np.einsum("nb,bc,nc->n", weights, gram, weights))
    confidence = mid / np.maximum(frame_norm * np.sqrt(energy[rows, best]), 1e-30)
    return fractional, confidence


@cache
def _gram(tpl: Template) -> np.ndarray:
    return tpl.basis.real @ tpl.basis.real.T


@cache
def _basis_f32(tpl: Template) -> tuple[np.ndarray, np.ndarray]:
    return (
        np.ascontiguousarray(tpl.basis.real.T, dtype=np.float32),
        np.ascontiguousarray(tpl.basis.imag.T, dtype=np.float32),
    )


def _bits_to_index(bits: np.ndarray) -> np.ndarray:
    width = bits.shape[1]
    return bits @ (1 << np.arange(width - 1, -1, -1)).astype(np.int64)


@dataclass(frozen=True)
class _Read:
    """Candidates read from their bits: the codes, and the rows of ``_Candidates`` whose CRC
    failed with a sync strong enough to try placing them in the sequence."""

    index: np.ndarray
    lag: np.ndarray
    confidence: np.ndarray
    retry_rows: np.ndarray
    crc_valid: int
    best_rejected: float


def _read_candidates(found: _Candidates, tpl: Template, design: CodeDesign) -> _Read:
    """Bits, CRC, coherence, time and confidence of every candidate, in batches."""
    parts: list[tuple[np.ndarray, ...]] = [(np.zeros(0, np.int64), np.zeros(0), np.zeros(0))]
    retry = [np.zeros(0, dtype=np.int64)]
    crc_valid, best_rejected = 0, 0.0
    for start in range(0, len(found.lags), _BATCH):
        rows = slice(start, start + _BATCH)
        lags = found.lags[rows]
        projections = _project(found.in_band, lags, tpl)
        bits, crc_ok = _read_bits(projections, design)
        fractional, confidence = _refine(projections, found.frame_energy[rows], bits, lags, tpl)
        coherent = coherence(projections, bits)
        keep = crc_ok & (coherent >= COHERENCE_THRESHOLD)
        crc_valid += int(crc_ok.sum())
        best_rejected = float(np.max(coherent[crc_ok & ~keep], initial=best_rejected))
        index = _bits_to_index(bits[keep, : design.index_bits])
        parts.append((index, fractional[keep], confidence[keep]))
        weak_bits = ~crc_ok & (found.rho[rows] >= INFER_SYNC_THRESHOLD)
        retry.append(np.flatnonzero(weak_bits) + start)
    index, lag, confidence = (np.concatenate([p[k] for p in parts]) for k in range(3))
    return _Read(index, lag, confidence, np.concatenate(retry), crc_valid, best_rejected)


def decode(
    samples: np.ndarray,
    rate: int,
    design: CodeDesign = DESIGN,
    sync_threshold: float = SYNC_THRESHOLD,
) -> Decoded:
    """Every code in mono ``samples`` at ``rate``: index, reference instant, confidence.

    A candidate whose bits fail the CRC (a packet lost inside the frame, say) is
    still a code when its position continues the sequence of the codes read on
    both sides of it (``_infer_from_sequence``); it is marked ``inferred``.
    """
    tpl = template(rate, design)
    samples = np.ascontiguousarray(samples, dtype=np.float32)
    if len(samples) < tpl.length + 2 * _REFINE_LAGS:
        return _empty(rate)
    found = _sync_correlation(samples, tpl, design, sync_threshold)
    read = _read_candidates(found, tpl, design)
    index, lag, confidence = read.index, read.lag, read.confidence
    inferred = np.zeros(len(index), dtype=bool)
    extra = _infer_from_sequence(found, read.retry_rows, index, lag, tpl, design)
    if extra is not None:
        columns = (index, lag, confidence, inferred)
        index, lag, confidence, inferred = (
            np.concatenate([a, b]) for a, b in zip(columns, extra, strict=True)
        )
    order = _without_overlaps(lag, confidence, tpl.length)
    return Decoded(
        rate,
        index[order].astype(np.int64),
        (lag[order] + tpl.ref_offset) / rate,
        confidence[order].astype(np.float32),
        inferred[order],
        len(found.lags),
        read.crc_valid,
        found.best,
        (found.best_lag + tpl.ref_offset) / rate,
        read.best_rejected,
    )


def _without_overlaps(lag: np.ndarray, confidence: np.ndarray, length: int) -> np.ndarray:
    """Order by time of the codes to keep: of two whose frames overlap (no generated
    codes do), the one with the lower confidence goes (a CRC passed by chance on a
    distorted copy of a code, such as its clipped harmonics)."""
    order = np.argsort(lag, kind="stable")
    if len(order) < 2:
        return order
    lag, confidence = lag[order], confidence[order]
    close = np.diff(lag) < length
    weaker_than_next = np.append(close & (confidence[:-1] < confidence[1:]), False)
    weaker_than_prev = np.insert(close & (confidence[1:] <= confidence[:-1]), 0, False)
    return order[~(weaker_than_next | weaker_than_prev)]


def _empty(rate: int) -> Decoded:
    nothing = np.zeros(0)
    return Decoded(
        rate, nothing.astype(np.int64), nothing, nothing, nothing.astype(bool), 0, 0, 0.0, 0.0, 0.0
    )


INFER_SYNC_THRESHOLD = 0.4
"""Sync correlation a candidate whose CRC failed needs to be placed in the sequence."""
INFER_COHERENCE_THRESHOLD = 1.0
"""Bit coherence with the inferred bits (noise scatters around 0 for bits not chosen from it)."""
INFER_TOLERANCE_S = 0.0005
"""How far from the position its read neighbours predict an inferred code may lie."""


def _infer_from_sequence(
    found: _Candidates,
    rows: np.ndarray,
    index: np.ndarray,
    read_lags: np.ndarray,
    tpl: Template,
    design: CodeDesign,
) -> tuple[np.ndarray, ...] | None:
    """Codes whose bits failed but whose position continues the read sequence on both sides.

    The period is the median lag step per index step of the codes read; a candidate
    ``rows`` of ``found`` must sit within ``INFER_TOLERANCE_S`` of a whole number of
    periods from both neighbours, the two must agree on its index, and its frame with
    those bits must be coherent."""
    if len(rows) == 0 or len(index) < 2:
        return None
    order = np.argsort(read_lags)
    read_lags, index = read_lags[order], index[order]
    steps = np.diff(index)
    forward = steps > 0
    if not forward.any():
        return None
    period = float(np.median(np.diff(read_lags)[forward] / steps[forward]))
    lags = found.lags[rows]
    after = np.searchsorted(read_lags, lags)
    both = (after > 0) & (after < len(read_lags))
    rows, lags, after = rows[both], lags[both], after[both]
    from_prev = (lags - read_lags[after - 1]) / period
    from_next = (read_lags[after] - lags) / period
    tolerance = INFER_TOLERANCE_S * tpl.rate / period
    guess = index[after - 1] + np.round(from_prev).astype(np.int64)
    consistent = (
        (np.abs(from_prev - np.round(from_prev)) <= tolerance)
        & (np.abs(from_next - np.round(from_next)) <= tolerance)
        & (guess + np.round(from_next).astype(np.int64) == index[after])
        & (guess > index[after - 1])
        & (guess < index[after])
    )
    rows, lags, guess = rows[consistent], lags[consistent], guess[consistent]
    if len(lags) == 0:
        return None
    projections = _project(found.in_band, lags, tpl)
    bits = frame_bits(guess, design)
    fractional, confidence = _refine(projections, found.frame_energy[rows], bits, lags, tpl)
    keep = coherence(projections, bits) >= INFER_COHERENCE_THRESHOLD
    return guess[keep], fractional[keep], confidence[keep], np.ones(keep.sum(), dtype=bool)
