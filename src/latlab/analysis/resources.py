"""The ``resources`` section of summary.json: CPU, context switches and threads per process
and the system's rates over the measured window, from ``resources.parquet`` (written by
:class:`latlab.lab.resources.ResourceSampler`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from latlab.rundir import RESOURCES_SYSTEM as SYSTEM


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
        "sample_hz": _sample_hz(t[system_rows]),
        "samples": len(system_rows),
        "processes": processes,
        "system": system,
    }


def _sample_hz(t_ns: np.ndarray) -> float | None:
    """The sampling rate the file shows (its median interval), None under two samples."""
    if len(t_ns) < 2:
        return None
    return round(1e9 / float(np.median(np.diff(t_ns))), 1)


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
    out = {
        "interrupts_per_s": round(intr_mean, 1),
        "interrupts_per_s_max": round(intr_max, 1),
        "context_switches_per_s": round(ctxt_mean, 1),
        "context_switches_per_s_max": round(ctxt_max, 1),
    }
    busy = _column(table, "user_s", rows) + _column(table, "system_s", rows)
    if np.isfinite(busy).all():  # files before the machine's CPU time was sampled have none
        busy_mean, busy_max = _rates(busy, t)
        out["cpu_busy_pct_mean"] = round(busy_mean * 100, 2)
        out["cpu_busy_pct_max"] = round(busy_max * 100, 2)
    return out
