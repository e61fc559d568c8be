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

The package: :mod:`.model` is what a file may say (pydantic models and every rule,
with the value rules of :mod:`.rules`), :mod:`.load` reads a file into it,
:mod:`.objects` holds the validated scenario the lab runs, :mod:`.refs` the
``${...}`` references and :mod:`.sweep` the expansion of ``[sweep]``.
"""

from latlab.lab.scenario.errors import ScenarioError
from latlab.lab.scenario.load import load_scenario, parse_scenario
from latlab.lab.scenario.objects import (
    BACKEND_EMULATOR,
    CALL_TIMEOUT_S,
    LINK_BACKENDS,
    WEBRTC_AUDIO_CAPS,
    WEBRTC_JITTERBUFFER_MS,
    Analysis,
    Call,
    Device,
    Host,
    HostClock,
    Link,
    Load,
    Process,
    Room,
    Scenario,
    Sfu,
    SignalEnd,
    SignalRig,
)
from latlab.lab.scenario.refs import (
    DEVICE_ATTRS,
    HOST_ATTRS,
    REF_RE,
    SIGNAL_PLACEHOLDERS,
    SIGNAL_REFS,
    substitute,
)
from latlab.lab.scenario.sweep import Sweep, point_name

__all__ = [
    "BACKEND_EMULATOR",
    "CALL_TIMEOUT_S",
    "DEVICE_ATTRS",
    "HOST_ATTRS",
    "LINK_BACKENDS",
    "REF_RE",
    "SIGNAL_PLACEHOLDERS",
    "SIGNAL_REFS",
    "WEBRTC_AUDIO_CAPS",
    "WEBRTC_JITTERBUFFER_MS",
    "Analysis",
    "Call",
    "Device",
    "Host",
    "HostClock",
    "Link",
    "Load",
    "Process",
    "Room",
    "Scenario",
    "ScenarioError",
    "Sfu",
    "SignalEnd",
    "SignalRig",
    "Sweep",
    "load_scenario",
    "parse_scenario",
    "point_name",
    "substitute",
]
