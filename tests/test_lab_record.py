"""``record``: any command with the tracer env, outside the lab; and ``print_env``."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest

from latlab import rundir
from latlab.lab import environment
from latlab.lab.record import RecordError, print_env, record
from latlab.lab.runner import run_scenario
from latlab.lab.scenario import parse_scenario
from latlab.pipeline import analyze_run
from latlab.tracer import is_built
from tests.conftest import L16_CAPS, LATLAB, latlab, two_hosts

REPO = Path(__file__).resolve().parent.parent


TRACE = is_built()
# Recorders started as child processes below: env.json without asking gst-launch-1.0.
NO_GST = "from latlab.lab import environment; environment.gstreamer_version = lambda: None; "


@pytest.fixture(autouse=True)
def _no_gstreamer_version(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fast-tier tests write env.json without running gst-launch-1.0 --version (faster)."""
    if not request.node.get_closest_marker("e2e"):
        monkeypatch.setattr(environment, "gstreamer_version", lambda: None)


@pytest.mark.e2e
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
        NO_GST + "import sys; from pathlib import Path; from latlab.lab.record import record; "
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
        ["sh", "-c", text + 'printf %s "$LATLAB_TRACE_DIR"'],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.stdout == str((out / "traces").resolve())


def test_record_names_must_be_file_name_components(tmp_path: Path) -> None:
    for bad in ("a/b", "../x", ".hidden", "-x", "a b", "x" * 65, ""):
        with pytest.raises(RecordError, match="a process name is"):
            record(["true"], tmp_path / "run", bad, trace=False)
    assert not (tmp_path / "run").exists()


def test_second_name_joins_and_run_json_lists_both(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert record(["sh", "-c", "exit 0"], out, "receiver", trace=False) == 0
    assert record(["sh", "-c", "exit 3"], out, "sender", trace=False) == 3
    run = json.loads((out / "run.json").read_text())
    assert (run["kind"], run["schema"], run["name"]) == ("record", "latlab.run/1", "receiver")
    assert [p["name"] for p in run["processes"]] == ["receiver", "sender"]
    receiver, sender = run["processes"]
    assert sender["argv"] == ["sh", "-c", "exit 3"] and sender["pid"] > 0
    assert (receiver["exit_code"], sender["exit_code"]) == (0, 3)
    assert receiver["started_s"] == 0.0 < receiver["stopped_s"] <= sender["started_s"]
    assert sender["started_s"] < sender["stopped_s"] == run["duration_s"]
    assert receiver["stopped"] == sender["stopped"] == "exited"
    assert (run["status"], run["error"]) == ("failed", "sender: exit code 3")


def test_used_name_is_refused_before_the_command_starts(tmp_path: Path) -> None:
    out = tmp_path / "run"
    record(["true"], out, "rx", trace=False)
    marker = tmp_path / "ran"
    with pytest.raises(RecordError, match="process name 'rx' is already used"):
        record(["touch", str(marker)], out, "rx", trace=False)
    assert not marker.exists()
    assert len(json.loads((out / "run.json").read_text())["processes"]) == 1


def test_unnamed_record_into_a_record_dir_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    record(["true"], out, "rx", trace=False)
    with pytest.raises(RecordError, match=r"exists and is not empty \(give --name"):
        record(["true"], out, trace=False)


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"notes.txt": "x"}, r"not a latlab run directory \(no run.json\)"),
        ({"run.json": '{"schema": "latlab.run/1", "kind": "scenario", "processes": []}'},
         "a latlab scenario run, not a record run"),
        ({"run.json": "{"}, "run.json: cannot read"),
        ({"run.json": "[]"}, "run.json: not the run.json of a latlab record run"),
    ],
)  # fmt: skip
def test_other_directories_are_refused(tmp_path: Path, files: dict, message: str) -> None:
    out = tmp_path / "run"
    out.mkdir()
    for name, text in files.items():
        (out / name).write_text(text)
    with pytest.raises(RecordError, match=message):
        record(["true"], out, "rx", trace=False)


def test_a_run_recorded_before_joining_existed_can_be_joined(tmp_path: Path) -> None:
    out = tmp_path / "run"
    (out / "traces").mkdir(parents=True)
    (out / "run.json").write_text(json.dumps({
        "schema": "latlab.run/1", "kind": "record", "name": "rx", "status": "ok",
        "started_monotonic_ns": 1, "duration_s": 1.0, "processes": [
            {"name": "rx", "argv": ["true"], "pid": 1, "exit_code": 0, "started_s": 0.0,
             "stopped": "exited"}],
    }))  # fmt: skip
    assert record(["true"], out, "tx", trace=False) == 0
    run = json.loads((out / "run.json").read_text())
    assert [(p["name"], p["stopped"]) for p in run["processes"]] == [
        ("rx", "exited"),
        ("tx", "exited"),
    ]
    assert run["status"] == "ok"


