"""Black-box end to end from a time-coded signal, set beside the probed end to end.

A run with a ``[signal]`` table plays time-coded audio into the capture device and
records the playout device (``latlab.lab.jack_signal``); both rigs log, per JACK
cycle, which file sample the cycle began with and when (JACK's clock, calibrated to
CLOCK_MONOTONIC). Here:

1. each code's instant in the sent file becomes its injection instant, and each code
   decoded in the recording (``latlab.signal.timecode``, sub-sample) its recording
   instant; their difference is the code's **black-box** end to end;
2. the probed stream whose capture windows hold the injection instants is the one the
   signal went through; a code's **probed** end to end is that of the unit whose
   capture window holds its injection instant (the unit the probes say carried it);
3. **unexplained** = black box - probed: time the probes did not see (device and OS
   buffers not modelled, uninstrumented stages), or, when negative, time they counted
   that the signal did not spend.

Everything is per code and columnar; the result goes to summary.json (``blackbox``)
and, per code, to ``blackbox.parquet`` in the run directory (written by the pipeline).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from latlab.analysis.stats import Samples
from latlab.signal.errors import SignalError
from latlab.signal.timecode import decode
from latlab.signal.wavio import read_wav
from latlab.stitch.journeys import Journeys
from latlab.stitch.position import MISSING

SIGNAL_DIR = "signal"
SENT_WAV = "sent.wav"
RECEIVED_WAV = "received.wav"
INJECT_LOG = "inject.parquet"
RECORD_LOG = "record.parquet"
CODES_FILE = "blackbox.parquet"
RIG_SCHEMA = "latlab.jack-signal/1"


class BlackBoxError(ValueError):
    """The signal files of a run cannot be used; ``str()`` names the file and the problem."""


@dataclass(frozen=True)
class RigLog:
    """A rig's per-cycle timing (see ``latlab.lab.jack_signal``), times in CLOCK_MONOTONIC."""

    path: Path
    rate: int
    position: np.ndarray  # file sample each cycle began with
    cycle_ns: np.ndarray  # that cycle's start, CLOCK_MONOTONIC ns
    nframes: np.ndarray
    xruns: int

    def sample_times(self, positions: np.ndarray) -> np.ndarray:
        """CLOCK_MONOTONIC ns of (fractional) file positions; NaN outside the logged cycles."""
        positions = np.asarray(positions, dtype=np.float64)
        if len(self.position) == 0:
            return np.full(len(positions), np.nan)
        cycle = np.searchsorted(self.position, positions, side="right") - 1
        valid = cycle >= 0
        cycle = np.clip(cycle, 0, len(self.position) - 1)
        offset = positions - self.position[cycle]
        valid &= offset < self.nframes[cycle]
        times = self.cycle_ns[cycle] + offset * (1e9 / self.rate)
        return np.where(valid, times, np.nan)


def jack_to_monotonic(
    jack_us: np.ndarray, start: list[list[int]], end: list[list[int]]
) -> np.ndarray:
    """JACK microseconds as CLOCK_MONOTONIC ns, from bracketed calibration pairs.

    Each set's tightest bracket ``[mono before, jack_us, mono after]`` gives an offset
    (the bracket's middle minus the JACK reading); between the start and the end set
    the offset is interpolated linearly, so a slow drift of JACK's clock against
    CLOCK_MONOTONIC (CLOCK_MONOTONIC_RAW is not slewed) is followed.
    """
    anchors = [_tightest(pairs) for pairs in (start, end) if pairs]
    if not anchors:
        raise ValueError("no calibration pairs")
    jack_ns = np.asarray(jack_us, dtype=np.float64) * 1000.0
    if len(anchors) == 1 or anchors[0][0] == anchors[1][0]:
        return jack_ns + anchors[0][1]
    (j0, o0), (j1, o1) = anchors
    offset = o0 + (jack_ns - j0) * (o1 - o0) / (j1 - j0)
    return jack_ns + offset


