"""Turn link-emulator logs into trace events, so links are probes on every journey.

Each direction of an emulated link becomes two probes of a process named
``link``: ``link/tx->rx:in`` (the packet reached the emulator, i.e. left the
sending host) and ``link/tx->rx:out`` (the emulator released it to the
receiving host). Their RTP fields let the stitcher put them between the
sender's and the receiver's probes, so the network share of a journey is
split into send, link and receive parts with the emulator's exact times.

Packets whose payload is MPEG-TS (plain or in SRT) with a PES start also give
``pes`` records (kind 3) on the direction's pad, so the stitcher can join the
link to the hosts on (PID, PTS): one at arrival (event flags 0) and one at
release (event flags :data:`PES_AT_RELEASE`, the pad's ``done`` probe). Their
``offset`` is the arrival (resp. release) time of the last packet of that PID
before the PES start, i.e. when the previous PES of the PID finished entering
(resp. leaving) the link. The PID of a packet without a PES start is that of its
first TS packet: a payload that mixes PIDs (up to 7 TS packets per SRT packet)
counts only for its first PID -- exact with mpegtsmux's one TS packet per buffer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from latlab.ingest.link_log import LinkLog, read_link_log
from latlab.ingest.trace_format import EVENT_DTYPE, NONE_U64, EventFlag, Kind, PadFlag
from latlab.ingest.trace_reader import PadInfo, Trace
from latlab.rundir import LINK_LOG_SUFFIX, LINKS

LINK_PROCESS = "link"
LINK_FACTORY = "latlab-linkemu"
COLUMNS = ("arrival_ns", "released_ns", "direction", "verdict", "is_rtp", "ssrc", "seq",
           "rtp_ts", "pt", "size", "packet_id", "is_ts", "pes_start", "pes_pts",
           "srt_retransmit")  # fmt: skip
TS_COLUMNS = ("is_ts", "pes_start", "pes_pts", "srt_retransmit")
DUPLICATE = 3
DELIVERED = (0, DUPLICATE)  # verdicts whose packets were released: delivered, duplicate copy
PES_AT_RELEASE = 16  # event flag bit 4: this pes record belongs to the pad's done probe
PES_STREAM_ID = 0xE0  # what the link cannot see; video, as the tracer's rtp_pt would say


def link_trace(
    path: Path, columns: Mapping[str, np.ndarray], directions: Mapping[int, str]
) -> Trace:
    """A trace of the ``link`` process from one link log's per-packet columns.

    ``columns`` holds arrival_ns, released_ns, direction, verdict, is_rtp, ssrc,
    seq, rtp_ts, pt and size; ``directions`` names each direction (``"tx->rx"``).
    With is_ts, pes_start, pes_pts and srt_retransmit (and packet_id, else arrival
    order is packet order) it adds the ``pes`` records of MPEG-TS payloads. Records
    are sorted by t_ns per pad and probe (a pes record after its push/done).
    """
    trace = Trace(path=path, pid=0, start_mono_ns=0, complete=True)
    trace.info = {"process": LINK_PROCESS, "kind": "link"}
    parts = []
    for direction, name in sorted(directions.items()):
        pad_id = direction + 1
        trace.pads[pad_id] = _pad(pad_id, name)
        mine = columns["direction"] == direction
        arrived = mine & (columns["verdict"] != DUPLICATE)  # a copy made by the link did not
        released = mine & np.isin(columns["verdict"], DELIVERED)
        pushes = _records(columns, arrived, pad_id, Kind.PUSH, "arrival_ns")
        dones = _records(columns, released, pad_id, Kind.DONE, "released_ns")
        if all(key in columns for key in TS_COLUMNS):
            pushes = _by_time(pushes, _pes_records(columns, arrived, pad_id, "arrival_ns", 0))
            at_release = _pes_records(columns, released, pad_id, "released_ns", PES_AT_RELEASE)
            dones = _by_time(dones, at_release)
        parts += [pushes, dones]
    trace.events = np.concatenate(parts) if parts else np.empty(0, EVENT_DTYPE)
    return trace


def read_link_logs(run_dir: Path) -> list[LinkLog]:
    """The logs of a run's emulated links (``run_dir/links/*.lllink``)."""
    return [read_link_log(path) for path in sorted((run_dir / LINKS).glob(f"*{LINK_LOG_SUFFIX}"))]


def merge_link_logs(logs: Sequence[LinkLog]) -> Trace | None:
    """The ``link`` process of a run: every direction of every link log, or None."""
    if not logs:
        return None
    merged: dict[str, list[np.ndarray]] = {}
    names: dict[int, str] = {}
    problems: list[str] = []
    for number, log in enumerate(logs):
        problems += [f"{log.path.name}: {problem}" for problem in log.problems]
        for direction, name in log.directions.items():
            names[2 * number + direction] = name
        for key in COLUMNS:
            value = log[key] if key != "direction" else log[key].astype(np.int64) + 2 * number
            merged.setdefault(key, []).append(value)
    columns = {key: np.concatenate(values) for key, values in merged.items()}
    trace = link_trace(logs[0].path.parent, columns, names)
    trace.problems = problems
    return trace


