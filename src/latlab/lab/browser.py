"""Browser peers: the management namespace, the page server, Chromium and call readiness.

A scenario with browser processes gets one more namespace, ``llab-<pid>-_pages`` (a
host name cannot start with ``_``), running latlab's page and signalling server
(:mod:`latlab.lab.pageserver`). Each host with a browser is joined to it by its own
veth, ``ll<pid>m<k>a`` (in the host, ``10.78.<k>.2/30``) to ``ll<pid>m<k>b`` (in the
server's namespace, ``10.78.<k>.1/30``); the server's namespace does not forward and
the management address routes only to the server (routing table 78), so signalling and
records never cross the emulated links, and the page signals only ICE candidates of
its host's address on the call's link, so media does. Removing the
namespace removes the veths and the server; the stale cleanup removes leftovers like
any ``llab-<pid>-*`` namespace.

Each browser is ``/usr/lib/chromium/chromium`` (headless) started in its host's
namespace, with its own profile directory ``browsers/profiles/NAME`` and the fake audio
capture device reading a WAV file. It is ready when its page said hello, its peer
connection is connected and frames passed its sender and receiver transforms, as the
page server reports.

A ``webrtc = "gstreamer"`` process is latlab's webrtcbin peer (:mod:`latlab.lab.gstpeer`),
run with the system's ``/usr/bin/python3`` (which has ``gi``) in its host's namespace,
traced like a pipeline, connected to the same page server over its host's management
veth. Its records (hello, states, first media, console) go to ``webrtc/NAME.jsonl``; it
is ready under the same condition as a browser: connected, and its first buffers
passed into webrtcbin (send) and reached its sink (receive). It stops like a pipeline:
SIGINT (EOS), then SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlencode

from latlab.errors import MeasurementError
from latlab.ingest.chrome_trace import chrome_trace_path
from latlab.lab import owner
from latlab.lab.netns import Lab, LabError, add_namespace, delete_namespace, ip, namespace_name
from latlab.lab.process import STOP_STEPS as PIPELINE_STOP_STEPS
from latlab.lab.process import ChildProcess
from latlab.lab.quality import QualityClip, QualityError
from latlab.lab.quality import prepare as prepare_quality
from latlab.lab.scenario import Call, Process, Room, Scenario
from latlab.lab.sfu import SfuServer
from latlab.lab.signals import signals_deferred
from latlab.rundir import BROWSER_RECORDS_SUFFIX, BROWSERS, DEVTOOLS_SUFFIX, LOGS, PAGESERVER_LOG

CHROMIUM = Path("/usr/lib/chromium/chromium")  # the /usr/bin wrapper misbehaves here
DEVTOOLS_FLAGS = ("--remote-debugging-port=0",)  # its port: PROFILE/DevToolsActivePort
DEVTOOLS_TIMEOUT_S = 10.0  # the close client (lab.devtools), its start-up included
TRACE_FINISH_S = 5.0  # for Chromium to finish its trace file once asked to close
TRACE_CATEGORIES = "webrtc,audio"  # the audio functions ingest.chrome_trace follows
# A page that records its remote audio (the black box) plays it through its tap: the
# WebAudio sink's FIFO and the AudioContext's render quanta place each sample
# (stitch.browser_receiver).
TAP_TRACE_CATEGORIES = "disabled-by-default-mediastream,webaudio"
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-gpu",
    "--use-fake-device-for-media-stream",
    "--use-fake-ui-for-media-stream",
    "--autoplay-policy=no-user-gesture-required",
    "--enable-logging=stderr",
    "--v=0",
)
WEBRTC_DIR = "webrtc"  # records of the webrtcbin peers
SYSTEM_PYTHON = Path("/usr/bin/python3")  # has gi (PyGObject); the project's venv has not
GST_PEER = Path(__file__).resolve().parent / "gstpeer.py"
GI_CHECK = (
    "import gi; gi.require_version('Gst', '1.0'); gi.require_version('GstWebRTC', '1.0');"
    " gi.require_version('GstSdp', '1.0'); from gi.repository import Gst; Gst.init(None);"
    " assert Gst.ElementFactory.find('webrtcbin'), 'no webrtcbin element';"
    " assert Gst.ElementFactory.find('nicesrc'), 'no libnice elements (gstreamer1.0-nice)'"
)
PROFILES_DIR = "profiles"
DEFAULT_AUDIO = "tone-440hz.wav"
# An SFU publisher's default: Opus codes a steady tone into packets of one size, which
# no header field tells apart through an SFU (docs/sfu.md); noise varies them.
DEFAULT_NOISE = "pink-noise.wav"
PAGES_HOST = "_pages"
SUBNET_BASE = "10.78"
PORT = 8080
MGMT_TABLE = 78  # routing table of the management address in each host
SERVER_READY_TIMEOUT_S = 10.0
POLL_S = 0.1
NEVER = "\0"  # a browser prints no readiness line: the page server reports it
STOP_STEPS: tuple[tuple[signal.Signals, str, float | None], ...] = (
    (signal.SIGTERM, "sigterm", 3.0),
    (signal.SIGKILL, "sigkill", None),
)
# Chromium's stderr lines that say nothing about a failure (no D-Bus, no sound card).
_NOISE = (":INFO:", "dbus/", "D-Bus", "ALSA", "alsa_", "Fontconfig", "gpu_init", "viz_main",
          "sandbox", "idle_linux", "DevTools listening", "vaapi_wrapper")  # fmt: skip
_LINE_MAX = 160
_CLK_TCK = os.sysconf("SC_CLK_TCK")


class BrowserError(MeasurementError, RuntimeError):
    """A browser or the page server failed; ``str()`` is one line naming it."""


def pages_namespace(pid: int) -> str:
    """Name of the page server's namespace owned by process ``pid``."""
    return namespace_name(pid, PAGES_HOST)


