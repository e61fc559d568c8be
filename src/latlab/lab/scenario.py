"""Scenario files: what a run sets up (hosts, links, processes) and for how long.

A scenario is a TOML file::

    name = "l16-basic"
    duration_s = 10
    description = "optional text"
    [params]                 # optional user variables, referenced as ${params.NAME}
    latency = 20
    [analysis]               # optional
    unit_ms = 10
    [hosts.tx]
    [hosts.rx]
    [[links]]
    between = ["tx", "rx"]
    [processes.receiver]     # processes start in file order
    host = "rx"
    pipeline = "udpsrc port=5004 ! ... ! fakesink"
    env = { GST_DEBUG = "2" }
    [processes.sender]
    host = "tx"
    pipeline = "audiotestsrc is-live=true ! ... ! udpsink host=${hosts.rx.addr} port=5004"

A process may instead be a browser (``browser = "chromium"``, optional ``audio_file``
relative to the scenario file, ``audio_processing``, ``browser_args``,
``jitterbuffer_ms``: the target its jitter buffers are held to); browsers make 1:1
WebRTC calls, ``[calls.NAME] between = ["caller", "callee"]`` (optional
``timeout_s``: how long the pages may take to load and connect). A call's peer may also
be the GStreamer webrtcbin peer (``webrtc = "gstreamer"``, optional ``audio_caps``: the
raw caps of its test tone, ``jitterbuffer_ms``: webrtcbin's ``latency``), which runs
traced like a pipeline.

``pipeline`` and ``env`` values may reference ``${hosts.NAME.addr}`` (the host's address,
known once the lab is up) and ``${params.NAME}``; ``$${`` stands for a literal ``${``.
A ``[sweep]`` table (``mode = "product" | "zip"``, ``NAME = [values]``) makes the file
a test matrix whose variables any string references as ``${NAME}`` (see :class:`Sweep`).
Every problem raises :class:`ScenarioError` with a one-line message naming the file.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import re
import tomllib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from latlab.errors import UserInputError
from latlab.lab.sched import SchedPolicy, parse_sched

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
ENTITY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
ENTITY_RULE = "letters, digits, '_', '-'; at most 32"
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
REF_RE = re.compile(r"\$\$\{|\$\{([^}]*)\}")

TOP_KEYS = (
    "name",
    "duration_s",
    "description",
    "params",
    "analysis",
    "hosts",
    "links",
    "processes",
    "sweep",
    "devices",
    "calls",
    "signal",
)
ANALYSIS_KEYS = ("unit_ms", "configured_latency_ms", "period_ms")
HOST_KEYS: tuple[str, ...] = ()
IMPAIRMENT_KEYS = (
    "delay_ms",
    "jitter_ms",
    "jitter_dist",
    "loss_pct",
    "loss_model",
    "ge_p",
    "ge_r",
    "ge_h",
    "ge_k",
    "rate_kbit",
    "queue_ms",
    "reorder_pct",
    "duplicate_pct",
)
LINK_KEYS = ("between", "backend", *IMPAIRMENT_KEYS, "reverse", "schedule")
BACKEND_EMULATOR = "latlab-linkemu"  # latlab's own link emulator (linkemu/)
LINK_BACKENDS = (BACKEND_EMULATOR, "netem", "auto")  # auto: netem where the kernel has it
SCHEDULE_KEYS = ("at_s", "direction", *IMPAIRMENT_KEYS)
PERCENT_KEYS = ("loss_pct", "ge_p", "ge_r", "ge_h", "ge_k", "reorder_pct", "duplicate_pct")
GE_KEYS = ("ge_p", "ge_r", "ge_h", "ge_k")
CHOICES = {
    "jitter_dist": ("uniform", "normal", "pareto"),
    "loss_model": ("bernoulli", "gilbert-elliott"),
    "direction": ("forward", "reverse", "both"),
}
PROCESS_KEYS = ("host", "pipeline", "env", "command", "sched")
BROWSER_KEYS = (
    "host", "browser", "audio_file", "audio_processing", "browser_args", "jitterbuffer_ms",
)  # fmt: skip
BROWSERS = ("chromium",)
WEBRTC_PEERS = ("gstreamer",)
BROWSER_ONLY_KEYS = ("audio_file", "audio_processing", "browser_args")
WEBRTC_KEYS = ("host", "webrtc", "audio_caps", "jitterbuffer_ms")
WEBRTC_ONLY_KEYS = {
    "audio_caps": "a webrtc process",
    "jitterbuffer_ms": "a browser or webrtc process",
}
WEBRTC_AUDIO_CAPS = "audio/x-raw,rate=48000,channels=1"
WEBRTC_JITTERBUFFER_MS = 40
WEBRTC_JITTERBUFFER_MAX_MS = 1_000_000  # webrtcbin takes any; beyond 1000 s is a typo
BROWSER_JITTERBUFFER_MAX_MS = 4000  # the most RTCRtpReceiver.jitterBufferTarget takes
CALL_KEYS = ("between", "timeout_s")
CALL_TIMEOUT_S = 20.0
HOST_ATTRS = ("addr",)
DEVICE_KEYS = ("host", "server", "rate", "period_frames", "periods", "channels")
DEVICE_SERVERS = ("jack", "pulse")
DEVICE_ATTRS = ("period_us", "buffer_us", "rate", "period_frames", "periods", "channels")
SIGNAL_KEYS = (
    "inject", "inject_client", "record", "record_client", "interval_ms", "level_dbfs", "rate",
)  # fmt: skip
SIGNAL_REFS = {"inject": "signal.source", "record": "signal.sink"}
SIGNAL_PLACEHOLDERS = {ref: "identity" for ref in SIGNAL_REFS.values()}
"""The pipeline fragment a GStreamer end of ``[signal]`` holds (``${signal.source}``...)."""


class ScenarioError(UserInputError, ValueError):
    """A scenario file is invalid; ``str()`` is one line: ``FILE: WHERE: PROBLEM``."""


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
class Host:
    """A host: in the lab, one network namespace."""

    name: str


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
    impairment: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    reverse: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    schedule: tuple[Mapping[str, Any], ...] = ()
    backend: str = LINK_BACKENDS[0]  # which emulator an impaired link goes through

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
    (``RTCRtpReceiver.jitterBufferTarget``; None: NetEq adapts on its own).
    """

    name: str
    host: str
    pipeline: str = ""
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    command: tuple[str, ...] = ()
    sched: SchedPolicy | None = None
    browser: str = ""
    audio_file: str | None = None
    audio_processing: bool = False
    browser_args: tuple[str, ...] = ()
    webrtc: str = ""
    audio_caps: str = WEBRTC_AUDIO_CAPS
    jitterbuffer_ms: int | None = WEBRTC_JITTERBUFFER_MS

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

    def refs(self) -> dict[str, str]:
        """Values of the ``${devices.NAME.ATTR}`` references (e.g. for ``buffer-time``)."""
        return {
            "period_us": str(self.period_us),
            "buffer_us": str(self.period_us * self.periods),
            "rate": str(self.rate),
            "period_frames": str(self.period_frames),
            "periods": str(self.periods),
            "channels": str(self.channels),
        }


