"""Impaired links through the kernel's netem qdisc, where the kernel has it.

A link with ``backend = "netem"`` (or ``"auto"`` on a kernel with ``sch_netem``) is a
plain veth pair between its hosts. The egress of each end gets the impairment of the
direction it sends (forward on host a's end, reverse on host b's)::

    root 1:  netem   loss (random or gemodel), duplicate, reorder, delay + jitter
      10:    tbf     rate_kbit, tail drop beyond queue_ms of backlog   (with rate_kbit)

The keys, their defaults and their meaning are those of latlab-linkemu
(``linkemu/src/config.rs``), so a scenario means the same on either backend; what
differs is in docs/scenarios.md, "Backends" (no per-packet log; the bottleneck comes after
the delay). Schedule entries are applied with ``tc qdisc replace`` at ``at_s`` after the
link was set up, by a thread of this process. Only interfaces inside the namespaces
latlab created are touched; tc runs without a shell.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from latlab.errors import MeasurementError
from latlab.lab.process import failure_line

BACKEND_NETEM = "netem"
NETEM_LIMIT = 100_000  # packets netem may hold: it never drops for lack of room itself
TBF_BURST = 1540  # bytes: one full Ethernet frame (tbf drops packets larger than its burst)
DEFAULTS: dict[str, Any] = {  # latlab-linkemu's defaults (Impairment::default)
    "delay_ms": 0.0,
    "jitter_ms": 0.0,
    "jitter_dist": "normal",
    "loss_pct": 0.0,
    "loss_model": "bernoulli",
    "ge_p": 0.0,
    "ge_r": 100.0,
    "ge_h": 100.0,
    "ge_k": 0.0,
    "rate_kbit": 0.0,
    "queue_ms": 50.0,
    "reorder_pct": 0.0,
    "duplicate_pct": 0.0,
}


class NetemError(MeasurementError, RuntimeError):
    """tc refused a netem link; ``str()`` is one line naming the link and tc's reason."""


def _number(value: float) -> str:
    """A decimal tc accepts (no exponent), without trailing zeros."""
    return f"{value:.6f}".rstrip("0").rstrip(".")


def netem_args(impairment: Mapping[str, Any]) -> list[str]:
    """The arguments of ``tc qdisc ... netem`` for one direction's impairment."""
    imp = {**DEFAULTS, **impairment}
    args = ["limit", str(NETEM_LIMIT)]
    if imp["delay_ms"] or imp["jitter_ms"] or imp["reorder_pct"]:
        args += ["delay", f"{_number(imp['delay_ms'])}ms"]
        if imp["jitter_ms"]:
            args.append(f"{_number(imp['jitter_ms'])}ms")
            if imp["jitter_dist"] != "uniform":  # netem's own default is uniform
                args += ["distribution", imp["jitter_dist"]]
    if imp["reorder_pct"]:
        args += ["reorder", f"{_number(imp['reorder_pct'])}%"]
    if imp["loss_model"] == "gilbert-elliott":
        ge = (imp["ge_p"], imp["ge_r"], imp["ge_h"], imp["ge_k"])
        args += ["loss", "gemodel", *(f"{_number(v)}%" for v in ge)]
    elif imp["loss_pct"]:
        args += ["loss", "random", f"{_number(imp['loss_pct'])}%"]
    if imp["duplicate_pct"]:
        args += ["duplicate", f"{_number(imp['duplicate_pct'])}%"]
    return args


def tbf_args(impairment: Mapping[str, Any]) -> list[str] | None:
    """The arguments of the bottleneck's ``tbf``, or None without ``rate_kbit``."""
    imp = {**DEFAULTS, **impairment}
    if not imp["rate_kbit"]:
        return None
    return ["rate", f"{_number(imp['rate_kbit'])}kbit", "burst", str(TBF_BURST),
            "latency", f"{_number(imp['queue_ms'])}ms"]  # fmt: skip


def qdisc_commands(namespace: str, dev: str, impairment: Mapping[str, Any]) -> list[list[str]]:
    """The tc commands that give ``dev`` (in ``namespace``) this impairment, add or change."""
    tc = ["tc", "-n", namespace, "qdisc", "replace", "dev", dev]
    commands = [[*tc, "root", "handle", "1:", "netem", *netem_args(impairment)]]
    bottleneck = tbf_args(impairment)
    if bottleneck is not None:
        commands.append([*tc, "parent", "1:1", "handle", "10:", "tbf", *bottleneck])
    return commands


