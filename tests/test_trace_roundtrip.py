"""Every record kind of the trace format, written through the shared Rust crate (lltrace/),
read back by the Python reader.

Three writers: the crate itself (a fixture file with a chunk of every type and a record of
every kind, fixed values: ``cargo test`` writes it), the GStreamer tracer (short
``gst-launch-1.0`` pipelines: RTP, a transport stream for ``pes`` records, a ring too small
to keep up for ``DROPS``) and latlab-kuprobe (on loopback, no root; in the e2e tier because
conftest's guard keeps latlab's lab programs there).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from latlab.ingest.trace_format import (
    HEADER_SIZE,
    VERSION,
    Chunk,
    ClockFlag,
    EventFlag,
    Kind,
    PadFlag,
)
from latlab.ingest.trace_reader import Trace, read_trace
from latlab.lab.runner import LATLAB_PROGRAMS
from latlab.tracer import is_built, tracer_env
from tests.test_kuprobe import free_port, rx_queue

REPO = Path(__file__).resolve().parent.parent
NONE = 0xFFFF_FFFF_FFFF_FFFF
TIMEOUT_S = 60

needs_tracer = pytest.mark.skipif(
    not is_built() or shutil.which("gst-launch-1.0") is None,
    reason="needs the built tracer and gst-launch-1.0 (bash scripts/setup.sh)",
)


def chunks(path: Path) -> list[tuple[int, bytes]]:
    """(type, payload) of every chunk of a trace, from the chunk framing alone."""
    data = path.read_bytes()
    magic, version = struct.unpack_from("<8sH", data)
    assert (magic, version) == (b"LLTRACE\0", VERSION)
    out, offset = [], HEADER_SIZE
    while offset < len(data):
        ctype, length = struct.unpack_from("<II", data, offset)
        out.append((ctype, data[offset + 8 : offset + 8 + length]))
        offset += 8 + length
    assert offset == len(data), "the last chunk is cut short"
    return out


def end_counts(path: Path) -> tuple[int, int]:
    """(events written, events dropped) from the END chunk."""
    (payload,) = [p for t, p in chunks(path) if t == Chunk.END]
    _, written, dropped = struct.unpack("<QQQ", payload)
    return written, dropped


def only(paths: list[Path]) -> Path:
    assert len(paths) == 1, paths
    return paths[0]


# --- the crate's own fixture: fixed values of every chunk type and record kind ---------

# The values of lltrace/src/fixture.rs (`fixture_file`, `record_fixtures`, `pad_desc`,
# `clock_desc`, `segment_desc`).
FIXTURE_RECORDS = [
    # t_ns, pts, dts, duration, offset, offset_end, pad_id, thread_idx, size, buffer_flags,
    # rtp_ssrc, rtp_ts, rtp_seq, rtp_pt, kind, event_flags, reserved, list_index
    (0x0102030405060708, 10_000_000, NONE, 10_000_000, 480, 960, 2, 1, 1932, 0x4040,
     0x56D407AD, 0xDEADBEEF, 0xFFFE, 96, Kind.PUSH, EventFlag.RTP | EventFlag.MARKER, 0, 0),
    (0x010203040506070D, 10_000_000, NONE, 10_000_000, 480, 960, 2, 1, 1932, 0x4040,
     0x56D407AD, 0xDEADBEEF, 0xFFFE, 96, Kind.DONE, EventFlag.RTP | EventFlag.IN_LIST, 0,
     0x0102),
    (0x99, NONE, NONE, NONE, NONE, NONE, 2, 1, 0, 0, 0, 0, 0, 0, Kind.EOS, 0, 0, 0),
    (7, 0x1_0000_0001, NONE, NONE, 5, 354, 4, 2, 376, 0, 0x41, 0, 0, 0xE0, Kind.PES,
     EventFlag.IN_LIST | EventFlag.RANDOM_ACCESS, 0, 3),
    # fwd: source SSRC | timestamp << 32 in dts, kernel and recv times in offset and
    # offset_end, source seq in list_index
    (0x0A0B, NONE, 0xDEADBEEF_56D407AD, NONE, 0x800, 0x900, 8, 2, 1100, 0, 0x01020304,
     3000, 0x8001, 96, Kind.FWD, EventFlag.RTP | EventFlag.MARKER, 0, 0xFFFE),
]  # fmt: skip


def cargo() -> str | None:
    found = shutil.which("cargo")
    home = Path.home() / ".cargo" / "bin" / "cargo"
    return found or (str(home) if home.is_file() else None)


@pytest.mark.skipif(cargo() is None, reason="needs cargo (bash scripts/setup.sh)")
def test_every_chunk_and_record_kind_from_the_shared_crate(tmp_path: Path) -> None:
    path = tmp_path / "fixture.lltrace"
    test = "fixture::write_fixture_for_python"
    argv = [
        cargo(),
        "test",
        "--release",
        "--quiet",
        "-p",
        "lltrace",
        "--lib",
        "--",
        test,
        "--exact",
    ]
    result = subprocess.run(argv, cwd=REPO, env={**os.environ, "LLTRACE_FIXTURE": str(path)},
                            capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    types = [t for t, _ in chunks(path)]
    assert types == [Chunk.INFO, Chunk.THREAD, Chunk.THREAD, Chunk.PAD, Chunk.PAD, Chunk.CAPS,
                     Chunk.CLOCK, Chunk.SEGMENT, Chunk.LATENCY, Chunk.STATS, Chunk.EVENTS,
                     Chunk.DROPS, Chunk.END]  # fmt: skip

    trace = read_trace(path)
    assert trace.complete and not trace.problems
    assert (trace.pid, trace.start_mono_ns) == (4242, 1_000_000_000)
    assert trace.info == {"process": "fixture", "hostname": "hôte",
                          "tracer_version": "lltrace fixture"}  # fmt: skip
    assert trace.threads == {1: (100, "src:é"), 2: (101, "")}
    pad, empty = trace.pads[7], trace.pads[8]
    assert (pad.flags, pad.pipeline_id) == (0x3F, 0x0102030405060708)
    names = (pad.element, pad.pad, pad.factory, pad.klass, pad.peer_element, pad.peer_pad,
             pad.peer_factory, pad.path)  # fmt: skip
    assert names == ("rtpl16pay0", "src", "rtpL16pay", "Codec/Payloader/Network/RTP",
                     "udpsink0", "sink", "udpsink", "pipeline0/bin1")  # fmt: skip
    assert (empty.flags, empty.pipeline_id, empty.element, empty.path) == (0, 0, "", "")
    assert trace.caps == [(7, 0x123456789, "audio/x-raw, rate=(int)48000")]
    (clock,) = trace.clocks
    assert (clock.pipeline_id, clock.mono_ns, clock.clock_ns, clock.base_time) == (
        1, 1000, 2000, NONE)  # fmt: skip
    assert (clock.state, clock.flags) == (4, ClockFlag.SYSTEM_MONOTONIC)
    assert (clock.pipeline, clock.clock) == ("pipeline0", "GstSystemClock")
    (seg,) = trace.segments
    assert (seg.pad_id, seg.t_ns, seg.format, seg.flags, seg.rate, seg.applied_rate) == (
        9, 123, 3, 0, 1.0, -0.5)  # fmt: skip
    values = (seg.base, seg.offset, seg.start, seg.stop, seg.time, seg.position, seg.duration)
    assert values == (0, 1, 3_600_000_000_000, -1, 4, 5, -1)  # none reads as -1
    assert [tuple(x) for x in trace.latencies] == [(7, 6, 20_000_000)]
    (stats,) = trace.stats
    assert (stats.t_ns, stats.element, stats.factory) == (42, "fakesink0", "fakesink")
    assert stats.fields == {"rendered": 3, "name": "x"}
    assert [tuple(int(v) for v in r) for r in trace.events] == FIXTURE_RECORDS
    assert trace.dropped == 66
    assert end_counts(path) == (5, 66)


# --- the tracer -------------------------------------------------------------------------


def gst_launch(tmp_path: Path, description: str, **env: str) -> Path:
    """Run a pipeline with the tracer loaded (process name ``p``); its trace."""
    full = {**os.environ, **tracer_env(tmp_path, "p"), **env}
    argv = ["gst-launch-1.0", "-q", *description.split()]
    result = subprocess.run(argv, env=full, capture_output=True, text=True,
                            timeout=TIMEOUT_S, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return only(list(tmp_path.glob("p-*.lltrace")))


def pad_named(trace: Trace, element: str, pad: str) -> int:
    (pad_id,) = [p.pad_id for p in trace.pads.values() if (p.element, p.pad) == (element, pad)]
    return pad_id


@needs_tracer
def test_tracer_rtp_pipeline_round_trips(tmp_path: Path) -> None:
    desc = (
        "audiotestsrc is-live=true num-buffers=20 samplesperbuffer=480 "
        "! audio/x-raw,rate=48000,channels=2 ! rtpL16pay pt=97 ! fakesink sync=true"
    )
    path = gst_launch(tmp_path, desc, LATLAB_STATS_INTERVAL_MS="20")
    trace = read_trace(path)
    assert trace.complete and not trace.problems and trace.dropped == 0
    assert {t for t, _ in chunks(path)} == set(Chunk) - {Chunk.DROPS}
    assert trace.pid == int(path.stem.rsplit("-", 1)[1])
    info = trace.info
    assert info["process"] == "p" and info["tracer_version"] == "0.1.0"
    assert info["hostname"] == socket.gethostname() and info["gst_version"].startswith("GStreamer")
    assert "rtpL16pay" in info["cmdline"]
    assert abs(int(info["monotonic_ns"]) - trace.start_mono_ns) < 1_000_000_000
    assert int(info["realtime_ns"]) > 1_577_836_800 * 10**9

    # PAD: the payloader's source pad feeds the sink
    rtp = pad_named(trace, "rtpl16pay0", "src")
    pay = trace.pads[rtp]
    assert (pay.factory, pay.peer_element, pay.peer_pad, pay.peer_factory) == (
        "rtpL16pay", "fakesink0", "sink", "fakesink")  # fmt: skip
    assert "Payloader" in pay.klass and pay.path == "pipeline0"
    assert pay.flags == PadFlag.SRC | PadFlag.PEER_IS_SINK
    src = trace.pads[pad_named(trace, "audiotestsrc0", "src")]
    assert src.flags & PadFlag.ELEMENT_IS_SOURCE and src.pipeline_id == pay.pipeline_id > 0

    # EVENTS: push / done on the RTP pad, an eos per source pad
    ev = trace.events
    assert set(ev["pad_id"]) <= set(trace.pads) and set(ev["thread_idx"]) <= set(trace.threads)
    on_rtp = ev[ev["pad_id"] == rtp]
    pushes, done = on_rtp[on_rtp["kind"] == Kind.PUSH], on_rtp[on_rtp["kind"] == Kind.DONE]
    assert len(pushes) == len(done) >= 20
    assert np.all(pushes["event_flags"] & EventFlag.RTP) and set(pushes["rtp_pt"]) == {97}
    assert np.all(np.diff(pushes["rtp_seq"].astype(np.int64)) % 65536 == 1)
    assert len(set(pushes["rtp_ssrc"])) == 1
    # each packet carries size - 12 bytes of 4-byte frames; the RTP clock counts frames
    np.testing.assert_array_equal(np.diff(pushes["rtp_ts"]) * 4, pushes["size"][:-1] - 12)
    for field in ("rtp_seq", "rtp_ts", "rtp_ssrc", "size", "pts", "duration", "thread_idx"):
        np.testing.assert_array_equal(done[field], pushes[field])
    assert np.all(done["t_ns"] >= pushes["t_ns"]) and np.all(pushes["reserved"] == 0)
    assert (pushes["size"] - 12).sum() == 20 * 480 * 4  # 20 buffers of 480 stereo frames
    eos = ev[ev["kind"] == Kind.EOS]
    assert {trace.pads[p].element for p in eos["pad_id"]} >= {"audiotestsrc0", "rtpl16pay0"}
    assert np.all(eos["pts"] == NONE) and np.all(eos["size"] == 0)
    assert written_matches(path, trace)

    # THREAD, CAPS, CLOCK, SEGMENT, LATENCY, STATS
    assert all(tid > 0 and name for tid, name in trace.threads.values())
    assert any(p == rtp and c.startswith("application/x-rtp") for p, _, c in trace.caps)
    playing = [c for c in trace.clocks if c.state == 4]
    assert playing and all(c.pipeline == "pipeline0" and c.clock_ns != NONE for c in playing)
    assert all(c.pipeline_id == pay.pipeline_id for c in trace.clocks)
    assert any(s.pad_id == rtp and s.format == 3 and s.rate == 1.0 for s in trace.segments)
    assert trace.latencies and all(lat > 0 for _, _, lat in trace.latencies)
    sink_stats = [s for s in trace.stats if s.element == "fakesink0"]
    assert sink_stats and sink_stats[0].factory == "fakesink"
    assert isinstance(sink_stats[-1].fields["rendered"], int)


def written_matches(path: Path, trace: Trace) -> bool:
    return end_counts(path) == (len(trace.events), trace.dropped)


TS_PACKET = 188
PID = 0x100
VIDEO = 0xE0


def ts_timestamp(prefix: int, value: int) -> bytes:
    """A 33-bit PTS/DTS in its 5-byte PES encoding."""
    return bytes(
        [
            (prefix << 4) | ((value >> 30) & 0x07) << 1 | 1,
            (value >> 22) & 0xFF,
            ((value >> 15) & 0x7F) << 1 | 1,
            (value >> 7) & 0xFF,
            (value & 0x7F) << 1 | 1,
        ]
    )


def ts_packet(pid: int, payload: bytes, start: bool = False, random_access: bool = False) -> bytes:
    head = bytes([0x47, (0x40 if start else 0) | pid >> 8, pid & 0xFF])
    # with random access, an adaptation field of one byte: random_access_indicator
    body = (bytes([0x30, 1, 0x40]) if random_access else bytes([0x10])) + payload
    return head + body.ljust(TS_PACKET - 3, b"\xab")


# Per PES: (PTS, DTS or None, PES_packet_length, random access, continuation packets)
PES = [
    (900_000, None, 0, True, 2),
    (903_003, None, 0x0123, False, 0),
    (8_589_934_591, 8_589_934_000, 0, False, 5),  # the largest 33-bit PTS
    (3_000, None, 0, True, 1),
    (6_003, 3_000, 0, False, 3),
    (9_006, None, 0, False, 7),
]
PACKETS_PER_BUFFER = 10


def transport_stream() -> tuple[bytes, list[dict[str, int]]]:
    """A TS of the PES above, padded with null packets to whole buffers; and, per PES, the
    `pes` record fields the tracer must write."""
    packets: list[bytes] = []
    expected: list[dict[str, int]] = []
    previous: tuple[int, int] | None = None  # (index of its last packet, ES bytes)
    for pts, dts, length, random_access, continuation in PES:
        fields = ts_timestamp(3 if dts is not None else 2, pts)
        if dts is not None:
            fields += ts_timestamp(1, dts)
        header = bytes([0, 0, 1, VIDEO]) + struct.pack(">H", length)
        header += bytes([0x80, 0xC0 if dts is not None else 0x80, len(fields)]) + fields
        start = len(packets)
        expected.append(
            {
                "packet": start,
                "pts": pts,
                "dts": NONE if dts is None else dts,
                "prev_packet": NONE if previous is None else previous[0],
                "offset_end": NONE if previous is None else previous[1],
                "rtp_ts": length,
                "event_flags": EventFlag.RANDOM_ACCESS if random_access else 0,
            }
        )
        packets.append(ts_packet(PID, header, start=True, random_access=random_access))
        packets += [ts_packet(PID, b"") for _ in range(continuation)]
        payload = TS_PACKET - 4 - (2 if random_access else 0)
        previous = (len(packets) - 1, payload - len(header) + continuation * (TS_PACKET - 4))
    while len(packets) % PACKETS_PER_BUFFER:
        packets.append(ts_packet(0x1FFF, b""))  # null packets
    return b"".join(packets), expected


@needs_tracer
def test_tracer_pes_records_round_trip(tmp_path: Path) -> None:
    data, expected = transport_stream()
    ts = tmp_path / "stream.ts"
    ts.write_bytes(data)
    blocksize = PACKETS_PER_BUFFER * TS_PACKET
    path = gst_launch(tmp_path, f"filesrc location={ts} blocksize={blocksize} ! fakesink")
    trace = read_trace(path)
    assert trace.complete and not trace.problems
    ev = trace.events[trace.events["pad_id"] == pad_named(trace, "filesrc0", "src")]
    push_rows = np.flatnonzero(ev["kind"] == Kind.PUSH)
    pushes = ev[push_rows]
    assert len(pushes) == len(data) // blocksize
    np.testing.assert_array_equal(pushes["offset"], np.arange(len(pushes)) * blocksize)
    assert np.all(pushes["size"] == blocksize)
    assert list(ev["kind"]).count(Kind.DONE) == len(pushes)
    pes_rows = np.flatnonzero(ev["kind"] == Kind.PES)
    assert len(pes_rows) == len(PES)
    for row, want in zip(pes_rows, expected, strict=True):
        pes = ev[row]
        buffer = want["packet"] // PACKETS_PER_BUFFER
        push = pushes[buffer]
        # follows its buffer's push (and the earlier pes records of that buffer)
        assert push_rows[buffer] < row and all(
            k == Kind.PES for k in ev["kind"][push_rows[buffer] + 1 : row]
        )
        for same in ("t_ns", "pad_id", "thread_idx", "buffer_flags", "list_index"):
            assert pes[same] == push[same], same
        prev_t_ns = NONE
        if want["prev_packet"] != NONE:
            prev_t_ns = pushes[want["prev_packet"] // PACKETS_PER_BUFFER]["t_ns"]
        fields = ("pts", "dts", "duration", "offset", "offset_end", "size", "rtp_ssrc",
                  "rtp_ts", "rtp_seq", "rtp_pt", "event_flags")  # fmt: skip
        got = {k: int(pes[k]) for k in fields}
        assert got == {
            "pts": want["pts"], "dts": want["dts"], "duration": NONE, "offset": int(prev_t_ns),
            "offset_end": want["offset_end"],
            "size": (want["packet"] % PACKETS_PER_BUFFER) * TS_PACKET,
            "rtp_ssrc": PID, "rtp_ts": want["rtp_ts"], "rtp_seq": 0, "rtp_pt": VIDEO,
            "event_flags": want["event_flags"],
        }  # fmt: skip
    assert written_matches(path, trace)


@needs_tracer
def test_tracer_drops_round_trip(tmp_path: Path) -> None:
    buffers = 20_000
    path = gst_launch(tmp_path, f"fakesrc num-buffers={buffers} ! fakesink",
                      GST_TRACERS="latlab(ring=2)")  # fmt: skip
    trace = read_trace(path)
    assert trace.complete
    drops = [struct.unpack("<QQ", p) for t, p in chunks(path) if t == Chunk.DROPS]
    assert drops, "a ring of 2 records keeps up with nothing"
    counts = [n for _, n in drops]
    assert counts == sorted(counts) and trace.dropped == counts[-1] > 0
    assert len(trace.events) + trace.dropped == 2 * buffers + 1  # push, done; one eos
    assert written_matches(path, trace)


# --- latlab-kuprobe ----------------------------------------------------------------------

PROBE = LATLAB_PROGRAMS["latlab-kuprobe"]
SSRC = 0x1234ABCD


@pytest.mark.e2e
@pytest.mark.skipif(not PROBE.is_file(), reason="latlab-kuprobe not built")
def test_kuprobe_records_round_trip(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "LATLAB_TRACE_DIR": str(tmp_path), "LATLAB_PROCESS": "ku"}
    argv = [str(PROBE), "--port", str(port), "--bind", "127.0.0.1"]
    probe = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert probe.stdout is not None and probe.stdout.readline().startswith("ready")
        packets = [struct.pack("!BBHII", 0x80, 96 | (0x80 if seq == 2 else 0), seq, seq * 480, SSRC)
                   + bytes(seq) for seq in range(3)] + [b"not rtp"]  # fmt: skip
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            for packet in packets:
                tx.sendto(packet, ("127.0.0.1", port))
        deadline = time.monotonic() + 5
        while rx_queue(port) != 0:
            assert time.monotonic() < deadline, "the probe did not read its packets"
            time.sleep(0.001)  # polling an observable condition, not standing in for one
    finally:
        probe.send_signal(signal.SIGINT)
        _, err = probe.communicate(timeout=TIMEOUT_S)
    assert probe.returncode == 0, err
    path = only(list(tmp_path.glob("ku-*.lltrace")))
    assert [t for t, _ in chunks(path)] == [Chunk.INFO, Chunk.THREAD, Chunk.PAD, Chunk.EVENTS,
                                            Chunk.END]  # fmt: skip
    trace = read_trace(path)
    assert trace.complete and not trace.problems and trace.pid == probe.pid
    assert trace.info["process"] == "ku" and trace.info["tracer_version"] == "kuprobe 0.1.0"
    assert f"--port {port}" in trace.info["cmdline"]
    assert int(trace.info["monotonic_ns"]) == trace.start_mono_ns
    ((tid, name),) = trace.threads.values()
    assert list(trace.threads) == [1] and tid > 0 and name == "kuprobe"
    (pad,) = trace.pads.values()
    assert (pad.pad_id, pad.flags, pad.pipeline_id) == (
        1, PadFlag.SRC | PadFlag.PEER_IS_SINK | PadFlag.ELEMENT_IS_SOURCE, 0)  # fmt: skip
    assert (pad.element, pad.pad, pad.factory, pad.klass, pad.peer_element, pad.peer_pad,
            pad.peer_factory, pad.path) == ("kernel", "src", "kuprobe", "Source/Network", "app",
                                           "sink", "kuprobe", "kuprobe")  # fmt: skip
    ev = trace.events
    assert list(ev["kind"]) == [Kind.PUSH, Kind.DONE] * len(packets)
    rows = [tuple(int(v) for v in r)[1:] for r in ev]  # without t_ns
    expected = []
    for packet in packets:
        if packet.startswith(b"\x80"):
            flags = EventFlag.RTP | (EventFlag.MARKER if packet[1] & 0x80 else 0)
            _, _, seq, ts, ssrc = struct.unpack("!BBHII", packet[:12])
            rtp = (ssrc, ts, seq, 96, flags)
        else:
            rtp = (0, 0, 0, 0, 0)
        for kind in (Kind.PUSH, Kind.DONE):
            ssrc, ts, seq, pt, flags = rtp
            expected.append((NONE, NONE, NONE, NONE, NONE, 1, 1, len(packet), 0, ssrc, ts, seq,
                             pt, kind, flags, 0, 0))  # fmt: skip
    assert rows == expected
    t_ns = ev["t_ns"].astype(np.int64)
    assert np.all(t_ns[1::2] >= t_ns[::2])  # read after the kernel received it
    assert end_counts(path) == (len(ev), 0)
