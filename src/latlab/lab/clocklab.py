"""Hosts with their own clocks: a planted offset and rate per host, and the clock agents.

A scenario in which any host has ``clock = { offset_ms, drift_ppm }`` makes every host its
own clock domain ``monotonic@HOST`` (a host without the key: offset 0, drift 0), as if
each were a machine of its own:

* **offset**: the host's processes run in a Linux time namespace whose CLOCK_MONOTONIC
  (and CLOCK_BOOTTIME) offset is ``offset_ms``: a holder process (``sleep``) keeps the
  namespace, every process of the host enters it (``nsenter --time``) inside its network
  namespace. The kernel applies the offset to every clock read and every absolute wait;
* **rate**: every process of the host loads ``libllclockskew.so`` (``clockskew/``),
  which makes its monotonic clocks run ``drift_ppm`` fast from an epoch the host's
  processes share, and converts its waits back (docs/clocks.md says what it covers);
* **agents**: one clock agent per host (:mod:`latlab.lab.clockd`) serves two-way
  exchanges on each of its addresses, and asks the host at the other end of each of its
  links, over that link (through its emulator, delays and asymmetry included).

The link emulator of a link between a and b runs in host a's clock (its log is in a's
domain). The truth (offsets, drifts, epochs) goes into run.json's ``hosts``; the analysis
never reads it: it aligns from the clock logs alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from latlab import rundir
from latlab.errors import MeasurementError
from latlab.lab.process import ChildProcess
from latlab.lab.scenario import Host, HostClock
from latlab.tracer import REPO_ROOT

SKEW_LIBRARY = REPO_ROOT / "build" / "clockskew" / "libllclockskew.so"  # scripts/setup.sh
EXCHANGE_PORT = 31_900
READY_TIMEOUT_S = 10.0
CLONE_NEWTIME = 0x80
# The holder: a process that creates the time namespace, sets its offsets before anything
# enters it, and leaves a child (sleep) in it; prints the child's pid.
HOLDER = """
import ctypes, os, sys
libc = ctypes.CDLL("libc.so.6", use_errno=True)
if libc.unshare(0x80) != 0:
    sys.exit("unshare(CLONE_NEWTIME): " + os.strerror(ctypes.get_errno()))
sec, nsec = int(sys.argv[1]), int(sys.argv[2])
fd = os.open("/proc/self/timens_offsets", os.O_WRONLY)
os.write(fd, f"monotonic {sec} {nsec}\\nboottime {sec} {nsec}\\n".encode())
os.close(fd)
pid = os.fork()
if pid == 0:
    null = os.open("/dev/null", os.O_RDWR)
    for target in (0, 1, 2):
        os.dup2(null, target)
    os.setsid()
    os.execvp("sleep", ["sleep", "infinity"])
