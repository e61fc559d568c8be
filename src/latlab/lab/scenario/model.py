"""What a scenario file may say: its tables as typed pydantic models, every rule once.

Each TOML table is a :class:`Table`; its fields are the keys it takes (any other key is
an error, ``extra="forbid"``), each annotated with its value rule from
:mod:`latlab.lab.scenario.rules`. A table's own cross-key rules are its validators
(a link's loss model, a process's kind); the rules that span the file (hosts named by
links and processes, references, calls, the black-box ends) are
:class:`ScenarioFile`'s. Every broken rule raises :class:`Problem`, which the loader
turns into one line naming the file and the key path.

A validated :class:`ScenarioFile` builds the :class:`Scenario` the lab runs
(:mod:`latlab.lab.scenario.objects`). A file with ``[sweep]`` is a :class:`SweptFile`:
the sweep and a template, each point of which is a :class:`ScenarioFile`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from latlab.lab.scenario.errors import Loc, Problem
from latlab.lab.scenario.objects import (
    BACKEND_EMULATOR,
    CALL_TIMEOUT_S,
    COST_IDLE_S,
    LOAD_TIMEOUT_S,
    LOAD_VIDEO_KBPS,
    SFU_HTTP_PORTS,
    WEBRTC_AUDIO_CAPS,
    WEBRTC_JITTERBUFFER_MS,
    Analysis,
    Call,
    Device,
    Host,
    HostClock,
    Link,
    LinkBackend,
    Load,
    Process,
    Room,
    Scenario,
    Sfu,
    SignalEnd,
    SignalRig,
)
from latlab.lab.scenario.refs import SIGNAL_PLACEHOLDERS, SIGNAL_REFS, expand, lookup_ref
from latlab.lab.scenario.rules import (
    ARGV,
    BOOLEAN,
    CPUS,
    ENTITY_NAME,
    ENV_NAMES,
    FLAGS,
    NON_NEGATIVE,
    NOT_BLANK,
    PERCENT,
    POSITIVE,
    RATE_KBIT,
    RAW_CAPS,
    SCALAR_TEXT,
    SCENARIO_NAME,
    SCHED,
    TEXT,
    array_of_tables,
    choice,
    int_from,
    integer,
    named,
    non_empty,
    pair,
    sweep_values,
    toml_kind,
    variable_name,
    within,
)
from latlab.lab.scenario.sweep import Sweep, SweepMode, point_name, sweep_refs
from latlab.lab.sched import SchedPolicy

JitterDist = Literal["uniform", "normal", "pareto"]
LossModel = Literal["bernoulli", "gilbert-elliott"]
Direction = Literal["forward", "reverse", "both"]
DeviceServer = Literal["jack", "pulse"]
SfuServer = Literal["janus", "livekit", "latlab"]
Browser = Literal["chromium"]
WebrtcPeer = Literal["gstreamer"]
WEBRTC_JITTERBUFFER_MAX_MS = 1_000_000  # webrtcbin takes any; beyond 1000 s is a typo
BROWSER_JITTERBUFFER_MAX_MS = 4000  # the most RTCRtpReceiver.jitterBufferTarget takes
MAX_PERIODS = 32
# SFUs latlab's webrtcbin peer publishes into: Janus's HTTP API. Not LiveKit (protobuf
# signalling over a WebSocket), not latlab-sfu (its DTLS refuses GStreamer 1.22's
# handshake: "sslv3 alert handshake failure" right after ICE connects).
GST_PUBLISHER_SERVERS = ("janus",)
MAX_LOAD_PUBLISHERS = 64  # light participants of one [loads.NAME] (one process)
MAX_LOAD_SUBSCRIBERS = 256
SIGNAL_RATE = 48000  # the signal file's rate unless a device injects
MAX_CLOCK_OFFSET_MS = 3_600_000  # a planted clock offset: within an hour of the machine's
MAX_CLOCK_DRIFT_PPM = 1000  # a planted rate error: quartz is within +-100 ppm; 1000 is a typo
MAX_AV_OFFSET_MS = 100.0  # latlab.signal.avclip.MAX_OFFSET_MS: codes stay inside the loop

Name = Annotated[str, ENTITY_NAME]
"""A host, process, device, call, param or sweep variable name (a table key)."""
Text = Annotated[str, TEXT]
Percent = Annotated[float, PERCENT]
NonNegative = Annotated[float, NON_NEGATIVE]


class Table(BaseModel):
    """A TOML table: its keys are the fields; any other key is an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise Problem(f"must be a table, not {toml_kind(data)}")
        for key in data:
            if not cls.takes(key):
                raise cls.unknown_key(key)
        return data

    @classmethod
    def takes(cls, key: str) -> bool:
        """Whether the table may hold ``key``: a field, or anything where extras are allowed."""
        return key in cls.model_fields or cls.model_config.get("extra") == "allow"

    @classmethod
    def unknown_key(cls, key: str) -> Problem:
        """The problem of a key the table does not take."""
        known = ", ".join(cls.model_fields) or "none"
        return Problem(f"unknown key '{key}' (known: {known})")


# --- links ---------------------------------------------------------------------------


