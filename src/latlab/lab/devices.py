"""Virtual audio devices: a real audio server per ``[devices.NAME]``, run inside a host.

This machine has no sound hardware, so latlab runs the audio server itself, with
device-like period and buffer sizes, one per device, started inside the host's
namespace before its processes and stopped after them:

* ``server = "jack"``: ``jackd --name llab-<pid>-<device> -d dummy -r RATE -p PERIOD``.
  The dummy driver wakes every period on the system clock; JACK reports one
  period of capture latency and two of playback latency (asynchronous mode). The
  processes on the host get ``JACK_DEFAULT_SERVER`` (and ``JACK_NO_START_SERVER``,
  so a client never spawns a server of its own); pipelines use
  ``jackaudiosrc`` / ``jackaudiosink``.
* ``server = "pulse"``: ``pulseaudio`` with a null sink ``llab_<device>`` and its
  monitor source as the capture side, default fragments ``periods`` x the period,
  in a runtime directory ``llab-<pid>-<device>-pulse`` inside the run's private
  directory (:func:`latlab.lab.owner.private_tmp`: root-only, its name random). The
  processes get
  ``PULSE_SERVER``, ``PULSE_RUNTIME_PATH``, ``PULSE_SINK`` and ``PULSE_SOURCE``;
  pipelines use ``pulsesrc`` / ``pulsesink``. During the measured window latlab reads
  every playback stream's queue on the server's command line
  (``module-cli-protocol-unix``, ``list-sink-inputs``) every 50 ms, each reading
  bracketed by CLOCK_MONOTONIC (run.json ``devices[].streams``): how long a sink's
  samples wait in the server (``latlab.stitch.devices.stream_playout``).

GStreamer's audio elements choose their own ring buffer: pipelines pass the
device's sizes with ``latency-time=${devices.NAME.period_us}
buffer-time=${devices.NAME.buffer_us}`` (period x periods).

Names carry the pid of the latlab process that owns them (so runs at once never
collide); each server, JACK name and runtime directory is recorded in that process's
journal before it is started or made (:mod:`latlab.lab.owner`), so a later run removes
those of a killed run and touches nothing else. A server that dies during a run makes
the run fail (:meth:`Devices.check`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from latlab.errors import MeasurementError
from latlab.lab import owner
from latlab.lab.jackfiles import registry_full_hint, remove_jack_server
from latlab.lab.scenario import Device

READY_TIMEOUT_S = 10.0
STOP_GRACE_S = 3.0
POLL_S = 0.02
PROBE_TIMEOUT_S = 5.0
JACK_LATENCY_RE = re.compile(r"port (playback|capture) latency = \[ (\d+) (\d+) \]")
PULSE_LATENCY_RE = re.compile(r"Latency: (\d+) usec, configured (\d+) usec")
STREAM_SAMPLE_S = 0.05  # how often the playback streams' queues are read during a run
# PulseAudio's command line (module-cli-protocol-unix) prints no prompt to a socket: a
# command it does not know after each request marks the end of the reply
CLI_END = b"latlab-end"
CLI_END_REPLY = b"Unknown command: " + CLI_END + b"\n"
SINK_INPUT_RE = re.compile(r"^\s*index: (\d+)", re.MULTILINE)
STREAM_FIELDS = {  # list-sink-inputs: what each sample keeps
    "queue_ms": re.compile(r"current latency: ([\d.]+) ms"),
    "pid": re.compile(r'application\.process\.id = "(\d+)"'),
}

ExecArgv = Callable[[str, Sequence[str]], list[str]]


class DeviceError(MeasurementError, RuntimeError):
    """An audio device failed to start, or its server died; ``str()`` is one line."""


def owned_name(pid: int, device: str) -> str:
    """The unique name of ``device``'s server for latlab process ``pid``."""
    return f"llab-{pid}-{device}"


def pulse_sink(device: str) -> str:
    """The null sink of a PulseAudio device (its monitor, ``SINK.monitor``, is the source)."""
    return f"llab_{device}"


