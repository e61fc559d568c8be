"""What the reports show of a run's black-box measurement (summary.json ``blackbox``)."""

from __future__ import annotations

from typing import Any

ROWS = (
    ("black box end to end", "black_box"),
    ("probed, same units and span", "probed"),
    ("unexplained (black box - probed)", "unexplained"),
)
"""Row label and summary key of each figure, in the order the reports show them."""


def estimated_segments(summary: dict[str, Any], stream_id: str | None) -> list[str]:
    """The carrier stream's estimated (modelled, not observed) segments within the black
    box's span, as text."""
    span = (summary.get("blackbox") or {}).get("span") or {}
    for stream in summary.get("streams", []):
        if stream.get("id") == stream_id:
            segments = _within(stream["segments"], span)
            return [_segment_text(seg) for seg in segments if seg.get("estimated")]
    return []


def span_text(box: dict[str, Any]) -> str:
    """Which probes the probed figure runs between, as text ("" when unknown)."""
    span = box.get("span")
    if not span:
        return ""
    start = span["from"]
    if span.get("from_plus_ms"):
        start += (
            f" + {span['from_plus_ms']:g} ms (one JACK period: a device source's samples are "
            "dated as if captured during the period before it reached the client; the rig's "
            "signal entered the graph one period later, when it reached the client)"
        )
    return f"probed from {start} to {span['to']}"


def _within(segments: list[dict[str, Any]], span: dict[str, Any]) -> list[dict[str, Any]]:
    """The segments after ``span['from']`` up to ``span['to']`` (all without a span)."""
    ends = [seg.get("to") for seg in segments]
    first = ends.index(span["from"]) + 1 if span.get("from") in ends else 0
    last = ends.index(span["to"]) + 1 if span.get("to") in ends else len(segments)
    return segments[first:last]


def _segment_text(segment: dict[str, Any]) -> str:
    p50 = segment.get("p50_ms")
    return f"{segment['to']} {'-' if p50 is None else f'{p50:.3f}'} ms"
