"""What a run's light participants (``[loads.NAME]``) sent and received: summary.json
``loads``, from the generators' final counters that run.json keeps."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

KEPT = ("sfu", "host", "publishers", "subscribers", "video_kbps", "audio", "stopped")


def load_figures(loads: Mapping[str, Any]) -> dict[str, Any]:
    """Per load: its settings and totals over its participants (packets sent by the
    publishers; expected, received and lost by the subscribers; None where the generator
    printed no summary, e.g. it was killed)."""
    out = {}
    for name, load in loads.items():
        figures = {key: load.get(key) for key in KEPT}
        participants = ((load.get("summary") or {}).get("participants")) or None
        figures.update(_totals(participants) if participants else dict.fromkeys(TOTALS))
        out[name] = figures
    return out


TOTALS = ("sent", "expected", "received", "lost")


def _totals(participants: list[dict[str, Any]]) -> dict[str, int]:
    def total(role: str, key: str) -> int:
        return sum(int(p.get(key) or 0) for p in participants if p.get("role") == role)

    received, lost = total("subscriber", "packets_received"), total("subscriber", "lost")
    return {"sent": total("publisher", "packets_sent"), "expected": received + lost,
            "received": received, "lost": lost}  # fmt: skip
