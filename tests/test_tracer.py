"""The tracer in real GStreamer processes: completeness on every kind of exit, bounded memory."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

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
                          capture_output=True, check=False).returncode == 0  # fmt: skip
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
    subprocess.run(argv, env=env, capture_output=True, check=True)
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
                   check=True)  # fmt: skip
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
