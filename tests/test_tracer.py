"""The tracer in real GStreamer processes: completeness on every kind of exit, bounded memory."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from latlab.ingest.trace_format import EventFlag, Kind
from latlab.ingest.trace_reader import read_trace
from latlab.tracer import tracer_env

pytestmark = pytest.mark.e2e

LIVE = ["audiotestsrc", "is-live=true", "samplesperbuffer=480", "!", "queue", "!",
        "fakesink", "sync=true"]  # fmt: skip
POLL_S = 0.01


def start(tmp_path: Path, argv: list[str], tracers: str = "latlab") -> subprocess.Popen:
    env = {**os.environ, **tracer_env(tmp_path, "p"), "GST_TRACERS": tracers}
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def wait_for_events(path_dir: Path, count: int, timeout_s: float = 20.0) -> Path:
    """Wait until a trace in ``path_dir`` holds at least ``count`` events on disk."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for path in path_dir.glob("*.lltrace"):
            if len(read_trace(path).events) >= count:
                return path
        time.sleep(POLL_S)  # polling an observable condition, not standing in for one
    raise AssertionError(f"no trace with {count} events in {path_dir}")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_trace_is_complete_after_a_signal(tmp_path: Path, signum: int) -> None:
    proc = start(tmp_path, ["gst-launch-1.0", "-e", *LIVE])
    path = wait_for_events(tmp_path, 50)
    proc.send_signal(signum)
    proc.wait(timeout=20)
    trace = read_trace(path)
    assert trace.complete, trace.problems
    assert trace.dropped == 0


def test_trace_is_complete_after_eos(tmp_path: Path) -> None:
    argv = ["gst-launch-1.0", "audiotestsrc", "num-buffers=50", "!", "fakesink"]
    assert subprocess.run(argv, env={**os.environ, **tracer_env(tmp_path, "p")},
                          capture_output=True, check=False, timeout=60).returncode == 0  # fmt: skip
    (path,) = tmp_path.glob("*.lltrace")
    trace = read_trace(path)
    assert trace.complete
    kinds = np.bincount(trace.events["kind"], minlength=3)
    assert list(kinds) == [50, 50, 1]  # 50 pushes into the sink, 50 renders, one EOS


def test_a_crash_loses_at_most_the_last_second(tmp_path: Path) -> None:
    proc = start(tmp_path, ["gst-launch-1.0", *LIVE])
    path = wait_for_events(tmp_path, 200)
    killed_at = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    trace = read_trace(path)
    assert not trace.complete
    last = int(trace.events["t_ns"].max())
    assert killed_at - last < 1_000_000_000


def test_a_writer_that_falls_behind_drops_and_counts(tmp_path: Path) -> None:
    buffers = 200_000
    argv = ["gst-launch-1.0", "fakesrc", f"num-buffers={buffers}", "!", "identity", "!",
            "fakesink"]  # fmt: skip
    env = {**os.environ, **tracer_env(tmp_path, "p"), "GST_TRACERS": "latlab(ring=64)"}
    subprocess.run(argv, env=env, capture_output=True, check=True, timeout=60)
    (path,) = tmp_path.glob("*.lltrace")
    trace = read_trace(path)
    assert trace.complete
    assert trace.dropped > 0
    # fakesrc:src and identity:src pushes, renders into the sink, and two EOS events
    assert len(trace.events) + trace.dropped == 3 * buffers + 2


def test_records_rtp_fields_and_render_instants(tmp_path: Path) -> None:
    argv = ["gst-launch-1.0", "audiotestsrc", "num-buffers=30", "!", "rtpL16pay", "pt=97", "!",
            "fakesink", "sync=true"]  # fmt: skip
    subprocess.run(argv, env={**os.environ, **tracer_env(tmp_path, "p")}, capture_output=True,
                   check=True, timeout=60)  # fmt: skip
    (path,) = tmp_path.glob("*.lltrace")
    trace = read_trace(path)
    pay = next(p.pad_id for p in trace.pads.values() if p.element.startswith("rtpl16pay"))
    ev = trace.events[trace.events["pad_id"] == pay]
    pushes, done = ev[ev["kind"] == 0], ev[ev["kind"] == 1]
    assert np.all(pushes["event_flags"] & 1)
    assert set(pushes["rtp_pt"] & 0x7F) == {97}
    assert np.all(np.diff(pushes["rtp_seq"].astype(np.int64)) % 65536 == 1)
    assert len(done) == len(pushes)
    np.testing.assert_array_equal(done["rtp_seq"], pushes["rtp_seq"])
    assert np.all(done["t_ns"] >= pushes["t_ns"])
    assert trace.clocks and any(c.state == 4 for c in trace.clocks)


DELTA_UNIT = 1 << 13  # GST_BUFFER_FLAG_DELTA_UNIT
H264_TS = ["videotestsrc", "is-live=true", "pattern=ball", "!",
           "video/x-raw,width=320,height=240,framerate=30/1", "!",
           "x264enc", "tune=zerolatency", "key-int-max=15", "!", "mpegtsmux"]  # fmt: skip


def pad_events(trace, factory: str) -> np.ndarray:
    """The records of the (single) source pad of the element made by ``factory``."""
    (pad,) = [p.pad_id for p in trace.pads.values() if p.factory == factory and p.pad != "sink"]
    return trace.events[trace.events["pad_id"] == pad]