def _tightest(pairs: list[list[int]]) -> tuple[float, float]:
    """(JACK ns, offset ns) of the narrowest bracket."""
    arr = np.asarray(pairs, dtype=np.float64)
    best = int(np.argmin(arr[:, 2] - arr[:, 0]))
    before, jack_us, after = arr[best]
    return jack_us * 1000.0, (before + after) / 2.0 - jack_us * 1000.0


def read_rig_log(path: Path) -> RigLog:
    """A rig's timing log; a missing, truncated or foreign file: BlackBoxError."""
    if not path.is_file():
        raise BlackBoxError(f"{path}: no such file (did the signal rig start?)")
    try:
        table = pq.read_table(path)
        meta = json.loads((table.schema.metadata or {}).get(b"latlab", b"{}"))
    except (pa.ArrowInvalid, OSError, ValueError) as exc:
        raise BlackBoxError(f"{path}: not a readable rig log ({exc})") from None
    if meta.get("schema") != RIG_SCHEMA:
        raise BlackBoxError(f"{path}: not a latlab signal rig log (schema {meta.get('schema')!r})")
    cycle_ns = jack_to_monotonic(
        table.column("cycle_us").to_numpy(), meta["calibration_start"], meta["calibration_end"]
    )
    return RigLog(
        path=path,
        rate=int(meta["rate"]),
        position=table.column("position").to_numpy(),
        cycle_ns=cycle_ns,
        nframes=table.column("nframes").to_numpy().astype(np.int64),
        xruns=int(meta.get("xruns", 0)),
    )


@dataclass(frozen=True)
class CodeDelays:
    """Per code sent: injection and recording instants (NaN where not found), columnar."""

    index: np.ndarray
    inject_ns: np.ndarray
    record_ns: np.ndarray
    confidence: np.ndarray
    inferred: np.ndarray

    @property
    def found(self) -> np.ndarray:
        return np.isfinite(self.record_ns) & np.isfinite(self.inject_ns)

    @property
    def black_box_ns(self) -> np.ndarray:
        return self.record_ns - self.inject_ns


