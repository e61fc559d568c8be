"""LiveKit server as an SFU lab host (``server = "livekit"``).

``scripts/setup.sh`` builds ``livekit-server`` from the Go module proxy into
``build/livekit/`` and bundles the livekit-client SDK from npm into
``build/livekit/livekit-client.js``, which latlab's page server serves to the room pages
(``www/livekit.html``). latlab writes its configuration (``sfus/NAME/livekit.yaml``):
single node, no Redis, no TURN, no external IP discovery; its HTTP and WebSocket
signalling, its one UDP port for media (RTC_UDP_PORT, every PeerConnection multiplexed on
it) and the ICE candidates it offers all on the host's first lab address (``rtc.node_ip``);
ICE over TCP off (its listener cannot be bound to an address: it would listen on all);
Opus and VP8 only; an API key and secret made for the run. It is ready when its HTTP
endpoint answers ``/`` with ``OK``; stopped with SIGINT (it drains its rooms, about 1 s),
then SIGTERM, SIGKILL (:mod:`latlab.lab.sfu.base`). docs/research/livekit-spike.md has
what was found about it.

Participants join with an access token: a JWT (HS256) signed with the run's secret,
naming the room and what the participant may do (:func:`access_token`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from latlab import rundir
from latlab.errors import EnvironmentProblem
from latlab.lab.scenario import Load, Room
from latlab.lab.sfu.base import SfuError, SfuServer
from latlab.tracer import REPO_ROOT

LIVEKIT_BUILD = REPO_ROOT / "build" / "livekit"  # scripts/setup.sh builds into it
LIVEKIT_SERVER = LIVEKIT_BUILD / "livekit-server"
CLIENT_BUNDLE = LIVEKIT_BUILD / "livekit-client.js"  # served as livekit-client.js
RTC_UDP_PORT = 7882  # every PeerConnection's media, multiplexed
API_KEY_PREFIX = "latlab"
TOKEN_TTL_S = 24 * 3600
# The environment variables livekit-server reads as settings (its --help-verbose): a
# run's server takes its settings from the configuration file only.
SETTING_VARIABLES = ("NODE_IP", "UDP_PORT", "REDIS_HOST", "REDIS_PASSWORD")
SETTING_PREFIX = "LIVEKIT_"
FATAL = ("fatal error:", "panic:")  # how the Go runtime says it gave up
LOADGEN_SECRET_VARIABLE = "LATLAB_LOADGEN_SECRET"  # latlab-loadgen reads the secret here


def livekit_binary() -> Path:
    """The built livekit-server, or EnvironmentProblem saying how to build it."""
    if not LIVEKIT_SERVER.is_file():
        raise EnvironmentProblem(
            f"{LIVEKIT_SERVER}: not built (SFU server 'livekit' is built from the Go module "
            "proxy): run bash scripts/setup.sh"
        )
    return LIVEKIT_SERVER


def client_bundle() -> Path:
    """The bundled livekit-client the room pages load, or EnvironmentProblem saying how
    to make it (before any browser waits for a page that cannot join)."""
    if not CLIENT_BUNDLE.is_file():
        raise EnvironmentProblem(
            f"{CLIENT_BUNDLE}: not bundled (the room pages of SFU server 'livekit' load the "
            "livekit-client SDK from it): run bash scripts/setup.sh"
        )
    return CLIENT_BUNDLE


def livekit_config(addr: str, http_port: int, key: str, secret: str) -> dict[str, Any]:
    """LiveKit's configuration for a host reached at lab address ``addr``."""
    return {
        "port": http_port,
        "bind_addresses": [addr],
        "rtc": {
            "udp_port": RTC_UDP_PORT,
            "tcp_port": 0,  # no ICE over TCP: its listener would take every address
            "node_ip": addr,
            "use_external_ip": False,
            "ips": {"includes": [f"{addr}/32"]},
        },
        "keys": {key: secret},
        "logging": {"level": "info"},
        "room": {"enabled_codecs": [{"mime": "audio/opus"}, {"mime": "video/vp8"}]},
        "turn": {"enabled": False},
    }


def to_yaml(value: Any, indent: int = 0) -> str:
    """``value`` (mappings, lists, strings, numbers, booleans) as block YAML; every string
    is written double-quoted (JSON's quoting is YAML's)."""
    pad = " " * indent
    lines = []
    items = value.items() if isinstance(value, Mapping) else ((None, v) for v in value)
    for key, item in items:
        lead = f"{pad}{key}:" if key is not None else f"{pad}-"
        if isinstance(item, Mapping | list) and item:
            nested = to_yaml(item, indent + 2)
            if key is None and isinstance(item, Mapping):  # "- first: x" then the rest
                lines.append(f"{lead} {nested[indent + 2 :]}")
                continue
            lines.append(f"{lead}\n{nested}")
        else:
            lines.append(f"{lead} {json.dumps(item)}\n")
    return "".join(lines)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def access_token(
    key: str, secret: str, identity: str, room: str, *, publish: bool, now: float | None = None
) -> str:
    """A participant's access token: a JWT signed with HMAC-SHA256 (HS256) by the API
    ``secret``, issued by ``key``, for ``identity`` to join ``room`` and publish (a
    publisher) or subscribe (a subscriber), valid from a minute before ``now`` for a day."""
    issued = int(time.time() if now is None else now)
    claims = {
        "iss": key,
        "sub": identity,
        "name": identity,
        "nbf": issued - 60,
        "exp": issued + TOKEN_TTL_S,
        "video": {"room": room, "roomJoin": True, "canPublish": publish,
                  "canSubscribe": not publish, "canPublishData": False},
    }  # fmt: skip
    return signed_jwt(claims, secret)


