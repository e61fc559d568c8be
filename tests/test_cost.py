"""The cost per forwarded packet (latlab.analysis.cost) from perf's interval counts, on a
perf CSV written as perf writes it, with known rates: an idle baseline and a loaded
window, the baseline subtracted per packet."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from latlab.analysis.cost import process_costs, read_perf_intervals
from latlab.rundir import cost_file

START = 1_000_000_000_000  # perf started counting here (CLOCK_MONOTONIC ns)


def _perf_csv(path: Path, idle_s: float, load_s: float, burst: int = 0) -> None:
    """perf stat -I 100 -x , output: idle (1 ms CPU/s, 10 switches/s, 20 syscalls/s),
    then loaded (101 ms CPU/s, 210 switches/s, 420 syscalls/s); some intervals
    "<not counted>" while idle (the task did not run); ``burst``: the idle window's last
    intervals busy (26 ms CPU each: start-up work, not the process's idle timers)."""
    lines = ["# started on Wed Nov 25 12:00:00 2026", ""]
    steps = round((idle_s + load_s) * 10)
    for i in range(1, steps + 1):
        at = i / 10
        loaded = at > idle_s + 1e-9
        cpu, switches, calls = (10.1, 21, 42) if loaded else (0.1, 1, 2)
        busy = not loaded and i > round(idle_s * 10) - burst
        if busy:
            cpu, switches, calls = 26.0, 30, 90
        if not loaded and not busy and i % 5 == 0:
            lines += [f"{at:14.9f},<not counted>,msec,task-clock,0,100.00,,",
                      f"{at:14.9f},<not counted>,,context-switches,0,100.00,,"]  # fmt: skip
            cpu, switches = 0.0, 0
        else:
            lines += [f"{at:14.9f},{cpu:.2f},msec,task-clock,1000,100.00,0.1,CPUs utilized",
                      f"{at:14.9f},{switches},,context-switches,1000,100.00,1,K/sec"]  # fmt: skip
        lines += [f"{at:14.9f},{calls},,raw_syscalls:sys_enter,1000,100.00,1,K/sec",
                  f"{at:14.9f},{switches},,sched:sched_switch,1000,100.00,1,K/sec"]  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_perf_intervals_are_read_with_not_counted_as_zero(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    _perf_csv(path, idle_s=1.0, load_s=1.0)
    ends, counts = read_perf_intervals(path)
    assert len(ends) == 20 and ends[0] == pytest.approx(0.1)
    assert counts["task-clock"][4] == 0.0  # "<not counted>"
    assert counts["raw_syscalls:sys_enter"].sum() == 10 * 2 + 10 * 42


@pytest.mark.parametrize("burst", [0, 3])
def test_idle_baseline_is_subtracted_per_forwarded_packet(tmp_path: Path, burst: int) -> None:
    """Also when the idle window ends in a burst of start-up work (its last 300 ms at
    26 % of a CPU): the baseline is the window's quietest second, the timers alone."""
    _perf_csv(cost_file(tmp_path, "sfu-proc"), idle_s=2.0, load_s=3.0, burst=burst)
    second = 1_000_000_000
    meta = {"processes": [{"name": "sfu-proc", "host": "sfu"}],
            "measure_start_monotonic_ns": START + 2 * second,
            "measure_end_monotonic_ns": START + 5 * second,
            "costs": {"sfu-proc": {"perf_started_monotonic_ns": START,
                                   "idle_from_monotonic_ns": START,
                                   "idle_to_monotonic_ns": START + 2 * second}}}  # fmt: skip
    # 1000 packets/s forwarded while loaded
    egress = START + 2 * second + np.arange(3000) * 1_000_000 + 500_000
    found = process_costs(tmp_path, meta, {"sfu": egress})["sfu-proc"]
    assert found["idle"]["s"] == pytest.approx(2.0) and found["load"]["s"] == pytest.approx(3.0)
    assert found["forwarded_packets"] == 3000
    # idle: 1 in 5 intervals not counted -> 0.8 ms CPU/s, 8 switches/s; syscalls 20/s
    per = found["per_packet"]
    assert per["cpu_us"] == pytest.approx((101 - 0.8) * 1000 / 1000)
    assert per["context_switches"] == pytest.approx((210 - 8) / 1000)
    assert per["syscalls"] == pytest.approx((420 - 20) / 1000)
    assert found["per_packet_gross"]["syscalls"] == pytest.approx(0.42)
    assert found["idle"]["baseline_s"] == pytest.approx(1.0)
    assert found["idle"]["cpu_percent"] == pytest.approx(0.08)


def test_missing_counts_are_an_error_not_a_figure(tmp_path: Path) -> None:
    meta = {"costs": {"x": {"perf_started_monotonic_ns": START, "idle_from_monotonic_ns": 0,
                            "idle_to_monotonic_ns": 1}}}  # fmt: skip
    assert "missing" in process_costs(tmp_path, meta, {})["x"]["error"]
