"""Segment kinds: what the time between two consecutive probes of a journey is spent on.

Every segment of a path has one kind; tables, sweeps, comparisons and budgets sum
segments by kind. ``KINDS`` lists them in path order with one line each on what
they include (docs/architecture.md repeats it). The rules that assign them are in
:func:`segment_kind`.
"""

from __future__ import annotations

from latlab.ingest.events import Probe

CAPTURE = "capture"
PROCESSING = "processing"
QUEUE = "queue"
SINK_WAIT = "sink-wait"
NETWORK = "network"
FORWARDING = "forwarding"
JITTERBUFFER = "jitterbuffer"
PLAYOUT = "playout"
OTHER = "other"

KINDS: dict[str, str] = {
    CAPTURE: "from a unit's first sample being captured to the source pushing it "
    "(the capture period accumulating, a device's buffering)",
    PROCESSING: "an element working on the media: converters, payloaders, encoders, "
    "muxers, depayloaders, parsers, decoders, a browser's audio processing",
    QUEUE: "waiting in a queue element (queue, queue2, multiqueue) for the next thread",
    SINK_WAIT: "a network sink on the sending side holding each buffer until its render "
    "time (the clock wait of a synchronised sink) and making the send call",
    NETWORK: "the wire and the network stacks: from the send call's return to the receiving "
    "source's push, an emulated link's delay, a frame's first byte waiting for its last, "
    "a browser's pacer (not separable from its send)",
    FORWARDING: "inside a forwarder (an SFU): from a packet's arrival on its host to the "
    "forwarded copy leaving it, both seen by one capture on that host",
    JITTERBUFFER: "a receive buffer that holds media to absorb network jitter: "
    "rtpjitterbuffer, SRT's TSBPD receive buffer (to srtsrc's first byte), NetEq",
    PLAYOUT: "a clocked sink at the end of the path waiting to render, and an audio "
    "device's playback buffer after it",
    OTHER: "anything latlab cannot place",
}

EMULATED_LINK = "latlab-linkemu"  # the link emulator's probes: a packet entering, leaving
NETWORK_SINKS = frozenset(
    {
        "udpsink",
        "multiudpsink",
        "dynudpsink",
        "nicesink",
        "srtsink",
        "ristsink",
        "rtpsink",
        "tcpserversink",
        "tcpclientsink",
    }
)
# Sources whose protocol holds received packets for a configured latency before handing
# them out (SRT's TSBPD, RIST's receive buffer).
LATENCY_BUFFER_SOURCES = frozenset({"srtsrc", "ristsrc"})
QUEUE_FACTORIES = frozenset({"queue", "queue2", "multiqueue"})


def segment_kind(before: Probe, after: Probe) -> str:
    """The kind of the time from probe ``before`` to probe ``after`` (the same probe: a
    transport stream frame's first byte to its last)."""
    if before is after:
        return NETWORK
    if before.process != after.process:
        return JITTERBUFFER if after.factory in LATENCY_BUFFER_SOURCES else NETWORK
    if after.is_render:
        if after.factory == EMULATED_LINK:
            return NETWORK
        if after.factory in NETWORK_SINKS:
            return SINK_WAIT
        # A network source read straight by its application (kernel -> app) is network too.
        receive_path = before.element_is_source and "Network" in before.klass
        return NETWORK if receive_path else PLAYOUT
    if "jitterbuffer" in after.factory:
        return JITTERBUFFER
    if after.factory in QUEUE_FACTORIES:
        return QUEUE
    return PROCESSING


def ordered(kinds: set[str]) -> list[str]:
    """``kinds`` in path order (``KINDS``), unknown ones after them by name."""
    return [k for k in KINDS if k in kinds] + sorted(kinds - set(KINDS))
