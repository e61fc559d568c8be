"""The composite plot of a sweep, like the thesis's figures 3.12-3.13: for every point, a
slice of consecutive units with each probe's time relative to the first probe, the points
side by side along the x axis, one colour per probe.

Each point's traces are analysed again (its summary.json holds no per-unit times), so
this costs one analysis per point; the slice is taken from the middle of the run, where
start-up is over.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from latlab.analysis.segments import StreamAnalysis
from latlab.stitch.position import MISSING

SLICE_UNITS = 500  # consecutive units per point


def middle_slice(times: np.ndarray, units: int = SLICE_UNITS) -> np.ndarray:
    """Row indices of up to ``units`` consecutive rows from the middle of a journey matrix."""
    start = max((len(times) - units) // 2, 0)
    return np.arange(start, min(start + units, len(times)))


def point_slice(stream: StreamAnalysis, units: int = SLICE_UNITS) -> dict[str, Any]:
    """Per probe, the relative time (ms) of each unit of the slice (null where it missed it)."""
    times = stream.journeys.times
    rows = times[middle_slice(times, units)]
    first = rows[:, :1]
    relative = np.where((rows != MISSING) & (first != MISSING), (rows - first) / 1e6, np.nan)
    rounded = np.round(relative, 4)
    columns = [
        np.where(np.isfinite(c), c.astype(object), None).tolist() for c in rounded.T
    ]  # one list per probe
    return {"probes": stream.journeys.probe_names, "y": columns, "units": len(rows)}


def composite(sweep_dir: Path, sweep: dict[str, Any]) -> dict[str, Any] | None:
    """The composite of a sweep's first stream over its points (null slices for failed ones)."""
    from latlab.ingest.trace_reader import TraceError
    from latlab.pipeline import analysis_of

    slices: list[dict[str, Any] | None] = []
    for point in sweep.get("points", []):  # one analysis per point
        point_dir = sweep_dir / point.get("dir", f"points/{point['name']}")
        if point.get("status") != "ok" or not point_dir.is_dir():
            slices.append(None)
            continue
        try:
            streams = analysis_of(point_dir).streams
        except (TraceError, OSError, ValueError):
            slices.append(None)
            continue
        slices.append(point_slice(streams[0]) if streams else None)
    if not any(slices):
        return None
    names: dict[str, None] = {}
    for s in slices:
        for probe in s["probes"] if s else []:
            names.setdefault(probe, None)
    return {"probes": list(names), "slices": slices, "slice_units": SLICE_UNITS}
