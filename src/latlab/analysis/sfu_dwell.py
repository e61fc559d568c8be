"""The SFU segment of a run: how long each forwarded packet stayed inside a captured host.

A host with ``capture = true`` has its every packet in ``captures/HOST.lllink``.
:func:`sfu_dwell` turns that capture into the packets it received (ingress) and sent
(egress), matches each egress packet to its ingress packet
(:func:`latlab.analysis.forwarding.match_forwarded`) and describes the dwell per
subscriber leg, per source stream (a simulcast layer), per media kind and overall,
with the match counts that say how much of it was matched and what the capture may
have missed (kernel drops). Ingress and egress times come from one kernel clock: the
dwell has no clock error to state.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from latlab import rundir
from latlab.analysis.forwarding import (
    EDGE,
    MATCHED,
    STATUS_NAMES,
    Forwarding,
    Packets,
    match_forwarded,
)
from latlab.analysis.rows import unique_rows
from latlab.analysis.stats import describe
from latlab.ingest.link_log import LinkLog, LinkLogError, read_link_log

# Ethernet + IPv4 (no options) + UDP before the RTP header (as the capture sees veth frames).
_UNDER_RTP = 14 + 20 + 8
_CLOCK_RATES = np.array([8000, 16000, 24000, 32000, 48000, 90000])
INGRESS, EGRESS = 0, 1
MIN_LAYER_FRAMES = 0.2  # share of the busiest video stream's frames a layer carries


class SfuDwellError(LinkLogError):
    """A capture that cannot be used at all; ``str()`` names the file."""


def sfu_dwell(run_dir: Path) -> tuple[dict[str, Any], pa.Table | None]:
    """summary.json's ``forwarding`` (one entry per captured host) and the per-packet
    table of every egress RTP packet (``forwarding.parquet``); ({}, None) without a capture."""
    found, tables = {}, []
    for host in rundir.capture_hosts(run_dir):
        try:
            summary, table = host_dwell(run_dir, host)
        except LinkLogError as exc:
            found[host] = {"error": str(exc)}
            continue
        found[host] = summary
        tables.append(table)
    return found, (pa.concat_tables(tables) if tables else None)


def host_dwell(run_dir: Path, host: str) -> tuple[dict[str, Any], pa.Table]:
    """The dwell inside one captured host."""
    log = read_link_log(rundir.capture_log(run_dir, host))
    stats = _capture_stats(rundir.capture_stats(run_dir, host))
    streams, ingress, egress = _packets(log)
    forwarding = match_forwarded(ingress, egress)
    kinds = _kinds(streams, ingress)
    layers = _layers(streams, ingress, kinds)
    matched = _Matched(streams, forwarding, ingress, egress, kinds, layers)
    summary = {
        "host": host,
        "capture": {**stats, "problems": log.problems},
        "forwarded": len(egress),
        **forwarding.counts(),
        "match_rate": _rate(forwarding, len(egress)),
        "received": len(ingress),
        **_packet_rates(ingress, egress),
        "not_forwarded": _not_forwarded(forwarding, ingress, egress),
        "dwell": describe(forwarding.dwell_ns[forwarding.status == MATCHED]),
        "by_kind": _by(forwarding, ingress, kinds),
        "legs": _legs(matched),
        "problems": _problems(stats, log),
    }
    return summary, _table(host, matched)


def _capture_stats(path: Path) -> dict[str, Any]:
    """What the capture counted (frames, kernel drops...); {} if it never wrote it."""
    try:
        stats = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return stats if isinstance(stats, dict) else {}


def _packets(log: LinkLog) -> tuple[list[dict[str, Any]], Packets, Packets]:
    """The stream table (one row per direction, transport and SSRC) and the RTP packets
    of each direction."""
    c = log.columns
    rtp = c["is_rtp"] & (c["rtp_header_words"] > 0) & (c["ethertype"] == 0x0800)
    direction = c["direction"].astype(np.int64)
    ip = np.where(direction == INGRESS, c["src_ip"], c["dst_ip"]).astype(np.int64)
    port = np.where(direction == INGRESS, c["src_port"], c["dst_port"]).astype(np.int64)
    key = np.stack([direction, ip, port, c["ssrc"].astype(np.int64)])[:, rtp]
    uniq, stream = unique_rows(key)
    streams = [{"direction": int(d), "addr": f"{ipaddress.IPv4Address(int(a))}:{int(p)}",
                "ssrc": int(s)} for d, a, p, s in uniq.T]  # fmt: skip
    payload = c["size"].astype(np.int64) - _UNDER_RTP - 4 * c["rtp_header_words"].astype(np.int64)
    columns = {"t_ns": c["arrival_ns"].astype(np.int64), "seq": c["seq"].astype(np.int64),
               "ts": c["rtp_ts"].astype(np.int64), "marker": c["marker"],
               "payload_len": payload}  # fmt: skip
    out = []
    for d in (INGRESS, EGRESS):
        mine = direction[rtp] == d
        order = np.argsort(columns["t_ns"][rtp][mine], kind="stable")
        out.append(Packets(stream=stream[mine][order],
                           **{k: v[rtp][mine][order] for k, v in columns.items()}))  # fmt: skip
    return streams, out[0], out[1]


def _kinds(streams: list[dict[str, Any]], ingress: Packets) -> np.ndarray:
    """Per stream: "video" if its RTP clock runs at 90 kHz, else "audio" (from the
    ingress packets; egress streams take their source's kind later)."""
    kinds = np.full(len(streams), "", dtype=object)
    for s in np.unique(ingress.stream):
        mine = ingress.stream == s
        span_ns = ingress.t_ns[mine][-1] - ingress.t_ns[mine][0]
        if span_ns < 100_000_000:
            continue
        ticks = (ingress.ts[mine][-1] - ingress.ts[mine][0]) % (1 << 32)
        rate = _CLOCK_RATES[np.argmin(np.abs(_CLOCK_RATES - ticks * 1e9 / span_ns))]
        kinds[s] = "video" if rate == 90000 else "audio"
    return kinds


def _layers(streams: list[dict[str, Any]], ingress: Packets, kinds: np.ndarray) -> np.ndarray:
    """Per ingress video stream: its simulcast layer among the video streams from the same
    address, 0 the fewest payload bytes per frame (-1 where a sender has one). A frame is an
    RTP timestamp with a marker bit (on a frame's last packet). A stream with fewer than
    ``MIN_LAYER_FRAMES`` of the frames of its sender's busiest video stream carries no
    layer: retransmissions and bandwidth probes (RTX padding, of its own SSRC, has more
    packets and timestamps than a layer, but few with a marker: in Chromium's, either
    almost no marker or a few timestamps repeated). A layer that started
    late in the run still ranks by its frames' size, not by its count of packets."""
    layers = np.full(len(streams), -1, dtype=np.int64)
    ends = ingress.marker.astype(bool)
    pairs = unique_rows(np.stack([ingress.stream[ends], ingress.ts[ends]]))[0]
    frames = np.bincount(pairs[0], minlength=len(streams))
    payload = np.bincount(ingress.stream, weights=ingress.payload_len, minlength=len(streams))
    per_frame = payload / np.maximum(frames, 1)
    by_sender: dict[str, list[int]] = {}
    for s, row in enumerate(streams):
        if row["direction"] == INGRESS and kinds[s] == "video":
            by_sender.setdefault(row["addr"], []).append(s)
    for group in by_sender.values():
        busiest = max(frames[s] for s in group)
        group = [s for s in group if frames[s] >= max(MIN_LAYER_FRAMES * busiest, 1)]
        if len(group) > 1:
            for rank, s in enumerate(sorted(group, key=lambda s: per_frame[s])):
                layers[s] = rank
    return layers


def _rate(forwarding: Forwarding, n: int) -> float | None:
    """Matched among the forwarded packets: every egress packet but those at a leg's edge
    (the SFU's own, ``forwarding.EDGE``), which forwarded nothing."""
    matched = int((forwarding.status == MATCHED).sum())
    forwarded = n - int((forwarding.status == EDGE).sum())
    return round(matched / forwarded, 6) if forwarded else None


def _packet_rates(ingress: Packets, egress: Packets) -> dict[str, float | None]:
    """RTP packets per second in and out, over the span the capture saw packets."""
    times = np.concatenate([ingress.t_ns, egress.t_ns])
    span_s = (times.max() - times.min()) / 1e9 if len(times) > 1 else 0.0
    if span_s <= 0:
        return {"received_per_s": None, "forwarded_per_s": None}
    return {"received_per_s": round(len(ingress) / span_s, 1),
            "forwarded_per_s": round(len(egress) / span_s, 1)}  # fmt: skip


def _not_forwarded(forwarding: Forwarding, ingress: Packets, egress: Packets) -> dict[str, Any]:
    """Packets the SFU received of a stream it was forwarding on a leg but did not send on
    that leg. A leg's matched packets, in the order it sent them, make runs of one source
    stream (a simulcast leg changes runs at each layer switch); in each run every ingress
    packet of its source from the first to the last one the run carried is expected on the
    leg once. With one stream per source this is exact; a packet of the old layer sent
    after the switch (in flight) makes a short run of its own."""
    ok = np.flatnonzero(forwarding.status == MATCHED)
    if not len(ok):
        return {"expected": 0, "forwarded": 0, "rate": None}
    # each ingress packet's place among its stream's packets (ingress is in time order)
    by_stream = np.argsort(ingress.stream, kind="stable")
    place = np.empty(len(ingress), dtype=np.int64)
    starts = np.searchsorted(ingress.stream[by_stream], ingress.stream[by_stream], side="left")
    place[by_stream] = np.arange(len(ingress)) - starts
    by_leg = ok[np.argsort(egress.stream[ok], kind="stable")]  # egress is in time order
    leg = egress.stream[by_leg]
    source = forwarding.ingress_index[by_leg]
    stream = ingress.stream[source]
    new_run = np.r_[True, (leg[1:] != leg[:-1]) | (stream[1:] != stream[:-1])]
    run_starts = np.flatnonzero(new_run)
    first = np.minimum.reduceat(place[source], run_starts)
    last = np.maximum.reduceat(place[source], run_starts)
    run = np.cumsum(new_run) - 1
    carried = unique_rows(np.stack([run, source]))[0].shape[1]
    expected = int((last - first + 1).sum())
    return {"expected": expected, "forwarded": carried,
            "rate": round(1.0 - carried / expected, 6) if expected else None}  # fmt: skip


def _by(forwarding: Forwarding, ingress: Packets, kinds: np.ndarray) -> dict[str, Any]:
    ok = forwarding.status == MATCHED
    source_kind = kinds[ingress.stream[forwarding.ingress_index[ok]]]
    return {kind: describe(forwarding.dwell_ns[ok][source_kind == kind])
            for kind in sorted(set(source_kind) - {""})}  # fmt: skip


@dataclass(frozen=True)
class _Matched:
    """A capture's streams and packets, matched, with each stream's kind and layer."""

    streams: list[dict[str, Any]]
    forwarding: Forwarding
    ingress: Packets
    egress: Packets
    kinds: np.ndarray
    layers: np.ndarray


def _legs(m: _Matched) -> list[dict[str, Any]]:
    """Per egress stream (a subscriber leg): its counts, its dwell, and per source stream
    it carried (an epoch's source: a layer) the dwell of the packets from it."""
    streams, forwarding, ingress, egress = m.streams, m.forwarding, m.ingress, m.egress
    kinds, layers = m.kinds, m.layers
    out = []
    ok = forwarding.status == MATCHED
    source = np.where(ok, _source_stream(forwarding, ingress), -1)
    for s in np.unique(egress.stream):
        mine = egress.stream == s
        sources = [
            {"from": streams[i]["addr"], "ssrc": f"{streams[i]['ssrc']:08x}",
             "kind": kinds[i], "layer": int(layers[i]) if layers[i] >= 0 else None,
             "dwell": describe(forwarding.dwell_ns[mine & (source == i)])}
            for i in np.unique(source[mine & ok])
        ]  # fmt: skip
        out.append({"to": streams[s]["addr"], "ssrc": f"{streams[s]['ssrc']:08x}",
                    "kind": sources[0]["kind"] if sources else "",
                    "packets": int(mine.sum()), **forwarding.counts(mine),
                    "dwell": describe(forwarding.dwell_ns[mine & ok]),
                    "sources": sources})  # fmt: skip
    return out


def _source_stream(forwarding: Forwarding, ingress: Packets) -> np.ndarray:
    """Per egress packet, the stream of the ingress packet it was matched to (a repeat's
    too), -1 where none."""
    index = forwarding.ingress_index
    return np.where(index >= 0, ingress.stream[np.maximum(index, 0)], -1)


def _problems(stats: dict[str, Any], log: LinkLog) -> list[str]:
    """What may be missing from the capture, one line each."""
    problems = list(log.problems)
    if not stats:
        problems.append("the capture wrote no statistics (killed?): kernel drops unknown")
    elif stats.get("kernel_drops"):
        problems.append(f"the kernel dropped {stats['kernel_drops']} frames before the capture "
                        "read them (its socket buffer was full)")  # fmt: skip
    if stats.get("without_kernel_timestamp"):
        problems.append(f"{stats['without_kernel_timestamp']} frames had no kernel timestamp "
                        "(timed when read instead)")  # fmt: skip
    return problems


def _table(host: str, m: _Matched) -> pa.Table:
    """One row per egress RTP packet: leg, status, its source packet and the dwell."""
    streams, forwarding, ingress, egress = m.streams, m.forwarding, m.ingress, m.egress
    kinds, layers = m.kinds, m.layers
    ok = forwarding.status == MATCHED
    index = np.maximum(forwarding.ingress_index, 0)
    source = _source_stream(forwarding, ingress)
    addr = np.array([s["addr"] for s in streams] + [""], dtype=object)
    ssrc = np.array([s["ssrc"] for s in streams] + [0], dtype=np.int64)
    status_name = np.array(list(STATUS_NAMES.values()), dtype=object)
    return pa.table({
        "host": pa.array([host] * len(egress), pa.string()),
        "to": pa.array(addr[egress.stream], pa.string()),
        "ssrc": pa.array(ssrc[egress.stream], pa.uint32()),
        "seq": pa.array(egress.seq, pa.uint16()),
        "rtp_ts": pa.array(egress.ts, pa.uint32()),
        "egress_ns": pa.array(egress.t_ns, pa.int64()),
        "status": pa.array(status_name[forwarding.status], pa.string()),
        "from": pa.array(addr[source], pa.string()),
        "source_ssrc": pa.array(ssrc[source], pa.uint32()),
        "source_seq": pa.array(np.where(ok, ingress.seq[index], 0), pa.uint16()),
        "source_rtp_ts": pa.array(np.where(ok, ingress.ts[index], 0), pa.uint32()),
        "kind": pa.array(np.where(source >= 0, kinds[source], ""), pa.string()),
        "layer": pa.array(np.where(source >= 0, layers[source], -1), pa.int8()),
        "ingress_ns": pa.array(np.where(ok, ingress.t_ns[index], 0), pa.int64()),
        "dwell_ms": pa.array(np.where(ok, forwarding.dwell_ns / 1e6, np.nan), pa.float64()),
    })  # fmt: skip
