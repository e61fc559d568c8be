"""Impaired links: a router namespace running ``latlab-linkemu`` between two hosts.

An impaired ``[[links]]`` entry ``i`` between hosts a and b becomes::

    host a                router namespace llab-<pid>-l<i>                host b
    ll<pid>v<i>a ─ veth ─ ll<pid>r<i>a ═ latlab-linkemu ═ ll<pid>r<i>b ─ veth ─ ll<pid>v<i>b

The hosts keep their /30 addresses (10.77.<i>.1 and .2) and see a plain Ethernet
link; the emulator bridges the two router-side interfaces and applies the
impairment per direction (forward = a -> b, ``between[0]`` to ``between[1]``). It logs
every packet to ``<run dir>/links/<a>-<b>.lllink`` (docs/link-log-format.md); its
configuration is written beside it as ``<a>-<b>.json``.

Checksum and segmentation offloads are switched off on every interface of the link
(``ethtool -K``): the emulator forwards frames as they are, so they must be complete,
with their checksums filled in, and no larger than the MTU.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from latlab.errors import MeasurementError
from latlab.lab.process import ChildProcess, failure_line
from latlab.lab.scenario import BACKEND_EMULATOR
from latlab.tracer import BUILD_DIR

if TYPE_CHECKING:
    from latlab.lab.scenario import Link

LINKEMU = BUILD_DIR / "latlab-linkemu"
UDPGEN = BUILD_DIR / "latlab-udpgen"
BACKEND_DIRECT = "direct"
READY_MARKER = "ready"
READY_TIMEOUT_S = 5.0
STOP_STEPS: tuple[tuple[signal.Signals, str, float | None], ...] = (
    (signal.SIGTERM, "sigterm", 3.0),
    (signal.SIGKILL, "sigkill", None),
)
OFFLOADS = ("rx", "off", "tx", "off", "tso", "off", "gso", "off", "gro", "off")


@dataclass(frozen=True)
class LinkPlan:
    """Names and addresses of one link's veth pair."""

    index: int
    a: str
    b: str
    veth_a: str
    veth_b: str
    addr_a: str
    addr_b: str
    prefix_len: int = 30


class LinkError(MeasurementError, RuntimeError):
    """An emulated link failed to start or died; ``str()`` is one line naming the link."""


def router_namespace(pid: int, index: int) -> str:
    """Name of link ``index``'s router namespace (owned by process ``pid``)."""
    return f"llab-{pid}-l{index}"


def router_ifaces(pid: int, index: int) -> tuple[str, str]:
    """The router-side interface names of link ``index``: towards host a, towards host b."""
    return (f"ll{pid}r{index}a", f"ll{pid}r{index}b")


def linkemu_binary() -> Path:
    """The built emulator; LinkError when it is missing."""
    if not LINKEMU.is_file():
        raise LinkError(f"{LINKEMU} not built: run bash scripts/setup.sh")
    return LINKEMU


def emulator_config(link: Link, seed: int = 1) -> dict[str, Any] | None:
    """The emulator's JSON configuration for a scenario link, or None for a direct link."""
    if not link.impaired:
        return None
    forward = _ge_defaults(dict(link.impairment))
    schedule = []
    for entry in link.schedule:
        keys = {k: v for k, v in entry.items() if k not in ("at_s", "direction")}
        schedule.append(
            {"at_s": entry["at_s"], "direction": entry.get("direction", "both"), "set": keys}
        )
    return {
        "name": f"{link.a}-{link.b}",
        "between": [link.a, link.b],
        "forward": forward,
        "reverse": _ge_defaults({**forward, **link.reverse}),
        "schedule": schedule,
        "seed": seed,
    }


def _ge_defaults(imp: dict[str, Any]) -> dict[str, Any]:
    """Gilbert-Elliott without ``ge_r`` uses r = 100 - p, as ``tc ... loss gemodel p``."""
    if imp.get("loss_model") == "gilbert-elliott" and "ge_r" not in imp:
        imp["ge_r"] = 100 - imp.get("ge_p", 0)
    return imp


def release_cpu() -> int | None:
    """The CPU the emulator's release threads run on: the last one (None on one CPU)."""
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[-1] if len(cpus) > 1 else None


