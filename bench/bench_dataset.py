"""A dataset of many runs: ingest throughput, and one ready question on DuckDB and on Spark
against a plain loop over the run directories as the anchor.

Writes ``--runs`` synthetic RTP audio runs (``latlab.synthetic``, the real formats: run.json,
env.json, traces/), analyses each once (as ``latlab run`` does, so each has its stored
analysis), then ingests them into a dataset, ten builds of ``--runs``/10 runs each (one
``latlab ingest`` per build, ``--label build=N``; build N's jitter buffer holds 20 + N ms).
The question: nearest-rank p50, p99 and mean of the jitter-buffer kind per build
(``latlab query DS percentiles --kind jitterbuffer --by build``). The anchor is what a
user would write by hand: a loop over the run directories reading each run's stored
analysis (``latlab.pipeline.analysis_of``) and computing the same figures with numpy; the
three answers are checked equal before any figure is printed. Ratios are against the
anchor measured in the same run.

    .venv/bin/python bench/bench_dataset.py [--runs 1000] [--units 1000] [--no-spark]
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from latlab.dataset.commands import engine_for
from latlab.dataset.engines import spark_session
from latlab.dataset.ingest import IngestOptions, ingest
from latlab.dataset.questions import Metric, Options, ask
from latlab.pipeline import analysis_of
from latlab.synthetic import MS, SyntheticRtpAudio, SyntheticRunInfo, make_run_dir

BUILDS = 10
REPEATS = 3  # each timing is the best of this many
QUESTION = Options(Metric(kind="jitterbuffer"), by=["build"])
STATS = (("p50_ms", "0.5"), ("p99_ms", "0.99"))


def make_runs(root: Path, runs: int, units: int) -> list[tuple[str, Path]]:
    """``runs`` run directories, analysed once; (build, directory) each."""
    out = []
    for i in range(runs):
        build = str(i * BUILDS // runs)
        day, minute = divmod(i, 20)
        params = SyntheticRtpAudio(
            units=units,
            seed=i,
            network_jitter=300_000,
            jitterbuffer_latency=(20 + int(build)) * MS,
            loss=0.002,
        )
        started = f"2026-{9 + day // 30:02d}-{1 + day % 30:02d}T10:{minute:02d}:00+00:00"
        run_dir = root / f"run-{i:04d}"
        make_run_dir(run_dir, params, SyntheticRunInfo(started_at=started))
        analysis_of(run_dir)
        out.append((build, run_dir))
    return out


def anchor(runs: list[tuple[str, Path]]) -> dict[str, dict[str, float]]:
    """The question by hand: every run's stored analysis, the kind's per-unit values per
    build, numpy for the figures."""
    values: dict[str, list[np.ndarray]] = {}
    for build, run_dir in runs:
        for stream in analysis_of(run_dir).streams:
            values.setdefault(build, []).append(stream.kinds["jitterbuffer"].values_ns)
    out = {}
    for build, parts in sorted(values.items()):
        ordered = np.sort(np.concatenate(parts))
        n = len(ordered)
        figures = {k: int(ordered[max(1, math.ceil(Decimal(p) * n)) - 1]) / 1e6 for k, p in STATS}
        out[build] = figures | {"units": n, "mean_ms": float(ordered.sum()) / n / 1e6}
    return out


def best(fn: Callable[[], Any]) -> tuple[float, Any]:
    """The best time of ``REPEATS`` calls, and the last result."""
    times, result = [], None
    for _ in range(REPEATS):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def answered(engine_name: str, dataset: Path) -> Callable[[], dict[str, dict[str, float]]]:
    def run() -> dict[str, dict[str, float]]:
        engine = engine_for(dataset, engine_name)
        try:
            rows = ask(engine, "percentiles", QUESTION).rows
        finally:
            engine.close()
        return {
            r["build"]: {k: r[k] for k in ("p50_ms", "p99_ms", "units", "mean_ms")} for r in rows
        }

    return run


def same(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]]) -> bool:
    """The same answer (means to 1 ns: summed in another order)."""
    return a.keys() == b.keys() and all(
        a[k]["p50_ms"] == b[k]["p50_ms"]
        and a[k]["p99_ms"] == b[k]["p99_ms"]
        and a[k]["units"] == b[k]["units"]
        and abs(a[k]["mean_ms"] - b[k]["mean_ms"]) < 1e-6
        for k in a
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--units", type=int, default=1000, help="10 ms units per run")
    parser.add_argument("--no-spark", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        start = time.perf_counter()
        runs = make_runs(root / "runs", args.runs, args.units)
        made = time.perf_counter() - start
        dataset = root / "ds"
        start = time.perf_counter()
        rows = 0
        for build in sorted({b for b, _ in runs}, key=int):
            dirs = [d for b, d in runs if b == build]
            rows += ingest(dirs, dataset, IngestOptions({"build": build})).rows
        ingested = time.perf_counter() - start
        sizes = {p: _du(p) for p in (root / "runs", dataset)}
        anchor_s, expected = best(lambda: anchor(runs))
        duck_s, on_duckdb = best(answered("duckdb", dataset))
        assert same(on_duckdb, expected), (on_duckdb, expected)
        spark = None
        if not args.no_spark:
            start = time.perf_counter()
            spark_session()
            session_s = time.perf_counter() - start
            spark_s, on_spark = best(answered("spark", dataset))
            assert on_spark == on_duckdb, (on_spark, on_duckdb)
            spark = (session_s, spark_s)
    units = sum(v["units"] for v in expected.values())
    print(f"runs                 {args.runs:,} synthetic runs of {args.units:,} units (10 ms), "
          f"{BUILDS} builds; written and analysed once in {made:.1f} s")  # fmt: skip
    print(f"ingest               {ingested:.1f} s = {args.runs / ingested:.1f} runs/s, "
          f"{rows / ingested / 1e6:.2f} M unit-segment rows/s ({rows:,} rows)")  # fmt: skip
    print(f"on disk              run directories {sizes[root / 'runs'] / 1e6:.0f} MB, "
          f"dataset {sizes[dataset] / 1e6:.0f} MB")  # fmt: skip
    print(f"question             jitterbuffer kind per build: p50, p99, mean over {units:,} "
          "units (nearest rank); the three answers are equal")  # fmt: skip
    print(f"anchor: loop         {anchor_s:.2f} s  (analysis_of per run directory + numpy)")
    print(f"duckdb               {duck_s:.2f} s  = {anchor_s / duck_s:.1f}x faster than the "
          "anchor (engine opened and views made each time)")  # fmt: skip
    if spark is not None:
        session_s, spark_s = spark
        print(f"spark local[*]       {spark_s:.2f} s  = {anchor_s / spark_s:.2f}x the anchor's "
              f"speed (session started once before: {session_s:.1f} s)")  # fmt: skip
    print(f"(each timing the best of {REPEATS})")


def _du(path: Path) -> int:
    out = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


if __name__ == "__main__":
    main()
