"""``record``: any command with the tracer env, outside the lab; and ``print_env``."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from latlab.lab.record import RecordError, print_env, record
from latlab.tracer import is_built

REPO = Path(__file__).resolve().parent.parent


TRACE = is_built()


def test_record_gst_launch(tmp_path: Path) -> None:
    argv = ["gst-launch-1.0", "-e", "audiotestsrc", "num-buffers=20", "!", "fakesink"]
    assert record(argv, tmp_path / "run", "app", trace=TRACE) == 0
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["kind"] == "record"
    assert run["processes"][0]["argv"] == argv
    assert run["processes"][0]["exit_code"] == 0
    assert json.loads((tmp_path / "run" / "env.json").read_text())["gstreamer_version"]
    if TRACE:
        assert [p.name.split("-")[0] for p in (tmp_path / "run" / "traces").iterdir()] == ["app"]


def test_record_returns_exit_code(tmp_path: Path) -> None:
    assert record(["sh", "-c", "exit 3"], tmp_path / "run", trace=False) == 3
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["name"] == "sh"
    assert run["status"] == "failed"


def test_record_missing_command(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="no-such-command-xyz: cannot run"):
        record(["no-such-command-xyz"], tmp_path / "run", trace=False)


def test_record_forwards_sigint(tmp_path: Path) -> None:
    out = tmp_path / "run"
    script = (
        "import sys; from pathlib import Path; from latlab.lab.record import record; "
        f"sys.exit(record(['sh', '-c', 'echo started; exec sleep 30'], Path({str(out)!r}), "
        "trace=False))"
    )
    child = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"started\n"
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=10) == 128 + signal.SIGINT
    finally:
        if child.poll() is None:
            child.kill()
    assert json.loads((out / "run.json").read_text())["processes"][0]["exit_code"] == 130


@pytest.mark.skipif(not TRACE, reason="tracer not built")
def test_print_env_is_shell_quoted(tmp_path: Path) -> None:
    out = tmp_path / "dir with space"
    text = print_env(out)
    lines = text.splitlines()
    assert all(line.startswith("export ") for line in lines)
    env = dict(shlex.split(line[len("export ") :])[0].split("=", 1) for line in lines)
    assert env["LATLAB_TRACE_DIR"] == str((out / "traces").resolve())
    assert "latlab" in env["GST_TRACERS"]
    shown = subprocess.run(
        ["sh", "-c", text + 'printf %s "$LATLAB_TRACE_DIR"'], capture_output=True, text=True
    )
    assert shown.stdout == str((out / "traces").resolve())