class Impairment(Table):
    """The impairment keys: of a link (both directions), its ``[links.reverse]`` (the
    overrides for b -> a) or a ``[[links.schedule]]`` step. ``*_pct`` are percentages;
    ``ge_*`` the Gilbert-Elliott model's, which needs ``loss_model = "gilbert-elliott"``."""

    delay_ms: NonNegative | None = None
    jitter_ms: NonNegative | None = None
    jitter_dist: Annotated[JitterDist, choice(JitterDist, "jitter_dist")] | None = None
    loss_pct: Percent | None = None
    loss_model: Annotated[LossModel, choice(LossModel, "loss_model")] | None = None
    ge_p: Percent | None = None
    ge_r: Percent | None = None
    ge_h: Percent | None = None
    ge_k: Percent | None = None
    rate_kbit: Annotated[float, RATE_KBIT] | None = None
    queue_ms: NonNegative | None = None
    reorder_pct: Percent | None = None
    duplicate_pct: Percent | None = None

    def given(self) -> dict[str, Any]:
        """The impairment keys this table sets, in the order above."""
        return {k: getattr(self, k) for k in Impairment.model_fields if k in self.model_fields_set}


GE_KEYS = tuple(key for key in Impairment.model_fields if key.startswith("ge_"))


def check_loss_model(effective: dict[str, Any], own: dict[str, Any], at: Loc) -> None:
    """The keys of ``own`` (set at ``at``) must fit the loss model of ``effective``."""
    model = effective.get("loss_model", "bernoulli")
    for key in GE_KEYS:
        if key in own and model != "gilbert-elliott":
            raise Problem('needs loss_model = "gilbert-elliott"', (*at, key))
    if model != "gilbert-elliott":
        return
    if "loss_pct" in own:
        problem = f"does not apply to gilbert-elliott (its loss comes from {', '.join(GE_KEYS)})"
        raise Problem(problem, (*at, "loss_pct"))
    if "ge_p" not in effective:
        raise Problem('loss_model = "gilbert-elliott" needs ge_p', at)


# pydantic orders fields from the last base class to the first, then the class's own:
# these keys come before the impairment keys.
class _When(Table):
    at_s: NonNegative
    direction: Annotated[Direction, choice(Direction, "direction")] | None = None


class ScheduleStep(Impairment, _When):
    """A ``[[links.schedule]]`` step: at ``at_s`` (seconds after start) the link takes
    these impairment keys, in ``direction`` (default both)."""

    @model_validator(mode="after")
    def _sets_something(self) -> ScheduleStep:
        if not self.given():
            raise Problem("sets no impairment key")
        return self

    def applies_to(self, direction: str) -> bool:
        """Whether the step changes ``direction`` (``forward`` or ``reverse``)."""
        return (self.direction or "both") in (direction, "both")

    def entry(self) -> dict[str, Any]:
        """The step as :attr:`Link.schedule` holds it."""
        direction = {"direction": self.direction} if self.direction else {}
        return {"at_s": self.at_s, **self.given(), **direction}


class _Ends(Table):
    between: Annotated[tuple[str, str], pair("host names", '["tx", "rx"]')]
    backend: Annotated[LinkBackend, choice(LinkBackend, "backend")] = BACKEND_EMULATOR


class LinkTable(Impairment, _Ends):
    """A ``[[links]]`` entry: two hosts, the link's impairment both ways, the overrides
    for b -> a (``[links.reverse]``) and the steps of its ``[[links.schedule]]``."""

    reverse: Impairment | None = None
    schedule: Annotated[list[ScheduleStep], array_of_tables("[[links.schedule]]")] = []

    @model_validator(mode="after")
    def _consistent(self) -> LinkTable:
        if self.between[0] == self.between[1]:
            raise Problem(f"links host '{self.between[0]}' with itself", ("between",))
        forward, reverse = self.given(), self.reverse_given()
        check_loss_model(forward, forward, ())
        check_loss_model({**forward, **reverse}, reverse, ("reverse",))
        state = {"forward": dict(forward), "reverse": {**forward, **reverse}}
        for i, step in self.timeline():
            for direction, current in state.items():
                if step.applies_to(direction):
                    current.update(step.given())
                    check_loss_model(current, step.given(), ("schedule", i))
        return self

    def reverse_given(self) -> dict[str, Any]:
        """The b -> a overrides."""
        return self.reverse.given() if self.reverse else {}

    def timeline(self) -> list[tuple[int, ScheduleStep]]:
        """The schedule's steps with their file index, in time order."""
        return sorted(enumerate(self.schedule), key=lambda item: item[1].at_s)

    def check_in(self, doc: ScenarioFile, at: Loc) -> None:
        """Its hosts exist; its steps come within the run."""
        for host in self.between:
            doc.check_host(host, (*at, "between"))
        for i, step in enumerate(self.schedule):
            if step.at_s > doc.duration_s:
                problem = f"{step.at_s:g} is beyond duration_s {doc.duration_s:g}"
                raise Problem(problem, (*at, "schedule", i, "at_s"), absolute=True)

    def build(self) -> Link:
        """The lab's link."""
        return Link(
            a=self.between[0],
            b=self.between[1],
            impairment=MappingProxyType(self.given()),
            reverse=MappingProxyType(self.reverse_given()),
            schedule=tuple(MappingProxyType(step.entry()) for _, step in self.timeline()),
            backend=self.backend,
        )


# --- hosts, devices, analysis ----------------------------------------------------------


