#!/usr/bin/env python3
"""Soak of the latlab tracer: a paced pipeline at RATE buffers/s for SECONDS (default
10 minutes at 100 000 buffers/s), against the same pipeline without the tracer.

    fakesrc datarate=… num-buffers=RATE*SECONDS ! identity ! fakesink sync=true

fakesrc stamps each 64-byte buffer 1/RATE after the last and fakesink plays it at that
time, so a pipeline that keeps up takes SECONDS. The trace goes to a FIFO that this
script reads as the tracer writes it (a 10-minute trace is about 14 GB): per second it
counts the events the tracer wrote, and it samples the process's resident memory
(/proc/PID/status, VmRSS). It prints, per slice and at the end:

* pace: buffers/s reached with and without the tracer (the anchor, measured in this
  run), and the slowest second of the traced run against its median second;
* resident memory from the first events on: the peak of the first slice, of the last,
  and over the run. The tracer allocates its rings once (65 536 events of 80 bytes per
  streaming thread) and its writer's buffer grows to the largest cycle (at most a full
  ring), so after the first slice it may grow by at most two rings (10.5 MB here, one
  streaming thread), whatever the run's length: more is a leak;
* events: written and dropped as the trace's END chunk says, and what this script read.

It only measures and prints (``--json PATH`` also writes the figures); tests/test_soak.py
runs a 20-second version and checks what must hold at any speed.

    python3 bench/soak_tracer.py [--seconds 600] [--rate 100000] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench_tracer import DEFAULT_PLUGIN_PATH, HEADER_SIZE, gst_env
from bench_tracer import DROPS_CHUNK as DROPS
from bench_tracer import END_CHUNK as END

SIZE = 64  # bytes per buffer
EVENTS = 4  # the trace's EVENTS chunk (the others: bench_tracer's constants)
RECORD_SIZE = 80  # one event in an EVENTS chunk
READ_SIZE = 1 << 20


@dataclass
class TraceStream:
    """What the FIFO reader saw: events per second of arrival, the END and DROPS chunks."""

    per_second: list[int] = field(default_factory=list)
    events: int = 0
    written: int | None = None
    dropped: int | None = None
    problem: str | None = None


def read_fifo(path: Path, started: float, out: TraceStream) -> None:
    """Read the trace from the FIFO at ``path`` until the writer closes it, chunk by chunk
    (only the chunk headers and the DROPS/END payloads are looked at)."""
    with open(path, "rb", buffering=0) as fifo:
        pending = b""
        header_left = HEADER_SIZE
        while data := fifo.read(READ_SIZE):
            second = int(time.monotonic() - started)
            if header_left:
                skip = min(header_left, len(data))
                data, header_left = data[skip:], header_left - skip
            pending += data
            offset = _chunks(pending, second, out)
            pending = pending[offset:]
        if pending:
            out.problem = f"{len(pending)} bytes of a cut chunk at the end"


def _chunks(data: bytes, second: int, out: TraceStream) -> int:
    """Account for the whole chunks in ``data``; the offset of the first incomplete one."""
    offset = 0
    while offset + 8 <= len(data):
        kind, length = struct.unpack_from("<II", data, offset)
        if offset + 8 + length > len(data):
            break
        if kind == EVENTS:
            count = length // RECORD_SIZE
            out.events += count
            while len(out.per_second) <= second:
                out.per_second.append(0)
            out.per_second[second] += count
        elif kind == DROPS:
            out.dropped = struct.unpack_from("<Q", data, offset + 16)[0]
        elif kind == END:
            out.written, out.dropped = struct.unpack_from("<QQ", data, offset + 16)
        offset += 8 + length
    return offset


def resident_kb(pid: int) -> int | None:
    """VmRSS of ``pid`` in kB (None once it has gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


@dataclass
class Run:
    """One paced pipeline: wall and CPU time, resident memory per second (kB)."""

    traced: bool
    buffers: int
    wall_s: float = 0.0
    cpu_s: float = 0.0
    rss_kb: list[int] = field(default_factory=list)
    trace: TraceStream | None = None


def command(buffers: int, rate: int) -> list[str]:
    desc = (
        f"fakesrc num-buffers={buffers} datarate={rate * SIZE} sizetype=fixed sizemax={SIZE} "
        "! identity ! fakesink sync=true"
    )
    return ["gst-launch-1.0", "-q", *desc.split()]


def run_pipeline(
    traced: bool, seconds: float, rate: int, plugin_path: Path, every: float, tmp: Path
) -> Run:
    """Run the paced pipeline once, sampling its memory every second."""
    run = Run(traced, buffers=round(seconds * rate))
    reader = None
    started = time.monotonic()
    fifo = tmp / "soak.lltrace"
    env = gst_env(plugin_path, fifo if traced else None)
    if traced:
        os.mkfifo(fifo, 0o600)
        run.trace = TraceStream()
        reader = threading.Thread(target=read_fifo, args=(fifo, started, run.trace), daemon=True)
        reader.start()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(command(run.buffers, rate), env=env, stdout=subprocess.DEVNULL)
    next_print = every
    while proc.poll() is None:
        kb = resident_kb(proc.pid)
        # traced: from the first events on (the plugin loaded, its rings in use)
        if kb is not None and (run.trace is None or run.trace.events):
            run.rss_kb.append(kb)
        elapsed = time.monotonic() - started
        if elapsed >= next_print:
            _progress(run, elapsed)
            next_print += every
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)
    run.wall_s = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    run.cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"soak_tracer: gst-launch-1.0 exited {proc.returncode}")
    if reader is not None:
        reader.join(timeout=60)
    return run


