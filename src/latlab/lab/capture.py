"""Packet capture on a host: ``latlab-capture`` inside the host's namespace.

A scenario host with ``capture = true`` (an SFU's, typically) gets every packet it
receives and sends logged with the kernel's timestamps, on one clock for both
directions, to ``captures/HOST.lllink`` (docs/link-log-format.md), and at the end the
capture's own account of what it may have missed to ``captures/HOST.json`` (frames,
kernel drops, frames without a kernel timestamp, the clock offset it applied).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from latlab import rundir
from latlab.errors import EnvironmentProblem, MeasurementError
from latlab.lab.process import ChildProcess
from latlab.tracer import BUILD_DIR

CAPTURE_BINARY = "latlab-capture"
READY_TIMEOUT_S = 10.0
STOP_STEPS = None  # ChildProcess's default: SIGTERM, then SIGKILL


class CaptureError(MeasurementError):
    """A capture that failed to start or died; ``str()`` names the host."""


def capture_binary() -> Path:
    """The built ``latlab-capture`` (target/release of the Cargo workspace)."""
    path = BUILD_DIR / CAPTURE_BINARY
    if not path.is_file():
        raise EnvironmentProblem(f"{path}: not built (run bash scripts/setup.sh)")
    return path


class Capture:
    """One running ``latlab-capture`` in a host's namespace."""

    def __init__(self, host: str, namespace: str, run_dir: Path, exited: threading.Event) -> None:
        self.host = host
        self.namespace = namespace
        self.log_path = rundir.capture_log(run_dir, host)
        self.stats_path = rundir.capture_stats(run_dir, host)
        self.run_dir = run_dir
        stdout_log, stderr_log = rundir.process_logs(run_dir, f"capture-{host}")
        self.child = ChildProcess(
            name=f"capture-{host}",
            argv=["ip", "netns", "exec", namespace, str(capture_binary()), "--name", host,
                  "--log", str(self.log_path), "--stats", str(self.stats_path)],
            stdout_log=stdout_log,
            stderr_log=stderr_log,
            exited=exited,
            ready_marker="ready",
        )  # fmt: skip

    def start(self, env: Mapping[str, str]) -> None:
        """Start capturing; CaptureError if it is not capturing within the timeout."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.child.stdout_log.parent.mkdir(parents=True, exist_ok=True)
        self.child.start(env)
        if not self.child.wait_ready(READY_TIMEOUT_S):
            self.child.kill_group()
            raise CaptureError(f"capture on host {self.host} failed to start: {self._why()}")

    def check(self) -> None:
        """CaptureError if the capture has exited on its own."""
        code = self.child.died()
        if code is not None:
            raise CaptureError(f"capture on host {self.host} died during the run "
                               f"(exit code {code}): {self._why()}")  # fmt: skip

    def stop(self) -> str:
        """SIGTERM (it completes its log and writes its stats), then SIGKILL; how it ended."""
        return self.child.stop(STOP_STEPS)

    def describe(self) -> dict[str, Any]:
        """The capture's run.json entry."""
        return {"log": str(self.log_path.relative_to(self.run_dir)),
                "stats": str(self.stats_path.relative_to(self.run_dir)),
                "namespace": self.namespace,
                **self.child.describe(self.child.started_ns or 0)}  # fmt: skip

    def _why(self) -> str:
        return self.child.stderr_summary()