def signed_jwt(claims: Mapping[str, Any], secret: str) -> str:
    """``claims`` as a compact JWT (RFC 7519) signed with HMAC-SHA256 by ``secret``."""
    header = {"alg": "HS256", "typ": "JWT"}
    signed = ".".join(_b64(json.dumps(part, separators=(",", ":")).encode())
                      for part in (header, claims))  # fmt: skip
    signature = hmac.new(secret.encode(), signed.encode("ascii"), hashlib.sha256).digest()
    return f"{signed}.{_b64(signature)}"


class LiveKitServer(SfuServer):
    """One livekit-server in a host's namespace, configured in ``sfus/NAME/`` of the run."""

    kind: ClassVar[str] = "livekit"
    program: ClassVar[str] = LIVEKIT_SERVER.name

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """As :class:`SfuServer`; the run's API key and secret are made here."""
        self.api_key = f"{API_KEY_PREFIX}{secrets.token_hex(4)}"
        self.api_secret = secrets.token_urlsafe(32)  # LiveKit wants 32 characters or more
        super().__init__(*args, **kwargs)

    def argv(self) -> list[str]:
        """``livekit-server --config sfus/NAME/livekit.yaml``."""
        return [str(livekit_binary()), "--config", str(self.directory / rundir.LIVEKIT_CONFIG)]

    def config_files(self) -> dict[str, str]:
        """livekit.yaml."""
        config = livekit_config(self.addr, self.spec.http_port, self.api_key, self.api_secret)
        return {rundir.LIVEKIT_CONFIG: to_yaml(config)}

    @property
    def ready_url(self) -> str:
        """Its HTTP endpoint's health check."""
        return f"http://{self.addr}:{self.spec.http_port}/"

    def accept(self, answer: str) -> dict[str, Any]:
        """Its version (``livekit-server --version``); SfuError unless it answered OK."""
        if answer.strip() != "OK":
            raise SfuError(f"SFU '{self.name}' (livekit) answered {self.ready_url} with "
                           f"{answer.strip()[:80]!r}, not OK")  # fmt: skip
        return {"version": livekit_version()}

    def join(self, room: Room, member: str) -> tuple[str, dict[str, str]]:
        """livekit.html: the signalling URL and the member's access token."""
        client_bundle()
        publisher = member in room.publishers
        token = access_token(self.api_key, self.api_secret, member, room.name, publish=publisher)
        return "livekit.html", {"url": f"ws://{self.addr}:{self.spec.http_port}",
                                "token": token,
                                "role": "publisher" if publisher else "subscriber",
                                "publishers": ",".join(room.publishers)}  # fmt: skip

    def load_args(self, load: Load) -> list[str]:
        """Its signalling URL, a room named after the load, the run's API key
        (latlab-loadgen makes its participants' tokens; the secret: :meth:`load_env`)."""
        url = f"ws://{self.addr}:{self.spec.http_port}"
        return ["--sfu", "livekit", "--url", url, "--room", load.name, "--key", self.api_key]

    def load_env(self, load: Load) -> dict[str, str]:
        """The API secret, in latlab-loadgen's environment: on its command line it would be
        in run.json and in every user's process list."""
        return {LOADGEN_SECRET_VARIABLE: self.api_secret}

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """The runner's environment less the variables livekit-server takes settings from."""
        return server_environment(env)

    def why(self) -> str:
        """Its complaints (a Go runtime's fatal error or panic, a logged ERROR or FATAL),
        else the last lines it printed: start-up errors on stdout, its log on stderr."""
        found = []
        for log in (self.child.stdout_log, self.child.stderr_log):
            text = log.read_text(errors="replace") if log.is_file() else ""
            found.append([line.strip() for line in text.splitlines() if line.strip()])
        complaints = [line for line in (*found[0], *found[1]) if line.startswith(FATAL)
                      or any(f"\t{level}\t" in line for level in ("ERROR", "FATAL"))]  # fmt: skip
        lines = complaints[:2] or found[0][-3:] or found[1][-3:]
        return " | ".join(line[:240] for line in lines) or "(it printed nothing)"

    def describe_kind(self) -> dict[str, Any]:
        """Its version, API key (the secret stays in its configuration) and media port."""
        return {"version": self.info.get("version"), "api_key": self.api_key,
                "rtc_udp_port": RTC_UDP_PORT}  # fmt: skip


def server_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the variables livekit-server reads as settings (``LIVEKIT_*``,
    ``NODE_IP``, ``UDP_PORT``, ``REDIS_HOST``, ``REDIS_PASSWORD``): a run's server takes
    its settings from its configuration file only."""
    return {name: value for name, value in env.items() if
            not name.startswith(SETTING_PREFIX) and name not in SETTING_VARIABLES}  # fmt: skip


def livekit_version() -> str | None:
    """``1.9.12`` from ``livekit-server --version`` (None if it does not say)."""
    try:
        result = subprocess.run([str(livekit_binary()), "--version"], capture_output=True,
                                text=True, timeout=10, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    words = result.stdout.split()
    return words[-1] if words else None
