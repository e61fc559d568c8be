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


SRT_COUNTERS = (
    "packets-sent",
    "packets-sent-lost",
    "packets-retransmitted",
    "packets-sent-dropped",
    "packets-received",
    "packets-received-lost",
    "packet-nack-received",
    "packet-nack-sent",
)
SRT_GAUGES = ("rtt-ms", "send-rate-mbps", "receive-rate-mbps", "bandwidth-mbps")
INITIAL_RTT_MS = 100.0  # libsrt's RTT before its first measurement (10 x the 10 ms ACK period)


def srt_summary(stats: pa.Table) -> list[dict[str, Any]]:
    """Per SRT element (and per caller of a listening srtsink): latency, RTT, packet counts.

    ``tsbpd_prediction_ms`` is what TSBPD makes a packet's transport: the negotiated
    latency plus the one-way delay when the connection was made (half the first RTT).
    Counters are the last reading (libsrt counts from the connection on).
    """
    if stats.num_rows == 0:
        return []
    factory = stats["factory"].to_numpy(zero_copy_only=False)
    rows = stats.filter(pa.array(np.isin(factory, list(SRT_FACTORIES))))
    if rows.num_rows == 0:
        return []
    columns = {name: rows[name].to_numpy(zero_copy_only=False) for name in rows.column_names}
    connection, field = _split_caller(columns["field"])
    out = []
    keys = np.stack([columns["process"], columns["element"], connection]).T
    for process, element, caller in sorted({tuple(k) for k in keys.tolist()}):
        mask = (
            (columns["process"] == process)
            & (columns["element"] == element)
            & (connection == caller)
        )
        fields = {
            name: _series(
                columns["t_ns"][mask & (field == name)], columns["value"][mask & (field == name)]
            )
            for name in (*SRT_COUNTERS, *SRT_GAUGES, "negotiated-latency-ms")
        }
        if len(fields["rtt-ms"][1]):  # a listener's own entry holds only a byte total
            out.append(_srt_entry(process, element, columns["factory"][mask][0], caller, fields))
    return out


def _split_caller(field: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``callers.N.rtt-ms`` -> ("caller N", "rtt-ms"); a field at top level -> ("", field)."""
    parts = np.char.partition(field.astype(str), ".")
    is_caller = parts[:, 0] == "callers"
    rest = np.char.partition(parts[:, 2], ".")
    connection = np.where(is_caller, np.char.add("caller ", rest[:, 0]), "")
    return connection, np.where(is_caller, rest[:, 2], field.astype(str))


def _series(t_ns: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(t_ns, kind="stable")
    return t_ns[order], value[order]


def _srt_entry(
    process: str, element: str, factory: str, caller: str, fields: dict
) -> dict[str, Any]:
    latency = fields["negotiated-latency-ms"][1]
    rtt = fields["rtt-ms"][1]
    rtt_seen = rtt[(rtt > 0) & (rtt != INITIAL_RTT_MS)]
    entry: dict[str, Any] = {
        "process": process,
        "element": element if not caller else f"{element} {caller}",
        "factory": factory,
        "readings": len(rtt),
        "negotiated_latency_ms": float(latency[-1]) if len(latency) else None,
        "rtt_at_connection_ms": float(rtt_seen[0]) if len(rtt_seen) else None,
        "rtt_p50_ms": float(np.median(rtt_seen)) if len(rtt_seen) else None,
        "rtt_max_ms": float(rtt_seen.max()) if len(rtt_seen) else None,
    }
    if entry["negotiated_latency_ms"] is not None and entry["rtt_at_connection_ms"] is not None:
        entry["tsbpd_prediction_ms"] = (
            entry["negotiated_latency_ms"] + entry["rtt_at_connection_ms"] / 2
        )
    for name in SRT_COUNTERS:
        values = fields[name][1]
        entry[name.replace("-", "_")] = int(values.max()) if len(values) else None
    for name in ("send-rate-mbps", "receive-rate-mbps", "bandwidth-mbps"):
        values = fields[name][1]
        entry[f"{name.replace('-', '_')}_p50"] = float(np.median(values)) if len(values) else None
    return entry
