"""Run a scenario: bring up the lab, start each pipeline in order, wait, stop, tear down.

Each process runs ``gst-launch-1.0 -e <pipeline words>`` inside its host's namespace, in
its own session, with the latlab tracer loaded (``trace=True``). A process is ready when
gst-launch prints ``New clock:`` (the pipeline is going to PLAYING); the next one starts
only then. Processes stop in reverse start order: SIGINT (gst-launch sends EOS and waits
for it), then SIGTERM, then SIGKILL to the process group. The lab is always torn down.

Browser processes (``browser = "chromium"``) are started through
:class:`latlab.lab.browser.BrowserLab`: not traced, ready once their call's media flows
both ways, stopped with SIGTERM then SIGKILL. A webrtcbin peer (``webrtc =
"gstreamer"``) is started there too and ready the same way, but traced and stopped like
a pipeline (SIGINT: EOS).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from latlab import rundir
from latlab.errors import MeasurementError
from latlab.ingest.trace_format import Kind
from latlab.ingest.trace_reader import TraceError, open_trace
from latlab.lab import cost, owner
from latlab.lab.browser import BrowserError, BrowserLab, check_browsers
from latlab.lab.clocklab import ClockLabError
from latlab.lab.devices import DeviceError, Devices
from latlab.lab.environment import environment
from latlab.lab.loadgen import LoadError, LoadGenerator
from latlab.lab.netns import Lab, LabError, cleanup_stale, ip
from latlab.lab.process import ChildProcess
from latlab.lab.resources import ResourceSampler
from latlab.lab.scenario import Process, Scenario, Sfu
from latlab.lab.sched import (
    SchedError,
    apply_deadline,
    preexec,
    reset_other,
    thread_policies,
    wait_threads_settled,
)
from latlab.lab.sfu import SfuError, SfuServer, sfu_server
from latlab.lab.signal_rig import SignalRigError, SignalRigRun
from latlab.lab.signals import Terminated, signals_deferred, sigterm_raises
from latlab.rundir import RESOURCES_FILE
from latlab.tracer import BUILD_DIR, tracer_env

GST_LAUNCH = "gst-launch-1.0"
READY_TIMEOUT_S = 10.0
PROGRESS_TICK_S = 0.25
# A ``command`` process is ready when it prints a line starting with this.
COMMAND_READY_MARKER = "ready"
# Programs built by scripts/setup.sh, found by name as a command's first word.
LATLAB_PROGRAMS = {
    name: BUILD_DIR / name for name in ("latlab-kuprobe", "latlab-relay", "latlab-udpgen")
}


class RunError(MeasurementError, RuntimeError):
    """A run failed; ``str()`` is one line naming the process and the cause."""


@dataclass
class RunResult:
    """Outcome of a run: where it is, the trace files, and the contents of run.json."""

    out_dir: Path
    trace_files: list[Path] = field(default_factory=list)
    run: dict[str, Any] = field(default_factory=dict)


def gst_launch_argv(pipeline: str) -> list[str]:
    """The argv that runs ``pipeline`` the way a shell would pass it to gst-launch-1.0 -e."""
    try:
        words = shlex.split(pipeline)
    except ValueError as exc:
        raise RunError(f"cannot split pipeline into words: {exc}") from None
    return [GST_LAUNCH, "-e", *words]


def command_argv(command: list[str]) -> list[str]:
    """A command's argv with a latlab program's name replaced by its built binary."""
    program = LATLAB_PROGRAMS.get(command[0])
    if program is None:
        return list(command)
    if not program.is_file():
        raise RunError(f"{program}: not built (run: bash scripts/setup.sh)")
    return [str(program), *command[1:]]


def process_env(
    base: dict[str, str], tracing: dict[str, str], extra: dict[str, str]
) -> dict[str, str]:
    """Environment for one process: ``base`` + tracer variables + the scenario's ``env``.

    A scenario's own GST_TRACERS / GST_PLUGIN_PATH are combined with the tracer's.
    """
    env = {**base, **tracing, **extra}
    if tracing and "GST_TRACERS" in extra:
        tracers = [t for t in extra["GST_TRACERS"].split(";") if t]
        if "latlab" not in (t.split("(")[0] for t in tracers):
            tracers.append("latlab")
        env["GST_TRACERS"] = ";".join(tracers)
    if tracing and "GST_PLUGIN_PATH" in extra:
        plugin_dir = tracing["GST_PLUGIN_PATH"].split(os.pathsep)[0]
        env["GST_PLUGIN_PATH"] = os.pathsep.join([plugin_dir, extra["GST_PLUGIN_PATH"]])
    return env


def run_scenario(
    scenario: Scenario, out_dir: Path, *, trace: bool = True, progress: bool = True
) -> RunResult:
    """Run ``scenario`` and write its run directory ``out_dir`` (see docs/run-dir.md).

    Raises RunError when a process fails to start, is not ready within 10 s, exits
    early, or (traced) let no buffer through during the whole run; for browsers, when an
    audio file is missing, a page does not say hello or media does not flow within the
    call's ``timeout_s``, or a browser exits during the run; TracerNotBuilt when
    ``trace`` is set and the tracer plugin is missing;
    KeyboardInterrupt / Terminated (SystemExit 143) on Ctrl-C / SIGTERM, after cleanup.
    """
    out_dir = Path(out_dir)
    if trace:
        tracer_env(out_dir / rundir.TRACES)  # fail early when the plugin is not built
    if shutil.which(GST_LAUNCH) is None:
        raise RunError(f"{GST_LAUNCH} not found on PATH")
    cleanup_stale()  # what killed runs left, by their journals (latlab.lab.owner)
    rundir.prepare(out_dir)
    owner.record("run_dir", str(out_dir.resolve()))  # marked incomplete if this process dies
    _copy_scenario(scenario, out_dir)
    rundir.write_json(out_dir / rundir.ENV_FILE, environment())
    try:
        return _Run(scenario, out_dir, trace, progress).execute()
    finally:
        owner.forget("run_dir", str(out_dir.resolve()))


def _copy_scenario(scenario: Scenario, out_dir: Path) -> None:
    source = Path(scenario.source)
    target = out_dir / rundir.SCENARIO_FILE
    if source.is_file():
        shutil.copyfile(source, target)
    else:
        target.write_text(scenario.text, encoding="utf-8")


class _Run:
    """State of one run, so that cleanup and run.json see everything started so far."""

    def __init__(self, scenario: Scenario, out_dir: Path, trace: bool, progress: bool) -> None:
        self.scenario = scenario
        self.out_dir = out_dir
        self.trace = trace
        self.progress = progress
        self.exited = threading.Event()
        self.children: list[tuple[Process, ChildProcess]] = []
        self.lab: Lab | None = None
        self.started = rundir.Instant.now()
        self.measure_start_ns: int | None = None
        self.measure_end_ns: int | None = None
        self.status = "running"
        self.error: str | None = None
        self.devices = Devices(scenario.devices, out_dir / rundir.LOGS)
        self.sampler = ResourceSampler(out_dir / RESOURCES_FILE)
        self.sched: dict[str, dict[str, Any]] = {}
        self.browsers: BrowserLab | None = None
        self.costs: dict[str, dict[str, Any]] = {}
        self.sfus: list[SfuServer] = []
        self.loads: list[LoadGenerator] = []
        self.signal = (
            SignalRigRun(scenario, scenario.signal, out_dir, self.exited)
            if scenario.signal
            else None
        )

    def execute(self) -> RunResult:
        with sigterm_raises():
            try:
                self._write_run_json()  # "running": what a killed run leaves says so
                try:
                    check_browsers(self.scenario)  # before anything starts
                except BrowserError as exc:
                    raise RunError(str(exc)) from None
                with Lab.from_scenario(
                    self.scenario, run_dir=self.out_dir, exited=self.exited
                ) as lab:
                    self.lab = lab
                    self.browsers = BrowserLab(self.scenario, lab, self.out_dir, self.exited)
                    if self.signal is not None:
                        self.browsers.use_signal(*self.signal.browser_ends())
                    try:
                        with self.browsers:
                            self._run_processes()
                    except (BrowserError, LabError) as exc:
                        raise RunError(str(exc)) from None
                    self._collect_signal()
                self._check_media()
            except BaseException as exc:
                self._record_failure(exc)
                raise
            finally:
                self._write_run_json()
        run = self._run_json()
        return RunResult(self.out_dir, rundir.trace_files(self.out_dir), run)

    def _run_processes(self) -> None:
        """Start devices and processes, run for the duration, stop everything."""
        self.sampler.start()
        try:
            self._start_clock_agents()
            self._start_devices()
            self._start_sfus()
            self._prepare_signal()
            self._start_all()
            self._write_run_json()  # the processes, the measured window's start
            self.devices.start_sampling()
            self._wait_duration()
            self.status = "ok"
        finally:
            self._say("stopping")
            self._sched_at_stop()
            self.devices.stop_sampling()
            self.devices.sample_latency()
            if self.browsers is not None:
                self.browsers.sample_at_stop(self._browser_children())
            self._stop_loads()
            self._stop_all()
            if self.lab is not None:
                self.lab.clocks.stop_agents()
            self._stop_sfus()
            self._stop_signal_rig()
            self._stop_devices()
            self.sampler.stop()

    def _say(self, what: str) -> None:
        """One status line (not on a terminal, where the progress bar is): what the
        run is doing, for scripts and tests that follow it."""
        if self.progress and not sys.stdout.isatty():
            print(f"latlab: {self.scenario.name}: {what}", flush=True)

    def _start_clock_agents(self) -> None:
        """With hosts of their own clocks, a clock agent per host (lab/clocklab.py)."""
        assert self.lab is not None
        if not self.lab.clocks.clocks:
            return
        links = [(p.a, p.b, p.addr_a, p.addr_b) for p in self.lab.links]
        try:  # their own exit event: an agent is no process of the scenario
            self.lab.clocks.start_agents(self.out_dir, self.lab.exec_argv, links,
                                         threading.Event())  # fmt: skip
        except ClockLabError as exc:
            raise RunError(str(exc)) from None

    def _browser_children(self) -> dict[str, ChildProcess]:
        return {proc.name: child for proc, child in self.children if proc.call_peer}

    def _record_failure(self, exc: BaseException) -> None:
        if isinstance(exc, KeyboardInterrupt | Terminated):
            self.status = "interrupted"
            self.error = (
                "interrupted by SIGINT"
                if isinstance(exc, KeyboardInterrupt)
                else ("terminated by SIGTERM")
            )
        else:
            self.status = "failed"
            self.error = str(exc) or type(exc).__name__

    def _start_all(self) -> None:
        assert self.lab is not None
        addrs = self.lab.addrs()
        for proc in self.scenario.processes:
            child = self._child(proc, addrs)
            child.cpus = self.lab.host_cpus(proc.host)
            self.children.append((proc, child))
            child.start(self._env(proc, addrs))
            if child.pid is not None and not proc.cost:  # perf's workload: once ready
                self.sampler.add(proc.name, child.pid)
            if proc.call_peer:
                self._await_call(proc)
                continue
            self._await_ready(child)
            self._apply_sched(proc, child)
            if proc.cost:
                self._idle_baseline(proc, child)
        self._start_loads()
        self._start_signal_rig()
        self.measure_start_ns = time.monotonic_ns()

    def _idle_baseline(self, proc: Process | Sfu, child: ChildProcess) -> None:
        """Let a cost-counted process (or SFU) run idle for its baseline before the next
        one starts (cut short if any process exits: the run then fails as usual)."""
        workload = cost.workload_pid(child.pid) if child.pid is not None else None
        if workload is not None:
            self.sampler.add(proc.name, workload)
        idle_from = time.monotonic_ns()
        self.exited.wait(proc.cost_idle_s)
        self.costs[proc.name] = {
            "file": str(rundir.cost_file(self.out_dir, proc.name).relative_to(self.out_dir)),
            "host": proc.host,
            "perf_started_monotonic_ns": child.started_ns,
            "workload_pid": workload,
            "idle_from_monotonic_ns": idle_from,
            "idle_to_monotonic_ns": time.monotonic_ns(),
        }

    def _start_sfus(self) -> None:
        """Start the scenario's SFUs, each ready (its API answers) before the next."""
        assert self.lab is not None
        for spec in self.scenario.sfus:
            wrap = None
            if spec.cost:
                path = rundir.cost_file(self.out_dir, spec.name)
                wrap = partial(cost.counted_argv, csv_path=path)
            server = sfu_server(spec, self.lab.namespace(spec.host),
                                self.lab.host_addrs(spec.host), self.out_dir, self.exited,
                                wrap)  # fmt: skip
            server.child.cpus = self.lab.host_cpus(spec.host)
            self.sfus.append(server)
            try:
                server.start(os.environ)
            except SfuError as exc:
                raise RunError(str(exc)) from None
            if spec.cost:
                self._idle_baseline(spec, server.child)
        if self.scenario.rooms and self.browsers is not None:
            self.browsers.route_to_sfus({server.name: server for server in self.sfus})

    def _start_loads(self) -> None:
        """Start each ``[loads.NAME]``'s generator on its host, routed to its SFU's API
        address over their link, and wait until its media flow."""
        assert self.lab is not None
        servers = {server.name: server for server in self.sfus}
        for load in self.scenario.loads:
            server = servers[load.sfu]
            own, via = self.lab.addrs_towards(load.host, self.scenario.sfu(load.sfu).host)
            if via != server.addr:
                ip("-n", self.lab.namespace(load.host), "route", "replace",
                         f"{server.addr}/32", "via", via)  # fmt: skip
            namespace = self.lab.namespace(load.host)
            generator = LoadGenerator(load, namespace, own, server.load_args(load),
                                      self.out_dir, self.exited)  # fmt: skip
            generator.child.cpus = self.lab.host_cpus(load.host)
            self.loads.append(generator)
            try:
                generator.start({**os.environ, **server.load_env(load)})
            except LoadError as exc:
                raise RunError(str(exc)) from None
            if generator.child.pid is not None:  # ip netns exec execs the generator
                self.sampler.add(load.name, generator.child.pid)

    def _check_loads(self) -> None:
        for generator in self.loads:
            try:
                generator.check()
            except LoadError as exc:
                self.measure_end_ns = self.measure_end_ns or time.monotonic_ns()
                raise RunError(str(exc)) from None

    def _stop_loads(self) -> None:
        _stop_in_reverse([generator.child for generator in self.loads])

    def _check_sfus(self) -> None:
        for server in self.sfus:
            try:
                server.check()
            except SfuError as exc:
                self.measure_end_ns = self.measure_end_ns or time.monotonic_ns()
                raise RunError(str(exc)) from None

    def _stop_sfus(self) -> None:
        for server in reversed(self.sfus):
            server.stop()

    def _prepare_signal(self) -> None:
        """Write the time-coded signal (``[signal]``) before the processes that play it start."""
        if self.signal is None:
            return
        try:
            self.signal.prepare()
        except SignalRigError as exc:
            raise RunError(str(exc)) from None

    def _start_signal_rig(self) -> None:
        """Start the device ends' players and recorders of ``[signal]`` (JACK or
        PulseAudio; GStreamer ends run in their processes, browser ends in the browsers)."""
        if self.signal is None:
            return
        assert self.lab is not None
        try:
            self.signal.start(
                self.lab.exec_argv, lambda host: {**os.environ, **self.devices.env_for(host)}
            )
        except SignalRigError as exc:
            raise RunError(str(exc)) from None

    def _collect_signal(self) -> None:
        """The black box's browser ends, once the browsers have written everything."""
        if self.signal is None or self.browsers is None:
            return
        try:
            self.signal.collect(self.browsers.records_dir)
        except SignalRigError as exc:
            raise RunError(str(exc)) from None

    def _stop_signal_rig(self) -> None:
        """Stop the player and the recorder (SIGINT: they write their files)."""
        if self.signal is not None:
            _stop_in_reverse(self.signal.children)

    def _await_call(self, proc: Process) -> None:
        """Once both browsers of ``proc``'s call (or every member of its room) are
        started, wait until media flows."""
        assert self.browsers is not None
        started = self._browser_children()
        room = self.scenario.room_of(proc.name)
        if room is not None:
            if all(name in started for name in room.members):
                self.browsers.await_room(room, started)
            return
        call = self.scenario.call_of(proc.name)
        if call is None or not all(name in started for name in call.between):
            return
        self.browsers.await_call(call, started)

    def _start_devices(self) -> None:
        """Start the audio servers inside their hosts, each ready before the processes."""
        assert self.lab is not None
        try:
            self.devices.start_all(self.lab.exec_argv)
        except DeviceError as exc:
            raise RunError(str(exc)) from None

    def _check_devices(self) -> None:
        try:
            self.devices.check()
        except DeviceError as exc:
            self.measure_end_ns = self.measure_end_ns or time.monotonic_ns()
            raise RunError(str(exc)) from None

    def _stop_devices(self) -> None:
        with signals_deferred():
            self.devices.stop_all()

    def _child(self, proc: Process, addrs: dict[str, str]) -> ChildProcess:
        assert self.lab is not None
        logs = self.out_dir / rundir.LOGS
        if proc.call_peer:
            assert self.browsers is not None
            return self.browsers.child(proc, logs)
        try:
            if proc.command:
                argv = command_argv(self.scenario.resolved_command(proc, addrs))
            else:
                signal_refs = self.signal.pipeline_refs() if self.signal else None
                argv = gst_launch_argv(self.scenario.resolved_pipeline(proc, addrs, signal_refs))
            if proc.cost:
                argv = cost.counted_argv(argv, rundir.cost_file(self.out_dir, proc.name))
        except (RunError, cost.CostError) as exc:
            raise RunError(f"process '{proc.name}': {exc}") from None
        stdout_log, stderr_log = rundir.process_logs(self.out_dir, proc.name)
        child = ChildProcess(
            name=proc.name,
            argv=self.lab.exec_argv(proc.host, argv),
            stdout_log=stdout_log,
            stderr_log=stderr_log,
            exited=self.exited,
            preexec=preexec(proc.sched),
        )
        if proc.command:
            child.ready_marker = COMMAND_READY_MARKER
        return child

    def _apply_sched(self, proc: Process, child: ChildProcess) -> None:
        """Apply SCHED_DEADLINE now (others were set before exec); record every thread's."""
        if proc.sched is None or child.pid is None:
            return
        record: dict[str, Any] = {"requested": str(proc.sched)}
        if proc.sched.at_exec:
            record["applied"] = "before exec, inherited by every thread"
        else:
            record["settled_s"] = wait_threads_settled(child.pid)
            try:
                record["deadline_results"] = apply_deadline(child.pid, proc.sched)
            except SchedError as exc:
                raise RunError(f"process '{proc.name}': {exc}") from None
            record["applied"] = (
                "once ready and its threads settled, to each thread then in /proc/PID/task; "
                "threads created later run with the default policy; reset to other before stop"
            )
        record["threads_at_ready"] = thread_policies(child.pid)
        self.sched[proc.name] = record

    def _sched_at_stop(self) -> None:
        for proc, child in self.children:
            if proc.name in self.sched and child.pid is not None:
                self.sched[proc.name]["threads_at_stop"] = thread_policies(child.pid)
                if proc.sched is not None and not proc.sched.at_exec:
                    self.sched[proc.name]["reset_before_stop"] = reset_other(child.pid)

    def _env(self, proc: Process, addrs: dict[str, str]) -> dict[str, str]:
        if proc.browser:  # no GStreamer in a browser: no tracer
            assert self.browsers is not None
            return self.browsers.env()
        tracing = tracer_env(self.out_dir / rundir.TRACES, proc.name) if self.trace else {}
        extra = {**self.devices.env_for(proc.host), **self.scenario.resolved_env(proc, addrs)}
        return process_env(dict(os.environ), tracing, extra)

    def _await_ready(self, child: ChildProcess) -> None:
        if child.wait_ready(READY_TIMEOUT_S):
            return
        if child.eof:
            code = child.exit_code()
            summary = child.stderr_summary()
            raise RunError(
                f"process '{child.name}' failed to start (exit code {code}): {summary}"
                + _bind_hint(summary, self.scenario.process(child.name).host)
            )
        raise RunError(
            f"process '{child.name}' not ready after {READY_TIMEOUT_S:g} s "
            f"(no '{child.ready_marker}' from {child.argv[4]}): {child.stderr_summary()}"
        )

    def _wait_duration(self) -> None:
        assert self.measure_start_ns is not None
        duration = float(self.scenario.duration_s)
        deadline = time.monotonic() + duration
        with _status_display(self.scenario.name, duration, self.progress) as update:
            while (remaining := deadline - time.monotonic()) > 0:
                if self.exited.wait(min(remaining, PROGRESS_TICK_S)):
                    self._fail_early_exit()
                self._check_devices()
                self._check_links()
                self._check_sfus()
                self._check_loads()
                update(duration - max(remaining, 0))
            update(duration)
        self.measure_end_ns = time.monotonic_ns()

    def _check_links(self) -> None:
        """RunError naming the link if its emulator died."""
        assert self.lab is not None
        try:
            self.lab.check_links()
        except LabError as exc:
            self.measure_end_ns = self.measure_end_ns or time.monotonic_ns()
            raise RunError(str(exc)) from None

    def _fail_early_exit(self) -> None:
        self.measure_end_ns = time.monotonic_ns()
        self._check_devices()  # a dead audio server is the cause of its clients' exit
        self._check_links()
        self._check_sfus()
        self._check_loads()
        if self.browsers is not None:
            try:
                self.browsers.check_server()
            except BrowserError as exc:
                raise RunError(str(exc)) from None
        for proc, child in self.children:
            if child.eof:
                if proc.call_peer:
                    raise RunError(
                        f"process '{child.name}' ({proc.call_peer}) exited during the run "
                        f"(exit code {child.exit_code()}): "
                        f"{self.browsers.tail(child.name, child) if self.browsers else ''}"
                    )
                code = child.exit_code()
                raise RunError(
                    f"process '{child.name}' exited early (exit code {code}): "
                    f"{child.stderr_summary()}"
                )

    def _stop_all(self) -> None:
        if self.measure_start_ns is not None and self.measure_end_ns is None:
            self.measure_end_ns = time.monotonic_ns()
        _stop_in_reverse([child for _, child in self.children])

    def _check_media(self) -> None:
        """RunError naming a traced pipeline through which no buffer passed during the run.

        Such a process waited for media the whole run (an SRT peer that never connected,
        a rejected passphrase); the cause is the last warning or error of its elements.
        """
        if not self.trace:
            return
        for proc, child in self.children:
            if proc.command or proc.browser or child.pid is None:
                continue
            pushed = pushed_buffers(
                self.out_dir / rundir.TRACES / f"{proc.name}-{child.pid}.lltrace"
            )
            if pushed == 0:
                raise RunError(self._no_media_message(child))

    def _no_media_message(self, child: ChildProcess) -> str:
        measured = (self.measure_end_ns or 0) - (self.measure_start_ns or 0)
        problem = f"process '{child.name}' saw no media: no buffer passed any pad"
        problem += f" in the {measured / 1e9:.1f} s run"
        message = child.last_element_message()
        if message is None:
            return f"{problem} (and no element reported a warning or error)"
        if message.element_type.startswith("GstSRT"):
            return f"{problem}; SRT connection failed: {message}"
        return f"{problem}; last {message.level.lower()}: {message}"

    def _run_json(self) -> dict[str, Any]:
        origin = self.started.monotonic_ns
        measured = 0.0  # a run that failed while starting measured nothing
        if self.measure_start_ns is not None and self.measure_end_ns is not None:
            measured = round((self.measure_end_ns - self.measure_start_ns) / 1e9, 6)
        lab = self.lab.describe() if self.lab else {"hosts": {}, "links": []}
        return {
            "schema": rundir.RUN_SCHEMA,
            "kind": "scenario",
            "name": self.scenario.name,
            "scenario": self.scenario.source,
            "status": self.status,
            "error": self.error,
            "started_at": self.started.iso,
            "started_monotonic_ns": origin,
            "duration_s": measured,
            "planned_duration_s": self.scenario.duration_s,
            "measure_start_monotonic_ns": self.measure_start_ns,
            "measure_end_monotonic_ns": self.measure_end_ns,
            "trace": self.trace,
            "owner": {"pid": os.getpid(), "journal": owner.current_token()},
            "params": dict(self.scenario.params),
            "hosts": lab["hosts"],
            "clock": self.lab.clocks.describe(self.scenario.host_names()) if self.lab else None,
            "links": lab["links"],
            "captures": lab.get("captures", {}),
            "costs": self.costs,
            "sfus": {server.name: server.describe() for server in self.sfus},
            "loads": {g.load.name: g.describe(origin) for g in self.loads},
            "devices": self.devices.describe(self.out_dir),
            "pageserver": self.browsers.describe() if self.browsers else None,
            "signal": self.signal.describe() if self.signal else None,
            "calls": [
                {"name": c.name, "between": list(c.between), "timeout_s": c.timeout_s}
                for c in self.scenario.calls
            ],
            "processes": [self._describe(proc, child, origin) for proc, child in self.children],
        }

    def _describe(self, proc: Process, child: ChildProcess, origin: int) -> dict[str, Any]:
        return {
            "name": proc.name,
            "host": proc.host,
            "argv": child.argv,
            **child.describe(origin),
            "sched": self.sched.get(proc.name),
            **(
                {"browser": self.browsers.describe_browser(proc, child)}
                if proc.browser and self.browsers
                else {}
            ),
            **(
                {"webrtc": self.browsers.describe_webrtc(proc, child)}
                if proc.webrtc and self.browsers
                else {}
            ),
            "stdout": str(child.stdout_log.relative_to(self.out_dir)),
            "stderr": str(child.stderr_log.relative_to(self.out_dir)),
        }

    def _write_run_json(self) -> None:
        with signals_deferred():
            rundir.write_json(self.out_dir / rundir.RUN_FILE, self._run_json())


