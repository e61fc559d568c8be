"""Resources during a run: per-process CPU time, context switches and threads, and
system-wide interrupts and context switches, sampled from /proc at 10 Hz.

:class:`ResourceSampler` runs in a thread while a scenario runs and writes
``resources.parquet`` (schema in docs/run-dir.md); :func:`summarize_resources`
turns that file into the ``resources`` section of summary.json.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

RESOURCES_FILE = "resources.parquet"
SAMPLE_HZ = 10.0
SYSTEM = ""  # process name of the system-wide rows
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


def read_system() -> tuple[int, int]:
    """Total interrupts and context switches since boot (/proc/stat ``intr``, ``ctxt``)."""
    intr = ctxt = 0
    with open("/proc/stat", encoding="ascii") as f:
        for line in f:
            if line.startswith("intr "):
                intr = int(line.split(maxsplit=2)[1])
            elif line.startswith("ctxt "):
                ctxt = int(line.split()[1])
    return intr, ctxt


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
        intr, ctxt = read_system()
        self._append(now, SYSTEM, 0, None, intr, ctxt)
        for name, pid in processes:
            sample = read_process(pid)
            if sample is not None:
                self._append(now, name, pid, sample, None, None)

    def _append(
        self, t_ns: int, name: str, pid: int, s: ProcessSample | None, intr: Any, ctxt: Any
    ) -> None:
        values = (
            (t_ns, name, pid)
            + (
                (s.user_s, s.system_s, s.voluntary_ctxt, s.involuntary_ctxt, s.threads)
                if s
                else (None,) * 5
            )
            + (intr, ctxt)
        )
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


def summarize_resources(
    path: Path, start_ns: int | None = None, end_ns: int | None = None
) -> dict[str, Any] | None:
    """The ``resources`` section of summary.json from ``resources.parquet`` (None if absent).

    Only samples within [start_ns, end_ns] (the measured window) are used when given.
    Rates are over the window's span; maxima are over consecutive sample intervals.
    """
    if not path.is_file():
        return None
    table = pq.read_table(path).to_pydict()
    t = np.asarray(table["t_ns"], np.int64)
    keep = np.ones(len(t), bool)
    if start_ns is not None:
        keep &= t >= start_ns
    if end_ns is not None:
        keep &= t <= end_ns
    names = np.asarray(table["process"], object)
    processes = {}
    for name in dict.fromkeys(names[keep & (names != SYSTEM)]):
        rows = np.flatnonzero(keep & (names == name))
        if len(rows) >= 2:
            processes[str(name)] = _process_stats(table, rows, t[rows])
    system_rows = np.flatnonzero(keep & (names == SYSTEM))
    system = _system_stats(table, system_rows, t[system_rows]) if len(system_rows) >= 2 else {}
    return {
        "sample_hz": SAMPLE_HZ,
        "samples": len(system_rows),
        "processes": processes,
        "system": system,
    }


def _column(table: dict[str, list[Any]], name: str, rows: np.ndarray) -> np.ndarray:
    return np.asarray([table[name][i] for i in rows], np.float64)


def _rates(values: np.ndarray, t_ns: np.ndarray) -> tuple[float, float]:
    """Mean rate over the whole span and the largest rate of one interval, per second."""
    dt = np.diff(t_ns) / 1e9
    span = (t_ns[-1] - t_ns[0]) / 1e9
    per_interval = np.diff(values) / np.where(dt > 0, dt, np.nan)
    return float((values[-1] - values[0]) / span), float(np.nanmax(per_interval))


def _process_stats(table: dict[str, list[Any]], rows: np.ndarray, t: np.ndarray) -> dict:
    user_mean, user_max = _rates(_column(table, "user_s", rows), t)
    sys_mean, sys_max = _rates(_column(table, "system_s", rows), t)
    vol, _ = _rates(_column(table, "voluntary_ctxt", rows), t)
    invol, _ = _rates(_column(table, "involuntary_ctxt", rows), t)
    return {
        "pid": int(table["pid"][rows[0]]),
        "cpu_user_pct_mean": round(user_mean * 100, 2),
        "cpu_user_pct_max": round(user_max * 100, 2),
        "cpu_system_pct_mean": round(sys_mean * 100, 2),
        "cpu_system_pct_max": round(sys_max * 100, 2),
        "voluntary_ctxt_per_s": round(vol, 1),
        "involuntary_ctxt_per_s": round(invol, 1),
        "threads_max": int(_column(table, "threads", rows).max()),
    }


def _system_stats(table: dict[str, list[Any]], rows: np.ndarray, t: np.ndarray) -> dict:
    intr_mean, intr_max = _rates(_column(table, "interrupts", rows), t)
    ctxt_mean, ctxt_max = _rates(_column(table, "context_switches", rows), t)
    return {
        "interrupts_per_s": round(intr_mean, 1),
        "interrupts_per_s_max": round(intr_max, 1),
        "context_switches_per_s": round(ctxt_mean, 1),
        "context_switches_per_s_max": round(ctxt_max, 1),
    }