def _pad(pad_id: int, name: str) -> PadInfo:
    flags = PadFlag.SRC | PadFlag.ELEMENT_IS_SOURCE | PadFlag.PEER_IS_SINK
    return PadInfo(pad_id, flags, 0, name, "in", LINK_FACTORY, "Network/Link", name, "out",
                   LINK_FACTORY, LINK_PROCESS)  # fmt: skip


def _records(
    columns: Mapping[str, np.ndarray], mask: np.ndarray, pad_id: int, kind: Kind, time: str
) -> np.ndarray:
    rec = np.zeros(int(mask.sum()), EVENT_DTYPE)
    for field in ("pts", "dts", "duration", "offset", "offset_end"):
        rec[field] = NONE_U64
    rec["t_ns"] = columns[time][mask]
    rec["pad_id"] = pad_id
    rec["size"] = columns["size"][mask]
    rec["rtp_ssrc"] = columns["ssrc"][mask]
    rec["rtp_seq"] = columns["seq"][mask]
    rec["rtp_ts"] = columns["rtp_ts"][mask]
    rec["rtp_pt"] = columns["pt"][mask]
    rec["kind"] = kind
    rec["event_flags"] = np.where(columns["is_rtp"][mask], EventFlag.RTP, 0)
    rec["thread_idx"] = 0
    return rec[np.argsort(rec["t_ns"], kind="stable")]


def _packet_order(columns: Mapping[str, np.ndarray], mask: np.ndarray) -> np.ndarray:
    """Indices of the masked packets in packet-id (arrival) order, one per packet id
    (the earliest release when the link duplicated it)."""
    idx = np.flatnonzero(mask)
    if "packet_id" not in columns:
        return idx[np.argsort(columns["arrival_ns"][idx], kind="stable")]
    packet_id = columns["packet_id"][idx].astype(np.int64)
    idx = idx[np.lexsort((columns["released_ns"][idx], packet_id))]
    first = np.ones(len(idx), bool)
    first[1:] = np.diff(columns["packet_id"][idx].astype(np.int64)) != 0
    return idx[first]


def _previous_of_pid(pid: np.ndarray) -> np.ndarray:
    """For each element (in packet order), the position of the previous one with the
    same PID, -1 if none."""
    order = np.lexsort((np.arange(len(pid)), pid))
    same = np.zeros(len(pid), bool)
    same[1:] = pid[order][1:] == pid[order][:-1]
    before = np.empty(len(pid), np.int64)
    before[:1] = -1
    before[1:] = order[:-1]
    previous = np.empty(len(pid), np.int64)
    previous[order] = np.where(same, before, -1)
    return previous


def _pes_records(
    columns: Mapping[str, np.ndarray], mask: np.ndarray, pad_id: int, time: str, flags: int
) -> np.ndarray:
    """pes records at ``time`` for the PES starts among the masked packets: first
    transmissions of TS payloads (SRT retransmissions neither start a PES nor count
    as the last packet of a PID), one per packet id."""
    ts = mask & columns["is_ts"].astype(bool) & ~columns["srt_retransmit"].astype(bool)
    idx = _packet_order(columns, ts)
    previous = _previous_of_pid(columns["ssrc"][idx].astype(np.int64))
    starts = columns["pes_start"][idx].astype(bool)
    times = columns[time][idx].astype(np.uint64)
    prev = previous[starts]
    rec = np.zeros(int(starts.sum()), EVENT_DTYPE)
    for field in ("dts", "duration", "offset_end"):
        rec[field] = NONE_U64
    rec["t_ns"] = times[starts]
    rec["pts"] = columns["pes_pts"][idx][starts]
    rec["offset"] = np.where(prev >= 0, times[np.maximum(prev, 0)], NONE_U64)
    rec["pad_id"] = pad_id
    rec["size"] = columns["size"][idx][starts]
    rec["rtp_ssrc"] = columns["ssrc"][idx][starts]
    rec["rtp_pt"] = PES_STREAM_ID
    rec["kind"] = Kind.PES
    rec["event_flags"] = flags
    return rec


def _by_time(records: np.ndarray, pes: np.ndarray) -> np.ndarray:
    """Both sets of records by t_ns; a pes record after a push/done of the same time."""
    both = np.concatenate([records, pes])
    is_pes = both["kind"] == Kind.PES
    return both[np.lexsort((is_pes, both["t_ns"]))]
