"""Benchmark latlab's link emulator on real namespaces (root; prints, asserts nothing).

* Release precision: UDP at 1 000 and 10 000 packets/s through a 20 ± 5 ms link
  (uniform jitter); release error = actual - scheduled release, from the log;
  targets p99 ≤ 50 µs, max ≤ 1 ms.
* Loss: 100 000 packets at 1 % Bernoulli loss (target: within ±10 % relative).
* Gilbert-Elliott: mean loss-burst length against the model's 1 / r.
* Rate: delivered rate through a 2 400 kbit/s bottleneck, offered 20 % more
  (target: within 2 %).

Senders are ``latlab-udpgen`` (linkemu crate); each prints its achieved rate.

    .venv/bin/python bench/bench_linkemu.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from latlab.ingest.link_log import DELIVERED, LOSS, LinkLog, read_link_log  # noqa: E402
from latlab.lab.links import UDPGEN, linkemu_binary  # noqa: E402
from latlab.lab.netns import Lab, cleanup_stale  # noqa: E402

TARGET_P99_US = 50.0
TARGET_MAX_US = 1000.0


def run_link(impairment: dict[str, Any], pps: int, count: int, size: int = 200) -> LinkLog:
    """Send ``count`` packets tx -> rx at ``pps`` through a link with ``impairment``."""
    config = {"name": "tx-rx", "between": ["tx", "rx"], "forward": impairment,
              "reverse": {}, "schedule": [], "seed": 1}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-linkemu-") as tmp:
        lab = Lab(["tx", "rx"], [("tx", "rx")], run_dir=Path(tmp), link_configs=[config])
        with lab:
            argv = [str(UDPGEN), "--dst", f"{lab.addr('rx')}:5004", "--pps", str(pps),
                    "--count", str(count), "--size", str(size)]  # fmt: skip
            out = subprocess.run(lab.exec_argv("tx", argv), capture_output=True, text=True)
            if out.returncode != 0:
                raise SystemExit(f"udpgen failed: {out.stderr.strip()}")
            print(f"    sender: {out.stdout.strip()}")
            emulator = lab.emulators[0]
        del emulator
        log = read_link_log(Path(tmp) / "links" / "tx-rx.lllink")
    return log


def udp_forward(log: LinkLog) -> np.ndarray:
    """Mask of the sender's UDP packets (forward direction, RTP-looking)."""
    c = log.columns
    return (c["direction"] == 0) & c["is_rtp"] & (c["dst_port"] == 5004)


def precision(pps: int, seconds: float) -> None:
    imp = {"delay_ms": 20, "jitter_ms": 5, "jitter_dist": "uniform"}
    print(f"release precision at {pps} packets/s, 20 ± 5 ms (uniform), {seconds:g} s")
    log = run_link(imp, pps, int(pps * seconds))
    c = log.columns
    sent = udp_forward(log) & (c["released_ns"] > 0)
    err_us = c["released_ns"][sent].astype(np.int64) - c["scheduled_ns"][sent].astype(np.int64)
    err_us = err_us / 1e3
    delay_ms = (c["released_ns"][sent].astype(np.int64) - c["arrival_ns"][sent]) / 1e6
    p50, p99, p999, top = np.percentile(err_us, [50, 99, 99.9, 100])
    print(f"    packets released {sent.sum()}, delay mean {delay_ms.mean():.3f} ms "
          f"(min {delay_ms.min():.3f}, max {delay_ms.max():.3f})")  # fmt: skip
    print(f"    release error µs: p50 {p50:.1f}  p99 {p99:.1f}  p99.9 {p999:.1f}  max {top:.1f}")
    print(f"    vs target: p99 {p99 / TARGET_P99_US:.2f} x of {TARGET_P99_US:g} µs, "
          f"max {top / TARGET_MAX_US:.2f} x of {TARGET_MAX_US:g} µs")  # fmt: skip


def loss(count: int) -> None:
    print(f"Bernoulli loss 1 % over {count} packets (10 000 packets/s)")
    log = run_link({"loss_pct": 1.0}, 10_000, count)
    c = log.columns
    udp = udp_forward(log)
    lost = np.count_nonzero(udp & (c["verdict"] == LOSS))
    offered = np.count_nonzero(udp)
    measured = 100 * lost / offered
    print(f"    offered {offered}, lost {lost} = {measured:.3f} % "
          f"(relative error {(measured - 1) / 1 * 100:+.1f} %, target ±10 %)")  # fmt: skip


def bursts(lost: np.ndarray) -> np.ndarray:
    """Lengths of runs of consecutive True in ``lost``."""
    edges = np.diff(np.concatenate([[0], lost.astype(np.int8), [0]]))
    return np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)


def gilbert_elliott(count: int) -> None:
    p, r = 1.0, 25.0
    print(f"Gilbert-Elliott p={p:g} % r={r:g} % (loss 100 % in Bad, 0 % in Good), {count} packets")
    log = run_link({"loss_model": "gilbert-elliott", "ge_p": p, "ge_r": r}, 10_000, count)
    c = log.columns
    udp = udp_forward(log)
    order = np.argsort(c["packet_id"][udp], kind="stable")
    lost = (c["verdict"][udp] == LOSS)[order]
    runs = bursts(lost)
    model_loss = p / (p + r) * 100
    print(f"    loss {100 * lost.mean():.3f} % (model {model_loss:.3f} %), bursts {len(runs)}")
    print(f"    mean burst length {runs.mean():.3f} packets (model 1/r = {100 / r:.3f}), "
          f"ratio {runs.mean() / (100 / r):.3f}")  # fmt: skip


def rate(seconds: float) -> None:
    kbit, size = 2400, 1200
    frame = size + 8 + 20 + 14
    pps = int(kbit * 1000 * 1.2 / (frame * 8))
    print(f"rate {kbit} kbit/s, offered {pps} packets/s of {frame}-byte frames "
          f"({pps * frame * 8 / 1000:.0f} kbit/s), queue 50 ms, {seconds:g} s")  # fmt: skip
    log = run_link({"rate_kbit": kbit, "queue_ms": 50}, pps, int(pps * seconds), size)
    c = log.columns
    ok = udp_forward(log) & (c["verdict"] == DELIVERED)
    t = np.sort(c["released_ns"][ok].astype(np.int64))
    sizes = c["size"][ok]
    delivered = sizes[1:].sum() * 8 / ((t[-1] - t[0]) / 1e9) / 1000
    print(f"    delivered {delivered:.1f} kbit/s = {delivered / kbit:.4f} of the bottleneck "
          f"(error {(delivered / kbit - 1) * 100:+.2f} %, target ±2 %); "
          f"tail drops {np.count_nonzero(udp_forward(log) & (c['verdict'] == 2))}")  # fmt: skip


def main() -> None:
    if os.geteuid() != 0:
        raise SystemExit("bench_linkemu: needs root (network namespaces)")
    linkemu_binary()
    if not UDPGEN.is_file():
        raise SystemExit(f"{UDPGEN} not built: run bash scripts/setup.sh")
    cleanup_stale()
    precision(1_000, 10)
    precision(10_000, 5)
    loss(100_000)
    gilbert_elliott(100_000)
    rate(10)


if __name__ == "__main__":
    main()
