"""HTML report of a long run: build time and file size, and how long the page takes to draw.

A synthetic RTP audio run (10 ms units, jitter, loss) is analysed; then the HTML report
is built from the analysis. Anchors, measured in the same run: the analysis that writes
summary.json (``analyze_run``, what every ``latlab report`` does first), and writing
summary.json alone. Printed: report build time against both (ratios), file size against
summary.json's size, the units behind the statistics against the numbers in the file,
and the time Chromium needs to draw every chart (read from the page, ``data-draw-ms``,
with ``--dump-dom``).

    .venv/bin/python bench/bench_html_report.py [--units 60000]   # 60 000 units = 10 min
    .venv/bin/python bench/bench_html_report.py --run DIR         # a real run (copied)
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from latlab.analysis.summary import write_summary
from latlab.pipeline import analyze_run, run_metadata
from latlab.report.html import run_html
from latlab.synthetic import SyntheticRtpAudio, make_rtp_audio_run

CHROMIUM = Path("/usr/lib/chromium/chromium")
REPEATS = 3


def best_of(action, repeats: int = REPEATS) -> float:
    """The shortest of a few timings of ``action()`` (seconds)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return min(times)


def draw_ms(html_path: Path, profile: Path) -> float | None:
    """How long the page's renderer took to draw every chart, as the page measured it."""
    if not CHROMIUM.exists():
        return None
    dom = subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,900",
         f"--user-data-dir={profile}", "--dump-dom", html_path.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    ).stdout  # fmt: skip
    found = re.search(r'data-draw-ms="([0-9.]+)"', dom)
    return float(found.group(1)) if found else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=60_000, help="10 ms units (60 000 = 10 min)")
    parser.add_argument("--run", type=Path, help="a real run directory instead (not modified)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        if args.run:
            shutil.copytree(args.run, run_dir)
        else:
            params = SyntheticRtpAudio(units=args.units, loss=0.001, network_jitter=500_000)
            make_rtp_audio_run(run_dir, params)
        start = time.perf_counter()
        summary, _, streams = analyze_run(run_dir)  # writes summary.json, events.parquet
        analysis_s = time.perf_counter() - start
        meta = run_metadata(run_dir)
        summary_path = Path(tmp) / "summary.json"
        html_path = Path(tmp) / "report.html"

        anchor_s = best_of(lambda: write_summary(summary, summary_path))
        report_s = best_of(lambda: html_path.write_text(run_html(run_dir, meta, summary, streams)))
        drawn_ms = draw_ms(html_path, Path(tmp) / "profile")

        units = summary["streams"][0]["units"]
        probes = len(summary["streams"][0]["probes"])
        text = html_path.read_text()
        points = text.count(",")  # every number in the data block is followed by a comma or ]
        html_mb, summary_mb = html_path.stat().st_size / 1e6, summary_path.stat().st_size / 1e6
        source = args.run or "synthetic"
        minutes = units * 0.01 / 60
        print(f"run ({source}): {units} units x {probes} probes ({minutes:.1f} min of 10 ms units)")
        print(f"anchor: analysis writing summary.json {analysis_s * 1e3:8.1f} ms")
        print(f"anchor: write summary.json alone {anchor_s * 1e3:13.1f} ms  {summary_mb:.2f} MB")
        print(f"report: build and write report.html   {report_s * 1e3:8.1f} ms  {html_mb:.2f} MB")
        print(
            f"ratio report/analysis: {report_s / analysis_s:.2f}x; report/summary write: "
            f"{report_s / anchor_s:.0f}x; size report/summary.json: {html_mb / summary_mb:.0f}x"
        )
        print(f"numbers in the file: ~{points} (statistics over all {units} units; scatter and "
              "series decimated to at most 4000 points per line)")  # fmt: skip
        if drawn_ms is not None:
            print(f"Chromium draws every chart in {drawn_ms:.0f} ms")


if __name__ == "__main__":
    main()
