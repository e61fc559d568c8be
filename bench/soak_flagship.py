#!/usr/bin/env python3
"""Soak of a whole run: the flagship scenario (``scenarios/l16-basic.toml``) for SECONDS
(default one hour), then its analysis in a fresh process.

Phase 1, ``./latlab run SCENARIO --duration SECONDS``: every ``--every`` seconds it
samples the resident memory (/proc/PID/status, VmRSS) of the runner and of each process
it started (the traced pipelines), and prints, per process, the peak of the first slice,
of the last, and over the run (the runner's last slice holds its own analysis of the
run, which ``latlab run`` makes before it exits). The tracer's memory is allocated once,
so a pipeline that grows after its first slice by more than its rings is leaking.

Phase 2, the analysis the run's report needs (``latlab.pipeline.analysis_of``, nothing
reused, nothing written) in a fresh Python process: its wall time, its peak resident
memory (``ru_maxrss``), the events it read and the units it followed, and the run
directory's size.

It only measures and prints (``--json PATH`` also writes the figures);
tests/test_soak.py runs a 20-second version and checks what must hold at any length.

    .venv/bin/python bench/soak_flagship.py [--seconds 3600] [--every 60] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from soak_tracer import publish, resident_kb

REPO = Path(__file__).resolve().parent.parent
LATLAB = REPO / "latlab"
SCENARIO = REPO / "scenarios" / "l16-basic.toml"

# phase 2, in a fresh interpreter: one JSON line on stdout
ANALYSE = """
import json, resource, sys, time
from pathlib import Path
from latlab.pipeline import analysis_of
started = time.monotonic()
analysis = analysis_of(Path(sys.argv[1]), write=False, reuse=False)
wall = time.monotonic() - started
streams = analysis.summary["streams"]
print(json.dumps({
    "wall_s": wall,
    "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "streams": [{"id": s["id"], "units": s["units"], "lost": s["lost"], "late": s["late"],
                 "p50_ms": s["end_to_end"]["p50_ms"], "p99_ms": s["end_to_end"]["p99_ms"]}
                for s in streams],
}))
"""


@dataclass
class Memory:
    """Resident memory samples of one process, in MB, by slice of ``every`` seconds."""

    name: str
    slices: dict[int, float] = field(default_factory=dict)  # slice -> peak VmRSS

    def add(self, slice_index: int, rss_mb: float) -> None:
        self.slices[slice_index] = max(self.slices.get(slice_index, 0.0), rss_mb)

    def figures(self) -> dict[str, float | int | None]:
        if not self.slices:
            return {"slices": 0, "first_slice_peak": None, "last_slice_peak": None,
                    "peak": None}  # fmt: skip
        ordered = [self.slices[k] for k in sorted(self.slices)]
        return {"slices": len(ordered), "first_slice_peak": ordered[0],
                "last_slice_peak": ordered[-1], "peak": max(ordered)}  # fmt: skip


def children_of(pid: int) -> dict[int, str]:
    """The processes whose parent is ``pid``: pid -> command name."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        ppid = int(text[text.rindex(")") + 2 :].split()[1])
        if ppid == pid:
            found[int(stat.parent.name)] = name
    return found


