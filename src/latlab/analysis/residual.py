"""The residual of a measured end-to-end delay against its configuration (thesis Eq. 3.1).

The Axis thesis models the measured latency of an audio pipeline as
``Δt_r = Δt_c + t_p + r``: the configured pipeline latency ``Δt_c``, the capture
period ``t_p`` the pipeline does not account for, and a rest ``r > 0``. Given a
stream's measured figures and the two configured values, :func:`residual_figures`
computes ``r`` for the end-to-end p50, p99 and mean, and splits the mean residual by
where it is spent along the path (:func:`path_parts`):

* ``capture``: the capture segments (the source's period accumulation), expected ``t_p``;
* ``transit``: everything from the capture push to the receiving process (sender
  processing, network, emulated link), expected 0;
* ``receiver``: the segments inside the last process of the path (from its network
  source to playout, device time included), expected ``Δt_c``.

Segment means add up to the end-to-end mean, so the three excesses add up to the
mean residual exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from latlab.stitch.kinds import CAPTURE

PARTS = ("capture", "transit", "receiver")


def residual_ms(measured_ms: float | None, configured_ms: float, period_ms: float) -> float | None:
    """``r = Δt_r - Δt_c - t_p`` in ms (None when the measurement is missing)."""
    if measured_ms is None:
        return None
    return measured_ms - configured_ms - period_ms


def _process(probe: str) -> str:
    """The process part of a probe name (``receiver/udpsrc0:src`` -> ``receiver``)."""
    return probe.split("/", 1)[0] if "/" in probe else ""


def path_parts(segments: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Mean time (ms) per part of the path: capture, transit and receiver.

    ``segments`` are summary.json segments in path order (``from``, ``to``, ``kind``,
    ``mean_ms``). The receiver is the process of the last probe; a segment belongs to
    it when it starts there. Capture segments are those of kind ``capture``.
    """
    segments = list(segments)
    parts = dict.fromkeys(PARTS, 0.0)
    if not segments:
        return parts
    receiver = _process(segments[-1]["to"])
    for seg in segments:
        mean = seg.get("mean_ms") or 0.0
        if seg["kind"] == CAPTURE:
            parts["capture"] += mean
        elif receiver and _process(seg["from"]) == receiver:
            parts["receiver"] += mean
        else:
            parts["transit"] += mean
    return parts


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def residual_figures(
    end_to_end: Mapping[str, float | None],
    segments: Iterable[Mapping[str, Any]],
    configured_ms: float,
    period_ms: float,
) -> dict[str, Any]:
    """Δt_c, t_p, the residual of the end-to-end p50/p99/mean, and the mean's split.

    ``end_to_end`` holds ``p50_ms``, ``p99_ms``, ``mean_ms``; ``excess_ms`` is, per
    part, its mean time minus what the configuration implies for it (capture: t_p,
    transit: 0, receiver: Δt_c); the excesses add up to ``mean_ms`` of the residual.
    """
    parts = path_parts(segments)
    expected = {"capture": period_ms, "transit": 0.0, "receiver": configured_ms}
    return {
        "configured_latency_ms": configured_ms,
        "period_ms": period_ms,
        **{
            key: _round(residual_ms(end_to_end.get(key), configured_ms, period_ms))
            for key in ("p50_ms", "p99_ms", "mean_ms")
        },
        "parts_ms": {k: _round(v) for k, v in parts.items()},
        "excess_ms": {k: _round(parts[k] - expected[k]) for k in PARTS},
    }
