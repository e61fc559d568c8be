"""Soak of latlab's link emulator (root): UDP at PPS packets/s (default 10 000) through a
20 ± 5 ms link (uniform jitter) for SECONDS (default 10 minutes), on real namespaces.

Per slice (a tenth of the run) and over the whole run it prints the release error
(actual - scheduled release, from the emulator's own log), the packets the sender sent,
the emulator logged and released, and the emulator's resident memory (VmRSS, sampled
every second). Targets: p99 ≤ 50 µs and max ≤ 1 ms in every slice, every packet
released, memory flat after the first slice. It only measures and prints (``--json PATH``
also writes the figures); tests/test_soak.py runs a 20-second version.

``--sched-trace`` also records, with ``perf`` (software tracepoints), every context switch
and local timer interrupt on the release CPU, and says for each release more than 1 ms
late what that CPU had switched to last before the packet was due, and whether any
timer interrupt reached the CPU between the packet's due time and its release.

    .venv/bin/python bench/soak_linkemu.py [--seconds 600] [--pps 10000] [--json PATH]
        [--sched-trace]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from bench_linkemu import udp_forward  # noqa: E402
from soak_tracer import publish, resident_kb  # noqa: E402

from latlab.ingest.link_log import DELIVERED, LATE_RELEASE_NS, read_link_log  # noqa: E402
from latlab.lab.links import UDPGEN, linkemu_binary  # noqa: E402
from latlab.lab.netns import Lab, cleanup_stale  # noqa: E402

TARGET_P99_US = 50.0
TARGET_MAX_US = 1000.0
LATE_US = LATE_RELEASE_NS / 1e3  # a release this late changed the impairment (summary.json)
SIZE = 200  # UDP payload bytes


def soak(seconds: float, pps: int, every: float, sched_trace: bool = False) -> dict[str, Any]:
    """Run the soak; its figures."""
    config = {
        "name": "tx-rx",
        "between": ["tx", "rx"],
        "forward": {"delay_ms": 20, "jitter_ms": 5, "jitter_dist": "uniform"},
        "reverse": {},
        "schedule": [],
        "seed": 1,
    }
    count = round(seconds * pps)
    with tempfile.TemporaryDirectory(prefix="latlab-soak-linkemu-") as tmp:
        lab = Lab(["tx", "rx"], [("tx", "rx")], run_dir=Path(tmp), link_configs=[config])
        with lab:
            pid, cpu = lab.emulators[0].child.pid, lab.emulators[0].cpu
            argv = [
                str(UDPGEN),
                "--dst",
                f"{lab.addr('rx')}:5004",
                "--pps",
                str(pps),
                "--count",
                str(count),
                "--size",
                str(SIZE),
            ]
            perf = SchedTrace(Path(tmp), cpu) if sched_trace and cpu is not None else None
            sender = subprocess.Popen(
                lab.exec_argv("tx", argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            samples = _sample(sender, pid, every)
            out, err = sender.communicate(timeout=60)
            switches = perf.stop() if perf is not None else None
            if sender.returncode != 0:
                raise SystemExit(f"soak_linkemu: udpgen failed: {err.strip()}")
            print(f"  sender: {out.strip()}", flush=True)
        log = read_link_log(Path(tmp) / "links" / "tx-rx.lllink")
    sent = re.search(r"sent (\d+)", out)
    found = figures(log, int(sent.group(1)) if sent else count, samples, cpu, seconds)
    if switches is not None:
        found["before_late"] = before_late(log, switches)
    return found


class SchedTrace:
    """``perf record`` of the context switches and local timer interrupts on one CPU
    (CLOCK_MONOTONIC timestamps, as the link log's)."""

    EVENTS = ("sched:sched_switch", "irq_vectors:local_timer_entry")

    def __init__(self, tmp: Path, cpu: int) -> None:
        self.data = tmp / "sched.perf"
        events = [arg for e in self.EVENTS for arg in ("-e", e)]
        self.proc = subprocess.Popen(
            ["perf", "record", "-q", "-k", "CLOCK_MONOTONIC", "-C", str(cpu), *events,
             "-o", str(self.data)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def stop(self) -> dict[str, np.ndarray]:
        """Stop recording; per event: ``t_ns``, ``timer`` (bool) and ``next`` (the task
        switched to, "" for a timer interrupt)."""
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=120)
        text = subprocess.run(
            ["perf", "script", "-i", str(self.data), "-F", "time,event,trace", "--ns"],
            capture_output=True, text=True, timeout=600, check=False,
        ).stdout  # fmt: skip
        rows = re.findall(r"([0-9]+)\.([0-9]{9}): +(\S+):(?:.*?next_comm=(\S+))?", text)
        return {
            "t_ns": np.array([int(a) * 1_000_000_000 + int(b) for a, b, _, _ in rows], np.int64),
            "timer": np.array([e.startswith("irq_vectors") for _, _, e, _ in rows], bool),
            "next": np.array([n for _, _, _, n in rows], object),
        }


def before_late(log: Any, switches: dict[str, np.ndarray]) -> dict[str, Any]:
    """For each release more than 1 ms late: the task the release CPU had switched to
    last before the packet was due (counted by name), and how many of them saw no timer
    interrupt on that CPU between their due time and their release."""
    c = log.columns
    released = udp_forward(log) & (c["released_ns"] > 0)
    due = c["scheduled_ns"][released].astype(np.int64)
    out = c["released_ns"][released].astype(np.int64)
    late = (out - due) > LATE_RELEASE_NS
    is_switch = ~switches["timer"]
    switch_t, names = switches["t_ns"][is_switch], switches["next"][is_switch]
    timer_t = np.sort(switches["t_ns"][switches["timer"]])
    last = np.searchsorted(switch_t, due[late], side="right") - 1
    tasks = [str(names[i]) if i >= 0 else "(none recorded)" for i in last]
    first = np.searchsorted(timer_t, due[late])
    timers = np.searchsorted(timer_t, out[late]) - first
    reached = first < len(timer_t)
    wait_us = (timer_t[first[reached]] - due[late][reached]) / 1e3
    counts: dict[str, int] = {}
    for task in tasks:
        counts[task] = counts.get(task, 0) + 1
    return {"late": int(late.sum()), "switched_to": counts,
            "no_timer_interrupt": int(np.count_nonzero(timers == 0)),
            "first_timer_after_due_us": {
                "p50": float(np.median(wait_us)) if len(wait_us) else None,
                "min": float(wait_us.min()) if len(wait_us) else None}}  # fmt: skip


@dataclass
class Samples:
    """Per second while the sender runs: the emulator's VmRSS (kB); and CLOCK_MONOTONIC
    (ns) with every CPU's steal time so far (USER_HZ ticks, /proc/stat)."""

    rss_kb: list[int] = field(default_factory=list)
    t_ns: list[int] = field(default_factory=list)
    steal: list[list[int]] = field(default_factory=list)


def steal_ticks() -> list[int]:
    """Each CPU's steal time so far, by CPU number (/proc/stat's eighth field, USER_HZ
    ticks): time the hypervisor ran something else while this virtual CPU wanted to run."""
    ticks: dict[int, int] = {}
    with open("/proc/stat", encoding="ascii") as stat:
        for line in stat:
            fields = line.split()
            if fields and fields[0].startswith("cpu") and fields[0][3:].isdigit():
                ticks[int(fields[0][3:])] = int(fields[8])
    return [ticks.get(cpu, 0) for cpu in range(max(ticks) + 1)]


def _sample(sender: subprocess.Popen, pid: int | None, every: float) -> Samples:
    """Sample every second while the sender runs."""
    out = Samples()
    started, next_print = time.monotonic(), every
    while sender.poll() is None:
        kb = resident_kb(pid) if pid else None
        if kb is not None:
            out.rss_kb.append(kb)
        out.t_ns.append(time.monotonic_ns())
        out.steal.append(steal_ticks())
        elapsed = time.monotonic() - started
        if elapsed >= next_print and out.rss_kb:
            print(
                f"  {elapsed:7.0f} s: emulator resident {out.rss_kb[-1] / 1024:6.1f} MB", flush=True
            )
            next_print += every
        with contextlib.suppress(subprocess.TimeoutExpired):
            sender.wait(timeout=1.0)
    return out


def stolen_when_late(
    released_ns: np.ndarray, late: np.ndarray, samples: Samples, cpu: int | None
) -> dict[str, Any]:
    """Whether the seconds (between two samples) holding a release more than 1 ms late saw
    the hypervisor steal the release CPU, against all seconds."""
    if cpu is None or len(samples.t_ns) < 2:
        return {"cpu": cpu, "seconds": 0}
    t = np.asarray(samples.t_ns, dtype=np.int64)
    stolen = np.diff(np.asarray(samples.steal, dtype=np.int64)[:, cpu]) > 0
    interval = np.searchsorted(t, released_ns[late], side="right") - 1
    interval = np.unique(interval[(interval >= 0) & (interval < len(stolen))])
    return {
        "cpu": cpu,
        "seconds": len(stolen),
        "seconds_with_steal": int(stolen.sum()),
        "seconds_with_late_release": len(interval),
        "of_them_with_steal": int(stolen[interval].sum()),
    }


def figures(
    log: Any, sent: int, samples: Samples, cpu: int | None, seconds: float
) -> dict[str, Any]:
    """Release error per slice and overall, packet counts, memory, steal when late."""
    rss_kb = samples.rss_kb
    c = log.columns
    udp = udp_forward(log)
    released = udp & (c["released_ns"] > 0)
    arrival = c["arrival_ns"][released].astype(np.int64)
    err_us = (
        c["released_ns"][released].astype(np.int64) - c["scheduled_ns"][released].astype(np.int64)
    ) / 1e3
    slices = []
    if len(arrival):
        edges = np.linspace(arrival.min(), arrival.max() + 1, 11)
        which = np.searchsorted(edges, arrival, side="right") - 1
        for k in range(10):
            part = err_us[which == k]
            if len(part):
                p50, p99, top = np.percentile(part, [50, 99, 100])
                slices.append(
                    {
                        "slice": k,
                        "packets": len(part),
                        "p50_us": float(p50),
                        "p99_us": float(p99),
                        "max_us": float(top),
                    }
                )
    tenth = max(1, len(rss_kb) // 10)
    overall = np.percentile(err_us, [50, 99, 99.9, 100]) if len(err_us) else [np.nan] * 4
    return {
        "seconds": seconds,
        "sent": sent,
        "logged": int(np.count_nonzero(udp)),
        "delivered": int(np.count_nonzero(udp & (c["verdict"] == DELIVERED))),
        "released": int(np.count_nonzero(released)),
        "release_error_us": dict(
            zip(("p50", "p99", "p999", "max"), map(float, overall), strict=True)
        ),
        "slices": slices,
        "late_1ms": int(np.count_nonzero(err_us > LATE_US)),
        "steal": stolen_when_late(
            c["released_ns"][released].astype(np.int64), err_us > LATE_US, samples, cpu
        ),
        "rss_mb": {
            "first_slice_peak": max(rss_kb[:tenth]) / 1024 if rss_kb else None,
            "peak": max(rss_kb) / 1024 if rss_kb else None,
            "samples": len(rss_kb),
        },
    }


def report(found: dict[str, Any]) -> None:
    print("\nslice  packets   p50 µs   p99 µs    max µs")
    for s in found["slices"]:
        print(
            f"{s['slice']:>5} {s['packets']:>8} {s['p50_us']:>8.1f} {s['p99_us']:>8.1f} "
            f"{s['max_us']:>9.1f}"
        )
    err = found["release_error_us"]
    worst_p99 = max((s["p99_us"] for s in found["slices"]), default=float("nan"))
    worst_max = max((s["max_us"] for s in found["slices"]), default=float("nan"))
    print(
        f"\nrelease error over {found['seconds']:g} s: p50 {err['p50']:.1f} µs, p99 "
        f"{err['p99']:.1f}, p99.9 {err['p999']:.1f}, max {err['max']:.1f}"
    )
    print(
        f"worst slice vs target: p99 {worst_p99 / TARGET_P99_US:.2f}x of {TARGET_P99_US:g} µs, "
        f"max {worst_max / TARGET_MAX_US:.2f}x of {TARGET_MAX_US:g} µs"
    )
    print(
        f"packets: sent {found['sent']} (the sender's count), logged {found['logged']}, released "
        f"{found['released']}, delivered {found['delivered']}"
    )
    steal = found["steal"]
    if steal["seconds"]:
        print(
            f"releases more than 1 ms late: {found['late_1ms']}, in "
            f"{steal['seconds_with_late_release']} seconds, "
            f"{steal['of_them_with_steal']} of them with steal time on the release CPU "
            f"(cpu{steal['cpu']}); seconds with steal there: {steal['seconds_with_steal']} of "
            f"{steal['seconds']}"
        )
    before = found.get("before_late")
    if before and before["late"]:
        tasks = ", ".join(f"{k} {v}" for k, v in sorted(before["switched_to"].items(),
                                                        key=lambda kv: -kv[1]))  # fmt: skip
        print(
            f"before the {before['late']} late releases the release CPU had switched to: "
            f"{tasks}; {before['no_timer_interrupt']} of them saw no timer interrupt on it "
            "between their due time and their release; the first timer interrupt after the "
            f"due time came {before['first_timer_after_due_us']['p50']:.0f} µs after it at the "
            f"median (least {before['first_timer_after_due_us']['min']:.0f} µs)"
        )
    rss = found["rss_mb"]
    if rss["peak"] is not None:
        print(
            f"emulator resident MB: first slice peak {rss['first_slice_peak']:.1f}, run peak "
            f"{rss['peak']:.1f} ({rss['samples']} samples)"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--pps", type=int, default=10_000)
    ap.add_argument("--every", type=float, default=60.0, help="progress line interval (s)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument(
        "--sched-trace",
        action="store_true",
        help="record the release CPU's switches and timer interrupts (perf)",
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("soak_linkemu: needs root (network namespaces)", file=sys.stderr)
        return 1
    linkemu_binary()
    if not UDPGEN.is_file():
        print(f"soak_linkemu: {UDPGEN} not built: run bash scripts/setup.sh", file=sys.stderr)
        return 1
    cleanup_stale()
    print(f"link emulator soak: {args.pps} packets/s through 20 ± 5 ms for {args.seconds:g} s")
    found = soak(args.seconds, args.pps, args.every, args.sched_trace)
    return publish(found, report, args.json)


if __name__ == "__main__":
    sys.exit(main())