def _stop_in_reverse(children: list[ChildProcess]) -> None:
    """Stop ``children`` in reverse start order (SIGINT first); programs that close when
    asked (browsers: seconds each, to finish their traces) are all asked at once first.
    After a signal during the stop, kill the rest; then make sure every process group is
    gone."""
    with signals_deferred() as received:
        for child in children:  # programs that close when asked (browsers) all start now
            child.begin_close()
        for child in reversed(children):
            if received:
                child.kill_group()
            else:
                child.stop()
        for child in children:
            child.kill_group()


def pushed_buffers(trace_path: Path) -> int | None:
    """How many buffers a trace saw pushed on any pad (None: no usable trace file)."""
    if not trace_path.is_file():
        return None
    try:
        with open_trace(trace_path) as (_, records):
            return int((records.field("kind") == Kind.PUSH).sum()) if len(records) else 0
    except TraceError:
        return None


def _bind_hint(summary: str, host: str) -> str:
    """A hint for a socket that could not be bound (libsrt does not say why)."""
    if "Cannot bind to" in summary or "Address already in use" in summary:
        return f" (is another process on host '{host}' using that port?)"
    return ""


@contextmanager
def _status_display(name: str, duration: float, progress: bool) -> Iterator[Any]:
    """Yield ``update(elapsed_s)``: a rich progress bar on a TTY, else one status line."""
    if not progress:
        yield lambda elapsed: None
        return
    if not sys.stdout.isatty():
        print(f"latlab: {name}: all processes ready, running for {duration:g} s", flush=True)
        yield lambda elapsed: None
        return
    from rich.progress import BarColumn, Progress, TextColumn

    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:.1f}/{task.total:g} s"),
    )
    with Progress(*columns, transient=False) as bar:
        task = bar.add_task(name, total=duration)
        yield lambda elapsed: bar.update(task, completed=elapsed)
