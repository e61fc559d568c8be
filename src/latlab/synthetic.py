"""Synthetic runs with known answers, for testing stitching and benchmarking analysis.

``make_rtp_audio_run`` writes the traces a two-process RTP audio run would
produce (sender: source, capsfilter, payloader, udpsink; receiver: udpsrc,
jitter buffer, depayloader, a re-framing element, a clocked sink) with planted
delays, loss, reordering and duplicates, and returns the true time each unit
passed each probe, computed independently of latlab's stitching.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import pairwise
from pathlib import Path

import numpy as np

from latlab.ingest.trace_format import EVENT_DTYPE, NONE_U64, EventFlag, Kind, PadFlag
from latlab.ingest.trace_writer import TraceWriter
from latlab.rundir import (
    ENV_FILE,
    ENV_SCHEMA,
    POINTS_DIR,
    RUN_FILE,
    RUN_SCHEMA,
    SWEEP_FILE,
    SWEEP_SCHEMA,
    TRACES,
    make_layout,
    trace_file,
    write_json,
)

MS = 1_000_000
US = 1_000
SSRC = 0x1234ABCD
RATE = 48_000


@dataclass
class SyntheticRtpAudio:
    """Parameters of a synthetic RTP audio run (all times in ns)."""

    units: int = 1000  # 10 ms source buffers
    source_period: int = 10 * MS
    ptime: int = 20 * MS
    split: int = 5 * MS  # receiver re-framing
    capsfilter_delay: int = 20 * US
    payloader_delay: int = 50 * US
    send_delay: int = 30 * US
    network_delay: int = 3 * MS
    network_jitter: int = 0
    jitterbuffer_latency: int = 20 * MS
    depay_delay: int = 40 * US
    split_delay: int = 10 * US
    render_delay: int = 2 * MS  # sink waits until its clock says so
    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    seq_start: int = 65_000  # wraps within a few seconds
    seed: int = 1
    receiver_skew_ppm: int = 0  # receiver PTS run this much faster than the media
    link_in_delay: int = 0  # > 0: an emulated link logs each packet this long after the send
    link_out_before: int = 40 * US  # ... and releases it this long before the receiver reads it
    sender_base: int = 1_000_000 * MS
    receiver_base: int = 999_000 * MS
    # The receiver's clock against the sender's (another machine): a receiver time t is
    # written as t + offset + drift_ppm x 1e-6 x (t - sender_base); all in one clock: 0, 0.
    receiver_offset: int = 0
    receiver_drift_ppm: float = 0.0
    sink_factory: str = "fakesink"  # the receiver's clocked sink (e.g. an audio device's)


@dataclass
class SyntheticResult:
    """Where the traces went and the true journey times (units x probes, -1 = missing)."""

    trace_dir: Path
    probe_names: list[str]
    truth: np.ndarray
    packets_lost: int
    packets_duplicated: int
    packets_reordered: int
    link_columns: dict[str, np.ndarray] | None = None


def _records(n: int) -> np.ndarray:
    rec = np.zeros(n, EVENT_DTYPE)
    for name in ("pts", "dts", "duration", "offset", "offset_end"):
        rec[name] = NONE_U64
    return rec


def _raw(t, pts, dur, pad_id, thread, offset=None) -> np.ndarray:
    rec = _records(len(t))
    rec["t_ns"], rec["pts"], rec["duration"] = t, pts, dur
    rec["pad_id"], rec["thread_idx"], rec["size"] = pad_id, thread, 1920
    if offset is not None:
        rec["offset"], rec["offset_end"] = offset, offset + dur * RATE // 1_000_000_000
    return rec


def _rtp(t, pts, seq, rtp_ts, pad_id, thread, kind=Kind.PUSH) -> np.ndarray:
    rec = _raw(t, pts, np.full(len(t), NONE_U64), pad_id, thread)
    rec["rtp_ssrc"], rec["rtp_seq"], rec["rtp_ts"] = SSRC, seq & 0xFFFF, rtp_ts & 0xFFFFFFFF
    rec["rtp_pt"], rec["event_flags"], rec["kind"] = 96, EventFlag.RTP, kind
    return rec


class _Sender:
    def __init__(self, p: SyntheticRtpAudio) -> None:
        k = np.arange(p.units, dtype=np.int64)
        self.src_pts = k * p.source_period
        self.src_push = p.sender_base + self.src_pts + p.source_period + (k % 7) * 13 * US
        self.caps_push = self.src_push + p.capsfilter_delay
        per_packet = p.ptime // p.source_period
        m = np.arange(p.units // per_packet, dtype=np.int64)
        self.pkt_pts = m * p.ptime
        self.pkt_push = self.caps_push[(m + 1) * per_packet - 1] + p.payloader_delay
        self.pkt_done = self.pkt_push + p.send_delay
        self.seq = p.seq_start + m
        self.rtp_ts = 4242 + m * (p.ptime * RATE // 1_000_000_000)


def _arrivals(p: SyntheticRtpAudio, s: _Sender, rng: np.random.Generator):
    """Packets as they reach the receiver: lost ones removed, duplicates and reorders added."""
    n = len(s.pkt_pts)
    delay = p.network_delay + (
        rng.normal(0, p.network_jitter, n).astype(np.int64) if p.network_jitter else 0
    )
    arrive = s.pkt_done + np.maximum(delay, 0)
    late = np.flatnonzero(rng.random(n - 1) < p.reorder)
    arrive[late] = arrive[late + 1] + 1 * MS  # overtaken by the next packet
    kept = rng.random(n) >= p.loss
    idx = np.flatnonzero(kept)
    dup = idx[rng.random(len(idx)) < p.duplicate]
    all_idx = np.concatenate([idx, dup])
    all_t = np.concatenate([arrive[idx], arrive[dup] + 500 * US])
    order = np.argsort(all_t, kind="stable")
    return all_idx[order], all_t[order], kept, _count_reordered(all_idx[order]), len(dup)


def _count_reordered(packet_order: np.ndarray) -> int:
    """Arrivals of a packet older than one already seen (a plain loop: the reference)."""
    newest, count = -1, 0
    for packet in packet_order.tolist():
        if packet < newest:
            count += 1
        newest = max(newest, packet)
    return count


def make_rtp_audio_run(out_dir: Path, params: SyntheticRtpAudio | None = None) -> SyntheticResult:
    """Write sender and receiver traces of a synthetic RTP audio run into ``out_dir``."""
    p = params or SyntheticRtpAudio()
    per_packet = p.ptime // p.source_period
    p = replace(p, units=p.units - p.units % per_packet)  # whole packets only
    rng = np.random.default_rng(p.seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    s = _Sender(p)
    arr_idx, arr_t, kept, reordered, duplicated = _arrivals(p, s, rng)
    first_arrival = np.full(len(s.pkt_pts), -1, np.int64)
    np.minimum.at(first_arrival.view(np.uint64), arr_idx, arr_t.view(np.uint64))
    first_arrival[~kept] = -1

    # Receiver: the jitter buffer releases packet m at a fixed schedule; late ones are dropped.
    recv_pts0 = int(first_arrival[kept][0]) - p.receiver_base
    # The jitter buffer may re-stamp packets with its skew estimate (mode=slave).
    # (the skew term alone is scaled: pts x 10^6 overflows int64 after 2.56 h of media)
    recv_pts = recv_pts0 + s.pkt_pts + s.pkt_pts * p.receiver_skew_ppm // 1_000_000
    jb_out = p.receiver_base + recv_pts + p.jitterbuffer_latency
    released = kept & (first_arrival <= jb_out)
    depay = jb_out + p.depay_delay
    per_split = p.ptime // p.split
    rel = np.flatnonzero(released)
    sub = np.arange(per_split, dtype=np.int64)
    split_pts = (recv_pts[rel][:, None] + sub * p.split).ravel()
    split_push = np.repeat(depay[rel] + p.split_delay, per_split)
    render = np.maximum(
        split_push, p.receiver_base + split_pts + p.jitterbuffer_latency + p.render_delay
    )

    _write_sender(out_dir, p, s)
    _write_receiver(
        out_dir,
        p,
        s,
        (arr_idx, arr_t),
        rel,
        (recv_pts, jb_out, depay),
        (split_pts, split_push, render),
    )
    truth, names = _truth(
        p, s, first_arrival, released, (jb_out, depay), (split_pts, split_push, render, recv_pts)
    )
    result = SyntheticResult(out_dir, names, truth, int((~kept).sum()), duplicated, reordered)
    if p.link_in_delay:
        link_in = s.pkt_done + p.link_in_delay
        result.link_columns = _link_columns(p, s, link_in, (arr_idx, arr_t), kept)
        link_out = np.where(first_arrival >= 0, first_arrival - p.link_out_before, -1)
        m = (result.truth[:, 0] - p.sender_base) // p.ptime
        at = names.index("sender/udpsink0:sink") + 1
        result.truth = np.insert(result.truth, at, [link_in[m], link_out[m]], axis=1)
        result.probe_names[at:at] = ["link/tx->rx:in", "link/tx->rx:out"]
    return result


def _link_columns(p, s, link_in, arrivals, kept) -> dict[str, np.ndarray]:
    """What an emulated link between the hosts would log: every packet, its fate."""
    arr_idx, arr_t = arrivals
    copy = np.zeros(len(arr_idx), bool)
    _, first = np.unique(arr_idx, return_index=True)
    copy[np.setdiff1d(np.arange(len(arr_idx)), first)] = True
    lost = np.flatnonzero(~kept)
    packet = np.concatenate([arr_idx, lost])
    verdict = np.concatenate([np.where(copy, 3, 0), np.ones(len(lost), np.int64)])
    released = np.concatenate([arr_t - p.link_out_before, np.zeros(len(lost), np.int64)])
    return {
        "arrival_ns": link_in[packet],
        "released_ns": released,
        "direction": np.zeros(len(packet), np.int64),
        "verdict": verdict,
        "is_rtp": np.ones(len(packet), bool),
        "ssrc": np.full(len(packet), SSRC, np.uint32),
        "seq": (s.seq[packet] & 0xFFFF).astype(np.uint16),
        "rtp_ts": (s.rtp_ts[packet] & 0xFFFFFFFF).astype(np.uint32),
        "pt": np.full(len(packet), 96, np.uint8),
        "size": np.full(len(packet), 1932, np.uint32),
    }


def _write_in_time_order(w: TraceWriter, parts: list[np.ndarray], chunk: int = 1024) -> None:
    """Write events as the tracer does: in time order, in chunks."""
    records = np.concatenate(parts)
    records = records[np.argsort(records["t_ns"], kind="stable")]
    for start in range(0, len(records), chunk):
        w.events(records[start : start + chunk])


def _write_chain(w: TraceWriter, chain: list[tuple[str, str]]) -> None:
    """PAD chunks for a linear chain of (element, factory), source first, sink last."""
    for pad_id, ((name, factory), (peer, peer_factory)) in enumerate(pairwise(chain), 1):
        flags = PadFlag.SRC
        if pad_id == 1:
            flags |= PadFlag.ELEMENT_IS_SOURCE
        if pad_id == len(chain) - 1:
            flags |= PadFlag.PEER_IS_SINK
        w.pad(
            pad_id, name, flags=flags, factory=factory, peer_element=peer, peer_factory=peer_factory
        )


def _write_sender(out_dir: Path, p: SyntheticRtpAudio, s: _Sender) -> None:
    with TraceWriter(out_dir / trace_file("sender", 100), pid=100) as w:
        w.info(process="sender", hostname="synthetic")
        _write_chain(
            w,
            [
                ("audiotestsrc0", "audiotestsrc"),
                ("capsfilter0", "capsfilter"),
                ("rtpL16pay0", "rtpL16pay"),
                ("udpsink0", "udpsink"),
            ],
        )
        w.caps(1, 0, "audio/x-raw, format=(string)S16BE, rate=(int)48000, channels=(int)2")
        w.caps(3, 0, "application/x-rtp, media=(string)audio, clock-rate=(int)48000")
        w.thread(0, 100, "audiotestsrc0:src")
        w.clock(1, p.sender_base, p.sender_base, p.sender_base)
        offsets = s.src_pts * RATE // 1_000_000_000
        _write_in_time_order(
            w,
            [
                _raw(s.src_push, s.src_pts, np.full(p.units, p.source_period), 1, 0, offsets),
                _raw(s.caps_push, s.src_pts, np.full(p.units, p.source_period), 2, 0, offsets),
                _rtp(s.pkt_push, s.pkt_pts, s.seq, s.rtp_ts, 3, 0),
                _rtp(s.pkt_done, s.pkt_pts, s.seq, s.rtp_ts, 3, 0, Kind.DONE),
            ],
        )


def _write_receiver(out_dir, p, s, arrivals, rel, jb, split) -> None:
    arr_idx, arr_t = arrivals
    recv_pts, jb_out, depay = jb
    split_pts, split_push, render = split
    with TraceWriter(out_dir / trace_file("receiver", 200), pid=200) as w:
        w.info(process="receiver", hostname="synthetic")
        _write_chain(
            w,
            [
                ("udpsrc0", "udpsrc"),
                ("rtpjitterbuffer0", "rtpjitterbuffer"),
                ("rtpL16depay0", "rtpL16depay"),
                ("split0", "audiobuffersplit"),
                (f"{p.sink_factory}0", p.sink_factory),
            ],
        )
        w.caps(1, 0, "application/x-rtp, media=(string)audio, clock-rate=(int)48000")
        w.caps(3, 0, "audio/x-raw, rate=(int)48000, channels=(int)2")
        for idx, name in enumerate(("udpsrc0:src", "rtpjitterbuffer0:src")):
            w.thread(idx, 200 + idx, name)
        base = int(_receiver_clock(p, np.array([p.receiver_base]))[0])
        w.clock(1, base, base, base)
        dur = np.full(len(rel), p.ptime)
        sdur = np.full(len(split_pts), p.split)
        done = _raw(render, split_pts, sdur, 4, 1)
        done["kind"] = Kind.DONE
        parts = [
            _rtp(arr_t, arr_t - p.receiver_base, s.seq[arr_idx], s.rtp_ts[arr_idx], 1, 0),
            _rtp(jb_out[rel], recv_pts[rel], s.seq[rel], s.rtp_ts[rel], 2, 1),
            _raw(depay[rel], recv_pts[rel], dur, 3, 1),
            _raw(split_push, split_pts, sdur, 4, 1),
            done,
        ]
        for part in parts:
            part["t_ns"] = _receiver_clock(p, part["t_ns"].astype(np.int64))
        _write_in_time_order(w, parts)


def _receiver_clock(p: SyntheticRtpAudio, t: np.ndarray) -> np.ndarray:
    """Sender-clock times as the receiver's clock reads them (receiver_offset, _drift_ppm)."""
    if not p.receiver_offset and not p.receiver_drift_ppm:
        return t
    drift = np.rint((t - p.sender_base) * (p.receiver_drift_ppm * 1e-6)).astype(np.int64)
    return t + p.receiver_offset + drift


