"""Terminal view of a run's black-box measurement (summary.json ``blackbox``)."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

ROWS = (
    ("black box end to end", "black_box"),
    ("probed end to end, same units", "probed"),
    ("unexplained (black box - probed)", "unexplained"),
)
COLUMNS = (("p50", "p50_ms"), ("p90", "p90_ms"), ("p99", "p99_ms"), ("max", "max_ms"))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def estimated_segments(summary: dict[str, Any], stream_id: str | None) -> list[str]:
    """The carrier stream's estimated (modelled, not observed) segments, as text."""
    for stream in summary.get("streams", []):
        if stream.get("id") == stream_id:
            return [
                f"{seg['to']} {_ms(seg.get('p50_ms'))} ms"
                for seg in stream["segments"]
                if seg.get("estimated")
            ]
    return []


def blackbox_view(summary: dict[str, Any]) -> Group:
    """Black box, probed and unexplained end to end side by side, with the codes' count."""
    box = summary["blackbox"]
    if box.get("error"):
        return Group(Text(f"black box: {box['error']}", style="yellow"))
    codes = box["codes"]
    title = (
        f"black box (time-coded signal): {codes['found']} of {codes['injected']} codes found, "
        f"{codes['matched_to_units']} matched to probed units"
    )
    table = Table(title=title, title_justify="left", header_style="bold")
    table.add_column("")
    table.add_column("codes", justify="right")
    for label, _ in COLUMNS:
        table.add_column(f"{label} ms", justify="right")
    table.add_column("mean ms", justify="right")
    for label, key in ROWS:
        stats = box[key]
        cells = [_ms(stats.get(k)) for _, k in COLUMNS]
        table.add_row(label, str(stats["count"]), *cells, _ms(stats.get("mean_ms")))
    parts: list[Any] = [table]
    estimated = estimated_segments(summary, box.get("stream"))
    if estimated:
        parts.append(
            Text(
                "the probed end to end includes estimated device time: "
                + ", ".join(estimated)
                + "; the black box runs from the capture client's JACK input ports to the "
                "playout client's output ports (the driver's own latencies are outside it)",
                style="dim",
            )
        )
    return Group(*parts)