def test_a_name_that_did_not_start_may_be_used_again(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(RecordError, match="cannot run"):
        record(["no-such-command-xyz"], out, "rx", trace=False)
    run = json.loads((out / "run.json").read_text())
    assert (run["status"], run["processes"][0]["stopped"]) == ("failed", "not-started")
    assert record(["true"], out, "rx", trace=False) == 0
    run = json.loads((out / "run.json").read_text())
    assert [(p["name"], p["stopped"]) for p in run["processes"]] == [("rx", "exited")]
    assert run["status"] == "ok"


def test_concurrent_processes_all_land_in_run_json(tmp_path: Path) -> None:
    """Eight recorders started together into one new directory, each ending at once: the
    lock keeps every start and every end."""
    out = tmp_path / "run"
    script = (
        NO_GST + "import sys; from pathlib import Path; from latlab.lab.record import record; "
        f"sys.exit(record(['true'], Path({str(out)!r}), sys.argv[1], trace=False))"
    )
    children = [
        subprocess.Popen([sys.executable, "-c", script, f"p{i}"], cwd=REPO) for i in range(8)
    ]
    assert [child.wait(timeout=30) for child in children] == [0] * 8
    run = json.loads((out / "run.json").read_text())
    assert sorted(p["name"] for p in run["processes"]) == [f"p{i}" for i in range(8)]
    assert all(p["stopped"] == "exited" and p["exit_code"] == 0 for p in run["processes"])
    assert run["status"] == "ok"


def test_run_json_says_running_while_a_process_runs(tmp_path: Path) -> None:
    out = tmp_path / "run"
    script = (
        NO_GST + "import sys; from pathlib import Path; from latlab.lab.record import record; "
        f"sys.exit(record(['sh', '-c', 'echo started; exec sleep 30'], Path({str(out)!r}), "
        "'rx', trace=False))"
    )
    child = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"started\n"
        with rundir.locked(out):  # its start is listed by the time the lock is free
            run = json.loads((out / "run.json").read_text())
        assert run["status"] == "running" and run["processes"][0]["stopped"] is None
        assert record(["true"], out, "tx", trace=False) == 0
        assert json.loads((out / "run.json").read_text())["status"] == "running"
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=10) == 130
    finally:
        if child.poll() is None:
            child.kill()
    run = json.loads((out / "run.json").read_text())
    assert [p["stopped"] for p in run["processes"]] == ["sigint", "exited"]
    assert (run["status"], run["error"]) == ("failed", "rx: exit code 130")


RECEIVER = (
    f'udpsrc port={{port}} caps="{L16_CAPS}" ! rtpjitterbuffer latency=20 ! rtpL16depay ! '
    "fakesink sync=true"
)
SENDER = (
    "audiotestsrc is-live=true samplesperbuffer=480{buffers} ! audio/x-raw,rate=48000,channels=2 "
    "! rtpL16pay ! udpsink host={host} port={port}"
)
# Per segment, how far the p50 of a hand recording on loopback may be from the scenario
# runner's on a veth pair. Measured over 20 repeats of this test's two runs (on a machine
# running other tests): the largest |p50 by hand - p50 in the lab| was 0.21 ms
# (jitterbuffer, one lab run at 33.02 ms; the other 19 within 0.06 ms), 0.09 ms (capture),
# 0.07 ms (network), 0.03 ms (the sender's capsfilter, sink-wait), 0.02 ms (playout),
# 0.005 ms or less for the rest; each segment's p50 spread over the 20 runs of one kind
# was at most 0.27 ms (jitterbuffer in the lab), 0.12 ms elsewhere. 0.5 ms is 2.4 times
# the largest difference, and still a twentieth of one 10 ms buffer, which is what a
# stitching or naming mistake would move a segment by.
P50_TOLERANCE_MS = 0.5


