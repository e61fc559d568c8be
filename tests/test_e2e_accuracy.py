"""Planted delays on real GStreamer pipelines land in the right segment.

Each test runs the two-host scenario with a delay whose size is known (a queue's
min-threshold-time, identity's sleep-time, a jitter buffer's latency, a payload
time), and checks that the segment where it
was planted grew by that much at p50 (within 0.3 ms) over one shared run without
it. Differences cancel what the pipeline itself costs, which no test could know in
advance.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from latlab.lab.runner import run_scenario
from latlab.lab.scenario import parse_scenario
from latlab.pipeline import analysis_of
from tests.conftest import L16_CAPS, RunScenario, segment, two_hosts

pytestmark = pytest.mark.e2e

TOLERANCE_MS = 0.3

PARAMS = """[params]
rx_extra = "identity"
tx_extra = "identity"
jb_latency = "20"
ptime_ns = "10000000"
"""
SCENARIO = two_hosts(
    f'udpsrc port=5004 caps="{L16_CAPS}" ! rtpjitterbuffer latency=${{params.jb_latency}} '
    "! rtpL16depay ! ${params.rx_extra} ! fakesink sync=true",
    "audiotestsrc is-live=true samplesperbuffer=480 ! audio/x-raw,rate=48000,channels=2 "
    "! ${params.tx_extra} ! rtpL16pay mtu=9000 min-ptime=${params.ptime_ns} "
    "max-ptime=${params.ptime_ns} ! udpsink host=${hosts.rx.addr} port=5004",
    name="planted",
    duration=3,
    head=PARAMS,
)

QUEUE = "queue max-size-time=0 max-size-buffers=0 max-size-bytes=0 min-threshold-time={}"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """summary.json of the scenario without a planted delay, shared by the tests whose
    pipelines have its shape (an identity on each side)."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    out = tmp_path_factory.mktemp("accuracy") / "base"
    scenario = parse_scenario(SCENARIO, "base.toml")
    run_scenario(scenario, out, progress=False)
    return analysis_of(out, scenario.analysis.unit_ms).summary


def _grew(base: dict, planted: dict, probe: str, stat: str = "p50_ms") -> float:
    return segment(planted, probe)[stat] - segment(base, probe)[stat]


@pytest.mark.exclusive
def test_queue_min_threshold_lands_in_the_queue(run_and_analyze: RunScenario) -> None:
    """A queue between jitter buffer and sink takes the sink's back-pressure off the jitter
    buffer, so this test has a base of its own with the queue (min-threshold 0)."""
    base = run_and_analyze(SCENARIO, "base", rx_extra=QUEUE.format(0))
    planted = run_and_analyze(SCENARIO, "planted", rx_extra=QUEUE.format(30_000_000))
    assert segment(planted, "queue0:src")["kind"] == "queue"
    assert _grew(base, planted, "queue0:src") == pytest.approx(30.0, abs=TOLERANCE_MS)


@pytest.mark.exclusive
def test_identity_sleep_lands_in_identity(base: dict, run_and_analyze: RunScenario) -> None:
    planted = run_and_analyze(SCENARIO, "planted", tx_extra="identity sleep-time=7000")
    assert segment(planted, "sender/identity0:src")["kind"] == "processing"
    assert _grew(base, planted, "sender/identity0:src") == pytest.approx(7.0, abs=TOLERANCE_MS)


@pytest.mark.exclusive
def test_jitterbuffer_latency_lands_in_the_jitterbuffer(
    base: dict, run_and_analyze: RunScenario
) -> None:
    planted = run_and_analyze(SCENARIO, "planted", jb_latency="50")
    assert segment(planted, "rtpjitterbuffer0:src")["kind"] == "jitterbuffer"
    assert _grew(base, planted, "rtpjitterbuffer0:src") == pytest.approx(30.0, abs=TOLERANCE_MS)


@pytest.mark.exclusive
def test_payload_time_lands_in_the_payloader(base: dict, run_and_analyze: RunScenario) -> None:
    """With 10 ms buffers and 40 ms packets, units wait 30, 20, 10 and 0 ms: 15 ms more."""
    planted = run_and_analyze(SCENARIO, "planted", ptime_ns="40000000")
    assert _grew(base, planted, "rtpl16pay0:src", "mean_ms") == pytest.approx(
        15.0, abs=TOLERANCE_MS
    )
    # a quarter of the units wait the longest (30 ms): p90 sits there; the max is one outlier
    assert _grew(base, planted, "rtpl16pay0:src", "p90_ms") == pytest.approx(30.0, abs=1.0)


@pytest.mark.exclusive
def test_segment_means_add_up_and_nothing_is_lost(base: dict) -> None:
    (stream,) = base["streams"]
    total = sum(s["mean_ms"] for s in stream["segments"])
    assert total == pytest.approx(stream["end_to_end"]["mean_ms"], abs=0.01)
    assert stream["lost"] == 0 and stream["late"] == 0
    assert stream["complete_units"] == stream["units"] > 250
    assert stream["probes"][0] == "sender/audiotestsrc0:capture"
    assert stream["probes"][-1] == "receiver/fakesink0:sink"
    kinds = [s["kind"] for s in stream["segments"]]
    assert kinds[0] == "capture" and kinds[-1] == "playout"
    assert "network" in kinds and "jitterbuffer" in kinds
