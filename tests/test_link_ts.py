"""MPEG-TS and SRT seen by the link emulator: payload flags in the link log, and the
``pes`` records (PID, PTS) of the ``link`` process that join links to hosts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from latlab.ingest.link_events import PES_AT_RELEASE, PES_STREAM_ID, link_trace
from latlab.ingest.link_log import LinkLog, read_link_log
from latlab.ingest.trace_format import NONE_U64, Kind
from latlab.ingest.trace_reader import read_trace
from latlab.lab.links import LINKEMU
from latlab.lab.netns import Lab
from latlab.lab.runner import run_scenario
from latlab.lab.scenario import parse_scenario
from latlab.tracer import is_built

root = pytest.mark.skipif(
    os.geteuid() != 0 or not LINKEMU.is_file(),
    reason="needs root and the built linkemu crate (bash scripts/setup.sh)",
)
NONE = int(NONE_U64)
MS = 1_000_000


# -- hand-built SRT + TS datagrams ---------------------------------------------------------


def ts_packet(pid: int, pts: int | None = None) -> bytes:
    """One 188-byte TS packet of `pid`; with `pts`, it starts a video PES with that PTS."""
    unit_start = 0x40 if pts is not None else 0
    head = bytes([0x47, unit_start | (pid >> 8), pid & 0xFF, 0x10])
    body = b""
    if pts is not None:
        body = bytes([0, 0, 1, 0xE0, 0, 0, 0x80, 0x80, 5,
                      0x21 | ((pts >> 29) & 0x0E), (pts >> 22) & 0xFF,
                      ((pts >> 14) & 0xFE) | 1, (pts >> 7) & 0xFF,
                      ((pts << 1) & 0xFE) | 1])  # fmt: skip
    return head + body + b"\xff" * (184 - len(body))


def srt(seq: int, payload: bytes, *, rexmit: bool = False, kk: int = 0) -> bytes:
    """An SRT data packet: sequence number, PP=11 O=0 KK R message number, time, socket."""
    msgno = (3 << 30) | (kk << 27) | (int(rexmit) << 26) | (seq & 0x3FFFFFF)
    words = (seq & 0x7FFFFFFF, msgno, 1000 * seq, 0x2F1E_0D01)
    return b"".join(w.to_bytes(4, "big") for w in words) + payload


BIG_PTS = (1 << 32) + 4000  # bit 32 of the PTS set
DATAGRAMS = [
    srt(100, ts_packet(0x41, 1000)),  # 0 video PES start
    srt(101, ts_packet(0x41)),  # 1
    srt(102, ts_packet(0x42, 2000)),  # 2 audio PES start
    srt(103, ts_packet(0x41)),  # 3 the last video packet before the next PES
    srt(100, ts_packet(0x41, 1000), rexmit=True),  # 4 retransmission: no pes, not "last"
    srt(104, ts_packet(0x41, BIG_PTS) + ts_packet(0x42)),  # 5 video PES start
    srt(105, ts_packet(0x42, 5000)),  # 6 audio: previous is 2 (5 counts as video)
    srt(106, ts_packet(0x41, 7000), kk=1),  # 7 encrypted: not parsed
    ts_packet(0x100, 9000),  # 8 plain TS over UDP
]

# The sender stays on one CPU: a veth hands each packet to the backlog of the CPU that
# sent it, so a sender moved between two sends can have its packets reach the link out
# of order (the plain TS packet once arrived before the encrypted one sent before it).
SEND = """
import os, socket, sys
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
blob = open(sys.argv[2], "rb").read()
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
at = 0
while at < len(blob):
    n = int.from_bytes(blob[at:at + 2], "big")
    sock.sendto(blob[at + 2:at + 2 + n], (sys.argv[1], 7001))
    at += 2 + n