def steer_receive_away(namespace: str, iface: str, cpu: int) -> None:
    """Process ``iface``'s received packets on every CPU but ``cpu`` (RPS).

    A packet socket's send runs the receiving stack's softirq work in the sender's
    context on its own CPU; steering it elsewhere keeps the release threads' CPU free.
    """
    mask = sum(1 << c for c in os.sched_getaffinity(0) if c != cpu)
    path = f"/sys/class/net/{iface}/queues/rx-0/rps_cpus"
    argv = ["ip", "netns", "exec", namespace, "tee", path]
    result = subprocess.run(argv, input=f"{mask:x}\n", capture_output=True, text=True,
                            check=False)  # fmt: skip
    if result.returncode != 0:
        raise LinkError(f"steering {iface}'s receive work (RPS): {failure_line(result)}")


def disable_offloads(namespace: str, iface: str) -> None:
    """Switch off checksum offload, TSO, GSO and GRO on ``iface`` (``ethtool -K``)."""
    ethtool = shutil.which("ethtool")
    if ethtool is None:
        raise LinkError("ethtool not found (needed for emulated links): run bash scripts/setup.sh")
    argv = ["ip", "netns", "exec", namespace, ethtool, "-K", iface, *OFFLOADS]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode not in (0, 80):  # 80: some feature cannot change (already off)
        raise LinkError(f"ethtool -K {iface}: {failure_line(result)}")


class Emulator:
    """One running ``latlab-linkemu`` in a link's router namespace."""

    def __init__(
        self,
        plan: LinkPlan,
        namespace: str,
        ifaces: tuple[str, str],
        config: Mapping[str, Any],
        out_dir: Path,
        exited: threading.Event | None = None,
    ) -> None:
        self.plan = plan
        self.namespace = namespace
        self.ifaces = ifaces
        self.config = dict(config)
        self.cpu = release_cpu()
        stem = f"{plan.a}-{plan.b}" if plan.index == 0 else f"{plan.a}-{plan.b}-{plan.index}"
        self.name = f"{plan.a}-{plan.b}"
        self.config_path = out_dir / f"{stem}.json"
        self.log_path = out_dir / f"{stem}.lllink"
        self.child = ChildProcess(
            name=f"link-{stem}",
            argv=self.argv(),
            stdout_log=out_dir / f"{stem}.stdout",
            stderr_log=out_dir / f"{stem}.stderr",
            exited=exited if exited is not None else threading.Event(),
            ready_marker=READY_MARKER,
        )

    def argv(self) -> list[str]:
        """The command line: the emulator inside the router namespace."""
        return [
            "ip", "netns", "exec", self.namespace, str(linkemu_binary()),
            "--iface-a", self.ifaces[0], "--iface-b", self.ifaces[1],
            "--config", str(self.config_path), "--log", str(self.log_path),
            *(["--release-cpu", str(self.cpu)] if self.cpu is not None else []),
        ]  # fmt: skip

    def start(self, env: Mapping[str, str]) -> None:
        """Write the configuration, start the emulator and wait until it is ready."""
        self.config_path.parent.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(json.dumps(self.config, indent=2) + "\n", encoding="utf-8")
        self.child.start(env)
        if not self.child.wait_ready(READY_TIMEOUT_S):
            self.child.kill_group()
            raise LinkError(f"link {self.name}: {BACKEND_EMULATOR} failed to start: {self._why()}")

    def check(self) -> None:
        """LinkError if the emulator has exited on its own."""
        code = self.child.died()
        if code is not None:
            raise LinkError(
                f"link {self.name}: {BACKEND_EMULATOR} died during the run "
                f"(exit code {code}): {self._why()}"
            )

    def stop(self) -> str:
        """SIGTERM (the emulator completes its log), then SIGKILL; how it ended."""
        return self.child.stop(STOP_STEPS)

    def describe(self, base: Path | None) -> dict[str, Any]:
        """The link's run.json additions: backend, configuration, log path, router."""

        def rel(path: Path) -> str:
            if base is not None and path.is_relative_to(base):
                return str(path.relative_to(base))
            return str(path)

        return {
            "backend": BACKEND_EMULATOR,
            "config": self.config,
            "config_path": rel(self.config_path),
            "log": rel(self.log_path),
            "router_namespace": self.namespace,
            "router_interfaces": list(self.ifaces),
            "emulator": {"argv": self.child.argv, "stderr": rel(self.child.stderr_log),
                         **self.child.describe(self.child.started_ns or 0)},
        }  # fmt: skip

    def _why(self) -> str:
        return self.child.stderr_summary()


def check_emulators(emulators: Sequence[Emulator]) -> None:
    """LinkError naming the first link whose emulator died."""
    for emulator in emulators:
        emulator.check()