def _run(argv: Sequence[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run a short query command; never raises for its exit status."""
    try:
        return subprocess.run(
            list(argv), capture_output=True, text=True, env=env, timeout=PROBE_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(list(argv), 127, "", str(exc))


class AudioServer:
    """One device's server process: start, readiness, environment, stop, description."""

    def __init__(self, device: Device, owner_pid: int, log: Path) -> None:
        self.device = device
        self.name = owned_name(owner_pid, device.name)
        self.log = log
        self.popen: subprocess.Popen[bytes] | None = None
        self.journaled: list[dict[str, Any]] = []  # its processes in the journal
        self.stopping = False
        self.exit_code: int | None = None
        self.reported: dict[str, Any] = {}
        self.reported_in_run: dict[str, Any] = {}
        self.streams: dict[int, dict[str, Any]] = {}  # playback streams sampled in the run
        self.version = ""

    # Subclasses define these.
    def argv(self) -> list[str]:
        raise NotImplementedError

    def server_env(self) -> dict[str, str]:
        raise NotImplementedError

    def client_env(self) -> dict[str, str]:
        """Environment of every process on the device's host."""
        raise NotImplementedError

    def is_ready(self) -> bool:
        raise NotImplementedError

    def query_latency(self) -> dict[str, Any]:
        raise NotImplementedError

    def query_version(self) -> str:
        raise NotImplementedError

    reports_streams = False  # whether sample_streams records anything

    def sample_streams(self) -> None:
        """Record what the server reports of its playback streams now (nothing by default)."""

    def prepare(self) -> None:
        """Create what the server needs before it starts (nothing by default)."""

    def remove_files(self) -> None:
        """Remove what the server left on disk (nothing by default)."""

    @property
    def label(self) -> str:
        """How messages name this device."""
        return f"audio device '{self.device.name}' ({self.device.server} server {self.name})"

    def start(self, exec_argv: ExecArgv) -> None:
        """Start the server inside its host's namespace and wait until clients can use it."""
        self._start_server(exec_argv)

    def _start_server(self, exec_argv: ExecArgv) -> None:
        self.prepare()
        argv = exec_argv(self.device.host, self.argv())
        program = self.argv()[0]
        if shutil.which(program) is None:
            raise DeviceError(f"{self.label}: {program} not found (run: bash scripts/setup.sh)")
        with self.log.open("wb") as log:
            self.popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.server_env()},
                start_new_session=True,
            )
        self.journaled.append(owner.record_process(self.popen.pid, self.name))
        self._await_ready()
        self.version = self.query_version()
        self.reported = self.query_latency()

    def _await_ready(self) -> None:
        assert self.popen is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self.is_ready():
            if self.popen.poll() is not None:
                raise DeviceError(
                    f"{self.label} failed to start (exit code {self.popen.returncode}): "
                    f"{self.log_tail()}{self.failure_hint()}"
                )
            if time.monotonic() > deadline:
                raise DeviceError(f"{self.label} not ready after {READY_TIMEOUT_S:g} s")
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(POLL_S)

    def failure_hint(self) -> str:
        """What else explains a failed start (none by default)."""
        return ""

    def died(self) -> bool:
        """Whether the server ended while it should be running."""
        return self.popen is not None and not self.stopping and self.popen.poll() is not None

    def stop(self) -> None:
        """SIGTERM (the server removes its sockets), then SIGKILL; then remove its files."""
        self.stopping = True
        if self.popen is not None and self.popen.returncode is None:
            for signum, grace in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, None)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signum)
                try:
                    self.popen.wait(grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self.popen is not None:
            self.exit_code = self.popen.returncode
        self.remove_files()
        for entry in self.journaled:
            owner.forget("process", entry)
        self.journaled.clear()

    def log_tail(self, lines: int = 2) -> str:
        """The last lines the server printed, on one line."""
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        useful = [line.strip() for line in text.splitlines() if line.strip()]
        return " | ".join(useful[-lines:]) or "(nothing in its log)"

    def describe(self, run_dir: Path) -> dict[str, Any]:
        """Plain data for run.json."""
        d = self.device
        return {
            "name": d.name,
            "host": d.host,
            "server": d.server,
            "server_name": self.name,
            "version": self.version,
            "rate": d.rate,
            "channels": d.channels,
            "period_frames": d.period_frames,
            "periods": d.periods,
            "period_us": d.period_us,
            "buffer_us": d.period_us * d.periods,
            "reported_latency": self.reported,
            "reported_latency_in_run": self.reported_in_run,
            "streams": list(self.streams.values()),
            "env": self.client_env(),
            "pid": self.popen.pid if self.popen else None,
            "exit_code": self.exit_code,
            "log": str(self.log.relative_to(run_dir)) if self.log.is_relative_to(run_dir) else "",
        }


class JackServer(AudioServer):
    """jackd with the dummy driver."""

    def argv(self) -> list[str]:
        d = self.device
        return [
            "jackd", "--name", self.name,
            "-d", "dummy", "-r", str(d.rate), "-p", str(d.period_frames),
            "-C", str(d.channels), "-P", str(d.channels),
        ]  # fmt: skip

    def server_env(self) -> dict[str, str]:
        return {"JACK_NO_START_SERVER": "1"}

    def prepare(self) -> None:
        owner.record("jack", self.name)  # its files in /dev/shm, its registry slot

    def client_env(self) -> dict[str, str]:
        return {"JACK_DEFAULT_SERVER": self.name, "JACK_NO_START_SERVER": "1"}

    def _lsp(self) -> subprocess.CompletedProcess:
        env = {**os.environ, **self.client_env()}
        return _run(["jack_lsp", "-s", self.name, "-l", "system:"], env)

    def is_ready(self) -> bool:
        return self._lsp().returncode == 0

    def query_latency(self) -> dict[str, Any]:
        """JACK's port latencies of the first physical ports, in frames and ms."""
        out: dict[str, Any] = {}
        port = ""
        for line in self._lsp().stdout.splitlines():
            if not line.startswith((" ", "\t")):
                port = line.strip()
                continue
            match = JACK_LATENCY_RE.search(line)
            if not match or int(match.group(3)) == 0:
                continue
            key = f"{match.group(1)}_frames"
            if key not in out and port.startswith("system:"):
                out[key] = int(match.group(3))
                out[f"{match.group(1)}_ms"] = int(match.group(3)) * 1000 / self.device.rate
        return out

    def query_version(self) -> str:
        first = _run(["jackd", "--version"]).stdout.strip().splitlines()
        return first[0] if first else ""

    def remove_files(self) -> None:
        """Its files, and its registry slot if it kept one (a jackd that was killed, not
        stopped, keeps it: JACK's 8 slots would fill up); then off the journal."""
        remove_jack_server(self.name)
        owner.forget("jack", self.name)

    def failure_hint(self) -> str:
        return registry_full_hint()


class PulseServer(AudioServer):
    """PulseAudio with one null sink (its monitor is the capture side).

    Without a client, a null sink runs with its largest latency (2 s blocks), so its
    monitor would deliver nothing for the first 2 s. Like a sound card's clock that
    always runs, a silent ``pacat`` stream keeps it at the device's buffer size.
    """

    keeper: subprocess.Popen[bytes] | None = None
    reports_streams = True
    _cli: socket.socket | None = None

    def start(self, exec_argv: ExecArgv) -> None:
        self._start_server(exec_argv)
        d = self.device
        latency_ms = max(1, round(d.period_us * d.periods / 1000))
        argv = [
            "pacat", "--playback", "--raw", f"--server={self.client_env()['PULSE_SERVER']}",
            f"--device={self.sink}", f"--rate={d.rate}", f"--channels={d.channels}",
            "--format=s16le", f"--latency-msec={latency_ms}", "/dev/zero",
        ]  # fmt: skip
        with self.log.open("ab") as log:
            self.keeper = subprocess.Popen(
                exec_argv(d.host, argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.client_env()},
                start_new_session=True,
            )
        self.journaled.append(owner.record_process(self.keeper.pid, f"{self.name} keeper"))
        self._await_device_latency(latency_ms)

    def _await_device_latency(self, latency_ms: float) -> None:
        """Wait until the null sink left its idle 2 s block (its latency is device-like)."""
        assert self.keeper is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            self.reported = self.query_latency()
            if self.reported.get("playback_ms", float("inf")) <= 2 * latency_ms:
                return
            if self.died() or self.keeper.poll() is not None:
                raise DeviceError(f"{self.label}: its null sink's stream ended: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise DeviceError(
                    f"{self.label}: null sink latency still {self.reported} "
                    f"after {READY_TIMEOUT_S:g} s"
                )
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.keeper.wait(POLL_S)

    def died(self) -> bool:
        keeper_died = self.keeper is not None and self.keeper.poll() is not None
        return super().died() or (not self.stopping and keeper_died)

    def stop(self) -> None:
        self.stopping = True
        if self._cli is not None:
            self._cli.close()
            self._cli = None
        if self.keeper is not None and self.keeper.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.keeper.pid, signal.SIGKILL)
            self.keeper.wait()
        super().stop()

    @property
    def runtime_dir(self) -> Path:
        return owner.private_tmp() / f"{self.name}-pulse"

    @property
    def sink(self) -> str:
        return pulse_sink(self.device.name)

    def prepare(self) -> None:
        owner.record("path", str(self.runtime_dir))
        shutil.rmtree(self.runtime_dir, ignore_errors=True)
        self.runtime_dir.mkdir(mode=0o700)
        d = self.device
        fragment_ms = max(1, round(d.period_frames * 1000 / d.rate))
        (self.runtime_dir / "daemon.conf").write_text(
            f"default-sample-rate = {d.rate}\n"
            f"default-sample-channels = {d.channels}\n"
            f"default-fragments = {d.periods}\n"
            f"default-fragment-size-msec = {fragment_ms}\n"
            "exit-idle-time = -1\n",
            encoding="utf-8",
        )

    def argv(self) -> list[str]:
        d = self.device
        socket = self.runtime_dir / "native"
        return [
            "pulseaudio", "-n", "--daemonize=no", "--use-pid-file=no", "--system=no",
            "--log-target=stderr", "--exit-idle-time=-1",
            "-L", f"module-native-protocol-unix socket={socket} auth-anonymous=1",
            "-L", f"module-cli-protocol-unix socket={self.runtime_dir / 'cli'}",
            "-L", f"module-null-sink sink_name={self.sink} rate={d.rate} channels={d.channels}",
        ]  # fmt: skip

    def server_env(self) -> dict[str, str]:
        rt = str(self.runtime_dir)
        return {
            "HOME": rt,
            "XDG_RUNTIME_DIR": rt,
            "XDG_CONFIG_HOME": rt,
            "PULSE_RUNTIME_PATH": rt,
            "PULSE_STATE_PATH": rt,
            "PULSE_CONFIG": str(self.runtime_dir / "daemon.conf"),
        }

    def client_env(self) -> dict[str, str]:
        return {
            "PULSE_SERVER": f"unix:{self.runtime_dir / 'native'}",
            "PULSE_RUNTIME_PATH": str(self.runtime_dir),
            "PULSE_SINK": self.sink,
            "PULSE_SOURCE": f"{self.sink}.monitor",
        }

    def _pactl(self, *args: str) -> subprocess.CompletedProcess:
        server = self.client_env()["PULSE_SERVER"]
        env = {**os.environ, **self.client_env(), "LC_ALL": "C"}  # its English field names
        return _run(["pactl", "--server", server, *args], env)

    def is_ready(self) -> bool:
        return (self.runtime_dir / "native").exists() and self._pactl("info").returncode == 0

    def query_latency(self) -> dict[str, Any]:
        """The null sink's and its monitor's latency as PulseAudio reports them."""
        out: dict[str, Any] = {}
        for kind, what in (("sinks", "playback"), ("sources", "capture")):
            match = PULSE_LATENCY_RE.search(self._pactl("list", kind).stdout)
            if match:
                out[f"{what}_ms"] = int(match.group(1)) / 1000
                out[f"{what}_configured_ms"] = int(match.group(2)) / 1000
        return out

    def sample_streams(self) -> None:
        """One sample of every playback stream's queue, as the server reports it on its
        command line (``list-sink-inputs``, "current latency": the samples a client wrote
        and the sink has not yet taken), bracketed by CLOCK_MONOTONIC instants (a
        persistent connection: the bracket is the request and its reply); per stream
        (``streams``), with the pid of the client that plays it."""
        try:
            before, listing, after = self._cli_command(b"list-sink-inputs")
        except OSError:  # the server is going away (its death is told elsewhere): reconnect
            if self._cli is not None:
                self._cli.close()
            self._cli = None
            return
        for index, block in parse_sink_inputs(listing).items():
            if "queue_ms" not in block:
                continue
            stream = self.streams.setdefault(
                index, {"sink_input": index, "pid": block.get("pid"), "t_ns": [],
                        "reply_ns": [], "queue_us": []},
            )  # fmt: skip
            stream["t_ns"].append(before)
            stream["reply_ns"].append(after - before)
            stream["queue_us"].append(round(block["queue_ms"] * 1000))

    def _cli_command(self, command: bytes) -> tuple[int, str, int]:
        """Send one command to the server's command line: (sent at, reply, replied at)."""
        if self._cli is None:
            self._cli = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._cli.settimeout(PROBE_TIMEOUT_S)
            self._cli.connect(str(self.runtime_dir / "cli"))
        before = time.monotonic_ns()
        self._cli.sendall(command + b"\n" + CLI_END + b"\n")
        reply = _read_reply(self._cli)
        return before, reply, time.monotonic_ns()

    def query_version(self) -> str:
        for line in self._pactl("info").stdout.splitlines():
            if line.startswith("Server Version:"):
                return "pulseaudio " + line.split(":", 1)[1].strip()
        return ""

    def remove_files(self) -> None:
        shutil.rmtree(self.runtime_dir, ignore_errors=True)
        owner.forget("path", str(self.runtime_dir))