class HostTable(Table):
    """A ``[hosts.NAME]`` table: a network namespace; ``capture = true`` logs every packet
    it sends and receives with kernel timestamps (``captures/NAME.lllink``); ``cpus``:
    the CPUs its programs (processes, browsers, SFU, load) run on, as a machine of its
    own would."""

    capture: Annotated[bool, BOOLEAN] = False
    clock: ClockTable | None = None
    cpus: Annotated[tuple[int, ...], CPUS] | None = None

    @model_validator(mode="after")
    def _capture_on_its_clock(self) -> HostTable:
        """A capture takes the kernel's timestamps, which a planted rate cannot reach."""
        if self.capture and self.clock is not None and self.clock.drift_ppm:
            problem = "capture = true takes the kernel's timestamps, which a planted drift_ppm "
            raise Problem(problem + "cannot reach: leave one out", ("clock", "drift_ppm"))
        return self

    def build_clock(self) -> HostClock | None:
        """The host's planted clock, if it has one."""
        return None if self.clock is None else HostClock(**dict(self.clock))


class ClockTable(Table):
    """``clock = { offset_ms = 250, drift_ppm = 50 }`` in a ``[hosts.NAME]`` table: the
    host's CLOCK_MONOTONIC is ``offset_ms`` ahead of the machine's and runs ``drift_ppm``
    fast (negative: behind, slow); docs/clocks.md."""

    offset_ms: Annotated[float, within(-MAX_CLOCK_OFFSET_MS, MAX_CLOCK_OFFSET_MS)] = 0.0
    drift_ppm: Annotated[float, within(-MAX_CLOCK_DRIFT_PPM, MAX_CLOCK_DRIFT_PPM)] = 0.0


HostTable.model_rebuild()


class DeviceTable(Table):
    """A ``[devices.NAME]`` table: an audio server on ``host`` (at most one per host);
    ``periods`` of ``period_frames`` each (PulseAudio needs two or more)."""

    host: Text
    server: Annotated[DeviceServer, named(DeviceServer, "server")]
    rate: Annotated[int, integer(8000, 192000)] = 48000
    period_frames: Annotated[int, integer(16, 16384)] = 480
    periods: int = 2
    channels: Annotated[int, integer(1, 8)] = 2

    @field_validator("periods", mode="plain")
    @classmethod
    def _periods(cls, value: Any, info: ValidationInfo) -> int:
        """JACK runs on one period or more, PulseAudio needs two."""
        return int_from(value, 2 if info.data.get("server") == "pulse" else 1, MAX_PERIODS)

    def build(self, name: str) -> Device:
        """The lab's device."""
        return Device(name=name, **dict(self))


class SfuTable(Table):
    """A ``[sfus.NAME]`` table: an SFU ``server`` (Janus's videoroom, LiveKit, latlab-sfu)
    on ``host``, at most one per host, its HTTP API (LiveKit: its signalling) on
    ``http_port`` (by default the server's usual port); ``cost = true`` counts its CPU time, context
    switches and syscalls (perf) idle for ``cost_idle_s``, then under load."""

    host: Text
    server: Annotated[SfuServer, named(SfuServer, "server")]
    http_port: Annotated[int, integer(1024, 65535)] | None = None
    cost: Annotated[bool, BOOLEAN] = False
    cost_idle_s: Annotated[float, within(0.5, 60.0)] = COST_IDLE_S

    def build(self, name: str) -> Sfu:
        """The lab's SFU."""
        port = self.http_port or SFU_HTTP_PORTS[self.server]
        return Sfu(name=name, **{**dict(self), "http_port": port})


class AnalysisTable(Table):
    """``[analysis]``: the unit followed, and for the residual r the configured latency
    and the capture period."""

    unit_ms: Annotated[float, POSITIVE] = 10
    configured_latency_ms: NonNegative | None = None
    period_ms: Annotated[float, POSITIVE] | None = None

    def build(self) -> Analysis:
        """The analysis settings."""
        return Analysis(**dict(self))


# --- processes: a pipeline or command, a browser, or a webrtcbin peer --------------------


class ProcessKind(Table):
    """What every process has: the host it runs on. Its kind is given by a key:
    ``browser`` or ``webrtc`` (:data:`ProcessTable`), else it is a pipeline or command."""

    kind: ClassVar[str]
    host: Text

    @classmethod
    def unknown_key(cls, key: str) -> Problem:
        owners = [k.kind for k in PROCESS_KINDS if k is not cls and key in k.model_fields]
        if owners:
            return cls.misplaced(key, owners)
        pipeline, browser, webrtc = (", ".join(k.model_fields) for k in PROCESS_KINDS)
        return Problem(
            f"unknown key '{key}' (known: {pipeline}) or, for a browser: {browser}, "
            f"or for a webrtcbin peer: {webrtc}"
        )

    @classmethod
    def misplaced(cls, key: str, owners: list[str]) -> Problem:
        """The problem of ``key``, which only processes of kinds ``owners`` take."""
        return Problem(f"'{key}' does not apply to a {cls.kind} process")

    def texts(self) -> Iterator[tuple[Loc, str]]:
        """The strings that may hold references, with their key paths."""
        return iter(())

    def build(self, name: str, source: str) -> Process:
        """The lab's process (``source``: the scenario file, for relative paths)."""
        raise NotImplementedError