def _run(argv: Sequence[str]) -> str | None:
    """Run a command; its error as one line, or None when it succeeded."""
    try:
        result = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    except OSError as exc:
        return f"{argv[0]}: {exc.strerror or exc}"
    return None if result.returncode == 0 else failure_line(result)


def netem_missing(namespace: str) -> str | None:
    """Why the kernel cannot run netem (tc's answer), or None when it can.

    Tried on the loopback of ``namespace``, which must be one latlab created.
    """
    tc = ["tc", "-n", namespace, "qdisc"]
    problem = _run([*tc, "add", "dev", "lo", "root", "netem", "delay", "0ms"])
    if problem is None:
        _run([*tc, "del", "dev", "lo", "root"])
    return problem


class NetemLink:
    """One link's netem qdiscs: set up, changed on schedule, their counters at the end."""

    def __init__(
        self, name: str, ends: Sequence[tuple[str, str]], config: Mapping[str, Any]
    ) -> None:
        """``ends``: (namespace, interface) of host a's and host b's veth end; ``config``
        as for latlab-linkemu (``forward``, ``reverse``, ``schedule``)."""
        self.name = name
        self.ends = list(ends)
        self.config = config
        self.state = {"forward": dict(config["forward"]), "reverse": dict(config["reverse"])}
        self.applied: list[dict[str, Any]] = []
        self.stats: list[dict[str, Any]] = []
        self.failure: str | None = None
        self._stopping = threading.Event()
        self._scheduler: threading.Thread | None = None

    def start(self) -> None:
        """Apply both directions now and schedule the changes; NetemError if tc refuses."""
        started = time.monotonic_ns()
        for direction in self.state:
            self._apply(direction)
        self.applied.append({"at_s": 0, "monotonic_ns": started, "direction": "both"})
        if self.config.get("schedule"):
            self._scheduler = threading.Thread(
                target=self._run_schedule, args=(started,), name=f"netem-{self.name}", daemon=True
            )
            self._scheduler.start()

    def check(self) -> None:
        """NetemError if a scheduled change failed."""
        if self.failure is not None:
            raise NetemError(self.failure)

    def stop(self) -> None:
        """Stop the schedule and keep the qdiscs' counters (before the namespaces go)."""
        self._stopping.set()
        if self._scheduler is not None:
            self._scheduler.join()
        self.stats = [self._counters(ns, dev) for ns, dev in self.ends]

    def describe(self) -> dict[str, Any]:
        """What run.json records of this link."""
        commands = [
            qdisc_commands(ns, dev, self.state[direction])
            for (ns, dev), direction in zip(self.ends, ("forward", "reverse"), strict=True)
        ]
        return {
            "backend": BACKEND_NETEM,
            "config": dict(self.config),
            "log": None,
            "tc": [" ".join(argv) for pair in commands for argv in pair],
            "applied": self.applied,
            "qdisc_stats": self.stats,
        }

    def _apply(self, direction: str) -> None:
        namespace, dev = self.ends[0 if direction == "forward" else 1]
        for argv in qdisc_commands(namespace, dev, self.state[direction]):
            problem = _run(argv)
            if problem is not None:
                raise NetemError(f"link {self.name}: {' '.join(argv)}: {problem}")

    def _run_schedule(self, started: int) -> None:
        for entry in self.config["schedule"]:
            due = started + int(entry["at_s"] * 1e9)
            if self._stopping.wait(max(due - time.monotonic_ns(), 0) / 1e9):
                return
            directions = ("forward", "reverse")
            if entry["direction"] != "both":
                directions = (entry["direction"],)
            try:
                for direction in directions:
                    self.state[direction].update(entry["set"])
                    self._apply(direction)
            except NetemError as exc:
                self.failure = str(exc)
                return
            applied = {"at_s": entry["at_s"], "monotonic_ns": time.monotonic_ns()}
            self.applied.append({**applied, "direction": entry["direction"]})

    @staticmethod
    def _counters(namespace: str, dev: str) -> dict[str, Any]:
        argv = ["tc", "-n", namespace, "-s", "-j", "qdisc", "show", "dev", dev]
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        try:
            qdiscs = json.loads(result.stdout) if result.returncode == 0 else []
        except ValueError:
            qdiscs = []
        keep = ("kind", "handle", "bytes", "packets", "drops", "overlimits", "requeues")
        return {"dev": dev, "qdiscs": [{k: q[k] for k in keep if k in q} for q in qdiscs]}
