"""The black box's unexplained time on the device paths, run after run (root).

Runs ``scenarios/l16-jack-blackbox.toml`` and ``scenarios/l16-pulse-blackbox.toml`` (and
``l16-gst-blackbox.toml``, no devices, as the anchor) RUNS times each, alternating, and
prints per run the unexplained time (black box - probed end to end) at p50 and p99 with
the codes matched and the xruns seen, then per scenario the median and range of the
runs' p50s. Target (issue 22): the median of ten runs' p50s ≤ 1 ms on JACK and on
PulseAudio. It only measures and prints.

    .venv/bin/python bench/bench_blackbox_devices.py [--runs 10] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ("l16-gst-blackbox", "l16-jack-blackbox", "l16-pulse-blackbox")


def one_run(name: str, out: Path) -> dict:
    """Run scenario ``name`` into ``out``; its summary's black box."""
    argv = [
        str(ROOT / "latlab"),
        "run",
        str(ROOT / "scenarios" / f"{name}.toml"),
        "--out",
        str(out),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(
            f"{name}: latlab run exited {done.returncode}: {done.stderr.strip()[-500:]}"
        )
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    return summary["blackbox"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--keep", type=Path, default=None, help="keep the run directories here")
    args = ap.parse_args()
    p50s: dict[str, list[float]] = {name: [] for name in SCENARIOS}
    with tempfile.TemporaryDirectory(prefix="latlab-bench-bb-") as tmp:
        base = args.keep or Path(tmp)
        for run in range(args.runs):
            for name in SCENARIOS:
                box = one_run(name, base / f"{name}-{run + 1}")
                unexplained, codes = box["unexplained"], box["codes"]
                xruns = box.get("xruns") or {}
                p50s[name].append(unexplained["p50_ms"])
                line = (
                    f"run {run + 1:>2} {name:<20} unexplained p50 {unexplained['p50_ms']:7.3f} "
                    f"ms p99 {unexplained['p99_ms']:7.3f} ms  codes "
                    f"{codes['matched_to_units']}/{codes['injected']}  xruns "
                    f"{xruns.get('inject', 0)}+{xruns.get('record', 0)}"
                )
                print(line, flush=True)
    print("\nunexplained p50 over the runs (ms): median [min, max]")
    for name, values in p50s.items():
        spread = f"[{min(values):.3f}, {max(values):.3f}]"
        print(f"  {name:<20} {statistics.median(values):7.3f} {spread}  ({len(values)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
