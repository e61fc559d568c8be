"""What every SFU lab host shares: started in its host's namespace with the configuration
latlab writes into ``sfus/NAME/`` of the run, ready when its HTTP endpoint answers (a
probe run inside the namespace, no sleeps), watched during the run, stopped with SIGINT
then SIGTERM, SIGKILL, described in run.json with the sockets it listened on.

A server kind (Janus, LiveKit, ...) is a subclass of :class:`SfuServer` that says only
what differs: its program and argv, its configuration files, the URL that answers once it
is ready and what the answer must hold, and how a room's browser page joins it
(:meth:`SfuServer.join`). :data:`latlab.lab.sfu.SERVERS` maps a scenario's ``server``
value to its class.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from latlab import rundir
from latlab.errors import MeasurementError
from latlab.lab.process import ChildProcess
from latlab.lab.scenario import Load, Room, Sfu

READY_TIMEOUT_S = 10.0
PROBE_EVERY_S = 0.02
STOP_STEPS = (
    (signal.SIGINT, "sigint", 4.0),
    (signal.SIGTERM, "sigterm", 2.0),
    (signal.SIGKILL, "sigkill", None),
)
Wrap = Callable[[list[str]], list[str]]


class SfuError(MeasurementError):
    """An SFU that failed to start or died; ``str()`` names it and says why."""


class SfuServer:
    """One SFU in a host's namespace, configured in ``sfus/NAME/`` of the run."""

    kind: ClassVar[str] = ""  # the scenario's ``server`` value
    program: ClassVar[str] = ""  # its process name, as ``ss`` shows it (15 characters)

    def __init__(
        self,
        spec: Sfu,
        namespace: str,
        addrs: Sequence[str],
        run_dir: Path,
        exited: threading.Event,
        wrap: Wrap | None = None,
    ) -> None:
        """``addrs``: the host's lab addresses (the first is the one it is reached at);
        ``wrap(argv) -> argv`` runs it under another program (perf, for its cost)."""
        self.spec = spec
        self.name = spec.name
        self.namespace = namespace
        self.addrs = list(addrs)
        self.run_dir = run_dir
        self.directory = rundir.sfu_dir(run_dir, spec.name)
        self.info: dict[str, Any] = {}
        self.listening: list[str] = []
        argv = self.argv()
        stdout_log, stderr_log = rundir.process_logs(run_dir, spec.name)
        self.child = ChildProcess(
            name=spec.name,
            argv=["ip", "netns", "exec", namespace, *(wrap(argv) if wrap else argv)],
            stdout_log=stdout_log,
            stderr_log=stderr_log,
            exited=exited,
            ready_marker=None,  # ready is the HTTP probe's answer, not a line
            stop_steps=STOP_STEPS,
        )

    # What a server kind says.

    def argv(self) -> list[str]:
        """The server's argv (it runs inside the host's namespace)."""
        raise NotImplementedError

    def config_files(self) -> dict[str, str]:
        """Its configuration: file name in ``sfus/NAME/`` -> text."""
        raise NotImplementedError

    @property
    def ready_url(self) -> str:
        """The URL that answers (HTTP 200) once the server is ready."""
        raise NotImplementedError

    def accept(self, answer: str) -> dict[str, Any]:
        """What run.json keeps of the ready answer; SfuError if it is not the one expected."""
        raise NotImplementedError

    def join(self, room: Room, member: str) -> tuple[str, dict[str, str]]:
        """The page (of latlab's page server) through which browser ``member`` joins
        ``room`` on this server, and the page's query parameters besides ``id``."""
        raise NotImplementedError

    def gst_publisher_args(self, room: Room, member: str) -> list[str]:
        """The arguments by which latlab's webrtcbin peer publishes into ``room`` as
        ``member`` (:mod:`latlab.lab.gstpeer`); SfuError where this server's signalling
        is not one the peer speaks (the scenario refuses that before a run)."""
        raise SfuError(f"SFU '{self.name}' ({self.kind}) takes no webrtcbin publisher")

    def load_args(self, load: Load) -> list[str]:
        """The arguments by which ``latlab-loadgen`` reaches this server and its room for
        ``load`` (``--sfu`` and what that kind needs; :mod:`latlab.lab.loadgen`)."""
        raise NotImplementedError

    def load_env(self, load: Load) -> dict[str, str]:
        """Variables latlab-loadgen needs in its environment for ``load`` (secrets)."""
        return {}

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """The server's environment, from the runner's."""
        return dict(env)

    def log_file(self) -> Path:
        """Where the server logs (its last lines say why it failed)."""
        return self.child.stdout_log

    def describe_kind(self) -> dict[str, Any]:
        """The kind's own fields of its run.json entry."""
        return {}

    # What every kind shares.

    @property
    def addr(self) -> str:
        """The lab address the server is reached at (its API, its media)."""
        return self.addrs[0]

    def start(self, env: Mapping[str, str]) -> None:
        """Write the configuration, start the server, wait until it answers."""
        links_running(self.namespace)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.child.stdout_log.parent.mkdir(parents=True, exist_ok=True)
        for file, text in self.config_files().items():
            (self.directory / file).write_text(text, encoding="utf-8")
        self.child.start(self.environment(env))
        answer = self._probe(env)
        if answer is None:
            self.child.kill_group()
            raise SfuError(f"SFU '{self.name}' ({self.kind}) did not answer {self.ready_url}: "
                           f"{self.why()}")  # fmt: skip
        try:
            self.info = self.accept(answer)
        except SfuError:
            self.child.kill_group()
            raise
        self.child.mark_ready()
        self.listening = listening_sockets(self.namespace, self.program)

    def _probe(self, env: Mapping[str, str]) -> str | None:
        """The readiness probe's answer, or None if it timed out or the server exited."""
        argv = ["ip", "netns", "exec", self.namespace, sys.executable, "-m",
                "latlab.lab.sfu.probe", self.ready_url, str(READY_TIMEOUT_S)]  # fmt: skip
        probe = subprocess.Popen(argv, env=dict(env), stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True)  # fmt: skip
        server = self.child.popen
        while True:
            try:
                out, _ = probe.communicate(timeout=PROBE_EVERY_S * 5)
                return out if probe.returncode == 0 else None
            except subprocess.TimeoutExpired:
                if server is not None and server.poll() is not None:  # died: no need to wait
                    probe.kill()
                    probe.communicate()
                    return None

    def check(self) -> None:
        """SfuError if the server has exited on its own."""
        code = self.child.died()
        if code is not None:
            raise SfuError(f"SFU '{self.name}' ({self.kind}) died during the run "
                           f"(exit code {code}): {self.why()}")  # fmt: skip

    def stop(self) -> str:
        """SIGINT, then SIGTERM, SIGKILL; how it ended."""
        return self.child.stop()

    def describe(self) -> dict[str, Any]:
        """The SFU's run.json entry."""
        return {"server": self.kind, "host": self.spec.host, "namespace": self.namespace,
                "api": self.ready_url,
                "config": str(self.directory.relative_to(self.run_dir)),
                **self.describe_kind(), "listening": self.listening, "argv": self.child.argv,
                **self.child.describe(self.child.started_ns or 0)}  # fmt: skip

    def why(self) -> str:
        """The last lines of its log (or of its stderr), as one line."""
        log = self.log_file()
        lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
        lines = [line.strip() for line in lines if line.strip()][-3:]
        return " | ".join(lines) or self.child.stderr_summary()


def links_running(namespace: str, timeout_s: float = 5.0) -> None:
    """Wait until every interface in the namespace but loopback is running (operstate
    UP). Janus binds its HTTP API only to an address on a running interface, and a
    veth's carrier is reported running a moment after both ends were set up (the kernel
    batches link events up to a second): without this wait it failed to start in one
    run of two."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        shown = subprocess.run(["ip", "-n", namespace, "-o", "link", "show"],
                               capture_output=True, text=True, timeout=5, check=False)  # fmt: skip
        links = [line for line in shown.stdout.splitlines() if " lo:" not in line]
        if links and all(" state UP " in line for line in links):
            return
        time.sleep(PROBE_EVERY_S)
    raise SfuError(f"the links of {namespace} are not up after {timeout_s:g} s")


def listening_sockets(namespace: str, program: str) -> list[str]:
    """``proto address:port`` of the TCP and UDP sockets ``program`` listens on there."""
    result = subprocess.run(["ip", "netns", "exec", namespace, "ss", "-Hltunp"],
                            capture_output=True, text=True, timeout=10, check=False)  # fmt: skip
    found = []
    for line in result.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 5 and f'(("{program}"' in line:
            found.append(f"{fields[0]} {fields[4]}")
    return sorted(found)
