"""SRT failures on the real stack: a one-line error naming the process, nothing measured lost.

An SRT peer that never connects, a wrong passphrase and a port already in use each end
the run with exit code 2 and one line on stderr; run.json and every trace written so far
stay in the run directory, which ``latlab report`` still reads.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from latlab.errors import FAILED
from latlab.lab.netns import list_namespaces
from tests.conftest import two_hosts

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
]

REPO = Path(__file__).resolve().parent.parent
LATLAB = str(REPO / "latlab")
SENDER = (
    "videotestsrc is-live=true pattern=ball ! video/x-raw,width=320,height=240,framerate=30/1 "
    "! x264enc tune=zerolatency speed-preset=ultrafast key-int-max=30 ! mpegtsmux "
    "! srtsink uri=srt://:7001 mode=listener wait-for-connection=false"
)
RECEIVER = (
    "srtsrc uri=srt://${hosts.tx.addr}:7001 mode=caller "
    "! tsdemux ! h264parse ! avdec_h264 ! fakesink sync=true"
)


def run_cli(tmp_path: Path, text: str) -> tuple[str, Path]:
    """Run the scenario ``text`` with ``latlab run``; its one stderr line and run directory."""
    scenario = tmp_path / "scenario.toml"
    scenario.write_text(text)
    out = tmp_path / "run"
    with subprocess.Popen(
        [LATLAB, "run", str(scenario), "--out", str(out), "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    ) as proc:
        stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == FAILED, stderr  # the measurement failed (docs/exit-codes.md)
    assert "Traceback" not in stdout + stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert not [ns for ns in list_namespaces() if ns.startswith(f"llab-{proc.pid}-")]
    return lines[0], out


def check_kept(out: Path, error: str, traced: list[str]) -> dict:
    """run.json records the failure; each process in ``traced`` left a trace; report reads it."""
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "failed"
    assert run["error"] in error
    names = sorted(p.name.rsplit("-", 1)[0] for p in (out / "traces").glob("*.lltrace"))
    assert names == sorted(traced)
    report = subprocess.run(
        [LATLAB, "report", str(out)], capture_output=True, text=True, check=False, timeout=120
    )
    assert report.returncode == 0, report.stderr
    assert "sender/videotestsrc0" in report.stdout
    return run


def test_peer_that_never_connects(tmp_path: Path) -> None:
    receiver = RECEIVER.replace(":7001", ":7002")  # nobody listens there
    line, out = run_cli(tmp_path, two_hosts(receiver, SENDER, duration=3))
    assert line.startswith("latlab: error: process 'receiver' saw no media: ")
    assert "SRT connection failed: srtsrc0: " in line
    assert "Connection timeout" in line or "Connection setup failure" in line
    run = check_kept(out, line, ["receiver", "sender"])
    assert run["duration_s"] > 2.9  # the run went its full length, then stopped
    stopped = {p["name"]: p["stopped"] for p in run["processes"]}
    assert stopped["sender"] == "sigint"
    assert stopped["receiver"] in ("sigint", "sigterm", "sigkill")


def test_wrong_passphrase(tmp_path: Path) -> None:
    sender = SENDER + " passphrase=AAAAAAAAAAAA pbkeylen=16"
    receiver = RECEIVER.replace("mode=caller", "mode=caller passphrase=BBBBBBBBBBBB pbkeylen=16")
    line, out = run_cli(tmp_path, two_hosts(receiver, sender, duration=3))
    assert line.startswith("latlab: error: process 'receiver' saw no media: ")
    assert "SRT connection failed: srtsrc0: Failed to authenticate: Incorrect passphrase" in line
    check_kept(out, line, ["receiver", "sender"])


def test_port_in_use(tmp_path: Path) -> None:
    text = two_hosts(RECEIVER, SENDER, duration=3)
    text += f'[processes.sender2]\nhost = "tx"\npipeline = {json.dumps(SENDER)}\n'
    line, out = run_cli(tmp_path, text)
    assert line.startswith("latlab: error: process 'sender2' failed to start (exit code ")
    assert "srtsink0: " in line and "Cannot bind to 0.0.0.0:7001" in line
    assert line.endswith("(is another process on host 'tx' using that port?)")
    run = check_kept(out, line, ["receiver", "sender", "sender2"])
    stopped = {p["name"]: p["stopped"] for p in run["processes"]}
    assert (stopped["sender"], stopped["sender2"]) == ("sigint", "exited")
    assert stopped["receiver"] in ("sigint", "sigterm")  # it may still be calling
