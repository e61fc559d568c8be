"""Black-box end to end from a time-coded signal, set beside the probed end to end.

A run with a ``[signal]`` table plays time-coded audio in at one end and records it at
the other (``latlab.lab.signal_rig``). Each end has a timing log: which file sample a
block of audio began with and when (CLOCK_MONOTONIC). A JACK rig logs every cycle
(JACK's clock, calibrated to CLOCK_MONOTONIC; ``latlab.lab.jack_signal``), a PulseAudio
rig every read of one device period (``latlab.lab.pulse_signal``; its injection end
also records what the capture device delivered, and the codes are timed there); a GStreamer
end's log comes from the trace: the pushes of ``latlab_signal_in`` (the file played in
real time, positions from PTS) or the pushes into ``latlab_signal_out`` (positions
counted from the buffers' sizes, which is what the WAV file holds). Here:

1. each code's instant in the sent file becomes its injection instant, and each code
   decoded in the recording (``latlab.signal.timecode``, sub-sample) its recording
   instant; their difference is the code's **black-box** end to end;
2. the probed stream whose capture windows hold the injection instants is the one the
   signal went through; a code's **probed** end to end is that of the unit whose
   capture window holds its injection instant (the unit the probes say carried it),
   over the same span as the black box: from the injection probe and to the recording
   probe where those are on the stream's path (GStreamer ends), else end to end;
3. **unexplained** = black box - probed: time the probes did not see (device and OS
   buffers not modelled, uninstrumented stages), or, when negative, time they counted
   that the signal did not spend.

Everything is per code and columnar; the result goes to summary.json (``blackbox``)
and, per code, to ``blackbox.parquet`` in the run directory (written by the pipeline).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from latlab.analysis.stats import Samples
from latlab.errors import UserInputError
from latlab.ingest.browser_signal import DELIVERY_TIMING, TIMING_SCHEMA
from latlab.ingest.events import EventTable, Probe
from latlab.ingest.trace_format import Kind
from latlab.rundir import (
    INJECT_LOG,
    RECEIVED_WAV,
    RECORD_LOG,
    SENT_WAV,
)
from latlab.rundir import SIGNAL as SIGNAL_DIR
from latlab.rundir import SIGNAL_SINK_ELEMENT as SINK_ELEMENT
from latlab.rundir import SIGNAL_SOURCE_ELEMENT as SOURCE_ELEMENT
from latlab.signal.errors import SignalError
from latlab.signal.timecode import decode, template
from latlab.signal.wavio import read_wav
from latlab.stitch.devices import DEVICE_PROBE
from latlab.stitch.journeys import Journeys
from latlab.stitch.position import MISSING

DELIVERY_READS = 10  # reads on each side of a read in its delivery envelope (10 ms reads)
WAKE_CYCLES = 10  # JACK cycles on each side of a cycle in its callbacks' envelope
WAKE_WANDER_US = 1000.0  # JACK's cycle estimate is followed only past this wander
DROPOUT_MIN_S = 0.002  # a stretch of silence this long where a code belongs is a dropout
DROPOUT_LEVEL = 1e-3  # silence: |sample| below -60 dBFS (codes are sent at -20 dBFS)
DROPOUT_EDGE_S = 0.005  # a code frame's ends, tapered, are left out of that test
RIG_SCHEMA = "latlab.jack-signal/1"


class BlackBoxError(UserInputError, ValueError):
    """The signal files of a run cannot be used; ``str()`` names the file and the problem."""


@dataclass(frozen=True)
class RigLog:
    """A rig's per-cycle timing (see ``latlab.lab.jack_signal``), times in CLOCK_MONOTONIC.

    Positions are in the sent file, or, for a log with a ``recording``, in that file
    beside it (a PulseAudio injection: what the capture device delivered).
    """

    path: Path
    rate: int
    position: np.ndarray  # file sample each cycle began with
    cycle_ns: np.ndarray  # that cycle's start, CLOCK_MONOTONIC ns
    nframes: np.ndarray
    xruns: int
    recording: str | None = None
    pushed: bool = False  # blocks are buffers pushed at once (GStreamer), not device cycles
    xrun_ns: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # JACK's

    def per_unit(self, unit_ns: int) -> RigLog:
        """A pushed log cut into blocks of one unit each, every one at its buffer's push.

        The probes time every unit of a buffer at its push, so a sample's instant at a
        GStreamer end is its buffer's push plus its offset within its unit, not within
        the buffer: a code in the second half of a 20 ms Opus buffer reached the
        recording branch with the first half, not 10 ms later. Device cycles, which play
        their samples in real time, stay as they are.
        """
        frames = round(unit_ns * self.rate / 1e9)
        if not self.pushed or frames <= 0 or not len(self.nframes):
            return self
        parts = np.maximum(1, -(-self.nframes // frames))
        block = np.repeat(np.arange(len(parts)), parts)
        within = (np.arange(int(parts.sum())) - np.repeat(np.cumsum(parts) - parts, parts)) * frames
        return replace(
            self,
            position=self.position[block] + within,
            cycle_ns=self.cycle_ns[block],
            nframes=np.minimum(frames, self.nframes[block] - within),
        )

    def sample_times(self, positions: np.ndarray) -> np.ndarray:
        """CLOCK_MONOTONIC ns of (fractional) file positions; NaN outside the logged cycles.

        A position less than half a sample before a block's start belongs to that block
        (at a small negative offset): codes sit on block boundaries, and a decoded
        position a fraction of a sample early must not be timed from the previous
        block's start, which differs by however irregularly the blocks came.
        """
        positions = np.asarray(positions, dtype=np.float64)
        if len(self.position) == 0:
            return np.full(len(positions), np.nan)
        cycle = np.searchsorted(self.position, positions + 0.5, side="right") - 1
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


def follow_wakes(cycle_us: np.ndarray, wake_us: np.ndarray) -> np.ndarray:
    """JACK's cycle starts (``jack_get_cycle_times``), moved where JACK's estimate
    wandered from the cycles its process callbacks ran in.

    A callback runs once its cycle has begun, a little later each time; the low
    envelope of that lateness (the minimum over ``WAKE_CYCLES`` cycles on each side) holds
    still while JACK's estimate (a DLL) holds. Under load the estimate wandered by up to
    7.7 ms in a run while the callbacks, and the pushes of a capture source woken by
    them, kept a steady 10 ms grid; the black box then drifted by 2.5 ms that no probe
    saw. So the envelope less its median is added back to the estimate. A wander of less
    than ``WAKE_WANDER_US`` is left alone: the envelope itself moves by 26 to 140 us in a
    run whose estimate holds (the callbacks' fastest wake-ups vary), more than the 5 us
    the rig looped on one server is held to."""
    start = np.asarray(cycle_us, dtype=np.float64)
    late = np.asarray(wake_us, dtype=np.float64) - start
    if len(late) == 0:
        return start
    padded = np.pad(late, WAKE_CYCLES, mode="edge")
    envelope = np.lib.stride_tricks.sliding_window_view(padded, 2 * WAKE_CYCLES + 1).min(axis=1)
    wander = envelope - np.median(envelope)
    if np.ptp(wander) < WAKE_WANDER_US:
        return start
    return start + wander


def _tightest(pairs: list[list[int]]) -> tuple[float, float]:
    """(JACK ns, offset ns) of the narrowest bracket."""
    arr = np.asarray(pairs, dtype=np.float64)
    best = int(np.argmin(arr[:, 2] - arr[:, 0]))
    before, jack_us, after = arr[best]
    return jack_us * 1000.0, (before + after) / 2.0 - jack_us * 1000.0


def read_rig_log(path: Path) -> RigLog:
    """A timing log: a JACK rig's, a PulseAudio rig's (delivery times, see
    :func:`delivery_times`) or a browser end's (``latlab.ingest.browser_signal``); a
    missing, truncated or foreign file: BlackBoxError."""
    if not path.is_file():
        raise BlackBoxError(f"{path}: no such file (did the signal rig start?)")
    try:
        table = pq.read_table(path)
        meta = json.loads((table.schema.metadata or {}).get(b"latlab", b"{}"))
    except (pa.ArrowInvalid, OSError, ValueError) as exc:
        raise BlackBoxError(f"{path}: not a readable rig log ({exc})") from None
    try:
        return _rig_log(path, table, meta)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise BlackBoxError(f"{path}: a rig log with bad metadata ({exc!r})") from None


def _rig_log(path: Path, table: pa.Table, meta: dict[str, Any]) -> RigLog:
    rate = int(meta["rate"])
    if rate <= 0:
        raise ValueError(f"rate {rate}")
    recording = meta.get("recording")
    if recording is not None and not isinstance(recording, str):
        raise TypeError(f"recording {recording!r}")
    if meta.get("schema") == TIMING_SCHEMA and meta.get("timing") == DELIVERY_TIMING:
        cycle_ns = delivery_times(
            table.column("position").to_numpy(),
            table.column("time_ns").to_numpy(),
            table.column("nframes").to_numpy(),
            rate,
        )
    elif meta.get("schema") == TIMING_SCHEMA:
        cycle_ns = table.column("time_ns").to_numpy().astype(np.float64)
    elif meta.get("schema") == RIG_SCHEMA:
        cycle_us = table.column("cycle_us").to_numpy()
        if "wake_us" in table.column_names:  # rigs from before it: JACK's estimate as is
            cycle_us = follow_wakes(cycle_us, table.column("wake_us").to_numpy())
        cycle_ns = jack_to_monotonic(cycle_us, meta["calibration_start"], meta["calibration_end"])
    else:
        raise BlackBoxError(f"{path}: not a latlab signal rig log (schema {meta.get('schema')!r})")
    return RigLog(
        path=path,
        rate=rate,
        position=table.column("position").to_numpy(),
        cycle_ns=cycle_ns,
        nframes=table.column("nframes").to_numpy().astype(np.int64),
        xruns=int(meta.get("xruns", 0)),
        recording=recording,
        xrun_ns=np.sort(np.asarray(meta.get("xrun_monotonic_ns") or [], dtype=np.int64)),
    )


def delivery_times(
    position: np.ndarray, returned_ns: np.ndarray, nframes: np.ndarray, rate: int
) -> np.ndarray:
    """When each read's first sample was delivered, from when the reads returned.

    A read returns once the server delivered its last sample, never before; so, the
    model latlab dates a device source's pushes by
    (``latlab.stitch.journeys.device_capture_times``), a sample at position ``p`` was
    delivered at ``c + p / rate``, where ``c`` is the low envelope of return time less
    end position. The estimator differs: the minimum over the ``DELIVERY_READS`` reads
    on each side of a read (a rig reads only one block per period, and a server's
    timeline steps when its clients' latency requests change), not a low quantile
    over windows of 200 pushes.
    """
    start_ns = np.asarray(position, dtype=np.float64) * (1e9 / rate)
    end_ns = start_ns + np.asarray(nframes, dtype=np.float64) * (1e9 / rate)
    offset = np.asarray(returned_ns, dtype=np.float64) - end_ns
    if not len(offset):
        return offset
    padded = np.pad(offset, DELIVERY_READS, mode="edge")
    window = np.lib.stride_tricks.sliding_window_view(padded, 2 * DELIVERY_READS + 1)
    return start_ns + window.min(axis=1)


@dataclass(frozen=True)
class CodeDelays:
    """Per code sent: injection and recording instants (NaN where not found), columnar."""

    index: np.ndarray
    inject_ns: np.ndarray
    record_ns: np.ndarray
    confidence: np.ndarray
    inferred: np.ndarray
    dropout: np.ndarray
    """Not found, and the recording is silent where the code belonged: the path played
    nothing there (a dropout), which no decoder could have read."""

    @property
    def found(self) -> np.ndarray:
        return np.isfinite(self.record_ns) & np.isfinite(self.inject_ns)

    @property
    def black_box_ns(self) -> np.ndarray:
        return self.record_ns - self.inject_ns


@dataclass(frozen=True)
class SentCodes:
    """The codes written into the sent file (``sent.wav.codes.json``)."""

    path: Path
    rate: int
    index: np.ndarray
    time_s: np.ndarray


def read_sent_codes(signal_dir: Path) -> SentCodes:
    """The sent codes of a run's signal; unreadable: BlackBoxError."""
    codes_file = signal_dir / (SENT_WAV + ".codes.json")
    try:
        codes = json.loads(codes_file.read_text(encoding="utf-8"))
        return SentCodes(
            path=codes_file,
            rate=int(codes["sample_rate"]),
            index=np.asarray([c["index"] for c in codes["codes"]], dtype=np.int64),
            time_s=np.asarray([c["time_s"] for c in codes["codes"]], dtype=np.float64),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BlackBoxError(f"{codes_file}: cannot read the sent codes ({exc})") from None


def code_delays(signal_dir: Path, sent: SentCodes, inject: RigLog, record: RigLog) -> CodeDelays:
    """Join the sent codes and the codes decoded in the recording by index.

    A code's injection instant is its place in the sent file on the injection log; or,
    when that log names a recording (what a capture device delivered), where the code
    was decoded in it. A code not decoded there (but recorded at the other end) is
    placed by the median lag of the others and counts as inferred.
    """
    sent_index, sent_s, sent_rate = sent.index, sent.time_s, sent.rate
    if sent_rate != inject.rate:
        raise BlackBoxError(
            f"{sent.path}: codes at {sent_rate} Hz, but {inject.path} played at {inject.rate} Hz"
        )
    sent_position = sent_s * sent_rate
    received = _decoded(signal_dir / RECEIVED_WAV, record, sent_index, sent_position)
    if inject.recording is None:
        inject_ns = inject.sample_times(sent_position)
        return CodeDelays(
            sent_index, inject_ns, received.at_ns, received.confidence, received.inferred,
            received.dropout,
        )  # fmt: skip
    injected = _decoded(signal_dir / Path(inject.recording).name, inject, sent_index, sent_position)
    missed = np.isnan(injected.position)
    if missed.any() and not missed.all():
        lag = np.nanmedian(injected.position - sent_s * sent_rate)
        injected.at_ns[missed] = inject.sample_times(sent_s[missed] * sent_rate + lag)
    confidence = np.where(
        missed, received.confidence, np.minimum(received.confidence, injected.confidence)
    )
    inferred = received.inferred | injected.inferred | (missed & np.isfinite(injected.at_ns))
    return CodeDelays(
        sent_index, injected.at_ns, received.at_ns, confidence, inferred, received.dropout
    )


class _Decoded(NamedTuple):
    """Per code sent, what a recording says of it (NaN / 0 / False where not found)."""

    at_ns: np.ndarray  # when it was there, CLOCK_MONOTONIC
    confidence: np.ndarray
    inferred: np.ndarray
    position: np.ndarray  # where in the recording, samples
    dropout: np.ndarray  # not found, and the recording is silent where it belonged


def _decoded(
    path: Path, log: RigLog, sent_index: np.ndarray, sent_position: np.ndarray
) -> _Decoded:
    """The codes found in a recording whose timing is ``log``, by the codes sent (their
    index and reference sample in the sent file)."""
    try:
        audio = read_wav(path)
    except SignalError as exc:
        raise BlackBoxError(str(exc)) from None
    if audio.rate != log.rate:
        raise BlackBoxError(
            f"{path}: recorded at {audio.rate} Hz, but its timing ({log.path}) is at {log.rate} Hz"
        )
    found = decode(audio.samples, audio.rate)
    # a code found twice (a capture device that looped the file): its first is the one
    first = np.unique(found.index, return_index=True)[1]
    found = replace(
        found,
        **{k: getattr(found, k)[first] for k in ("index", "time_s", "confidence", "inferred")},
    )
    at = np.full(len(sent_index), np.nan)
    position = np.full(len(sent_index), np.nan)
    confidence = np.zeros(len(sent_index))
    inferred = np.zeros(len(sent_index), dtype=bool)
    slot = np.searchsorted(sent_index, found.index)
    last = max(len(sent_index) - 1, 0)
    ok = (slot < len(sent_index)) & (sent_index[np.minimum(slot, last)] == found.index)
    position[slot[ok]] = found.time_s[ok] * audio.rate
    at[slot[ok]] = log.sample_times(position[slot[ok]])
    confidence[slot[ok]] = found.confidence[ok]
    inferred[slot[ok]] = found.inferred[ok]
    dropout = _dropouts(audio.samples, audio.rate, position, sent_position)
    return _Decoded(at, confidence, inferred, position, dropout)


def _dropouts(
    samples: np.ndarray, rate: int, position: np.ndarray, sent_position: np.ndarray
) -> np.ndarray:
    """Per code, whether it was not found and the recording holds at least
    ``DROPOUT_MIN_S`` of silence inside where its frame belonged (its sent place shifted
    by the median lag of the codes found; the frame's tapered ends left out). Inside, a
    code frame is a carrier under a raised-cosine envelope that never stays below
    -60 dBFS for 2 ms, so such a stretch is audio the path never delivered, not a code
    too damaged to read."""
    missing = np.isnan(position)
    dropout = np.zeros(len(position), dtype=bool)
    if not missing.any() or missing.all() or not len(samples):
        return dropout
    quiet = np.abs(samples) < DROPOUT_LEVEL
    edges = np.diff(np.concatenate(([0], quiet.view(np.int8), [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    long_run = np.zeros(len(samples) + 1, dtype=np.int64)
    for_runs = ends - starts >= DROPOUT_MIN_S * rate
    np.add.at(long_run, starts[for_runs], 1)
    np.add.at(long_run, ends[for_runs], -1)
    silent = np.concatenate(([0], np.cumsum(np.cumsum(long_run)[:-1])))  # silent samples before
    tpl = template(rate)
    edge = round(DROPOUT_EDGE_S * rate)  # a frame's tapered ends are quiet by design
    first = np.round(sent_position[missing] + np.nanmedian(position - sent_position))
    first = first.astype(np.int64) - tpl.ref_offset + edge
    last = first + tpl.length - 2 * edge
    fits = (first >= 0) & (last <= len(samples))
    quiet_in = np.zeros(len(first), dtype=np.int64)
    quiet_in[fits] = silent[last[fits]] - silent[first[fits]]
    dropout[np.flatnonzero(missing)] = fits & (quiet_in >= DROPOUT_MIN_S * rate)
    return dropout


@dataclass(frozen=True)
class SignalEnds:
    """Where a run's signal went in and was recorded (run.json ``signal``).

    A ``kind`` is ``"jack"``, ``"pulse"`` or ``"browser"`` (a timing log file the rig or
    the runner wrote) or ``"gst"`` (``process``'s trace).
    """

    inject_kind: str
    inject_process: str
    record_kind: str
    record_process: str

    @classmethod
    def from_run(cls, meta: dict[str, Any]) -> SignalEnds:
        """From run.json; runs from before GStreamer ends were JACK at both ends."""
        signal = meta.get("signal") or {}
        inject, record = signal.get("inject") or {}, signal.get("record") or {}
        return cls(
            inject.get("kind", "jack"),
            inject.get("process", ""),
            record.get("kind", "jack"),
            record.get("process", ""),
        )


def rig_logs(
    run_dir: Path, ends: SignalEnds, table: EventTable | None, sent_rate: int
) -> tuple[RigLog, RigLog, tuple[Probe | None, Probe | None]]:
    """The injection and recording timing logs, and for GStreamer ends their probes.

    A GStreamer source plays the sent file, so its positions are at ``sent_rate``."""
    signal_dir = run_dir / SIGNAL_DIR
    if ends.inject_kind == "gst":
        inject_probe = _signal_probe(table, ends.inject_process, "inject", run_dir)
        inject = _source_log(table, inject_probe, sent_rate, run_dir)
    else:
        inject_probe, inject = None, read_rig_log(signal_dir / INJECT_LOG)
    if ends.record_kind == "gst":
        record_probe = _signal_probe(table, ends.record_process, "record", run_dir)
        record = _sink_log(table, record_probe, run_dir)
    else:
        record_probe, record = None, read_rig_log(signal_dir / RECORD_LOG)
    return inject, record, (inject_probe, record_probe)


def _signal_probe(table: EventTable | None, process: str, side: str, run_dir: Path) -> Probe:
    """The push of ``latlab_signal_in`` (inject) or the push into ``latlab_signal_out``."""
    for probe in table.probes if table is not None else ():
        if probe.kind != Kind.PUSH or table.processes[probe.process].name != process:
            continue
        if side == "inject" and probe.element == SOURCE_ELEMENT and probe.pad == "src":
            return probe
        if side == "record" and probe.peer_element == SINK_ELEMENT:
            return probe
    element = SOURCE_ELEMENT if side == "inject" else SINK_ELEMENT
    raise BlackBoxError(
        f"{run_dir}: the trace of process '{process}' has no buffers through {element} "
        f"(the signal's {side} end): did its pipeline start?"
    )


def _source_log(table: EventTable, probe: Probe, rate: int, run_dir: Path) -> RigLog:
    """``latlab_signal_in``'s pushes: the file's samples (PTS) as they were played in."""
    pts = table.probe_column(probe.index, "pts").astype(np.int64)
    duration = table.probe_column(probe.index, "duration").astype(np.int64)
    t_ns = table.probe_column(probe.index, "t_ns").astype(np.int64)
    timed = (pts >= 0) & (duration > 0)
    order = np.argsort(t_ns[timed], kind="stable")
    return RigLog(
        path=run_dir / f"{probe.name} (trace)",
        rate=rate,
        position=np.round(pts[timed][order] * (rate / 1e9)).astype(np.int64),
        cycle_ns=t_ns[timed][order].astype(np.float64),
        nframes=np.round(duration[timed][order] * (rate / 1e9)).astype(np.int64),
        xruns=0,
        pushed=True,
    )


def _sink_log(table: EventTable, probe: Probe, run_dir: Path) -> RigLog:
    """The pushes into ``latlab_signal_out``: the recording's samples, counted from the
    buffers' sizes, as they reached the recording branch (at the caps' rate, which
    ``code_delays`` checks against the WAV file's)."""
    layout = raw_audio_layout(probe.caps)
    if layout is None:
        raise BlackBoxError(
            f"{run_dir}: {probe.name}: cannot tell the audio frame size and rate from its "
            f"caps ({probe.caps[:80]!r})"
        )
    frame_bytes, rate = layout
    t_ns = table.probe_column(probe.index, "t_ns").astype(np.int64)
    order = np.argsort(t_ns, kind="stable")
    frames = table.probe_column(probe.index, "size")[order].astype(np.int64) // frame_bytes
    return RigLog(
        path=run_dir / f"{probe.name} (trace)",
        rate=rate,
        position=np.cumsum(frames) - frames,
        cycle_ns=t_ns[order].astype(np.float64),
        nframes=frames,
        xruns=0,
        pushed=True,
    )


_FORMAT_RE = re.compile(r"format=\(string\)([A-Z0-9_]+)")
_CHANNELS_RE = re.compile(r"channels=\(int\)(\d+)")
_RATE_RE = re.compile(r"rate=\(int\)(\d+)")
_SAMPLE_BYTES = {"8": 1, "16": 2, "18": 3, "20": 3, "24": 3, "32": 4, "64": 8}


def raw_audio_layout(caps: str) -> tuple[int, int] | None:
    """Bytes per interleaved frame and rate of raw audio caps (None if not raw audio)."""
    if not caps.startswith("audio/x-raw"):
        return None
    fmt, channels = _FORMAT_RE.search(caps), _CHANNELS_RE.search(caps)
    rate = _RATE_RE.search(caps)
    if fmt is None or channels is None or rate is None:
        return None
    bits = re.match(r"[SUF](\d+)(_32)?", fmt.group(1))
    if bits is None or bits.group(1) not in _SAMPLE_BYTES:
        return None
    width = 4 if bits.group(2) else _SAMPLE_BYTES[bits.group(1)]
    return width * int(channels.group(1)), int(rate.group(1))


def probed_end_to_end(
    journeys: Journeys,
    inject_ns: np.ndarray,
    span: tuple[int, int] = (0, -1),
    start_shift_ns: int = 0,
) -> np.ndarray:
    """Per injection instant, the probed time of the unit whose capture window holds it.

    The time runs from probe column ``span[0]`` plus ``start_shift_ns`` to ``span[1]``
    (by default, end to end) and the window is ``[that start, + unit)``. NaN where no
    complete unit's window holds the instant.
    """
    complete = journeys.complete
    start = journeys.times[complete, span[0]] + start_shift_ns
    probed = (journeys.times[complete, span[1]] - start).astype(np.float64)
    order = np.argsort(start, kind="stable")
    start, probed = start[order], probed[order]
    out = np.full(len(inject_ns), np.nan)
    if len(start) == 0:
        return out
    finite = np.isfinite(inject_ns)
    at = np.searchsorted(start, np.where(finite, inject_ns, 0), side="right") - 1
    inside = finite & (at >= 0)
    at = np.clip(at, 0, len(start) - 1)
    inside &= np.where(finite, inject_ns, 0) - start[at] < journeys.unit_ns
    out[inside] = probed[at[inside]]
    return out


def probed_span(journeys: Journeys, probes: tuple[Probe | None, Probe | None]) -> tuple[int, int]:
    """The probe columns the black box spans: the injection probe (else the first) to the
    recording point (else the last): the probe of the element that pushed into the
    recording branch on this path (a tee's other branch is the same instant). A device
    end (``record`` None) records what the playing client hands the audio server, so
    the span ends where the samples leave the sink for the server (``SINK:device``),
    before the server's own playback latency."""
    inject, record = probes
    names = journeys.probe_names
    first = names.index(inject.name) if inject is not None and inject.name in names else 0
    last = len(names) - 1
    if record is None:
        at = [i for i, name in enumerate(names) if name.endswith(f":{DEVICE_PROBE}") and i > first]
        return first, at[-1] if at else last
    process = record.name.split("/", 1)[0]
    prefix = f"{process}/{record.element}:"
    at = [i for i, name in enumerate(names) if name.startswith(prefix) and i > first]
    return first, at[0] if at else last


def jack_capture_shift_ns(ends: SignalEnds, inject: RigLog) -> int:
    """How much later than its capture probe a sample entered the graph at a JACK
    injection end: one JACK period (0 for other ends).

    latlab dates a device source's samples as a capture device takes them in: a
    buffer's last sample just before the buffer is pushed
    (:func:`latlab.stitch.journeys.device_capture_times`). A JACK client gets a whole
    period at the start of the cycle, and the source's buffer completes in the cycle
    that wrote its last samples, so on JACK's frame time (sample ``i`` of cycle ``k``
    at the cycle's start + ``i`` / rate, which is how both rig logs time the codes)
    every sample sits one JACK period after its capture date, whatever the buffer
    size. The rig writes its samples into the graph in the cycle itself, so the probed
    span starts one period after the capture probe.
    """
    if ends.inject_kind != "jack" or not len(inject.nframes):
        return 0
    return round(float(np.median(inject.nframes)) * 1e9 / inject.rate)


def _carrier(
    journeys: list[Journeys],
    inject_ns: np.ndarray,
    probes: tuple[Probe | None, Probe | None] = (None, None),
    start_shift_ns: int = 0,
    inject_process: str = "",
) -> tuple[Journeys | None, np.ndarray, tuple[int, int]]:
    """The stream whose capture windows hold the most injection instants, its figures
    and the span they cover. A stream from the injecting process comes first (the other
    direction of a call has capture windows too); a stream that plays out is preferred
    over the one into the recording branch (the same time, but the branch is latlab's)."""
    best: tuple[Journeys | None, np.ndarray, tuple[int, int]] = (
        None, np.full(len(inject_ns), np.nan), (0, -1)
    )  # fmt: skip
    best_key = (False, 0, False)
    for j in journeys:
        if j.media != "audio" or not len(j.times) or (j.times[:, 0] == MISSING).all():
            continue
        span = probed_span(j, probes)
        probed = probed_end_to_end(j, inject_ns, span, start_shift_ns)
        key = (
            j.probe_names[0].split("/", 1)[0] == inject_process,  # from the injecting end
            int(np.isfinite(probed).sum()),
            not any(SINK_ELEMENT in n for n in j.probe_names),
        )
        if key > best_key:
            best, best_key = (j, probed, span), key
    return best


def _describe(values_ns: np.ndarray) -> dict[str, Any]:
    samples = Samples(values_ns)
    return {**samples.describe(), "histogram": samples.distribution_table()}


def _code_tail_ns(rate: int) -> int:
    """How long a code goes on after its reference instant (74.8 ms of the 96 ms code)."""
    tpl = template(rate)
    return round((tpl.length - tpl.ref_offset) * 1e9 / rate)


def _played_ns(delays: CodeDelays) -> np.ndarray:
    """When each code was played (its reference instant): recorded, or (not found) its
    injection plus the median delay of the codes found. A code not played to its end
    before the measured window ended was played while the runner stopped the processes:
    its sender or its recorder may have stopped mid-code (a browser closes its capture),
    so it measures the teardown, not the path (one CI run had a code whose reference
    was played 1.4 ms before the end: not recorded, and counted missing)."""
    found = delays.found
    typical = np.median(delays.record_ns[found] - delays.inject_ns[found]) if found.any() else 0
    return np.where(found, delays.record_ns, delays.inject_ns + typical)


def black_box_summary(
    run_dir: Path,
    journeys: list[Journeys],
    window: tuple[int, int] | None,
    table: EventTable | None = None,
    meta: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], pa.Table] | None:
    """summary.json's ``blackbox`` for a run with a signal and its per-code table (what
    ``blackbox.parquet`` holds), or None without a signal.

    ``table`` (the run's events) times GStreamer ends; ``meta`` (run.json) says which
    ends are which. Codes injected outside the measured ``window``, or played after it
    ended, do not count. Bad signal files: BlackBoxError.
    """
    signal_dir = run_dir / SIGNAL_DIR
    if not (signal_dir / SENT_WAV).is_file():
        return None
    sent = read_sent_codes(signal_dir)  # first: without them nothing else matters
    ends = SignalEnds.from_run(meta or {})
    inject, record, probes = rig_logs(run_dir, ends, table, sent.rate)
    unit_ns = next((j.unit_ns for j in journeys if j.media == "audio"), 0)
    inject, record = inject.per_unit(unit_ns), record.per_unit(unit_ns)
    delays = code_delays(signal_dir, sent, inject, record)
    inject_ns = delays.inject_ns
    counted = np.isfinite(inject_ns)
    if window is not None:
        counted &= (inject_ns >= window[0]) & (inject_ns < window[1])
        counted &= _played_ns(delays) + _code_tail_ns(sent.rate) <= window[1]
    shift_ns = jack_capture_shift_ns(ends, inject)
    carrier, probed, span = _carrier(
        journeys, np.where(counted, inject_ns, np.nan), probes, shift_ns, ends.inject_process
    )
    found = delays.found & counted
    matched = found & np.isfinite(probed)
    black = delays.black_box_ns
    unexplained = black - probed
    xrun_ns = np.sort(np.concatenate([inject.xrun_ns, record.xrun_ns]))  # either rig's
    summary = {
        "method": f"time-coded signal (latlab.timecode/1), in through {_end_text(ends, 'inject')}"
        f", recorded at {_end_text(ends, 'record')}; per code, the probed time is that of "
        "the unit whose capture window holds its injection, over the same span",
        "stream": carrier.stream_id if carrier is not None else None,
        "span": _span_names(carrier, span, shift_ns),
        "codes": {
            "injected": int(counted.sum()),
            "found": int(found.sum()),
            "missing": int(counted.sum() - found.sum()),
            "dropouts": int((delays.dropout & counted).sum()),
            "inferred": int((delays.inferred & found).sum()),
            "matched_to_units": int(matched.sum()),
        },
        "black_box": _describe(np.round(black[found]).astype(np.int64)),
        "probed": _describe(np.round(probed[matched]).astype(np.int64)),
        "unexplained": _describe(np.round(unexplained[matched]).astype(np.int64)),
        "xruns": _xruns(inject, record, xrun_ns, window),
    }
    xruns_before = np.searchsorted(xrun_ns, delays.record_ns, side="right")
    return summary, _codes_table(delays, probed, counted, xruns_before)


def _xruns(
    inject: RigLog, record: RigLog, xrun_ns: np.ndarray, window: tuple[int, int] | None
) -> dict[str, Any]:
    """The JACK xruns the rigs' clients were told of (summary.json ``blackbox.xruns``;
    ``xrun_ns``: both rigs', in order):
    an xrun may move how the device's cycles line up with the client's, which the probes
    cannot see, so codes after one are compared apart (``blackbox.parquet``
    ``xruns_before``); ``at_s``: when, after the measured window opened."""
    origin = window[0] if window is not None else None
    return {
        "inject": len(inject.xrun_ns),
        "record": len(record.xrun_ns),
        "at_s": [] if origin is None else np.round((xrun_ns - origin) / 1e9, 3).tolist(),
    }


def _end_text(ends: SignalEnds, side: str) -> str:
    if side == "inject":
        kind, process, element = ends.inject_kind, ends.inject_process, SOURCE_ELEMENT
    else:
        kind, process, element = ends.record_kind, ends.record_process, SINK_ELEMENT
    if kind == "browser":
        what = "fake capture file" if side == "inject" else "AudioWorklet tap on the remote track"
        return f"{process}'s {what}"
    if kind == "pulse":
        return "a PulseAudio device's " + ("null sink" if side == "inject" else "monitor")
    return "a JACK device" if kind == "jack" else f"{process}'s {element}"


def _span_names(
    carrier: Journeys | None, span: tuple[int, int], start_shift_ns: int = 0
) -> dict[str, Any] | None:
    """The probes the probed figure runs between (summary.json ``blackbox.span``), and
    how long after the first one it starts (``from_plus_ms``, a JACK injection end)."""
    if carrier is None:
        return None
    names = carrier.probe_names
    named: dict[str, Any] = {"from": names[span[0]], "to": names[span[1]]}
    if start_shift_ns:
        named["from_plus_ms"] = start_shift_ns / 1e6
    return named


def _codes_table(
    delays: CodeDelays, probed: np.ndarray, counted: np.ndarray, xruns_before: np.ndarray
) -> pa.Table:
    """One row per code sent (``blackbox.parquet``); ``xruns_before``: how many JACK xruns
    came before the code was recorded."""
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
            "dropout": delays.dropout,
            "xruns_before": xruns_before.astype(np.int64),
        }
    )
