"""Read latlab-linkemu packet logs (``.lllink``, docs/link-log-format.md).

:func:`read_link_log` returns one numpy column per record field, sorted by arrival
time; a truncated file yields every complete record (``LinkLog.problems`` says what
was cut). :func:`traffic_summary` says what crossed the link: packets and bytes per
second per direction, protocol and port.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from latlab.ingest.trace_reader import TraceError

MAGIC = b"LLLINK\0\0"
VERSION = 1
RECORD_SIZE = 64
FIXED_HEADER = struct.Struct("<8sHHIQQII")  # 40 bytes
HEADER_CLOSED = 1

VERDICTS = {0: "delivered", 1: "dropped-loss", 2: "dropped-queue", 3: "duplicate", 4: "unsent"}
DELIVERED, LOSS, QUEUE, DUPLICATE, UNSENT = range(5)
FLAG_RTP, FLAG_RTP_MARKER, FLAG_REORDERED, FLAG_TRUNCATED = 1, 2, 4, 8
FLAG_POOL_FULL, FLAG_PASSTHROUGH, FLAG_SEND_FAILED, FLAG_COPY = 16, 32, 64, 128
# Payload flags (record offset 62; zero in logs written before they existed).
PAYLOAD_TS, PAYLOAD_PES_START, PAYLOAD_SRT_DATA = 1, 2, 4
PAYLOAD_SRT_REXMIT, PAYLOAD_SRT_ENCRYPTED = 8, 16

RECORD_DTYPE = np.dtype(
    [
        ("arrival_ns", "<u8"),
        ("scheduled_ns", "<u8"),
        ("released_ns", "<u8"),
        ("size", "<u4"),
        ("direction", "u1"),
        ("verdict", "u1"),
        ("ip_proto", "u1"),
        ("flags", "u1"),
        ("src_port", "<u2"),
        ("dst_port", "<u2"),
        ("src_ip", "<u4"),
        ("dst_ip", "<u4"),
        ("ssrc", "<u4"),
        ("seq", "<u2"),
        ("pt", "u1"),
        ("rtp_header_words", "u1"),
        ("rtp_ts", "<u4"),
        ("packet_id", "<u4"),
        ("ethertype", "<u2"),
        ("payload_flags", "<u2"),
    ]
)
assert RECORD_DTYPE.itemsize == RECORD_SIZE

PROTOCOLS = {1: "ICMP", 2: "IGMP", 6: "TCP", 17: "UDP", 132: "SCTP"}
ETHERTYPES = {0x0806: "ARP", 0x86DD: "IPv6", 0x8100: "VLAN"}
SERVICES = {53: "DNS", 67: "DHCP", 123: "NTP", 1900: "SSDP", 5353: "mDNS", 5355: "LLMNR"}


class LinkLogError(TraceError):
    """A link log that cannot be used at all; ``str()`` is one line naming the file."""


@dataclass
class LinkLog:
    """One emulator log: header information and per-packet columns (arrival order).

    ``columns`` has ``arrival_ns``, ``scheduled_ns``, ``released_ns`` (0 unless the
    copy was released), ``size``, ``direction`` (0 forward a->b, 1 reverse),
    ``verdict`` (see :data:`VERDICTS`), ``ip_proto``, ``flags``, ``src_port``,
    ``dst_port``, ``src_ip``, ``dst_ip`` (IPv4 as integers), ``ssrc``, ``seq``,
    ``pt``, ``rtp_ts``, ``rtp_header_words`` (the RTP header's length in 32-bit words,
    0 when unknown), ``packet_id``, ``ethertype``, ``is_rtp`` and ``marker`` (bool).

    MPEG-TS payloads (docs/link-log-format.md, payload flags): ``payload_flags``
    (u16), booleans ``is_ts`` (the payload is TS, plain or in SRT), ``pes_start`` (a
    TS packet starts a PES with a PTS), ``srt_data``, ``srt_retransmit`` and
    ``srt_encrypted``; ``pes_pid`` and ``pes_pts`` (33-bit, 90 kHz) are int64, -1
    where not ``pes_start``. For TS payloads ``ssrc`` holds the PID (of the PES start,
    else of the first TS packet) and ``seq`` the SRT sequence number's low 16 bits.
    """

    path: Path
    version: int
    start_ns: int
    info: dict[str, Any]
    records_lost: int
    closed: bool
    columns: dict[str, np.ndarray]
    problems: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.columns["arrival_ns"])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    @property
    def directions(self) -> dict[int, str]:
        """Direction names, ``{0: "a->b", 1: "b->a"}`` (from the info block's link name)."""
        a, b = self.info.get("between") or self._between_from_name()
        return {0: f"{a}->{b}", 1: f"{b}->{a}"}

    def _between_from_name(self) -> tuple[str, str]:
        name = str(self.info.get("name") or "a-b")
        a, _, b = name.partition("-")
        return (a or "a", b or "b")


def read_link_log(path: Path | str) -> LinkLog:
    """Read a ``.lllink`` file; raises LinkLogError only when nothing in it can be used."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LinkLogError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) < FIXED_HEADER.size or data[:8] != MAGIC:
        raise LinkLogError(f"{path}: not a latlab link log (bad magic)")
    _magic, version, record_size, data_offset, start_ns, lost, flags, info_len = (
        FIXED_HEADER.unpack_from(data)
    )
    if version != VERSION:
        raise LinkLogError(f"{path}: link log version {version} is not supported (only {VERSION})")
    if record_size != RECORD_SIZE or data_offset < FIXED_HEADER.size + info_len:
        raise LinkLogError(f"{path}: corrupt header (record size {record_size})")
    if len(data) < data_offset:
        raise LinkLogError(f"{path}: truncated inside the header")
    info = _info(data[FIXED_HEADER.size : FIXED_HEADER.size + info_len], path)
    body = len(data) - data_offset
    problems = []
    if body % RECORD_SIZE:
        problems.append(f"{body % RECORD_SIZE} bytes of a cut record at the end ignored")
    if not flags & HEADER_CLOSED:
        problems.append("the emulator did not close the log (killed or still running)")
    if lost:
        problems.append(f"{lost} records lost (the log writer fell behind)")
    records = np.frombuffer(data, RECORD_DTYPE, body // RECORD_SIZE, data_offset)
    order = np.lexsort((records["packet_id"], records["direction"], records["arrival_ns"]))
    columns = _columns(records[order])
    return LinkLog(path, version, start_ns, info, lost, bool(flags & HEADER_CLOSED), columns,
                   problems)  # fmt: skip


def _info(raw: bytes, path: Path) -> dict[str, Any]:
    try:
        info = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise LinkLogError(f"{path}: corrupt info block in the header") from None
    if not isinstance(info, dict):
        raise LinkLogError(f"{path}: corrupt info block in the header")
    return info


def _columns(records: np.ndarray) -> dict[str, np.ndarray]:
    names = list(RECORD_DTYPE.names or ())
    columns = {name: np.ascontiguousarray(records[name]) for name in names}
    columns["is_rtp"] = (columns["flags"] & FLAG_RTP) != 0
    columns["marker"] = (columns["flags"] & FLAG_RTP_MARKER) != 0
    payload = columns["payload_flags"]
    for name, bit in (("is_ts", PAYLOAD_TS), ("pes_start", PAYLOAD_PES_START),
                      ("srt_data", PAYLOAD_SRT_DATA), ("srt_retransmit", PAYLOAD_SRT_REXMIT),
                      ("srt_encrypted", PAYLOAD_SRT_ENCRYPTED)):  # fmt: skip
        columns[name] = (payload & bit) != 0
    pes = columns["pes_start"]
    pts = columns["rtp_ts"].astype(np.int64) | ((columns["pt"].astype(np.int64) & 1) << 32)
    columns["pes_pid"] = np.where(pes, columns["ssrc"].astype(np.int64), -1)
    columns["pes_pts"] = np.where(pes, pts, -1)
    return columns


def protocol_name(ip_proto: int, ethertype: int) -> str:
    """``UDP``, ``TCP``, ``ARP``... for an IPv4 protocol number or a non-IPv4 ethertype."""
    if ethertype == 0x0800:
        return PROTOCOLS.get(ip_proto, f"IP/{ip_proto}")
    return ETHERTYPES.get(ethertype, f"ether/0x{ethertype:04x}")


def traffic_summary(log: LinkLog) -> list[dict[str, Any]]:
    """What crossed the link, per direction, protocol and destination port.

    Counts packets offered to the link (duplicate copies made by the link are not
    counted); rates are over the log's span from first to last arrival. Each row:
    ``direction``, ``protocol``, ``port`` (destination port for UDP/TCP, else None),
    ``service`` (a well-known name such as mDNS, else None), ``packets``, ``bytes``,
    ``packets_per_s``, ``bytes_per_s``, ``kbit_per_s``, ``delivered``,
    ``dropped_loss``, ``dropped_queue``, ``rtp_packets``. Sorted by packet rate.
    """
    c = log.columns
    offered = c["verdict"] != DUPLICATE
    if not offered.any():
        return []
    arrival = c["arrival_ns"][offered]
    span_s = max((int(arrival.max()) - int(arrival.min())) / 1e9, 1e-9)
    has_port = np.isin(c["ip_proto"], (6, 17)) & (c["ethertype"] == 0x0800)
    port = np.where(has_port, c["dst_port"].astype(np.int64), -1)
    proto = np.where(c["ethertype"] == 0x0800, c["ip_proto"].astype(np.int64), -1)
    key = np.stack([c["direction"].astype(np.int64), proto, c["ethertype"].astype(np.int64), port])
    uniq, group = np.unique(key[:, offered], axis=1, return_inverse=True)
    group = group.ravel()
    n = uniq.shape[1]

    verdict = c["verdict"][offered]
    packets = np.bincount(group, minlength=n)
    size = c["size"][offered].astype(np.float64)
    nbytes = np.bincount(group, weights=size, minlength=n)
    rows = []
    names = log.directions
    for i in range(n):
        direction, ip_proto, ethertype, dst_port = (int(v) for v in uniq[:, i])
        mine = group == i
        rows.append(
            {
                "direction": names.get(direction, str(direction)),
                "protocol": protocol_name(ip_proto, ethertype),
                "port": dst_port if dst_port >= 0 else None,
                "service": SERVICES.get(dst_port),
                "packets": int(packets[i]),
                "bytes": int(nbytes[i]),
                "packets_per_s": float(round(packets[i] / span_s, 3)),
                "bytes_per_s": float(round(nbytes[i] / span_s, 3)),
                "kbit_per_s": float(round(nbytes[i] * 8 / 1000 / span_s, 3)),
                "delivered": int(np.count_nonzero(mine & (verdict == DELIVERED))),
                "dropped_loss": int(np.count_nonzero(mine & (verdict == LOSS))),
                "dropped_queue": int(np.count_nonzero(mine & (verdict == QUEUE))),
                "rtp_packets": int(np.count_nonzero(mine & c["is_rtp"][offered])),
            }
        )
    rows.sort(key=lambda r: (-r["packets"], r["direction"], r["protocol"], r["port"] or 0))
    return rows


LATE_RELEASE_NS = 1_000_000  # a release this much after its schedule changed the impairment


def release_summary(log: LinkLog) -> list[dict[str, Any]]:
    """How exactly the emulator kept its schedule, per direction: the release error
    (released - scheduled) of every copy it released, in µs (``p50_us``, ``p99_us``,
    ``max_us``), and ``late``: the copies released more than 1 ms after their schedule,
    whose delay was not the one the scenario asked for."""
    c = log.columns
    released = c["released_ns"] > 0
    error_ns = c["released_ns"].astype(np.int64) - c["scheduled_ns"].astype(np.int64)
    rows = []
    for direction, name in log.directions.items():
        mine = error_ns[released & (c["direction"] == direction)]
        if not len(mine):
            continue
        p50, p99 = np.percentile(mine, (50, 99)) / 1e3
        rows.append({
            "direction": name,
            "released": len(mine),
            "p50_us": float(round(p50, 3)),
            "p99_us": float(round(p99, 3)),
            "max_us": float(round(mine.max() / 1e3, 3)),
            "late": int(np.count_nonzero(mine > LATE_RELEASE_NS)),
        })  # fmt: skip
    return rows


def late_release_problems(rows: list[dict[str, Any]]) -> list[str]:
    """One line per direction whose emulator released copies more than 1 ms late."""
    return [
        f"{row['direction']}: {row['late']} of {row['released']} packets released more than "
        f"{LATE_RELEASE_NS / 1e6:g} ms after their schedule (latest {row['max_us'] / 1e3:.2f} "
        "ms late): their delay was not the one asked for"
        for row in rows
        if row["late"]
    ]
