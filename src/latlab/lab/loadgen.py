"""Light WebRTC participants as load on an SFU (``[loads.NAME]``, docs/sfu.md).

Browsers that encode three simulcast layers exhaust a small machine long before an SFU
does, so the load is ``latlab-loadgen`` (``loadgen/``, Go with pion/webrtc, built by
the set-up command): one process on the load's host running every participant of the
table, with real ICE, DTLS, SRTP and RTCP feedback but no codec work. Its publishers
send pre-encoded media in a loop, its subscribers read RTP without decoding.

The media are made once with GStreamer and kept in latlab's cache
(``~/.cache/latlab/load-media``, or under ``$XDG_CACHE_HOME``): ten seconds of VP8 at
640x360, 30 fps, a key frame every two seconds, at the asked bitrate in constant-bitrate
mode (IVF; a moving SMPTE pattern: the bouncing ball, too easy to code, came out at 85
kbit/s for 600 asked, the moving bars at 566), and Opus
pink noise in 20 ms frames (Ogg; pink noise rather than a tone, whose equal-sized
packets no header tells apart through an SFU). Each is written to a temporary file
beside its final name and renamed, so a killed run leaves no half file behind.

The generator is ready when it prints ``ready`` (every publisher sending, every
subscriber receiving every publisher's tracks); it is stopped with SIGINT (it leaves
the room and prints a ``summary`` JSON line, kept in run.json), then SIGTERM, SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from latlab import rundir
from latlab.errors import EnvironmentProblem, MeasurementError
from latlab.lab.process import ChildProcess
from latlab.lab.scenario import Load

REPO = Path(__file__).resolve().parents[3]
LOADGEN = REPO / "build" / "loadgen" / "latlab-loadgen"
MEDIA_SECONDS = 10
MEDIA_VERSION = "v2"  # in the cached files' names: a change to how they are made is a new one
VIDEO_SIZE = (640, 360)
VIDEO_FPS = 30
KEYFRAME_EVERY = 60  # frames
READY_MARKER = "ready"
STOP_STEPS = (
    (signal.SIGINT, "sigint", 4.0),
    (signal.SIGTERM, "sigterm", 2.0),
    (signal.SIGKILL, "sigkill", None),
)
MEDIA_TIMEOUT_S = 120.0


class LoadError(MeasurementError):
    """A load generator that failed to start or to get media flowing; ``str()`` names it."""


def loadgen_binary() -> Path:
    """The built ``latlab-loadgen``, or EnvironmentProblem naming what to run."""
    if not os.access(LOADGEN, os.X_OK):
        raise EnvironmentProblem(
            f"{LOADGEN} not found ([loads.NAME] needs latlab's load generator): "
            "run bash scripts/setup.sh"
        )
    return LOADGEN


def cache_dir() -> Path:
    """latlab's cache of generated media (created, private to the user)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    directory = base / "latlab" / "load-media"
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    return directory


def video_pipeline(kbps: int, out: Path) -> list[str]:
    """gst-launch-1.0 argv that writes the load's VP8 file."""
    width, height = VIDEO_SIZE
    return ["gst-launch-1.0", "-q", "videotestsrc", "pattern=smpte", "horizontal-speed=4",
            f"num-buffers={MEDIA_SECONDS * VIDEO_FPS}", "!",
            f"video/x-raw,width={width},height={height},framerate={VIDEO_FPS}/1", "!",
            "vp8enc", "deadline=1", "end-usage=cbr", f"target-bitrate={kbps * 1000}",
            f"keyframe-max-dist={KEYFRAME_EVERY}", "!", "avmux_ivf", "!",
            "filesink", f"location={out}"]  # fmt: skip


def audio_pipeline(out: Path) -> list[str]:
    """gst-launch-1.0 argv that writes the load's Opus file."""
    buffers = MEDIA_SECONDS * 50
    return ["gst-launch-1.0", "-q", "audiotestsrc", "wave=pink-noise", "volume=0.3",
            "samplesperbuffer=960", f"num-buffers={buffers}", "!",
            "audio/x-raw,rate=48000,channels=2", "!", "opusenc", "bitrate-type=vbr",
            "frame-size=20", "!", "oggmux", "!", "filesink", f"location={out}"]  # fmt: skip


