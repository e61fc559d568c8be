"""An SFU's load curve over a sweep: cost, dwell and what it did not forward against the
packet rate, and where it stops keeping up (the knee), with what limited it.

Each point of a load sweep (docs/sfu.md) keeps, for its captured SFU host, the packets
in and out per second, the dwell and what the SFU received for a leg but did not send on
it (``not_forwarded``); for each counted process its cost per forwarded packet; and the
CPU of every process and of the whole machine (sweep.json, :mod:`sweep_figures`).
Ordered by the packets the SFU sent per second, a point is **saturated** when

* the SFU left more than ``MAX_NOT_FORWARDED`` of the packets it should have forwarded
  unsent, or
* its dwell p99 grew past ``DWELL_P99_FACTOR`` times the lightest point's (and by more
  than ``DWELL_P99_MIN_GROWTH_MS``), or
* the light subscribers lost more than ``MAX_SUBSCRIBER_LOSS`` of what they expected.

The knee lies between the last point before the first saturated one and that point.
A sweep variable named in ``REPEAT_KEYS`` (``round``, ``repeat``) only runs a point
again: points that differ in it alone are one load, and :func:`repeats` gives each SFU's
spread over them (how well its cost per packet repeats from run to run).
What limited it is read at the first saturated point: **the machine** when all its CPUs
were at least ``BUSY_SHARE`` busy (then whichever of the SFU and the load generators used
more CPU is named beside it), else **the SFU** (the machine had room: the SFU itself
could not keep up).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

MAX_NOT_FORWARDED = 0.01
DWELL_P99_FACTOR = 4.0
DWELL_P99_MIN_GROWTH_MS = 5.0
MAX_SUBSCRIBER_LOSS = 0.01
BUSY_SHARE = 0.9
REPEAT_KEYS = frozenset({"round", "repeat"})
REPEATED = ("cpu_us", "context_switches", "syscalls")  # per-packet costs compared


def load_rows(points: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per point that captured an SFU host, in order of packets sent per second."""
    rows = [row for p in points if p.get("status") == "ok" for row in _point_rows(p)]
    return sorted(rows, key=lambda r: r["forwarded_per_s"] or 0.0)


def _point_rows(point: Mapping[str, Any]) -> list[dict[str, Any]]:
    resources = point.get("resources") or {}
    cpu = resources.get("cpu_pct", {})
    system = resources.get("system", {})
    loads = point.get("loads") or {}
    costs = point.get("costs") or {}
    rows = []
    for host, box in (point.get("forwarding") or {}).items():
        if box.get("error"):
            continue
        counted = {name: c for name, c in costs.items() if c.get("host", host) == host}
        not_forwarded = box.get("not_forwarded") or {}
        servers = sorted({s.get("server") or "?" for s in (point.get("sfus") or {}).values()
                          if s.get("host") == host})  # fmt: skip
        rows.append({
            "point": point.get("name"), "values": point.get("values", {}), "host": host,
            "server": "+".join(servers) or None,
            "received_per_s": box.get("received_per_s"),
            "forwarded_per_s": box.get("forwarded_per_s"),
            "not_forwarded": not_forwarded.get("rate"),
            "match_rate": box.get("match_rate"), "dwell": box.get("dwell", {}),
            "costs": counted,
            "sfu_cpu_pct": sum(cpu.get(name, 0.0) for name in counted) if counted else None,
            "load_cpu_pct": sum(cpu.get(name, 0.0) for name in loads) if loads else None,
            "machine_busy_pct": system.get("cpu_busy_pct_mean"), "cpus": system.get("cpus"),
            "subscriber_loss": _subscriber_loss(loads),
        })  # fmt: skip
    return rows


def _subscriber_loss(loads: Mapping[str, Any]) -> float | None:
    """The share of packets the light subscribers expected but did not receive."""
    expected = sum(load.get("expected", 0) or 0 for load in loads.values())
    lost = sum(load.get("lost", 0) or 0 for load in loads.values())
    return round(lost / expected, 6) if expected else None


