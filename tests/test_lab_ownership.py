"""latlab touches only what it created, proven by its journal's token (latlab.lab.owner).

A lab process killed with SIGKILL leaves namespaces, processes, a JACK server's files and a
private directory; the next ``latlab lab cleanup`` removes exactly those. Planted look-alikes
(a namespace named like latlab's with a dead pid, the standing owner's name, a process whose
pid a journal names but whose start time differs) and a second live lab survive.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from latlab.lab import owner
from latlab.lab.netns import Lab, ip, list_namespaces, namespace_name

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 60

# A latlab lab in a process of its own: two hosts and a link, a process in each host, a
# private directory; prints "ready" and waits to be killed.
DOOMED = """
import sys, time
from latlab.lab import owner
from latlab.lab.netns import Lab
from latlab.lab.process import ChildProcess
import threading
from pathlib import Path
out = Path(sys.argv[1])
lab = Lab(["a", "b"], [("a", "b")])
lab.up()
for host in ("a", "b"):
    child = ChildProcess(host, lab.exec_argv(host, ["sleep", "600"]), out / f"{host}.out",
                         out / f"{host}.err", threading.Event(), ready_marker=None)
    child.start({})
    print("child", child.pid, flush=True)
owner.record("jack", f"llab-{lab.pid}-dev")
(owner.private_tmp() / "socket").write_text("x")
print("tmp", owner.private_tmp(), flush=True)
print("journal", owner.journal().path, flush=True)
print("ready", lab.pid, flush=True)
time.sleep(600)
"""


def latlab(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(REPO / "latlab"), *args], capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)  # fmt: skip


def start_doomed(tmp_path: Path) -> tuple[subprocess.Popen[str], dict[str, list[str]]]:
    proc = subprocess.Popen([sys.executable, "-c", DOOMED, str(tmp_path)],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    said: dict[str, list[str]] = {}
    assert proc.stdout is not None
    for line in proc.stdout:  # its own report of each state, up to "ready"
        key, _, value = line.strip().partition(" ")
        said.setdefault(key, []).append(value)
        if key == "ready":
            return proc, said
    raise AssertionError(f"the lab process ended before ready (exit {proc.wait(timeout=5)})")


def alive(pid: int) -> bool:
    return owner.process_start(pid) is not None and owner.same_process(
        pid, owner.process_start(pid)
    )


@pytest.mark.timeout(180)
def test_cleanup_removes_what_a_killed_lab_listed_and_nothing_else(tmp_path: Path) -> None:
    dead = dead_pid()
    foreign = [namespace_name(dead, "foreign"), namespace_name(0, "foreign"), "plain-foreign"]
    for name in foreign:
        ip("netns", "add", name)
    # A process whose pid a (dead) journal names with another start time: a pid reused.
    bystander = subprocess.Popen(["sleep", "600"])
    fake = owner.journal_dir() / f"{'f' * 24}{owner.JOURNAL_SUFFIX}"
    fake.write_text(json.dumps({"schema": owner.SCHEMA, "pid": dead}) + "\n"
                    + json.dumps({"add": "process", "value": {"pid": bystander.pid,
                                  "start": 1, "what": "reused pid"}}) + "\n")  # fmt: skip
    try:
        with Lab(["live"]) as live:  # this process's lab: its journal is locked
            proc, said = start_doomed(tmp_path)
            lab_pid = int(said["ready"][0])
            children = [int(p) for p in said["child"]]
            names = [namespace_name(lab_pid, h) for h in ("a", "b")]
            assert set(names) <= set(list_namespaces())
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
            assert all(alive(pid) for pid in children)  # orphans, until the cleanup

            result = latlab("lab", "cleanup")
            assert result.returncode == 0, result.stderr
            namespaces = list_namespaces()
            assert not set(names) & set(namespaces), result.stdout
            assert live.namespace("live") in namespaces  # a live lab's stays
            assert set(foreign) <= set(namespaces)  # nobody's journal lists them
            deadline = time.monotonic() + 10
            while any(alive(pid) for pid in children) and time.monotonic() < deadline:
                time.sleep(0.05)  # the kernel reaps the killed processes
            assert not any(alive(pid) for pid in children)
            assert not Path(said["tmp"][0]).exists()
            assert not Path(said["journal"][0]).exists()
            assert bystander.poll() is None, "a reused pid was killed"
            assert not fake.exists()  # the dead journal was handled (its entry ignored)
    finally:
        bystander.kill()
        bystander.wait(timeout=10)
        fake.unlink(missing_ok=True)
        for name in foreign:
            ip("netns", "del", name, check=False)


def test_a_journal_line_cut_by_a_kill_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "x.journal"
    path.write_text(json.dumps({"schema": owner.SCHEMA, "pid": 1}) + "\n"
                    + json.dumps({"add": "namespace", "value": "llab-1-a"}) + "\n"
                    + json.dumps({"add": "namespace", "value": "llab-1-b"}) + "\n"
                    + json.dumps({"drop": "namespace", "value": "llab-1-a"}) + "\n"
                    + '{"add": "namespace", "val')  # fmt: skip
    entries = owner.Entries.read(path)
    assert entries.items["namespace"] == ["llab-1-b"]


def dead_pid() -> int:
    """A pid no process has now (a short-lived child's, after it was reaped)."""
    child = subprocess.Popen(["true"])
    child.wait(timeout=10)
    return child.pid


def test_the_journal_directory_is_root_only() -> None:
    with Lab(["x"]):
        mode = owner.journal_dir().stat().st_mode & 0o777
        assert mode == 0o700
        assert os.stat(owner.journal().path).st_mode & 0o777 == 0o600


def test_a_clean_exit_leaves_no_journal_and_no_private_directory(tmp_path: Path) -> None:
    code = ("from latlab.lab import owner\n"
            "(owner.private_tmp() / 'socket').write_text('x')\n"
            "print(owner.journal().path, owner.private_tmp())\n")  # fmt: skip
    env = {**os.environ, "LATLAB_OWNER_DIR": str(tmp_path / "owners")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=TIMEOUT_S, check=True)  # fmt: skip
    journal, private = done.stdout.split()
    assert Path(private).parent == tmp_path / "tmp"
    assert not Path(journal).exists() and not Path(private).exists()
