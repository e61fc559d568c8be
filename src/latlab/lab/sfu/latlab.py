"""latlab's own SFU as a lab host (``server = "latlab"``): ``latlab-sfu`` (``sfu/``, built
by ``scripts/setup.sh`` with the rest of the Cargo workspace; docs/sfu.md, "latlab-sfu").

It needs no configuration file: its argv says everything. It binds only the host's first
lab address: its HTTP API (WHIP ``/whip/ROOM``, WHEP ``/whep/ROOM``, ``/stats``) on
``http_port`` and every peer's media on one UDP port (:data:`UDP_PORT`). It runs without
UDP GSO (``--no-gso``): a veth passes a GSO message on as one large packet, which is what
a capture on the host sees, so the dwell matcher would see one packet where the
subscriber gets several (``bench/bench_sfu.py`` shows what GSO is worth). Its white-box
probes (``--trace``) are on in every run where it is not counted: they write
``traces/NAME.lltrace`` (probes ``NAME/ingress`` and ``NAME/egress:SUBSCRIBER``), which the
analysis reads like any trace; with ``cost = true`` they are off, so that the cost figures
are the forwarding's alone. It is ready when ``/stats`` answers with its counters; stopped
with SIGINT (it says what it forwarded on stderr, its log), then SIGTERM, SIGKILL.

Browsers join through ``whip.html`` (WHIP to publish, WHEP to subscribe: fetch and
RTCPeerConnection, nothing else), ``latlab-loadgen`` through its WHIP/WHEP driver.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from latlab import rundir
from latlab.errors import EnvironmentProblem
from latlab.lab.scenario import Room
from latlab.lab.sfu.base import SfuError, SfuServer
from latlab.tracer import BUILD_DIR

if TYPE_CHECKING:
    from latlab.lab.scenario import Load  # [loads.NAME] (latlab.lab.loadgen)

LATLAB_SFU = BUILD_DIR / "latlab-sfu"
UDP_PORT = 20000  # every peer's media, on the one socket
COUNTERS = ("peers", "rtp_in", "forwarded")  # what its /stats answer must hold


def latlab_sfu_binary() -> Path:
    """The built latlab-sfu, or EnvironmentProblem saying how to build it."""
    if not LATLAB_SFU.is_file():
        raise EnvironmentProblem(f"{LATLAB_SFU}: not built: run bash scripts/setup.sh")
    return LATLAB_SFU


class LatlabServer(SfuServer):
    """One latlab-sfu in a host's namespace."""

    kind: ClassVar[str] = "latlab"
    program: ClassVar[str] = "latlab-sfu"

    @property
    def trace_path(self) -> Path | None:
        """Where its probes write, or None when it is counted (probes off)."""
        if self.spec.cost:
            return None
        return Path(self.run_dir) / rundir.TRACES / f"{self.name}{rundir.TRACE_SUFFIX}"

    def argv(self) -> list[str]:
        """``latlab-sfu --bind ADDR --http-port P --udp-port 20000 --no-gso [--trace FILE]``."""
        argv = [str(latlab_sfu_binary()), "--bind", self.addr, "--http-port",
                str(self.spec.http_port), "--udp-port", str(UDP_PORT), "--no-gso"]  # fmt: skip
        if self.trace_path is not None:
            self.trace_path.parent.mkdir(parents=True, exist_ok=True)
            argv += ["--trace", str(self.trace_path)]
        return argv

    def config_files(self) -> dict[str, str]:
        """None: the argv says everything."""
        return {}

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """The runner's environment; its trace names the process after the SFU."""
        return {**env, "LATLAB_PROCESS": self.name}

    @property
    def ready_url(self) -> str:
        """Its counters."""
        return f"http://{self.addr}:{self.spec.http_port}/stats"

    def accept(self, answer: str) -> dict[str, Any]:
        """Its version; SfuError unless the answer is its counters."""
        try:
            stats = json.loads(answer)
        except ValueError:
            stats = None
        if not isinstance(stats, dict) or not all(key in stats for key in COUNTERS):
            raise SfuError(f"SFU '{self.name}' (latlab) answered {self.ready_url} with "
                           f"{answer.strip()[:80]!r}, not its counters")  # fmt: skip
        return {"version": latlab_sfu_version()}

    def join(self, room: Room, member: str) -> tuple[str, dict[str, str]]:
        """whip.html: the SFU's URL, the room, the member's role and, for a subscriber,
        how many publishers it receives."""
        publisher = member in room.publishers
        return "whip.html", {"sfu": f"http://{self.addr}:{self.spec.http_port}",
                             "room": room.name,
                             "role": "publisher" if publisher else "subscriber",
                             "slots": str(len(room.publishers))}  # fmt: skip

    def load_args(self, load: Load) -> list[str]:
        """latlab-loadgen's WHIP/WHEP driver on the room named after the load."""
        base = f"http://{self.addr}:{self.spec.http_port}"
        return ["--sfu", "whip", "--room", load.name,
                "--whip", f"{base}/whip/{{room}}?name={{id}}",
                "--whep", f"{base}/whep/{{room}}?name={{id}}"]  # fmt: skip

    def log_file(self) -> Path:
        """Its lifecycle lines (stderr)."""
        return self.child.stderr_log

    def describe_kind(self) -> dict[str, Any]:
        """Its version, media port and where its probes wrote (null: off)."""
        trace = self.trace_path
        return {"version": self.info.get("version"), "udp_port": UDP_PORT,
                "trace": str(trace.relative_to(self.run_dir)) if trace else None}  # fmt: skip


def latlab_sfu_version() -> str | None:
    """``latlab-sfu 0.1.0 (str0m 0.25.0)`` from ``latlab-sfu --version``."""
    try:
        result = subprocess.run([str(latlab_sfu_binary()), "--version"], capture_output=True,
                                text=True, timeout=10, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() or None
