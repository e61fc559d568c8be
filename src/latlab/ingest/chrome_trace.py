"""Chromium's own trace (Perfetto protobuf): how long its WebRTC audio functions ran.

latlab starts each Chromium with startup tracing of the ``webrtc`` and ``audio``
categories (``--trace-startup``), written as a Perfetto trace to
``browsers/traces/NAME/NAME.pftrace``. Those categories hold a slice per call of the functions
the libwebrtc study in the seeds patched log lines into: the capture callback, the
encoder, NetEq's ``GetAudio`` (decoding, concealment, time stretching) and the
decoder, the mixer, the renderer's pull (resampling) and the output device's
callback. This module turns the trace into columns: per slice its name, thread
track, start and duration.

It also follows what places each received unit after NetEq (``RECEIVER_EVENTS``,
``stitch.browser_receiver``): the renderer's calls with the output delay Chromium
reports for them (``ARGS``), the stats reads (when getStats read NetEq's counters), and,
where the ``disabled-by-default-mediastream`` category is traced (a page whose tap
records for the black box), the WebAudio sink's FIFO: each push of a 10 ms block, each
pull of one (with the underruns it filled with silence) and each 128-frame render
quantum it fed. An instant event is a slice of no duration.

Perfetto's wire format is read with the ``perfetto`` package's generated protobuf
classes. Chromium writes timestamps as deltas on a sequence-scoped incremental clock
(microseconds); a clock snapshot on the sequence anchors it to CLOCK_MONOTONIC,
which every namespace of the lab shares, so slices land on the run's clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from latlab.ingest.trace_reader import TraceError
from latlab.rundir import TRACES

TRACE_SUFFIX = ".pftrace"
MONOTONIC = 3  # Perfetto's BUILTIN_CLOCK_MONOTONIC
SLICE_BEGIN, SLICE_END, INSTANT = 1, 2, 3
SEQUENCE_CLEARED = 1  # TracePacket.SEQ_INCREMENTAL_STATE_CLEARED

# The functions followed, by the name of their trace event.
AUDIO_FUNCTIONS = (
    "AudioInputDevice::AudioThreadCallback::Process",
    "ChannelSend::ProcessAndEncodeAudio",
    "AudioEncoder::Encode",
    "NetEqImpl::InsertPacket",
    "NetEqImpl::GetAudio",
    "AudioDecoder::Decode",
    "AudioMixerImpl::Mix",
    "WebRtcAudioRenderer::Render",
    "AudioOutputDevice::FireRenderCallback",
)
# What places a received unit after NetEq (stitch.browser_receiver).
STATS_READ = "WebRtcVoiceMediaChannel::GetReceiveStats"
SINK_PUSH = "WebAudioMediaStreamAudioSink::OnData under lock"  # a block into the FIFO
SINK_FULL = "WebAudioMediaStreamAudioSink::OnData FIFO full"  # ... dropped instead
SINK_PULL = "WebAudioMediaStreamAudioSink::ProvideInput 2"  # a block out of it
SINK_UNDERRUN = "WebAudioMediaStreamAudioSink::ProvideInput underrun"  # ... silence instead
SINK_QUANTUM = "WebAudioMediaStreamAudioSink::ProvideInput"  # a render quantum it fed
# The AudioContext's output (the "webaudio" category): per device callback, its
# request for render quanta (with the device's delay and the frames its FIFO holds),
# and each quantum rendered.
CONTEXT_REQUEST = "AudioDestination::RequestRender"
CONTEXT_QUANTUM = "RealtimeAudioDestinationHandler::Render"
RECEIVER_EVENTS = (
    STATS_READ, SINK_PUSH, SINK_FULL, SINK_PULL, SINK_UNDERRUN, SINK_QUANTUM, CONTEXT_REQUEST,
    CONTEXT_QUANTUM,
)  # fmt: skip
FUNCTIONS = AUDIO_FUNCTIONS + RECEIVER_EVENTS
# The arguments kept (``arg0``, ``arg1``, ``arg2``; NaN where absent), per event name.
ARGS = {
    "WebRtcAudioRenderer::Render": ("delay_timestamp (ms)", "playout_delay (ms)"),
    CONTEXT_REQUEST: ("delay_timestamp (ms)", "playout_delay (ms)", "delay (frames)"),
}
NO_ARGS = (np.nan, np.nan, np.nan)


@dataclass
class ChromeSlices:
    """One row per completed slice of a followed function."""

    name: np.ndarray  # int: index into FUNCTIONS
    track: np.ndarray  # uint64 track (a thread's) uuid
    start_ns: np.ndarray  # CLOCK_MONOTONIC
    duration_ns: np.ndarray
    arg0: np.ndarray = field(default_factory=lambda: np.zeros(0))  # float: ARGS, else NaN
    arg1: np.ndarray = field(default_factory=lambda: np.zeros(0))
    arg2: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        for name in ("arg0", "arg1", "arg2"):
            if len(getattr(self, name)) != len(self.name):
                setattr(self, name, np.full(len(self.name), np.nan))

    def within(self, start_ns: int, end_ns: int) -> ChromeSlices:
        """The slices that started in [start_ns, end_ns)."""
        mask = (self.start_ns >= start_ns) & (self.start_ns < end_ns)
        return ChromeSlices(*(getattr(self, f)[mask] for f in self.__dataclass_fields__))

    def of(self, function: str) -> ChromeSlices:
        """The slices of one function, in time order."""
        mask = self.name == FUNCTIONS.index(function)
        order = np.argsort(self.start_ns[mask], kind="stable")
        return ChromeSlices(*(getattr(self, f)[mask][order] for f in self.__dataclass_fields__))


def chrome_trace_path(records_dir: Path, browser: str) -> Path:
    """Where a browser's trace goes: a directory of its own, as Chromium writes to a
    temporary file beside it and renames it when tracing ends."""
    return records_dir / TRACES / browser / f"{browser}{TRACE_SUFFIX}"


def find_chrome_trace(records_dir: Path, browser: str) -> Path | None:
    """A browser's trace: the renamed file, else the temporary file a browser stopped
    before renaming it (it holds every packet written), else none."""
    path = chrome_trace_path(records_dir, browser)
    if path.is_file():
        return path
    partial = sorted(path.parent.glob(".org.chromium.*")) if path.parent.is_dir() else []
    return partial[-1] if partial else None


def read_chrome_trace(path: Path) -> ChromeSlices:
    """The followed functions' slices in a Chromium Perfetto trace.

    A trace cut short (the browser was killed) keeps every complete packet; a file
    that is not a Perfetto trace at all is a ``TraceError`` naming it.
    """
    from google.protobuf.message import DecodeError
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    trace = pb.Trace()
    data = path.read_bytes()
    try:
        trace.ParseFromString(data)
    except DecodeError:
        trace = _complete_packets(pb, data, path)
    return _slices(trace.packet)


def _complete_packets(pb: object, data: bytes, path: Path) -> object:
    """The packets before the first damaged one (a file cut mid-packet)."""
    from google.protobuf.message import DecodeError

    trace = pb.Trace()  # type: ignore[attr-defined]
    offset = 0
    while offset < len(data):
        if data[offset] != 0x0A:  # field 1 (packet), length-delimited
            break
        length, start = _varint(data, offset + 1)
        if start + length > len(data):
            break
        try:
            trace.packet.add().ParseFromString(data[start : start + length])
        except DecodeError:
            trace.packet.pop()
            break
        offset = start + length
    if not trace.packet:
        raise TraceError(f"{path}: not a Perfetto trace")
    return trace


def _varint(data: bytes, offset: int) -> tuple[int, int]:
    value, shift = 0, 0
    while offset < len(data):
        byte = data[offset]
        value |= (byte & 0x7F) << shift
        offset += 1
        if not byte & 0x80:
            break
        shift += 7
    return value, offset


class _Sequence:
    """What a packet sequence (one writer thread) carries from packet to packet."""

    def __init__(self) -> None:
        self.default_clock = 0  # the clock of packets that name none
        self.incremental = -1  # the sequence's incremental clock
        self.unit_ns = 1
        self.clock = 0  # the incremental clock's last value, in its units
        self.anchor_ns: int | None = None  # CLOCK_MONOTONIC at its value 0
        self.names: dict[int, str] = {}
        self.arg_names: dict[int, str] = {}
        self.default_track = 0
        # track -> stack of (name, start, its ARGS)
        self.open: dict[int, list[tuple[int, int, tuple[float, ...]]]] = {}

    def time_ns(self, packet: object) -> int | None:
        """The packet's CLOCK_MONOTONIC time (advancing the incremental clock)."""
        clock = packet.timestamp_clock_id or self.default_clock  # type: ignore[attr-defined]
        if clock == MONOTONIC:
            return int(packet.timestamp)  # type: ignore[attr-defined]
        if clock != self.incremental or self.anchor_ns is None:
            return None
        self.clock += packet.timestamp  # type: ignore[attr-defined]
        return self.anchor_ns + self.clock * self.unit_ns

    def anchor(self, snapshot: object) -> None:
        """Anchor the incremental clock to CLOCK_MONOTONIC (a new reference value)."""
        clocks = {c.clock_id: c for c in snapshot.clocks}  # type: ignore[attr-defined]
        incremental = next((c for c in clocks.values() if c.is_incremental), None)
        monotonic = clocks.get(MONOTONIC)
        if incremental is None or monotonic is None:
            return
        self.incremental = incremental.clock_id
        self.unit_ns = incremental.unit_multiplier_ns or 1
        self.clock = incremental.timestamp
        self.anchor_ns = monotonic.timestamp - incremental.timestamp * self.unit_ns


