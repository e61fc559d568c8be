"""A load sweep through an SFU as a table (one row per point, in order of packets sent per
second) and the knee of its curve (:mod:`latlab.analysis.sfu_load`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich import box

from latlab.analysis.sfu_load import (
    by_server,
    knee,
    load_key,
    load_rows,
    matched_load,
    repeats,
)
from latlab.report.fit import FitTable

PER_PACKET = (("cpu_us", "CPU µs\n/pkt", 1), ("context_switches", "cs\n/pkt", 2),
              ("syscalls", "sys-\ncalls\n/pkt", 2))  # fmt: skip


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def sfu_load_table(sweep: Mapping[str, Any]) -> FitTable | None:
    """The SFU's cost, dwell and drops per point (None if no point captured an SFU)."""
    rows = load_rows(sweep.get("points", []))
    if not rows:
        return None
    names = list(sweep.get("sweep", {}).get("variables", {}))
    table = FitTable(title=f"SFU under load  ·  sweep {sweep.get('name', '')}",
                     title_justify="left", header_style="bold", box=box.SIMPLE_HEAD,
                     pad_edge=False, padding=(0, 1, 0, 0), show_edge=False)  # fmt: skip
    headers = [*names, "pkt/s\nin", "pkt/s\nout", "not\nfwd %", "dwell\np50", "dwell\np99",
               *(label for _, label, _ in PER_PACKET), "SFU\nCPU %", "load\nCPU %",
               "machine\nbusy %"]  # fmt: skip
    drops = [None] * (len(names) + 5) + [None, 2, 2, 1, 1, 1]
    for i, header in enumerate(headers):
        table.add_column(header, justify="right", fold=i < len(names), drop=drops[i])
    for row in rows:
        table.add_row(*_cells(row, names))
    table.caption = (
        "pkt/s: RTP packets into and out of the SFU host (its capture); not fwd: packets "
        "received for a leg and not sent on it; dwell: ms inside the host; per packet: the "
        "counted SFU's cost per forwarded packet, idle baseline off; CPU: % of one core "
        "(load: the light participants); machine: all CPUs"
    )
    table.caption_justify = "left"
    return table


def _cells(row: Mapping[str, Any], names: list[str]) -> list[str]:
    values = [str(row["values"].get(n, "")) for n in names]
    per = [c.get("per_packet") or {} for c in row["costs"].values()]
    cost = per[0] if len(per) == 1 else {}
    return [
        *values,
        _num(row["received_per_s"], 0), _num(row["forwarded_per_s"], 0),
        _pct(row["not_forwarded"]), _num(row["dwell"].get("p50_ms"), 3),
        _num(row["dwell"].get("p99_ms"), 3),
        *(_num(cost.get(key), digits) for key, _, digits in PER_PACKET),
        _num(row["sfu_cpu_pct"]), _num(row["load_cpu_pct"]), _num(row["machine_busy_pct"]),
    ]  # fmt: skip


def knee_lines(sweep: Mapping[str, Any]) -> list[str]:
    """One sentence per SFU server on where it stopped keeping up (none without SFU points)."""
    groups = by_server(load_rows(sweep.get("points", [])))
    lines = []
    for server, rows in groups.items():
        found = knee(rows)
        if found is None:
            continue
        name = f"{server} " if server and len(groups) > 1 else ""
        lines.append(f"{name}knee: {_knee_text(found)}")
    return lines


def _knee_text(found: Mapping[str, Any]) -> str:
    if not found["found"]:
        return (f"none up to {found['below_per_s']:.0f} packets/s forwarded "
                f"(point {found['below_point']}): every point kept up")  # fmt: skip
    below = (f"between {found['below_per_s']:.0f} (point {found['below_point']}) and "
             if found["below_point"] else "at or below ")  # fmt: skip
    return (f"{below}{found['at_per_s']:.0f} packets/s forwarded (point "
            f"{found['at_point']}: {', '.join(found['why'])}); limited by "
            f"{found['limited_by']}")  # fmt: skip


COMPARED = (("cpu_us", "CPU µs", 1), ("context_switches", "context\nswitches", 2),
            ("syscalls", "syscalls", 2), ("sched_switches", "sched\nswitches", 2))  # fmt: skip


