"""latlab compare and latlab check on real runs: a planted jitter-buffer difference is
found and significant, a run compared with itself shows none, budgets pass and fail.

One sweep of the shipped jitter-buffer scenario with two points (jb = 20 and 60 ms,
3 s each) is shared by the module: the planted difference is the jitter buffer's 40 ms.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from latlab.pipeline import analyze_run
from latlab.report.budget import check_budgets, parse_budget
from latlab.report.compare import (
    RunInput,
    block_length,
    compare_streams,
    compare_values,
    resolve_run,
)
from tests.conftest import latlab

REPO = Path(__file__).resolve().parent.parent
PLANTED_MS = 40.0  # jb=60 minus jb=20
TOLERANCE_MS = 2.0


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


# The module's sweep is a measurement the comparisons judge at p99: under a second run
# beside it one point's jitter-buffer p99 came out 230 ms, so the module runs alone.
pytestmark = pytest.mark.exclusive


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped jitter-buffer sweep cut to two points, 20 and 60 ms, 3 s each."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    text = (REPO / "scenarios" / "l16-jitterbuffer-sweep.toml").read_text()
    assert "jb = [10, 20, 40, 80]" in text
    tmp = tmp_path_factory.mktemp("compare")
    scenario = tmp / "jb.toml"
    scenario.write_text(text.replace("jb = [10, 20, 40, 80]", "jb = [20, 60]"))
    out = tmp / "sweep"
    result = latlab("run", str(scenario), "--out", str(out), "--duration", "3", "--no-progress")
    assert result.returncode == 0, result.stderr
    return out


def _row(comparison: dict[str, Any], name: str) -> dict[str, Any]:
    (stream,) = comparison["streams"]
    return next(r for r in stream["rows"] if r["name"] == name)


@pytest.mark.exclusive
@pytest.mark.e2e
def test_compare_finds_the_planted_jitterbuffer_difference(sweep: Path) -> None:
    result = latlab("compare", f"{sweep}:jb=20", f"{sweep}:jb=60", "--json")
    assert result.returncode == 0, result.stderr
    comparison = json.loads(result.stdout)
    assert comparison["schema"] == "latlab.compare/1"
    for name in ("end to end", "rtpjitterbuffer0:src", "kind jitterbuffer"):
        row = _row(comparison, name)
        p50 = row["diff"]["p50"]
        assert abs(p50["estimate"] - PLANTED_MS) < TOLERANCE_MS, (name, p50)
        assert p50["significant"] and p50["ci"][0] > 0, (name, p50)
        # The p99 is not held to the planted value: a stall of the shared 2-core machine
        # during one point delays a third of its units by up to 500 ms (seen while other
        # tests ran: p99 difference +392 ms, interval [132.8, 413.8]).
        p99 = row["diff"]["p99"]
        assert p99["ci"][0] <= p99["estimate"] <= p99["ci"][1] and p99["ci"][0] > 0, (name, p99)
        assert row["b"]["p50"] - row["a"]["p50"] == pytest.approx(p50["estimate"], abs=1e-3)
    # the sender is the same in both points: its phase moved far less than the planted 40 ms
    sender = _row(comparison, "phase sender")["diff"]["p50"]
    assert abs(sender["estimate"]) < TOLERANCE_MS and sender["ci"][1] < PLANTED_MS / 4


@pytest.mark.e2e
def test_compare_of_a_run_with_itself_shows_no_significant_difference(sweep: Path) -> None:
    point = sweep / "points" / "jb=20"
    result = latlab("compare", str(point), f"{sweep}:1", "--json")
    assert result.returncode == 0, result.stderr
    comparison = json.loads(result.stdout)
    rows = comparison["streams"][0]["rows"]
    assert {r["group"] for r in rows} == {"end_to_end", "segment", "kind", "phase"}
    for row in rows:
        for stat, diff in row["diff"].items():
            assert diff["estimate"] == 0, (row["name"], stat)
            assert not diff["significant"], (row["name"], stat, diff)
            assert diff["ci"][0] <= 0 <= diff["ci"][1]
    e2e = _row(comparison, "end to end")["diff"]["p99"]
    assert e2e["ci"][1] > e2e["ci"][0]  # a real interval, not a point


@pytest.mark.e2e
def test_compare_table_marks_significant_rows(sweep: Path) -> None:
    result = latlab("compare", f"{sweep}:jb=20", f"{sweep}:jb=60")
    assert result.returncode == 0, result.stderr
    assert "sender/audiotestsrc0->receiver/fakesink0" in result.stdout
    jitterbuffer = next(
        line for line in result.stdout.splitlines() if "rtpjitterbuffer0:src" in line
    )
    assert jitterbuffer.count("*") >= 3  # p50, p99 and mean


@pytest.mark.e2e
def test_streams_in_one_run_only_are_listed(sweep: Path) -> None:
    _, _, streams = analyze_run(sweep / "points" / "jb=20", write=False)
    a, b = RunInput(sweep, "A"), RunInput(sweep, "B")
    comparison = compare_streams(streams, [], a, b, resamples=200)
    assert comparison.streams == []
    assert comparison.streams_only_in_a == [streams[0].journeys.stream_id]
    assert comparison.to_json()["streams_only_in_b"] == []


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("{sweep}", "a sweep directory; name a point: {sweep}:POINT (jb=20, jb=60)"),
        ("{sweep}:jb=30", "'jb=30' is not a point"),
        ("{sweep}:3", "'3' is not a point"),
        ("{sweep}/nothing", "no such run directory"),
    ],
)
def test_bad_run_names_give_one_line(sweep: Path, spec: str, expected: str) -> None:
    spec, expected = spec.format(sweep=sweep), expected.format(sweep=sweep)
    line = one_line_error(latlab("compare", spec, f"{sweep}:1"))
    assert line.startswith("latlab: error: ") and expected in line


@pytest.mark.e2e
def test_sweep_points_resolve_by_name_part_and_number(sweep: Path) -> None:
    assert resolve_run(f"{sweep}:jb=60").path == sweep / "points" / "jb=60"
    assert resolve_run(f"{sweep}:2").path == sweep / "points" / "jb=60"
    assert resolve_run(str(sweep / "points" / "jb=20")).path == sweep / "points" / "jb=20"


# --- check --------------------------------------------------------------------------


def _summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())


@pytest.mark.e2e
def test_check_passes_and_fails_and_names_the_exceeded_budget(sweep: Path) -> None:
    point = sweep / "points" / "jb=60"
    e2e = _summary(point)["streams"][0]["end_to_end"]
    passing = f"e2e.p99<{e2e['p99_ms'] + 1:.3f}ms"
    failing = f"e2e.p50<{e2e['p50_ms'] - 1:.3f}ms"
    result = latlab(
        "check",
        str(point),
        "--budget",
        passing,
        "--budget",
        failing,
        "--budget",
        "jitterbuffer.p50<50ms",
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.strip()]
    assert "2 of 3 budget checks exceeded" in line
    assert failing in line and "jitterbuffer.p50<50ms" in line and passing not in line
    assert result.stdout.count("FAIL") == 2 and result.stdout.count("pass") == 1


@pytest.mark.e2e
def test_check_json_figures_are_the_summary_figures(sweep: Path) -> None:
    point = sweep / "points" / "jb=20"
    stream = _summary(point)["streams"][0]
    result = latlab(
        "check",
        str(point),
        "-b",
        "e2e.p99<1s",
        "-b",
        "jitterbuffer.p50<50ms",
        "-b",
        "rtpjitterbuffer0.max<=1s",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [r["passed"] for r in rows] == [True, True, True]
    assert rows[0]["value_ms"] == pytest.approx(stream["end_to_end"]["p99_ms"], abs=1e-4)
    jitterbuffer = next(s for s in stream["segments"] if s["kind"] == "jitterbuffer")
    assert rows[1]["value_ms"] == pytest.approx(jitterbuffer["p50_ms"], abs=1e-4)
    assert rows[2]["value_ms"] == pytest.approx(jitterbuffer["max_ms"], abs=1e-4)
    assert rows[0]["units"] == stream["complete_units"]


@pytest.mark.e2e
def test_limit_operators_and_units(sweep: Path) -> None:
    _, _, streams = analyze_run(sweep / "points" / "jb=20", write=False)
    p50 = float(np.percentile(streams[0].end_to_end.values_ns / 1e6, 50))
    exact = f"{p50!r}ms"  # the float's shortest exact spelling: the limit is the value
    budgets = [
        f"e2e.p50<={exact}",
        f"e2e.p50<{exact}",
        "e2e.p50<1s",
        "e2e.p50<100us",
        "#1@e2e.p50<1s",
        "audiotestsrc0@capture.p99.9<1s",
    ]
    results = check_budgets([parse_budget(b) for b in budgets], streams)
    assert [r.passed for r in results] == [True, False, True, False, True, True]
    assert results[0].value_ms == pytest.approx(p50)


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("budget", "expected"),
    [
        ("e2e.p98<40ms", "statistic 'p98' is not one of"),
        ("e2e.p99<40", "is not a number with a unit"),
        ("e2e.p99>40ms", "no < or <="),
        ("e2e.p99<fast", "is not a number with a unit"),
        ("nosuchelement.p99<40ms", "no segment, kind or phase 'nosuchelement'"),
        ("queue.p50<1ms", "no segment of kind 'queue'"),
        ("x9@e2e.p50<1s", "no stream matches 'x9'"),
        ("#2@e2e.p50<1s", "the run has 1 stream"),
    ],
)
def test_bad_budgets_are_one_line_and_exit_2(sweep: Path, budget: str, expected: str) -> None:
    line = one_line_error(latlab("check", f"{sweep}:1", "--budget", budget))
    assert line.startswith(f"latlab: error: budget {budget!r}") and expected in line


# --- the bootstrap itself -------------------------------------------------------------


@pytest.mark.e2e
def test_block_length_follows_autocorrelation() -> None:
    rng = np.random.default_rng(1)
    noise = rng.normal(size=4000)
    ar = np.zeros(4000)
    for i in range(1, len(ar)):  # AR(1), phi 0.95: autocorrelation under 0.03 after ~67 lags
        ar[i] = 0.95 * ar[i - 1] + noise[i]
    assert block_length(noise) == int(np.ceil(4000 ** (1 / 3)))
    assert block_length(ar) > 2 * block_length(noise)
    assert block_length(np.full(100, 5.0)) == 1


def test_interval_covers_a_known_shift() -> None:
    """Over many pairs of iid samples 1 ms apart, the 90 % interval covers 1 ms about 90 %."""
    rng = np.random.default_rng(7)
    covered = []
    for _ in range(60):
        a = rng.normal(10, 1, 400) * 1e6
        b = rng.normal(11, 1, 400) * 1e6
        figures = compare_values(a, b, resamples=400, confidence=0.9, rng=rng)
        diff = figures["diff"]["p50"]
        covered.append(diff.low <= 1.0 <= diff.high)
        assert diff.significant
    assert 0.75 <= np.mean(covered) <= 1.0
