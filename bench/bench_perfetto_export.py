"""Perfetto export speed: writing the trace of a 10-minute run (60 000 units of 10 ms).

Prints the export time per unit and per slice, and its ratio to an anchor measured in
the same run: reading the run's events.parquet (every event) with pyarrow. The export
is timed from the analysed streams (what ``latlab export`` does after the analysis);
the analysis itself is bench/bench_analysis.py's subject, and its time is printed too.

    .venv/bin/python bench/bench_perfetto_export.py [--units 60000]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from latlab.pipeline import analysis_of
from latlab.report.perfetto import write_perfetto
from latlab.rundir import EVENTS_FILE
from latlab.synthetic import SyntheticRtpAudio, make_rtp_audio_run

REPEATS = 3


def _best(action, repeats: int = REPEATS) -> float:
    """The shortest of ``repeats`` timings of ``action()`` (s)."""
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        timings.append(time.perf_counter() - start)
    return min(timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=60_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        params = SyntheticRtpAudio(units=args.units, loss=0.001, network_jitter=500_000)
        make_rtp_audio_run(run_dir, params)
        start = time.perf_counter()
        run = analysis_of(run_dir, reuse=False)  # writes events.parquet: the anchor's input
        analysis = time.perf_counter() - start
        table, streams = run.table, run.streams
        anchor = _best(lambda: pq.read_table(run_dir / EVENTS_FILE))
        out = Path(tmp) / "trace.json"
        results = []
        export = _best(
            lambda: results.append(
                write_perfetto(streams, run.processes, run.threads, run.meta, out)
            )
        )
        result = results[-1]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    units = max(result.units, 1)
    print(
        f"run                  {units:,} units, {len(table):,} events, "
        f"{result.slices:,} slices, {result.flows:,} flows, {result.tracks} tracks"
    )
    print(
        f"export (best of {REPEATS})   {export:.3f} s = {export / units * 1e9:,.0f} ns/unit, "
        f"{export / max(result.slices, 1) * 1e9:,.0f} ns/slice; "
        f"{result.bytes / 1e6:.1f} MB = {result.bytes / max(export, 1e-9) / 1e6:.0f} MB/s"
    )
    print(f"anchor: read events.parquet {anchor:.3f} s = {anchor / units * 1e9:,.0f} ns/unit")
    print(f"ratio export / anchor {export / anchor:.2f}x")
    print(f"analysis (once)      {analysis:.2f} s = {analysis / units * 1e9:,.0f} ns/unit")
    print(f"peak memory (RSS)    {peak / 1024**2:.0f} MiB")


if __name__ == "__main__":
    main()
