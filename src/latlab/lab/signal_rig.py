"""A run's black-box rig (``[signal]``): generate the time-coded signal before the
processes start, give GStreamer ends their pipeline fragments, and start the devices'
players and recorders (``latlab.lab.jack_signal``, ``latlab.lab.pulse_signal``) inside
their hosts (the runner stops its ``children`` like its processes).

A GStreamer end is part of the process under test: ``${signal.source}`` plays the file
in real time (``identity sync=true`` named ``latlab_signal_in``, 10 ms buffers) and
``${signal.sink}`` (a branch named ``latlab_signal_out``, e.g. off a tee) writes what
reaches it to a WAV file; latlab's tracer sees both, so their timing comes from the
trace. A JACK recorder starts first, so that the first codes played are recorded; both
JACK rigs start once the processes are ready (their JACK ports exist) and stop after
the processes, so that codes still in flight when the run ends are recorded too; so do
the PulseAudio rigs, which play into a device's null sink and record its monitor. The
files go to ``signal/`` in the run directory (see ``latlab.analysis.blackbox``).
"""

from __future__ import annotations

import shlex
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from latlab.errors import MeasurementError
from latlab.ingest.browser_signal import BrowserSignalError, capture_timing, write_recording
from latlab.ingest.chrome_trace import find_chrome_trace, read_chrome_trace
from latlab.ingest.trace_reader import TraceError
from latlab.lab.devices import pulse_sink
from latlab.lab.process import ChildProcess
from latlab.lab.scenario import Device, Scenario, SignalEnd, SignalRig
from latlab.rundir import (
    INJECT_LOG,
    INJECTED_WAV,
    RECEIVED_WAV,
    RECORD_LOG,
    SENT_WAV,
)
from latlab.rundir import SIGNAL as SIGNAL_DIR
from latlab.rundir import SIGNAL_SINK_ELEMENT as SINK_ELEMENT
from latlab.rundir import SIGNAL_SOURCE_ELEMENT as SOURCE_ELEMENT
from latlab.signal.commands import GenerateOptions, generate_file
from latlab.signal.errors import SignalError

LEAD_S = 5.0
"""Signal beyond the scenario's duration: processes take a few seconds to be ready."""
READY_TIMEOUT_S = 12.0
RECORD_MARGIN_S = 30.0

ExecArgv = Callable[[str, Sequence[str]], list[str]]


