"""SFUs as lab hosts: Janus's videoroom, started and stopped by latlab in a host's namespace.

latlab writes Janus's configuration into the run directory (``sfus/NAME/``): only the
videoroom plugin and the HTTP transport, both bound to the host's lab addresses (the
HTTP API on the first, ICE candidates on all of them), a fixed RTP port range, a room
(1234) without a bitrate cap, the log to ``sfus/NAME/janus.log``; the DTLS certificate
is generated in memory (docs/research/janus-spike.md). It is ready when its HTTP API
answers ``/janus/info`` with the videoroom plugin; latlab then records the sockets it
listens on. Stopped with SIGINT (it says "Bye!" in 1-2 s), then SIGTERM, SIGKILL.

``python -m latlab.lab.sfu probe URL TIMEOUT_S`` (run inside the host's namespace) is
that readiness probe: it asks every 20 ms, prints the answer's version and plugins as
one JSON line and exits 0, or exits 1 after the timeout.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from latlab import rundir
from latlab.errors import EnvironmentProblem, MeasurementError
from latlab.lab.process import ChildProcess

JANUS = "janus"
JANUS_LIB = Path("/usr/lib/x86_64-linux-gnu/janus")
ROOM = 1234
RTP_PORTS = "20000-20999"
READY_TIMEOUT_S = 10.0
PROBE_EVERY_S = 0.02
VIDEOROOM = "janus.plugin.videoroom"
STOP_STEPS = (
    (signal.SIGINT, "sigint", 4.0),
    (signal.SIGTERM, "sigterm", 2.0),
    (signal.SIGKILL, "sigkill", None),
)
OTHER_PLUGINS = ("audiobridge", "duktape", "echotest", "lua", "nosip", "recordplay", "sip",
                 "streaming", "textroom", "videocall", "voicemail")  # fmt: skip
OTHER_TRANSPORTS = ("websockets", "mqtt", "nanomsg", "pfunix", "rabbitmq")


class SfuError(MeasurementError):
    """An SFU that failed to start or died; ``str()`` names it and says why."""


def janus_binary() -> str:
    """Janus (Debian: janus), or EnvironmentProblem naming what to install."""
    found = shutil.which(JANUS)
    if found is None or not (JANUS_LIB / "plugins" / "libjanus_videoroom.so").is_file():
        raise EnvironmentProblem(
            "Janus not found (SFU server 'janus' needs the Debian packages janus and "
            "janus-demos): run bash scripts/setup.sh"
        )
    return found


def _libraries(names: Sequence[str]) -> str:
    return ",".join(f"libjanus_{name}.so" for name in names)


def janus_config(directory: Path, addrs: Sequence[str], http_port: int) -> dict[str, str]:
    """Janus's configuration files for a host with lab addresses ``addrs`` (file name ->
    text): janus.jcfg, the HTTP transport's and the videoroom plugin's."""
    media = addrs[0]
    main = f"""general: {{
	configs_folder = "{directory}"
	plugins_folder = "{JANUS_LIB / "plugins"}"
	transports_folder = "{JANUS_LIB / "transports"}"
	events_folder = "{JANUS_LIB / "events"}"
	loggers_folder = "{JANUS_LIB / "loggers"}"
	log_to_stdout = false
	log_to_file = "{directory / rundir.SFU_LOG}"
	debug_level = 4
	debug_timestamps = true
	debug_colors = false
	daemonize = false
	session_timeout = 60
	server_name = "latlab"
	interface = "{media}"
	hide_dependencies = true
	exit_on_dl_error = true
}}
certificates: {{
}}
media: {{
	rtp_port_range = "{RTP_PORTS}"
	no_media_timer = 1
}}
nat: {{
	nice_debug = false
	ice_enforce_list = "{",".join(addrs)}"
	ignore_mdns = true
}}
plugins: {{
	disable = "{_libraries(OTHER_PLUGINS)}"
}}
transports: {{
	disable = "{_libraries(OTHER_TRANSPORTS)}"
}}
loggers: {{
	disable = "libjanus_jsonlog.so"
}}
events: {{
	broadcast = false
}}
"""
    http = f"""general: {{
	json = "plain"
	base_path = "/janus"
	http = true
	ip = "{media}"
	port = {http_port}
	https = false
}}
admin: {{
	admin_http = false
	admin_https = false
}}
cors: {{
}}
"""
    videoroom = f"""general: {{
}}
room-{ROOM}: {{
	description = "latlab"
	publishers = 16
	bitrate = 0
	fir_freq = 0
	audiocodec = "opus"
	videocodec = "vp8"
	record = false
}}
"""
    return {"janus.jcfg": main, "janus.transport.http.jcfg": http,
            "janus.plugin.videoroom.jcfg": videoroom}  # fmt: skip


class JanusServer:
    """One Janus in a host's namespace, configured in ``sfus/NAME/`` of the run."""

    def __init__(
        self,
        name: str,
        namespace: str,
        addrs: Sequence[str],
        http_port: int,
        run_dir: Path,
        exited: threading.Event,
        wrap: Any = None,
    ) -> None:
        """``wrap(argv) -> argv`` runs Janus under another program (perf, for its cost)."""
        self.name = name
        self.namespace = namespace
        self.addrs = list(addrs)
        self.http_port = http_port
        self.directory = rundir.sfu_dir(run_dir, name)
        self.run_dir = run_dir
        self.url = f"http://{self.addrs[0]}:{http_port}/janus/info"
        self.info: dict[str, Any] = {}
        self.listening: list[str] = []
        argv = [janus_binary(), "-C", str(self.directory / "janus.jcfg"), "-F",
                str(self.directory)]  # fmt: skip
        stdout_log, stderr_log = rundir.process_logs(run_dir, name)
        self.child = ChildProcess(
            name=name,
            argv=["ip", "netns", "exec", namespace, *(wrap(argv) if wrap else argv)],
            stdout_log=stdout_log,
            stderr_log=stderr_log,
            exited=exited,
            ready_marker=None,  # ready is the HTTP probe's answer, not a line
            stop_steps=STOP_STEPS,
        )

    def start(self, env: Mapping[str, str]) -> None:
        """Write the configuration, start Janus, wait until its API answers."""
        links_running(self.namespace)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.child.stdout_log.parent.mkdir(parents=True, exist_ok=True)
        for file, text in janus_config(self.directory, self.addrs, self.http_port).items():
            (self.directory / file).write_text(text, encoding="utf-8")
        self.child.start(env)
        answer = self._probe(env)
        if answer is None:
            self.child.kill_group()
            raise SfuError(f"SFU '{self.name}' (janus) did not answer {self.url}: {self._why()}")
        self.child.mark_ready()
        self.info = json.loads(answer)
        self.listening = listening_sockets(self.namespace, "janus")

    def _probe(self, env: Mapping[str, str]) -> str | None:
        """The readiness probe's answer, or None if it timed out or Janus exited first."""
        argv = ["ip", "netns", "exec", self.namespace, sys.executable, "-m", "latlab.lab.sfu",
                "probe", self.url, str(READY_TIMEOUT_S)]  # fmt: skip
        probe = subprocess.Popen(argv, env=dict(env), stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True)  # fmt: skip
        janus = self.child.popen
        while True:
            try:
                out, _ = probe.communicate(timeout=PROBE_EVERY_S * 5)
                return out if probe.returncode == 0 else None
            except subprocess.TimeoutExpired:
                if janus is not None and janus.poll() is not None:  # died: no need to wait
                    probe.kill()
                    probe.communicate()
                    return None

    def check(self) -> None:
        """SfuError if Janus has exited on its own."""
        code = self.child.died()
        if code is not None:
            raise SfuError(f"SFU '{self.name}' (janus) died during the run "
                           f"(exit code {code}): {self._why()}")  # fmt: skip

    def stop(self) -> str:
        """SIGINT, then SIGTERM, SIGKILL; how it ended."""
        return self.child.stop()

    def describe(self) -> dict[str, Any]:
        """The SFU's run.json entry."""
        return {"server": "janus", "namespace": self.namespace, "api": self.url,
                "config": str(self.directory.relative_to(self.run_dir)), "room": ROOM,
                "version": self.info.get("version_string"),
                "plugins": self.info.get("plugins", []), "listening": self.listening,
                "argv": self.child.argv,
                **self.child.describe(self.child.started_ns or 0)}  # fmt: skip

    def _why(self) -> str:
        log = self.directory / rundir.SFU_LOG
        lines = log.read_text(errors="replace").splitlines()[-3:] if log.is_file() else []
        return " | ".join(line.strip() for line in lines) or self.child.stderr_summary()


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


def probe(url: str, timeout_s: float) -> int:
    """Ask ``url`` every 20 ms until it answers with the videoroom plugin (0) or the
    timeout passes (1); prints the answer's version and plugins as JSON."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1.0) as answer:
                info = json.loads(answer.read())
        except (urllib.error.URLError, OSError, ValueError):
            time.sleep(PROBE_EVERY_S)
            continue
        plugins = sorted(info.get("plugins", {}))
        if VIDEOROOM in plugins:
            print(json.dumps({"version_string": info.get("version_string"), "plugins": plugins}))
            return 0
        time.sleep(PROBE_EVERY_S)
    return 1


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "probe":
        sys.exit(probe(sys.argv[2], float(sys.argv[3])))
    sys.exit("usage: python -m latlab.lab.sfu probe URL TIMEOUT_S")