def sample(runner: subprocess.Popen, every: float, memory: dict[tuple[str, int], Memory],
           stop: threading.Event) -> None:  # fmt: skip
    """Sample the runner and its children until ``stop``, four times a second at most;
    slice ``k`` is from ``k * every`` to ``(k + 1) * every`` after the pipelines appear."""
    started: float | None = None
    while not stop.wait(min(every, 1.0) / 4):
        children = children_of(runner.pid)
        if not children and started is None:
            continue  # not recording yet; once it has, the runner's analysis is sampled too
        now = time.monotonic()
        started = now if started is None else started
        index = int((now - started) // every)
        for pid, name in {runner.pid: "latlab (runner)", **children}.items():
            rss_kb = resident_kb(pid)
            if rss_kb is not None:
                memory.setdefault((f"{name} [{pid}]", pid), Memory(name)).add(index, rss_kb / 1024)


def record(seconds: float, every: float, out: Path, scenario: Path) -> dict:
    """Phase 1: the run, with its processes' memory."""
    memory: dict[tuple[str, int], Memory] = {}
    stop = threading.Event()
    log = (out.parent / "run.log").open("w")
    started = time.monotonic()
    runner = subprocess.Popen(
        [str(LATLAB), "run", str(scenario), "--duration", str(seconds), "--out", str(out),
         "--no-progress"], stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
    )  # fmt: skip
    sampler = threading.Thread(target=sample, args=(runner, every, memory, stop))
    sampler.start()
    try:
        code = runner.wait(timeout=seconds + 600)
    finally:
        stop.set()
        sampler.join()
        log.close()
    names = scenario_names(out)
    return {"exit": code, "wall_s": time.monotonic() - started,
            "memory_mb": {names.get(pid, label): m.figures()
                          for (label, pid), m in sorted(memory.items())}}  # fmt: skip


def scenario_names(run_dir: Path) -> dict[int, str]:
    """pid -> the scenario's name of each process run.json lists."""
    try:
        run = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        return {}
    return {p["pid"]: f"{p['name']} [{p['pid']}]"
            for p in run.get("processes", []) if p.get("pid")}  # fmt: skip


def analyse(run_dir: Path) -> dict:
    """Phase 2: the analysis in a fresh process."""
    done = subprocess.run(
        [sys.executable, "-c", ANALYSE, str(run_dir)],
        capture_output=True, text=True, timeout=3600, check=False, cwd=REPO,
    )  # fmt: skip
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:]}
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    size = sum(p.stat().st_size for p in run_dir.rglob("*") if p.is_file())
    traces = sum(p.stat().st_size for p in run_dir.rglob("*.lltrace"))
    return {**figures, "run_dir_mb": size / 2**20, "traces_mb": traces / 2**20}


def report(found: dict) -> None:
    rec, ana = found["record"], found["analysis"]
    print(f"run: {found['seconds']:g} s asked, exit {rec['exit']}, {rec['wall_s']:.1f} s wall")
    print(f"{'process':34} {'first slice MB':>15} {'last slice MB':>14} {'peak MB':>8}")
    for name, m in rec["memory_mb"].items():
        if m.get("peak") is None:
            continue
        print(f"{name:34} {m['first_slice_peak']:15.1f} {m['last_slice_peak']:14.1f} "
              f"{m['peak']:8.1f}")  # fmt: skip
    if "error" in ana:
        print(f"analysis failed: {ana['error']}")
        return
    print(f"analysis: {ana['wall_s']:.1f} s, peak {ana['peak_rss_mb']:.0f} MB, run dir "
          f"{ana['run_dir_mb']:.0f} MB ({ana['traces_mb']:.0f} MB of traces)")  # fmt: skip
    for s in ana["streams"]:
        print(f"  {s['id']}: {s['units']} units, lost {s['lost']}, late {s['late']}, "
              f"end to end p50 {s['p50_ms']:.3f} ms, p99 {s['p99_ms']:.3f} ms")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3600.0)
    parser.add_argument("--every", type=float, default=60.0, help="memory slice, s")
    parser.add_argument("--scenario", type=Path, default=SCENARIO)
    parser.add_argument("--out", type=Path, help="run directory (default: a new temporary one)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("soak_flagship: the lab needs root (network namespaces)", file=sys.stderr)
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="latlab-soak-")) / "run"
    out.parent.mkdir(parents=True, exist_ok=True)
    found = {"seconds": args.seconds, "run_dir": str(out),
             "record": record(args.seconds, args.every, out, args.scenario)}  # fmt: skip
    found["analysis"] = analyse(out) if found["record"]["exit"] == 0 else {"error": "no run"}
    publish(found, report, args.json)
    return 0 if "error" not in found["analysis"] else 1


if __name__ == "__main__":
    sys.exit(main())