def _truth(p, s, first_arrival, released, jb, split):
    """True passage times per 10 ms unit (-1 where the unit never passed)."""
    jb_out, depay = jb
    split_pts, split_push, render, recv_pts = split
    u = np.arange(p.units, dtype=np.int64)
    m = (u * p.source_period) // p.ptime  # packet holding the unit's end
    unit_end_rel = (u * p.source_period + p.source_period - 1) - m * p.ptime
    sub = unit_end_rel // p.split
    # Position of the split buffer holding the unit's end, in the receiver's PTS.
    key = recv_pts[m] + sub * p.split
    where = np.searchsorted(split_pts, key)
    where_c = np.minimum(where, len(split_pts) - 1)
    has_split = (where < len(split_pts)) & (split_pts[where_c] == key) & released[m]
    miss = -1
    cols = [
        p.sender_base + u * p.source_period,  # capture of the unit's first sample
        s.src_push,
        s.caps_push,
        s.pkt_push[m],
        s.pkt_done[m],
        np.where(first_arrival[m] >= 0, first_arrival[m], miss),
        np.where(released[m], jb_out[m], miss),
        np.where(released[m], depay[m], miss),
        np.where(has_split, split_push[where_c], miss),
        np.where(has_split, render[where_c], miss),
    ]
    names = [
        "sender/audiotestsrc0:capture",
        "sender/audiotestsrc0:src",
        "sender/capsfilter0:src",
        "sender/rtpL16pay0:src",
        "sender/udpsink0:sink",
        "receiver/udpsrc0:src",
        "receiver/rtpjitterbuffer0:src",
        "receiver/rtpL16depay0:src",
        "receiver/split0:src",
        f"receiver/{p.sink_factory}0:sink",
    ]
    return np.column_stack(cols).astype(np.int64), names