print(pid, flush=True)
"""


class ClockLabError(MeasurementError, RuntimeError):
    """A planted clock or a clock agent could not be set up; ``str()`` is one line."""


def domain_of(host: str) -> str:
    """The clock domain of a lab host with its own clock."""
    return f"monotonic@{host}"


def split_ns(offset_ns: int) -> tuple[int, int]:
    """An offset as the (seconds, nanoseconds in [0, 1e9)) timens_offsets takes."""
    sec, nsec = divmod(int(offset_ns), 1_000_000_000)
    return sec, nsec


class HostClocks:
    """The planted clocks of a lab's hosts (nothing when no host has one)."""

    def __init__(self, hosts: Sequence[Host]) -> None:
        self.separate = any(h.clock is not None for h in hosts)
        self.clocks: dict[str, HostClock] = (
            {h.name: h.clock or HostClock() for h in hosts} if self.separate else {}
        )
        self.holders: dict[str, int] = {}  # host -> pid of the process holding its time ns
        self.namespaced: set[str] = set()  # hosts that had a time namespace
        self.epochs: dict[str, int] = {}  # host -> the skew's epoch (host clock ns)
        self.agents: list[tuple[str, ChildProcess]] = []

    def up(self) -> None:
        """Create each host's time namespace (offset) and fix its skew's epoch."""
        drifts = any(c.drift_ppm for c in self.clocks.values())
        if drifts and not SKEW_LIBRARY.is_file():
            raise ClockLabError(f"{SKEW_LIBRARY} not built: run bash scripts/setup.sh")
        for host, clock in self.clocks.items():
            offset_ns = round(clock.offset_ms * 1e6)
            if offset_ns:
                self.holders[host] = _hold_time_namespace(offset_ns, host)
                self.namespaced.add(host)
            self.epochs[host] = time.monotonic_ns() + offset_ns

    def down(self) -> None:
        """Stop the agents, then the holders (the namespaces go with their last process)."""
        self.stop_agents()
        for pid in self.holders.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.holders.clear()

    def prefix(self, host: str) -> list[str]:
        """What goes between ``ip netns exec NS`` and a command of ``host``."""
        clock = self.clocks.get(host)
        if clock is None:
            return []
        argv: list[str] = []
        if host in self.holders:
            argv += ["nsenter", f"--time=/proc/{self.holders[host]}/ns/time", "--"]
        if clock.drift_ppm:
            argv += ["env", f"LD_PRELOAD={SKEW_LIBRARY}",
                     f"LATLAB_CLOCK_DRIFT_PPM={clock.drift_ppm!r}",
                     f"LATLAB_CLOCK_EPOCH_NS={self.epochs[host]}"]  # fmt: skip
        return argv

    def start_agents(
        self,
        out_dir: Path,
        exec_argv: Callable[[str, list[str]], list[str]],
        links: Sequence[tuple[str, str, str, str]],
        exited: threading.Event,
    ) -> None:
        """One agent per host: serving on each of its addresses, asking the far end of
        each of its links (``links``: host a, host b, a's address, b's address)."""
        for host in self.clocks:
            peers = [f"{domain_of(b)}={addr_b}:{EXCHANGE_PORT}"
                     for a, b, _, addr_b in links if a == host]  # fmt: skip
            log = rundir.clock_log(out_dir, host)
            argv = [sys.executable, "-m", "latlab.lab.clockd", "--log", str(log),
                    "--domain", domain_of(host), "--serve", f"0.0.0.0:{EXCHANGE_PORT}",
                    "--planted"]  # fmt: skip
            for peer in peers:
                argv += ["--peer", peer]
            stdout, stderr = rundir.process_logs(out_dir, f"clock-{host}")
            child = ChildProcess(f"clock-{host}", exec_argv(host, argv), stdout, stderr,
                                 exited, ready_marker="ready")  # fmt: skip
            self.agents.append((host, child))
            child.start(dict(os.environ))
            if not child.wait_ready(READY_TIMEOUT_S):
                raise ClockLabError(f"clock agent of host '{host}' did not start: "
                                    f"{child.stderr_summary()}")  # fmt: skip

    def stop_agents(self) -> None:
        for _, child in reversed(self.agents):
            child.stop()
        self.agents = []

    def describe_host(self, host: str) -> dict[str, Any]:
        """run.json's additions to a host: its domain and the planted truth."""
        clock = self.clocks.get(host)
        if clock is None:
            return {}
        return {
            "clock_domain": domain_of(host),
            "clock": {
                "offset_ms": clock.offset_ms,
                "drift_ppm": clock.drift_ppm,
                "epoch_ns": self.epochs.get(host),
                "time_namespace": host in self.namespaced,
                "log": str(rundir.clock_log(Path("."), host)),
            },
        }

    def describe(self, hosts: Sequence[str]) -> dict[str, Any] | None:
        """run.json's ``clock`` (None when the hosts share the machine's clock)."""
        if not self.clocks:
            return None
        return {
            "reference": domain_of(hosts[0]),
            "domains": {
                domain_of(h): {"hosts": [h], "log": str(rundir.clock_log(Path("."), h))}
                for h in self.clocks
            },
        }


def _hold_time_namespace(offset_ns: int, host: str) -> int:
    """A new time namespace with ``offset_ns``, held by a sleeping process; its pid."""
    sec, nsec = split_ns(offset_ns)
    try:
        done = subprocess.run([sys.executable, "-c", HOLDER, str(sec), str(nsec)],
                              capture_output=True, text=True, timeout=10, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise ClockLabError(f"host '{host}': creating its time namespace timed out") from None
    if done.returncode != 0 or not done.stdout.strip().isdigit():
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ClockLabError(f"host '{host}': cannot create its time namespace: {why}")
    return int(done.stdout.strip())