class PipelineProcess(ProcessKind):
    """A traced GStreamer ``pipeline`` (gst-launch-1.0 syntax) or a ``command`` (argv),
    with extra ``env`` and a scheduling policy (``sched``); ``cost = true`` counts its
    CPU time, context switches and syscalls (perf), idle for ``cost_idle_s`` before the
    processes after it start, then under traffic."""

    kind: ClassVar[str] = "pipeline"
    pipeline: Annotated[str, NOT_BLANK] | None = None
    env: Annotated[dict[str, Annotated[str, SCALAR_TEXT]], ENV_NAMES] = {}
    command: Annotated[tuple[str, ...], ARGV] | None = None
    sched: Annotated[SchedPolicy, SCHED] | None = None
    cost: Annotated[bool, BOOLEAN] = False
    cost_idle_s: Annotated[float, within(0.5, 60.0)] = COST_IDLE_S

    @classmethod
    def misplaced(cls, key: str, owners: list[str]) -> Problem:
        return Problem(f"applies only to a {' or '.join(owners)} process", (key,))

    @model_validator(mode="after")
    def _pipeline_or_command(self) -> PipelineProcess:
        if self.pipeline is not None and self.command is not None:
            raise Problem("give either 'pipeline' or 'command', not both")
        if self.pipeline is None and self.command is None:
            raise Problem("missing 'pipeline'")
        return self

    def texts(self) -> Iterator[tuple[Loc, str]]:
        if self.pipeline is not None:
            yield ("pipeline",), self.pipeline
        for i, arg in enumerate(self.command or ()):
            yield ("command", i), arg
        for key, value in self.env.items():
            yield ("env", key), value

    def build(self, name: str, source: str) -> Process:
        return Process(
            name=name,
            host=self.host,
            pipeline=self.pipeline or "",
            env=MappingProxyType(dict(self.env)),
            command=self.command or (),
            sched=self.sched,
            cost=self.cost,
            cost_idle_s=float(self.cost_idle_s),
        )


class BrowserProcess(ProcessKind):
    """A browser in a call: it captures ``audio_file`` (relative to the scenario file;
    default a tone), with its ``audio_processing`` on or off; ``jitterbuffer_ms`` holds
    its receivers' jitter buffers to a target; with ``video`` it also sends its fake
    camera (640x360, 30 frames/s) in a call."""

    kind: ClassVar[str] = "browser"
    browser: Annotated[Browser, named(Browser, "browser")]
    audio_file: Annotated[str, NOT_BLANK] | None = None
    audio_processing: Annotated[bool, BOOLEAN] = False
    browser_args: Annotated[tuple[str, ...], FLAGS] = ()
    jitterbuffer_ms: Annotated[int, integer(0, BROWSER_JITTERBUFFER_MAX_MS)] | None = None
    video: Annotated[bool, BOOLEAN] = False

    def build(self, name: str, source: str) -> Process:
        audio_file = None
        if self.audio_file is not None:
            audio_file = str(Path(source).resolve().parent / self.audio_file)
        return Process(
            name=name,
            host=self.host,
            browser=self.browser,
            audio_file=audio_file,
            audio_processing=self.audio_processing,
            browser_args=self.browser_args,
            jitterbuffer_ms=self.jitterbuffer_ms,
            video=self.video,
        )


class WebrtcProcess(ProcessKind):
    """latlab's GStreamer webrtcbin peer in a call: it sends a tone of ``audio_caps`` and
    receives through a jitter buffer of ``jitterbuffer_ms``."""

    kind: ClassVar[str] = "webrtc"
    webrtc: Annotated[WebrtcPeer, named(WebrtcPeer, "peer")]
    audio_caps: Annotated[str, RAW_CAPS] = WEBRTC_AUDIO_CAPS
    jitterbuffer_ms: Annotated[int, integer(0, WEBRTC_JITTERBUFFER_MAX_MS)] = WEBRTC_JITTERBUFFER_MS

    def build(self, name: str, source: str) -> Process:
        return Process(
            name=name,
            host=self.host,
            webrtc=self.webrtc,
            audio_caps=self.audio_caps,
            jitterbuffer_ms=self.jitterbuffer_ms,
        )


PROCESS_KINDS: tuple[type[ProcessKind], ...] = (PipelineProcess, BrowserProcess, WebrtcProcess)
PROCESS_TAGS = frozenset(k.kind for k in PROCESS_KINDS)
"""Pydantic puts the kind chosen into error locations: ``processes.NAME.<kind>.KEY``."""


def _process_kind(value: Any) -> str:
    """The kind a process table asks for: by its ``webrtc`` or ``browser`` key."""
    keys = value if isinstance(value, dict) else {}
    kinds = (WebrtcProcess.kind, BrowserProcess.kind)  # their keys are named like them
    return next((kind for kind in kinds if kind in keys), PipelineProcess.kind)


def _one_kind(value: Any) -> Any:
    if isinstance(value, dict) and "webrtc" in value and "browser" in value:
        raise Problem("give either 'browser' or 'webrtc', not both")
    return value


ProcessTable = Annotated[
    Annotated[PipelineProcess, Tag(PipelineProcess.kind)]
    | Annotated[BrowserProcess, Tag(BrowserProcess.kind)]
    | Annotated[WebrtcProcess, Tag(WebrtcProcess.kind)],
    Discriminator(_process_kind),
    BeforeValidator(_one_kind),
]
"""A ``[processes.NAME]`` table, of the kind its keys say."""


# --- calls and the black box -----------------------------------------------------------


