"""What the terminal report shows of a captured host's forwarding (summary.json
``forwarding``): per subscriber leg and per source stream it carried (a simulcast
layer), how long the packets stayed inside, with the match counts behind each figure."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.text import Text

from latlab.report.fit import FitTable

COLUMNS = (("p50", "p50_ms"), ("p90", "p90_ms"), ("p99", "p99_ms"), ("max", "max_ms"),
           ("mean", "mean_ms"))  # fmt: skip
DROP = {"max": 1, "mean": 2}


def forwarding_views(forwarding: dict[str, Any]) -> list[Any]:
    """One view per captured host."""
    return [_host_view(host, box) for host, box in sorted(forwarding.items())]


def _edge_text(box: dict[str, Any]) -> str:
    """The packets at a leg's edge, when there are any (older summaries have none)."""
    edge = box.get("edge", 0)
    return (f", {edge} the SFU's own at a leg's start or end (no source; not in the rate)"
            if edge else "")  # fmt: skip


def _host_view(host: str, box: dict[str, Any]) -> Group:
    if box.get("error"):
        return Group(Text(f"forwarded inside {host}: {box['error']}", style="yellow"))
    rate = box.get("match_rate")
    title = (f"forwarded inside {host} (kernel-timestamped capture, one clock): "
             f"{box['matched']} of {box['forwarded']} egress RTP packets matched"
             + (f" ({100 * rate:.1f} %)" if rate is not None else "")
             + f", {box['ambiguous']} ambiguous, {box['unmatched']} unmatched, "
             f"{box['repeat']} repeats" + _edge_text(box))  # fmt: skip
    table = FitTable(title=title, title_justify="left", header_style="bold")
    table.add_column("leg (to)", fold=True)
    table.add_column("source", fold=True)
    table.add_column("packets", justify="right")
    for label, _ in COLUMNS:
        table.add_column(f"{label} ms", justify="right", drop=DROP.get(label))
    for leg in box["legs"]:
        name = f"{leg['to']} {leg['ssrc']} {leg['kind']}".rstrip()
        table.add_row(name, "all", str(leg["matched"]), *_cells(leg["dwell"]))
        if len(leg["sources"]) > 1:
            for source in leg["sources"]:
                layer = f" layer {source['layer']}" if source["layer"] is not None else ""
                table.add_row("", f"{source['ssrc']}{layer}", str(source["dwell"]["count"]),
                              *_cells(source["dwell"]))  # fmt: skip
    for kind, dwell in sorted(box.get("by_kind", {}).items()):
        table.add_row(f"all {kind}", "", str(dwell["count"]), *_cells(dwell))
    table.add_row("all legs", "", str(box["dwell"]["count"]), *_cells(box["dwell"]))
    parts: list[Any] = [table]
    parts += [Text(f"{host} capture: {problem}", style="yellow") for problem in box["problems"]]
    return Group(*parts)


def _cells(dwell: dict[str, Any]) -> list[str]:
    if not dwell.get("count"):
        return ["-"] * len(COLUMNS)
    return [f"{dwell[key]:.3f}" for _, key in COLUMNS]


COST_ROWS = (("CPU µs", "cpu_us"), ("context switches", "context_switches"),
             ("syscalls", "syscalls"), ("scheduler switches", "sched_switches"))  # fmt: skip


def cost_views(costs: dict[str, Any]) -> list[Any]:
    """Per cost-counted process: per forwarded packet, less its idle baseline (the talk's
    table), beside the gross figure and the idle and loaded rates."""
    return [_cost_view(name, entry) for name, entry in sorted(costs.items())]


def _cost_view(name: str, entry: dict[str, Any]) -> Any:
    if entry.get("error"):
        return Text(f"cost of {name}: {entry['error']}", style="yellow")
    idle, load = entry["idle"], entry["load"]
    title = f"cost of {name} (perf: every thread; idle {idle['s']:.1f} s, loaded {load['s']:.1f} s"
    if "forwarded_packets" in entry:
        title += (f", {entry['forwarded_packets']} packets forwarded, "
                  f"{entry['forwarded_per_s']:.0f}/s")  # fmt: skip
    table = FitTable(title=title + ")", title_justify="left", header_style="bold")
    table.add_column("", fold=True)
    for label in ("per packet", "gross", "idle /s", "loaded /s"):
        table.add_column(label, justify="right")
    per, gross = entry.get("per_packet", {}), entry.get("per_packet_gross", {})
    for label, key in COST_ROWS:
        table.add_row(label, _num(per.get(key)), _num(gross.get(key)),
                      _num(idle["per_s"].get(key)), _num(load["per_s"].get(key)))  # fmt: skip
    table.add_row("CPU %", "", "", _num(idle["cpu_percent"]), _num(load["cpu_percent"]))
    return table


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if abs(value) < 100 else f"{value:.0f}"
