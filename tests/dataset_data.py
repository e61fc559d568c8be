"""A small dataset of synthetic runs with known answers, shared by the dataset tests (the
DuckDB questions in the fast tier, DuckDB against Spark in the e2e tier)."""

from __future__ import annotations

import math
from decimal import Decimal
from pathlib import Path

import numpy as np

from latlab.dataset.ingest import IngestOptions, ingest
from latlab.pipeline import analysis_of
from latlab.synthetic import MS, SyntheticRtpAudio, SyntheticRunInfo, make_run_dir, make_sweep_dir

UNITS = 400


def info(day: int, name: str = "rtp-audio", hour: int = 10) -> SyntheticRunInfo:
    return SyntheticRunInfo(name=name, started_at=f"2026-11-{day:02d}T{hour:02d}:00:00+00:00")


def make_runs(root: Path) -> dict[str, list[Path]]:
    """Build 41: three runs (a 20 ms jitter buffer) on three days; build 42: two runs with
    a 30 ms jitter buffer and 2 % packet loss; a sweep of the jitter buffer (20, 40 ms)."""
    runs: dict[str, list[Path]] = {"41": [], "42": [], "sweep": []}
    for i, day in enumerate((1, 2, 3)):
        params = SyntheticRtpAudio(units=UNITS, seed=i + 1, network_jitter=400_000)
        make_run_dir(root / f"b41-{i}", params, info(day))
        runs["41"].append(root / f"b41-{i}")
    for i, day in enumerate((3, 4)):
        params = SyntheticRtpAudio(
            units=UNITS,
            seed=10 + i,
            network_jitter=400_000,
            jitterbuffer_latency=30 * MS,
            loss=0.02,
        )
        make_run_dir(root / f"b42-{i}", params, info(day, hour=12))
        runs["42"].append(root / f"b42-{i}")
    points = {
        f"jb={jb}": (
            {"jb": jb},
            SyntheticRtpAudio(units=300, seed=jb, jitterbuffer_latency=jb * MS),
            info(4, "jb-sweep", 14 + k),
        )
        for k, jb in enumerate((20, 40))
    }
    runs["sweep"] = [root / "sweep"]
    runs["points"] = make_sweep_dir(root / "sweep", points)
    return runs


def build_dataset(root: Path) -> tuple[Path, dict[str, list[Path]]]:
    """The runs of ``make_runs`` ingested (build 42 with its revision): the dataset."""
    runs = make_runs(root)
    dataset = root / "ds"
    ingest(runs["41"], dataset, IngestOptions({"build": "41"}))
    ingest(runs["42"], dataset, IngestOptions({"build": "42"}, revision="abc123"))
    ingest(runs["sweep"], dataset)
    return dataset, runs


def unit_values(run_dir: Path, kind: str | None = None) -> np.ndarray:
    """A run's per-unit end to end (or sum of a kind) over its complete units, in ns."""
    (stream,) = analysis_of(run_dir).streams
    return (stream.kinds[kind] if kind else stream.end_to_end).values_ns.astype(np.int64)


def nearest_rank(values: np.ndarray, p: str) -> int:
    """The value at rank ceil(p n) of the sorted values (p n exactly: 0.99 x 100 is 99)."""
    ordered = np.sort(values)
    return int(ordered[max(1, math.ceil(Decimal(p) * len(ordered))) - 1])