@dataclass
class SyntheticRunInfo:
    """What run.json and env.json of a synthetic run directory say (``make_run_dir``)."""

    name: str = "synthetic-rtp"
    started_at: str = "2026-11-01T10:00:00.000000+00:00"
    hostname: str = "synthetic"
    params: dict[str, str] | None = None  # run.json's params
    gstreamer_version: str = "1.22.0"
    kernel: str = "6.1.0-synthetic"


def make_run_dir(
    out_dir: Path, params: SyntheticRtpAudio | None = None, info: SyntheticRunInfo | None = None
) -> SyntheticResult:
    """A synthetic RTP audio run in a run directory's real formats: run.json, env.json and
    the traces in traces/ (what ``latlab run`` writes, without logs), ready to analyse."""
    p = params or SyntheticRtpAudio()
    info = info or SyntheticRunInfo()
    make_layout(out_dir)
    result = make_rtp_audio_run(out_dir / TRACES, p)
    duration_s = p.units * p.source_period / 1e9
    processes = [
        {"name": name, "host": host, "pid": pid, "exit_code": 0, "stopped": "sigint"}
        for name, host, pid in (("receiver", "rx", 200), ("sender", "tx", 100))
    ]
    run = {
        "schema": RUN_SCHEMA,
        "kind": "scenario",
        "name": info.name,
        "scenario": None,
        "status": "ok",
        "error": None,
        "started_at": info.started_at,
        "started_monotonic_ns": p.sender_base - 1_000 * MS,
        "duration_s": duration_s,
        "planned_duration_s": duration_s,
        "trace": True,
        "params": dict(info.params or {}),
        "hosts": {},
        "links": [],
        "processes": processes,
    }
    write_json(out_dir / RUN_FILE, run)
    write_json(out_dir / ENV_FILE, synthetic_env(info))
    return result