def _args(event: object, names: dict[int, str], wanted: tuple[str, ...]) -> tuple[float, ...]:
    """The values of the ``wanted`` debug annotations of an event (NaN where absent),
    three of them."""
    values = dict.fromkeys(wanted, np.nan)
    for note in event.debug_annotations:  # type: ignore[attr-defined]
        key = note.name or names.get(note.name_iid, "")
        if key in values:
            kind = note.WhichOneof("value")
            if kind in ("double_value", "int_value", "uint_value"):
                values[key] = float(getattr(note, kind))
    return (*(values[w] for w in wanted), *NO_ARGS)[:3]


def _slices(packets: object) -> ChromeSlices:
    """Pair slice begins and ends per track; keep the followed functions.

    One pass over every packet (a 50 s call traces about 480 000), so the loop asks each
    packet only what it holds (``WhichOneof``) and keeps the sequence of the packet before,
    which the next one almost always shares."""
    wanted = {name: i for i, name in enumerate(FUNCTIONS)}
    sequences: dict[int, _Sequence] = {}
    rows: list[tuple[int, int, int, int]] = []
    args: list[tuple[float, ...]] = []
    seq_id, seq = -1, _Sequence()
    for packet in packets:  # type: ignore[attr-defined]
        if packet.trusted_packet_sequence_id != seq_id:
            seq_id = packet.trusted_packet_sequence_id
            seq = sequences.setdefault(seq_id, _Sequence())
        if packet.sequence_flags & SEQUENCE_CLEARED:
            seq.names.clear()
            seq.arg_names.clear()
        if packet.HasField("trace_packet_defaults"):
            defaults = packet.trace_packet_defaults
            seq.default_clock = defaults.timestamp_clock_id
            seq.default_track = defaults.track_event_defaults.track_uuid
        data = packet.WhichOneof("data")
        if data == "clock_snapshot":
            seq.anchor(packet.clock_snapshot)
            continue
        if packet.HasField("interned_data"):
            for entry in packet.interned_data.event_names:
                seq.names[entry.iid] = entry.name
            for entry in packet.interned_data.debug_annotation_names:
                seq.arg_names[entry.iid] = entry.name
        if not packet.HasField("timestamp"):
            continue
        t_ns = seq.time_ns(packet)  # every packet's: an incremental clock advances
        if t_ns is None or data != "track_event":
            continue
        event = packet.track_event
        kind, track = event.type, event.track_uuid or seq.default_track
        stack = seq.open.setdefault(track, [])
        if kind == SLICE_END:
            if stack:
                name_index, start, found = stack.pop()
                if name_index >= 0:
                    rows.append((name_index, track, start, t_ns - start))
                    args.append(found)
            continue
        if kind not in (SLICE_BEGIN, INSTANT):
            continue
        name = event.name or seq.names.get(event.name_iid, "")
        index = wanted.get(name, -1)
        found = _args(event, seq.arg_names, ARGS[name]) if name in ARGS else NO_ARGS
        if kind == SLICE_BEGIN:
            stack.append((index, t_ns, found))
        elif index >= 0:
            rows.append((index, track, t_ns, 0))
            args.append(found)
    table = np.array(rows, np.int64).reshape(-1, 4) if rows else np.zeros((0, 4), np.int64)
    values = np.array(args, np.float64).reshape(-1, 3)
    return ChromeSlices(
        table[:, 0], table[:, 1].astype(np.uint64), table[:, 2].copy(), table[:, 3].copy(),
        values[:, 0].copy(), values[:, 1].copy(), values[:, 2].copy(),
    )  # fmt: skip
