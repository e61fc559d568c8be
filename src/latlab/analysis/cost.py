"""What a process cost per forwarded packet: perf's counts (``costs/NAME.csv``, written
for a process with ``cost = true``, :mod:`latlab.lab.cost`) in two windows — idle,
before the processes after it started (its own timers: the baseline), and under load
(the measured window) — and, when the process's host was captured, the load's counts
less the idle rate over the same time, per packet the host forwarded in that window.

The idle rate is that of the idle window's quietest second (by CPU time): an SFU's own
timers, not a burst of start-up work that happens to fall into the window (LiveKit,
in one of three runs, spent 26 % of a CPU in the window's last 300 ms, which as a mean
made the baseline 0.14 s a second and its cost per packet 17.2 µs for 29-32 in the
other runs).

perf's interval timestamps count from when it started counting; they are placed on
CLOCK_MONOTONIC from the process's start time, so a window's edges are known to a few
milliseconds (the time perf takes to start its workload), and only intervals wholly
inside a window count: the windows used are stated in seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from latlab import rundir

# perf event -> summary name and the factor to the unit it is reported in
EVENTS = {
    "task-clock": ("cpu_us", 1000.0),  # perf reports msec
    "context-switches": ("context_switches", 1.0),
    "raw_syscalls:sys_enter": ("syscalls", 1.0),
    "sched:sched_switch": ("sched_switches", 1.0),
}
NS = 1_000_000_000
BASELINE_NS = NS  # the idle rate: the quietest second of the idle window


def read_perf_intervals(path: Path) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Interval end times (s since perf started) and per event its count per interval,
    from ``perf stat -I -x ,`` output ("<not counted>": the task did not run, 0)."""
    rows: dict[str, dict[float, float]] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        fields = line.split(",")
        if len(fields) < 4 or line.startswith("#") or fields[3] not in EVENTS:
            continue
        try:
            at = float(fields[0])
        except ValueError:
            continue
        value = float(fields[1]) if fields[1].replace(".", "", 1).isdigit() else 0.0
        rows.setdefault(fields[3], {})[at] = value
    ends = np.array(sorted({at for per in rows.values() for at in per}))
    return ends, {event: np.array([per.get(at, 0.0) for at in ends]) for event, per in rows.items()}


def process_costs(
    run_dir: Path, meta: dict[str, Any], egress_ns: dict[str, np.ndarray]
) -> dict[str, Any]:
    """summary.json's ``costs``: per cost-counted process, its idle and load windows and,
    with ``egress_ns`` of its host (the forwarded packets' times), the cost per packet."""
    out = {}
    hosts = {p["name"]: p.get("host") for p in meta.get("processes", [])}
    start, end = meta.get("measure_start_monotonic_ns"), meta.get("measure_end_monotonic_ns")
    for name, entry in sorted((meta.get("costs") or {}).items()):
        path = rundir.cost_file(run_dir, name)
        if not path.is_file():
            out[name] = {"error": f"{path}: missing (perf did not write its counts)"}
            continue
        ends_s, counts = read_perf_intervals(path)
        origin = int(entry["perf_started_monotonic_ns"])
        ends = origin + np.round(ends_s * NS).astype(np.int64)
        idle = _window(ends, counts, entry["idle_from_monotonic_ns"], entry["idle_to_monotonic_ns"])
        idle.update(_quietest(ends, counts, idle))
        load = _window(ends, counts, start, end)
        host = entry.get("host") or hosts.get(name)
        found = {"host": host, "idle": idle, "load": load}
        if host in egress_ns and load["s"] > 0:
            found.update(_per_packet(idle, load, egress_ns[host], load["from_ns"], load["to_ns"]))
        out[name] = found
    return out


def _starts(ends: np.ndarray) -> np.ndarray:
    """Each interval's start: the previous one's end (the first as long as the second)."""
    return np.r_[ends[0] - (ends[1] - ends[0]), ends[:-1]]


def _window(
    ends: np.ndarray, counts: dict[str, np.ndarray], lo: int | None, hi: int | None
) -> dict[str, Any]:
    """Counts and rates over the intervals wholly inside [lo, hi]."""
    empty = {"s": 0.0, "from_ns": lo, "to_ns": hi, "counts": {}, "per_s": {}, "cpu_percent": None}
    if lo is None or hi is None or len(ends) < 2:
        return empty
    starts = _starts(ends)
    inside = (starts >= lo) & (ends <= hi)
    if not inside.any():
        return empty
    seconds = float((ends[inside] - starts[inside]).sum() / NS)
    totals = {EVENTS[e][0]: float(v[inside].sum() * EVENTS[e][1]) for e, v in counts.items()}
    return {"s": round(seconds, 3), "from_ns": int(starts[inside][0]),
            "to_ns": int(ends[inside][-1]), "counts": totals,
            "per_s": {k: v / seconds for k, v in totals.items()},
            "cpu_percent": totals.get("cpu_us", 0.0) / 1e4 / seconds}  # fmt: skip


def _quietest(ends: np.ndarray, counts: dict[str, np.ndarray], idle: dict) -> dict[str, Any]:
    """The idle window's rates over its quietest BASELINE_NS of intervals in a row (by CPU
    time; the whole window if shorter): ``per_s``, ``cpu_percent``, ``baseline_s``."""
    if not idle["s"]:
        return {}
    starts = _starts(ends)
    inside = np.flatnonzero((starts >= idle["from_ns"]) & (ends <= idle["to_ns"]))
    spans = (ends - starts)[inside]
    width = max(1, min(len(inside), round(BASELINE_NS / float(np.median(spans)))))
    kernel = np.ones(width)
    cpu_key = next((e for e in counts if EVENTS[e][0] == "cpu_us"), None)
    busy = np.convolve(counts[cpu_key][inside], kernel, "valid") if cpu_key else np.zeros(1)
    first = int(np.argmin(busy))
    chosen = inside[first : first + width]
    seconds = float((ends[chosen] - starts[chosen]).sum() / NS)
    per_s = {EVENTS[e][0]: float(v[chosen].sum() * EVENTS[e][1]) / seconds
             for e, v in counts.items()}  # fmt: skip
    return {"per_s": per_s, "cpu_percent": per_s.get("cpu_us", 0.0) / 1e4,
            "baseline_s": round(seconds, 3)}  # fmt: skip


def _per_packet(
    idle: dict[str, Any], load: dict[str, Any], egress_ns: np.ndarray, lo: int, hi: int
) -> dict[str, Any]:
    """The load's counts less the idle rate over the load's time, per forwarded packet."""
    packets = int(((egress_ns >= lo) & (egress_ns <= hi)).sum())
    found: dict[str, Any] = {"forwarded_packets": packets,
                             "forwarded_per_s": packets / load["s"]}  # fmt: skip
    if not packets:
        return found
    found["per_packet_gross"] = {k: v / packets for k, v in load["counts"].items()}
    if idle["s"] > 0:
        found["per_packet"] = {k: (v - idle["per_s"].get(k, 0.0) * load["s"]) / packets
                               for k, v in load["counts"].items()}  # fmt: skip
    return found
