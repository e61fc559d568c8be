"""Element statistics over time: what srtsink/srtsrc (or any element's ``stats``) reported.

The tracer reads every element's ``stats`` structure about ten times a second
(``STATS`` chunks). This module flattens the readings into one long table
(process, element, factory, t_ns, field, value) and summarises SRT links:
RTT, negotiated latency, packet counters, rates.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from latlab.ingest.events import EventTable

SRT_FACTORIES = {"srtsink", "srtsrc", "srtclientsink", "srtserversink", "srtclientsrc"}


def _flatten(fields: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, float]]:
    """Numeric leaves of a (nested) stats structure as ("a.b", value); lists index by position."""
    for key, value in fields.items():
        name = f"{prefix}{key}"
        if isinstance(value, int | float):  # booleans too
            yield name, float(value)
        elif isinstance(value, dict):
            yield from _flatten(value, f"{name}.")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    yield from _flatten(item, f"{name}.{i}.")


def stats_table(table: EventTable) -> pa.Table:
    """Every numeric stats reading of the run, one row per (reading, field)."""
    rows: dict[str, list] = {k: [] for k in ("process", "element", "factory", "t_ns", "field")}
    values: list[float] = []
    for proc in table.processes:
        for reading in proc.stats:
            for name, value in _flatten(reading.fields):
                rows["process"].append(proc.name)
                rows["element"].append(reading.element)
                rows["factory"].append(reading.factory)
                rows["t_ns"].append(reading.t_ns)
                rows["field"].append(name)
                values.append(value)
    columns = {k: pa.array(v, pa.int64() if k == "t_ns" else pa.string()) for k, v in rows.items()}
    columns["value"] = pa.array(values, pa.float64())
    return pa.table(columns)


def series(
    stats: pa.Table, process: str, element: str, field: str
) -> tuple[np.ndarray, np.ndarray]:
    """(t_ns, value) of one field of one element, in time order."""
    mask = np.asarray(
        (stats["process"].to_numpy(zero_copy_only=False) == process)
        & (stats["element"].to_numpy(zero_copy_only=False) == element)
        & (stats["field"].to_numpy(zero_copy_only=False) == field)
    )
    t_ns = stats["t_ns"].to_numpy()[mask]
    value = stats["value"].to_numpy()[mask]
    order = np.argsort(t_ns, kind="stable")
    return t_ns[order], value[order]