def pages_veths(pid: int, index: int) -> tuple[str, str]:
    """Veth ends joining host ``index`` (host side, server side)."""
    return (f"ll{pid}m{index}a", f"ll{pid}m{index}b")


def generate_tone(path: Path, seconds: int = 10, wave: str = "sine") -> Path:
    """A 440 Hz sine (or another audiotestsrc ``wave``), 48 kHz mono S16LE WAV (Chromium
    loops it); BrowserError on failure."""
    argv = ["gst-launch-1.0", "-q", "audiotestsrc", f"num-buffers={seconds * 100}",
            "samplesperbuffer=480", f"wave={wave}", "freq=440", "volume=0.3", "!",
            "audio/x-raw,rate=48000,channels=1,format=S16LE", "!", "wavenc", "!",
            "filesink", f"location={path}"]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0 or not path.is_file():
        raise BrowserError(f"cannot generate the test tone {path}: {result.stderr.strip()}")
    return path


def chromium_version() -> str | None:
    """``chromium --version``'s line, e.g. ``Chromium 156.0.8078.79`` (None if it fails)."""
    try:
        result = subprocess.run(
            [str(CHROMIUM), "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() or None


def check_gst_peer() -> None:
    """BrowserError unless the system python can run the webrtcbin peer."""
    try:
        result = subprocess.run([str(SYSTEM_PYTHON), "-c", GI_CHECK], capture_output=True,
                                text=True, timeout=20, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BrowserError(f"{SYSTEM_PYTHON}: cannot run the webrtcbin peer: {exc}") from None
    if result.returncode != 0:
        lines = [s for s in result.stderr.strip().splitlines() if s.strip()] or ["failed"]
        raise BrowserError(
            f"{SYSTEM_PYTHON} cannot run the webrtcbin peer: {lines[-1].strip()} "
            "(needs python3-gi, gir1.2-gst-plugins-bad-1.0, gstreamer1.0-nice)"
        )


def check_browsers(scenario: Scenario) -> None:
    """BrowserError for what can be checked before anything starts: binary, audio files,
    and for webrtcbin peers the system python with gi."""
    if any(p.webrtc for p in scenario.processes):
        check_gst_peer()
    browsers = [p for p in scenario.processes if p.browser]
    if browsers and not os.access(CHROMIUM, os.X_OK):
        raise BrowserError(f"{CHROMIUM} not found: run bash scripts/setup.sh")
    for proc in browsers:
        if proc.audio_file is None:
            continue
        try:
            with open(proc.audio_file, "rb") as wav:
                riff = wav.read(12)
        except OSError as exc:
            raise BrowserError(
                f"process '{proc.name}': audio_file {proc.audio_file}: {exc.strerror}"
            ) from None
        if riff[:4] != b"RIFF" or riff[8:12] != b"WAVE":
            raise BrowserError(
                f"process '{proc.name}': audio_file {proc.audio_file}: not a WAV file "
                "(Chromium's fake capture device reads WAV)"
            )


def tree_cpu_s(pid: int) -> float:
    """CPU time (user + system, s) of ``pid`` and all its descendants alive now."""
    parents: dict[int, int] = {}
    times: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = int(fields[11]) + int(fields[12])
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = [p for p, pp in parents.items() if pp == parent and p not in tree]
        tree.update(children)
        frontier += children
    return sum(times.get(p, 0) for p in tree) / _CLK_TCK


@dataclass
class PeerState:
    """What the page server reported about one page."""

    hello_ns: int | None = None
    states: dict[str, str] = field(default_factory=dict)
    frame_sides: set[str] = field(default_factory=set)
    media_ns: int | None = None
    closed: bool = False

    @property
    def media_flows(self) -> bool:
        """Connected, and frames passed both transforms (a call), or its video flows (an
        SFU participant: sent by a publisher, decoded by a subscriber)."""
        if self.states.get("connection") != "connected":
            return False
        return {"send", "recv"} <= self.frame_sides or self.states.get("media") == "flowing"


class PeerTracker:
    """Collects the page server's ``event`` lines; waits for conditions on them."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.peers: dict[str, PeerState] = {}

    def on_line(self, line: str) -> None:
        """One stdout line of the page server."""
        words = line.split(" ", 3)
        if len(words) < 3 or words[0] != "event":
            return
        now = time.monotonic_ns()
        with self.cond:
            peer = self.peers.setdefault(words[1], PeerState())
            if words[2] == "hello" and peer.hello_ns is None:
                peer.hello_ns = now
            elif words[2] == "state" and len(words) == 4:
                what, _, value = words[3].partition(" ")
                peer.states[what] = value
            elif words[2] == "frame" and len(words) == 4:
                peer.frame_sides.add(words[3])
            elif words[2] == "closed":
                peer.closed = True
            if peer.media_ns is None and peer.media_flows:
                peer.media_ns = now
            self.cond.notify_all()

    def state(self, name: str) -> PeerState:
        """The state of page ``name`` (empty before its first event)."""
        with self.cond:
            return self.peers.setdefault(name, PeerState())

    def wait(self, done: Callable[[], bool], deadline: float, abort: Callable[[], None]) -> bool:
        """Wait until ``done()`` or the monotonic ``deadline``; ``abort()`` may raise."""
        with self.cond:
            while not done():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.cond.wait(min(remaining, POLL_S))
                abort()
        return True


class BrowserLab:
    """The page server's namespace and process for a scenario's browsers (if it has any).

    Use as a context manager inside the :class:`~latlab.lab.netns.Lab`; leaving it stops
    the server and removes its namespace (also at interpreter exit as a last resort).
    """

    def __init__(
        self, scenario: Scenario, lab: Lab, run_dir: Path, exited: threading.Event
    ) -> None:
        self.scenario = scenario
        self.lab = lab
        self.run_dir = run_dir
        self.exited = exited
        self.browsers = [p for p in scenario.processes if p.browser]
        self.gst_peers = [p for p in scenario.processes if p.webrtc]
        self.hosts = list(dict.fromkeys(p.host for p in scenario.processes if p.call_peer))
        self.namespace = pages_namespace(lab.pid)
        self.tracker = PeerTracker()
        self.server: ChildProcess | None = None
        self.default_audio: Path | None = None
        self.default_noise: Path | None = None
        self._created = False
        self.cpu_at_ready: dict[str, float] = {}
        self.cpu_at_stop: dict[str, float] = {}
        self.states_at_stop: dict[str, dict[str, str]] = {}
        self.version: str | None = None
        self.captures: dict[str, Path] = {}  # browser -> the file it captures instead
        self.recorders: set[str] = set()  # browsers that record their remote audio
        self.peer_recorders: dict[str, str] = {}  # a webrtcbin peer's ${signal.sink}
        self.sfus: dict[str, SfuServer] = {}  # the running SFUs rooms meet through
        self.room_urls: dict[str, str] = {}  # a room member's page (its token, once made)
        self.quality: QualityClip | None = None  # a quality room's clip (lab.quality)
        self.tmp_dir: Path | None = None  # the browsers' TMPDIR (env), removed by down

    def use_signal(
        self, captures: dict[str, Path], recorders: set[str], peers: dict[str, str] | None = None
    ) -> None:
        """The black box's browser ends (``[signal]``): who captures the signal file, who
        records what it receives, and a webrtcbin peer that records it (with its
        ``${signal.sink}`` fragment); before the browsers start."""
        self.captures, self.recorders = dict(captures), set(recorders)
        self.peer_recorders = dict(peers or {})

    @property
    def active(self) -> bool:
        """Whether the scenario has browsers or webrtcbin peers."""
        return bool(self.browsers or self.gst_peers)

    def __enter__(self) -> BrowserLab:
        if not self.active:
            return self
        atexit.register(self.down)
        try:
            if self.browsers:
                self.records_dir.mkdir(parents=True, exist_ok=True)
                self.tmp_dir = Path(tempfile.mkdtemp(prefix="chromium-", dir=owner.private_tmp()))
                self.version = chromium_version()
                try:
                    self.quality = prepare_quality(self.scenario, self.run_dir)
                except QualityError as exc:
                    raise BrowserError(str(exc)) from None
            defaults = {self._default_audio_name(p) for p in self.browsers
                        if p.audio_file is None and p.name not in self.captures
                        and not self._plays_clip(p)}  # fmt: skip
            if DEFAULT_AUDIO in defaults:
                self.default_audio = generate_tone(self.records_dir / DEFAULT_AUDIO)
            if DEFAULT_NOISE in defaults:
                self.default_noise = generate_tone(self.records_dir / DEFAULT_NOISE,
                                                   wave="pink-noise")  # fmt: skip
            self._network()
            self._start_server()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.down()

    @property
    def records_dir(self) -> Path:
        """``<run dir>/browsers``."""
        return self.run_dir / BROWSERS

    @property
    def webrtc_dir(self) -> Path:
        """``<run dir>/webrtc``: the webrtcbin peers' records."""
        return self.run_dir / WEBRTC_DIR

    def records_path(self, proc: Process) -> Path:
        """Where the page server writes ``proc``'s records."""
        return (self.webrtc_dir if proc.webrtc else self.records_dir) / f"{proc.name}.jsonl"

    def env(self) -> dict[str, str]:
        """A browser's environment: latlab's, with TMPDIR in this lab's own directory.

        Chromium makes its profile lock (``org.chromium.Chromium.XXXXXX``, a socket) in
        TMPDIR and leaves it there when it is killed; in the owner's private directory
        ``down`` removes it, and after a kill -9 of latlab the next run does
        (:func:`latlab.lab.owner.private_tmp`)."""
        env = dict(os.environ)
        if self.tmp_dir is not None:
            env["TMPDIR"] = str(self.tmp_dir)
        return env

    def down(self) -> None:
        """Stop the page server, remove its namespace (with the veths) and the browsers'
        TMPDIR."""
        with signals_deferred():
            if self.server is not None:
                self.server.stop()
            if self._created:
                with contextlib.suppress(LabError):
                    delete_namespace(self.namespace)
                self._created = False
            if self.tmp_dir is not None:  # the browsers have stopped (the runner's order)
                shutil.rmtree(self.tmp_dir, ignore_errors=True)
                self.tmp_dir = None
            atexit.unregister(self.down)

    def _network(self) -> None:
        self._created = True
        add_namespace(self.namespace)  # recorded in the journal first
        for k, host in enumerate(self.hosts):
            host_end, server_end = pages_veths(self.lab.pid, k)
            host_ns = self.lab.namespace(host)
            ip("link", "add", "name", host_end, "netns", host_ns, "type", "veth",
               "peer", "name", server_end, "netns", self.namespace)  # fmt: skip
            for ns, dev, addr in ((host_ns, host_end, 2), (self.namespace, server_end, 1)):
                ip("-n", ns, "addr", "add", f"{SUBNET_BASE}.{k}.{addr}/30", "dev", dev)
                ip("-n", ns, "link", "set", dev, "up")
            self._confine(host_ns, host_end, k)

    @staticmethod
    def _confine(host_ns: str, dev: str, k: int) -> None:
        """Packets from the host's management address reach the server and nothing else.

        Chromium pairs its management-address candidate with the peer's link candidates
        even though that candidate is never signalled; without this rule, those
        connectivity checks would leave through the link under test.
        """
        table = str(MGMT_TABLE)
        ip("-n", host_ns, "route", "add", f"{SUBNET_BASE}.{k}.0/30", "dev", dev, "table", table)
        ip("-n", host_ns, "route", "add", "unreachable", "default", "table", table)
        ip("-n", host_ns, "rule", "add", "from", f"{SUBNET_BASE}.{k}.2", "lookup", table)

    def _start_server(self) -> None:
        logs = self.run_dir / LOGS
        peers = [arg for p in self.browsers for arg in ("--peer", p.name)]
        if self.gst_peers:
            peers += ["--gst-out", str(self.webrtc_dir)]
            peers += [arg for p in self.gst_peers for arg in ("--gst-peer", p.name)]
        argv = [sys.executable, "-m", "latlab.lab.pageserver", "--port", str(PORT),
                "--out", str(self.records_dir), *peers]  # fmt: skip
        self.server = ChildProcess(
            name="pageserver",
            argv=["ip", "netns", "exec", self.namespace, *argv],
            stdout_log=logs / f"{PAGESERVER_LOG}.stdout",
            stderr_log=logs / f"{PAGESERVER_LOG}.stderr",
            exited=self.exited,
            ready_marker="ready",
            on_line=self.tracker.on_line,
            stop_steps=STOP_STEPS,
        )
        self.server.start(os.environ)
        if not self.server.wait_ready(SERVER_READY_TIMEOUT_S):
            raise BrowserError(f"page server not ready: {self.server.stderr_summary()}")

    def server_url(self, host: str) -> str:
        """The page server's origin as seen from ``host``."""
        return f"http://{SUBNET_BASE}.{self.hosts.index(host)}.1:{PORT}"

    def link_addr(self, proc: Process) -> str:
        """``proc``'s host address on the link joining it to its call peer."""
        call = self.scenario.call_of(proc.name)
        assert call is not None
        other = self.scenario.process(call.callee if proc.name == call.caller else call.caller)
        return self._addrs_towards(proc.host, other.host, proc.name)[0]

    def _addrs_towards(self, host: str, other: str, who: str) -> tuple[str, str]:
        """(``host``'s address, ``other``'s address) on the link joining them."""
        try:
            return self.lab.addrs_towards(host, other)
        except LabError:
            problem = f"process '{who}': no link from host '{host}' to '{other}'"
            raise BrowserError(problem) from None

    def route_to_sfus(self, sfus: Mapping[str, SfuServer]) -> None:
        """Rooms meet through the running ``sfus`` (name -> server): a route from each
        room member's host to its SFU's address (its API and, for LiveKit, its media),
        through the link joining them (the SFU host answers for all its addresses)."""
        self.sfus = dict(sfus)
        for room in self.scenario.rooms:
            sfu_host = self.scenario.sfu(room.sfu).host
            api = self.sfus[room.sfu].addr
            for host in dict.fromkeys(self.scenario.process(m).host for m in room.members):
                _, via = self._addrs_towards(host, sfu_host, host)
                if via != api:
                    ip("-n", self.lab.namespace(host), "route", "replace", f"{api}/32", "via", via)

    def room_url(self, proc: Process) -> str:
        """The SFU participant page for ``proc``, as its room's server has it join
        (:meth:`SfuServer.join`), with three simulcast layers or one."""
        if proc.name not in self.room_urls:
            room = self.scenario.room_of(proc.name)
            assert room is not None
            page, query = self.sfus[room.sfu].join(room, proc.name)
            query = {"id": proc.name, **query, "simulcast": "1" if room.simulcast else "0"}
            if room.quality:
                query["quality"] = "1"  # record what it plays out (quality.js)
                # a subscriber is ready once it hears audio: a cell whose video does not
                # get through is measured, not failed
                query["expect"] = "audio"
            if all(self.scenario.process(p).webrtc for p in room.publishers):
                query["expect"] = "audio"  # webrtcbin publishers send Opus only
            self.room_urls[proc.name] = f"{self.server_url(proc.host)}/{page}?{urlencode(query)}"
        return self.room_urls[proc.name]

    def page_url(self, proc: Process) -> str:
        """The page URL for ``proc``: its name, its peer, its role, what to signal."""
        if self.scenario.room_of(proc.name) is not None:
            return self.room_url(proc)
        call = self.scenario.call_of(proc.name)
        assert call is not None
        caller = proc.name == call.caller
        query = {
            "id": proc.name,
            "peer": call.callee if caller else call.caller,
            "role": "caller" if caller else "callee",
            "apm": "1" if proc.audio_processing else "0",
            "ice": self.link_addr(proc),
        }
        if proc.name in self.recorders:
            query["record"] = "1"
        if proc.jitterbuffer_ms is not None:
            query["jitterbuffer_ms"] = str(proc.jitterbuffer_ms)
        if proc.video:
            query["video"] = "1"
        return f"{self.server_url(proc.host)}/?{urlencode(query)}"

    def _plays_clip(self, proc: Process) -> bool:
        """Whether ``proc`` publishes in a quality room (its capture is the clip)."""
        room = self.scenario.room_of(proc.name)
        return room is not None and room.quality and proc.name in room.publishers

    def audio_file(self, proc: Process) -> Path:
        """The WAV file ``proc`` captures."""
        if proc.name in self.captures:
            return self.captures[proc.name]
        if self.quality is not None and self._plays_clip(proc):
            return self.quality.wav
        if proc.audio_file is not None:
            return Path(proc.audio_file)
        default = self.default_noise if self._default_audio_name(proc) == DEFAULT_NOISE \
            else self.default_audio  # fmt: skip
        assert default is not None
        return default

    def _default_audio_name(self, proc: Process) -> str:
        """What ``proc`` captures without an audio file: noise for an SFU publisher, else
        the tone."""
        room = self.scenario.room_of(proc.name)
        return DEFAULT_NOISE if room is not None and proc.name in room.publishers else DEFAULT_AUDIO

    def argv(self, proc: Process) -> list[str]:
        """Chromium's argv for ``proc`` (to run inside its host's namespace)."""
        profile = self.records_dir / PROFILES_DIR / proc.name
        profile.mkdir(parents=True, exist_ok=True)
        return [
            str(CHROMIUM),
            *CHROMIUM_FLAGS,
            f"--use-file-for-fake-audio-capture={self.audio_file(proc)}",
            *self.video_flags(proc),
            f"--unsafely-treat-insecure-origin-as-secure={self.server_url(proc.host)}",
            f"--user-data-dir={profile}",
            *DEVTOOLS_FLAGS,  # closed through DevTools at the end (lab.devtools)
            *self.trace_flags(proc),
            *proc.browser_args,
            self.page_url(proc),
        ]

    def video_flags(self, proc: Process) -> list[str]:
        """A quality room's publisher: its fake camera plays the clip's coded Y4M."""
        if self.quality is None or not self._plays_clip(proc):
            return []
        return [f"--use-file-for-fake-video-capture={self.quality.y4m}"]

    def trace_flags(self, proc: Process) -> list[str]:
        """Chromium's own trace of its WebRTC audio functions, to
        browsers/traces/NAME/NAME.pftrace (``ingest.chrome_trace``)."""
        trace = chrome_trace_path(self.records_dir, proc.name)
        trace.parent.mkdir(parents=True, exist_ok=True)
        categories = TRACE_CATEGORIES
        if proc.name in self.recorders:
            categories += f",{TAP_TRACE_CATEGORIES}"
        return [
            f"--trace-startup={categories}",
            f"--trace-startup-file={trace}",
            "--trace-startup-duration=0",  # until the browser stops
        ]

    def gst_argv(self, proc: Process) -> list[str]:
        """The webrtcbin peer's argv for ``proc`` (to run inside its host's namespace): a
        call's caller or callee, or a room's publisher through its SFU."""
        k = self.hosts.index(proc.host)
        common = [str(SYSTEM_PYTHON), "-u", str(GST_PEER),
                  "--url", f"ws://{SUBNET_BASE}.{k}.1:{PORT}/ws", "--id", proc.name,
                  "--audio-caps", proc.audio_caps,
                  "--latency-ms", str(proc.jitterbuffer_ms)]  # fmt: skip
        room = self.scenario.room_of(proc.name)
        if room is not None:
            sfu = self.scenario.sfu(room.sfu)
            own, _ = self._addrs_towards(proc.host, sfu.host, proc.name)
            return [*common, "--role", "publisher", "--ice", own,
                    *self.sfus[room.sfu].gst_publisher_args(room, proc.name)]  # fmt: skip
        call = self.scenario.call_of(proc.name)
        assert call is not None
        caller = proc.name == call.caller
        record = self.peer_recorders.get(proc.name)
        return [*common, "--peer", call.callee if caller else call.caller,
                "--role", "caller" if caller else "callee",
                "--ice", self.link_addr(proc),
                *(["--record", record] if record else [])]  # fmt: skip

    def child(self, proc: Process, logs: Path) -> ChildProcess:
        """The (not yet started) browser or webrtcbin peer process for ``proc``."""
        if proc.webrtc:
            return ChildProcess(
                name=proc.name,
                argv=self.lab.exec_argv(proc.host, self.gst_argv(proc)),
                stdout_log=logs / f"{proc.name}.stdout",
                stderr_log=logs / f"{proc.name}.stderr",
                exited=self.exited,
                ready_marker=NEVER,
                stop_steps=PIPELINE_STOP_STEPS,
            )
        return ChildProcess(
            name=proc.name,
            argv=self.lab.exec_argv(proc.host, self.argv(proc)),
            stdout_log=logs / f"{proc.name}.stdout",
            stderr_log=logs / f"{proc.name}.stderr",
            exited=self.exited,
            ready_marker=NEVER,
            stop_steps=STOP_STEPS,
            close_request=lambda: self.request_close(proc),
        )

    def request_close(self, proc: Process) -> bool:
        """Ask ``proc``'s Chromium to close (DevTools ``Browser.close``), so it completes
        its trace; False (then signals stop it) if it could not be asked."""
        profile = self.records_dir / PROFILES_DIR / proc.name
        argv = [sys.executable, "-m", "latlab.lab.devtools", str(profile)]
        log = self.run_dir / LOGS / f"{proc.name}{DEVTOOLS_SUFFIX}"
        try:
            with log.open("w", encoding="utf-8") as out:
                done = subprocess.run(
                    self.lab.exec_argv(proc.host, argv),
                    stdout=out,
                    stderr=out,
                    timeout=DEVTOOLS_TIMEOUT_S,
                    check=False,
                )
        except subprocess.TimeoutExpired:
            return False
        if done.returncode != 0:
            return False
        # Chromium's tracing service renames the finished trace as the browser shuts
        # down; stopping the process group before would leave it unfinished.
        trace = chrome_trace_path(self.records_dir, proc.name)
        deadline = time.monotonic() + TRACE_FINISH_S
        while not trace.exists() and time.monotonic() < deadline:
            time.sleep(POLL_S)
        return True

    def check_server(self) -> None:
        """BrowserError if the page server has exited."""
        if self.server is not None and self.server.eof:
            code = self.server.exit_code()
            raise BrowserError(
                f"page server exited (exit code {code}): {self.server.stderr_summary()}"
            )

    def await_call(self, call: Call, children: Mapping[str, ChildProcess]) -> None:
        """Wait until both pages said hello and media flows; BrowserError naming the one
        that did not, within the call's ``timeout_s`` of the later launch."""
        deadline = self._deadline(call.between, children, call.timeout_s)
        abort = self._exit_check(call.between, children)

        for name in call.between:
            peer = self.tracker.state(name)
            if not self.tracker.wait(lambda p=peer: p.hello_ns is not None, deadline, abort):
                raise BrowserError(
                    f"process '{name}' ({self.kind(name)}): "
                    f"{'the page' if self.scenario.process(name).browser else 'it'} "
                    f"did not say hello within "
                    f"{call.timeout_s:g} s: {self.tail(name, children[name])}"
                )
        for name in call.between:
            peer = self.tracker.state(name)
            if not self.tracker.wait(lambda p=peer: p.media_ns is not None, deadline, abort):
                raise BrowserError(
                    f"process '{name}' ({self.kind(name)}): call '{call.name}': media did not flow "
                    f"within {call.timeout_s:g} s ({self._progress(peer)}): "
                    f"{self.tail(name, children[name])}"
                )
        self._ready(call.between, children)

    def await_room(self, room: Room, children: Mapping[str, ChildProcess]) -> None:
        """Wait until every member's page said hello and its media flows (a publisher
        sends video, a subscriber decodes it); BrowserError naming the first that did
        not, within the room's ``timeout_s`` of the last launch."""
        deadline = self._deadline(room.members, children, room.timeout_s)
        abort = self._exit_check(room.members, children)

        for name in room.members:
            peer = self.tracker.state(name)
            role = "publisher" if name in room.publishers else "subscriber"
            if not self.tracker.wait(lambda p=peer: p.media_ns is not None, deadline, abort):
                what = "did not say hello" if peer.hello_ns is None else "media did not flow"
                raise BrowserError(
                    f"process '{name}' (chromium, {role} in room '{room.name}'): {what} "
                    f"within {room.timeout_s:g} s ({self._progress(peer)}): "
                    f"{self.tail(name, children[name])}"
                )
        self._ready(room.members, children)

    @staticmethod
    def _deadline(
        names: Sequence[str], children: Mapping[str, ChildProcess], timeout_s: float
    ) -> float:
        """``timeout_s`` after the last of ``names`` was launched, on time.monotonic()."""
        started = max(children[n].started_ns or 0 for n in names)
        return time.monotonic() + timeout_s - (time.monotonic_ns() - started) / 1e9

    def _exit_check(
        self, names: Sequence[str], children: Mapping[str, ChildProcess]
    ) -> Callable[[], None]:
        """A check that raises BrowserError if the page server or one of ``names`` exited."""

        def abort() -> None:
            self.check_server()
            for name in names:
                child = children[name]
                if child.eof or (child.popen is not None and child.popen.poll() is not None):
                    raise BrowserError(
                        f"process '{name}' ({self.kind(name)}) exited during start-up "
                        f"(exit code {child.exit_code()}): {self.tail(name, child)}"
                    )

        return abort

    def _ready(self, names: Sequence[str], children: Mapping[str, ChildProcess]) -> None:
        """``names`` are ready as their media flows; their CPU time so far is noted."""
        for name in names:
            children[name].ready_ns = self.tracker.state(name).media_ns
            pid = children[name].pid
            self.cpu_at_ready[name] = tree_cpu_s(pid) if pid else 0.0

    def kind(self, name: str) -> str:
        """``chromium`` or ``gstreamer webrtcbin``: what process ``name`` is."""
        return self.scenario.process(name).call_peer

    @staticmethod
    def _progress(peer: PeerState) -> str:
        ice = peer.states.get("ice", "new")
        connection = peer.states.get("connection", "new")
        sides = "+".join(sorted(peer.frame_sides)) or "none"
        return f"ICE {ice}, connection {connection}, frames at: {sides}"

    def tail(self, name: str, child: ChildProcess, limit: int = 2) -> str:
        """The page's last console lines and Chromium's last meaningful stderr lines
        (a webrtcbin peer: its last stderr lines, else its last log lines)."""
        parts = []
        try:
            text = child.stderr_log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        lines = [s.strip() for s in text.splitlines() if s.strip()]
        lines = [s for s in lines if not any(n in s for n in _NOISE)][-limit:]
        console = self._console(name)[-limit:]
        if console and not (lines and self.scenario.process(name).webrtc):
            parts.append("console: " + " | ".join(console))
        if lines:
            parts.append("stderr: " + " | ".join(s[:_LINE_MAX] for s in lines))
        return "; ".join(parts) or "(no console output, nothing on stderr)"

    def _console(self, name: str) -> list[str]:
        path = self.records_path(self.scenario.process(name))
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return []
        out = []
        for line in lines:
            if '"type":"console"' in line:
                with contextlib.suppress(ValueError):
                    record = json.loads(line)
                    out.append(f"{record.get('level')}: {str(record.get('text'))[:_LINE_MAX]}")
        return out

    def describe_browser(self, proc: Process, child: ChildProcess) -> dict[str, Any]:
        """The browser's part of its run.json process entry."""
        return {
            "browser": proc.browser,
            "binary": str(CHROMIUM),
            "version": self.version,
            "url": self.page_url(proc),
            "audio_file": str(self.audio_file(proc))
            if self.default_audio or self.default_noise or proc.audio_file
            or self._plays_clip(proc)
            else None,
            "video_file": str(self.quality.y4m)
            if self.quality is not None and self._plays_clip(proc)
            else None,
            "audio_processing": proc.audio_processing,
            "jitterbuffer_ms": proc.jitterbuffer_ms,
            "video": proc.video,
            "user_data_dir": str((self.records_dir / PROFILES_DIR / proc.name)
                                 .relative_to(self.run_dir)),
            "records": f"{BROWSERS}/{proc.name}{BROWSER_RECORDS_SUFFIX}",
            **self._peer_progress(proc, child),
        }  # fmt: skip

    def describe_webrtc(self, proc: Process, child: ChildProcess) -> dict[str, Any]:
        """The webrtcbin peer's part of its run.json process entry."""
        return {
            "webrtc": proc.webrtc,
            "program": str(GST_PEER),
            "audio_caps": proc.audio_caps,
            "jitterbuffer_ms": proc.jitterbuffer_ms,
            "records": f"{WEBRTC_DIR}/{proc.name}.jsonl",
            **self._peer_progress(proc, child),
        }

    def _peer_progress(self, proc: Process, child: ChildProcess) -> dict[str, Any]:
        """A call peer's call, start-up milestones (s after launch), states and CPU time."""
        peer = self.tracker.state(proc.name)
        origin = child.started_ns or 0

        def since(ns: int | None) -> float | None:
            return None if ns is None or not origin else round((ns - origin) / 1e9, 6)

        return {
            "call": (call.name if (call := self.scenario.call_of(proc.name)) else None),
            "room": (room.name if (room := self.scenario.room_of(proc.name)) else None),
            "hello_s": since(peer.hello_ns),
            "media_s": since(peer.media_ns),
            "states": self.states_at_stop.get(proc.name, dict(peer.states)),
            "cpu_at_ready_s": self.cpu_at_ready.get(proc.name),
            "cpu_s": self.cpu_at_stop.get(proc.name),
        }

    def sample_at_stop(self, children: Mapping[str, ChildProcess]) -> None:
        """Each peer's call states and its process tree's CPU time, just before stopping
        (closing one browser disconnects the other's call)."""
        self.states_at_stop = {name: dict(self.tracker.state(name).states) for name in children}
        self.cpu_at_stop = {
            name: tree_cpu_s(child.pid)
            for name, child in children.items()
            if child.pid is not None and child.popen is not None and child.popen.poll() is None
        }
        if self.server is not None and self.server.pid is not None:
            self.cpu_at_stop[""] = tree_cpu_s(self.server.pid)

    def describe(self) -> dict[str, Any] | None:
        """The page server for run.json (None without browsers)."""
        if not self.active:
            return None
        server = self.server
        return {
            "namespace": self.namespace,
            "port": PORT,
            "hosts": {h: {"server": self.server_url(h), "interfaces": list(
                pages_veths(self.lab.pid, k)), "addr": f"{SUBNET_BASE}.{k}.2"}
                for k, h in enumerate(self.hosts)},
            "argv": server.argv if server else None,
            "pid": server.pid if server else None,
            "stopped": server.stopped if server else "not-started",
            "cpu_s": self.cpu_at_stop.get(""),
            "exit_code": server.popen.returncode if server and server.popen else None,
            "stdout": f"{LOGS}/{PAGESERVER_LOG}.stdout",
            "stderr": f"{LOGS}/{PAGESERVER_LOG}.stderr",
            "default_audio": (f"{BROWSERS}/{DEFAULT_AUDIO}" if self.default_audio else None),
        }  # fmt: skip
