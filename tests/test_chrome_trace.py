"""Chromium's Perfetto trace: slices paired per track, incremental clock anchored to
CLOCK_MONOTONIC, interned names, a file cut short, a file that is no trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from latlab.analysis.browser_functions import function_figures
from latlab.ingest.browser_records import BrowserFrames, BrowserLog
from latlab.ingest.chrome_trace import SINK_UNDERRUN, read_chrome_trace
from latlab.ingest.trace_reader import TraceError

MONO_AT_ANCHOR = 5_000_000_000  # CLOCK_MONOTONIC ns when the incremental clock read ANCHOR_US
ANCHOR_US = 1_000
DECODE = "AudioDecoder::Decode"
CALLBACK = "AudioOutputDevice::FireRenderCallback"


def _sequence(trace: pb.Trace, seq_id: int, track: int) -> None:
    defaults = trace.packet.add(trusted_packet_sequence_id=seq_id)
    defaults.trace_packet_defaults.timestamp_clock_id = 64
    defaults.trace_packet_defaults.track_event_defaults.track_uuid = track
    snapshot = trace.packet.add(trusted_packet_sequence_id=seq_id)
    snapshot.clock_snapshot.clocks.add(clock_id=3, timestamp=MONO_AT_ANCHOR)
    snapshot.clock_snapshot.clocks.add(
        clock_id=64, timestamp=ANCHOR_US, is_incremental=True, unit_multiplier_ns=1000
    )
    names = trace.packet.add(trusted_packet_sequence_id=seq_id, sequence_flags=1)
    names.interned_data.event_names.add(iid=1, name=DECODE)
    names.interned_data.event_names.add(iid=2, name="SomethingElse")
    names.interned_data.event_names.add(iid=3, name=CALLBACK)


def _event(trace: pb.Trace, seq_id: int, delta_us: int, kind: int, name_iid: int = 0) -> None:
    packet = trace.packet.add(trusted_packet_sequence_id=seq_id, timestamp=delta_us)
    packet.track_event.type = kind
    if name_iid:
        packet.track_event.name_iid = name_iid


def _trace() -> pb.Trace:
    """A decode of 38 us with a nested slice, then output callbacks every 10 ms."""
    trace = pb.Trace()
    _sequence(trace, 1, track=7)
    _event(trace, 1, 10, pb.TrackEvent.TYPE_SLICE_BEGIN, 1)  # decode starts at +10 us
    _event(trace, 1, 5, pb.TrackEvent.TYPE_SLICE_BEGIN, 2)  # nested, not followed
    _event(trace, 1, 3, pb.TrackEvent.TYPE_SLICE_END)
    _event(trace, 1, 30, pb.TrackEvent.TYPE_SLICE_END)  # decode ends: 38 us
    _sequence(trace, 2, track=9)
    for _ in range(5):
        _event(trace, 2, 9_900, pb.TrackEvent.TYPE_SLICE_BEGIN, 3)
        _event(trace, 2, 100, pb.TrackEvent.TYPE_SLICE_END)
    return trace


def test_slices_on_the_monotonic_clock(tmp_path: Path) -> None:
    path = tmp_path / "t.pftrace"
    path.write_bytes(_trace().SerializeToString())
    slices = read_chrome_trace(path)
    decode = slices.of(DECODE)
    assert decode.start_ns.tolist() == [MONO_AT_ANCHOR + 10_000]
    assert decode.duration_ns.tolist() == [38_000]
    callbacks = slices.of(CALLBACK)
    assert np.diff(callbacks.start_ns).tolist() == [10_000_000] * 4
    assert set(callbacks.track.tolist()) == {9}


def test_function_figures_per_call(tmp_path: Path) -> None:
    path = tmp_path / "t.pftrace"
    path.write_bytes(_trace().SerializeToString())
    empty = BrowserFrames(*(np.zeros(0, np.int64) for _ in BrowserFrames.__dataclass_fields__))
    log = BrowserLog("bob", tmp_path / "bob.jsonl", 0, empty, functions=read_chrome_trace(path))
    figures = function_figures(None, log)
    assert figures["decode"]["p50_ms"] == pytest.approx(0.038)
    assert figures["playout_interval"]["count"] == 4
    assert figures["playout_interval"]["p50_ms"] == pytest.approx(10.0)
    assert "encode" not in figures  # no sending browser


def test_trace_cut_short_keeps_complete_packets(tmp_path: Path) -> None:
    data = _trace().SerializeToString()
    path = tmp_path / "cut.pftrace"
    path.write_bytes(data[:-3])  # the last callback's end is cut
    callbacks = read_chrome_trace(path).of(CALLBACK)
    assert len(callbacks.start_ns) == 4


def test_not_a_trace_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "junk.pftrace"
    path.write_bytes(b"\xff\x00 this is not a perfetto trace")
    with pytest.raises(TraceError, match=r"junk\.pftrace: not a Perfetto trace"):
        read_chrome_trace(path)


def test_arguments_and_instants(tmp_path: Path) -> None:
    """The renderer's reported output delay (interned argument names) and an instant
    (the WebAudio sink's underrun) as a slice of no duration."""
    trace = pb.Trace()
    _sequence(trace, 1, track=7)
    names = trace.packet.add(trusted_packet_sequence_id=1)
    names.interned_data.event_names.add(iid=10, name="WebRtcAudioRenderer::Render")
    names.interned_data.event_names.add(iid=11, name=SINK_UNDERRUN)
    names.interned_data.debug_annotation_names.add(iid=1, name="playout_delay (ms)")
    begin = trace.packet.add(trusted_packet_sequence_id=1, timestamp=100)
    begin.track_event.type = pb.TrackEvent.TYPE_SLICE_BEGIN
    begin.track_event.name_iid = 10
    begin.track_event.debug_annotations.add(name="delay_timestamp (ms)", double_value=5000.25)
    begin.track_event.debug_annotations.add(name_iid=1, double_value=30.5)
    _event(trace, 1, 40, pb.TrackEvent.TYPE_SLICE_END)
    _event(trace, 1, 60, pb.TrackEvent.TYPE_INSTANT, 11)
    path = tmp_path / "t.pftrace"
    path.write_bytes(trace.SerializeToString())
    slices = read_chrome_trace(path)
    render = slices.of("WebRtcAudioRenderer::Render")
    assert render.start_ns.tolist() == [MONO_AT_ANCHOR + 100_000]
    assert (render.arg0[0], render.arg1[0]) == (5000.25, 30.5)
    assert np.isnan(render.arg2[0])
    underrun = slices.of(SINK_UNDERRUN)
    assert underrun.start_ns.tolist() == [MONO_AT_ANCHOR + 200_000]
    assert underrun.duration_ns.tolist() == [0]
    assert np.isnan(slices.of(DECODE).arg0).all()
