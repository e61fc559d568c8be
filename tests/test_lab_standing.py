"""latlab lab up / exec / down: a standing lab that outlives the command, for own commands."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from latlab.lab.netns import cleanup_stale, list_namespaces, pid_alive
from latlab.lab.scenario import ScenarioError, parse_scenario

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
]
REPO = Path(__file__).resolve().parent.parent
A, B = f"t{os.getpid()}a", f"t{os.getpid()}b"  # unique hosts: llab-0-tPIDa, llab-0-tPIDb


LAST_CPU = max(os.sched_getaffinity(0))


def scenario(tmp_path: Path, link: str = "", a: str = "") -> Path:
    """Hosts A and B joined by a link (``link``: its impairments; ``a``: host A's keys)."""
    path = tmp_path / "lab.toml"
    path.write_text(
        f'name = "lab-test"\nduration_s = 1\n[hosts.{A}]\n{a}[hosts.{B}]\n'
        f'[[links]]\nbetween = ["{A}", "{B}"]\n{link}'
    )
    return path


def latlab(tmp_path: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "LATLAB_STATE_DIR": str(tmp_path / "state")}
    return subprocess.run(
        [str(REPO / "latlab"), *args],
        capture_output=True,
        text=True,
        env=env,
        input=stdin,
        timeout=60,
    )


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode != 0 and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def gone(pid: int) -> bool:
    """Exited: no such process, or a zombie left for init to reap."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


@pytest.fixture()
def lab_down_after(tmp_path: Path):
    yield
    latlab(tmp_path, "lab", "down")  # whatever a failed test left up


def test_up_exec_down(tmp_path: Path, lab_down_after: None) -> None:
    text = scenario(tmp_path, a=f"cpus = [{LAST_CPU}]\n")
    up = latlab(tmp_path, "lab", "up", str(text), "--out", str(tmp_path / "out"))
    assert up.returncode == 0, up.stderr
    assert f"llab-0-{A}" in up.stdout and "10.77.0.2" in up.stdout and "lab exec" in up.stdout
    state = json.loads((tmp_path / "state" / "lab.json").read_text())
    assert state["namespaces"] == sorted([f"llab-0-{A}", f"llab-0-{B}"])
    assert not pid_alive(state["created_by_pid"])  # the lab outlived `lab up`
    # a later run's stale cleanup leaves the standing lab alone
    cleanup_stale()
    assert {f"llab-0-{A}", f"llab-0-{B}"} <= set(list_namespaces())

    ping = latlab(tmp_path, "lab", "exec", A, "--", "ping", "-c", "1", "-W", "2", "10.77.0.2")
    assert ping.returncode == 0 and "1 received" in ping.stdout
    assert latlab(tmp_path, "lab", "exec", B, "--", "sh", "-c", "exit 7").returncode == 7
    netns = latlab(tmp_path, "lab", "exec", B, "--", "ip", "netns", "identify")
    assert netns.stdout.strip() == f"llab-0-{B}"
    echo = latlab(tmp_path, "lab", "exec", A, "--", "cat", stdin="hello\n")
    assert echo.stdout == "hello\n"
    # host A's commands run on its CPUs (as latlab run's programs would), B's anywhere
    status = latlab(tmp_path, "lab", "exec", A, "--", "cat", "/proc/self/status").stdout
    assert f"Cpus_allowed_list:\t{LAST_CPU}\n" in status, status
    status = latlab(tmp_path, "lab", "exec", B, "--", "cat", "/proc/self/status").stdout
    if len(os.sched_getaffinity(0)) > 1:
        assert f"Cpus_allowed_list:\t{LAST_CPU}\n" not in status, status

    error = one_line_error(latlab(tmp_path, "lab", "exec", "nope", "--", "true"))
    assert error == f"latlab: error: unknown host 'nope' (hosts: {A}, {B})"
    again = one_line_error(latlab(tmp_path, "lab", "up", str(scenario(tmp_path))))
    assert "a lab is already up" in again and "latlab lab down" in again

    down = latlab(tmp_path, "lab", "down")
    assert down.returncode == 0, down.stderr
    assert not {f"llab-0-{A}", f"llab-0-{B}"} & set(list_namespaces())
    assert not (tmp_path / "state" / "lab.json").exists()
    assert "no lab is up" in one_line_error(latlab(tmp_path, "lab", "down"))
    assert "no lab is up" in one_line_error(latlab(tmp_path, "lab", "exec", A, "--", "true"))


def test_bad_scenario_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nduration_s = 1\n[hosts.a]\n[[links]]\nbetween = ["a", "z"]\n')
    error = one_line_error(latlab(tmp_path, "lab", "up", str(bad)))
    assert str(bad) in error and "unknown host 'z'" in error


def test_emulated_link_logs_and_stops(tmp_path: Path, lab_down_after: None) -> None:
    link = "delay_ms = 10\n"
    try:
        parse_scenario(scenario(tmp_path, link).read_text(), "lab.toml", processes_required=False)
    except ScenarioError:
        pytest.skip("link impairment not available")
    if not (REPO / "target" / "release" / "latlab-linkemu").is_file():
        pytest.skip("link emulator not built")
    out = tmp_path / "out"
    up = latlab(tmp_path, "lab", "up", str(scenario(tmp_path, link)), "--out", str(out))
    assert up.returncode == 0, up.stderr
    state = json.loads((tmp_path / "state" / "lab.json").read_text())
    emulators = [p["pid"] for p in state["processes"]]
    assert emulators and all(pid_alive(pid) for pid in emulators)
    ping = latlab(tmp_path, "lab", "exec", A, "--", "ping", "-c", "3", "-i", "0.2", "10.77.0.2")
    rtt = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)", ping.stdout)
    assert rtt and float(rtt.group(1)) >= 20.0  # 10 ms each way
    assert latlab(tmp_path, "lab", "down").returncode == 0
    assert all(gone(pid) for pid in emulators)
    logs = list((out / "links").glob("*.lllink"))
    assert logs and logs[0].stat().st_size > 0
    final = json.loads((out / "lab.json").read_text())
    assert final["stopped"] == ["sigterm"] * len(emulators)
