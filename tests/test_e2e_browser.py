"""A browser-to-browser Opus call, stitched per frame: a planted link delay lands in transport.

Two headless Chromium peers in namespaces, the real page server and link emulator.
Each frame is followed by its SSRC and RTP timestamp from alice's sender transform,
over the emulated link, to bob's receiver transform, and through his NetEq to his
output device.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from latlab.lab.runner import run_scenario
from latlab.lab.scenario import parse_scenario
from latlab.pipeline import analyze_run
from tests.test_browser_lab import call_scenario, lab

TOLERANCE_MS = 1.0


def _streams(tmp_path: Path, tag: str, delay_ms: float) -> dict[str, dict]:
    text = call_scenario(duration=4, link=f"delay_ms = {delay_ms}")
    out = tmp_path / tag
    run_scenario(parse_scenario(text, f"{tag}.toml"), out, progress=False)
    summary, _, _ = analyze_run(out)
    return {s["id"].split(" ")[0]: s for s in summary["streams"]}


@pytest.mark.exclusive
@lab
def test_planted_link_delay_lands_in_send_and_network(tmp_path: Path) -> None:
    base = _streams(tmp_path, "d10", 10)
    planted = _streams(tmp_path, "d40", 40)
    assert set(base) == set(planted) == {"alice->bob", "bob->alice"}
    for direction in base:
        stream = planted[direction]
        assert stream["media"] == "audio" and stream["unit"] == "20ms"
        assert stream["complete_units"] >= 100  # 4 s of 20 ms Opus frames, minus start-up
        assert stream["segments"][0]["to"].endswith("/sender-transform")
        assert "jitter_buffer" in stream["intervals"] and "playout" in stream["intervals"]
        grew = (
            stream["phases"]["transport"]["p50_ms"]
            - base[direction]["phases"]["transport"]["p50_ms"]
        )
        assert grew == pytest.approx(30.0, abs=TOLERANCE_MS)
        link = [s for s in stream["segments"] if s["to"].endswith(":out")]
        assert link and link[0]["p50_ms"] == pytest.approx(40.0, abs=0.1)  # the link's own delay
        # the study's per-call stages, from each Chromium's own trace of its audio functions
        functions = stream["browser_functions"]
        for stage in ("capture_interval", "encode", "decode", "mix", "render_pull"):
            assert functions[stage]["count"] >= 100, stage
        assert functions["capture_interval"]["p50_ms"] == pytest.approx(10.0, abs=0.5)
        assert functions["playout_interval"]["p50_ms"] == pytest.approx(10.0, abs=0.5)
        assert 0 < functions["decode"]["p50_ms"] < functions["render_pull"]["p99_ms"] < 10
        # past the receiver transform, per unit (stitch.browser_receiver): NetEq's decode
        # and its buffer, then the output device; network is the link and the stacks
        receiver = direction.split("->")[1]
        assert [s["to"] for s in stream["segments"][-3:]] == [
            f"{receiver}/decoded", f"{receiver}/rendered-est", f"{receiver}/played-est"
        ]  # fmt: skip
        kinds = stream["kinds"]
        assert set(kinds) == {"processing", "network", "jitterbuffer", "playout"}
        # the link plus pacer, SRTP and sockets: 40.3-40.6 ms here (a 40 ms link)
        assert kinds["network"]["p50_ms"] == pytest.approx(40.0, abs=2.0)
        assert kinds["jitterbuffer"]["p50_ms"] > 5.0  # NetEq holds at least a packet
        # Chromium reports a 30 ms output delay for its fake output device (per call)
        assert kinds["playout"]["p50_ms"] == pytest.approx(30.0, abs=1.0)