@dataclass(frozen=True)
class SignalEnd:
    """One end of ``[signal]``: a JACK device (``kind="jack"``, ``client`` is the JACK
    client whose ports the rig connects to), a PulseAudio device (``kind="pulse"``: the
    rig plays into its null sink or records its monitor), a GStreamer process (``kind="gst"``, whose
    pipeline holds ``${signal.source}`` or ``${signal.sink}``) or a browser
    (``kind="browser"``: it captures the signal file, or records its remote audio)."""

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
class Scenario:
    """A parsed, validated scenario. Hosts and processes keep file order."""

    name: str
    duration_s: float
    hosts: tuple[Host, ...]
    links: tuple[Link, ...]
    processes: tuple[Process, ...]
    description: str = ""
    params: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    analysis: Analysis = field(default_factory=Analysis)
    source: str = "<scenario>"
    text: str = ""
    sweep: Sweep | None = None
    devices: tuple[Device, ...] = ()
    calls: tuple[Call, ...] = ()
    signal: SignalRig | None = None

    def call_of(self, process: str) -> Call | None:
        """The call a browser or webrtcbin process takes part in (None if it is in none)."""
        return next((c for c in self.calls if process in c.between), None)

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
            merged[key] = _param_str(value, f"params.{key}", self.source)
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
            return _lookup(ref, self.params, addrs, devices, signal)

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


def load_scenario(path: Path | str, *, processes_required: bool = True) -> Scenario:
    """Read and validate a scenario file (``lab up`` accepts one without processes)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{path}: cannot read: {exc}") from None
    return parse_scenario(text, str(path), processes_required=processes_required)


def parse_scenario(
    text: str, source_name: str = "<scenario>", *, processes_required: bool = True
) -> Scenario:
    """Parse and validate scenario TOML ``text``; ``source_name`` prefixes error messages."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{source_name}: TOML syntax error: {exc}") from None
    return _Parser(source_name, processes_required).scenario(data, text)


def substitute(text: str, lookup: Callable[[str], str], source: str, where: str) -> str:
    """Replace each ``${ref}`` in ``text`` by ``lookup(ref)``; ``$${`` yields ``${``.

    ``lookup`` raises KeyError with a problem description for unknown references.
    """

    def repl(match: re.Match[str]) -> str:
        if match.group(1) is None:
            return "${"
        try:
            return lookup(match.group(1))
        except KeyError as exc:
            prefix = f"{source}: {where}: " if where else f"{source}: "
            raise ScenarioError(prefix + exc.args[0]) from None

    return REF_RE.sub(repl, text)


def _lookup(
    ref: str,
    params: Mapping[str, str],
    addrs: Mapping[str, str],
    devices: Mapping[str, Mapping[str, str]] | None = None,
    signal: Mapping[str, str] | None = None,
) -> str:
    """Value of one reference (KeyError with the problem if it is unknown).

    ``signal`` holds the ``${signal.source}``/``${signal.sink}`` fragments (a run's
    files; at parse time a placeholder).
    """
    if ref in SIGNAL_REFS.values():
        if signal is None:
            raise KeyError(f"'${{{ref}}}' is only known while running a scenario with [signal]")
        return signal[ref]
    parts = ref.split(".")
    if len(parts) == 3 and parts[0] == "devices" and parts[2] in DEVICE_ATTRS:
        if parts[1] not in (devices or {}):
            known = ", ".join(sorted(devices or {})) or "none"
            raise KeyError(f"unknown reference '${{{ref}}}' (devices: {known})")
        return (devices or {})[parts[1]][parts[2]]
    if len(parts) == 2 and parts[0] == "params":
        if parts[1] not in params:
            known = ", ".join(sorted(params)) or "none"
            raise KeyError(f"unknown reference '${{{ref}}}' (params: {known})")
        return params[parts[1]]
    if len(parts) == 3 and parts[0] == "hosts" and parts[2] in HOST_ATTRS:
        if parts[1] not in addrs:
            raise KeyError(f"unknown reference '${{{ref}}}' (hosts: {', '.join(sorted(addrs))})")
        return addrs[parts[1]]
    raise KeyError(
        f"unknown reference '${{{ref}}}' (known forms: ${{hosts.NAME.addr}}, ${{params.NAME}}, "
        "${devices.NAME.ATTR}, ${signal.source}, ${signal.sink}, ${NAME} of a [sweep])"
    )