class CallTable(Table):
    """A ``[calls.NAME]`` table: a 1:1 WebRTC call between two browsers or webrtcbin
    peers on two hosts joined by a link; the first makes the offer."""

    between: Annotated[tuple[str, str], pair("process names", '["alice", "bob"]', distinct=True)]
    timeout_s: Annotated[float, POSITIVE] = CALL_TIMEOUT_S

    def check_in(self, doc: ScenarioFile, at: Loc) -> None:
        """Both peers are browsers or webrtcbin peers, on two hosts joined by a link."""
        processes = doc.processes or {}
        for name in self.between:
            if name not in processes:
                known = ", ".join(processes) or "none"
                problem = f"unknown process '{name}' (processes: {known})"
                raise Problem(problem, (*at, "between"), absolute=True)
            if isinstance(processes[name], PipelineProcess):
                problem = f"process '{name}' is not a browser or webrtc peer"
                raise Problem(problem, (*at, "between"), absolute=True)
        hosts = {processes[name].host for name in self.between}
        if len(hosts) != 2 or not any(set(link.between) == hosts for link in doc.links):
            a, b = self.between
            problem = f"'{a}' and '{b}' must be on two hosts joined by a [[links]]"
            raise Problem(problem, (*at, "between"), absolute=True)

    def build(self, name: str) -> Call:
        """The lab's call."""
        caller, callee = self.between
        return Call(name=name, caller=caller, callee=callee, timeout_s=float(self.timeout_s))


class RoomTable(Table):
    """A ``[rooms.NAME]`` table: browsers meeting through the SFU ``sfu`` (a
    ``[sfus.NAME]``): each of ``publishers`` sends audio and video (``simulcast``: three
    layers), each of ``subscribers`` receives every publisher; ``timeout_s`` is how long
    the pages may take to load and get media flowing."""

    sfu: Text
    publishers: Annotated[list[str], non_empty("at least one publisher is needed")]
    subscribers: list[str] = []
    simulcast: Annotated[bool, BOOLEAN] = True
    timeout_s: Annotated[float, POSITIVE] = CALL_TIMEOUT_S
    # the quality matrix (docs/sfu.md): the publisher plays the coded clip, every member
    # records what it plays out (audio and video codes); av_offset_ms plants an A/V offset
    quality: Annotated[bool, BOOLEAN] = False
    av_offset_ms: Annotated[float, within(0.0, MAX_AV_OFFSET_MS)] = 0.0

    def check_in(self, doc: ScenarioFile, at: Loc) -> None:
        """The SFU exists; every member is a browser, in one role, on a host joined by a
        link to the SFU's host."""
        if self.sfu not in doc.sfus:
            known = ", ".join(doc.sfus) or "none"
            raise Problem(f"unknown SFU '{self.sfu}' (sfus: {known})", (*at, "sfu"), absolute=True)
        sfu_host = doc.sfus[self.sfu].host
        processes = doc.processes or {}
        members = [*self.publishers, *self.subscribers]
        if len(set(members)) != len(members):
            raise Problem("a process is both publisher and subscriber, or named twice", at,
                          absolute=True)  # fmt: skip
        server = doc.sfus[self.sfu].server
        self._check_quality(doc, at)
        for name in members:
            process = processes.get(name)
            gst_publisher = isinstance(process, WebrtcProcess) and name in self.publishers
            if gst_publisher and server not in GST_PUBLISHER_SERVERS:
                problem = (f"'{name}' is a webrtcbin peer: it publishes through Janus only "
                           f"(its signalling), not {server}")  # fmt: skip
                raise Problem(problem, at, absolute=True)
            if not isinstance(process, BrowserProcess) and not gst_publisher:
                what = "a browser process" + (" or a webrtcbin publisher"
                                              if name in self.publishers else "")  # fmt: skip
                raise Problem(f"'{name}' is not {what}", at, absolute=True)
            host = processes[name].host
            if not any(set(link.between) == {host, sfu_host} for link in doc.links):
                problem = f"'{name}' (host '{host}') needs a [[links]] to the SFU's host"
                raise Problem(f"{problem} '{sfu_host}'", at, absolute=True)

    def _check_quality(self, doc: ScenarioFile, at: Loc) -> None:
        """A quality room has one browser publisher, subscribers, no [signal] end among its
        members, and is the file's only one; ``av_offset_ms`` needs ``quality``."""
        if self.av_offset_ms and not self.quality:
            raise Problem("needs quality = true", (*at, "av_offset_ms"), absolute=True)
        if not self.quality:
            return
        processes = doc.processes or {}
        if len(self.publishers) != 1 or not isinstance(
            processes.get(self.publishers[0]), BrowserProcess
        ):
            problem = "a quality room has exactly one publisher, a browser (whose clip it plays)"
            raise Problem(problem, (*at, "quality"), absolute=True)
        if not self.subscribers:
            raise Problem("a quality room needs subscribers", (*at, "quality"), absolute=True)
        if sum(room.quality for room in doc.rooms.values()) > 1:
            raise Problem("only one room of a scenario may have quality = true",
                          (*at, "quality"), absolute=True)  # fmt: skip
        if doc.signal is not None:
            ends = {doc.signal.inject, doc.signal.record}
            for name in (*self.publishers, *self.subscribers):
                if name in ends:
                    problem = f"'{name}' is a [signal] end: a quality room records its own audio"
                    raise Problem(problem, (*at, "quality"), absolute=True)

    def build(self, name: str) -> Room:
        """The lab's room."""
        return Room(name=name, sfu=self.sfu, publishers=tuple(self.publishers),
                    subscribers=tuple(self.subscribers), simulcast=self.simulcast,
                    timeout_s=float(self.timeout_s), quality=self.quality,
                    av_offset_ms=float(self.av_offset_ms))  # fmt: skip


