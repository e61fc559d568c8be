"""Turn link-emulator logs into trace events, so links are probes on every journey.

Each direction of an emulated link becomes two probes of a process named
``link``: ``link/tx->rx:in`` (the packet reached the emulator, i.e. left the
sending host) and ``link/tx->rx:out`` (the emulator released it to the
receiving host). Their RTP fields let the stitcher put them between the
sender's and the receiver's probes, so the network share of a journey is
split into send, link and receive parts with the emulator's exact times.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from latlab.ingest.link_log import LinkLog, read_link_log
from latlab.ingest.trace_format import EVENT_DTYPE, NONE_U64, EventFlag, Kind, PadFlag
from latlab.ingest.trace_reader import PadInfo, Trace

LINK_PROCESS = "link"
LINK_FACTORY = "latlab-linkemu"
COLUMNS = ("arrival_ns", "released_ns", "direction", "verdict", "is_rtp", "ssrc", "seq",
           "rtp_ts", "pt", "size")  # fmt: skip
DUPLICATE = 3
DELIVERED = (0, DUPLICATE)  # verdicts whose packets were released: delivered, duplicate copy


def link_trace(
    path: Path, columns: Mapping[str, np.ndarray], directions: Mapping[int, str]
) -> Trace:
    """A trace of the ``link`` process from one link log's per-packet columns.

    ``columns`` holds arrival_ns, released_ns, direction, verdict, is_rtp, ssrc,
    seq, rtp_ts, pt and size; ``directions`` names each direction (``"tx->rx"``).
    """
    trace = Trace(path=path, pid=0, start_mono_ns=0, complete=True)
    trace.info = {"process": LINK_PROCESS, "kind": "link"}
    parts = []
    for direction, name in sorted(directions.items()):
        pad_id = direction + 1
        trace.pads[pad_id] = _pad(pad_id, name)
        mine = columns["direction"] == direction
        arrived = mine & (columns["verdict"] != DUPLICATE)  # a copy made by the link did not
        parts.append(_records(columns, arrived, pad_id, Kind.PUSH, "arrival_ns"))
        released = mine & np.isin(columns["verdict"], DELIVERED)
        parts.append(_records(columns, released, pad_id, Kind.DONE, "released_ns"))
    trace.events = np.concatenate(parts) if parts else np.empty(0, EVENT_DTYPE)
    return trace


def read_link_logs(run_dir: Path) -> list[LinkLog]:
    """The logs of a run's emulated links (``run_dir/links/*.lllink``)."""
    return [read_link_log(path) for path in sorted((run_dir / "links").glob("*.lllink"))]


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
