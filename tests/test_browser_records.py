"""Browser records (docs/browser-records.md) read, placed on the trace clock and stitched.

Synthetic records with known answers: two pages whose clocks are offset from the
server's by known amounts, frames with known capture, encode and network times,
and stats counters with known increments.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from latlab.analysis.browser_intervals import capture_to_playout_ms, interval_figures
from latlab.analysis.segments import analyze
from latlab.ingest.browser_records import clock_offset, read_browser_log, read_browser_logs
from latlab.ingest.events import load_traces
from latlab.ingest.trace_reader import TraceError

SSRC = 0x1234
FRAMES = 200
FRAME_MS = 20.0
ENCODE_MS = 7.0
NETWORK_MS = 31.0
UNPACK_MS = 0.4
LOOKAHEAD_MS = 6.5
PAGE_OFFSET_MS = {"alice": 1_700_000_000_000.0, "bob": 1_700_000_000_003.5}  # page - server


def _write(path: Path, lines: list[dict]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def _page(name: str, server_ms: float) -> float:
    return server_ms + PAGE_OFFSET_MS[name]


def _clock_lines(name: str) -> list[dict]:
    lines = []
    for i in range(20):
        server_ms = 1000.0 + 250 * i
        rtt = 0.2 + 0.1 * (i % 3)
        lines.append(
            {
                "type": "clock",
                "srv_ns": int((server_ms + rtt) * 1e6),
                "srv_realtime_ns": 0,
                "srv_monotonic_ns": int(server_ms * 1e6),
                "page_ms": _page(name, server_ms + rtt / 2),
                "rtt_ms": rtt,
            }
        )
    return lines


def _runs(tmp_path: Path) -> Path:
    (tmp_path / "browsers").mkdir(parents=True)
    capture = 2000.0 + FRAME_MS * np.arange(FRAMES)
    alice = _clock_lines("alice")
    bob = _clock_lines("bob")
    for i, c in enumerate(capture):
        rtp_ts = (4_294_000_000 + 960 * i) % (1 << 32)  # wraps half way
        frame = {"type": "frame", "kind": "audio", "ssrc": SSRC, "rtp_ts": rtp_ts, "bytes": 80}
        alice.append(
            frame
            | {
                "side": "send",
                "t_ms": _page("alice", c + ENCODE_MS),
                "capture_ms": _page("alice", c),
            }
        )
        if i == 50:
            continue  # lost on the way
        arrived = c + ENCODE_MS + NETWORK_MS
        bob.append(
            frame
            | {
                "side": "recv",
                "t_ms": _page("bob", arrived + UNPACK_MS),
                "receive_ms": _page("bob", arrived),
            }
        )
    for k in range(30):  # stats every 200 ms: 40 ms of jitter buffer per emitted sample
        t = 2000.0 + 200 * k
        bob.append(
            {
                "type": "stats",
                "t_ms": _page("bob", t),
                "reports": [
                    {
                        "type": "inbound-rtp",
                        "ssrc": SSRC,
                        "jitterBufferDelay": 0.040 * 9600 * k,
                        "jitterBufferEmittedCount": 9600 * k,
                    }
                ],
            }
        )
        bob.append(
            {
                "type": "sync",
                "t_ms": _page("bob", t),
                "sources": [
                    {
                        "source": SSRC,
                        "timestamp": _page("bob", t),
                        "captureTimestamp": _page("bob", t) - 85.0 + 2_208_988_800_000,
                    }
                ],
            }
        )
    _write(tmp_path / "browsers" / "alice.jsonl", alice)
    _write(tmp_path / "browsers" / "bob.jsonl", bob)
    return tmp_path


def test_page_times_land_on_the_trace_clock(tmp_path: Path) -> None:
    log = read_browser_log(_runs(tmp_path) / "browsers" / "alice.jsonl")
    # the first frame was captured at server 2000 ms
    assert log.frames.capture_ns[0] == pytest.approx(2000e6, abs=1000)
    assert not log.problems


@pytest.mark.parametrize("seed", range(5))
def test_a_busy_page_is_placed_by_its_fastest_clock_pings(seed: int) -> None:
    """Pings 250 ms apart for 40 s, 40 us each way; the page reads its clock after its
    event loop got to the ping (heavy-tailed, 0.6 ms at the median: a page busy
    encoding), the server reads the reply after its own loop's (50 us on average). Every
    ping's half round trip is
    then off by half the difference of those delays; the fastest tenth of the pings
    places the page within 40 us of its true offset (-26 to +11 us over 50 seeds), where
    the median over every ping was 0.18 to 0.41 ms early (as a subscriber under three
    browsers read: 0.18 ms)."""
    rng = np.random.default_rng(seed)
    true_offset = -1_795_741_403_830_000_000  # page ms (Unix) * 1e6 + offset = monotonic
    sent = 5_000_000_000 + np.arange(160) * 250_000_000
    page_busy = rng.pareto(1.5, len(sent)) * 1_000_000
    server_busy = rng.exponential(50_000, len(sent))
    read = sent + 40_000 + page_busy  # when the page read its clock (monotonic)
    answered = read + 40_000 + server_busy
    pings = [{"srv_monotonic_ns": int(s), "page_ms": (r - true_offset) / 1e6,
              "rtt_ms": (a - s) / 1e6}
             for s, r, a in zip(sent, read, answered, strict=True)]  # fmt: skip
    assert abs(clock_offset(pings) - true_offset) < 40_000
    every = np.median([p["srv_monotonic_ns"] + p["rtt_ms"] * 5e5 - p["page_ms"] * 1e6
                       for p in pings])  # fmt: skip
    assert true_offset - every > 150_000


def test_frames_are_stitched_per_direction_with_known_delays(tmp_path: Path) -> None:
    run = _runs(tmp_path)
    logs = read_browser_logs(run)
    (stream,) = analyze(load_traces([], allow_empty=True), browsers=logs)
    j = stream.journeys
    assert j.probe_names == [
        "alice/capture",
        "alice/sender-transform",
        "bob/received",
        "bob/receiver-transform",
    ]
    assert j.unit_ns == 20_000_000
    assert j.counts["lost"] == 1
    # capture -> encoded holds Opus's 6.5 ms look-ahead: a frame codes the 6.5 ms before
    # its RTP time first (its capture is that of its first coded sample)
    expected = [ENCODE_MS + LOOKAHEAD_MS, NETWORK_MS, UNPACK_MS]
    for seg, ms in zip(stream.segments, expected, strict=True):
        assert seg.stats["p50_ms"] == pytest.approx(ms, abs=0.01)
    assert stream.phases["transport"].stats["p50_ms"] == pytest.approx(NETWORK_MS, abs=0.01)
    assert stream.intervals["jitter_buffer"]["p50_ms"] == pytest.approx(40.0)
    assert stream.intervals["capture_to_playout"]["p50_ms"] == pytest.approx(85.0)


def test_intervals_use_increments_not_lifetime_sums(tmp_path: Path) -> None:
    logs = {log.process: log for log in read_browser_logs(_runs(tmp_path))}
    figures = interval_figures(logs["alice"], logs["bob"], SSRC)
    assert figures["jitter_buffer"]["count"] == 29
    assert len(capture_to_playout_ms(logs["bob"], SSRC)) == 30


def test_damaged_lines_are_reported_and_a_log_without_clock_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"type": "console", "text": "hi"}\nnot json\n')
    with pytest.raises(TraceError, match="no clock pings"):
        read_browser_log(path)
    good = _runs(tmp_path / "r") / "browsers" / "bob.jsonl"
    good.write_text(good.read_text() + "{broken\n")
    assert read_browser_log(good).problems == [
        f"line {len(good.read_text().splitlines())} is not JSON (skipped)"
    ]


def test_adaptation_settles_when_the_target_reaches_its_new_level() -> None:
    """A target of 20 ms that climbs to 100 ms in 0.8 s after a link change at t = 4 s."""
    from latlab.analysis.browser_adaptation import adaptation

    t = (np.arange(1, 50) * 0.2e9).astype(np.int64)  # intervals ending every 200 ms
    target = np.where(t <= 4e9, 20.0, np.minimum(20.0 + (t - 4e9) / 0.8e9 * 80.0, 100.0))
    steps = [
        {"t_ns": 4_000_000_000, "at_s": 4.0, "link": "a-b", "set": {"jitter_ms": 30}},
        {"t_ns": 8_000_000_000, "at_s": 8.0, "link": "a-b", "set": {"jitter_ms": 0}},
    ]
    first, second = adaptation({"t_ns": t, "target_ms": target}, steps)
    assert (first["target_before_ms"], first["target_after_ms"]) == (20.0, 100.0)
    assert first["settled_s"] == pytest.approx(0.8)  # within 10 % of the move from 0.8 s on
    assert not second["changed"] and second["settled_s"] is None


def test_adaptation_of_send_rate_and_latency_down_and_back() -> None:
    """A bandwidth step at 4 s: the send rate is halved by 5.6 s and back 2.2 s after the
    step back at 8 s; the latency jumps in the first interval and falls back by 8.8 s."""
    from latlab.analysis.browser_adaptation import adaptation

    t = (np.arange(1, 70) * 0.2e9).astype(np.int64)
    rate = np.select([t <= 4e9, t <= 5.4e9, t <= 8e9, t <= 10e9], [32.0, 24.0, 16.0, 16.0], 32.0)
    latency = np.where((t > 4e9) & (t <= 8.6e9), 230.0, 40.0)
    steps = [
        {"t_ns": 4_000_000_000, "at_s": 4.0, "link": "a-b", "set": {"rate_kbit": 24}},
        {"t_ns": 8_000_000_000, "at_s": 8.0, "link": "a-b", "set": {"rate_kbit": 1000}},
    ]
    series = {"t_ns": t, "send_kbit_s": rate, "latency_ms": latency}
    down, up = adaptation(series, steps)
    assert "target" not in down and "target_before_ms" not in down  # no target series given
    assert (down["send_rate"]["before"], down["send_rate"]["after"]) == (32.0, 16.0)
    assert down["send_rate"]["settled_s"] == pytest.approx(1.6)  # 16 from the 5.6 s interval
    assert down["latency"]["settled_s"] == pytest.approx(0.2)  # the first interval after
    assert up["send_rate"]["settled_s"] == pytest.approx(2.2)  # 32 again from 10.2 s
    assert up["latency"]["settled_s"] == pytest.approx(0.8)  # 40 ms from 8.8 s
