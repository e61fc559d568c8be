"""Janus as a lab host (latlab.lab.sfu): started in its host's namespace with the
configuration latlab writes, ready when its API answers, reachable from another host
over the lab link and bound to nothing else, counted by perf while idle, stopped
cleanly. (Publishers and subscribers through it are the next step of issue 16.)"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from latlab import rundir
from latlab.lab.scenario import parse_scenario
from latlab.lab.sfu import ROOM, VIDEOROOM
from tests.conftest import latlab

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("janus") is None or shutil.which("perf") is None,
        reason="needs root (namespaces), Janus (janus, janus-demos) and perf",
    ),
]

# A client on another host: a Janus session, the videoroom plugin, its room list.
LISTER = """
import json, sys, urllib.request
base = f"http://{sys.argv[1]}:8088/janus"
def post(url, body):
    request = urllib.request.Request(url, json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=5) as answer:
        return json.loads(answer.read())
session = post(base, {"janus": "create", "transaction": "s"})["data"]["id"]
handle = post(f"{base}/{session}", {"janus": "attach", "plugin": "janus.plugin.videoroom",
                                    "transaction": "a"})["data"]["id"]
rooms = post(f"{base}/{session}/{handle}", {"janus": "message", "transaction": "l",
                                            "body": {"request": "list"}})
print("ready", json.dumps([r["room"] for r in rooms["plugindata"]["data"]["list"]]), flush=True)
import signal; signal.pause()
"""

SCENARIO = f"""
name = "janus-host"
duration_s = 3
[hosts.sfu]
capture = true
[hosts.client]
[[links]]
between = ["client", "sfu"]
[sfus.janus]
host = "sfu"
server = "janus"
cost = true
cost_idle_s = 1
[processes.lister]
host = "client"
command = {json.dumps([sys.executable, "-c", LISTER, "${hosts.sfu.addr}"])}
"""


@pytest.fixture(scope="module")
def janus_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("janus") / "run"
    path = out.parent / "janus-host.toml"
    path.write_text(SCENARIO, encoding="utf-8")
    parse_scenario(SCENARIO, str(path))  # a broken test scenario fails here, not in the lab
    result = latlab("run", str(path), "--out", str(out), timeout=120)
    assert result.returncode == 0, result.stderr
    return out


def test_janus_answers_other_hosts_on_its_lab_address_only(janus_run: Path) -> None:
    run = json.loads((janus_run / rundir.RUN_FILE).read_text())
    janus = run["sfus"]["janus"]
    sfu_addr = run["hosts"]["sfu"]["addr"]
    assert janus["version"].startswith("1.1")
    assert janus["plugins"] == [VIDEOROOM]
    assert janus["listening"] == [f"tcp {sfu_addr}:8088"]
    stdout, _ = rundir.process_logs(janus_run, "lister")
    assert stdout.read_text().split("\n")[0] == f"ready [{ROOM}]"


def test_janus_is_stopped_cleanly_and_leaves_nothing(janus_run: Path) -> None:
    run = json.loads((janus_run / rundir.RUN_FILE).read_text())
    assert run["sfus"]["janus"]["stopped"] == "sigint"
    log = rundir.sfu_dir(janus_run, "janus") / rundir.SFU_LOG
    assert "Bye!" in log.read_text().splitlines()[-1]
    namespaces = [ns for ns in os.listdir("/run/netns") if ns.startswith("llab-")]
    assert not [ns for ns in namespaces if run["hosts"]["sfu"]["namespace"] == ns]


def test_idle_janus_is_counted_by_perf(janus_run: Path) -> None:
    """Janus's own timers while nothing is connected: about 1 % of a CPU or less."""
    summary = json.loads((janus_run / rundir.SUMMARY_FILE).read_text())
    cost = summary["costs"]["janus"]
    assert cost["host"] == "sfu" and cost["idle"]["s"] >= 0.8
    assert 0 < cost["idle"]["cpu_percent"] < 5
    assert cost["idle"]["per_s"]["syscalls"] > 0
