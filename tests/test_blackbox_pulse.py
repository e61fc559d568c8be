"""The black box with PulseAudio devices as its ends (``latlab.lab.pulse_signal``): the
rig plays the time-coded signal into the sender's null sink, which the sender captures
from its monitor, and records the receiver's monitor (scenarios/l16-pulse-blackbox.toml).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from latlab.lab.devices import pulse_sink
from latlab.rundir import BLACKBOX_FILE as CODES_FILE
from latlab.rundir import INJECTED_WAV, RECEIVED_WAV
from tests.conftest import (
    black_box_shifts,
    latlab,
    planted_link_delays,
    rig_code_delays,
    signal_on_one_device,
)

REPO = Path(__file__).resolve().parents[1]
SCENARIO = REPO / "scenarios" / "l16-pulse-blackbox.toml"
RIG = [sys.executable, "-m", "latlab.lab.pulse_signal"]
PERIOD_MS = 10.0  # the scenario's devices

pytestmark = pytest.mark.skipif(
    shutil.which("pulseaudio") is None or os.geteuid() != 0,
    reason="needs PulseAudio and root (network namespaces)",
)


@pytest.mark.exclusive
@pytest.mark.e2e
def test_rig_looped_on_one_pulse_server_measures_zero(tmp_path: Path) -> None:
    """Player into a null sink, recorder on its monitor: the player's own tap on that
    monitor and the recorder are two clients reading the same samples, each timed by
    when its reads returned, so every code must come out at zero to within a read."""
    sink = pulse_sink("snd")
    with signal_on_one_device(tmp_path, "pulse") as (env, signal_dir):
        recorder = subprocess.Popen(
            [*RIG, "record", "--device", f"{sink}.monitor", "--wav", str(signal_dir / RECEIVED_WAV),
             "--log", str(signal_dir / "record.parquet"), "--max-s", "10"],
            env=env, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert recorder.stdout is not None and recorder.stdout.readline().strip() == "ready"
        player = subprocess.run(
            [*RIG, "inject", "--device", sink, "--wav", str(signal_dir / "sent.wav"),
             "--monitor-wav", str(signal_dir / INJECTED_WAV),
             "--log", str(signal_dir / "inject.parquet"), "--exit-at-end"],
            env=env, capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert player.returncode == 0, player.stderr
        recorder.send_signal(signal.SIGINT)
        assert recorder.wait(timeout=10) == 0
    delays = rig_code_delays(signal_dir)
    assert delays.found.all() and len(delays.index) >= 15
    # -0.03 to +0.12 ms in the first runs, with 10 ms reads
    assert np.abs(delays.black_box_ns).max() < 500_000


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict[float, tuple[Path, dict]]:
    """A two-point sweep of the shipped scenario: link delay 5 ms, then 35 ms."""
    return planted_link_delays(SCENARIO, tmp_path_factory.mktemp("blackbox-pulse") / "sweep")


@pytest.mark.exclusive
@pytest.mark.e2e
def test_every_code_crosses_the_pulse_devices(planted: dict) -> None:
    """The rig's tap on the sender's monitor and the pulsesrc reading it date samples
    by the same model (a read's last sample just before it returned); the probes'
    playout end, ``pulsesink0:device``, is the render plus the wait in the server's
    stream queue that PulseAudio reported for it during the run, so what is left
    unexplained is small. Before that wait was a segment, ten runs read +2.2 to +10.0 ms
    (p50); with it, ten runs on a loaded two-core machine (a CI run and another
    measurement beside them) read -1.99 to +2.23 ms, seven of them within 0.5 ms."""
    for run_dir, summary in planted.values():
        box = summary["blackbox"]
        codes = box["codes"]
        assert codes["injected"] >= 25
        assert codes["found"] + codes["missing"] == codes["injected"]
        # Every code is found, except where the receiver's device played nothing: in two
        # CI runs (of about fifteen) the start of the receiver's playout never reached its
        # null sink (whole in the injection tap, read steadily by the recorder, its units
        # complete at pulsesink), one run losing the first code, the other the first two.
        # The system lost them, and latlab must say so: a missing code is a dropout (the
        # recording is silent where it belonged), never a code it failed to read.
        table = pq.read_table(run_dir / CODES_FILE).to_pydict()
        counted = np.asarray(table["in_window"], dtype=bool)
        found = np.isfinite(np.asarray(table["record_ns"], dtype=np.float64))
        dropout = np.asarray(table["dropout"], dtype=bool)
        assert not (counted & ~found & ~dropout).any()
        assert codes["dropouts"] == codes["missing"] <= 3
        # a code at the edge of the measured window may fall in no complete unit
        assert box["codes"]["matched_to_units"] >= box["codes"]["found"] - 1
        span = {"from": "sender/pulsesrc0:capture", "to": "receiver/pulsesink0:device"}
        assert box["span"] == span
        assert "a PulseAudio device's null sink" in box["method"]
        assert "recorded at a PulseAudio device's monitor" in box["method"]
        # ten runs: p50 -1.99 to +2.23 ms (median of the ten +0.25); before the stream's
        # queue was a segment, +4.2 to +11.7 ms on the same runs
        assert abs(box["unexplained"]["p50_ms"]) < 2.5
        unexplained = np.asarray(table["unexplained_ms"], dtype=np.float64)
        unexplained = unexplained[np.isfinite(unexplained)]
        # What the probes leave unexplained does not jump from code to code: median step
        # 0.06-0.08 ms in four runs, then 0.088, 0.093, 0.102, 0.202 and 0.210 ms in five
        # more (CI failed one at a bound of 0.2). Not proof that the probes follow the
        # system's drift: the black box's own median step was 0.03-0.17 ms in those runs.
        assert np.median(np.abs(np.diff(unexplained))) < 0.3


@pytest.mark.exclusive
@pytest.mark.e2e
def test_planted_link_delay_moves_the_pulse_black_box_and_probes_alike(planted: dict) -> None:
    """As on JACK (tests/test_blackbox.py): the link carries the planted 30 ms exactly;
    the black box less what the probes saw move besides the link recovers it, up to
    how each run's samples line up with the devices' periods."""
    on_link, beyond_probes = black_box_shifts(planted)
    assert on_link == pytest.approx(30.0, abs=0.1)
    assert beyond_probes == pytest.approx(30.0, abs=PERIOD_MS + 0.5)


@pytest.mark.exclusive
@pytest.mark.e2e
def test_report_shows_the_pulse_black_box(planted: dict) -> None:
    run_dir, summary = planted[5.0]
    result = latlab("report", str(run_dir), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "black box (time-coded signal)" in result.stdout
    assert f"{summary['blackbox']['black_box']['p50_ms']:.3f}" in result.stdout