def _progress(run: Run, elapsed: float) -> None:
    rate = ""
    if run.trace is not None and len(run.trace.per_second) >= 2:
        rate = f", events/s {run.trace.per_second[-2]:>8}"
    rss = run.rss_kb[-1] / 1024 if run.rss_kb else float("nan")
    label = "traced" if run.traced else "untraced"
    print(f"  {label} {elapsed:7.0f} s: resident {rss:6.1f} MB{rate}", flush=True)


def figures(traced: Run, plain: Run, rate: int, slice_s: int) -> dict:
    """The soak's figures (what ``--json`` writes)."""
    trace = traced.trace or TraceStream()
    seconds = trace.per_second[1:-1]  # the first and last seconds are partial
    median = statistics.median(seconds) if seconds else 0
    first, last = traced.rss_kb[:slice_s], traced.rss_kb[-slice_s:]
    return {
        "rate_asked": rate,
        "seconds": traced.buffers / rate,
        "traced": {"buffers_per_s": traced.buffers / traced.wall_s, "cpu_s": traced.cpu_s},
        "untraced": {"buffers_per_s": plain.buffers / plain.wall_s, "cpu_s": plain.cpu_s},
        "pace_ratio": (traced.buffers / traced.wall_s) / (plain.buffers / plain.wall_s),
        "cpu_per_buffer_ratio": (traced.cpu_s / traced.buffers) / (plain.cpu_s / plain.buffers),
        "slowest_second_ratio": (min(seconds) / median) if median else None,
        "rss_mb": {
            "first_slice_peak": max(first) / 1024 if first else None,
            "last_slice_peak": max(last) / 1024 if last else None,
            "peak": max(traced.rss_kb) / 1024 if traced.rss_kb else None,
            "untraced_peak": max(plain.rss_kb) / 1024 if plain.rss_kb else None,
            "samples": len(traced.rss_kb),
        },
        "events": {
            "written": trace.written,
            "dropped": trace.dropped,
            "read": trace.events,
            "problem": trace.problem,
        },
    }


def report(found: dict) -> None:
    rss, events = found["rss_mb"], found["events"]
    print(
        f"\npace asked {found['rate_asked']} buffers/s for {found['seconds']:g} s: traced "
        f"{found['traced']['buffers_per_s']:.0f}/s, untraced "
        f"{found['untraced']['buffers_per_s']:.0f}/s (traced/untraced = "
        f"{found['pace_ratio']:.4f}x)"
    )
    slowest = found["slowest_second_ratio"]
    print(
        "slowest traced second: "
        + ("n/a" if slowest is None else f"{slowest:.3f}x the median second's events")
    )
    print(f"CPU per buffer traced/untraced = {found['cpu_per_buffer_ratio']:.2f}x")
    print(
        f"resident MB: first slice peak {rss['first_slice_peak']:.1f}, last slice peak "
        f"{rss['last_slice_peak']:.1f}, run peak {rss['peak']:.1f} (untraced peak "
        f"{rss['untraced_peak']:.1f}; {rss['samples']} samples)"
    )
    print(
        f"events: written {events['written']}, dropped {events['dropped']} (END chunk), "
        f"read from the FIFO {events['read']}"
        + (f"; {events['problem']}" if events["problem"] else "")
    )


def publish(found: dict, report_with: Callable[[dict], None], path: Path | None) -> int:
    """Print a soak's figures, and write them as JSON to ``path`` if given; exit status 0."""
    report_with(found)
    if path:
        path.write_text(json.dumps(found, indent=2) + "\n", encoding="utf-8")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seconds", type=float, default=600.0, help="length of the traced run")
    ap.add_argument("--rate", type=int, default=100_000, help="buffers per second")
    ap.add_argument(
        "--baseline-seconds", type=float, default=None, help="untraced run (default: 60 s or less)"
    )
    ap.add_argument("--every", type=float, default=60.0, help="progress line interval (s)")
    ap.add_argument("--plugin-path", type=Path, default=DEFAULT_PLUGIN_PATH)
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()
    if not (args.plugin_path / "libgstlatlab.so").exists():
        missing = f"no libgstlatlab.so in {args.plugin_path}: run bash scripts/setup.sh"
        print(missing, file=sys.stderr)
        return 1
    baseline = args.baseline_seconds or min(args.seconds, 60.0)
    slice_s = max(1, round(args.seconds / 10))
    with tempfile.TemporaryDirectory(prefix="latlab-soak-") as tmp:
        print(f"untraced, {baseline:g} s at {args.rate} buffers/s", flush=True)
        common = (args.rate, args.plugin_path, args.every, Path(tmp))
        plain = run_pipeline(False, baseline, *common)
        print(f"traced, {args.seconds:g} s at {args.rate} buffers/s", flush=True)
        traced = run_pipeline(True, args.seconds, *common)
    return publish(figures(traced, plain, args.rate, slice_s), report, args.json)


if __name__ == "__main__":
    sys.exit(main())
