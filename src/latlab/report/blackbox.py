"""What the reports show of a run's black-box measurement (summary.json ``blackbox``)."""

from __future__ import annotations

from typing import Any

ROWS = (
    ("black box end to end", "black_box"),
    ("probed end to end, same units", "probed"),
    ("unexplained (black box - probed)", "unexplained"),
)
"""Row label and summary key of each figure, in the order the reports show them."""


def estimated_segments(summary: dict[str, Any], stream_id: str | None) -> list[str]:
    """The carrier stream's estimated (modelled, not observed) segments, as text."""
    for stream in summary.get("streams", []):
        if stream.get("id") == stream_id:
            return [_segment_text(seg) for seg in stream["segments"] if seg.get("estimated")]
    return []


def _segment_text(segment: dict[str, Any]) -> str:
    p50 = segment.get("p50_ms")
    return f"{segment['to']} {'-' if p50 is None else f'{p50:.3f}'} ms"
