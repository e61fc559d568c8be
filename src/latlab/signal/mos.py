"""Audio quality as a listener would score it: MOS of received audio against its reference.

* **ViSQOL** (v3, speech mode, the deep-lattice mapper of the C++ default) through the
  ``visqol-python`` package (Apache-2.0, a dependency of latlab): MOS-LQO 1 to 5.
* **PESQ** (ITU-T P.862, wideband) through the ``pesq`` package where the user installed it
  (an optional extra: its reference code's licence forbids redistribution and commercial
  use, so latlab neither vendors nor requires it): ``pip install -e '.[pesq]'``.

Both score aligned audio at 16 kHz. A recording of a looped reference (a browser's fake
capture device loops its file) is cut into chunks (8 s by default); each chunk is aligned
to the reference by the peak of its cross-correlation with the looped reference (an FFT),
so a jitter buffer that stretches time between chunks costs no alignment, and each chunk
is scored alone. A chunk the listener heard nothing of (more than 40 dB under the
reference) scores 1.0, the lowest MOS, without asking either model. The MOS of a
recording is the mean over its chunks; the chunks' own scores are kept.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import signal as ssignal

from latlab.signal.errors import SignalError
from latlab.signal.wavio import resample

MOS_RATE = 16000
CHUNK_S = 8.0
MIN_CHUNK_S = 3.0  # a shorter tail is left out (too little speech for either model)
SILENT_DB = -40.0  # a chunk this far under the reference's level was not heard: MOS 1.0
MOS_FLOOR = 1.0
PESQ_INSTALL = "pip install -e '.[pesq]' (in .venv: .venv/bin/pip install -e '.[pesq]')"
PESQ_MISSING = f"PESQ not installed (optional; its licence forbids redistribution): {PESQ_INSTALL}"

_visqol_api: Any = None


@dataclass
class MosResult:
    """ViSQOL (and PESQ where installed) of one recording, per chunk and overall."""

    visqol: float | None
    pesq: float | None
    chunks: list[dict[str, Any]] = field(default_factory=list)
    pesq_note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "visqol": _round(self.visqol),
            "pesq": _round(self.pesq),
            "pesq_note": self.pesq_note,
            "chunks": self.chunks,
        }


def _round(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(float(value), 4)


def pesq_available() -> bool:
    """Whether the optional ``pesq`` package can be imported."""
    try:
        import pesq  # noqa: F401
    except ImportError:
        return False
    return True


def _visqol() -> Any:
    """ViSQOL's API in speech mode (created once; its model loads in about a second)."""
    global _visqol_api
    if _visqol_api is None:
        try:
            with _quiet():
                from visqol import VisqolApi

                api = VisqolApi()
                api.create(mode="speech", use_lattice_model=True)
        except ImportError as exc:
            raise SignalError(
                f"ViSQOL needs the visqol-python package ({exc}): bash scripts/setup.sh"
            ) from None
        _visqol_api = api
    return _visqol_api


