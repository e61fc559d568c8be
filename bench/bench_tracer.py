#!/usr/bin/env python3
"""Cost of the latlab tracer per pad push, against no tracer and GStreamer's `latency` tracer.

Runs `gst-launch-1.0 fakesrc ! identity ! identity ! identity ! identity ! fakesink`
(5 pad pushes per buffer) as subprocesses, alternating the configurations over
several repetitions, and prints median wall and CPU time per push, the
overhead ratios and the events the latlab trace says it dropped. Standard
library only; it only measures and prints, it asserts nothing.

    python3 bench/bench_tracer.py [--buffers N] [--reps R]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

PUSHES_PER_BUFFER = 5
DEFAULT_PLUGIN_PATH = Path(__file__).resolve().parent.parent / "target" / "release"
END_CHUNK = 8
DROPS_CHUNK = 7
HEADER_SIZE = 32


@dataclass
class Run:
    """One measured gst-launch-1.0 run."""

    wall_s: float
    cpu_s: float
    buffers: int
    dropped: int | None = None
    written: int | None = None
    trace_bytes: int = 0

    @property
    def pushes(self) -> int:
        return self.buffers * PUSHES_PER_BUFFER


@dataclass
class Config:
    """A tracer configuration under test."""

    name: str
    buffers: int
    runs: list[Run] = field(default_factory=list)

    def median_ns(self, attr: str) -> float:
        return statistics.median(getattr(r, attr) / r.pushes * 1e9 for r in self.runs)


def pipeline(buffers: int, size: int) -> list[str]:
    desc = (
        f"fakesrc num-buffers={buffers} sizetype=fixed sizemax={size} "
        "! identity ! identity ! identity ! identity ! fakesink"
    )
    return ["gst-launch-1.0", "-q", *desc.split()]


def read_end(path: Path) -> tuple[int | None, int | None]:
    """(events written, events dropped) from the trace's END chunk, else the last DROPS."""
    data = path.read_bytes()
    off, written, dropped = HEADER_SIZE, None, None
    while off + 8 <= len(data):
        kind, length = struct.unpack_from("<II", data, off)
        payload = off + 8
        if payload + length > len(data):
            break
        if kind == DROPS_CHUNK:
            dropped = struct.unpack_from("<Q", data, payload + 8)[0]
        elif kind == END_CHUNK:
            written, dropped = struct.unpack_from("<QQ", data, payload + 8)
        off = payload + length
    return written, dropped


def gst_env(plugin_path: Path, trace: Path | None = None) -> dict[str, str]:
    """This environment without GStreamer tracers or debug output, the plugin from
    ``plugin_path``, and with ``trace`` the latlab tracer writing there."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GST_TRACER", "GST_DEBUG"))}
    env["GST_PLUGIN_PATH"] = str(plugin_path)
    if trace is not None:
        env["GST_TRACERS"] = "latlab"
        env["LATLAB_TRACE_FILE"] = str(trace)
    return env


def run_once(name: str, buffers: int, size: int, plugin_path: Path, tmp: Path) -> Run:
    trace = tmp / "bench.lltrace"
    log = tmp / "latency.log"
    env = gst_env(plugin_path, trace if name == "latlab" else None)
    if name == "latency":
        env["GST_TRACERS"] = "latency(flags=pipeline+element)"
        env["GST_DEBUG"] = "GST_TRACER:7"
        env["GST_DEBUG_FILE"] = str(log)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(pipeline(buffers, size), env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    run = Run(wall_s=wall, cpu_s=cpu, buffers=buffers)
    if name == "latlab":
        run.trace_bytes = trace.stat().st_size
        run.written, run.dropped = read_end(trace)
        trace.unlink()
    elif name == "latency":
        run.trace_bytes = log.stat().st_size if log.exists() else 0
        log.unlink(missing_ok=True)
    return run


def report(configs: dict[str, Config]) -> None:
    print(
        f"\n{'config':<8} {'buffers':>9} {'wall ns/push':>13} {'cpu ns/push':>12} {'output MB':>10}"
    )
    for c in configs.values():
        mb = statistics.median(r.trace_bytes for r in c.runs) / 1e6
        print(
            f"{c.name:<8} {c.buffers:>9} {c.median_ns('wall_s'):>13.1f} "
            f"{c.median_ns('cpu_s'):>12.1f} {mb:>10.1f}"
        )
    none, latlab, latency = configs["none"], configs["latlab"], configs["latency"]
    for what in ("wall_s", "cpu_s"):
        label = what.split("_")[0]
        overhead = latlab.median_ns(what) - none.median_ns(what)
        lat_overhead = latency.median_ns(what) - none.median_ns(what)
        print(
            f"\n{label}: latlab overhead {overhead:.1f} ns/push "
            f"(latlab/none = {latlab.median_ns(what) / none.median_ns(what):.2f}x); "
            f"latency overhead {lat_overhead:.1f} ns/push "
            f"(latency/latlab = {latency.median_ns(what) / latlab.median_ns(what):.1f}x, "
            f"overhead ratio {lat_overhead / overhead if overhead > 0 else float('nan'):.1f}x)"
        )
    dropped = [r.dropped for r in latlab.runs]
    written = [r.written for r in latlab.runs]
    ended = all(r.written is not None for r in latlab.runs)
    print(f"\nlatlab events written per run: {written}")
    print(
        f"latlab events dropped per run (END chunk): {dropped}"
        + ("" if ended else "  (END missing!)")
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--buffers", type=int, default=2_000_000, help="buffers for none/latlab runs")
    ap.add_argument(
        "--latency-buffers",
        type=int,
        default=100_000,
        help="buffers for the (much slower) latency tracer runs",
    )
    ap.add_argument("--size", type=int, default=64, help="buffer size in bytes")
    ap.add_argument("--reps", type=int, default=5, help="alternating repetitions")
    ap.add_argument("--plugin-path", type=Path, default=DEFAULT_PLUGIN_PATH)
    args = ap.parse_args()
    if not (args.plugin_path / "libgstlatlab.so").exists():
        print(f"no libgstlatlab.so in {args.plugin_path}: build tracer/ first", file=sys.stderr)
        return 1
    configs = {
        "none": Config("none", args.buffers),
        "latlab": Config("latlab", args.buffers),
        "latency": Config("latency", args.latency_buffers),
    }
    with tempfile.TemporaryDirectory(prefix="latlab-bench-") as tmp:
        order = list(configs.values())
        for rep in range(args.reps):
            for c in order[rep % 3 :] + order[: rep % 3]:
                run = run_once(c.name, c.buffers, args.size, args.plugin_path, Path(tmp))
                c.runs.append(run)
                print(
                    f"rep {rep + 1}/{args.reps} {c.name:<8} wall {run.wall_s:6.2f} s "
                    f"cpu {run.cpu_s:6.2f} s",
                    flush=True,
                )
    report(configs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
