"""Across clock domains on the real stack (docs/clocks.md): lab hosts with planted clocks
(a time namespace's offset, libllclockskew's rate) stand in for separate machines.

* the clock matrix: five pairs of hosts at once for 20 s (bench/bench_clocks.py's quick
  matrix: offsets of -500 to +500 ms, drifts of -100 to +100 ppm, 5 ms of asymmetry either
  way): the recovered offset and drift are within their stated bounds in every case;
* the planted-delay accuracy test (test_e2e_accuracy.py's scenario) across planted
  clocks: the planted delay lands where it did on one clock, and the network segment,
  now between two clocks, is the one-clock run's within its stated error;
* two separately recorded directories (latlab record on each host, the clock exchange
  beside them) merged: the same journeys, figures and clock errors as the same traffic
  run as one scenario.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench.bench_clocks import QUICK, lab_rows
from latlab.lab.netns import Lab, cleanup_stale
from latlab.lab.scenario import parse_scenario
from latlab.merge import merge_runs
from latlab.pipeline import analysis_of
from tests.conftest import L16_CAPS, RunScenario, segment, two_hosts

pytestmark = pytest.mark.e2e

MATRIX_S = 20
TX_CLOCK = "clock = { offset_ms = 250, drift_ppm = 80 }"
RX_CLOCK = "clock = { offset_ms = -420, drift_ppm = -60 }"
RECEIVER = (f'udpsrc port=5004 caps="{L16_CAPS}" ! rtpjitterbuffer latency=20 '
            "! rtpL16depay ! identity ! fakesink sync=true")  # fmt: skip
SENDER = ("audiotestsrc is-live=true samplesperbuffer=480 {extra}! audio/x-raw,rate=48000,"
          "channels=2 ! identity {sleep}! rtpL16pay ! udpsink host={rx} port=5004")  # fmt: skip


def _with_clocks(text: str) -> str:
    return text.replace("[hosts.tx]\n", f"[hosts.tx]\n{TX_CLOCK}\n").replace(
        "[hosts.rx]\n", f"[hosts.rx]\n{RX_CLOCK}\n"
    )


def _root() -> None:
    if os.geteuid() != 0:
        pytest.skip("network and time namespaces need root")


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    _root()
    return lab_rows(QUICK, MATRIX_S, tmp_path_factory.mktemp("clock-matrix") / "run")


# Not exclusive: the bounds held at a load average of 12-15 (measured beside other work);
# in the parallel e2e part the 20 s overlap other tests.
@pytest.mark.timeout(MATRIX_S + 120)
def test_the_stated_bound_holds_in_every_case(matrix: list[Any]) -> None:
    missed = [(r.case.label, r.error_us, r.bound_us) for r in matrix if not r.held]
    assert missed == []


@pytest.mark.timeout(MATRIX_S + 120)
def test_the_drift_is_within_its_stated_bound_in_every_case(matrix: list[Any]) -> None:
    """The targets over direct links (50 us, 1 ppm) are bench_clocks.py --quick's figures:
    under CI's load the direct links have given 22-51 us, so no test asserts them."""
    missed = [(r.case.label, r.drift_error_ppm, r.drift_bound_ppm) for r in matrix
              if not r.drift_error_ppm <= r.drift_bound_ppm]  # fmt: skip
    assert missed == []


def _planted(extra: str = "", sleep: str = "") -> str:
    sender = SENDER.format(extra=extra, sleep=sleep, rx="${hosts.rx.addr}")
    return two_hosts(RECEIVER, sender, name="clock-planted", duration=3)