class LoadTable(Table):
    """A ``[loads.NAME]`` table: light WebRTC participants (``latlab-loadgen``, one
    process) on ``host`` meeting through the SFU ``sfu``: each of ``publishers`` sends
    pre-encoded VP8 at ``video_kbps`` (640x360, 30 fps; 0: no video) and, with ``audio``,
    Opus; each of ``subscribers`` receives every one of them without decoding;
    ``timeout_s`` is how long they may take to get media flowing."""

    sfu: Text
    host: Text
    publishers: Annotated[int, integer(0, MAX_LOAD_PUBLISHERS)]
    subscribers: Annotated[int, integer(0, MAX_LOAD_SUBSCRIBERS)] = 0
    video_kbps: Annotated[int, integer(0, 5000)] = LOAD_VIDEO_KBPS
    audio: Annotated[bool, BOOLEAN] = True
    timeout_s: Annotated[float, POSITIVE] = LOAD_TIMEOUT_S

    @model_validator(mode="after")
    def _something_flows(self) -> LoadTable:
        if self.publishers == 0:
            raise Problem("at least one publisher is needed", ("publishers",))
        if self.video_kbps == 0 and not self.audio:
            raise Problem("no video (video_kbps = 0) and no audio: nothing to send")
        return self

    def check_in(self, doc: ScenarioFile, at: Loc) -> None:
        """The SFU exists and its host is joined by a link to the load's host."""
        if self.sfu not in doc.sfus:
            known = ", ".join(doc.sfus) or "none"
            raise Problem(f"unknown SFU '{self.sfu}' (sfus: {known})", (*at, "sfu"), absolute=True)
        doc.check_host(self.host, (*at, "host"))
        sfu_host = doc.sfus[self.sfu].host
        if not any(set(link.between) == {self.host, sfu_host} for link in doc.links):
            problem = f"host '{self.host}' needs a [[links]] to the SFU's host '{sfu_host}'"
            raise Problem(problem, (*at, "host"), absolute=True)

    def build(self, name: str) -> Load:
        """The lab's load."""
        return Load(name=name, **dict(self))


class SignalTable(Table):
    """``[signal]``: the black box. Time-coded audio played in at ``inject`` and recorded
    at ``record``, each a JACK device (with the ``*_client`` whose ports to use), a
    PulseAudio device, a GStreamer pipeline holding ``${signal.source}`` or
    ``${signal.sink}`` once, or a browser; a code every ``interval_ms`` at ``level_dbfs``,
    written at ``rate`` (an injecting device's own)."""

    inject: Text
    inject_client: Annotated[str, ENTITY_NAME] | None = None
    record: Text
    record_client: Annotated[str, ENTITY_NAME] | None = None
    interval_ms: Annotated[float, within(100, 2000, positive=True)] = 200.0
    level_dbfs: Annotated[float, within(-60, -3)] = -20.0
    rate: Annotated[int, integer(8000, 192000)] | None = None

    def end(self, side: str, doc: ScenarioFile) -> SignalEnd:
        """The ``inject`` or ``record`` end: a device or a process of the file."""
        name = getattr(self, side)
        processes = doc.processes or {}
        if name in doc.devices:
            return self._device_end(side, name, doc.devices[name])
        if name not in processes:
            known = ", ".join([*doc.devices, *processes]) or "none"
            raise Problem(
                f"unknown device or process '{name}' (audio devices, GStreamer pipelines "
                f"and browsers: {known})",
                ("signal", side),
                absolute=True,
            )
        return self._process_end(side, name, processes[name])

    def _device_end(self, side: str, name: str, device: DeviceTable) -> SignalEnd:
        client_key = f"{side}_client"
        client = getattr(self, client_key)
        if device.server == "pulse":
            if client is not None:
                raise Problem(
                    f"only for a JACK device; '{name}' is a PulseAudio device (the rig plays "
                    "into its null sink and records its monitor)",
                    ("signal", client_key),
                    absolute=True,
                )
            return SignalEnd("pulse", name)
        if client is None:
            raise Problem(f"missing '{client_key}'", ("signal",), absolute=True)
        return SignalEnd("jack", name, client)

    def _process_end(self, side: str, name: str, process: ProcessKind) -> SignalEnd:
        client_key = f"{side}_client"
        if getattr(self, client_key) is not None:
            problem = f"only for a JACK device; '{name}' is a process"
            raise Problem(problem, ("signal", client_key), absolute=True)
        if isinstance(process, BrowserProcess):
            if side == "inject" and process.audio_file is not None:
                problem = "the browser captures the signal ([signal] inject); leave audio_file out"
                raise Problem(problem, ("processes", name, "audio_file"), absolute=True)
            return SignalEnd("browser", name)
        if isinstance(process, WebrtcProcess):
            if side == "inject":
                problem = f"'{name}' is a webrtcbin peer, which sends its own tone: it only records"
                raise Problem(problem, ("signal", side), absolute=True)
            return SignalEnd("gst", name)  # a branch off a tee before its sink records
        ref = SIGNAL_REFS[side]
        pipeline = process.pipeline if isinstance(process, PipelineProcess) else None
        if not pipeline or pipeline.count("${" + ref + "}") != 1:
            problem = f"process '{name}' must be a pipeline holding ${{{ref}}} once"
            raise Problem(f"{problem} (see docs/signal.md)", ("signal", side), absolute=True)
        return SignalEnd("gst", name)

    def signal_rate(self, doc: ScenarioFile) -> int:
        """The signal file's rate: an injecting device's, else ``rate``."""
        device = doc.devices.get(self.inject)
        if device is None:
            return SIGNAL_RATE if self.rate is None else self.rate
        if self.rate is not None and self.rate != device.rate:
            raise Problem(
                f"the signal plays at device '{self.inject}''s rate ({device.rate} Hz); "
                "leave rate out",
                ("signal", "rate"),
                absolute=True,
            )
        return device.rate

    def build(self, doc: ScenarioFile) -> SignalRig:
        """The black-box rig (also checks it against the file)."""
        return SignalRig(
            inject=self.end("inject", doc),
            record=self.end("record", doc),
            interval_ms=float(self.interval_ms),
            level_dbfs=float(self.level_dbfs),
            rate=self.signal_rate(doc),
        )


