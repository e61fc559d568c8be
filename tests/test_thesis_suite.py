"""The thesis's test suite (Table 2.1) as shipped scenarios, and the residual r of Eq. 3.1."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from latlab.analysis.residual import path_parts, residual_figures, residual_ms
from latlab.experiment import run_analysed_sweep
from latlab.lab.scenario import Scenario, ScenarioError, load_scenario, parse_scenario
from latlab.lab.sweep import expand_sweep
from latlab.report.sweep_table import comparison_table
from latlab.rundir import read_sweep as load_sweep

REPO = Path(__file__).resolve().parents[1]
QUIET = REPO / "scenarios/thesis-suite.toml"
NOISY = REPO / "scenarios/thesis-suite-noisy.toml"

# Table 2.1 of the thesis: test -> (period-time, buffer-time, p-time, jitter-latency,
# pipeline-latency), ms; period-time and buffer-time are the same on S and R.
TABLE_2_1 = {
    1: (20, 40, 20, 25, 100),
    2: (20, 40, 20, 25, 80),
    3: (10, 20, 10, 25, 60),
    4: (10, 20, 5, 25, 60),
    5: (5, 10, 5, 25, 60),
    6: (5, 10, 5, 25, 40),
    7: (5, 10, 5, 25, 30),
    8: (5, 10, 5, 10, 30),
    9: (5, 10, 5, 10, 20),
    10: (5, 10, 1, 10, 20),
}


def _check_point(scenario: Scenario, test: int) -> None:
    """The point's devices, pipelines and analysis carry test ``test`` of Table 2.1."""
    period, buffer, ptime, jitter, pipeline = TABLE_2_1[test]
    assert scenario.params["test"] == str(test)
    for device in scenario.devices:
        assert device.server == "jack" and device.rate == 48000
        assert device.period_frames == period * 48
        assert device.period_us == period * 1000
        assert device.period_us * device.periods == buffer * 1000
    receiver = scenario.process("receiver").pipeline
    sender = scenario.process("sender").pipeline
    assert receiver.startswith(f"pipeline.( latency={pipeline * 1_000_000} udpsrc ")
    assert receiver.endswith(" )")
    assert f"rtpjitterbuffer latency={jitter} " in receiver
    assert f"min-ptime={ptime * 1_000_000} max-ptime={ptime * 1_000_000} " in sender
    assert "mtu=9000" in sender and sender.startswith("jackaudiosrc ")
    for pipe, device in ((sender, "snd_tx"), (receiver, "snd_rx")):
        refs = f"latency-time=${{devices.{device}.period_us}} "
        assert refs + f"buffer-time=${{devices.{device}.buffer_us}}" in pipe
    assert scenario.analysis.unit_ms == period
    assert scenario.analysis.configured_latency_ms == pipeline
    assert scenario.analysis.period_ms == period


# the noisy network needs link impairment; its file ships with it
SUITES = [QUIET, *([NOISY] if NOISY.exists() else [])]
needs_noisy = pytest.mark.skipif(not NOISY.exists(), reason="no noisy suite in this checkout")