def load_media(video_kbps: int, audio: bool) -> tuple[Path | None, Path | None]:
    """The cached media for a load (made now if missing): (VP8 IVF, Opus Ogg)."""
    directory = cache_dir()
    video = audio_file = None
    if video_kbps:
        width, height = VIDEO_SIZE
        video = directory / f"vp8-{width}x{height}-{VIDEO_FPS}fps-{video_kbps}k-{MEDIA_VERSION}.ivf"
        _make(video, video_pipeline(video_kbps, _partial(video)))
    if audio:
        audio_file = directory / f"opus-pink-20ms-{MEDIA_VERSION}.ogg"
        _make(audio_file, audio_pipeline(_partial(audio_file)))
    return video, audio_file


def _partial(final: Path) -> Path:
    return final.with_name(f".{final.name}.partial-{os.getpid()}")


def _make(final: Path, argv: list[str]) -> None:
    """Run ``argv`` (which writes ``_partial(final)``) unless ``final`` exists; rename."""
    if final.is_file():
        return
    partial = _partial(final)
    try:
        result = subprocess.run(argv, capture_output=True, text=True,
                                timeout=MEDIA_TIMEOUT_S, check=False)  # fmt: skip
        if result.returncode != 0 or not partial.is_file():
            why = " ".join(result.stderr.split()) or f"exit code {result.returncode}"
            raise EnvironmentProblem(f"cannot make the load's media {final.name}: {why}")
        os.replace(partial, final)
    finally:
        partial.unlink(missing_ok=True)


class LoadGenerator:
    """One ``latlab-loadgen`` in its host's namespace."""

    def __init__(
        self,
        load: Load,
        namespace: str,
        ice_ip: str,
        signalling: Sequence[str],
        run_dir: Path,
        exited: threading.Event,
    ) -> None:
        """``signalling`` are the generator's arguments that name the SFU (``--sfu``,
        ``--url``, ...), from the SFU's server."""
        self.load = load
        self.run_dir = run_dir
        video, audio = load_media(load.video_kbps, load.audio)
        self.stats = rundir.load_stats(run_dir, load.name)
        self.stats.parent.mkdir(parents=True, exist_ok=True)
        argv = [str(loadgen_binary()), *signalling,
                "--publishers", str(load.publishers), "--subscribers", str(load.subscribers),
                "--ice-ip", ice_ip, "--name", load.name,
                "--ready-timeout", f"{load.timeout_s:g}s", "--stats", str(self.stats)]  # fmt: skip
        argv += ["--video", str(video)] if video else []
        argv += ["--audio", str(audio)] if audio else []
        stdout_log, stderr_log = rundir.process_logs(run_dir, load.name)
        self.summary: dict[str, Any] | None = None
        self.child = ChildProcess(
            name=load.name,
            argv=["ip", "netns", "exec", namespace, *argv],
            stdout_log=stdout_log,
            stderr_log=stderr_log,
            exited=exited,
            ready_marker=READY_MARKER,
            on_line=self._line,
            stop_steps=STOP_STEPS,
        )

    def _line(self, line: str) -> None:
        if line.startswith("{"):
            try:
                record = json.loads(line)
            except ValueError:
                return
            if isinstance(record, dict) and record.get("type") == "summary":
                self.summary = record

    def start(self, env: Mapping[str, str]) -> None:
        """Start the generator and wait until its media flow (LoadError if not)."""
        self.child.stdout_log.parent.mkdir(parents=True, exist_ok=True)
        self.child.start(env)
        # the generator gives up itself after timeout_s; a little longer here for its word
        if not self.child.wait_ready(self.load.timeout_s + 5.0):
            self.child.stop()
            raise LoadError(f"load '{self.load.name}' ({self.load.publishers} publishers, "
                            f"{self.load.subscribers} subscribers) got no media flowing: "
                            f"{self.child.stderr_summary()}")  # fmt: skip

    def check(self) -> None:
        """LoadError if the generator exited on its own."""
        code = self.child.died()
        if code is not None:
            raise LoadError(f"load '{self.load.name}' exited during the run (exit code "
                            f"{code}): {self.child.stderr_summary()}")  # fmt: skip

    def stop(self) -> str:
        """SIGINT (leave the room, print the summary), then SIGTERM, SIGKILL."""
        return self.child.stop()

    def describe(self, origin_ns: int) -> dict[str, Any]:
        """The load's run.json entry."""
        return {"sfu": self.load.sfu, "host": self.load.host,
                "publishers": self.load.publishers, "subscribers": self.load.subscribers,
                "video_kbps": self.load.video_kbps, "audio": self.load.audio,
                "argv": self.child.argv, "stats": str(self.stats.relative_to(self.run_dir)),
                "summary": self.summary, **self.child.describe(origin_ns)}  # fmt: skip
