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
        totals = (load.get("summary") or {}).get("totals")
        figures.update(_totals(totals) if isinstance(totals, dict) else dict.fromkeys(TOTALS))
        out[name] = figures
    return out


TOTALS = ("sent", "expected", "received", "lost")


def _totals(totals: Mapping[str, Any]) -> dict[str, int]:
    """From the generator's summary totals (``sent_packets``, ``received_packets``,
    ``lost``: RTP packets; docs/sfu.md)."""
    received, lost = int(totals.get("received_packets", 0)), int(totals.get("lost", 0))
    return {"sent": int(totals.get("sent_packets", 0)), "expected": received + lost,
            "received": received, "lost": lost}  # fmt: skip
