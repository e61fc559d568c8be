"""Resources during a run: per-process CPU time, context switches and threads, and
system-wide interrupts and context switches, sampled from /proc at 10 Hz.

:class:`ResourceSampler` runs in a thread while a scenario runs and writes
``resources.parquet`` (schema in docs/run-dir.md); :mod:`latlab.analysis.resources`
turns that file into the ``resources`` section of summary.json.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from latlab.rundir import RESOURCES_SYSTEM as SYSTEM

SAMPLE_HZ = 10.0
CLK_TCK = os.sysconf("SC_CLK_TCK")

SCHEMA = pa.schema(
    [
        ("t_ns", pa.int64()),
        ("process", pa.string()),
        ("pid", pa.int32()),
        ("user_s", pa.float64()),
        ("system_s", pa.float64()),
        ("voluntary_ctxt", pa.int64()),
        ("involuntary_ctxt", pa.int64()),
        ("threads", pa.int32()),
        ("interrupts", pa.int64()),
        ("context_switches", pa.int64()),
    ]
)


@dataclass
class ProcessSample:
    """Cumulative counters of one process at one instant."""

    user_s: float
    system_s: float
    voluntary_ctxt: int
    involuntary_ctxt: int
    threads: int


def read_process(pid: int) -> ProcessSample | None:
    """CPU times (whole process), context switches (sum over its live threads), threads."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    voluntary = involuntary = 0
    for tid in _tasks(pid):
        try:
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        voluntary += _status_value(status, "voluntary_ctxt_switches:")
        involuntary += _status_value(status, "nonvoluntary_ctxt_switches:")
    return ProcessSample(
        user_s=int(fields[11]) / CLK_TCK,
        system_s=int(fields[12]) / CLK_TCK,
        voluntary_ctxt=voluntary,
        involuntary_ctxt=involuntary,
        threads=int(fields[17]),
    )


@dataclass
class SystemSample:
    """Machine-wide counters since boot (/proc/stat): every CPU's busy time, split as a
    process's is (user: user and nice; system: system, irq, softirq and steal),
    interrupts and context switches."""

    user_s: float
    system_s: float
    interrupts: int
    context_switches: int


def read_system() -> SystemSample:
    """The machine's counters since boot (/proc/stat ``cpu``, ``intr``, ``ctxt``)."""
    user = system = 0.0
    intr = ctxt = 0
    with open("/proc/stat", encoding="ascii") as f:
        for line in f:
            if line.startswith("cpu "):
                ticks = [int(v) for v in line.split()[1:9]]
                user = (ticks[0] + ticks[1]) / CLK_TCK
                system = (ticks[2] + ticks[5] + ticks[6] + ticks[7]) / CLK_TCK
            elif line.startswith("intr "):
                intr = int(line.split(maxsplit=2)[1])
            elif line.startswith("ctxt "):
                ctxt = int(line.split()[1])
    return SystemSample(user, system, intr, ctxt)


def _tasks(pid: int) -> list[str]:
    try:
        return os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []


def _status_value(status: str, key: str) -> int:
    start = status.find("\n" + key)
    if start < 0:
        return 0
    line = status[start + len(key) + 1 : status.find("\n", start + 1)]
    return int(line)


@dataclass
class ResourceSampler:
    """A thread sampling the registered processes and the system at ``hz`` until stopped."""

    path: Path
    hz: float = SAMPLE_HZ
    _processes: list[tuple[str, int]] = field(default_factory=list)
    _rows: dict[str, list[Any]] = field(default_factory=lambda: {n: [] for n in SCHEMA.names})
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, name: str, pid: int) -> None:
        """Sample process ``pid`` (as ``name``) from the next tick on."""
        with self._lock:
            self._processes.append((name, pid))

    def start(self) -> ResourceSampler:
        """Start sampling in a daemon thread."""
        self._thread = threading.Thread(target=self._loop, name="latlab-resources", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> Path:
        """Stop sampling (after one last sample) and write the parquet file."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        pq.write_table(pa.table(self._rows, schema=SCHEMA), self.path)
        return self.path

    def sample(self) -> None:
        """Take one sample of every registered process and of the system."""
        with self._lock:
            processes = list(self._processes)
        now = time.monotonic_ns()
        machine = read_system()
        self._append(now, SYSTEM, 0, machine, machine.interrupts, machine.context_switches)
        for name, pid in processes:
            sample = read_process(pid)
            if sample is not None:
                self._append(now, name, pid, sample, None, None)

    def _append(
        self,
        t_ns: int,
        name: str,
        pid: int,
        s: ProcessSample | SystemSample | None,
        intr: Any,
        ctxt: Any,
    ) -> None:
        if isinstance(s, ProcessSample):
            counters = (s.user_s, s.system_s, s.voluntary_ctxt, s.involuntary_ctxt, s.threads)
        elif isinstance(s, SystemSample):
            counters = (s.user_s, s.system_s, None, None, None)
        else:
            counters = (None,) * 5
        values = (t_ns, name, pid, *counters, intr, ctxt)
        for column, value in zip(SCHEMA.names, values, strict=True):
            self._rows[column].append(value)

    def _loop(self) -> None:
        period = 1.0 / self.hz
        next_tick = time.monotonic()
        while True:
            self.sample()
            next_tick += period
            if self._stop.wait(max(0.0, next_tick - time.monotonic())):
                self.sample()
                return
