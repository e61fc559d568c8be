"""Resource sampling from /proc: real processes, the parquet file, the summary section."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from latlab.analysis.resources import summarize_resources
from latlab.lab.resources import SCHEMA, ResourceSampler, read_process
from latlab.lab.runner import run_scenario
from latlab.lab.scenario import parse_scenario
from latlab.pipeline import analyze_run
from latlab.tracer import is_built
from tests.conftest import L16_CAPS, two_hosts

BUSY = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end: pass\n"
SLEEPY = (
    "import threading, time\n"
    "ts = [threading.Thread(target=time.sleep, args=(5,)) for _ in range(3)]\n"
    "[t.start() for t in ts]\nprint('ready', flush=True)\n"
    "for _ in range({n}): time.sleep(0.005)\n"
)


def test_read_process_counts_threads_and_switches() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", SLEEPY.format(n=400)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().startswith("ready")
        first = read_process(child.pid)
        time.sleep(0.5)  # the child sleeps 5 ms per loop: about 100 voluntary switches
        second = read_process(child.pid)
    finally:
        child.kill()
        child.wait(timeout=60)
    assert first is not None and second is not None
    assert first.threads == 4
    assert 40 <= second.voluntary_ctxt - first.voluntary_ctxt <= 200


def test_sampler_measures_a_busy_process(tmp_path: Path) -> None:
    busy = subprocess.Popen([sys.executable, "-c", BUSY.format(s=1.0)])
    sampler = ResourceSampler(tmp_path / "resources.parquet")
    sampler.add("busy", busy.pid)
    start = time.monotonic_ns()
    sampler.start()
    _, _, usage = os.wait4(busy.pid, 0)  # the kernel's own account of the child's CPU time
    busy.returncode = 0
    path = sampler.stop()
    table = pq.read_table(path)
    assert table.schema.equals(SCHEMA)
    rows = table.to_pydict()
    busy_rows = [i for i, p in enumerate(rows["process"]) if p == "busy"]
    assert 7 <= len(busy_rows) <= 13  # 10 Hz for about one second
    summary = summarize_resources(path, start, None)
    assert summary is not None
    stats = summary["processes"]["busy"]
    assert stats["pid"] == busy.pid
    assert stats["cpu_user_pct_mean"] + stats["cpu_system_pct_mean"] > 0
    # the last sample (at most 100 ms before the exit) agrees with the kernel's total
    last = busy_rows[-1]
    sampled = rows["user_s"][last] + rows["system_s"][last]
    total = usage.ru_utime + usage.ru_stime
    assert total - 0.15 <= sampled <= total + 0.01
    assert stats["threads_max"] >= 1
    assert summary["system"]["interrupts_per_s"] > 0
    assert summary["system"]["context_switches_per_s"] > 0


def test_no_file_no_section(tmp_path: Path) -> None:
    assert summarize_resources(tmp_path / "resources.parquet") is None


@pytest.mark.exclusive
@pytest.mark.e2e
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_every_run_samples_its_processes(tmp_path: Path) -> None:
    text = two_hosts(
        f'udpsrc port=5004 caps="{L16_CAPS}" ! rtpL16depay ! fakesink',
        "audiotestsrc is-live=true samplesperbuffer=48 ! audio/x-raw,rate=48000,channels=2 "
        "! rtpL16pay ! udpsink host=${hosts.rx.addr} port=5004",
        name="res",
        duration=1.5,
    )
    out = tmp_path / "run"
    run_scenario(parse_scenario(text, "res.toml"), out, trace=is_built(), progress=False)
    assert (out / "resources.parquet").is_file()
    summary, _, _ = analyze_run(out)
    resources = summary["resources"]
    assert set(resources["processes"]) == {"receiver", "sender"}
    sender = resources["processes"]["sender"]
    # 1 ms buffers: the streaming thread wakes about 1000 times a second
    assert sender["voluntary_ctxt_per_s"] > 500
    assert sender["threads_max"] >= 3
    assert 10 <= resources["samples"] <= 25