def synthetic_env(info: SyntheticRunInfo) -> dict[str, object]:
    """env.json of a synthetic run."""
    return {
        "schema": ENV_SCHEMA,
        "latlab_version": "0.1.0",
        "gstreamer_version": info.gstreamer_version,
        "kernel": info.kernel,
        "hostname": info.hostname,
        "python_version": "3.11.2",
        "machine": "x86_64",
        "cpu_count": 2,
    }


def make_sweep_dir(
    out_dir: Path,
    points: dict[str, tuple[dict[str, object], SyntheticRtpAudio, SyntheticRunInfo]],
) -> list[Path]:
    """A synthetic sweep directory: sweep.json and one run directory per point (``NAME``:
    the point's variable values, its run's parameters and run.json facts); the points'
    run directories, in order."""
    names = list(points)
    first = points[names[0]][2]
    variables = sorted({key for values, _, _ in points.values() for key in values})
    entries, dirs = [], []
    for name, (values, params, info) in points.items():
        run_dir = out_dir / POINTS_DIR / name
        make_run_dir(run_dir, params, info)
        dirs.append(run_dir)
        entries.append(
            {
                "name": name,
                "values": values,
                "dir": f"{POINTS_DIR}/{name}",
                "status": "ok",
                "error": None,
                "duration_s": params.units * params.source_period / 1e9,
            }
        )
    write_json(out_dir / ENV_FILE, synthetic_env(first))
    sweep = {
        "schema": SWEEP_SCHEMA,
        "name": first.name,
        "scenario": None,
        "status": "ok",
        "started_at": first.started_at,
        "finished_at": points[names[-1]][2].started_at,
        "sweep": {
            "mode": "product",
            "variables": {
                v: [values.get(v) for values, _, _ in points.values()] for v in variables
            },
        },
        "points": entries,
    }
    write_json(out_dir / SWEEP_FILE, sweep)
    return dirs
