"""A validated scenario as the lab uses it: frozen dataclasses, no rules.

:mod:`latlab.lab.scenario.model` decides what a file may say and builds these; code
that runs a scenario only reads them. References in strings stay unresolved until
:meth:`Scenario.resolve` (host addresses are known once the lab is up).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal, get_args

from latlab.lab.scenario.errors import Problem, ScenarioError
from latlab.lab.scenario.refs import DEVICE_ATTRS, lookup_ref, scalar_text, substitute
from latlab.lab.scenario.sweep import Sweep
from latlab.lab.sched import SchedPolicy

LinkBackend = Literal["latlab-linkemu", "netem", "auto"]  # auto: netem where the kernel has it
LINK_BACKENDS: tuple[str, ...] = get_args(LinkBackend)
BACKEND_EMULATOR = LINK_BACKENDS[0]  # latlab's own link emulator (linkemu/)
WEBRTC_AUDIO_CAPS = "audio/x-raw,rate=48000,channels=1"
WEBRTC_JITTERBUFFER_MS = 40
CALL_TIMEOUT_S = 20.0
COST_IDLE_S = 2.0  # a cost-counted process's idle baseline before the next process starts
LOAD_VIDEO_KBPS = 600  # a light publisher's pre-encoded VP8 (640x360, 30 fps)
LOAD_TIMEOUT_S = 30.0


def _frozen_map() -> Mapping[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True)
class Analysis:
    """Analysis settings: ``unit_ms`` is the length of the audio unit followed.

    ``configured_latency_ms`` (the latency the receiver is configured for, Δt_c) and
    ``period_ms`` (the capture period, t_p) are optional; when both are set, reports
    show the residual r = Δt_r - Δt_c - t_p of the measured end-to-end delay Δt_r
    (see :mod:`latlab.analysis.residual`).
    """

    unit_ms: float = 10
    configured_latency_ms: float | None = None
    period_ms: float | None = None


@dataclass(frozen=True)
class HostClock:
    """A host's planted clock: CLOCK_MONOTONIC ``offset_ms`` from the machine's (a time
    namespace) and running ``drift_ppm`` fast (libllclockskew); docs/clocks.md."""

    offset_ms: float = 0.0
    drift_ppm: float = 0.0


@dataclass(frozen=True)
class Host:
    """A host: in the lab, one network namespace; ``capture``: log its every packet;
    ``clock``: its own clock (then every host of the scenario is its own clock domain);
    ``cpus``: the CPUs its programs run on (None: any)."""

    name: str
    capture: bool = False
    clock: HostClock | None = None
    cpus: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Link:
    """A point-to-point link between two hosts: a veth pair, or through the link emulator.

    ``impairment`` holds the impairment keys given for both directions (forward is
    a -> b), ``reverse`` the overrides for b -> a, and ``schedule`` the
    ``[[links.schedule]]`` entries (``at_s``, optional ``direction`` and impairment keys)
    in time order.
    """

    a: str
    b: str
    impairment: Mapping[str, Any] = field(default_factory=_frozen_map)
    reverse: Mapping[str, Any] = field(default_factory=_frozen_map)
    schedule: tuple[Mapping[str, Any], ...] = ()
    backend: str = BACKEND_EMULATOR  # which emulator an impaired link goes through

    @property
    def between(self) -> tuple[str, str]:
        """The two hosts, in file order."""
        return (self.a, self.b)

    @property
    def impaired(self) -> bool:
        """Whether the link has any impairment (and so goes through the emulator)."""
        return bool(self.impairment or self.reverse or self.schedule)


@dataclass(frozen=True)
class Process:
    """A gst-launch-1.0 ``pipeline``, a ``command`` (argv) or a ``browser`` run on a host.

    ``pipeline``, ``command`` and ``env`` are unresolved; exactly one of ``pipeline``,
    ``command`` and ``browser`` is set. ``sched`` is the scheduling policy (None:
    inherited). A browser (``"chromium"``) captures ``audio_file`` (an absolute path;
    None: a test tone latlab generates) with the browser's audio processing on or off
    (``audio_processing``); ``browser_args`` are extra command-line flags. A WebRTC
    peer (``webrtc = "gstreamer"``: latlab's webrtcbin program) sends a tone of raw caps
    ``audio_caps`` and receives through a jitter buffer of ``jitterbuffer_ms``. In a
    browser, ``jitterbuffer_ms`` is the target its receivers' jitter buffers are held to
    (``RTCRtpReceiver.jitterBufferTarget``; None: NetEq adapts on its own); with
    ``video`` a browser in a call also sends its fake camera and records every video
    frame it presents. ``cost``:
    count the process's CPU time, context switches and syscalls with perf, idle for
    ``cost_idle_s`` before the processes after it start (its baseline), then under load.
    """

    name: str
    host: str
    pipeline: str = ""
    env: Mapping[str, str] = field(default_factory=_frozen_map)
    command: tuple[str, ...] = ()
    sched: SchedPolicy | None = None
    browser: str = ""
    audio_file: str | None = None
    audio_processing: bool = False
    browser_args: tuple[str, ...] = ()
    video: bool = False
    webrtc: str = ""
    audio_caps: str = WEBRTC_AUDIO_CAPS
    jitterbuffer_ms: int | None = WEBRTC_JITTERBUFFER_MS
    cost: bool = False
    cost_idle_s: float = COST_IDLE_S

    @property
    def call_peer(self) -> str:
        """What takes part in calls: ``chromium``, ``gstreamer webrtcbin``, or "" (neither)."""
        if self.browser:
            return self.browser
        return f"{self.webrtc} webrtcbin" if self.webrtc else ""


@dataclass(frozen=True)
class Call:
    """A 1:1 WebRTC call (``[calls.NAME]``) between two peers, media both ways.

    A peer is a browser or a webrtcbin peer. ``caller`` (the first of ``between``) makes
    the offer. The peers are ready once both said hello and media flows both ways,
    within ``timeout_s`` of launch.
    """

    name: str
    caller: str
    callee: str
    timeout_s: float = CALL_TIMEOUT_S

    @property
    def between(self) -> tuple[str, str]:
        """The two processes: caller, callee."""
        return (self.caller, self.callee)


@dataclass(frozen=True)
class Device:
    """A virtual audio device (``[devices.NAME]``): an audio server latlab runs on a host.

    ``server`` is ``"jack"`` (jackd, dummy driver) or ``"pulse"`` (PulseAudio with a
    null sink; its monitor is the capture side). ``period_frames`` and ``periods``
    are the device's period and number of periods (see ``latlab.lab.devices``).
    """

    name: str
    host: str
    server: str
    rate: int = 48000
    period_frames: int = 480
    periods: int = 2
    channels: int = 2

    @property
    def period_us(self) -> int:
        """One period in microseconds (rounded)."""
        return round(self.period_frames * 1_000_000 / self.rate)

    @property
    def buffer_us(self) -> int:
        """All periods of the buffer in microseconds."""
        return self.period_us * self.periods

    def refs(self) -> dict[str, str]:
        """Values of the ``${devices.NAME.ATTR}`` references (e.g. for ``buffer-time``)."""
        return {attr: str(getattr(self, attr)) for attr in DEVICE_ATTRS}


@dataclass(frozen=True)
class SignalEnd:
    """One end of ``[signal]``: a JACK device (``kind="jack"``, ``client`` is the JACK
    client whose ports the rig connects to), a PulseAudio device (``kind="pulse"``: the
    rig plays into its null sink or records its monitor), a GStreamer process
    (``kind="gst"``, whose pipeline holds ``${signal.source}`` or ``${signal.sink}``; a
    webrtcbin peer records through ``${signal.sink}`` off a tee before its sink) or a
    browser (``kind="browser"``: it captures the signal file, or records its remote audio)."""

    kind: str
    name: str
    client: str = ""

    def describe(self) -> dict[str, str]:
        """For run.json."""
        if self.kind == "jack":
            return {"kind": "jack", "device": self.name, "client": self.client}
        if self.kind == "pulse":
            return {"kind": "pulse", "device": self.name}
        return {"kind": self.kind, "process": self.name}


@dataclass(frozen=True)
class SignalRig:
    """A black-box measurement (``[signal]``): time-coded audio played in at ``inject``
    and recorded at ``record`` (see ``latlab.lab.signal_rig``).

    Each end is a JACK or PulseAudio device, played or recorded by latlab's client
    (``latlab.lab.jack_signal``, ``latlab.lab.pulse_signal``), or a GStreamer process
    whose pipeline plays the signal file (``${signal.source}``) or records to a file
    (``${signal.sink}``, e.g. on a tee). A code every ``interval_ms``, its sync pattern
    at ``level_dbfs``; the file is written at ``rate`` (the capture device's rate when a
    device injects).
    """

    inject: SignalEnd
    record: SignalEnd
    interval_ms: float = 200.0
    level_dbfs: float = -20.0
    rate: int = 48000


@dataclass(frozen=True)
class Room:
    """Browsers meeting through an SFU: ``publishers`` send audio and video (three
    simulcast layers with ``simulcast``), ``subscribers`` receive every publisher. With
    ``quality``, the publisher plays the quality clip and every member records what it
    plays out (``av_offset_ms``: an offset planted between the clip's audio and video)."""

    name: str
    sfu: str
    publishers: tuple[str, ...]
    subscribers: tuple[str, ...] = ()
    simulcast: bool = True
    timeout_s: float = CALL_TIMEOUT_S
    quality: bool = False  # the quality matrix's clip and recordings (docs/sfu.md)
    av_offset_ms: float = 0.0  # a planted A/V offset in the clip's second half

    @property
    def members(self) -> tuple[str, ...]:
        """Publishers, then subscribers."""
        return (*self.publishers, *self.subscribers)


@dataclass(frozen=True)
class Load:
    """Light WebRTC participants (``latlab-loadgen``) on ``host``, meeting through the SFU
    ``sfu``: ``publishers`` each send pre-encoded media (VP8 at ``video_kbps``, 0: none;
    Opus with ``audio``), ``subscribers`` each receive every one of them without decoding;
    ``timeout_s`` for all of them to get media flowing."""

    name: str
    sfu: str
    host: str
    publishers: int
    subscribers: int
    video_kbps: int = LOAD_VIDEO_KBPS
    audio: bool = True
    timeout_s: float = LOAD_TIMEOUT_S


SFU_HTTP_PORTS = {"janus": 8088, "livekit": 7880, "latlab": 8089}  # each one's usual port


@dataclass(frozen=True)
class Sfu:
    """An SFU on a host: ``server`` ("janus": Janus's videoroom, "livekit": LiveKit server,
    "latlab": latlab-sfu; started by latlab, with a configuration it writes where there is
    one), its HTTP API on ``http_port`` of the host's address; ``cost``: count it with
    perf, idle for ``cost_idle_s`` before the processes start."""

    name: str
    host: str
    server: str
    http_port: int = 8088
    cost: bool = False
    cost_idle_s: float = COST_IDLE_S


@dataclass(frozen=True)
class Scenario:
    """A parsed, validated scenario. Hosts and processes keep file order."""

    name: str
    duration_s: float
    hosts: tuple[Host, ...]
    links: tuple[Link, ...]
    processes: tuple[Process, ...]
    description: str = ""
    params: Mapping[str, str] = field(default_factory=_frozen_map)
    analysis: Analysis = field(default_factory=Analysis)
    source: str = "<scenario>"
    text: str = ""
    sweep: Sweep | None = None
    devices: tuple[Device, ...] = ()
    sfus: tuple[Sfu, ...] = ()
    calls: tuple[Call, ...] = ()
    rooms: tuple[Room, ...] = ()
    signal: SignalRig | None = None
    loads: tuple[Load, ...] = ()

    def call_of(self, process: str) -> Call | None:
        """The call a browser or webrtcbin process takes part in (None if it is in none)."""
        return next((c for c in self.calls if process in c.between), None)

    def room_of(self, process: str) -> Room | None:
        """The SFU room a browser takes part in (None if it is in none)."""
        return next((r for r in self.rooms if process in r.members), None)

    def sfu(self, name: str) -> Sfu:
        """The SFU called ``name`` (KeyError if there is none)."""
        return next(s for s in self.sfus if s.name == name)

    def host_names(self) -> list[str]:
        """Host names in file order."""
        return [h.name for h in self.hosts]

    def process(self, name: str) -> Process:
        """The process called ``name`` (KeyError if there is none)."""
        for proc in self.processes:
            if proc.name == name:
                return proc
        raise KeyError(name)

    def with_params(self, overrides: Mapping[str, Any]) -> Scenario:
        """A copy with some ``[params]`` values replaced (for sweeps); names must exist."""
        unknown = sorted(set(overrides) - set(self.params))
        if unknown:
            known = ", ".join(sorted(self.params)) or "none"
            raise ScenarioError(f"{self.source}: params: unknown '{unknown[0]}' (params: {known})")
        merged = dict(self.params)
        for key, value in overrides.items():
            try:
                merged[key] = scalar_text(value)
            except Problem as exc:
                raise ScenarioError(f"{self.source}: params.{key}: {exc.problem}") from None
        sweep = self.sweep.with_template(params=merged) if self.sweep else None
        return replace(self, params=MappingProxyType(merged), sweep=sweep)

    def with_duration(self, duration_s: float) -> Scenario:
        """A copy that runs for ``duration_s`` seconds (must be positive)."""
        if not duration_s > 0:
            raise ScenarioError(f"{self.source}: duration_s: must be a positive number of seconds")
        sweep = self.sweep.with_template(duration_s=float(duration_s)) if self.sweep else None
        return replace(self, duration_s=float(duration_s), sweep=sweep)

    def resolve(
        self, text: str, addrs: Mapping[str, str], signal: Mapping[str, str] | None = None
    ) -> str:
        """Substitute ``${hosts.X.addr}`` (from ``addrs``), ``${params.X}``,
        ``${devices.X.ATTR}`` and the ``${signal.*}`` fragments (from ``signal``)."""
        devices = {d.name: d.refs() for d in self.devices}

        def lookup(ref: str) -> str:
            return lookup_ref(ref, self.params, addrs, devices, signal)

        return substitute(text, lookup, self.source, "")

    def resolved_pipeline(
        self, process: Process, addrs: Mapping[str, str], signal: Mapping[str, str] | None = None
    ) -> str:
        """The process's pipeline description with every reference substituted."""
        return self.resolve(process.pipeline, addrs, signal)

    def resolved_command(self, process: Process, addrs: Mapping[str, str]) -> list[str]:
        """The process's command argv with every reference substituted in each argument."""
        return [self.resolve(arg, addrs) for arg in process.command]

    def resolved_env(self, process: Process, addrs: Mapping[str, str]) -> dict[str, str]:
        """The process's extra environment with every reference substituted."""
        return {k: self.resolve(v, addrs) for k, v in process.env.items()}
