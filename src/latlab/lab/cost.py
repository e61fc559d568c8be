"""What a process costs: its CPU time, context switches and syscalls, counted by perf.

A process with ``cost = true`` runs under ``perf stat`` (software events and
tracepoints only: this needs no hardware counters), which counts the process and every
thread and child it creates during the run, and writes the counts every 100 ms to
``costs/NAME.csv`` (perf's CSV: seconds since counting began, value, unit, event,
...). Never strace: it stops the process at every syscall and distorts what it counts.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from latlab.errors import EnvironmentProblem

EVENTS = ("task-clock", "context-switches", "raw_syscalls:sys_enter", "sched:sched_switch")
INTERVAL_MS = 100


class CostError(EnvironmentProblem):
    """perf is missing; ``str()`` says what to install."""


def perf_binary() -> str:
    """The perf program (Debian: linux-perf)."""
    found = shutil.which("perf")
    if found is None:
        raise CostError("perf not found (cost = true needs linux-perf): run bash scripts/setup.sh")
    return found


def counted_argv(argv: list[str], csv_path: Path) -> list[str]:
    """``argv`` run under ``perf stat``, counting :data:`EVENTS` every
    :data:`INTERVAL_MS` into ``csv_path`` (its directory is created)."""
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    return [perf_binary(), "stat", "-e", ",".join(EVENTS), "-I", str(INTERVAL_MS), "-x", ",",
            "-o", str(csv_path), "--", *argv]  # fmt: skip


def workload_pid(perf_pid: int) -> int | None:
    """The process perf started (its only child), or None if it has none (yet)."""
    try:
        children = Path(f"/proc/{perf_pid}/task/{perf_pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None