"""


def pes_keys(records: np.ndarray) -> list[tuple[int, int]]:
    """(PID, PTS) of pes records."""
    return list(zip(records["rtp_ssrc"].tolist(), records["pts"].tolist(), strict=True))


def send_through_linkemu(tmp_path: Path, datagrams: list[bytes], delay_ms: float) -> LinkLog:
    """Send the datagrams tx -> rx (UDP port 7001) through a real emulated link; its log."""
    blob = tmp_path / "datagrams.bin"
    blob.write_bytes(b"".join(len(d).to_bytes(2, "big") + d for d in datagrams))
    cfg = {
        "name": "tx-rx",
        "between": ["tx", "rx"],
        "forward": {"delay_ms": delay_ms},
        "reverse": {},
        "schedule": [],
        "seed": 1,
    }
    with Lab(["tx", "rx"], [("tx", "rx")], run_dir=tmp_path, link_configs=[cfg]) as lab:
        argv = lab.exec_argv("tx", [sys.executable, "-c", SEND, lab.addr("rx"), str(blob)])
        subprocess.run(argv, check=True, timeout=30)
    return read_link_log(tmp_path / "links" / "tx-rx.lllink")


@pytest.mark.exclusive
@pytest.mark.e2e
@root
def test_linkemu_logs_srt_and_ts_facts(tmp_path: Path) -> None:
    log = send_through_linkemu(tmp_path, DATAGRAMS, delay_ms=5)
    c = log.columns
    mine = np.flatnonzero((c["direction"] == 0) & (c["dst_port"] == 7001))
    mine = mine[np.argsort(c["packet_id"][mine], kind="stable")]
    assert len(mine) == len(DATAGRAMS)
    col = {k: v[mine] for k, v in c.items()}
    assert not col["is_rtp"].any()
    np.testing.assert_array_equal(col["is_ts"], [1, 1, 1, 1, 1, 1, 1, 0, 1])
    np.testing.assert_array_equal(col["pes_start"], [1, 0, 1, 0, 1, 1, 1, 0, 1])
    np.testing.assert_array_equal(col["srt_data"], [1, 1, 1, 1, 1, 1, 1, 1, 0])
    np.testing.assert_array_equal(col["srt_retransmit"], [0, 0, 0, 0, 1, 0, 0, 0, 0])
    np.testing.assert_array_equal(col["srt_encrypted"], [0, 0, 0, 0, 0, 0, 0, 1, 0])
    np.testing.assert_array_equal(col["payload_flags"], [7, 5, 7, 5, 15, 7, 7, 20, 3])
    np.testing.assert_array_equal(col["seq"], [100, 101, 102, 103, 100, 104, 105, 106, 0])
    np.testing.assert_array_equal(col["ssrc"], [0x41, 0x41, 0x42, 0x41, 0x41, 0x41, 0x42, 0, 0x100])
    np.testing.assert_array_equal(col["pes_pid"], [0x41, -1, 0x42, -1, 0x41, 0x41, 0x42, -1, 0x100])
    np.testing.assert_array_equal(
        col["pes_pts"], [1000, -1, 2000, -1, 1000, BIG_PTS, 5000, -1, 9000]
    )

    trace = link_trace(log.path, c, log.directions)
    pes = trace.events[trace.events["kind"] == Kind.PES]
    arrival = pes[pes["event_flags"] == 0]
    release = pes[pes["event_flags"] == PES_AT_RELEASE]
    assert len(arrival) + len(release) == len(pes)
    keys = [(0x41, 1000), (0x42, 2000), (0x41, BIG_PTS), (0x42, 5000), (0x100, 9000)]
    for records, time in ((arrival, "arrival_ns"), (release, "released_ns")):
        assert np.all(records["pad_id"] == 1)
        assert pes_keys(records) == keys
        t = col[time].astype(np.uint64)
        np.testing.assert_array_equal(records["t_ns"], t[[0, 2, 5, 6, 8]])
        np.testing.assert_array_equal(records["offset"], [NONE, NONE, t[3], t[2], NONE])
        assert np.all(records["rtp_pt"] == PES_STREAM_ID)
        assert np.all(records["dts"] == NONE) and np.all(records["offset_end"] == NONE)
        np.testing.assert_array_equal(records["size"], col["size"][[0, 2, 5, 6, 8]])
    held = (release["t_ns"].astype(np.int64) - arrival["t_ns"].astype(np.int64)) / MS
    assert np.all(held >= 5) and np.all(held < 6), held


def test_pes_records_skip_losses_duplicates_and_retransmissions() -> None:
    """Columns as read from a log: a lost packet still arrived (counts for :in, not :out);
    a duplicate copy gives one release; a retransmission counts for nothing."""
    t = np.array([10, 20, 30, 40, 50, 60]) * MS
    columns = {
        "arrival_ns": t.astype(np.uint64),
        "released_ns": np.array(
            [t[0] + 5 * MS, 0, t[2] + 5 * MS, t[3] + 5 * MS, t[3] + 6 * MS, t[5] + 5 * MS],
            np.uint64,
        ),
        "direction": np.zeros(6, np.uint8),
        "verdict": np.array([0, 1, 0, 0, 3, 0], np.uint8),
        "packet_id": np.array([0, 1, 2, 3, 3, 4], np.uint32),
        "is_rtp": np.zeros(6, bool),
        "ssrc": np.full(6, 0x41, np.uint32),
        "seq": np.arange(6, dtype=np.uint16),
        "rtp_ts": np.zeros(6, np.uint32),
        "pt": np.zeros(6, np.uint8),
        "size": np.full(6, 230, np.uint32),
        "is_ts": np.ones(6, bool),
        "pes_start": np.array([1, 0, 1, 1, 1, 1], bool),
        "pes_pts": np.array([3000, -1, 6000, 9000, 9000, 6000]),  # 5: retransmitted
        "srt_retransmit": np.array([0, 0, 0, 0, 0, 1], bool),
    }
    events = link_trace(Path("x.lllink"), columns, {0: "tx->rx"}).events
    pushes = events[events["kind"] == Kind.PUSH]
    assert len(pushes) == 5 and len(events[events["kind"] == Kind.DONE]) == 5
    pes = events[events["kind"] == Kind.PES]
    arrival = pes[pes["event_flags"] == 0]
    release = pes[pes["event_flags"] == PES_AT_RELEASE]
    assert arrival["pts"].tolist() == [3000, 6000, 9000]
    assert arrival["offset"].tolist() == [NONE, t[1], t[2]]
    assert release["pts"].tolist() == [3000, 6000, 9000]  # the duplicate of 9000 is one
    assert release["t_ns"].tolist() == [t[0] + 5 * MS, t[2] + 5 * MS, t[3] + 5 * MS]
    assert release["offset"].tolist() == [NONE, t[0] + 5 * MS, t[2] + 5 * MS]
    # Per pad and probe in time order; a pes record right after its push.
    is_pes = events["kind"] == Kind.PES
    in_probe = events[(events["kind"] == Kind.PUSH) | (is_pes & (events["event_flags"] == 0))]
    assert np.all(np.diff(in_probe["t_ns"].astype(np.int64)) >= 0)
    i = np.flatnonzero(events["kind"] == Kind.PES)[0]
    assert events["kind"][i - 1] == Kind.PUSH and events["t_ns"][i - 1] == events["t_ns"][i]


def test_columns_without_ts_give_no_pes_records() -> None:
    """Callers that only know RTP columns (synthetic runs) get push/done as before."""
    n = 3
    columns = {
        "arrival_ns": np.arange(n, dtype=np.uint64) * MS,
        "released_ns": np.arange(n, dtype=np.uint64) * MS + 5 * MS,
        "direction": np.zeros(n, np.uint8),
        "verdict": np.zeros(n, np.uint8),
        "is_rtp": np.ones(n, bool),
        "ssrc": np.full(n, 7, np.uint32),
        "seq": np.arange(n, dtype=np.uint16),
        "rtp_ts": np.zeros(n, np.uint32),
        "pt": np.full(n, 96, np.uint8),
        "size": np.full(n, 100, np.uint32),
    }
    events = link_trace(Path("x.lllink"), columns, {0: "tx->rx"}).events
    assert sorted(set(events["kind"].tolist())) == [Kind.PUSH, Kind.DONE] and len(events) == 6


# -- end to end: H.264 in MPEG-TS over SRT through a 10 ms link ----------------------------

RECEIVER = (
    "srtsrc uri=srt://:7001?mode=listener latency=80 "
    "! queue max-size-buffers=0 max-size-bytes=0 max-size-time=0 ! tsdemux ! h264parse "
    "! avdec_h264 ! fakesink sync=true"
)
SENDER = (
    "videotestsrc is-live=true num-buffers=90 pattern=ball ! video/x-raw,format=I420,"
    "width=320,height=240,framerate=30/1 ! x264enc tune=zerolatency speed-preset=ultrafast "
    "key-int-max=30 ! mpegtsmux ! srtsink uri=srt://${hosts.rx.addr}:7001?mode=caller "
    "latency=80"
)
# The sender stops after 3 s (90 frames); the run must end before that (an early exit fails it).
SCENARIO = f"""\
name = "link-ts"
duration_s = 2.5
[hosts.tx]
[hosts.rx]
[[links]]
between = ["tx", "rx"]
delay_ms = 10
[processes.receiver]
host = "rx"
pipeline = "{RECEIVER}"
[processes.sender]
host = "tx"
pipeline = "{SENDER}"
"""


def muxer_pes_keys(out: Path) -> set[tuple[int, int]]:
    """(PID, PTS) of the pes records on the sender's mpegtsmux src pad."""
    (path,) = sorted((out / "traces").glob("sender-*.lltrace"))
    trace = read_trace(path)
    pads = [p.pad_id for p in trace.pads.values() if p.factory == "mpegtsmux" and p.pad == "src"]
    assert len(pads) == 1, trace.pads
    ev = trace.events
    pes = ev[(ev["kind"] == Kind.PES) & (ev["pad_id"] == pads[0])]
    return set(pes_keys(pes))


