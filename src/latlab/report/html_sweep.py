"""What the HTML report of a sweep shows: the comparison table, a chart per metric, findings.

Built from sweep.json (``latlab.sweep/1``): one value per point and stream for each
metric (end-to-end p50 and p99, the p50 of each segment kind, lost, late, CPU).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from latlab.report.findings import Finding
from latlab.report.sweep_table import _kinds

STREAM_METRICS = (
    ("e2e_p50", "end to end p50", "ms", lambda s: s["end_to_end"].get("p50_ms")),
    ("e2e_p99", "end to end p99", "ms", lambda s: s["end_to_end"].get("p99_ms")),
    ("lost", "units lost", "units", lambda s: s.get("lost")),
    ("late", "units late", "units", lambda s: s.get("late")),
)


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def stream_label(stream_id: str) -> str:
    """A stream's id without its SSRC, which each point's run draws anew."""
    return stream_id.split(" ssrc=", 1)[0]


def stream_labels(points: list[dict[str, Any]]) -> list[str]:
    """A label per stream position (points list their streams in path order)."""
    count = max((len(p.get("streams", [])) for p in points), default=0)
    labels = []
    for k in range(count):
        ids = {stream_label(p["streams"][k]["id"]) for p in points if len(p.get("streams", [])) > k}
        labels.append(ids.pop() if len(ids) == 1 else f"stream {k + 1}")
    return labels


def _metric(
    points: list[dict[str, Any]], labels: list[str], key: str, label: str, unit: str, pick: Any
) -> dict[str, Any]:
    """One metric: per stream position, its value at every point (null where absent)."""
    series = []
    for k, stream_label_text in enumerate(labels):
        values = []
        for point in points:
            streams = point.get("streams", [])
            value = pick(streams[k]) if len(streams) > k and point.get("status") == "ok" else None
            ok = isinstance(value, int | float) and math.isfinite(value)
            values.append(round(float(value), 4) if ok else None)
        series.append({"stream": stream_label_text, "y": values})
    return {"key": key, "label": label, "unit": unit, "series": series}


PHASES = ("encode", "transport", "decode")  # the budget phases of codec paths (SRT, Opus)
INTERVALS = {"jitter_buffer": "browser jitter buffer", "capture_to_playout": "capture->playout"}


def _nested(*keys: str) -> Any:
    """A picker of ``stream[k0][k1]...`` (None where a level is missing)."""

    def pick(stream: dict[str, Any]) -> Any:
        value: Any = stream
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    return pick


def _present(points: list[dict[str, Any]], section: str, names: Iterable[str]) -> list[str]:
    """The names that some point's streams have in a section (phases, intervals)."""
    seen = {n for p in points for s in p.get("streams", []) for n in s.get(section, {})}
    return [n for n in names if n in seen]


def sweep_metrics(sweep: dict[str, Any]) -> list[dict[str, Any]]:
    """Every metric charted for a sweep, in the order of the comparison table."""
    points = sweep.get("points", [])
    ids = stream_labels(points)
    metrics = [_metric(points, ids, *m) for m in STREAM_METRICS[:2]]
    for kind in _kinds(points):
        pick = _nested("kinds", kind, "p50_ms")
        metrics.append(_metric(points, ids, f"kind_{kind}", f"{kind} p50", "ms", pick))
    for phase in _present(points, "phases", PHASES):
        pick = _nested("phases", phase, "p50_ms")
        metrics.append(_metric(points, ids, f"phase_{phase}", f"{phase} phase p50", "ms", pick))
    for name in _present(points, "intervals", INTERVALS):
        pick = _nested("intervals", name, "p50_ms")
        label = f"{INTERVALS[name]} p50 (stats intervals)"
        metrics.append(_metric(points, ids, f"interval_{name}", label, "ms", pick))
    metrics += [_metric(points, ids, *m) for m in STREAM_METRICS[2:]]
    cpu = [(p.get("resources") or {}).get("cpu_pct_total") for p in points]
    if any(v is not None for v in cpu):
        metrics.append(
            {"key": "cpu", "label": "CPU, all processes", "unit": "% of one core",
             "series": [{"stream": "all processes", "y": cpu}]}
        )  # fmt: skip
    return metrics


def numeric_variables(sweep: dict[str, Any]) -> dict[str, np.ndarray]:
    """The variables that change across points and are numbers, with each point's value."""
    points = sweep.get("points", [])
    out = {}
    for name in sweep.get("sweep", {}).get("variables", {}):
        values = [p.get("values", {}).get(name) for p in points]
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        if numeric and len(set(values)) > 1:
            out[name] = np.asarray(values, np.float64)
    return out


def linear_effects(variables: dict[str, np.ndarray], y: np.ndarray) -> dict[str, float] | None:
    """Least-squares ms per unit of each variable (all fitted together), where y is known."""
    known = np.isfinite(y)
    if not variables or known.sum() < len(variables) + 1:
        return None
    design = np.column_stack([np.ones(int(known.sum()))] + [v[known] for v in variables.values()])
    coef, _, rank, _ = np.linalg.lstsq(design, y[known], rcond=None)
    if rank < design.shape[1]:  # a zip sweep can move two variables together
        return None
    return dict(zip(variables, coef[1:].tolist(), strict=True))


def sweep_findings(sweep: dict[str, Any], metrics: list[dict[str, Any]]) -> list[Finding]:
    """Best and worst points by end-to-end latency, and its change per unit of each variable."""
    points = sweep.get("points", [])
    out = []
    failed = [p["name"] for p in points if p.get("status") != "ok"]
    if failed:
        out.append(
            Finding("sweep", f"{len(failed)} of {len(points)} points did not finish: "
                    + ", ".join(failed) + ".", "sweep-table", notable=True)
        )  # fmt: skip
    variables = numeric_variables(sweep)
    for metric in metrics[:2]:
        for series in metric["series"]:
            y = np.array([np.nan if v is None else v for v in series["y"]], np.float64)
            known = np.flatnonzero(np.isfinite(y))
            if len(known) < 2:
                continue
            lo, hi = known[np.argmin(y[known])], known[np.argmax(y[known])]
            text = (
                f"{metric['label']} ({series['stream']}): from {y[lo]:.2f} ms at "
                f"{points[lo]['name']} to {y[hi]:.2f} ms at {points[hi]['name']}"
            )
            effects = linear_effects(variables, y)
            if effects:
                text += "; " + ", ".join(
                    f"{slope:+.3f} ms per unit of {name}" for name, slope in effects.items()
                )
                text += " (least-squares fit" + (" of all together)" if len(effects) > 1 else ")")
            out.append(Finding("sweep", text + ".", f"sweep-{metric['key']}"))
    return out


def sweep_model(sweep: dict[str, Any]) -> dict[str, Any]:
    """The whole report's data for a sweep."""
    metrics = sweep_metrics(sweep)
    points = sweep.get("points", [])
    return {
        "kind": "sweep",
        "name": sweep.get("name", ""),
        "mode": sweep.get("sweep", {}).get("mode", ""),
        "variables": list(sweep.get("sweep", {}).get("variables", {})),
        "points": [
            {
                "name": p["name"],
                "status": p.get("status", ""),
                "error": p.get("error"),
                "values": {k: _value_text(v) for k, v in p.get("values", {}).items()},
                "label": "/".join(_value_text(v) for v in p.get("values", {}).values()),
            }
            for p in points
        ],
        "axis": "/".join(sweep.get("sweep", {}).get("variables", {})),
        "metrics": metrics,
        "findings": sweep_findings(sweep, metrics),
    }
