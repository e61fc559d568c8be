"""A run's black-box rig (``[signal]``): generate the time-coded signal, start the JACK
player and recorder (``latlab.lab.jack_signal``) inside their hosts (the runner stops
its ``children`` like its processes).

The recorder starts first, so that the first codes played are recorded; both start
once the processes are ready (their JACK ports exist) and stop after the processes, so
that codes still in flight when the run ends are recorded too. The files go to
``signal/`` in the run directory (see ``latlab.analysis.blackbox``).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from latlab.analysis.blackbox import INJECT_LOG, RECEIVED_WAV, RECORD_LOG, SENT_WAV, SIGNAL_DIR
from latlab.lab.process import ChildProcess
from latlab.lab.scenario import Scenario, SignalRig
from latlab.signal.commands import GenerateOptions, generate_file
from latlab.signal.errors import SignalError

LEAD_S = 5.0
"""Signal beyond the scenario's duration: processes take a few seconds to be ready."""
READY_TIMEOUT_S = 12.0
RECORD_MARGIN_S = 30.0

ExecArgv = Callable[[str, Sequence[str]], list[str]]


class RigStartError(RuntimeError):
    """The rig could not start; ``str()`` is one line naming the rig and the cause."""


class SignalRigRun:
    """The player and the recorder of one run."""

    def __init__(
        self, scenario: Scenario, rig: SignalRig, out_dir: Path, exited: threading.Event
    ) -> None:
        self.scenario = scenario
        self.rig = rig
        self.dir = out_dir / SIGNAL_DIR
        self.exited = exited
        self.children: list[ChildProcess] = []
        devices = {d.name: d for d in scenario.devices}
        self.inject_device = devices[rig.inject]
        self.record_device = devices[rig.record]

    def prepare(self) -> None:
        """Write the signal (``signal/sent.wav`` and its codes) at the capture device's rate."""
        self.dir.mkdir(parents=True, exist_ok=True)
        options = GenerateOptions(
            out=self.dir / SENT_WAV,
            duration_s=float(self.scenario.duration_s) + LEAD_S,
            rate=self.inject_device.rate,
            interval_ms=self.rig.interval_ms,
            level_dbfs=self.rig.level_dbfs,
        )
        try:
            generate_file(options)
        except SignalError as exc:
            raise RigStartError(f"signal: {exc}") from None

    def start(self, exec_argv: ExecArgv, env_for: Callable[[str], Mapping[str, str]]) -> None:
        """Start the recorder, then the player; each ready once connected to its client."""
        record_s = float(self.scenario.duration_s) + LEAD_S + RECORD_MARGIN_S
        sides = (
            ("record", self.record_device.host, self.rig.record_client, RECEIVED_WAV, RECORD_LOG),
            ("inject", self.inject_device.host, self.rig.inject_client, SENT_WAV, INJECT_LOG),
        )
        for mode, host, client, wav, log in sides:
            argv = [
                sys.executable, "-m", "latlab.lab.jack_signal", mode,
                "--client", client, "--wav", str(self.dir / wav), "--log", str(self.dir / log),
                "--max-s", f"{record_s:g}",
            ]  # fmt: skip
            child = ChildProcess(
                name=f"signal-{mode}",
                argv=exec_argv(host, argv),
                stdout_log=self.dir / f"{mode}.stdout",
                stderr_log=self.dir / f"{mode}.stderr",
                exited=self.exited,
                ready_marker="ready",
            )
            self.children.append(child)
            child.start(env_for(host))
            if not child.wait_ready(READY_TIMEOUT_S):
                raise RigStartError(
                    f"signal {mode} rig on host '{host}' not ready after "
                    f"{READY_TIMEOUT_S:g} s: {child.stderr_summary()}"
                )

    def describe(self) -> dict[str, Any]:
        """For run.json."""
        return {
            "inject": {"device": self.rig.inject, "client": self.rig.inject_client},
            "record": {"device": self.rig.record, "client": self.rig.record_client},
            "interval_ms": self.rig.interval_ms,
            "level_dbfs": self.rig.level_dbfs,
            "files": f"{SIGNAL_DIR}/",
            "rigs": [
                {"name": c.name, "stopped": c.stopped, "exit_code": c.exit_code(0.0)}
                for c in self.children
            ],
        }
