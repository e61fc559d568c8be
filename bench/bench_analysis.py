"""Analyser throughput: read, stitch and summarise a synthetic run of ~10 million events;
and what a later report costs once the analysis is stored in the run directory.

Prints events/s for the whole analysis, its ratio to the 5 M events/s target, and
its ratio to an anchor measured in the same run: reading the same trace bytes
into numpy without any analysis. Peak memory (max RSS) is printed against 2 GB.

    .venv/bin/python bench/bench_analysis.py [--events 10000000]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from latlab.ingest.trace_format import EVENT_DTYPE
from latlab.pipeline import analysis_of, analyze_run, summary_of
from latlab.synthetic import SyntheticRtpAudio, make_rtp_audio_run

EVENTS_PER_UNIT = 8.5  # events per 10 ms unit the synthetic RTP audio run writes (measured)
REPEATS = 3  # the anchor and the analysis are each timed at their best of this many
TARGET_EVENTS_PER_S = 5e6
TARGET_PEAK_BYTES = 2 * 1024**3


def _anchor_read(paths: list[Path]) -> float:
    start = time.perf_counter()
    total = 0
    for path in paths:
        data = np.fromfile(path, dtype=np.uint8)
        total += len(data[32 : 32 + (len(data) - 32) // 80 * 80].view(EVENT_DTYPE))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--generate-into", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    units = int(args.events / EVENTS_PER_UNIT)
    if args.generate_into:
        params = SyntheticRtpAudio(
            units=units, loss=0.001, duplicate=0.001, reorder=0.001, network_jitter=500_000
        )
        make_rtp_audio_run(args.generate_into, params)
        return
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        # Generated in a child process, so peak memory below is the analysis's own.
        subprocess.run(
            [
                sys.executable,
                __file__,
                "--events",
                str(args.events),
                "--generate-into",
                str(run_dir),
            ],
            check=True,
        )
        paths = sorted(run_dir.glob("*.lltrace"))
        anchor = min(_anchor_read(paths) for _ in range(REPEATS))
        timings = []
        for _ in range(REPEATS):
            start = time.perf_counter()
            summary, table, _ = analyze_run(run_dir, write=False)
            timings.append(time.perf_counter() - start)
            events, processes = len(table), len(table.processes)
            del table  # not alive during the next analysis, which would double peak memory
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # the analysis's own
        stored = _stored_reads(run_dir)
    elapsed = min(timings)
    rate = events / elapsed
    stream = summary["streams"][0]
    print(
        f"events analysed      {events:,} across {processes} processes, {stream['units']:,} units"
    )
    print(
        f"analysis             {elapsed:.2f} s  = {rate / 1e6:.2f} M events/s"
        f"  (best of {', '.join(f'{t:.2f}' for t in timings)} s; the first in a fresh process)"
    )
    print(f"ratio to target      {rate / TARGET_EVENTS_PER_S:.2f}  (target >= 1: 5 M events/s)")
    print(f"anchor: numpy read   {anchor:.3f} s; analysis / raw read = {elapsed / anchor:.1f}x")
    print(
        f"peak memory (RSS)    {peak / 1024**2:.0f} MiB  = {peak / TARGET_PEAK_BYTES:.2f} of 2 GiB"
    )
    first, summary_read, streams_read = stored
    print(f"first analysis, stored for later reports  {first:.2f} s")
    print(
        f"later report --json (stored summary)      {summary_read:.3f} s = "
        f"{summary_read / elapsed:.1%} of the analysis  (target < 10 %)"
    )
    print(
        f"later check/compare (stored journeys)     {streams_read:.3f} s = "
        f"{streams_read / elapsed:.1%} of the analysis"
    )


def _stored_reads(run_dir: Path) -> tuple[float, float, float]:
    """The analysis stored once (s), then the best of ``REPEATS`` reads of what a later
    ``latlab report --json`` (the summary) and ``check``/``compare`` (every stream's
    journeys and statistics) use (s)."""
    start = time.perf_counter()
    analysis_of(run_dir, reuse=False)
    first = time.perf_counter() - start
    reads = []
    for read in (lambda: summary_of(run_dir), lambda: analysis_of(run_dir).streams):
        best = []
        for _ in range(REPEATS):
            start = time.perf_counter()
            read()
            best.append(time.perf_counter() - start)
        reads.append(min(best))
    assert analysis_of(run_dir).reused, "the stored analysis was not current"
    return first, reads[0], reads[1]


if __name__ == "__main__":
    main()
