"""Phases: the coarse parts of a journey that people budget for (encode, transport, decode).

A phase is a span of consecutive probes: ``sender`` (origin to the last probe in
the origin process: the network sink handing the media to the network),
``transport`` (from there to the first probe of the final process where the unit
is whole: for a transport stream its last byte delivered), ``receiver`` (the
rest). Where the sender has an encoder, ``sender`` splits into ``encode`` (to the
encoder's output) and ``mux`` (to the send, with any clock wait of the sink);
where the receiver has a decoder, ``receiver`` splits into ``buffer`` (to the
output of the last queue or jitter buffer before the decoder, if any), ``decode``
(demuxing, parsing and decoding, to the decoder's output) and ``render``. Each
phase's distribution is over the units' own sums, not a sum of percentiles.
"""

from __future__ import annotations

from latlab.stitch.journeys import Journeys
from latlab.stitch.kinds import JITTERBUFFER, QUEUE
from latlab.stitch.mpegts_path import FIRST_BYTE

BUFFERING = (QUEUE, JITTERBUFFER)


def phase_bounds(journeys: Journeys) -> dict[str, tuple[int, int]]:
    """Phase name -> (first probe, last probe) indices in the journey's probes."""
    names = journeys.probe_names
    process = [name.split("/", 1)[0] for name in names]
    if process[0] == process[-1]:
        return {}
    sent = max(i for i, p in enumerate(process) if p == process[0])
    delivered = process.index(process[-1])
    if names[delivered].endswith(FIRST_BYTE):
        delivered += 1
    last = len(names) - 1
    bounds = {"sender": (0, sent), "transport": (sent, delivered), "receiver": (delivered, last)}
    klass = journeys.probe_klass
    encoder = [i for i in range(1, sent + 1) if "Encoder" in klass[i]]
    decoder = [i for i in range(delivered + 1, last + 1) if "Decoder" in klass[i]]
    if encoder:
        bounds["encode"] = (0, encoder[-1])
        bounds["mux"] = (encoder[-1], sent)
    if decoder:
        kinds = journeys.segment_kinds  # segment i runs from probe i to probe i + 1
        buffers = [i + 1 for i in range(delivered, decoder[0]) if kinds[i] in BUFFERING]
        if buffers:
            bounds["buffer"] = (delivered, buffers[-1])
        bounds["decode"] = (buffers[-1] if buffers else delivered, decoder[0])
        bounds["render"] = (decoder[0], last)
    return bounds
