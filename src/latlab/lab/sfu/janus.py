"""Janus's videoroom as an SFU lab host (``server = "janus"``).

latlab writes Janus's configuration into the run directory (``sfus/NAME/``): only the
videoroom plugin and the HTTP transport, both bound to the host's lab addresses (the
HTTP API on the first, ICE candidates on all of them), a fixed RTP port range, a room
(1234) without a bitrate cap, the log to ``sfus/NAME/janus.log``; the DTLS certificate
is generated in memory (docs/research/janus-spike.md). It is ready when its HTTP API
answers ``/janus/info`` with the videoroom plugin; latlab then records the sockets it
listens on. Stopped with SIGINT (it says "Bye!" in 1-2 s), then SIGTERM, SIGKILL
(:mod:`latlab.lab.sfu.base`).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from latlab import rundir
from latlab.errors import EnvironmentProblem
from latlab.lab.scenario import Load, Room
from latlab.lab.sfu.base import SfuError, SfuServer

JANUS = "janus"
JANUS_LIB = Path("/usr/lib/x86_64-linux-gnu/janus")
ROOM = 1234
RTP_PORTS = "20000-20999"
VIDEOROOM = "janus.plugin.videoroom"
FIRST_FEED = 1000  # a publisher's feed id: this plus its place among the room's publishers
OTHER_PLUGINS = ("audiobridge", "duktape", "echotest", "lua", "nosip", "recordplay", "sip",
                 "streaming", "textroom", "videocall", "voicemail")  # fmt: skip
OTHER_TRANSPORTS = ("websockets", "mqtt", "nanomsg", "pfunix", "rabbitmq")


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
	publishers = 100
	bitrate = 0
	fir_freq = 0
	audiocodec = "opus"
	videocodec = "vp8"
	record = false
}}
"""
    return {"janus.jcfg": main, "janus.transport.http.jcfg": http,
            "janus.plugin.videoroom.jcfg": videoroom}  # fmt: skip


class JanusServer(SfuServer):
    """One Janus in a host's namespace, configured in ``sfus/NAME/`` of the run."""

    kind: ClassVar[str] = "janus"
    program: ClassVar[str] = "janus"

    def argv(self) -> list[str]:
        """``janus -C sfus/NAME/janus.jcfg -F sfus/NAME``."""
        return [janus_binary(), "-C", str(self.directory / "janus.jcfg"), "-F",
                str(self.directory)]  # fmt: skip

    def config_files(self) -> dict[str, str]:
        """janus.jcfg, the HTTP transport's and the videoroom plugin's."""
        return janus_config(self.directory, self.addrs, self.spec.http_port)

    @property
    def ready_url(self) -> str:
        """``/janus/info`` of its HTTP API (the transports load after the plugins)."""
        return f"{self.api_url}/info"

    @property
    def api_url(self) -> str:
        """Its HTTP API, on the host's first lab address."""
        return f"http://{self.addr}:{self.spec.http_port}/janus"

    def gst_publisher_args(self, room: Room, member: str) -> list[str]:
        """Its HTTP API, the room and the member's feed id (as a browser's)."""
        return ["--janus", self.api_url, "--room", str(ROOM), "--feed",
                str(feed_id(room, member))]  # fmt: skip

    def load_args(self, load: Load) -> list[str]:
        """Its HTTP API and the room (latlab-loadgen signals over the same API)."""
        return ["--sfu", "janus", "--url", self.api_url, "--room", str(ROOM)]

    def accept(self, answer: str) -> dict[str, Any]:
        """Its version and plugins; SfuError unless the videoroom plugin is among them."""
        try:
            info = json.loads(answer)
        except ValueError:
            info = {}
        plugins = sorted(info.get("plugins", {})) if isinstance(info, dict) else []
        if VIDEOROOM not in plugins:
            raise SfuError(f"SFU '{self.name}' (janus) answered {self.ready_url} without the "
                           f"videoroom plugin: {self.why()}")  # fmt: skip
        return {"version_string": info.get("version_string"), "plugins": plugins}

    def join(self, room: Room, member: str) -> tuple[str, dict[str, str]]:
        """sfu.html: the API, the room, a publisher's feed id or a subscriber's feeds."""
        query = {"janus": self.api_url, "room": str(ROOM)}
        if member in room.publishers:
            query.update(role="publisher", feed=str(feed_id(room, member)))
        else:
            feeds = ",".join(str(feed_id(room, p)) for p in room.publishers)
            query.update(role="subscriber", feeds=feeds)
        return "sfu.html", query

    def log_file(self) -> Path:
        """``sfus/NAME/janus.log``."""
        return self.directory / rundir.SFU_LOG

    def describe_kind(self) -> dict[str, Any]:
        """The room, the version and plugins its API reported."""
        return {"room": ROOM, "version": self.info.get("version_string"),
                "plugins": self.info.get("plugins", [])}  # fmt: skip


def feed_id(room: Room, publisher: str) -> int:
    """A publisher's feed id in Janus's room."""
    return FIRST_FEED + room.publishers.index(publisher)