@pytest.mark.parametrize("path", SUITES, ids=["quiet", "noisy"][: len(SUITES)])
def test_suite_expands_into_the_ten_tests_of_table_2_1(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.sweep is not None and scenario.sweep.mode == "zip"
    points = expand_sweep(scenario)
    assert [p.values["test"] for p in points] == list(TABLE_2_1)
    for point in points:
        _check_point(point.scenario, point.values["test"])
        assert point.scenario.duration_s == 5


@needs_noisy
def test_quiet_and_noisy_networks_differ_only_in_the_link_and_the_noise() -> None:
    quiet, noisy = load_scenario(QUIET), load_scenario(NOISY)
    (quiet_link,) = quiet.links
    (noisy_link,) = noisy.links
    assert not quiet_link.impaired
    assert noisy_link.impairment["jitter_ms"] > 0
    assert [p.name for p in quiet.processes] == ["receiver", "sender"]
    assert [p.name for p in noisy.processes] == ["noise_rx", "receiver", "sender", "noise_tx"]
    noise_tx = noisy.process("noise_tx")
    assert noise_tx.host == "tx" and noise_tx.command[-3:] == ("${hosts.rx.addr}", "5353", "3000")
    assert noisy.process("noise_rx").host == "rx"
    for name in ("receiver", "sender"):
        assert quiet.process(name) == noisy.process(name)
    assert quiet.sweep is not None and noisy.sweep is not None
    assert quiet.sweep.variables == noisy.sweep.variables


# --- the residual r = Δt_r - Δt_c - t_p -------------------------------------------------


def _seg(a: str, b: str, kind: str, mean: float) -> dict[str, Any]:
    return {"from": a, "to": b, "kind": kind, "mean_ms": mean}


SEGMENTS = [
    _seg("tx/src0:capture", "tx/src0:src", "capture", 18.0),
    _seg("tx/src0:src", "tx/pay0:src", "processing", 0.5),
    _seg("tx/pay0:src", "tx/udpsink0:sink", "network", 0.25),
    _seg("tx/udpsink0:sink", "link/tx->rx:in", "network", 0.25),
    _seg("link/tx->rx:in", "link/tx->rx:out", "network", 2.0),
    _seg("link/tx->rx:out", "rx/udpsrc0:src", "network", 0.5),
    _seg("rx/udpsrc0:src", "rx/jb0:src", "jitterbuffer", 40.0),
    _seg("rx/jb0:src", "rx/sink0:sink", "playout", 20.0),
    _seg("rx/sink0:sink", "rx/sink0:device", "playout", 45.0),
]


def test_residual_is_measured_minus_configured_minus_period() -> None:
    assert residual_ms(127.5, 100, 20) == pytest.approx(7.5)
    assert residual_ms(25.0, 20, 5) == pytest.approx(0.0)
    assert residual_ms(22.0, 20, 5) == pytest.approx(-3.0)
    assert residual_ms(None, 20, 5) is None


def test_path_parts_split_capture_transit_and_receiver() -> None:
    parts = path_parts(SEGMENTS)
    assert parts == pytest.approx({"capture": 18.0, "transit": 3.5, "receiver": 105.0})
    assert path_parts([]) == {"capture": 0.0, "transit": 0.0, "receiver": 0.0}


def test_residual_figures_and_their_split_add_up() -> None:
    e2e = {"p50_ms": 126.0, "p99_ms": 131.25, "mean_ms": 126.5}  # the segments' sum
    res = residual_figures(e2e, SEGMENTS, configured_ms=100, period_ms=20)
    assert res["configured_latency_ms"] == 100 and res["period_ms"] == 20
    assert res["p50_ms"] == pytest.approx(6.0)
    assert res["p99_ms"] == pytest.approx(11.25)
    assert res["mean_ms"] == pytest.approx(6.5)
    assert res["excess_ms"] == pytest.approx({"capture": -2.0, "transit": 3.5, "receiver": 5.0})
    assert sum(res["excess_ms"].values()) == pytest.approx(res["mean_ms"])
    missing = residual_figures({"p50_ms": None}, SEGMENTS, 100, 20)
    assert missing["p50_ms"] is None and missing["p99_ms"] is None


def _sweep_json(residual: dict[str, Any] | None) -> dict[str, Any]:
    stream: dict[str, Any] = {
        "id": "s",
        "lost": 0,
        "late": 0,
        "end_to_end": {"p50_ms": 126.0, "p99_ms": 131.25},
        "kinds": {"capture": {"p50_ms": 18.0}},
    }
    if residual is not None:
        stream["residual"] = residual
    point = {"name": "test=1", "values": {"test": 1}, "status": "ok", "streams": [stream]}
    return {"name": "t", "sweep": {"mode": "zip", "variables": {"test": [1]}}, "points": [point]}


def test_comparison_table_gains_the_residual_columns_when_set() -> None:
    res = residual_figures({"p50_ms": 126.0, "p99_ms": 131.25}, SEGMENTS, 100, 20)
    table = comparison_table(_sweep_json(res))
    headers = [c.header for c in table.columns]
    assert headers[-7:] == [
        "Δt_c",
        "t_p",
        "r\np50",
        "r\np99",
        "r in\ncapture",
        "r in\ntransit",
        "r in\nreceiver",
    ]
    cells = [next(iter(c.cells)) for c in table.columns[-7:]]
    assert cells == ["100.00", "20.00", "6.00", "11.25", "-2.00", "3.50", "5.00"]
    plain = [c.header for c in comparison_table(_sweep_json(None)).columns]
    assert "Δt_c" not in plain and "r\np50" not in plain


@pytest.mark.parametrize(
    ("analysis", "problem"),
    [
        ("configured_latency_ms = -1", "analysis.configured_latency_ms: must be a non-negative"),
        ('configured_latency_ms = "20"', "analysis.configured_latency_ms: must be a non-negative"),
        ("period_ms = 0", "analysis.period_ms: must be a positive number"),
        ("period_ms = true", "analysis.period_ms: must be a positive number"),
        ("periods_ms = 5", "analysis: unknown key 'periods_ms'"),
    ],
)
def test_bad_analysis_keys_are_one_line_errors(analysis: str, problem: str) -> None:
    text = (
        f'name = "a"\nduration_s = 1\n[analysis]\n{analysis}\n[hosts.a]\n'
        '[processes.p]\nhost = "a"\npipeline = "fakesrc ! fakesink"\n'
    )
    with pytest.raises(ScenarioError) as err:
        parse_scenario(text, "bad.toml")
    assert str(err.value).startswith("bad.toml: ") and problem in str(err.value)
    assert "\n" not in str(err.value)


# --- end to end: two tests of the suite on the real stack -------------------------------


@pytest.mark.exclusive
@pytest.mark.e2e
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
@pytest.mark.skipif(shutil.which("jackd") is None, reason="jackd not installed")
def test_two_tests_of_the_suite_end_to_end(tmp_path: Path) -> None:
    """Tests 8 and 9 (pipeline-latency 30 vs 20 ms): r from the measured Δt_r, order kept."""
    scenario = load_scenario(QUIET).with_duration(3)
    assert scenario.sweep is not None
    picked = tuple((n, v[7:9]) for n, v in scenario.sweep.variables)  # tests 8 and 9
    scenario = replace(scenario, sweep=replace(scenario.sweep, variables=picked))
    out = tmp_path / "suite"
    result = run_analysed_sweep(scenario, out, progress=False)
    assert not result.failed, [p["error"] for p in result.failed]
    points = load_sweep(out)["points"]
    assert [p["values"]["test"] for p in points] == [8, 9]
    for point in points:
        (stream,) = point["streams"]
        assert stream["lost"] == 0 and stream["complete_units"] > 400
        e2e, res = stream["end_to_end"], stream["residual"]
        _, _, _, _, pipeline = TABLE_2_1[point["values"]["test"]]
        assert res["configured_latency_ms"] == pipeline and res["period_ms"] == 5
        for key in ("p50_ms", "p99_ms", "mean_ms"):
            assert res[key] == pytest.approx(e2e[key] - pipeline - 5, abs=1e-5)
        assert sum(res["excess_ms"].values()) == pytest.approx(res["mean_ms"], abs=1e-3)
        # the receiver holds at least the configured pipeline-latency
        assert res["parts_ms"]["receiver"] >= pipeline - 1
        assert e2e["p50_ms"] > pipeline + 5
    # 10 ms less pipeline-latency; the start-up phase of the jitter buffer and of the
    # source's timestamps moves each run by several ms, so only the order is certain
    e2e8, e2e9 = (p["streams"][0]["end_to_end"]["p50_ms"] for p in points)
    assert e2e8 > e2e9
    headers = [c.header for c in comparison_table(load_sweep(out)).columns]
    assert {"Δt_c", "t_p", "r\np50", "r\np99"} <= set(headers)