def video_pes(events: np.ndarray) -> np.ndarray:
    """The ``pes`` records of the video stream (stream_id 0xE0) among ``events``."""
    return events[(events["kind"] == Kind.PES) & (events["rtp_pt"] == 0xE0)]


def test_pes_records_follow_frames_through_mpegtsmux(tmp_path: Path) -> None:
    argv = ["gst-launch-1.0", H264_TS[0], "num-buffers=60", *H264_TS[1:], "!", "fakesink"]
    subprocess.run(argv, env={**os.environ, **tracer_env(tmp_path, "p")}, capture_output=True,
                   check=True, timeout=60)  # fmt: skip
    (path,) = tmp_path.glob("*.lltrace")
    trace = read_trace(path)
    enc = pad_events(trace, "x264enc")
    frames = enc[enc["kind"] == Kind.PUSH]
    pes = video_pes(pad_events(trace, "mpegtsmux"))
    assert len(frames) == len(pes) == 60
    assert set(pes["rtp_ssrc"]) == {65}  # mpegtsmux's first PID
    ticks = frames["pts"].astype(object) * 9 // 100_000
    offsets = [(int(p) - t) % 2**33 for p, t in zip(pes["pts"], ticks, strict=True)]
    assert max(offsets) - min(offsets) <= 1, sorted(set(offsets))
    np.testing.assert_array_equal(pes["offset_end"][1:], frames["size"][:-1])
    np.testing.assert_array_equal(pes["offset"][1:] <= pes["t_ns"][1:], True)
    keyframes = (frames["buffer_flags"] & DELTA_UNIT) == 0
    random_access = (pes["event_flags"] & EventFlag.RANDOM_ACCESS) != 0
    np.testing.assert_array_equal(random_access, keyframes)
    assert keyframes.sum() == 4  # key-int-max=15 over 60 frames


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_udp_port(port: int, timeout_s: float = 20.0) -> None:
    """Wait until a local UDP socket is bound to ``port``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        bound = Path("/proc/net/udp").read_text().splitlines()[1:]
        if any(line.split()[1].endswith(f":{port:04X}") for line in bound):
            return
        time.sleep(POLL_S)  # polling an observable condition, not standing in for one
    raise AssertionError(f"nothing bound UDP port {port}")


def stop(proc: subprocess.Popen) -> None:
    """SIGINT (gst-launch stops its pipeline and exits), SIGKILL if that takes too long."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=60)


def test_pes_and_stats_across_an_srt_hop(tmp_path: Path) -> None:
    port = free_udp_port()
    uri = f"srt://127.0.0.1:{port}?mode="
    send = ["gst-launch-1.0", H264_TS[0], "num-buffers=150", *H264_TS[1:], "!", "srtsink",
            f"uri={uri}listener", "latency=50"]  # fmt: skip
    recv = ["gst-launch-1.0", "srtsrc", f"uri={uri}caller", "latency=50", "!", "tsdemux", "!",
            "h264parse", "!", "avdec_h264", "!", "fakesink"]  # fmt: skip
    procs = []
    try:
        for name, argv in (("sender", send), ("receiver", recv)):
            env = {**os.environ, **tracer_env(tmp_path, name)}
            procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))  # fmt: skip
            if name == "sender":
                wait_for_udp_port(port)  # the caller fails unless the listener is there
        assert procs[0].wait(timeout=30) == 0  # 150 frames at 30/s, then EOS
    finally:
        for proc in reversed(procs):
            stop(proc)
    (sent,) = [read_trace(p) for p in tmp_path.glob("sender-*.lltrace")]
    (got,) = [read_trace(p) for p in tmp_path.glob("receiver-*.lltrace")]
    assert sent.complete and got.complete
    key = ("rtp_ssrc", "pts")
    sent_pes = {tuple(int(r[k]) for k in key) for r in video_pes(pad_events(sent, "mpegtsmux"))}
    received = video_pes(pad_events(got, "srtsrc"))
    got_pes = {tuple(int(r[k]) for k in key) for r in received}
    assert len(sent_pes) == 150
    assert got_pes <= sent_pes and len(got_pes) >= 140
    # tsdemux puts out one buffer per PES, of exactly the PES's elementary-stream bytes
    demuxed = pad_events(got, "tsdemux")
    demuxed = demuxed[demuxed["kind"] == Kind.PUSH]
    np.testing.assert_array_equal(demuxed["size"][: len(received) - 1], received["offset_end"][1:])
    # while connected; once the peer left, only the byte totals remain
    sink = [s.fields for s in sent.stats if s.factory == "srtsink" and s.fields.get("callers")]
    src = [s.fields for s in got.stats if s.factory == "srtsrc" and "rtt-ms" in s.fields]
    assert len(sink) >= 30 and len(src) >= 30  # every 100 ms for 5 s
    caller, link = sink[-1]["callers"][0], src[-1]  # a listener reports per caller
    assert caller["negotiated-latency-ms"] == 50 and link["negotiated-latency-ms"] == 50
    assert isinstance(caller["rtt-ms"], float) and isinstance(link["rtt-ms"], float)
    assert caller["packets-sent"] > 0 and link["packets-received"] > 0
    assert link["bytes-received-total"] > 0 and sink[-1]["bytes-sent-total"] > 0