def free_udp_port() -> int:
    """A UDP port nothing is bound to now (the kernel's pick from its ephemeral range)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Lines:
    """A process's text output read by a thread; ``wait_for`` a line containing a marker."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.put(line)

    def wait_for(self, marker: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not any(marker in line for line in self.seen):
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no {marker!r} in {self.seen}"
            with contextlib.suppress(queue.Empty):
                self.seen.append(self.lines.get(timeout=remaining))


def wait_for_file(directory: Path, pattern: str, timeout: float) -> Path:
    """The first file matching ``pattern`` in ``directory``, polled until it appears."""
    deadline = time.monotonic() + timeout
    while not (found := sorted(directory.glob(pattern))):
        assert time.monotonic() < deadline, f"no {pattern} in {directory}"
        time.sleep(0.02)
    return found[0]


def record_by_hand(out: Path) -> dict:
    """The receiver, then the sender, each ``latlab record``-ed into ``out`` as from two
    terminals on loopback; the receiver stopped with SIGINT once the sender ended.
    ``latlab report out --json``."""
    port = free_udp_port()
    launch = ["gst-launch-1.0", "-e"]
    stderr = out.with_name(out.name + "-receiver.stderr")
    with stderr.open("w") as receiver_stderr:
        receiver = subprocess.Popen(
            [LATLAB, "record", "--out", str(out), "--name", "receiver", "--no-analyze", "--",
             *launch, *shlex.split(RECEIVER.format(port=port))],
            stdout=subprocess.PIPE, stderr=receiver_stderr, text=True,
        )  # fmt: skip
    try:
        assert receiver.stdout is not None
        Lines(receiver.stdout).wait_for("New clock", timeout=20)
        wait_for_file(out / "traces", "receiver-*.lltrace", timeout=10)
        sender_pipeline = SENDER.format(buffers=" num-buffers=150", host="127.0.0.1", port=port)
        sender = latlab(
            "record", "--out", str(out), "--name", "sender", "--",
            *launch, *shlex.split(sender_pipeline), timeout=30,
        )  # fmt: skip
        assert sender.returncode == 0, sender.stderr
        assert "not analysed: receiver still recording" in sender.stderr  # no table, no error
        receiver.send_signal(signal.SIGINT)
        assert receiver.wait(timeout=20) == 0, stderr.read_text()
    finally:
        if receiver.poll() is None:  # SIGTERM: latlab passes it on to gst-launch
            receiver.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                receiver.wait(timeout=10)
            receiver.kill()
    report = latlab("report", str(out), "--json", timeout=60)
    assert report.returncode == 0, report.stderr
    return json.loads(report.stdout)


def run_in_lab(out: Path) -> dict:
    """The same two pipelines as a scenario (hosts tx and rx, receiver first); summary.json.

    The sender runs without num-buffers: the runner stops it at the end of duration_s
    (1.5 s, its 150 buffers), as a scenario process may not end on its own.
    """
    port = free_udp_port()
    sender = SENDER.format(buffers="", host="${hosts.rx.addr}", port=port)
    text = two_hosts(RECEIVER.format(port=port), sender, name="by-hand", duration=1.5)
    scenario = parse_scenario(text, "by-hand.toml")
    run_scenario(scenario, out, progress=False)
    summary, _, _ = analyze_run(out, scenario.analysis.unit_ms)
    return summary


def probes_kinds_p50(summary: dict) -> tuple[list[str], list[str], list[float]]:
    """The one stream's probe names, its segments' kinds and their p50s."""
    (stream,) = summary["streams"]
    segments = stream["segments"]
    return stream["probes"], [s["kind"] for s in segments], [s["p50_ms"] for s in segments]


@pytest.mark.exclusive
@pytest.mark.e2e
@pytest.mark.skipif(not TRACE, reason="tracer not built")
@pytest.mark.skipif(os.geteuid() != 0, reason="the lab run needs root (network namespaces)")
def test_sender_and_receiver_recorded_by_hand_match_the_lab(tmp_path: Path) -> None:
    by_hand = probes_kinds_p50(record_by_hand(tmp_path / "by-hand"))
    in_lab = probes_kinds_p50(run_in_lab(tmp_path / "lab"))
    probes = by_hand[0]
    assert probes[1] == "sender/audiotestsrc0:src" and probes[-1] == "receiver/fakesink0:sink"
    assert "receiver/udpsrc0:src" in probes
    assert by_hand[:2] == in_lab[:2]
    assert by_hand[2] == pytest.approx(in_lab[2], abs=P50_TOLERANCE_MS)
    run = json.loads((tmp_path / "by-hand" / "run.json").read_text())
    assert [(p["name"], p["exit_code"], p["stopped"]) for p in run["processes"]] == [
        ("receiver", 0, "sigint"),
        ("sender", 0, "exited"),
    ]
    assert run["status"] == "ok"