@pytest.mark.exclusive
@pytest.mark.timeout(180)
def test_planted_delays_hold_across_planted_clocks(run_and_analyze: RunScenario) -> None:
    """identity sleep-time=7000 on a sender 250 ms ahead and 80 ppm fast, to a receiver
    420 ms behind and 60 ppm slow: it lands in the identity as on one clock (0.3 ms, as
    test_e2e_accuracy.py), and the network segment (now between clocks) is the one-clock
    run's within its stated error (and 0.1 ms of run-to-run spread)."""
    one = run_and_analyze(_planted(), "one-clock")
    two = run_and_analyze(_with_clocks(_planted(sleep="sleep-time=7000 ")), "two-clocks")
    grew = (
        segment(two, "sender/identity0:src")["p50_ms"]
        - segment(one, "sender/identity0:src")["p50_ms"]
    )
    assert grew == pytest.approx(7.0, abs=0.3)
    net_one, net_two = segment(one, "receiver/udpsrc0:src"), segment(two, "receiver/udpsrc0:src")
    assert net_two["cross_domain"] and "clock_err_ms" not in net_one
    assert 0 < net_two["clock_err_ms"] < 0.2  # a direct veth: round trips of 20-150 us
    assert abs(net_two["p50_ms"] - net_one["p50_ms"]) <= net_two["clock_err_ms"] + 0.1
    inside = segment(two, "receiver/rtpjitterbuffer0:src")
    assert not inside["cross_domain"] and inside["clock_err_ms"] == 0
    assert two["clocks"]["pairs"][0]["chosen"] == "exchange"


def _record(
    lab: Lab, host: str, out: Path, name: str, clock: list[str], pipeline: str
) -> subprocess.Popen:
    argv = [sys.executable, "-m", "latlab", "record", "--out", str(out), "--name", name,
            "--no-analyze", "--clock-domain", f"monotonic@{host}", *clock, "--",
            "gst-launch-1.0", "-e", *pipeline.split()]  # fmt: skip
    pipe = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    return subprocess.Popen(lab.exec_argv(host, argv), start_new_session=True, **pipe)


def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.timeout(240)
def test_merge_of_two_recordings_reproduces_the_run(
    tmp_path: Path, run_and_analyze: RunScenario
) -> None:
    """The receiver recorded on rx (serving the clock exchange), the sender on tx (asking
    it), each in its host's planted clock, merged: the same probes and kinds as the same
    pipelines run as one scenario with those clocks; the network segment within both
    runs' clock errors; the receiver's segments within the spread of where a run settles
    (a jitter buffer's hold: 1 ms)."""
    _root()
    receiver = RECEIVER.replace('"', "")
    scenario = parse_scenario(_with_clocks(_planted()), "merge.toml")
    one = run_and_analyze(_with_clocks(_planted()), "as-one-run")
    cleanup_stale()
    with Lab.from_scenario(scenario, run_dir=tmp_path / "lab") as lab:
        rx_addr = lab.addr("rx")
        rx = _record(lab, "rx", tmp_path / "rx", "receiver", ["--clock-serve", "31901"],
                     receiver)  # fmt: skip
        clock_log = tmp_path / "rx" / "clock" / "receiver.jsonl"
        _wait_for(clock_log.is_file, 20, "the receiver's clock agent")
        sender = SENDER.format(extra="num-buffers=400 ", sleep="", rx=rx_addr)
        tx = _record(lab, "tx", tmp_path / "tx", "sender",
                     ["--clock-peer", f"{rx_addr}:31901"], sender)  # fmt: skip
        out, _ = tx.communicate(timeout=60)
        assert tx.returncode == 0, out
        os.killpg(rx.pid, signal.SIGINT)
        out, _ = rx.communicate(timeout=30)
        assert rx.returncode == 0, out
    merge_runs([tmp_path / "tx", tmp_path / "rx"], tmp_path / "merged")
    two = analysis_of(tmp_path / "merged").summary
    (a,), (b,) = one["streams"], two["streams"]
    assert a["probes"] == b["probes"] and [s["kind"] for s in a["segments"]] == [
        s["kind"] for s in b["segments"]
    ]
    assert b["complete_units"] > 300 and b["lost"] == 0
    net_a, net_b = segment(one, "receiver/udpsrc0:src"), segment(two, "receiver/udpsrc0:src")
    # the agents are threads of the recorders here, beside loading pipelines: round trips
    # of 105-270 us (4 ms at start-up), over a 4 s recording: 0.2-0.5 ms measured
    assert net_b["cross_domain"] and net_b["clock_err_ms"] < 1.0
    spread = net_a["clock_err_ms"] + net_b["clock_err_ms"] + 0.1
    assert abs(net_b["p50_ms"] - net_a["p50_ms"]) <= spread
    for probe in ("sender/rtpl16pay0:src", "receiver/rtpl16depay0:src"):
        assert abs(segment(two, probe)["p50_ms"] - segment(one, probe)["p50_ms"]) <= 1.0
    assert two["clocks"]["reference"] == "monotonic@tx"