class SignalRigError(MeasurementError, RuntimeError):
    """The rig could not start, or its browser ends could not be collected; ``str()`` is
    one line naming the rig or file and the cause."""


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

    def prepare(self) -> None:
        """Write the signal (``signal/sent.wav`` and its codes); before the processes start.

        A GStreamer source plays it from its pipeline's start and ends the pipeline
        when it ends, and a browser's fake capture device plays it from its
        ``getUserMedia`` and loops it when it ends (the codes of the file's start came
        round again in a run whose call took 8 s to set up), so for both it lasts past
        the run's stop.
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        margin = RECORD_MARGIN_S if self.rig.inject.kind in ("gst", "browser") else 0.0
        options = GenerateOptions(
            out=self.dir / SENT_WAV,
            duration_s=float(self.scenario.duration_s) + LEAD_S + margin,
            rate=self.rig.rate,
            interval_ms=self.rig.interval_ms,
            level_dbfs=self.rig.level_dbfs,
        )
        try:
            generate_file(options)
        except SignalError as exc:
            raise SignalRigError(f"signal: {exc}") from None

    def pipeline_refs(self) -> dict[str, str]:
        """The ``${signal.source}`` and ``${signal.sink}`` pipeline fragments."""
        sent = shlex.quote(str((self.dir / SENT_WAV).resolve()))
        received = shlex.quote(str((self.dir / RECEIVED_WAV).resolve()))
        return {
            "signal.source": f"filesrc location={sent} ! wavparse ! "
            "audiobuffersplit output-buffer-duration=1/100 ! "
            f"identity sync=true name={SOURCE_ELEMENT}",
            "signal.sink": f"queue name={SINK_ELEMENT} ! audioconvert ! wavenc ! "
            f"filesink location={received}",
        }

    def start(self, exec_argv: ExecArgv, env_for: Callable[[str], Mapping[str, str]]) -> None:
        """Start a device end's recorder, then its player; each ready once connected."""
        record_s = float(self.scenario.duration_s) + LEAD_S + RECORD_MARGIN_S
        sides = (
            ("record", self.rig.record, RECEIVED_WAV, RECORD_LOG),
            ("inject", self.rig.inject, SENT_WAV, INJECT_LOG),
        )
        for mode, end, wav, log in sides:
            if end.kind not in ("jack", "pulse"):
                continue
            host = self._device_host(end)
            argv = [
                sys.executable, "-m", f"latlab.lab.{end.kind}_signal", mode,
                *self._target(mode, end), "--wav", str(self.dir / wav),
                "--log", str(self.dir / log), "--max-s", f"{record_s:g}",
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
                raise SignalRigError(
                    f"signal {mode} rig on host '{host}' not ready after "
                    f"{READY_TIMEOUT_S:g} s: {child.stderr_summary()}"
                )

    def browser_ends(self) -> tuple[dict[str, Path], set[str], dict[str, str]]:
        """For ``BrowserLab.use_signal``: the browser that captures the signal file, the
        one that records its remote audio, and a webrtcbin peer that records what it
        receives (its ``${signal.sink}`` fragment)."""
        captures = (
            {self.rig.inject.name: self.dir / SENT_WAV} if self.rig.inject.kind == "browser" else {}
        )
        recorders = {self.rig.record.name} if self.rig.record.kind == "browser" else set()
        record = self.rig.record
        peers = {record.name: self.pipeline_refs()["signal.sink"]} if record.kind == "gst" and \
            self.scenario.process(record.name).webrtc else {}  # fmt: skip
        return captures, recorders, peers

    def collect(self, records_dir: Path) -> None:
        """After the browsers stopped: the browser ends' timing logs (and the recording).

        SignalRigError names the file and the problem (the run's records stay)."""
        try:
            if self.rig.inject.kind == "browser":
                name = self.rig.inject.name
                trace = find_chrome_trace(records_dir, name)
                if trace is None:
                    raise BrowserSignalError(f"{records_dir}: no Chromium trace of '{name}'")
                slices = read_chrome_trace(trace)
                capture_timing(slices, self.rig.rate, trace, self.dir / INJECT_LOG)
            if self.rig.record.kind == "browser":
                records = records_dir / f"{self.rig.record.name}.jsonl"
                write_recording(records, self.dir / RECEIVED_WAV, self.dir / RECORD_LOG)
        except (BrowserSignalError, TraceError) as exc:
            raise SignalRigError(f"signal: {exc}") from None

    def _target(self, mode: str, end: SignalEnd) -> list[str]:
        """What the rig connects to: a JACK client's ports, or a PulseAudio device's null
        sink (to play into) or its monitor (to record)."""
        if end.kind == "jack":
            return ["--client", end.client]
        device = self._device(end)
        sink, block = pulse_sink(device.name), ["--block-s", f"{device.period_us / 1e6:g}"]
        if mode == "inject":
            return ["--device", sink, "--monitor-wav", str(self.dir / INJECTED_WAV), *block]
        return ["--device", f"{sink}.monitor", "--rate", str(device.rate), *block]

    def _device(self, end: SignalEnd) -> Device:
        return next(d for d in self.scenario.devices if d.name == end.name)

    def _device_host(self, end: SignalEnd) -> str:
        return self._device(end).host

    def describe(self) -> dict[str, Any]:
        """For run.json."""
        return {
            "inject": self.rig.inject.describe(),
            "record": self.rig.record.describe(),
            "interval_ms": self.rig.interval_ms,
            "level_dbfs": self.rig.level_dbfs,
            "rate": self.rig.rate,
            "elements": {"source": SOURCE_ELEMENT, "sink": SINK_ELEMENT},
            "files": f"{SIGNAL_DIR}/",
            "rigs": [
                {"name": c.name, "stopped": c.stopped, "exit_code": c.exit_code(0.0)}
                for c in self.children
            ],
        }
