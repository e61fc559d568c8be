#!/usr/bin/env python3
"""Cost of the tracer's MPEG-TS scan per pad push (PES records), against the tracer without it.

Writes a transport stream of 1316-byte blocks (7 TS packets, the SRT/UDP
payload size; a PES start with a PTS every 10th block) and the same bytes with
every sync byte changed (not TS, so the tracer records buffers but finds no
PES), then runs `filesrc blocksize=1316 ! identity x4 ! fakesink` (5 pushes
per buffer) on each, without the tracer and with it, alternating over several
repetitions. Prints median wall time per push and the TS scan's extra cost
against latlab's own per-push cost measured in the same run. Standard library
only; it measures and prints, it asserts nothing.

    python3 bench/bench_ts_scan.py [--buffers N] [--reps R]
"""

from __future__ import annotations

import argparse
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_tracer import DEFAULT_PLUGIN_PATH, gst_env

PUSHES_PER_BUFFER = 5
BLOCK = 1316
TS = 188
PES_EVERY = 10


def ts_packet(pid: int, counter: int, pes_pts: int | None) -> bytes:
    """One 188-byte TS packet; with ``pes_pts`` it starts a PES with that PTS."""
    pusi = 0x40 if pes_pts is not None else 0
    header = bytes([0x47, pusi | (pid >> 8), pid & 0xFF, 0x10 | (counter & 0x0F)])
    payload = b""
    if pes_pts is not None:
        p = pes_pts
        pts = bytes(
            [
                0x21 | ((p >> 29) & 0x0E),
                (p >> 22) & 0xFF,
                0x01 | ((p >> 14) & 0xFE),
                (p >> 7) & 0xFF,
                0x01 | ((p << 1) & 0xFE),
            ]
        )
        payload = b"\x00\x00\x01\xe0\x00\x00\x80\x80\x05" + pts
    return header + payload + b"\xff" * (TS - len(header) - len(payload))


def write_streams(path_ts: Path, path_other: Path, buffers: int) -> None:
    """The TS file and its twin whose sync bytes are not 0x47."""
    counter = 0
    with path_ts.open("wb") as ts, path_other.open("wb") as other:
        for i in range(buffers):
            block = bytearray()
            for k in range(BLOCK // TS):
                pts = 3000 * i if (k == 0 and i % PES_EVERY == 0) else None
                block += ts_packet(0x41, counter, pts)
                counter += 1
            ts.write(block)
            block[0::TS] = b"\x46" * (BLOCK // TS)
            other.write(block)


def run_once(location: Path, buffers: int, traced: bool, plugin_path: Path, tmp: Path) -> float:
    env = gst_env(plugin_path, tmp / "bench.lltrace" if traced else None)
    desc = (
        f"filesrc location={location} blocksize={BLOCK} num-buffers={buffers} "
        "! identity ! identity ! identity ! identity ! fakesink"
    )
    start = time.perf_counter()
    subprocess.run(["gst-launch-1.0", "-q", *desc.split()], env=env, check=True)
    wall = time.perf_counter() - start
    (tmp / "bench.lltrace").unlink(missing_ok=True)
    return wall / (buffers * PUSHES_PER_BUFFER) * 1e9


def pes_records(trace: Path) -> int:
    """How many pes (kind 3) records a trace holds (a sanity check that the scan ran)."""
    data, off, count = trace.read_bytes(), 32, 0
    while off + 8 <= len(data):
        kind, length = struct.unpack_from("<II", data, off)
        if kind == 4:
            records = data[off + 8 : off + 8 + length]
            count += sum(1 for r in range(0, len(records), 80) if records[r + 75] == 3)
        off += 8 + length
    return count


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--buffers", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--plugin-path", type=Path, default=DEFAULT_PLUGIN_PATH)
    args = ap.parse_args()
    if not (args.plugin_path / "libgstlatlab.so").exists():
        print(f"no libgstlatlab.so in {args.plugin_path}: build tracer/ first", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="latlab-bench-ts-") as tmp_dir:
        tmp = Path(tmp_dir)
        ts, other = tmp / "stream.ts", tmp / "stream.bin"
        write_streams(ts, other, args.buffers)
        configs = {
            "none, TS": (ts, False),
            "latlab, not TS": (other, True),
            "latlab, TS": (ts, True),
        }
        results: dict[str, list[float]] = {name: [] for name in configs}
        for rep in range(args.reps):
            names = list(configs)
            for name in names[rep % 3 :] + names[: rep % 3]:
                location, traced = configs[name]
                ns = run_once(location, args.buffers, traced, args.plugin_path, tmp)
                results[name].append(ns)
                print(f"rep {rep + 1}/{args.reps} {name:<15} {ns:8.1f} ns/push", flush=True)
        env = gst_env(args.plugin_path, tmp / "check.lltrace")
        subprocess.run(
            ["gst-launch-1.0", "-q", "filesrc", f"location={ts}", f"blocksize={BLOCK}",
             "num-buffers=1000", "!", "fakesink"], env=env, check=True,
        )  # fmt: skip
        found = pes_records(tmp / "check.lltrace")
    med = {name: statistics.median(v) for name, v in results.items()}
    print(f"\n{'config':<15} {'wall ns/push':>13}")
    for name, value in med.items():
        print(f"{name:<15} {value:>13.1f}")
    base = med["latlab, not TS"] - med["none, TS"]
    scan = med["latlab, TS"] - med["latlab, not TS"]
    print(
        f"\nlatlab overhead without TS: {base:.1f} ns/push; the TS scan adds {scan:.1f} ns/push "
        f"({scan / base:.2f}x latlab's own overhead); 1 buffer in {PES_EVERY} starts a PES"
    )
    print(f"sanity: 1000 TS buffers gave {found} pes records (expected {1000 // PES_EVERY})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
