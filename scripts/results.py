"""Regenerate the measured outputs the documentation quotes (docs/results/NAME.md).

Each result is one named command (a scenario run, a sweep, a report of a stored run).
The script runs the named results one after another, never side by side (the figures
are timings), and writes for each ``docs/results/NAME.md``: the command, the date, the
machine (CPU model, cores, kernel), the latlab commit, then what the command printed in a
code block. Run directories go to ``runs/results/NAME`` (runs/ is not committed).

    .venv/bin/python scripts/results.py              every result, in the order below
    .venv/bin/python scripts/results.py l16-basic    only the named ones
    .venv/bin/python scripts/results.py --list       the names and their commands

Run it as root from the repository root's parent or anywhere: it changes to the
repository root. A result whose command exits with a status other than the one expected
is still written (its status is in the file) and makes the script exit 1 at the end.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "results"
RUNS = ROOT / "runs" / "results"
SOURCE_DIRS = ("src", "lltrace", "tracer", "kuprobe", "linkemu", "scenarios")


@dataclass(frozen=True)
class Result:
    name: str
    command: str  # run from the repository root, split like a shell (no shell)
    about: str  # one line: what it shows, and which page quotes it
    out_dir: str | None = None  # run directory the command writes (removed before a rerun)
    expect: int = 0  # the exit status the command is expected to end with
    timeout_s: float = 900.0


def _run(name: str, about: str, extra: str = "", timeout_s: float = 900.0) -> Result:
    """``./latlab run scenarios/NAME.toml --out runs/results/NAME [EXTRA]``."""
    out = f"runs/results/{name}"
    command = f"./latlab run scenarios/{name}.toml --out {out}" + (f" {extra}" if extra else "")
    return Result(name, command, about, out, timeout_s=timeout_s)


SWEEP_JB = "runs/results/l16-jitterbuffer-sweep"

RESULTS: tuple[Result, ...] = (
    # RTP audio (README, docs/rtp-audio.md, docs/scenarios.md, docs/reports.md)
    _run("l16-basic", "The flagship: L16 over RTP, its per-stage table."),
    _run("l16-sender-nosync", "The flagship with udpsink sync=false."),
    _run("l16-impaired", "The flagship over an emulated 20 ms link with jitter and loss."),
    _run("l16-jitterbuffer-sweep", "The flagship swept over the jitter buffer's latency."),
    Result(
        "compare-jb20-jb40",
        f"./latlab compare {SWEEP_JB}:jb=20 {SWEEP_JB}:jb=40",
        "Two points of the jitter-buffer sweep compared (needs l16-jitterbuffer-sweep).",
    ),
    Result(
        "check-l16-basic",
        './latlab check runs/results/l16-basic --budget "e2e.p99<40ms" --budget "network.p50<15ms"',
        "Latency budgets on the flagship run, one exceeded: exit 1 (needs l16-basic).",
        expect=1,
    ),
    Result(
        "export-l16-basic",
        "./latlab export runs/results/l16-basic --perfetto runs/results/l16-basic.json",
        "The flagship run as a Perfetto trace (needs l16-basic).",
    ),
    _run("ku-latency", "Kernel-to-application packet latency (latlab-kuprobe)."),
    # Audio devices, the thesis suite and the black box (docs/rtp-audio.md)
    _run("l16-jack", "L16 between JACK dummy devices."),
    Result(
        "l16-jack-cadence",
        "./latlab report runs/results/l16-jack --cadence",
        "The JACK run's buffer cadence per probe (needs l16-jack).",
    ),
    _run("l16-pulse", "L16 between PulseAudio null sinks."),
    _run("thesis-suite", "The thesis's ten tests on a quiet network.", timeout_s=1200),
    _run("thesis-suite-noisy", "The thesis's ten tests on a noisy network.", timeout_s=1200),
    _run("l16-jack-blackbox", "Time-coded audio between JACK devices beside the probes."),
    _run("l16-pulse-blackbox", "Time-coded audio between PulseAudio devices beside the probes."),
    _run("l16-gst-blackbox", "Time-coded audio between GStreamer ends beside the probes."),
    # SRT live video (docs/srt.md)
    _run("srt-720p30", "The SRT flagship: H.264 in MPEG-TS over SRT."),
    _run("srt-iframe-ratelimit", "srt-720p30 through a 400 kbit/s bottleneck."),
    _run("srt-latency-sweep", "SRT latency x link delay x loss, 24 points.", timeout_s=1800),
    # WebRTC (docs/webrtc.md)
    _run("webrtc-call", "Two headless Chromium peers in a call.", "--duration 8"),
    _run("webrtc-gst", "A browser in a call with a traced webrtcbin peer.", "--duration 8"),
    _run("webrtc-bandwidth-step", "A call through a bandwidth drop and its restore."),
    _run("webrtc-jitter-step", "A call through 30 ms of link jitter for 5 s."),
    _run("webrtc-blackbox", "Time-coded audio between two browsers beside the probes."),
    _run("webrtc-network-sweep", "A call over 16 network settings.", timeout_s=1800),
    # SFUs (docs/sfu.md)
    _run("sfu-janus", "Chromium publisher and subscribers through Janus."),
    _run("sfu-livekit", "Chromium publisher and subscribers through LiveKit."),
    _run("sfu-latlab", "Chromium publisher and subscribers through latlab-sfu."),
    _run("sfu-janus-gst", "A traced webrtcbin publisher through Janus, per 10 ms."),
    _run("sfu-load-janus", "Janus under a growing light load: its curve and knee.", timeout_s=1200),
    _run(
        "sfu-compare",
        "The same light loads through Janus, LiveKit and latlab-sfu, side by side.",
        timeout_s=1800,
    ),
    _run(
        "sfu-cost-repeat",
        "Cost per forwarded packet of the three SFUs, three interleaved rounds.",
        timeout_s=1200,
    ),
    _run(
        "sfu-quality",
        "The SFU study's quality matrix through Janus and LiveKit (docs/sfu.md).",
        timeout_s=4800,
    ),
    Result(
        "sfu-quality-report",
        "./latlab report runs/results/sfu-quality",
        "The quality matrix's tables again, from its sweep (needs sfu-quality).",
    ),
)


def cpu_model() -> str:
    """The CPU's model name, as /proc/cpuinfo gives it."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def commit() -> str:
    """HEAD's short hash, and whether latlab's sources or scenarios had changes on top."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False, timeout=30
        )
        return done.stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--", *SOURCE_DIRS)
    return head + (" with uncommitted changes in its sources" if dirty else "")


def run_command(result: Result) -> tuple[int, str, str, float]:
    """Run the result's command (SIGINT on time-out, so latlab cleans up); return its
    exit status, stdout, stderr and wall time."""
    if result.out_dir:
        target = ROOT / result.out_dir
        if target.resolve().is_relative_to(RUNS.resolve()):
            shutil.rmtree(target, ignore_errors=True)
    RUNS.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}  # piped: full-width tables
    start = time.monotonic()
    child = subprocess.Popen(
        shlex.split(result.command), cwd=ROOT, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        out, err = child.communicate(timeout=result.timeout_s)
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGINT)
        try:
            out, err = child.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate(timeout=30)
        err += f"\n(results.py: stopped after {result.timeout_s:g} s)"
    return child.returncode, out, err, time.monotonic() - start


def fence(text: str) -> str:
    """``text`` in a code block whose fence no line of it closes."""
    text = "\n".join(line.rstrip() for line in text.splitlines())
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}text\n{text.rstrip()}\n{ticks}\n"


def write_result(result: Result, status: int, out: str, err: str, wall_s: float) -> Path:
    expected = "" if status == result.expect else f" (expected {result.expect})"
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"# {result.name}",
        "",
        result.about,
        "",
        f"* command: `{result.command}`",
        f"* date: {now} ({wall_s:.0f} s wall time)",
        f"* machine: {cpu_model()}, {os.cpu_count()} cores, Linux {platform.release()}",
        f"* latlab: commit {commit()}",
        f"* exit status: {status}{expected}",
        f"* regenerate: `.venv/bin/python scripts/results.py {result.name}`",
        "",
        "Output (standard output; tables at their full width):",
        "",
        fence(out or "(nothing)"),
    ]
    notes = err.strip()
    if notes:
        lines += ["Standard error:", "", fence(notes)]
    DOCS.mkdir(parents=True, exist_ok=True)
    path = DOCS / f"{result.name}.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def write_index() -> Path:
    """docs/results/README.md: every result, what it shows and its command."""
    lines = [
        "# Results",
        "",
        "Outputs the documentation quotes, each written by `scripts/results.py` with the",
        "command, the date, the machine and the commit that produced it. Regenerate one with",
        "`.venv/bin/python scripts/results.py NAME`, all with no name (as root, one at a time,",
        "on an otherwise quiet machine).",
        "",
        "| result | what it shows | command |",
        "|---|---|---|",
    ]
    for r in RESULTS:
        present = (DOCS / f"{r.name}.md").exists()
        name = f"[{r.name}]({r.name}.md)" if present else f"{r.name} (not generated)"
        lines.append(f"| {name} | {r.about} | `{r.command}` |")
    path = DOCS / "README.md"
    DOCS.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="results to regenerate (default: all)")
    parser.add_argument("--list", action="store_true", help="list the results and exit")
    args = parser.parse_args(argv)
    by_name = {r.name: r for r in RESULTS}
    if args.list:
        for r in RESULTS:
            print(f"{r.name:24} {r.command}")
        return 0
    unknown = [n for n in args.names if n not in by_name]
    if unknown:
        print(f"results.py: no result named {', '.join(unknown)} (--list)", file=sys.stderr)
        return 2
    chosen = [by_name[n] for n in args.names] if args.names else list(RESULTS)
    bad = []
    for result in chosen:
        print(f"results.py: {result.name}: {result.command}", file=sys.stderr, flush=True)
        status, out, err, wall = run_command(result)
        path = write_result(result, status, out, err, wall)
        ok = status == result.expect
        print(
            f"results.py: {result.name}: exit {status}{'' if ok else ' (unexpected)'} in "
            f"{wall:.0f} s -> {path.relative_to(ROOT)}",
            file=sys.stderr, flush=True,
        )  # fmt: skip
        if not ok:
            bad.append(result.name)
    write_index()
    if bad:
        print(f"results.py: unexpected exit status: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
