"""What each of latlab-sfu's cost choices is worth: each turned off, against the default,
measured in the same run (root for perf; loopback only, no namespaces).

latlab-sfu forwards a fixed load from ``latlab-sfu-load`` (one publisher: Opus-sized
audio every 20 ms and VP8 in three simulcast layers of 150, 500 and 1500 kbit/s at
30 fps; eight subscribers, every one on the top layer: their first estimate is 4 Mbit/s)
on 127.0.0.1. Once the load reports media flowing, ``perf stat`` attaches to the SFU
(task-clock, context-switches, raw_syscalls:sys_enter, sched:sched_switch: software
events and tracepoints) for the measured window, and the SFU's own counters (``GET
/stats``) before and after give the packets it forwarded in it. Per forwarded packet:
CPU µs, syscalls, context switches, scheduler switches and heap allocations; beside
them the load's one-way delay publisher -> subscriber (p50, p99), which includes the
SFU's dwell. Variants run round-robin (``--repeats`` rounds), and each figure is the
median over rounds divided by the default's median:

* ``default``: batched recvmmsg/sendmmsg, pooled buffers, UDP GSO, unpaced forwarding;
* ``--no-batch``: recvmsg/sendmsg per datagram, each sent at once;
* ``--no-pool``: every datagram copied into a buffer allocated for it, both ways;
* ``--no-gso``: sendmmsg without UDP segmentation offload;
* ``--pace``: forwarded video through str0m's leaky-bucket pacer;
* ``--trace``: the white-box probes on (their cost per packet).

    .venv/bin/python bench/bench_sfu.py [--seconds 10] [--repeats 3] [--subscribers 8]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / "target" / "release"
SFU = BIN / "latlab-sfu"
LOAD = BIN / "latlab-sfu-load"
EVENTS = ("task-clock", "context-switches", "raw_syscalls:sys_enter", "sched:sched_switch")
VARIANTS = {
    "default": [],
    "--no-batch": ["--no-batch"],
    "--no-pool": ["--no-pool"],
    "--no-gso": ["--no-gso"],
    "--pace": ["--pace"],
    "--trace": ["--trace", "TRACE"],
}
HTTP_PORT, UDP_PORT = 18189, 21189


def stats(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5) as answer:
        return json.loads(answer.read())


def perf_counts(path: Path) -> dict[str, float]:
    counts = {}
    for line in path.read_text().splitlines():
        fields = line.split(",")
        if len(fields) > 3 and fields[2] in EVENTS:
            counts[fields[2]] = float(fields[0]) if fields[0] not in ("", "<not counted>") else 0.0
    return counts


def wait_line(proc: subprocess.Popen, word: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith(word):
            return line
    raise SystemExit(f"no '{word}' line within {timeout_s:g} s")


def one_run(variant: str, args: argparse.Namespace, tmp: Path) -> dict[str, float]:
    flags = [str(tmp / f"{variant.strip('-')}.lltrace") if f == "TRACE" else f
             for f in VARIANTS[variant]]  # fmt: skip
    sfu_argv = [str(SFU), "--bind", "127.0.0.1", "--http-port", str(HTTP_PORT), "--udp-port",
                str(UDP_PORT), "--log", "warn", "--bwe-initial-kbps", "4000", *flags]  # fmt: skip
    sfu = subprocess.Popen(sfu_argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    load = None
    try:
        wait_line(sfu, "ready", 10)
        load_argv = [str(LOAD), "--sfu", f"127.0.0.1:{HTTP_PORT}", "--media",
                     f"127.0.0.1:{UDP_PORT}", "--publishers", "1", "--subscribers",
                     str(args.subscribers), "--seconds", str(args.seconds + 4)]  # fmt: skip
        load = subprocess.Popen(
            load_argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        wait_line(load, "ready", 40)
        time.sleep(2)  # every leg on its layer
        before = stats(HTTP_PORT)
        perf_csv = tmp / f"perf-{variant.strip('-')}.csv"
        perf = subprocess.Popen(["perf", "stat", "-e", ",".join(EVENTS), "-x", ",", "-o",
                                 str(perf_csv), "-p", str(sfu.pid)])  # fmt: skip
        time.sleep(args.seconds)
        perf.send_signal(signal.SIGINT)
        perf.wait(timeout=10)
        after = stats(HTTP_PORT)
        out, _ = load.communicate(timeout=30)
        summary = json.loads(out.split("summary ", 1)[1])
    finally:
        for p in (load, sfu):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGINT)
                p.wait(timeout=10)
    counts = perf_counts(perf_csv)
    forwarded = after["forwarded"] - before["forwarded"]
    return {
        "forwarded": forwarded,
        "pps": forwarded / args.seconds,
        "cpu_us": counts["task-clock"] * 1000 / forwarded,
        "syscalls": counts["raw_syscalls:sys_enter"] / forwarded,
        "cs": counts["context-switches"] / forwarded,
        "sched": counts["sched:sched_switch"] / forwarded,
        "allocs": (after["allocations"] - before["allocations"]) / forwarded,
        "out_per_call": (after["datagrams_out"] - before["datagrams_out"])
        / max(1, after["send_calls"] - before["send_calls"]),
        "delay_p50_us": summary["delay_us"]["p50"],
        "delay_p99_us": summary["delay_us"]["p99"],
    }


COLUMNS = [("pps", "fwd/s", 0), ("cpu_us", "CPU µs", 2), ("syscalls", "syscalls", 2),
           ("cs", "ctx sw", 3), ("sched", "sched sw", 3), ("allocs", "allocs", 2),
           ("out_per_call", "out/call", 1),
           ("delay_p50_us", "delay p50 µs", 0), ("delay_p99_us", "p99 µs", 0)]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--subscribers", type=int, default=8)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench_sfu.py: run as root (perf stat on the SFU)")
    for binary in (SFU, LOAD):
        if not binary.is_file():
            raise SystemExit(f"{binary} not built: run bash scripts/setup.sh")
    variants = args.variants.split(",")
    results: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    print(f"latlab-sfu: 1 publisher (3 layers 150/500/1500 kbit/s, 30 fps, Opus), "
          f"{args.subscribers} subscribers, {args.seconds:g} s measured per run, "
          f"{args.repeats} rounds")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-sfu-") as tmp:
        for r in range(args.repeats):
            for v in variants:
                res = one_run(v, args, Path(tmp))
                results[v].append(res)
                print(f"  round {r + 1} {v:>10}: {res['pps']:.0f} forwarded/s, "
                      f"{res['cpu_us']:.2f} µs, {res['syscalls']:.2f} syscalls, "
                      f"{res['cs']:.3f} cs per packet", flush=True)  # fmt: skip
    med = {v: {k: statistics.median(r[k] for r in results[v]) for k, _, _ in COLUMNS}
           for v in variants}  # fmt: skip
    print()
    print("per forwarded packet (median of rounds; x = ratio to default, same run)")
    print(f"{'variant':>10} " + " ".join(f"{title:>16}" for _, title, _ in COLUMNS))
    base = med.get("default")
    for v in variants:
        cells = []
        for key, _, digits in COLUMNS:
            value = med[v][key]
            ratio = f" {value / base[key]:.2f}x" if base and base[key] and v != "default" else ""
            cells.append(f"{value:.{digits}f}{ratio}".rjust(16))
        print(f"{v:>10} " + " ".join(cells))


if __name__ == "__main__":
    main()