def _read_reply(cli: socket.socket) -> str:
    """What the server's command line answered, up to the end marker's reply."""
    reply = b""
    while not reply.endswith(CLI_END_REPLY):
        chunk = cli.recv(65536)
        if not chunk:
            raise ConnectionError("the server's command line closed")
        reply += chunk
    return reply[: -len(CLI_END_REPLY)].decode(errors="replace")


def parse_sink_inputs(listing: str) -> dict[int, dict[str, float]]:
    """``list-sink-inputs`` as {sink input: {queue_ms, pid}} (what it shows of them)."""
    heads = list(SINK_INPUT_RE.finditer(listing))
    ends = [head.start() for head in heads[1:]] + [len(listing)] if heads else []
    out: dict[int, dict[str, float]] = {}
    for head, end in zip(heads, ends, strict=True):
        found = {key: rx.search(listing, head.end(), end) for key, rx in STREAM_FIELDS.items()}
        fields = {key: float(match.group(1)) for key, match in found.items() if match}
        if "pid" in fields:
            fields["pid"] = int(fields["pid"])
        out[int(head.group(1))] = fields
    return out


SERVERS: dict[str, type[AudioServer]] = {"jack": JackServer, "pulse": PulseServer}


class Devices:
    """The audio devices of one run."""

    def __init__(self, devices: Sequence[Device], log_dir: Path, owner_pid: int | None = None):
        pid = owner_pid if owner_pid is not None else os.getpid()
        self.servers = [
            SERVERS[d.server](d, pid, log_dir / f"device-{d.name}.log") for d in devices
        ]
        self._stop_sampling = threading.Event()
        self._sampling: threading.Thread | None = None

    def start_all(self, exec_argv: ExecArgv) -> None:
        """Start every server (in file order), each ready before the next."""
        for server in self.servers:
            server.start(exec_argv)

    def env_for(self, host: str) -> dict[str, str]:
        """Environment that points the processes of ``host`` at its device."""
        env: dict[str, str] = {}
        for server in self.servers:
            if server.device.host == host:
                env.update(server.client_env())
        return env

    def check(self) -> None:
        """Raise DeviceError naming the first device whose server died."""
        for server in self.servers:
            if server.died():
                raise DeviceError(
                    f"{server.label} died during the run (exit code {server.popen.returncode})"
                )

    def start_sampling(self, interval_s: float = STREAM_SAMPLE_S) -> None:
        """Sample the servers' playback streams every ``interval_s`` until
        :meth:`stop_sampling` (a thread, if any server reports its streams)."""
        if not any(server.reports_streams for server in self.servers):
            return
        self._stop_sampling = threading.Event()
        self._sampling = threading.Thread(
            target=self._sample_until_stopped, args=(interval_s,), daemon=True
        )
        self._sampling.start()

    def _sample_until_stopped(self, interval_s: float) -> None:
        while not self._stop_sampling.is_set():
            for server in self.servers:
                if server.reports_streams and server.popen and server.popen.poll() is None:
                    server.sample_streams()
            self._stop_sampling.wait(interval_s)

    def stop_sampling(self) -> None:
        """Stop the sampling thread (if it runs) and wait for it."""
        sampling = self._sampling
        if sampling is not None:
            self._stop_sampling.set()
            sampling.join()
            self._sampling = None

    def sample_latency(self) -> None:
        """Record the latency each live server reports while the processes use it."""
        for server in self.servers:
            if server.popen is not None and server.popen.poll() is None:
                server.reported_in_run = server.query_latency()

    def stop_all(self) -> None:
        """Stop every server that was started (reverse order) and remove its files."""
        for server in reversed(self.servers):
            server.stop()

    def describe(self, run_dir: Path) -> list[dict[str, Any]]:
        """Each device for run.json."""
        return [server.describe(run_dir) for server in self.servers]
