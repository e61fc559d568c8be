"""The command line as a user meets it: one-line errors, exit codes, record and report."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import latlab as run_latlab


def latlab(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return run_latlab(*args, cwd=cwd, timeout=120)


def scenario_text(host: str, pipeline: str, key: str = "pipeline") -> str:
    """A one-process scenario."""
    head = 'name = "x"\nduration_s = 2\n[hosts.a]\n[processes.p]\n'
    return head + f'host = "{host}"\n{key} = "{pipeline}"\n'


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_malformed_scenario_names_file_and_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'name = "x"\nduration_s = 1\n[hosts.a]\n[processes.p]\nhost = "a"\npipline = "x"\n'
    )
    line = one_line_error(latlab("run", str(bad), "--out", str(tmp_path / "out")))
    assert str(bad) in line and "unknown key 'pipline'" in line


def test_unknown_host_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(scenario_text("b", "fakesrc ! fakesink"))
    line = one_line_error(latlab("run", str(bad), "--out", str(tmp_path / "out")))
    assert "unknown host 'b'" in line


@pytest.mark.e2e
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_pipeline_that_fails_to_start_shows_its_stderr(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(scenario_text("a", "audiotestsrc ! nosuchelement ! fakesink"))
    out = tmp_path / "out"
    line = one_line_error(latlab("run", str(bad), "--out", str(out)))
    assert "'p'" in line and 'no element "nosuchelement"' in line
    assert (out / "logs" / "p.stderr").is_file() and (out / "run.json").is_file()


def test_report_without_traces(tmp_path: Path) -> None:
    line = one_line_error(latlab("report", str(tmp_path)))
    assert str(tmp_path) in line and "no trace files" in line


@pytest.mark.e2e
def test_record_any_gstreamer_command_then_report_json(tmp_path: Path) -> None:
    out = tmp_path / "rec"
    result = latlab(
        "record", "--out", str(out), "--", "gst-launch-1.0", "-q", "audiotestsrc", "is-live=true",
        "num-buffers=100", "!", "queue", "!", "identity", "name=planted", "sleep-time=2000",
        "!", "fakesink", "sync=true",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "end to end" in result.stdout and "planted:src" in result.stdout
    report = latlab("report", str(out), "--json")
    summary = json.loads(report.stdout)
    assert summary == json.loads((out / "summary.json").read_text())
    (stream,) = summary["streams"]
    planted = [s for s in stream["segments"] if s["to"].endswith("/planted:src")]
    assert planted and planted[0]["p50_ms"] == pytest.approx(2.0, abs=0.3)
    assert (out / "events.parquet").is_file()


def test_print_env_loads_the_tracer(tmp_path: Path) -> None:
    result = latlab("record", "--print-env", "--out", str(tmp_path))
    assert result.returncode == 0
    script = result.stdout + "\nenv\n"
    env = subprocess.run(
        ["sh", "-c", script], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert "GST_TRACERS=latlab" in env
    assert f"LATLAB_TRACE_DIR={tmp_path}/traces" in env


def test_record_refusals_are_one_line_before_the_command_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from latlab.lab import environment
    from latlab.lab.record import record

    monkeypatch.setattr(environment, "gstreamer_version", lambda: None)  # env.json: faster
    out, marker = tmp_path / "rec", tmp_path / "ran"
    assert record(["true"], out, "rx", trace=False) == 0
    scenario_dir = tmp_path / "scenario-run"
    scenario_dir.mkdir()
    (scenario_dir / "run.json").write_text('{"kind": "scenario", "processes": []}')
    refusals = {
        ("--out", str(out), "--name", "rx"): "process name 'rx' is already used",
        ("--out", str(out), "--name", "../rx"): "a process name is letters, digits",
        ("--out", str(out)): "give --name NAME to add a process",
        ("--out", str(scenario_dir), "--name", "tx"): "a latlab scenario run, not a record",
    }
    for options, message in refusals.items():
        result = latlab("record", *options, "--no-analyze", "--", "touch", str(marker))
        line = one_line_error(result)
        assert result.returncode == 2 and message in line, line
    assert not marker.exists()
