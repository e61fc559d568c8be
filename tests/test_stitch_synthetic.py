"""Stitching on synthetic runs whose true journey times are known."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from latlab.analysis.segments import analyze
from latlab.ingest.events import load_run, load_traces
from latlab.ingest.link_events import link_trace
from latlab.synthetic import MS, SyntheticRtpAudio, make_rtp_audio_run


def _stitch(tmp_path: Path, params: SyntheticRtpAudio):
    truth = make_rtp_audio_run(tmp_path, params)
    (stream,) = analyze(load_run(tmp_path))
    journeys = stream.journeys
    first_unit = int(journeys.unit_start[0] // params.source_period)
    expected = truth.truth[first_unit : first_unit + len(journeys.unit_start)]
    return truth, stream, journeys, expected


@pytest.mark.parametrize(
    "params",
    [
        SyntheticRtpAudio(units=1501),  # a last buffer that never fills a packet
        SyntheticRtpAudio(units=1500, ptime=10 * MS, split=10 * MS),
        SyntheticRtpAudio(units=1500, ptime=40 * MS, split=5 * MS, network_jitter=2 * MS),
        SyntheticRtpAudio(
            units=3000, loss=0.03, duplicate=0.02, reorder=0.02, seed=7, network_jitter=1 * MS
        ),
    ],
    ids=["plain-odd-units", "no-reframing", "reframing-jitter", "loss-dup-reorder"],
)
def test_every_passage_matches_the_truth(tmp_path: Path, params: SyntheticRtpAudio) -> None:
    _, _, journeys, expected = _stitch(tmp_path, params)
    assert journeys.probe_names[0] == "sender/audiotestsrc0:capture"
    assert journeys.probe_names[-1] == "receiver/fakesink0:sink"
    assert journeys.times.shape == expected.shape
    np.testing.assert_array_equal(journeys.times, expected)


def test_loss_duplicates_and_reordering_are_counted(tmp_path: Path) -> None:
    params = SyntheticRtpAudio(units=4000, loss=0.02, duplicate=0.01, reorder=0.01, seed=3)
    truth, _, journeys, expected = _stitch(tmp_path, params)
    units_per_packet = params.ptime // params.source_period
    lost_units_expected = int(np.sum((expected[:, 5] < 0) & (expected[:, 4] >= 0)))
    assert truth.packets_lost > 0
    assert journeys.counts["lost"] == lost_units_expected
    assert journeys.counts["lost"] % units_per_packet == 0
    assert journeys.counts["duplicated"] == truth.packets_duplicated
    assert journeys.counts["reordered"] == truth.packets_reordered


def test_late_packets_dropped_by_the_jitter_buffer_are_late_not_lost(tmp_path: Path) -> None:
    params = SyntheticRtpAudio(
        units=3000, network_jitter=8 * MS, jitterbuffer_latency=10 * MS, seed=11
    )
    _, _, journeys, expected = _stitch(tmp_path, params)
    late_expected = int(np.sum((expected[:, 5] >= 0) & (expected[:, 6] < 0)))
    assert late_expected > 0
    assert journeys.counts["late"] == late_expected
    assert journeys.counts["lost"] == 0


def test_segment_means_add_up_to_end_to_end(tmp_path: Path) -> None:
    _, stream, _, _ = _stitch(tmp_path, SyntheticRtpAudio(units=2000, network_jitter=MS, loss=0.01))
    total = sum(seg.stats["mean_ms"] for seg in stream.segments)
    assert abs(total - stream.end_to_end.stats["mean_ms"]) < 0.01


def test_planted_delays_land_in_their_segments(tmp_path: Path) -> None:
    params = SyntheticRtpAudio(units=2000, network_delay=7 * MS, jitterbuffer_latency=30 * MS)
    _, stream, _, _ = _stitch(tmp_path, params)
    by_target = {seg.to_probe: seg for seg in stream.segments}
    network = by_target["receiver/udpsrc0:src"]
    assert network.kind == "network"
    assert network.stats["p50_ms"] == pytest.approx(7.0, abs=1e-6)
    assert by_target["sender/udpsink0:sink"].kind == "sink-wait"  # its clock wait, not the wire
    assert stream.kinds["network"].stats["p50_ms"] == pytest.approx(7.0, abs=1e-6)
    capture = by_target["sender/audiotestsrc0:src"]
    assert capture.kind == "capture"
    assert capture.stats["min_ms"] == pytest.approx(10.0, abs=1e-6)


def test_thread_handoffs_are_counted(tmp_path: Path) -> None:
    _, stream, _, _ = _stitch(tmp_path, SyntheticRtpAudio(units=500))
    # sender thread -> receiver udpsrc thread -> receiver jitterbuffer thread
    assert stream.handoffs["min"] == stream.handoffs["max"] == 2


def test_an_emulated_link_becomes_two_probes_of_the_journey(tmp_path: Path) -> None:
    params = SyntheticRtpAudio(units=2000, loss=0.02, duplicate=0.01, link_in_delay=60_000,
                               network_delay=20 * MS, seed=5)  # fmt: skip
    truth = make_rtp_audio_run(tmp_path, params)
    link = link_trace(tmp_path / "links" / "tx-rx.lllink", truth.link_columns, {0: "tx->rx"})
    (stream,) = analyze(load_traces(sorted(tmp_path.glob("*.lltrace")), extra=[link]))
    journeys = stream.journeys
    assert journeys.probe_names == truth.probe_names
    first_unit = int(journeys.unit_start[0] // params.source_period)
    expected = truth.truth[first_unit : first_unit + len(journeys.unit_start)]
    np.testing.assert_array_equal(journeys.times, expected)
    kinds = dict(zip(journeys.probe_names[1:], journeys.segment_kinds, strict=True))
    assert kinds["link/tx->rx:in"] == kinds["link/tx->rx:out"] == "network"
    lost_expected = int(np.sum((expected[:, 5] >= 0) & (expected[:, 7] < 0)))
    assert journeys.counts["lost"] == lost_expected > 0
    assert journeys.counts["late"] == 0
    link_segment = next(s for s in stream.segments if s.to_probe == "link/tx->rx:out")
    assert link_segment.stats["p50_ms"] > 19.0


def test_receiver_timestamps_with_skew_leave_no_gaps(tmp_path: Path) -> None:
    """A jitter buffer in slave mode stretches PTS; re-framed buffers keep nominal durations."""
    params = SyntheticRtpAudio(units=3000, receiver_skew_ppm=6400, split=5 * MS)
    _, _, journeys, expected = _stitch(tmp_path, params)
    assert journeys.complete.sum() == len(journeys.complete)
    np.testing.assert_array_equal(journeys.times, expected)
