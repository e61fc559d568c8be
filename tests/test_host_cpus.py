"""A host's ``cpus``: its programs (processes, SFU, load generator) run on those CPUs only,
as run.json records from the kernel; a CPU latlab may not use fails in one line."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from latlab import rundir
from latlab.errors import ENVIRONMENT
from latlab.lab.netns import CpusUnavailable, Lab
from latlab.lab.sfu.latlab import latlab_sfu_binary
from tests.conftest import latlab, sfu_and_load_host

CPUS = sorted(os.sched_getaffinity(0))


def test_a_cpu_latlab_may_not_use_is_refused_naming_the_host() -> None:
    lab = Lab(["sfu"])
    lab.cpus = {"sfu": (CPUS[0], 4095)}
    with pytest.raises(CpusUnavailable, match=r"host 'sfu': cpus \[4095\] not available here"):
        lab.check_cpus()
    assert CpusUnavailable("x").exit_code == ENVIRONMENT


needs_lab = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("gst-launch-1.0"),
    reason="needs root (namespaces) and GStreamer",
)


@pytest.mark.e2e
@needs_lab
@pytest.mark.timeout(180)
def test_each_hosts_programs_run_on_its_cpus(tmp_path: Path) -> None:
    """The SFU's host on the last CPU, the load's on the first: the kernel held exactly
    those for latlab-sfu and latlab-loadgen after exec."""
    if len(CPUS) < 2 or not latlab_sfu_binary().is_file():
        pytest.skip("needs two CPUs and latlab-sfu (bash scripts/setup.sh)")
    text = sfu_and_load_host("pinned", "latlab", duration=2)
    text = text.replace("[hosts.sfu]\n", f"[hosts.sfu]\ncpus = [{CPUS[-1]}]\n")
    text = text.replace("[hosts.load]\n", f"[hosts.load]\ncpus = [{CPUS[0]}]\n")
    text += '[loads.crowd]\nsfu = "latlab"\nhost = "load"\npublishers = 1\nsubscribers = 1\n'
    path = tmp_path / "pinned.toml"
    path.write_text(text, encoding="utf-8")
    out = tmp_path / "run"
    done = latlab("run", str(path), "--out", str(out), timeout=150)
    assert done.returncode == 0, done.stderr[-2000:]
    run = json.loads((out / rundir.RUN_FILE).read_text())
    assert run["hosts"]["sfu"]["cpus"] == [CPUS[-1]]
    assert run["sfus"]["latlab"]["cpus"] == [CPUS[-1]]
    assert run["loads"]["crowd"]["cpus"] == [CPUS[0]]


@pytest.mark.e2e
@needs_lab
@pytest.mark.timeout(120)
def test_an_unavailable_cpu_fails_the_run_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    text = (Path(__file__).parents[1] / "scenarios" / "l16-basic.toml").read_text()
    path.write_text(text.replace("[hosts.rx]\n", "[hosts.rx]\ncpus = [4095]\n"), "utf-8")
    done = latlab("run", str(path), "--out", str(tmp_path / "run"), timeout=100)
    assert done.returncode == ENVIRONMENT, done.stderr
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert "host 'rx': cpus [4095] not available here" in done.stderr