# --- the file ----------------------------------------------------------------------------


class SweepTable(Table):
    """``[sweep]``: ``mode`` and the variables (every other key, each a list of values)."""

    model_config = ConfigDict(extra="allow")
    mode: Annotated[SweepMode, named(SweepMode, "mode")] = "product"

    @model_validator(mode="before")
    @classmethod
    def _variables_named_and_listed(cls, data: Any) -> Any:
        for key, values in data.items() if isinstance(data, dict) else ():
            if key not in cls.model_fields:
                try:
                    variable_name(key)
                    sweep_values(values)
                except Problem as exc:
                    raise Problem(exc.problem, (key,)) from None
        return data

    @model_validator(mode="after")
    def _points(self) -> SweepTable:
        variables = self.variables()
        if not variables:
            raise Problem("has no variables (e.g. jb = [20, 40])")
        if self.mode == "zip" and len({len(values) for _, values in variables}) > 1:
            sizes = ", ".join(f"{name}: {len(values)}" for name, values in variables)
            raise Problem(f'mode "zip" needs lists of one length ({sizes})')
        names: set[str] = set()
        for values in Sweep(self.mode, variables).combinations():
            name = point_name(values)
            if name in names:
                raise Problem(
                    f"two points are both named '{name}' (a repeated or look-alike value)"
                )
            names.add(name)
        return self

    def variables(self) -> tuple[tuple[str, tuple[Any, ...]], ...]:
        """Each variable and its values, in file order."""
        return tuple((name, tuple(values)) for name, values in (self.model_extra or {}).items())