def _param_str(value: Any, where: str, source: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise ScenarioError(f"{source}: {where}: must be a string, number or boolean")


class _Parser:
    """Validates the decoded TOML table piece by piece."""

    def __init__(self, source: str, processes_required: bool = True) -> None:
        self.source = source
        self.processes_required = processes_required
        # relative paths (a browser's audio_file) are relative to the scenario file
        self.base_dir = Path(source).resolve().parent

    def fail(self, where: str, problem: str) -> ScenarioError:
        prefix = f"{self.source}: {where}: " if where else f"{self.source}: "
        return ScenarioError(prefix + problem)

    def table(self, value: Any, where: str, known: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"must be a table, not {_kind(value)}")
        for key in value:
            if key not in known:
                names = ", ".join(known) if known else "none"
                raise self.fail(where, f"unknown key '{key}' (known: {names})")
        return value

    def required(self, table: dict[str, Any], key: str, where: str) -> Any:
        if key not in table:
            raise self.fail(where, f"missing '{key}'")
        return table[key]

    def string(self, value: Any, where: str) -> str:
        if not isinstance(value, str):
            raise self.fail(where, f"must be a string, not {_kind(value)}")
        return value

    def positive(self, value: Any, where: str) -> float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not value > 0 or value == float("inf"):
            raise self.fail(where, f"must be a positive number, not {value!r}")
        return value

    def ident(self, value: str, where: str, pattern: re.Pattern[str], rule: str) -> str:
        if not pattern.match(value):
            raise self.fail(where, f"invalid name '{value}' ({rule})")
        return value

    def scenario(self, data: dict[str, Any], text: str) -> Scenario:
        self.table(data, "", TOP_KEYS)
        if "sweep" in data:
            return _swept_scenario(self, data, text)
        name = self.string(self.required(data, "name", ""), "name")
        self.ident(name, "name", NAME_RE, "letters, digits, '.', '_', '-'; at most 64")
        duration = self.positive(self.required(data, "duration_s", ""), "duration_s")
        description = self.string(data.get("description", ""), "description")
        params = self.params(data.get("params", {}))
        analysis = self.analysis(data.get("analysis", {}))
        hosts = self.hosts(data.get("hosts", {}))
        names = [h.name for h in hosts]
        links = self.links(data.get("links", []), names, duration)
        devices = self.devices(data.get("devices", {}), names)
        self.device_refs = {d.name: d.refs() for d in devices}
        processes = ()
        if self.processes_required or "processes" in data:
            processes = self.processes(self.required(data, "processes", ""), names, params)
        calls = self.calls(data.get("calls", {}), processes, links)
        signal = self.signal(data["signal"], devices, processes) if "signal" in data else None
        self.check_signal_refs(processes, signal)
        return Scenario(
            name=name,
            duration_s=duration,
            hosts=hosts,
            links=links,
            processes=processes,
            description=description,
            params=MappingProxyType(params),
            analysis=analysis,
            devices=devices,
            calls=calls,
            signal=signal,
            source=self.source,
            text=text,
        )

    def params(self, value: Any) -> dict[str, str]:
        table = self.table(value, "params", tuple(value) if isinstance(value, dict) else ())
        out = {}
        for key, item in table.items():
            self.ident(key, f"params.{key}", ENTITY_RE, ENTITY_RULE)
            out[key] = _param_str(item, f"params.{key}", self.source)
        return out

    def analysis(self, value: Any) -> Analysis:
        table = self.table(value, "analysis", ANALYSIS_KEYS)
        unit_ms = table.get("unit_ms")
        configured = table.get("configured_latency_ms")
        period = table.get("period_ms")
        return Analysis(
            unit_ms=10 if unit_ms is None else self.positive(unit_ms, "analysis.unit_ms"),
            configured_latency_ms=None
            if configured is None
            else self.non_negative(configured, "analysis.configured_latency_ms"),
            period_ms=None if period is None else self.positive(period, "analysis.period_ms"),
        )

    def non_negative(self, value: Any, where: str) -> float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not 0 <= value < float("inf"):
            raise self.fail(where, f"must be a non-negative number, not {value!r}")
        return value

    def hosts(self, value: Any) -> tuple[Host, ...]:
        table = self.table(value, "hosts", tuple(value) if isinstance(value, dict) else ())
        if not table:
            raise self.fail("hosts", "at least one host is needed (e.g. [hosts.tx])")
        out = []
        for name, item in table.items():
            where = f"hosts.{name}"
            self.ident(name, where, ENTITY_RE, ENTITY_RULE)
            self.table(item, where, HOST_KEYS)
            out.append(Host(name=name))
        return tuple(out)

    def links(self, value: Any, hosts: list[str], duration: float) -> tuple[Link, ...]:
        if not isinstance(value, list):
            raise self.fail("links", "must be an array of tables ([[links]])")
        return tuple(
            self.link(item, f"links[{i}]", hosts, duration) for i, item in enumerate(value)
        )

    def link(self, value: Any, where: str, hosts: list[str], duration: float) -> Link:
        table = self.table(value, where, LINK_KEYS)
        between = self.required(table, "between", where)
        ok = isinstance(between, list) and len(between) == 2
        if not ok or not all(isinstance(h, str) for h in between):
            raise self.fail(f"{where}.between", 'must be two host names, e.g. ["tx", "rx"]')
        for host in between:
            if host not in hosts:
                known = ", ".join(sorted(hosts))
                raise self.fail(f"{where}.between", f"unknown host '{host}' (hosts: {known})")
        if between[0] == between[1]:
            raise self.fail(f"{where}.between", f"links host '{between[0]}' with itself")
        forward = self.impairment(table, where)
        self.check_model(forward, forward, where)
        reverse_table = self.table(table.get("reverse", {}), f"{where}.reverse", IMPAIRMENT_KEYS)
        reverse = self.impairment(reverse_table, f"{where}.reverse")
        self.check_model({**forward, **reverse}, reverse, f"{where}.reverse")
        schedule = self.schedule(table.get("schedule", []), where, duration, forward, reverse)
        backend = table.get("backend", LINK_BACKENDS[0])
        if backend not in LINK_BACKENDS:
            raise self.fail(f"{where}.backend", f"unknown backend {backend!r} "
                            f"(known: {', '.join(LINK_BACKENDS)})")  # fmt: skip
        return Link(a=between[0], b=between[1], impairment=MappingProxyType(forward),
                    reverse=MappingProxyType(reverse), schedule=schedule,
                    backend=backend)  # fmt: skip

    def impairment(self, table: dict[str, Any], where: str) -> dict[str, Any]:
        """The impairment keys of ``table``, each checked on its own."""
        out: dict[str, Any] = {}
        for key in IMPAIRMENT_KEYS:
            if key in table:
                out[key] = self.impairment_value(key, table[key], f"{where}.{key}")
        return out

    def impairment_value(self, key: str, value: Any, where: str) -> Any:
        if key in CHOICES:
            if value not in CHOICES[key]:
                known = ", ".join(CHOICES[key])
                raise self.fail(where, f"unknown {key} {value!r} (known: {known})")
            return value
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not 0 <= value < float("inf"):
            raise self.fail(where, f"must be a non-negative number, not {value!r}")
        if key in PERCENT_KEYS and value > 100:
            raise self.fail(where, f"is a percentage: at most 100, not {value!r}")
        if key == "rate_kbit" and value == 0:
            raise self.fail(where, "must be > 0 (omit rate_kbit for an unlimited link)")
        return value

    def check_model(self, effective: dict[str, Any], own: dict[str, Any], where: str) -> None:
        """Keys of ``own`` that do not fit the loss model in ``effective``."""
        model = effective.get("loss_model", "bernoulli")
        for key in GE_KEYS:
            if key in own and model != "gilbert-elliott":
                raise self.fail(f"{where}.{key}", 'needs loss_model = "gilbert-elliott"')
        if model == "gilbert-elliott":
            if "loss_pct" in own:
                raise self.fail(f"{where}.loss_pct", "does not apply to gilbert-elliott "
                                "(its loss comes from ge_p, ge_r, ge_h, ge_k)")  # fmt: skip
            if "ge_p" not in effective:
                raise self.fail(where, 'loss_model = "gilbert-elliott" needs ge_p')

    def schedule(
        self,
        value: Any,
        where: str,
        duration: float,
        forward: dict[str, Any],
        reverse: dict[str, Any],
    ) -> tuple[Mapping[str, Any], ...]:
        if not isinstance(value, list):
            raise self.fail(f"{where}.schedule", "must be an array of tables ([[links.schedule]])")
        entries = []
        for i, item in enumerate(value):
            at = f"{where}.schedule[{i}]"
            table = self.table(item, at, SCHEDULE_KEYS)
            at_s = self.required(table, "at_s", at)
            ok = isinstance(at_s, int | float) and not isinstance(at_s, bool)
            if not ok or not 0 <= at_s < float("inf"):
                raise self.fail(f"{at}.at_s", f"must be a non-negative number, not {at_s!r}")
            if at_s > duration:
                raise self.fail(f"{at}.at_s", f"{at_s:g} is beyond duration_s {duration:g}")
            entry = {"at_s": at_s, **self.impairment(table, at)}
            if len(entry) == 1:
                raise self.fail(at, "sets no impairment key")
            if "direction" in table:
                entry["direction"] = self.impairment_value("direction", table["direction"],
                                                           f"{at}.direction")  # fmt: skip
            entries.append((i, entry))
        entries.sort(key=lambda e: e[1]["at_s"])
        state = {"forward": dict(forward), "reverse": {**forward, **reverse}}
        for i, entry in entries:
            own = {k: v for k, v in entry.items() if k in IMPAIRMENT_KEYS}
            for direction, current in state.items():
                if entry.get("direction", "both") in (direction, "both"):
                    current.update(own)
                    self.check_model(current, own, f"{where}.schedule[{i}]")
        return tuple(MappingProxyType(e) for _, e in entries)

    def processes(self, value: Any, hosts: list[str], params: dict[str, str]) -> tuple:
        table = self.table(value, "processes", tuple(value) if isinstance(value, dict) else ())
        if not table:
            raise self.fail("processes", "at least one process is needed")
        return tuple(self.process(n, item, hosts, params) for n, item in table.items())

    def host_of(self, table: dict, where: str, hosts: list[str]) -> str:
        """The table's required ``host``, which must be one of the scenario's hosts."""
        host = self.string(self.required(table, "host", where), f"{where}.host")
        if host not in hosts:
            known = ", ".join(sorted(hosts))
            raise self.fail(f"{where}.host", f"unknown host '{host}' (hosts: {known})")
        return host

    def process(self, name: str, value: Any, hosts: list[str], params: dict) -> Process:
        where = f"processes.{name}"
        self.ident(name, where, ENTITY_RE, ENTITY_RULE)
        if isinstance(value, dict):
            known = set(PROCESS_KEYS) | set(BROWSER_KEYS) | set(WEBRTC_KEYS)
            for key in value:
                if key not in known:
                    raise self.fail(
                        where,
                        f"unknown key '{key}' (known: {', '.join(PROCESS_KEYS)}) or, for a "
                        f"browser: {', '.join(BROWSER_KEYS)}, or for a webrtcbin peer: "
                        f"{', '.join(WEBRTC_KEYS)}",
                    )
        table = self.table(value, where, (*PROCESS_KEYS, *BROWSER_KEYS, *WEBRTC_KEYS))
        host = self.host_of(table, where, hosts)
        if "webrtc" in table and "browser" in table:
            raise self.fail(where, "give either 'browser' or 'webrtc', not both")
        if "webrtc" in table:
            return self.webrtc(name, table, where, host)
        if "browser" in table:
            return self.browser(name, table, where, host)
        for key in BROWSER_ONLY_KEYS:
            if key in table:
                raise self.fail(f"{where}.{key}", "applies only to a browser process")
        for key in WEBRTC_ONLY_KEYS:
            if key in table:
                raise self.fail(f"{where}.{key}", f"applies only to {WEBRTC_ONLY_KEYS[key]}")
        if "pipeline" in table and "command" in table:
            raise self.fail(where, "give either 'pipeline' or 'command', not both")
        pipeline, command = "", ()
        if "command" not in table:
            self.required(table, "pipeline", where)
            pipeline = self.string(table["pipeline"], f"{where}.pipeline")
            if not pipeline.strip():
                raise self.fail(f"{where}.pipeline", "is empty")
            self.check_refs(pipeline, f"{where}.pipeline", hosts, params)
        else:
            command = self.command(table["command"], f"{where}.command", hosts, params)
        env = self.env(table.get("env", {}), f"{where}.env", hosts, params)
        sched = self.sched(table["sched"], f"{where}.sched") if "sched" in table else None
        return Process(
            name=name,
            host=host,
            pipeline=pipeline,
            env=MappingProxyType(env),
            command=command,
            sched=sched,
        )

    def webrtc(self, name: str, table: dict[str, Any], where: str, host: str) -> Process:
        """``webrtc = "gstreamer"``: the webrtcbin peer; no pipeline, command, env or sched."""
        peer = self.string(table["webrtc"], f"{where}.webrtc")
        if peer not in WEBRTC_PEERS:
            raise self.fail(
                f"{where}.webrtc", f"unknown peer '{peer}' (peers: {', '.join(WEBRTC_PEERS)})"
            )
        for key in ("pipeline", "command", "env", "sched", *BROWSER_ONLY_KEYS):
            if key in table:
                raise self.fail(where, f"'{key}' does not apply to a webrtc process")
        caps = self.string(table.get("audio_caps", WEBRTC_AUDIO_CAPS), f"{where}.audio_caps")
        if not caps.startswith("audio/x-raw"):
            raise self.fail(f"{where}.audio_caps", "must be raw audio caps (audio/x-raw,...)")
        jitterbuffer = self.jitterbuffer_ms(
            table, where, WEBRTC_JITTERBUFFER_MS, WEBRTC_JITTERBUFFER_MAX_MS
        )
        return Process(
            name=name, host=host, webrtc=peer, audio_caps=caps, jitterbuffer_ms=jitterbuffer
        )

    def browser(self, name: str, table: dict[str, Any], where: str, host: str) -> Process:
        """A ``browser = "chromium"`` process: no pipeline, command, env or sched."""
        browser = self.string(table["browser"], f"{where}.browser")
        if browser not in BROWSERS:
            raise self.fail(
                f"{where}.browser", f"unknown browser '{browser}' (browsers: {', '.join(BROWSERS)})"
            )
        for key in ("pipeline", "command", "env", "sched", "audio_caps"):
            if key in table:
                raise self.fail(where, f"'{key}' does not apply to a browser process")
        audio_file = None
        if "audio_file" in table:
            text = self.string(table["audio_file"], f"{where}.audio_file")
            if not text.strip():
                raise self.fail(f"{where}.audio_file", "is empty")
            audio_file = str(self.base_dir / text)
        processing = table.get("audio_processing", False)
        if not isinstance(processing, bool):
            raise self.fail(
                f"{where}.audio_processing", f"must be true or false, not {_kind(processing)}"
            )
        args = table.get("browser_args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) and a for a in args):
            raise self.fail(
                f"{where}.browser_args", 'must be an array of flags, e.g. ["--mute-audio"]'
            )
        return Process(
            name=name,
            host=host,
            browser=browser,
            audio_file=audio_file,
            audio_processing=processing,
            browser_args=tuple(args),
            jitterbuffer_ms=self.jitterbuffer_ms(table, where, None, BROWSER_JITTERBUFFER_MAX_MS),
        )

    def jitterbuffer_ms(
        self, table: dict[str, Any], where: str, default: int | None, most: int
    ) -> int | None:
        """``jitterbuffer_ms``: whole milliseconds from 0 to ``most``, or ``default``."""
        if "jitterbuffer_ms" not in table:
            return default
        value = table["jitterbuffer_ms"]
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
            raise self.fail(
                f"{where}.jitterbuffer_ms", f"must be an integer from 0 to {most}, not {value!r}"
            )
        return value

    def calls(
        self, value: Any, processes: tuple[Process, ...], links: tuple[Link, ...]
    ) -> tuple[Call, ...]:
        """``[calls.NAME]`` tables; every browser process must be in exactly one call."""
        table = self.table(value, "calls", tuple(value) if isinstance(value, dict) else ())
        calls = tuple(self.call(n, item, processes, links) for n, item in table.items())
        seen: dict[str, str] = {}
        for call in calls:
            for proc in call.between:
                if proc in seen:
                    raise self.fail(
                        f"calls.{call.name}.between",
                        f"process '{proc}' is already in call '{seen[proc]}' (one call each)",
                    )
                seen[proc] = call.name
        for proc in processes:
            if proc.call_peer and proc.name not in seen:
                kind = "a browser" if proc.browser else "a webrtc peer"
                raise self.fail(
                    f"processes.{proc.name}",
                    f'{kind} must be in a call ([calls.NAME] between = ["a", "b"])',
                )
        return calls

    def call(
        self, name: str, value: Any, processes: tuple[Process, ...], links: tuple[Link, ...]
    ) -> Call:
        """One ``[calls.NAME]``: two browser processes on two hosts joined by a link."""
        where = f"calls.{name}"
        self.ident(name, where, ENTITY_RE, ENTITY_RULE)
        table = self.table(value, where, CALL_KEYS)
        between = self.required(table, "between", where)
        ok = isinstance(between, list) and len(between) == 2
        if not ok or not all(isinstance(p, str) for p in between) or between[0] == between[1]:
            raise self.fail(f"{where}.between", 'must be two process names, e.g. ["alice", "bob"]')
        by_name = {p.name: p for p in processes}
        for proc in between:
            if proc not in by_name:
                known = ", ".join(by_name) or "none"
                raise self.fail(
                    f"{where}.between", f"unknown process '{proc}' (processes: {known})"
                )
            if not by_name[proc].call_peer:
                raise self.fail(
                    f"{where}.between", f"process '{proc}' is not a browser or webrtc peer"
                )
        hosts = {by_name[between[0]].host, by_name[between[1]].host}
        if len(hosts) != 2 or not any(set(link.between) == hosts for link in links):
            raise self.fail(
                f"{where}.between",
                f"'{between[0]}' and '{between[1]}' must be on two hosts joined by a [[links]]",
            )
        timeout = table.get("timeout_s", CALL_TIMEOUT_S)
        timeout = self.positive(timeout, f"{where}.timeout_s")
        return Call(name=name, caller=between[0], callee=between[1], timeout_s=float(timeout))

    def command(self, value: Any, where: str, hosts: list[str], params: dict) -> tuple:
        ok = isinstance(value, list) and value and all(isinstance(v, str) for v in value)
        if not ok or not value[0]:
            raise self.fail(where, 'must be a non-empty array of strings, e.g. ["prog", "--x"]')
        for i, arg in enumerate(value):
            self.check_refs(arg, f"{where}[{i}]", hosts, params)
        return tuple(value)

    def sched(self, value: Any, where: str) -> SchedPolicy:
        try:
            return parse_sched(self.string(value, where))
        except ValueError as exc:
            raise self.fail(where, str(exc)) from None

    def env(self, value: Any, where: str, hosts: list[str], params: dict) -> dict[str, str]:
        table = self.table(value, where, tuple(value) if isinstance(value, dict) else ())
        out = {}
        for key, item in table.items():
            if not ENV_KEY_RE.match(key):
                raise self.fail(where, f"invalid environment variable name '{key}'")
            text = _param_str(item, f"{where}.{key}", self.source)
            self.check_refs(text, f"{where}.{key}", hosts, params)
            out[key] = text
        return out

    def check_refs(self, text: str, where: str, hosts: list[str], params: dict) -> None:
        placeholder = dict.fromkeys(hosts, "0.0.0.0")
        devices = self.device_refs

        def lookup(ref: str) -> str:
            return _lookup(ref, params, placeholder, devices, SIGNAL_PLACEHOLDERS)

        substitute(text, lookup, self.source, where)

    device_refs: Mapping[str, Mapping[str, str]] = MappingProxyType({})

    def devices(self, value: Any, hosts: list[str]) -> tuple[Device, ...]:
        """``[devices.NAME]`` tables: at most one audio device per host."""
        table = self.table(value, "devices", tuple(value) if isinstance(value, dict) else ())
        out: list[Device] = []
        for name, item in table.items():
            device = self.device(name, item, hosts)
            taken = [d.name for d in out if d.host == device.host]
            if taken:
                raise self.fail(
                    f"devices.{name}.host",
                    f"host '{device.host}' already has device '{taken[0]}' (one per host)",
                )
            out.append(device)
        return tuple(out)

    def device(self, name: str, value: Any, hosts: list[str]) -> Device:
        """One ``[devices.NAME]`` table."""
        where = f"devices.{name}"
        self.ident(name, where, ENTITY_RE, ENTITY_RULE)
        table = self.table(value, where, DEVICE_KEYS)
        host = self.host_of(table, where, hosts)
        server = self.string(self.required(table, "server", where), f"{where}.server")
        if server not in DEVICE_SERVERS:
            raise self.fail(f"{where}.server", f"unknown server '{server}' (servers: jack, pulse)")
        limits = {
            "rate": (8000, 192000, 48000),
            "period_frames": (16, 16384, 480),
            "periods": (1 if server == "jack" else 2, 32, 2),
            "channels": (1, 8, 2),
        }
        numbers = {k: self.bounded_int(table, k, where, *v) for k, v in limits.items()}
        return Device(name=name, host=host, server=server, **numbers)

    def signal(
        self, value: Any, devices: tuple[Device, ...], processes: tuple[Process, ...]
    ) -> SignalRig:
        """The ``[signal]`` table: where the signal goes in and where it is recorded."""
        table = self.table(value, "signal", SIGNAL_KEYS)
        ends = {
            side: self.signal_end(table, side, devices, processes) for side in ("inject", "record")
        }
        interval = self.positive(table.get("interval_ms", 200.0), "signal.interval_ms")
        if not 100 <= interval <= 2000:
            raise self.fail("signal.interval_ms", f"must be from 100 to 2000, not {interval!r}")
        level = table.get("level_dbfs", -20.0)
        if isinstance(level, bool) or not isinstance(level, int | float) or not -60 <= level <= -3:
            raise self.fail("signal.level_dbfs", f"must be from -60 to -3, not {level!r}")
        inject_device = next((d for d in devices if d.name == ends["inject"].name), None)
        if inject_device is not None:
            if "rate" in table and table["rate"] != inject_device.rate:
                raise self.fail(
                    "signal.rate",
                    f"the signal plays at device '{inject_device.name}''s rate "
                    f"({inject_device.rate} Hz); leave rate out",
                )
            rate = inject_device.rate
        else:
            rate = self.bounded_int(table, "rate", "signal", 8000, 192000, 48000)
        return SignalRig(**ends, interval_ms=float(interval), level_dbfs=float(level), rate=rate)

    def signal_end(
        self,
        table: dict[str, Any],
        side: str,
        devices: tuple[Device, ...],
        processes: tuple[Process, ...],
    ) -> SignalEnd:
        """``inject`` or ``record``: a JACK device (with its client), a PulseAudio device,
        a GStreamer process or a browser."""
        name = self.string(self.required(table, side, "signal"), f"signal.{side}")
        client_key = f"{side}_client"
        device = next((d for d in devices if d.name == name), None)
        process = next((p for p in processes if p.name == name), None)
        if device is None and process is None:
            known = ", ".join([d.name for d in devices] + [p.name for p in processes]) or "none"
            raise self.fail(
                f"signal.{side}",
                f"unknown device or process '{name}' (audio devices, GStreamer pipelines "
                f"and browsers: {known})",
            )
        if device is not None and device.server == "pulse":
            if client_key in table:
                raise self.fail(
                    f"signal.{client_key}",
                    f"only for a JACK device; '{name}' is a PulseAudio device (the rig plays "
                    "into its null sink and records its monitor)",
                )
            return SignalEnd("pulse", name)
        if device is not None:
            if device.server != "jack":
                raise self.fail(
                    f"signal.{side}",
                    f"device '{name}' is a {device.server} device; the rig plays and records "
                    "through JACK or PulseAudio devices",
                )
            client = self.string(self.required(table, client_key, "signal"), f"signal.{client_key}")
            self.ident(client, f"signal.{client_key}", ENTITY_RE, ENTITY_RULE)
            return SignalEnd("jack", name, client)
        assert process is not None
        ref = SIGNAL_REFS[side]
        if client_key in table:
            raise self.fail(
                f"signal.{client_key}", f"only for a JACK device; '{name}' is a process"
            )
        if process.browser:
            if side == "inject" and process.audio_file is not None:
                raise self.fail(
                    f"processes.{name}.audio_file",
                    "the browser captures the signal ([signal] inject); leave audio_file out",
                )
            return SignalEnd("browser", name)
        if not process.pipeline or process.pipeline.count("${" + ref + "}") != 1:
            raise self.fail(
                f"signal.{side}",
                f"process '{name}' must be a pipeline holding ${{{ref}}} once (see docs/signal.md)",
            )
        return SignalEnd("gst", name)

    def check_signal_refs(self, processes: tuple[Process, ...], signal: SignalRig | None) -> None:
        """``${signal.source}``/``${signal.sink}`` only in the processes ``[signal]`` names."""
        ends = {"inject": signal.inject, "record": signal.record} if signal else {}
        named = {side: end.name for side, end in ends.items() if end.kind == "gst"}
        for proc in processes:
            texts = [proc.pipeline, *proc.command, *proc.env.values()]
            for side, ref in SIGNAL_REFS.items():
                if any("${" + ref + "}" in t for t in texts) and named.get(side) != proc.name:
                    raise self.fail(
                        f"processes.{proc.name}",
                        f'${{{ref}}} needs [signal] {side} = "{proc.name}"',
                    )

    def bounded_int(
        self, table: dict[str, Any], key: str, where: str, low: int, high: int, default: int
    ) -> int:
        """An integer key within ``[low, high]`` (``default`` when absent)."""
        value = table.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(
                f"{where}.{key}", f"must be an integer from {low} to {high}, not {value!r}"
            )
        return value


# --- test matrices: [sweep] -------------------------------------------------------------

EXACT_REF_RE = re.compile(r"\$\{([^}]*)\}")
SWEEP_MODES = ("product", "zip")
# first words of the ${hosts.X.addr} / ${params.X} / ${devices.X.ATTR} / ${signal.X} forms
SWEEP_RESERVED = ("hosts", "params", "devices", "signal")
POINT_UNSAFE_RE = re.compile(r"[^A-Za-z0-9._+-]")
POINT_NAME_MAX = 120


@dataclass(frozen=True)
class Sweep:
    """A test matrix (``[sweep]``): variables and their values, combined into points.

    ``mode`` is ``"product"`` (every combination, the last variable changing fastest)
    or ``"zip"`` (the i-th values of all lists together). ``template`` is the
    scenario's decoded TOML without ``[sweep]``; :meth:`point_data` instantiates it.
    """

    mode: str
    variables: tuple[tuple[str, tuple[Any, ...]], ...]
    template: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def names(self) -> list[str]:
        """Variable names in file order."""
        return [name for name, _ in self.variables]

    def combinations(self) -> list[dict[str, Any]]:
        """Each point's value of every variable, in run order."""
        lists = [values for _, values in self.variables]
        rows = itertools.product(*lists) if self.mode == "product" else zip(*lists, strict=True)
        return [dict(zip(self.names, row, strict=True)) for row in rows]

    def definition(self) -> dict[str, Any]:
        """The sweep as JSON-able data: mode and each variable's values."""
        return {"mode": self.mode, "variables": {n: list(v) for n, v in self.variables}}

    def point_data(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The template with each ``${NAME}`` replaced and swept ``[params]`` keys set.

        A string that is exactly ``"${NAME}"`` takes the value itself (its TOML type),
        so numeric keys can be swept; elsewhere the value is substituted as text.
        """
        data = _swept(dict(self.template), values)
        params = data.get("params")
        if isinstance(params, dict):
            params.update({k: v for k, v in values.items() if k in params})
        return data

    def with_template(self, **keys: Any) -> Sweep:
        """A copy whose template has some top-level keys replaced (e.g. ``duration_s``)."""
        return replace(self, template={**self.template, **keys})


def point_name(values: Mapping[str, Any]) -> str:
    """The filesystem-safe name of a sweep point, e.g. ``jb=20,delay=0``.

    Characters other than letters, digits, ``.``, ``_``, ``+`` and ``-`` in values
    become ``_``; names longer than 120 characters end in a short hash.
    """
    parts = (f"{k}={POINT_UNSAFE_RE.sub('_', _value_text(v))}" for k, v in values.items())
    name = ",".join(parts)
    if len(name) > POINT_NAME_MAX:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        name = f"{name[: POINT_NAME_MAX - 9]}~{digest}"
    return name


def _value_text(value: Any) -> str:
    """A sweep value as it is substituted into text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _swept(value: Any, values: Mapping[str, Any]) -> Any:
    """``value`` (decoded TOML) with the sweep references to ``values`` replaced."""
    if isinstance(value, str):
        exact = EXACT_REF_RE.fullmatch(value)
        if exact and exact.group(1) in values:
            return values[exact.group(1)]
        return REF_RE.sub(lambda m: _sweep_ref(m, values), value)
    if isinstance(value, dict):
        return {k: _swept(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_swept(v, values) for v in value]
    return value


def _sweep_ref(match: re.Match[str], values: Mapping[str, Any]) -> str:
    ref = match.group(1)
    return match.group(0) if ref is None or ref not in values else _value_text(values[ref])


def _strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    """Every string in decoded TOML with its dotted location."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{where}.{key}" if where else key)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, f"{where}[{i}]")


def _swept_scenario(parser: _Parser, data: dict[str, Any], text: str) -> Scenario:
    """A scenario with ``[sweep]``: every point is validated; fields are the first point's."""
    template = {k: v for k, v in data.items() if k != "sweep"}
    sweep = _sweep(parser, data["sweep"], template)
    seen: dict[str, dict[str, Any]] = {}
    first: Scenario | None = None
    for values in sweep.combinations():
        name = point_name(values)
        if name in seen:
            raise parser.fail(
                "sweep", f"two points are both named '{name}' (a repeated or look-alike value)"
            )
        seen[name] = values
        point_parser = copy.copy(parser)
        point_parser.source = f"{parser.source} [{name}]"
        point = point_parser.scenario(sweep.point_data(values), text)
        first = first or point
    assert first is not None
    return replace(first, source=parser.source, text=text, sweep=sweep)


def _sweep(parser: _Parser, value: Any, template: dict[str, Any]) -> Sweep:
    """Parse the ``[sweep]`` table and check every reference to its variables."""
    table = parser.table(value, "sweep", tuple(value) if isinstance(value, dict) else ())
    mode = parser.string(table.get("mode", "product"), "sweep.mode")
    if mode not in SWEEP_MODES:
        raise parser.fail("sweep.mode", f"unknown mode '{mode}' (modes: product, zip)")
    variables = tuple(_sweep_variable(parser, n, v) for n, v in table.items() if n != "mode")
    if not variables:
        raise parser.fail("sweep", "has no variables (e.g. jb = [20, 40])")
    if mode == "zip" and len({len(v) for _, v in variables}) > 1:
        sizes = ", ".join(f"{n}: {len(v)}" for n, v in variables)
        raise parser.fail("sweep", f'mode "zip" needs lists of one length ({sizes})')
    sweep = Sweep(mode, variables, template)
    _check_sweep_refs(parser, sweep)
    return sweep


def _sweep_variable(parser: _Parser, name: str, values: Any) -> tuple[str, tuple[Any, ...]]:
    where = f"sweep.{name}"
    parser.ident(name, where, ENTITY_RE, ENTITY_RULE)
    if name in SWEEP_RESERVED:
        raise parser.fail(where, f"name clashes with the ${{{name}.…}} references")
    if not isinstance(values, list):
        raise parser.fail(where, f"must be a list of values (e.g. [20, 40]), not {_kind(values)}")
    if not values:
        raise parser.fail(where, "is an empty list")
    for item in values:
        if not isinstance(item, str | int | float):
            raise parser.fail(where, f"values must be strings, numbers or booleans: {item!r}")
    return name, tuple(values)


def _check_sweep_refs(parser: _Parser, sweep: Sweep) -> None:
    """Every ``${NAME}`` names a variable; every variable is referenced or is a param."""
    names = sweep.names
    used: set[str] = set()
    for where, text in _strings(sweep.template, ""):
        for match in REF_RE.finditer(text):
            ref = match.group(1)
            if ref is None or "." in ref:
                continue  # $${, ${hosts.X.addr}, ${params.X}: checked per point
            if ref not in names:
                known = ", ".join(names)
                raise parser.fail(where, f"unknown sweep variable '${{{ref}}}' (sweep: {known})")
            used.add(ref)
    params = sweep.template.get("params")
    swept_params = set(params) if isinstance(params, dict) else set()
    for name in names:
        if name not in used and name not in swept_params:
            raise parser.fail(
                f"sweep.{name}", f"is not used (reference it as ${{{name}}} or name a [params] key)"
            )


def _kind(value: Any) -> str:
    """Name of a TOML value's type, for messages."""
    kinds = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    kinds |= {list: "an array", dict: "a table"}
    return kinds.get(type(value), type(value).__name__)