def saturated(row: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[str]:
    """Why a point is saturated (empty: it is not), against the lightest point."""
    why = []
    if (row["not_forwarded"] or 0.0) > MAX_NOT_FORWARDED:
        why.append(f"{row['not_forwarded']:.1%} not forwarded")
    p99, base = row["dwell"].get("p99_ms"), baseline["dwell"].get("p99_ms")
    if (
        p99 is not None
        and base is not None
        and p99 > max(DWELL_P99_FACTOR * base, base + DWELL_P99_MIN_GROWTH_MS)
    ):
        why.append(f"dwell p99 {p99:.1f} ms (lightest {base:.1f} ms)")
    if (row["subscriber_loss"] or 0.0) > MAX_SUBSCRIBER_LOSS:
        why.append(f"subscribers lost {row['subscriber_loss']:.1%}")
    return why


def by_server(rows: Sequence[Mapping[str, Any]]) -> dict[str | None, list[Mapping[str, Any]]]:
    """The rows of each SFU server kind (Janus, LiveKit, ...), each in load order: a sweep
    that runs the same loads against several servers has one curve per server."""
    out: dict[str | None, list[Mapping[str, Any]]] = {}
    for row in rows:
        out.setdefault(row.get("server"), []).append(row)
    return out


def knee(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Where the SFU stopped keeping up, and what limited it (None without rows, or when
    they are runs of one load: no curve); the rows are one server's, in load order
    (:func:`by_server`)."""
    if not rows or (len(rows) > 1 and len({load_key(r) for r in rows}) == 1):
        return None
    baseline = rows[0]
    for i, row in enumerate(rows):
        why = saturated(row, baseline)
        if why:
            before = rows[i - 1] if i else None
            return {
                "found": True,
                "below_per_s": before["forwarded_per_s"] if before else None,
                "below_point": before["point"] if before else None,
                "at_per_s": row["forwarded_per_s"], "at_point": row["point"],
                "why": why, "limited_by": limited_by(row),
            }  # fmt: skip
    top = rows[-1]
    return {"found": False, "below_per_s": top["forwarded_per_s"], "below_point": top["point"],
            "limited_by": None}  # fmt: skip


def limited_by(row: Mapping[str, Any]) -> str:
    """What limited a saturated point: the machine (and who used it most) or the SFU."""
    busy, cpus = row["machine_busy_pct"], row["cpus"]
    sfu, load = row["sfu_cpu_pct"], row["load_cpu_pct"]
    if busy is not None and cpus and busy >= BUSY_SHARE * 100 * cpus:
        users = {"the SFU": sfu, "the load generator": load}
        known = {who: pct for who, pct in users.items() if pct is not None}
        most = f"; most of it: {max(known, key=known.__getitem__)}" if known else ""
        return f"the machine (its {cpus} CPUs {busy / cpus:.0f} % busy{most})"
    figures = ", ".join(f"{who} {pct:.0f} %" for who, pct in
                        (("SFU CPU", sfu), ("machine", busy)) if pct is not None)  # fmt: skip
    return "the SFU" + (f" ({figures} of one core)" if figures else "")


def load_key(row: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """A point's load: its sweep values less the one that names its server and those
    that only repeat it (``REPEAT_KEYS``)."""
    values = row["values"]
    return tuple(sorted((k, str(v)) for k, v in values.items()
                        if v != row.get("server") and k not in REPEAT_KEYS))  # fmt: skip


def repeats(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per SFU server and load run more than once: each per-packet cost's median, range
    and spread ((max - min) / median) over the runs, and the dwell p99's; in order of
    server, then load."""
    runs: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for row in rows:
        runs.setdefault((row.get("server") or "", load_key(row)), []).append(row)
    out = []
    for (server, load), group in sorted(runs.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if len(group) < 2:
            continue
        costs = [next(iter(r["costs"].values()), {}).get("per_packet") or {} for r in group]
        figures = {key: _spread([c.get(key) for c in costs]) for key in REPEATED}
        figures["dwell_p99_ms"] = _spread([r["dwell"].get("p99_ms") for r in group])
        out.append({"server": server or None, "load": load, "runs": len(group),
                    "points": [r["point"] for r in group], **figures})  # fmt: skip
    return out


def _spread(values: Sequence[float | None]) -> dict[str, float] | None:
    """Median, min, max and (max - min) / median of the values (None if one is missing)."""
    if not values or any(v is None for v in values):
        return None
    ordered = sorted(float(v) for v in values if v is not None)
    n = len(ordered)
    median = (ordered[(n - 1) // 2] + ordered[n // 2]) / 2
    spread = (ordered[-1] - ordered[0]) / median if median else None
    return {"median": median, "min": ordered[0], "max": ordered[-1], "spread": spread}


def matched_load(
    groups: Mapping[str | None, Sequence[Mapping[str, Any]]],
) -> dict[str | None, Mapping[str, Any]]:
    """Per server, its row at one load every server ran: the heaviest at which none of
    them was saturated, else the lightest (the servers compared at the same load)."""
    keyed = {server: {load_key(r): r for r in rows} for server, rows in groups.items()}
    common = set.intersection(*(set(k) for k in keyed.values())) if keyed else set()
    if not common:
        return {}
    order = sorted(common, key=lambda k: min(keyed[s][k]["forwarded_per_s"] or 0 for s in keyed))
    lightest = {s: rows[0] for s, rows in groups.items()}
    fine = [k for k in order if not any(saturated(keyed[s][k], lightest[s]) for s in keyed)]
    chosen = fine[-1] if fine else order[0]
    return {server: keyed[server][chosen] for server in keyed}