@root
@pytest.mark.e2e
@pytest.mark.skipif(not is_built(), reason="tracer not built")
def test_srt_video_frames_cross_the_link(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_scenario(parse_scenario(SCENARIO, "link-ts.toml"), out, progress=False)
    sent = muxer_pes_keys(out)
    assert len(sent) >= 60  # 2.5 s at 30 fps
    log = read_link_log(out / "links" / "tx-rx.lllink")
    ev = link_trace(log.path, log.columns, log.directions).events
    pes = ev[(ev["kind"] == Kind.PES) & (ev["pad_id"] == 1)]
    arrival = pes[pes["event_flags"] == 0]
    release = pes[pes["event_flags"] == PES_AT_RELEASE]
    seen = pes_keys(arrival)
    assert len(seen) == len(set(seen))
    assert set(seen) <= sent
    assert len(sent - set(seen)) <= 5, sorted(sent - set(seen))
    by_key = {k: i for i, k in enumerate(pes_keys(release))}
    both = [(i, by_key[k]) for i, k in enumerate(seen) if k in by_key]
    assert len(both) == len(seen)
    a, r = np.array(both).T
    held_ms = (release["t_ns"][r].astype(np.int64) - arrival["t_ns"][a].astype(np.int64)) / MS
    assert np.all(held_ms >= 10 - 0.001) and np.median(held_ms) == pytest.approx(10, abs=0.2)
    # The previous PES of a PID finished leaving one link delay after it finished entering.
    known = (arrival["offset"][a] != NONE) & (release["offset"][r] != NONE)
    gap_ms = (
        release["offset"][r][known].astype(np.int64) - arrival["offset"][a][known].astype(np.int64)
    ) / MS
    assert known.sum() >= len(seen) - 3 and np.median(gap_ms) == pytest.approx(10, abs=0.2)
    c = log.columns
    srt_data = (c["direction"] == 0) & c["srt_data"]
    assert not (c["is_rtp"] & srt_data).any()
    retransmitted = int((srt_data & c["srt_retransmit"]).sum())
    print(f"\nmuxer PES {len(sent)}, link PES {len(seen)}, missing {sorted(sent - set(seen))}")
    print(f"SRT data packets {int(srt_data.sum())}, retransmitted {retransmitted}")
    print(f"held p50 {np.median(held_ms):.3f} ms, max {held_ms.max():.3f} ms")
