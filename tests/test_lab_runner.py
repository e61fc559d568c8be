"""Scenario runs on the real stack: namespaces, gst-launch-1.0, the tracer when built."""

from __future__ import annotations

import json
import os
import select
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest

from latlab.lab.netns import list_namespaces
from latlab.lab.runner import READY_TIMEOUT_S, RunError, run_scenario
from latlab.lab.scenario import Scenario, load_scenario, parse_scenario
from latlab.tracer import is_built
from tests.conftest import L16_CAPS, as_if_in_background, stop_budget_s, two_hosts

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
]

REPO = Path(__file__).resolve().parent.parent
CAPS = L16_CAPS


TRACE = is_built()


SENDER = (
    "audiotestsrc is-live=true samplesperbuffer=480 ! audio/x-raw,rate=48000,channels=2 "
    "! rtpL16pay ! udpsink host=${hosts.rx.addr} port=5004"
)


def l16_scenario(duration: float, receiver_sink: str = "fakesink sync=true") -> str:
    """The two-host L16 scenario, with the receiver ending in ``receiver_sink``."""
    receiver = f'udpsrc port=5004 caps="{CAPS}" ! rtpjitterbuffer latency=20 ! rtpL16depay'
    receiver += f" ! {receiver_sink}"
    return two_hosts(receiver, SENDER, name="l16-test", duration=duration)


def write(tmp_path: Path, text: str) -> Scenario:
    path = tmp_path / "scenario.toml"
    path.write_text(text)
    return load_scenario(path)


def namespaces_of(pid: int) -> list[str]:
    return [n for n in list_namespaces() if n.startswith(f"llab-{pid}-")]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_two_host_run(tmp_path: Path) -> None:
    raw = tmp_path / "received.raw"
    scenario = write(tmp_path, l16_scenario(2, f"filesink location={shlex.quote(str(raw))}"))
    out = tmp_path / "run"
    result = run_scenario(scenario, out, trace=TRACE, progress=False)

    run = json.loads((out / "run.json").read_text())
    assert result.run == run
    assert run["status"] == "ok"
    assert run["name"] == "l16-test"
    assert 2.0 <= run["duration_s"] < 3.0
    assert [p["name"] for p in run["processes"]] == ["receiver", "sender"]
    for proc in run["processes"]:
        assert proc["exit_code"] == 0
        assert proc["stopped"] == "sigint"
        assert proc["ready_s"] is not None
        assert not pid_alive(proc["pid"])
    assert run["hosts"]["rx"]["addr"] == "10.77.0.2"
    sender = run["processes"][1]
    assert sender["argv"][:4] == ["ip", "netns", "exec", run["hosts"]["tx"]["namespace"]]
    assert "host=10.77.0.2" in sender["argv"]
    # 2 s of 48 kHz stereo L16 arrived through the veth link
    assert raw.stat().st_size > 48000 * 4

    env = json.loads((out / "env.json").read_text())
    assert env["gstreamer_version"].startswith("1.")
    assert env["kernel"] == os.uname().release
    assert (out / "scenario.toml").read_text() == scenario.text
    for name in ("receiver", "sender"):
        assert "New clock:" in (out / "logs" / f"{name}.stdout").read_text()
        assert (out / "logs" / f"{name}.stderr").exists()
    if TRACE:
        assert {p.name.split("-")[0] for p in result.trace_files} == {"receiver", "sender"}
    assert namespaces_of(os.getpid()) == []


def test_failing_pipeline_names_process(tmp_path: Path) -> None:
    text = l16_scenario(2).replace(
        'pipeline = "audiotestsrc', 'pipeline = "nosuchelement ! fakesink"\n#'
    )
    out = tmp_path / "run"
    with pytest.raises(RunError) as info:
        run_scenario(write(tmp_path, text), out, trace=False, progress=False)
    message = str(info.value)
    assert "\n" not in message
    assert "process 'sender'" in message
    assert 'no element "nosuchelement"' in message
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "failed"
    assert run["processes"][0]["stopped"] == "sigint"  # the receiver was stopped cleanly
    assert namespaces_of(os.getpid()) == []


def test_early_exit_fails_run(tmp_path: Path) -> None:
    text = l16_scenario(5).replace(
        "audiotestsrc is-live=true", "audiotestsrc is-live=true num-buffers=20"
    )
    with pytest.raises(RunError, match=r"process 'sender' exited early \(exit code 0\)"):
        run_scenario(write(tmp_path, text), tmp_path / "run", trace=False, progress=False)
    assert namespaces_of(os.getpid()) == []


def test_refuses_non_empty_out_dir(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text("{}")
    with pytest.raises(FileExistsError):
        run_scenario(parse_scenario(l16_scenario(1)), out, trace=False, progress=False)


def read_line(stream: IO[str], timeout: float) -> str:
    """The next line of a child's stdout, or an assertion error after ``timeout`` s."""
    ready, _, _ = select.select([stream], [], [], timeout)
    assert ready, f"no line on stdout in {timeout:g} s"
    return stream.readline()


def wait_for_data(path: Path, timeout: float = 10.0) -> None:
    """Wait until media has arrived at the receiver's filesink.

    gst-launch-1.0 1.22 can deadlock when SIGINT (EOS) comes within milliseconds of
    PLAYING, so the test interrupts a run whose media is flowing, as a user would.
    """
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.stat().st_size > 0):
        assert time.monotonic() < deadline, f"no media arrived in {path}"
        time.sleep(0.05)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_mid_run_cleans_up(tmp_path: Path, signum: int, code: int) -> None:
    path = tmp_path / "scenario.toml"
    raw = tmp_path / "received.raw"
    path.write_text(l16_scenario(60, f"filesink location={shlex.quote(str(raw))}"))
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "latlab.lab", str(path), str(out), "--no-trace"]
    child = subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=as_if_in_background,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        line = read_line(child.stdout, READY_TIMEOUT_S * 2 + 10)  # once every process is ready
        assert "all processes ready" in line
        assert len(namespaces_of(child.pid)) == 2
        wait_for_data(raw)
        child.send_signal(signum)
        try:
            assert child.wait(timeout=stop_budget_s()) == code
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGUSR1)  # the runner prints where it is stuck
            child.kill()
            pytest.fail(f"the run did not stop: {child.communicate(timeout=10)[1][-4000:]}")
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate(timeout=10)
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "interrupted"
    for proc in run["processes"]:
        assert proc["stopped"] == "sigint"
        assert not pid_alive(proc["pid"])
    assert namespaces_of(child.pid) == []
    assert "Got EOS" in (out / "logs" / "sender.stdout").read_text()