@contextlib.contextmanager
def _quiet() -> Any:
    """Silence what ViSQOL and TensorFlow Lite print to stdout, stderr and the log."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    level = logging.root.manager.disable
    logging.disable(logging.WARNING)
    saved = os.dup(2)  # TensorFlow Lite writes to file descriptor 2 itself
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
        logging.disable(level)


def align(reference: np.ndarray, chunk: np.ndarray, looped: bool = True) -> tuple[np.ndarray, int]:
    """The stretch of ``reference`` (looped when ``looped``) that ``chunk`` holds, and its
    start in the reference (the lag of the cross-correlation's peak)."""
    n = len(chunk)
    period = len(reference)
    tiled = np.resize(reference, period + n) if looped else reference
    corr = ssignal.fftconvolve(tiled, chunk[::-1], mode="valid")
    lags = corr[:period] if looped else corr
    lag = int(np.argmax(lags))
    return tiled[lag : lag + n], lag


def _level_db(x: np.ndarray) -> float:
    rms = float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if len(x) else 0.0
    return 20 * math.log10(rms) if rms > 0 else -math.inf


def mos(
    reference: np.ndarray,
    reference_rate: int,
    received: np.ndarray,
    received_rate: int,
    *,
    chunk_s: float = CHUNK_S,
    looped: bool = True,
    with_pesq: bool | None = None,
) -> MosResult:
    """ViSQOL MOS (and PESQ where installed, or where ``with_pesq`` asks for it) of
    ``received`` against ``reference``, per aligned chunk."""
    want_pesq = pesq_available() if with_pesq is None else with_pesq
    if want_pesq and not pesq_available():
        raise SignalError(PESQ_MISSING)
    ref = resample(np.asarray(reference, np.float64), reference_rate, MOS_RATE)
    rec = resample(np.asarray(received, np.float64), received_rate, MOS_RATE)
    size = round(chunk_s * MOS_RATE)
    if len(ref) < round(MIN_CHUNK_S * MOS_RATE) or len(rec) < round(MIN_CHUNK_S * MOS_RATE):
        raise SignalError(f"both recordings must be at least {MIN_CHUNK_S:g} s long for a MOS")
    ref_db = _level_db(ref)
    chunks = []
    starts = range(0, max(1, len(rec) - round(MIN_CHUNK_S * MOS_RATE) + 1), size)
    for start in starts:
        piece = rec[start : start + size]
        entry: dict[str, Any] = {"start_s": round(start / MOS_RATE, 3),
                                 "duration_s": round(len(piece) / MOS_RATE, 3)}  # fmt: skip
        level = _level_db(piece) - ref_db
        if level < SILENT_DB:
            entry.update(visqol=MOS_FLOOR, pesq=MOS_FLOOR if want_pesq else None, silent=True)
            chunks.append(entry)
            continue
        matched, lag = align(ref, piece, looped)
        if len(matched) < len(piece):  # an unlooped reference ends first
            piece = piece[: len(matched)]
        entry["reference_s"] = round(lag / MOS_RATE, 4)
        entry["visqol"] = _round(_visqol_score(matched, piece))
        entry["pesq"] = _round(_pesq_score(matched, piece)) if want_pesq else None
        chunks.append(entry)
    return MosResult(
        visqol=_mean(c.get("visqol") for c in chunks),
        pesq=_mean(c.get("pesq") for c in chunks) if want_pesq else None,
        chunks=chunks,
        pesq_note=None if want_pesq else PESQ_MISSING,
    )


def _mean(values: Any) -> float | None:
    finite = [v for v in values if isinstance(v, int | float) and math.isfinite(v)]
    return float(np.mean(finite)) if finite else None


def _visqol_score(reference: np.ndarray, degraded: np.ndarray) -> float:
    api = _visqol()
    try:
        with _quiet():
            result = api.measure_from_arrays(reference, degraded, sample_rate=MOS_RATE)
    except (ValueError, RuntimeError, IndexError, ZeroDivisionError):
        return float("nan")
    return float(result.moslqo)


def _pesq_score(reference: np.ndarray, degraded: np.ndarray) -> float:
    from pesq import NoUtterancesError, PesqError, pesq

    try:
        return float(pesq(MOS_RATE, reference, degraded, "wb"))
    except (NoUtterancesError, PesqError):
        return float("nan")


def drop_frames(
    samples: np.ndarray, rate: int, loss: float, frame_ms: float = 20.0, seed: int = 0
) -> np.ndarray:
    """``samples`` with each ``frame_ms`` frame silenced with probability ``loss``: a
    planted loss pattern without concealment. The frames lost at a lower rate are also
    lost at every higher rate (one uniform draw per frame, same ``seed``)."""
    frame = round(rate * frame_ms / 1000)
    frames = -(-len(samples) // frame)
    draw = np.random.default_rng(seed).random(frames)
    keep = np.repeat(draw >= loss, frame)[: len(samples)]
    return np.where(keep, samples, 0.0).astype(samples.dtype)