class ScenarioFile(Table):
    """A scenario file: name, run time, hosts, links, processes and the rest. The keys
    are in this order in messages; a file with ``[sweep]`` goes through
    :class:`SweptFile`, each of its points through this."""

    name: Annotated[str, SCENARIO_NAME]
    duration_s: Annotated[float, POSITIVE]
    description: Text = ""
    params: dict[Name, Annotated[str, SCALAR_TEXT]] = {}
    analysis: AnalysisTable = AnalysisTable()
    hosts: Annotated[
        dict[Name, HostTable], non_empty("at least one host is needed (e.g. [hosts.tx])")
    ] = Field(default_factory=dict, validate_default=True)
    links: Annotated[list[LinkTable], array_of_tables("[[links]]")] = []
    processes: (
        Annotated[dict[Name, ProcessTable], non_empty("at least one process is needed")] | None
    ) = None
    sweep: SweepTable | None = None
    devices: dict[Name, DeviceTable] = {}
    sfus: dict[Name, SfuTable] = {}
    calls: dict[Name, CallTable] = {}
    rooms: dict[Name, RoomTable] = {}
    signal: SignalTable | None = None
    loads: dict[Name, LoadTable] = {}

    @model_validator(mode="after")
    def _across_the_file(self, info: ValidationInfo) -> ScenarioFile:
        for i, link in enumerate(self.links):
            link.check_in(self, ("links", i))
        self._check_devices()
        self._check_sfus()
        required = (info.context or {}).get("processes_required", True) and not self.loads
        if self.processes is None and required:
            raise Problem("missing 'processes'")
        self._check_processes()
        self._check_calls()
        self._check_loads()
        self._check_signal_refs(self.signal.build(self) if self.signal is not None else None)
        return self

    def check_host(self, host: str, at: Loc) -> None:
        """``host`` (named at ``at``) is one of the file's hosts."""
        if host not in self.hosts:
            known = ", ".join(sorted(self.hosts))
            raise Problem(f"unknown host '{host}' (hosts: {known})", at, absolute=True)

    def _check_devices(self) -> None:
        """Each device on a host of the file, at most one per host."""
        self._one_per_host("devices", "device", {n: d.host for n, d in self.devices.items()})

    def _one_per_host(self, table: str, what: str, hosts: dict[str, str]) -> None:
        """Each of ``hosts`` (name -> host, from ``[table.NAME]``) on a host of the file,
        at most one per host."""
        taken: dict[str, str] = {}
        for name, host in hosts.items():
            at = (table, name, "host")
            self.check_host(host, at)
            if host in taken:
                problem = f"host '{host}' already has {what} '{taken[host]}'"
                raise Problem(f"{problem} (one per host)", at, absolute=True)
            taken[host] = name

    def _check_sfus(self) -> None:
        """Each SFU on a host of the file, at most one per host, named unlike processes."""
        self._one_per_host("sfus", "SFU", {n: sfu.host for n, sfu in self.sfus.items()})
        for name in self.sfus:
            if name in (self.processes or {}):
                raise Problem(f"SFU '{name}' has the name of a process", ("sfus", name),
                              absolute=True)  # fmt: skip

    def _check_processes(self) -> None:
        """Each process on a host of the file, every reference in it known."""
        devices = {name: d.build(name).refs() for name, d in self.devices.items()}
        addrs = dict.fromkeys(self.hosts, "0.0.0.0")

        def lookup(ref: str) -> str:
            return lookup_ref(ref, self.params, addrs, devices, SIGNAL_PLACEHOLDERS)

        for name, process in (self.processes or {}).items():
            self.check_host(process.host, ("processes", name, "host"))
            for at, text in process.texts():
                try:
                    expand(text, lookup)
                except Problem as exc:
                    raise exc.within("processes", name, *at) from None

    def _check_calls(self) -> None:
        """Each call checked; a peer in exactly one call."""
        seen: dict[str, str] = {}
        for name, call in self.calls.items():
            call.check_in(self, ("calls", name))
        for name, call in self.calls.items():
            for peer in call.between:
                if peer in seen:
                    problem = f"process '{peer}' is already in call '{seen[peer]}' (one call each)"
                    raise Problem(problem, ("calls", name, "between"), absolute=True)
                seen[peer] = name
        for name, room in self.rooms.items():
            room.check_in(self, ("rooms", name))
            for member in (*room.publishers, *room.subscribers):
                if member in seen:
                    problem = f"process '{member}' is already in '{seen[member]}' (one each)"
                    raise Problem(problem, ("rooms", name), absolute=True)
                seen[member] = name
        for name, process in (self.processes or {}).items():
            if not isinstance(process, PipelineProcess) and name not in seen:
                what = "a browser" if isinstance(process, BrowserProcess) else "a webrtc peer"
                problem = (f'{what} must be in a call ([calls.NAME] between = ["a", "b"]) '
                           "or a room ([rooms.NAME])")  # fmt: skip
                raise Problem(problem, ("processes", name), absolute=True)

    def _check_loads(self) -> None:
        """Each load checked, named unlike processes and SFUs."""
        for name, load in self.loads.items():
            if name in (self.processes or {}) or name in self.sfus:
                problem = f"load '{name}' has the name of a process or an SFU"
                raise Problem(problem, ("loads", name), absolute=True)
            load.check_in(self, ("loads", name))

    def _check_signal_refs(self, rig: SignalRig | None) -> None:
        """``${signal.source}``/``${signal.sink}`` only in the processes ``rig`` names."""
        ends = {"inject": rig.inject, "record": rig.record} if rig else {}
        named_gst = {side: end.name for side, end in ends.items() if end.kind == "gst"}
        for name, process in (self.processes or {}).items():
            texts = [text for _, text in process.texts()]
            for side, ref in SIGNAL_REFS.items():
                if any("${" + ref + "}" in t for t in texts) and named_gst.get(side) != name:
                    problem = f'${{{ref}}} needs [signal] {side} = "{name}"'
                    raise Problem(problem, ("processes", name), absolute=True)

    def build(self, source: str, text: str) -> Scenario:
        """The scenario the lab runs; ``source`` names the file, ``text`` is its content."""
        return Scenario(
            name=self.name,
            duration_s=self.duration_s,
            hosts=tuple(
                Host(name=n, capture=t.capture, clock=t.build_clock(), cpus=t.cpus)
                for n, t in self.hosts.items()
            ),
            links=tuple(link.build() for link in self.links),
            processes=tuple(p.build(n, source) for n, p in (self.processes or {}).items()),
            description=self.description,
            params=MappingProxyType(dict(self.params)),
            analysis=self.analysis.build(),
            source=source,
            text=text,
            devices=tuple(device.build(name) for name, device in self.devices.items()),
            sfus=tuple(sfu.build(name) for name, sfu in self.sfus.items()),
            calls=tuple(call.build(name) for name, call in self.calls.items()),
            rooms=tuple(room.build(name) for name, room in self.rooms.items()),
            signal=self.signal.build(self) if self.signal is not None else None,
            loads=tuple(load.build(name) for name, load in self.loads.items()),
        )


class SweptFile(Table):
    """A scenario file with ``[sweep]``: the sweep, and the rest of the file (the extra
    keys: those of :class:`ScenarioFile`) as the template of its points. Here each
    ``${NAME}`` must name a variable and each variable be used; each point is then
    checked as a :class:`ScenarioFile`."""

    model_config = ConfigDict(extra="allow")
    sweep: SweepTable

    @classmethod
    def takes(cls, key: str) -> bool:
        return ScenarioFile.takes(key)

    @classmethod
    def unknown_key(cls, key: str) -> Problem:
        return ScenarioFile.unknown_key(key)

    @model_validator(mode="after")
    def _references(self) -> SweptFile:
        names = [name for name, _ in self.sweep.variables()]
        used: set[str] = set()
        for at, ref in sweep_refs(self.template()):
            if ref not in names:
                problem = f"unknown sweep variable '${{{ref}}}' (sweep: {', '.join(names)})"
                raise Problem(problem, at, absolute=True)
            used.add(ref)
        params = self.template().get("params")
        used |= set(params) if isinstance(params, dict) else set()
        for name in names:
            if name not in used:
                problem = f"is not used (reference it as ${{{name}}} or name a [params] key)"
                raise Problem(problem, ("sweep", name), absolute=True)
        return self

    def template(self) -> dict[str, Any]:
        """The file without ``[sweep]``, as decoded."""
        return dict(self.model_extra or {})

    def build(self) -> Sweep:
        """The test matrix."""
        return Sweep(self.sweep.mode, self.sweep.variables(), self.template())
