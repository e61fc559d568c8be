"""latlab-kuprobe: kernel receive -> application read per packet, on loopback and in a run."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from latlab.ingest.events import load_run
from latlab.ingest.trace_format import Kind
from latlab.lab.runner import LATLAB_PROGRAMS, run_scenario
from latlab.lab.scenario import load_scenario
from latlab.pipeline import analyze_run
from latlab.tracer import is_built

REPO = Path(__file__).resolve().parent.parent
PROBE = LATLAB_PROGRAMS["latlab-kuprobe"]
pytestmark = pytest.mark.skipif(not PROBE.is_file(), reason="latlab-kuprobe not built")
SSRC = 0x1234ABCD
PLANTED_S = 0.05


def rtp(seq: int, ts: int) -> bytes:
    return struct.pack("!BBHII", 0x80, 96, seq, ts, SSRC) + bytes(192)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_probe(tmp_path: Path, port: int) -> subprocess.Popen[str]:
    env = {**os.environ, "LATLAB_TRACE_DIR": str(tmp_path), "LATLAB_PROCESS": "ku"}
    probe = subprocess.Popen(
        [str(PROBE), "--port", str(port), "--bind", "127.0.0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert probe.stdout is not None and probe.stdout.readline().startswith("ready")
    return probe


def wait_state(pid: int, state: str) -> None:
    """Wait until /proc/PID/stat shows the process in ``state`` (e.g. 'T' stopped)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat[stat.rindex(")") + 2] == state:
            return
        time.sleep(0.001)
    raise AssertionError(f"process {pid} never reached state {state}")


def rx_queue(port: int) -> int | None:
    """Bytes waiting in the receive queue of the UDP socket on ``port`` (/proc/net/udp)."""
    for line in Path("/proc/net/udp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1].endswith(f":{port:04X}"):
            return int(fields[4].split(":")[1], 16)
    return None


def wait_read(port: int) -> None:
    """Wait until the probe has read everything sent to ``port``."""
    deadline = time.monotonic() + 5
    while rx_queue(port) != 0:
        assert time.monotonic() < deadline, "the probe did not read its packets"
        time.sleep(0.001)


@pytest.mark.exclusive
@pytest.mark.e2e
def test_loopback_packets_and_a_planted_read_delay(tmp_path: Path) -> None:
    port = free_port()
    probe = start_probe(tmp_path, port)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
        for seq in range(50):
            tx.sendto(rtp(seq, seq * 48), ("127.0.0.1", port))
        wait_read(port)
        # The probe cannot read while stopped: the next packet waits in its socket.
        os.kill(probe.pid, signal.SIGSTOP)
        wait_state(probe.pid, "T")
        tx.sendto(rtp(50, 50 * 48), ("127.0.0.1", port))
        time.sleep(PLANTED_S)  # the planted delay between kernel receive and read
        os.kill(probe.pid, signal.SIGCONT)
        tx.sendto(b"not rtp", ("127.0.0.1", port))
        time.sleep(0.05)
    probe.send_signal(signal.SIGINT)
    _, err = probe.communicate(timeout=5)
    assert probe.returncode == 0, err
    assert "52 packets (51 RTP), 0 without a kernel timestamp" in err

    table = load_run(tmp_path)
    names = {p.name: p for p in table.probes}
    assert set(names) == {"ku/kernel:src", "ku/app:sink"}
    kernel, app = names["ku/kernel:src"], names["ku/app:sink"]
    assert kernel.kind == Kind.PUSH and kernel.element_is_source and app.kind == Kind.DONE
    t_kernel = table.probe_column(kernel.index, "t_ns").astype(np.int64)
    t_app = table.probe_column(app.index, "t_ns").astype(np.int64)
    seq = table.probe_column(kernel.index, "seq")
    assert list(seq[:51]) == list(range(51))
    assert set(table.probe_column(kernel.index, "ssrc")[:51]) == {SSRC}
    delay_s = (t_app - t_kernel) / 1e9
    assert (delay_s > 0).all()  # read after the kernel received it
    assert PLANTED_S <= delay_s[50] < PLANTED_S + 0.05
    assert np.median(delay_s[:50]) < 0.005
    # kernel times are on CLOCK_MONOTONIC: within this test's span
    assert t_kernel.min() > time.monotonic_ns() - 60e9


@pytest.mark.e2e
def test_bad_arguments_are_one_line(tmp_path: Path) -> None:
    result = subprocess.run([str(PROBE), "--port", "x"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stderr == "latlab-kuprobe: bad port 'x'\n"


@pytest.mark.exclusive
@pytest.mark.e2e
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
@pytest.mark.skipif(not is_built(), reason="tracer not built")
def test_ku_latency_scenario(tmp_path: Path) -> None:
    scenario = load_scenario(REPO / "scenarios" / "ku-latency.toml").with_duration(2)
    out = tmp_path / "run"
    run_scenario(scenario, out, progress=False)
    summary, _, _ = analyze_run(out)
    streams = {s["id"].split("/")[0]: s for s in summary["streams"]}
    assert set(streams) == {"sender1ms", "sender5ms", "sender20ms"}
    for name, stream in streams.items():
        probe = name.replace("sender", "probe")
        assert stream["probes"][-2:] == [f"{probe}/kernel:src", f"{probe}/app:sink"]
        ku = stream["segments"][-1]
        assert ku["from"] == f"{probe}/kernel:src" and ku["to"] == f"{probe}/app:sink"
        assert ku["negative"] == 0 and ku["min_ms"] > 0
        assert ku["p50_ms"] < 2.0
        assert stream["lost"] == 0 and stream["complete_units"] >= 150  # 10 ms units, 2 s
