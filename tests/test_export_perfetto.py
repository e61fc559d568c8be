"""latlab export --perfetto on real runs: the trace's structure as Perfetto reads it.

Perfetto's trace processor (pip ``perfetto``) downloads its binary at run time, which
this machine cannot; the checks below follow the rules of its JSON importer instead:
slices of one track nest, durations are not negative, every pid and tid is named, and
every flow (v2: ``bind_id`` with ``flow_out`` / ``flow_in``) starts once, steps, and
finishes once, in time order.
"""

from __future__ import annotations

import itertools
import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from latlab.pipeline import analyze_run
from latlab.report.perfetto import _lanes
from tests.conftest import latlab

# per shipped scenario: processes a unit crosses (an emulated link's log is one), and the
# name of a thread its slices must be on
EXPECT = {
    "l16-basic": (2, "rtpjitterbuffer ["),
    "l16-impaired": (3, "rtpjitterbuffer ["),
    "srt-720p30": (3, "srtsrc0:src ["),
}
SCENARIOS = tuple(EXPECT)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """3 s runs of shipped scenarios: RTP over a direct and an emulated link, SRT video."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    tmp = tmp_path_factory.mktemp("perfetto")
    out = {}
    for name in SCENARIOS:
        run_dir = tmp / name
        result = latlab(
            "run",
            f"scenarios/{name}.toml",
            "--out",
            str(run_dir),
            "--duration",
            "3",
            "--no-progress",
        )
        assert result.returncode == 0, result.stderr
        out[name] = run_dir
    return out


@pytest.fixture(scope="module")
def traces(runs: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """Each run exported through the command line, and the JSON it wrote."""
    out = {}
    for name, run_dir in runs.items():
        path = run_dir.parent / f"{name}.perfetto.json"
        result = latlab("export", str(run_dir), "--perfetto", str(path))
        assert result.returncode == 0, result.stderr
        assert "flows" in result.stdout
        out[name] = json.loads(path.read_text())
    return out


def _slices(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


@pytest.mark.e2e
@pytest.mark.parametrize("name", SCENARIOS)
def test_every_pid_and_tid_is_named(traces: dict[str, dict[str, Any]], name: str) -> None:
    events = traces[name]["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"
    }
    used = {(e["pid"], e["tid"]) for e in _slices(traces[name])}
    assert used and used <= set(threads)
    assert {pid for pid, _ in used} <= set(processes)
    # Perfetto files process-level events under tid = pid: no track may use a pid as tid
    assert not {tid for _, tid in threads} & set(processes)
    labels = sorted(processes.values())
    assert any(label.startswith("tx / sender (pid ") for label in labels), labels
    assert any(label.startswith("rx / receiver (pid ") for label in labels), labels
    # thread tracks carry the traced thread's name and tid
    run_threads = [n for n in threads.values() if "[" in n]
    assert any(n.startswith(EXPECT[name][1]) for n in run_threads), run_threads


@pytest.mark.e2e
@pytest.mark.parametrize("name", SCENARIOS)
def test_slices_are_non_negative_and_nest_on_every_track(
    traces: dict[str, dict[str, Any]], name: str
) -> None:
    by_track: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for e in _slices(traces[name]):
        assert e["dur"] >= 0 and e["ts"] > 0
        by_track[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for track, spans in by_track.items():
        stack: list[float] = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1], f"slice overlaps its parent on {track}"
            stack.append(end)


@pytest.mark.e2e
@pytest.mark.parametrize("name", SCENARIOS)
def test_every_unit_has_one_flow_through_its_slices_in_time_order(
    traces: dict[str, dict[str, Any]], runs: dict[str, Path], name: str
) -> None:
    flows: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for order, e in enumerate(_slices(traces[name])):
        if "bind_id" in e:
            flows[e["bind_id"]].append(e | {"order": order})
    _, _, streams = analyze_run(runs[name], write=False)
    (stream,) = streams
    assert len(flows) == len(stream.journeys.times)
    processes_crossed = set()
    for chain in flows.values():
        chain.sort(key=lambda e: (e["ts"], e["order"]))
        roles = [(e.get("flow_in", False), e.get("flow_out", False)) for e in chain]
        assert roles[0] == (False, True) and roles[-1] == (True, False)
        assert all(r == (True, True) for r in roles[1:-1])
        starts = [e["ts"] for e in chain]
        assert all(b > a for a, b in itertools.pairwise(starts))
        processes_crossed.add(len({e["pid"] for e in chain}))
    assert max(processes_crossed) == EXPECT[name][0]


@pytest.mark.e2e
@pytest.mark.parametrize("name", SCENARIOS)
def test_slices_carry_each_units_segments(
    traces: dict[str, dict[str, Any]], runs: dict[str, Path], name: str
) -> None:
    """Per complete unit, the segment values in the slices add up to its end-to-end latency."""
    _, _, (stream,) = analyze_run(runs[name], write=False)
    segments = len(stream.segments)
    per_unit: dict[int, list[int]] = defaultdict(list)
    for e in _slices(traces[name]):
        per_unit[e["args"]["unit"]].append(e["args"]["segment_ns"])
    totals = sorted(sum(v) for v in per_unit.values() if len(v) == segments)
    assert totals == sorted(stream.end_to_end.values_ns.tolist())
    names = {e["name"] for e in _slices(traces[name])}
    expected = {f"{s.to_probe.split('/', 1)[1]} ({s.kind})" for s in stream.segments}
    assert names == expected


@pytest.mark.e2e
def test_export_errors_are_one_line(runs: dict[str, Path], tmp_path: Path) -> None:
    result = latlab("export", str(runs["l16-basic"]))
    assert result.returncode == 2 and "--perfetto OUT.json" in result.stderr
    result = latlab("export", str(tmp_path / "none"), "--perfetto", str(tmp_path / "x.json"))
    assert result.returncode == 2 and "no such run directory" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.e2e
def test_lanes_never_overlap() -> None:
    rng = np.random.default_rng(3)
    start = np.sort(rng.integers(0, 1_000_000, 5000))
    end = start + rng.integers(0, 50_000, 5000)
    lanes, count = _lanes(start, end)
    assert count > 1 and set(np.unique(lanes)) == set(range(count))
    for lane in range(count):
        order = np.argsort(start[lanes == lane], kind="stable")
        s, e = start[lanes == lane][order], end[lanes == lane][order]
        assert np.all(s[1:] >= e[:-1])
