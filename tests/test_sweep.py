"""Test matrices: expansion of [sweep], one-line errors, and sweeps on the real stack."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from latlab.errors import UserInputError
from latlab.experiment import run_analysed_sweep
from latlab.lab.scenario import Scenario, ScenarioError, parse_scenario
from latlab.lab.sweep import expand_sweep, point_line, to_toml
from latlab.report.sweep_table import comparison_table
from latlab.rundir import read_sweep as load_sweep
from tests.conftest import L16_CAPS, LATLAB, as_if_in_background, stop_budget_s, two_hosts
from tests.test_cli import latlab, one_line_error

CAPS = L16_CAPS
RECEIVER = (
    f'udpsrc port=5004 caps="{CAPS}" ! rtpjitterbuffer latency=${{jb}} '
    "! rtpL16depay ! fakesink sync=true"
)
SENDER = (
    "audiotestsrc is-live=true samplesperbuffer=480 ! audio/x-raw,rate=48000,channels=2 "
    "! rtpL16pay ! udpsink host=${hosts.rx.addr} port=5004"
)


def two_host(sweep: str, duration: float | str = 3, receiver: str = RECEIVER) -> str:
    """The two-host L16 scenario of the accuracy tests with a [sweep] table."""
    return two_hosts(
        receiver, SENDER, name="l16-sweep", duration=duration, head=f"[sweep]\n{sweep}"
    )


def one_host(sweep: str, pipeline: str, extra: str = "", duration: float = 1) -> str:
    """A one-process scenario with a [sweep] table."""
    return (
        f'name = "s"\nduration_s = {duration}\n{extra}\n[sweep]\n{sweep}\n'
        f'[hosts.a]\n[processes.p]\nhost = "a"\npipeline = "{pipeline}"\n'
    )


def parse(text: str) -> Scenario:
    return parse_scenario(text, "sweep.toml")


# --- expansion ---------------------------------------------------------------------------


def test_product_runs_every_combination_last_variable_fastest() -> None:
    text = one_host("jb = [20, 40, 60]\ndelay = [0, 20]", "fakesrc ! queue name=q${jb}d${delay}")
    points = expand_sweep(parse(text))
    assert [p.name for p in points] == [
        "jb=20,delay=0",
        "jb=20,delay=20",
        "jb=40,delay=0",
        "jb=40,delay=20",
        "jb=60,delay=0",
        "jb=60,delay=20",
    ]
    assert points[3].values == {"jb": 40, "delay": 20}
    assert points[3].scenario.processes[0].pipeline == "fakesrc ! queue name=q40d20"
    assert points[3].scenario.source == "sweep.toml [jb=40,delay=20]"


def test_zip_pairs_the_lists() -> None:
    text = one_host('mode = "zip"\njb = [20, 40]\nsink = ["a", "b"]', "${sink} x=${jb}")
    points = expand_sweep(parse(text))
    assert [p.name for p in points] == ["jb=20,sink=a", "jb=40,sink=b"]
    assert [p.scenario.processes[0].pipeline for p in points] == ["a x=20", "b x=40"]


def test_exact_reference_takes_the_value_and_its_type() -> None:
    extra = '[analysis]\nunit_ms = "${unit}"'
    text = one_host("unit = [5, 2.5]\nd = [1.5]", "fakesrc ! fakesink", extra)
    text = text.replace("duration_s = 1", 'duration_s = "${d}"')
    points = expand_sweep(parse(text))
    assert [p.scenario.analysis.unit_ms for p in points] == [5, 2.5]
    assert [p.scenario.duration_s for p in points] == [1.5, 1.5]
    assert [p.name for p in points] == ["unit=5,d=1.5", "unit=2.5,d=1.5"]


def test_substituted_values_are_validated_per_point() -> None:
    extra = '[analysis]\nunit_ms = "${unit}"'
    with pytest.raises(ScenarioError) as err:
        parse(one_host("unit = [5, -1]", "fakesrc ! fakesink", extra))
    assert str(err.value).startswith("sweep.toml [unit=-1]: analysis.unit_ms: must be a positive")


def test_swept_params_and_env_and_literal_references() -> None:
    extra = '[params]\njb = "20"'
    pipeline = "a latency=${params.jb} host=${hosts.a.addr} literal=$${jb}"
    text = one_host("jb = [30, 50]\nlevel = [true]", pipeline, extra)
    text += 'env = { GST_DEBUG = "${level}", JB = "${jb}" }\n'
    points = expand_sweep(parse(text))
    scenario = points[1].scenario
    assert scenario.params == {"jb": "50"}
    resolved = scenario.resolved_pipeline(scenario.processes[0], {"a": "10.77.0.1"})
    assert resolved == "a latency=50 host=10.77.0.1 literal=${jb}"
    assert scenario.resolved_env(scenario.processes[0], {}) == {"GST_DEBUG": "true", "JB": "50"}


def test_point_scenario_text_is_the_concrete_scenario() -> None:
    (point, _) = expand_sweep(parse(two_host("jb = [20, 50]")))
    data = tomllib.loads(point.scenario.text)
    assert "sweep" not in data and "latency=20 " in data["processes"]["receiver"]["pipeline"]
    assert parse_scenario(point.scenario.text).processes == point.scenario.processes


def test_duration_override_reaches_every_point() -> None:
    scenario = parse(two_host("jb = [20, 50]", duration=10)).with_duration(2)
    assert [p.scenario.duration_s for p in expand_sweep(scenario)] == [2.0, 2.0]


def test_point_names_are_filesystem_safe_and_bounded() -> None:
    text = one_host('sink = ["fake sink/1", "x"]\nn = [1]', "${sink} n=${n}")
    assert [p.name for p in expand_sweep(parse(text))] == ["sink=fake_sink_1,n=1", "sink=x,n=1"]
    long = one_host(f'sink = ["{"a" * 300}"]', "${sink}")
    (point,) = expand_sweep(parse(long))
    assert len(point.name) <= 120 and "/" not in point.name


def test_toml_writer_round_trips() -> None:
    data: dict[str, Any] = {
        "a": 1,
        "s": 'q"\\\n\x01\x7fé',
        "f": [1.5, float("inf"), True],
        "hosts": {"tx": {}, "rx": {}},
        "links": [{"between": ["tx", "rx"], "reverse": {"d": 5}, "schedule": [{"at_s": 1}]}],
        "odd key": {"k": [{"x": 1}, 2]},
    }
    assert tomllib.loads(to_toml(data)) == data


def test_scenario_without_sweep_has_none() -> None:
    scenario = parse(
        'name = "s"\nduration_s = 1\n[hosts.a]\n[processes.p]\nhost = "a"\npipeline = "a"'
    )
    assert scenario.sweep is None
    with pytest.raises(ScenarioError, match="has no \\[sweep\\] table"):
        expand_sweep(scenario)


# --- bad input: one line naming the file, before anything starts --------------------------

BAD = {
    "unknown variable": (
        one_host("jb = [1]", "a ${jb} ${jx}"),
        "processes.p.pipeline: unknown sweep variable '${jx}' (sweep: jb)",
    ),
    "unused variable": (
        one_host("jb = [1]\nunused = [2]", "a ${jb}"),
        "sweep.unused: is not used",
    ),
    "empty list": (one_host("jb = []", "a ${jb}"), "sweep.jb: is an empty list"),
    "zip lengths": (
        one_host('mode = "zip"\njb = [1, 2]\nd = [1]', "a ${jb} ${d}"),
        'sweep: mode "zip" needs lists of one length (jb: 2, d: 1)',
    ),
    "name clash": (
        one_host("hosts = [1]", "a ${hosts}"),
        "sweep.hosts: name clashes with the ${hosts.…} references",
    ),
    "repeated value": (
        one_host("jb = [1, 1]", "a ${jb}"),
        "sweep: two points are both named 'jb=1'",
    ),
    "look-alike values": (
        one_host('s = ["a b", "a/b"]', "a ${s}"),
        "sweep: two points are both named 's=a_b'",
    ),
    "unknown mode": (
        one_host('mode = "grid"\njb = [1]', "a ${jb}"),
        "sweep.mode: unknown mode 'grid'",
    ),
    "not a list": (one_host("jb = 20", "a ${jb}"), "sweep.jb: must be a list of values"),
    "nested value": (one_host("jb = [[1]]", "a ${jb}"), "sweep.jb: values must be strings"),
    "no variables": (one_host('mode = "zip"', "a"), "sweep: has no variables"),
    "bad name": (one_host('"j b" = [1]', "a"), "sweep.j b: invalid name 'j b'"),
    "reference without sweep": (
        'name = "s"\nduration_s = 1\n[hosts.a]\n[processes.p]\nhost = "a"\npipeline = "${jb}"\n',
        "processes.p.pipeline: unknown reference '${jb}'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_sweep_is_one_line_error(case: str) -> None:
    text, expected = BAD[case]
    with pytest.raises(ScenarioError) as err:
        parse(text)
    message = str(err.value)
    assert message.startswith("sweep.toml: ") and "\n" not in message
    assert expected in message


@pytest.mark.parametrize("case", ["unknown variable", "unused variable", "zip lengths"])
def test_bad_sweep_through_the_cli(tmp_path: Path, case: str) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(BAD[case][0])
    out = tmp_path / "out"
    line = one_line_error(latlab("run", str(bad), "--out", str(out)))
    assert line.startswith(f"latlab: error: {bad}: ") and BAD[case][1] in line
    assert not out.exists()  # rejected before anything started


def test_report_on_a_damaged_sweep_json(tmp_path: Path) -> None:
    (tmp_path / "sweep.json").write_text('{"schema": "latlab.sweep/9"}')
    line = one_line_error(latlab("report", str(tmp_path)))
    assert "sweep.json: unknown schema 'latlab.sweep/9'" in line


def test_comparison_table_shows_failed_points() -> None:
    ok_stream = {
        "id": "s",
        "lost": 1,
        "late": 2,
        "end_to_end": {"p50_ms": 40.0, "p99_ms": 41.0},
        "kinds": {"network": {"p50_ms": 0.1}, "capture": {"p50_ms": 20.0}},
    }
    sweep = {
        "name": "t",
        "sweep": {"mode": "product", "variables": {"jb": [20, 50]}},
        "points": [
            {"name": "jb=20", "values": {"jb": 20}, "status": "ok", "streams": [ok_stream]},
            {"name": "jb=50", "values": {"jb": 50}, "status": "failed", "streams": []},
        ],
    }
    table = comparison_table(sweep)
    headers = [str(c.header) for c in table.columns]
    assert headers == ["jb", "e2e\np50", "e2e\np99", "capture", "network", "lost", "late"]
    cells = [[str(c) for c in col.cells] for col in table.columns]
    assert cells[0] == ["20", "50"] and cells[1] == ["40.00", "failed"] and cells[5] == ["1", ""]


# --- on the real stack ---------------------------------------------------------------------

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")


def _jitterbuffer(stream: dict[str, Any]) -> dict[str, Any]:
    (segment,) = [s for s in stream["segments"] if s["kind"] == "jitterbuffer"]
    return segment


@pytest.mark.exclusive
@pytest.mark.e2e
@needs_root
def test_jitterbuffer_sweep_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    result = run_analysed_sweep(parse(two_host("jb = [20, 50]")), out, progress=False)
    assert not result.failed, [p["error"] for p in result.failed]
    data = load_sweep(out)
    assert data == result.sweep and data["status"] == "ok" and data["finished_at"]
    assert data["sweep"] == {"mode": "product", "variables": {"jb": [20, 50]}}
    assert [p["name"] for p in data["points"]] == ["jb=20", "jb=50"]
    for point in data["points"]:
        assert point["status"] == "ok" and point["error"] is None
        assert (out / point["dir"] / "summary.json").is_file()
        (stream,) = point["streams"]
        assert stream["lost"] == 0 and stream["late"] == 0 and stream["duplicated"] == 0
        assert stream["complete_units"] > 250
        assert stream["end_to_end"]["p99_ms"] >= stream["end_to_end"]["p50_ms"] > 0
        assert {"capture", "network", "jitterbuffer", "playout"} <= set(stream["kinds"])
        assert "resources" in point
    low, high = (_jitterbuffer(p["streams"][0]) for p in data["points"])
    assert high["p50_ms"] - low["p50_ms"] == pytest.approx(30.0, abs=0.3)
    summary = json.loads((out / "points/jb=50/summary.json").read_text())
    assert _jitterbuffer(summary["streams"][0])["p50_ms"] == pytest.approx(high["p50_ms"])
    table = latlab("report", str(out))
    assert table.returncode == 0
    rows = [line.split() for line in table.stdout.splitlines()]
    assert [r[0] for r in rows if r and r[0] in ("20", "50")] == ["20", "50"]
    assert json.loads(latlab("report", str(out), "--json").stdout) == data


@pytest.mark.e2e
@needs_root
def test_failed_point_is_reported_and_the_sweep_goes_on(tmp_path: Path) -> None:
    text = one_host(
        'sink = ["nosuchsink", "fakesink"]', "audiotestsrc is-live=true ! ${sink} sync=true"
    )
    scenario = tmp_path / "sinks.toml"
    scenario.write_text(text)
    out = tmp_path / "sweep"
    result = latlab("run", str(scenario), "--out", str(out), "--no-progress")
    assert result.returncode == 1 and "Traceback" not in result.stderr + result.stdout
    assert "1 of 2 points failed" in result.stderr
    failed, ok = load_sweep(out)["points"]
    assert failed["status"] == "failed" and 'no element "nosuchsink"' in failed["error"]
    assert "\n" not in failed["error"] and failed["streams"] == []
    assert ok["status"] == "ok" and (out / ok["dir"] / "summary.json").is_file()
    assert load_sweep(out)["status"] == "failed"
    assert f"{failed['name']}: failed: " in result.stdout


@pytest.mark.e2e
@needs_root
def test_ctrl_c_keeps_finished_points_and_sweep_json(tmp_path: Path) -> None:
    # The second point runs for a minute, so the interrupt surely lands while it runs: the
    # test waits for states the program reports (sweep.json says the point is running,
    # both its processes started tracing), never for a time.
    scenario = tmp_path / "jb.toml"
    scenario.write_text(
        two_host('mode = "zip"\njb = [20, 50]\ndur = [1.5, 60]', duration='"${dur}"')
    )
    out = tmp_path / "sweep"
    proc = subprocess.Popen(
        [LATLAB, "run", str(scenario), "--out", str(out), "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_if_in_background,
    )
    try:
        _wait_for(
            lambda: _point_status(out, 1) == "running" and _ready(out / "points/jb=50,dur=60")
        )
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=stop_budget_s())
    finally:
        proc.kill()
    assert proc.returncode == 130 and "Traceback" not in stderr
    data = load_sweep(out)
    assert data["status"] == "interrupted"
    assert [p["status"] for p in data["points"]] == ["ok", "interrupted"]
    assert (out / "points/jb=20,dur=1.5/summary.json").is_file()
    namespaces = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, timeout=60
    ).stdout
    assert f"llab-{proc.pid}-" not in namespaces


def _point_status(out: Path, index: int) -> str | None:
    try:
        return load_sweep(out)["points"][index]["status"]
    except UserInputError:
        return None


def _ready(point_dir: Path) -> bool:
    """The point's processes are up: both wrote a trace file."""
    traces = point_dir / "traces"
    return traces.is_dir() and len(list(traces.iterdir())) == 2


def _wait_for(condition: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_a_point_without_followed_streams_says_what_its_sfu_forwarded() -> None:
    """An SFU load point follows no stream: its line gives the capture's forwarding and
    the SFU's cost per packet, not "no streams found"."""
    entry = {
        "name": "round=1,sfu=janus", "status": "ok", "streams": [],
        "forwarding": {"sfu": {"forwarded_per_s": 7336.9, "match_rate": 1.0,
                               "dwell": {"p50_ms": 0.420706, "p99_ms": 2.387106}},
                       "edge": {"error": "edge: capture log cut short"}},
        "costs": {"sfu": {"per_packet": {"cpu_us": 39.036}}},
    }  # fmt: skip
    assert point_line(entry) == (
        "round=1,sfu=janus: ok · sfu forwarded 7337 pkt/s, matched 100.0 %, dwell p50 0.421 "
        "p99 2.387 ms | edge: edge: capture log cut short | sfu 39.0 µs CPU per packet"
    )
    assert point_line({"name": "x", "status": "ok", "streams": []}) == "x: ok · no streams found"