def sfu_comparison_table(sweep: Mapping[str, Any]) -> FitTable | None:
    """The SFU study's table: per server, per forwarded packet at one load they all ran
    (the heaviest none was saturated at), its dwell there, and its knee. None unless the
    sweep ran more than one server."""
    groups = by_server(load_rows(sweep.get("points", [])))
    if len(groups) < 2:
        return None
    at = matched_load(groups)
    if not at:
        return None
    load = next(iter(at.values()))
    where = ", ".join(f"{k}={v}" for k, v in load_key(load)) or "one load"
    table = FitTable(title=f"SFUs per forwarded packet at the same load ({where})",
                     title_justify="left", header_style="bold", box=box.SIMPLE_HEAD,
                     pad_edge=False, padding=(0, 1, 0, 0), show_edge=False)  # fmt: skip
    headers = ["SFU", "pkt/s\nout", *(label for _, label, _ in COMPARED), "dwell\np50",
               "dwell\np99", "knee\npkt/s"]  # fmt: skip
    drops = [None, 2, None, None, None, 1, None, None, None]
    for i, header in enumerate(headers):
        table.add_column(header, justify="right", fold=i == 0, drop=drops[i])
    for server, row in at.items():
        cost = next(iter(row["costs"].values()), {}).get("per_packet") or {}
        found = knee(groups[server])
        knee_at = found["at_per_s"] if found and found["found"] else None
        table.add_row(str(server), _num(row["forwarded_per_s"], 0),
                      *(_num(cost.get(key), digits) for key, _, digits in COMPARED),
                      _num(row["dwell"].get("p50_ms"), 3), _num(row["dwell"].get("p99_ms"), 3),
                      _num(knee_at, 0) if knee_at is not None else "none")  # fmt: skip
    table.caption = (
        "per packet: each SFU's cost per forwarded packet (perf: every thread, idle baseline "
        "off); dwell: ms inside the SFU host (its capture); knee: packets/s at the first "
        "point it did not keep up, none if it always did"
    )
    table.caption_justify = "left"
    return table


def sfu_repeat_table(sweep: Mapping[str, Any]) -> FitTable | None:
    """How each SFU's cost per packet repeats over runs of one load (a ``round`` or
    ``repeat`` sweep variable): median and spread. None unless some load ran twice."""
    found = repeats(load_rows(sweep.get("points", [])))
    if not found:
        return None
    table = FitTable(title="SFU cost per forwarded packet over repeated runs",
                     title_justify="left", header_style="bold", box=box.SIMPLE_HEAD,
                     pad_edge=False, padding=(0, 1, 0, 0), show_edge=False)  # fmt: skip
    headers = ["SFU", "load", "runs", *(label for _, label, _ in PER_PACKET),
               "spread\n%", "dwell p99\nmin-max"]  # fmt: skip
    drops = [None, 2, 2, None, None, None, None, 1]
    for i, header in enumerate(headers):
        table.add_column(header, justify="left" if i < 2 else "right", fold=i < 2, drop=drops[i])
    for rep in found:
        cells = [_median(rep[key], digits) for key, _, digits in PER_PACKET]
        spreads = [rep[key]["spread"] for key, _, _ in PER_PACKET if rep[key]]
        worst = max((s for s in spreads if s is not None), default=None)
        dwell = rep["dwell_p99_ms"]
        table.add_row(str(rep["server"] or "-"), ", ".join(f"{k}={v}" for k, v in rep["load"])
                      or "one load", str(rep["runs"]), *cells, _pct1(worst),
                      f"{dwell['min']:.2f}-{dwell['max']:.2f}" if dwell else "-")  # fmt: skip
    table.caption = (
        "per packet: the median over the runs of one load (perf, idle baseline off); "
        "spread: the largest of the three costs' (max - min) / median; dwell: ms"
    )
    table.caption_justify = "left"
    return table


def _median(figure: Mapping[str, float] | None, digits: int) -> str:
    return "-" if figure is None else f"{figure['median']:.{digits}f}"


def _pct1(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"
