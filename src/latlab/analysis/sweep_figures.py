"""What a sweep keeps of each point: the figures of its summary.json that sweep.json holds
(``latlab.sweep/1``, docs/run-dir.md) and the sweep tables and charts show."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from latlab.analysis.residual import residual_figures

FIGURES = ("p50_ms", "p99_ms", "mean_ms")
DWELL_FIGURES = ("p50_ms", "p99_ms", "max_ms", "mean_ms")


def point_figures(
    summary: dict[str, Any],
    configured_latency_ms: float | None = None,
    period_ms: float | None = None,
) -> dict[str, Any]:
    """What sweep.json keeps of one analysed point (its summary.json): per stream figures
    and resources. With both ``configured_latency_ms`` and ``period_ms`` (a scenario's
    ``[analysis]``), each stream also gets ``residual``
    (:func:`latlab.analysis.residual.residual_figures`).
    """
    figures = [_stream_figures(s) for s in summary["streams"]]
    configured, period = configured_latency_ms, period_ms
    if configured is not None and period is not None:
        for figure, stream in zip(figures, summary["streams"], strict=True):
            figure["residual"] = residual_figures(
                stream["end_to_end"], stream["segments"], configured, period
            )
    out = {
        "duration_s": summary["run"].get("duration_s"),
        "streams": figures,
        "resources": _resources(summary.get("resources")),
    }
    if summary.get("srt"):
        out["srt"] = summary["srt"]
    if summary.get("blackbox"):
        out["blackbox"] = _black_box_figures(summary["blackbox"])
    if summary.get("forwarding"):
        out["forwarding"] = {host: _forwarding_figures(box)
                             for host, box in summary["forwarding"].items()}  # fmt: skip
    if summary.get("costs"):
        out["costs"] = {name: _cost_figures(cost) for name, cost in summary["costs"].items()}
    if summary.get("loads"):
        out["loads"] = summary["loads"]
    if summary.get("sfus"):
        out["sfus"] = summary["sfus"]
    if summary.get("quality"):
        out["quality"] = quality_figures(summary["quality"])
    return out


def quality_figures(quality: Mapping[str, Any]) -> dict[str, Any]:
    """A quality room's cell of the matrix: per subscriber its MOS, video, layer switches,
    adaptation (ms to settle after each link step) and A/V sync (what the system added)."""
    if quality.get("error"):
        return {"error": quality["error"]}
    subscribers = {}
    for name, sub in quality.get("subscribers", {}).items():
        video, layers, sync = sub.get("video", {}), sub.get("layers", {}), sub.get("av_sync", {})
        steps = []
        for step in sub.get("adaptation", []):
            steps.append({
                "at_s": step.get("at_s"),
                "set": step.get("set"),
                **{f"{what}_ms": (step.get(what) or {}).get("settled_ms")
                   for what in ("bitrate_kbps", "layer", "height")},
            })  # fmt: skip
        subscribers[name] = {
            "visqol": sub.get("mos", {}).get("visqol"),
            "pesq": sub.get("mos", {}).get("pesq"),
            **{key: video.get(key) for key in ("width_p50", "height_p50", "fps_p50",
                                               "kbps_p50", "freezes", "freezes_s")},
            "layer_switches": layers.get("switches"),
            "layer_share": layers.get("share"),
            "adaptation": steps,
            "av_added_ms": (sync.get("added_ms") or {}).get("p50_ms"),
            "av_added_p99_ms": (sync.get("added_ms") or {}).get("p99_ms"),
            "av_skew_ms": (sync.get("skew_ms") or {}).get("p50_ms"),
            "offset_seen_ms": (sync.get("offset_seen_ms") or {}).get("p50_ms"),
            "problems": sub.get("problems", []),
        }  # fmt: skip
    return {
        "offset_ms": quality.get("offset_ms"),
        "capture_skew_ms": (quality.get("capture_skew_ms") or {}).get("p50_ms"),
        "offset_seen_ms": (quality.get("offset_seen_ms") or {}).get("p50_ms"),
        "pesq_note": next(
            (s.get("mos", {}).get("pesq_note") for s in quality.get("subscribers", {}).values()),
            None,
        ),
        "subscribers": subscribers,
    }


def _forwarding_figures(box: Mapping[str, Any]) -> dict[str, Any]:
    """A captured SFU host under a point's load: packets in and out per second, how many
    were matched and not forwarded, the dwell (all legs; per media kind)."""
    if box.get("error"):
        return {"error": box["error"]}
    keys = ("received", "forwarded", "matched", "match_rate", "received_per_s",
            "forwarded_per_s", "not_forwarded")  # fmt: skip
    return {
        **{key: box.get(key) for key in keys},
        "dwell": _pick(box["dwell"], DWELL_FIGURES),
        "by_kind": {kind: _pick(d, DWELL_FIGURES) for kind, d in box.get("by_kind", {}).items()},
        "kernel_drops": (box.get("capture") or {}).get("kernel_drops"),
    }


def _cost_figures(cost: Mapping[str, Any]) -> dict[str, Any]:
    """A counted process's cost per forwarded packet (idle baseline off) and CPU load."""
    return {
        "host": cost.get("host"),
        "per_packet": cost.get("per_packet"),
        "forwarded_per_s": cost.get("forwarded_per_s"),
        "cpu_percent": (cost.get("load") or {}).get("cpu_percent"),
        "idle_cpu_percent": (cost.get("idle") or {}).get("cpu_percent"),
    }


def _black_box_figures(box: Mapping[str, Any]) -> dict[str, Any]:
    """The black box of a point: codes, and black box / probed / unexplained p50 p99 mean."""
    if box.get("error"):
        return {"error": box["error"]}
    return {
        "codes": box["codes"],
        **{key: _pick(box[key]) for key in ("black_box", "probed", "unexplained")},
    }


def _stream_figures(stream: dict[str, Any]) -> dict[str, Any]:
    """End to end, per segment and per segment kind p50/p99/mean; lost, late, duplicated."""
    return {
        "id": stream["id"],
        "units": stream["units"],
        "complete_units": stream["complete_units"],
        **{k: stream[k] for k in ("lost", "late", "duplicated", "reordered")},
        "end_to_end": _pick(stream["end_to_end"]),
        "segments": [
            {"from": s["from"], "to": s["to"], "kind": s["kind"], **_pick(s)}
            for s in stream["segments"]
        ],
        "kinds": {kind: _pick(figures) for kind, figures in stream["kinds"].items()},
        "phases": {name: _pick(phase) for name, phase in stream.get("phases", {}).items()},
        "intervals": {name: _pick(f) for name, f in stream.get("intervals", {}).items()},
    }


def _pick(stats: Mapping[str, Any], keys: tuple[str, ...] = FIGURES) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for key in keys:
        value = stats.get(key)
        finite = isinstance(value, int | float) and math.isfinite(value)
        out[key] = round(float(value), 6) if finite else None
    return out


def _resources(section: Any) -> dict[str, Any] | None:
    """CPU per process (user + system, % of one core, mean) from summary.json's resources."""
    if not isinstance(section, dict):
        return None
    cpu = {
        name: round(p.get("cpu_user_pct_mean", 0.0) + p.get("cpu_system_pct_mean", 0.0), 2)
        for name, p in section.get("processes", {}).items()
    }
    return {
        "cpu_pct": cpu,
        "cpu_pct_total": round(sum(cpu.values()), 2),
        "system": section.get("system", {}),
    }