def code_delays(signal_dir: Path) -> CodeDelays:
    """Join the sent codes and the codes decoded in the recording by index."""
    codes_file = signal_dir / (SENT_WAV + ".codes.json")
    try:
        codes = json.loads(codes_file.read_text(encoding="utf-8"))
        sent_index = np.asarray([c["index"] for c in codes["codes"]], dtype=np.int64)
        sent_s = np.asarray([c["time_s"] for c in codes["codes"]], dtype=np.float64)
        sent_rate = int(codes["sample_rate"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BlackBoxError(f"{codes_file}: cannot read the sent codes ({exc})") from None
    inject = read_rig_log(signal_dir / INJECT_LOG)
    record = read_rig_log(signal_dir / RECORD_LOG)
    if sent_rate != inject.rate:
        raise BlackBoxError(
            f"{codes_file}: codes at {sent_rate} Hz, but {inject.path} played at {inject.rate} Hz"
        )
    inject_ns = inject.sample_times(sent_s * sent_rate)
    try:
        audio = read_wav(signal_dir / RECEIVED_WAV)
    except SignalError as exc:
        raise BlackBoxError(str(exc)) from None
    found = decode(audio.samples, audio.rate)
    record_at = np.full(len(sent_index), np.nan)
    confidence = np.zeros(len(sent_index))
    inferred = np.zeros(len(sent_index), dtype=bool)
    slot = np.searchsorted(sent_index, found.index)
    last = max(len(sent_index) - 1, 0)
    ok = (slot < len(sent_index)) & (sent_index[np.minimum(slot, last)] == found.index)
    record_at[slot[ok]] = record.sample_times(found.time_s[ok] * audio.rate)
    confidence[slot[ok]] = found.confidence[ok]
    inferred[slot[ok]] = found.inferred[ok]
    return CodeDelays(sent_index, inject_ns, record_at, confidence, inferred)


def probed_end_to_end(journeys: Journeys, inject_ns: np.ndarray) -> np.ndarray:
    """Per injection instant, the end to end of the unit whose capture window holds it.

    NaN where no complete unit's window ``[first probe, first probe + unit)`` holds it.
    """
    complete = journeys.complete
    start = journeys.times[complete, 0]
    end_to_end = (journeys.times[complete, -1] - start).astype(np.float64)
    order = np.argsort(start, kind="stable")
    start, end_to_end = start[order], end_to_end[order]
    out = np.full(len(inject_ns), np.nan)
    if len(start) == 0:
        return out
    finite = np.isfinite(inject_ns)
    at = np.searchsorted(start, np.where(finite, inject_ns, 0), side="right") - 1
    inside = finite & (at >= 0)
    at = np.clip(at, 0, len(start) - 1)
    inside &= np.where(finite, inject_ns, 0) - start[at] < journeys.unit_ns
    out[inside] = end_to_end[at[inside]]
    return out


def _carrier(journeys: list[Journeys], inject_ns: np.ndarray) -> tuple[Journeys | None, np.ndarray]:
    """The stream whose capture windows hold the most injection instants, and its figures."""
    best: tuple[Journeys | None, np.ndarray] = (None, np.full(len(inject_ns), np.nan))
    for j in journeys:
        if j.media != "audio" or not len(j.times) or (j.times[:, 0] == MISSING).all():
            continue
        probed = probed_end_to_end(j, inject_ns)
        if np.isfinite(probed).sum() > np.isfinite(best[1]).sum():
            best = (j, probed)
    return best


def _describe(values_ns: np.ndarray) -> dict[str, Any]:
    samples = Samples(values_ns)
    return {**samples.describe(), "histogram": samples.distribution_table()}


def black_box_summary(
    run_dir: Path, journeys: list[Journeys], window: tuple[int, int] | None
) -> tuple[dict[str, Any], pa.Table] | None:
    """summary.json's ``blackbox`` for a run with a signal and its per-code table (what
    ``blackbox.parquet`` holds), or None without a signal.

    Codes injected outside the measured ``window`` do not count. Bad signal files:
    BlackBoxError.
    """
    signal_dir = run_dir / SIGNAL_DIR
    if not (signal_dir / SENT_WAV).is_file():
        return None
    delays = code_delays(signal_dir)
    inject_ns = delays.inject_ns
    counted = np.isfinite(inject_ns)
    if window is not None:
        counted &= (inject_ns >= window[0]) & (inject_ns < window[1])
    carrier, probed = _carrier(journeys, np.where(counted, inject_ns, np.nan))
    found = delays.found & counted
    matched = found & np.isfinite(probed)
    black = delays.black_box_ns
    unexplained = black - probed
    summary = {
        "method": "time-coded signal through JACK (latlab.timecode/1); per code, "
        "the probed end to end is the unit whose capture window holds its injection",
        "stream": carrier.stream_id if carrier is not None else None,
        "codes": {
            "injected": int(counted.sum()),
            "found": int(found.sum()),
            "missing": int(counted.sum() - found.sum()),
            "inferred": int((delays.inferred & found).sum()),
            "matched_to_units": int(matched.sum()),
        },
        "black_box": _describe(np.round(black[found]).astype(np.int64)),
        "probed": _describe(np.round(probed[matched]).astype(np.int64)),
        "unexplained": _describe(np.round(unexplained[matched]).astype(np.int64)),
    }
    return summary, _codes_table(delays, probed, counted)


def _codes_table(delays: CodeDelays, probed: np.ndarray, counted: np.ndarray) -> pa.Table:
    """One row per code sent (``blackbox.parquet``)."""
    return pa.table(
        {
            "index": delays.index,
            "in_window": counted,
            "inject_ns": delays.inject_ns,
            "record_ns": delays.record_ns,
            "black_box_ms": delays.black_box_ns / 1e6,
            "probed_ms": probed / 1e6,
            "unexplained_ms": (delays.black_box_ns - probed) / 1e6,
            "confidence": delays.confidence,
            "inferred": delays.inferred,
        }
    )
