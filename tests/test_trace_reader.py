"""Reading trace files: damaged, truncated, foreign and future files."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from latlab.ingest.events import load_run, load_traces
from latlab.ingest.trace_format import EVENT_DTYPE, Chunk, Kind
from latlab.ingest.trace_reader import TraceError, read_trace
from latlab.ingest.trace_writer import TraceWriter
from latlab.synthetic import SyntheticRtpAudio, make_rtp_audio_run


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    make_rtp_audio_run(tmp_path, SyntheticRtpAudio(units=600))
    return tmp_path


def test_clean_trace_is_complete(run_dir: Path) -> None:
    trace = read_trace(run_dir / "sender-100.lltrace")
    assert trace.complete and not trace.problems
    assert trace.process == "sender"
    assert len(trace.events) > 0


def test_truncated_trace_keeps_what_was_complete(run_dir: Path) -> None:
    path = run_dir / "receiver-200.lltrace"
    full = read_trace(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 1000])
    cut = read_trace(path)
    assert not cut.complete
    assert any("truncated" in p for p in cut.problems)
    assert 0 < len(cut.events) < len(full.events)


def test_unknown_version_is_rejected_by_name(run_dir: Path) -> None:
    path = run_dir / "sender-100.lltrace"
    data = bytearray(path.read_bytes())
    data[8:10] = struct.pack("<H", 99)
    path.write_bytes(bytes(data))
    with pytest.raises(TraceError, match=r"sender-100\.lltrace: unknown trace version 99"):
        read_trace(path)


def test_foreign_file_is_not_a_trace(tmp_path: Path) -> None:
    path = tmp_path / "x.lltrace"
    path.write_bytes(b"RIFF" + bytes(100))
    with pytest.raises(TraceError, match="not a latlab trace"):
        read_trace(path)


def test_corrupt_chunk_length_is_reported_not_fatal(run_dir: Path) -> None:
    path = run_dir / "receiver-200.lltrace"
    data = bytearray(path.read_bytes())
    # Find the last EVENTS chunk header and give it an impossible length.
    offset = 32
    last_events = None
    while offset < len(data):
        ctype, length = struct.unpack_from("<II", data, offset)
        if ctype == 4:
            last_events = offset
        offset += 8 + length
    struct.pack_into("<II", data, last_events, 4, 10**9)
    path.write_bytes(bytes(data))
    trace = read_trace(path)
    assert trace.problems and len(trace.events) > 0


def test_run_with_one_broken_trace_still_reports_the_other(run_dir: Path) -> None:
    (run_dir / "receiver-200.lltrace").write_bytes(b"garbage")
    table = load_run(run_dir)
    names = [p.name for p in table.processes]
    assert "sender" in names
    assert any("not a latlab trace" in msg for p in table.processes for msg in p.problems)


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "latlab", *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=60,
    )


def test_cli_reports_a_bad_trace_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "a.lltrace").write_bytes(
        b"LLTRACE\0" + struct.pack("<HHHH", 7, 32, 80, 0) + bytes(16)
    )
    result = _cli("report", str(tmp_path))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "a.lltrace: unknown trace version 7" in lines[0]


def test_cli_report_on_truncated_run_prints_table_and_warning(run_dir: Path) -> None:
    path = run_dir / "receiver-200.lltrace"
    path.write_bytes(path.read_bytes()[:-500])
    result = _cli("report", str(run_dir))
    assert result.returncode == 0, result.stderr
    assert "end to end" in result.stdout
    assert "truncated" in result.stdout


def _chunk(ctype: int, payload: bytes) -> bytes:
    return struct.pack("<II", ctype, len(payload)) + payload


def _string(raw: bytes) -> bytes:
    return struct.pack("<H", len(raw)) + raw


def _stats_chunk(t_ns: int, element: str, factory: str, json_text: bytes) -> bytes:
    payload = struct.pack("<Q", t_ns) + _string(element.encode()) + _string(factory.encode())
    return _chunk(Chunk.STATS, payload + _string(json_text))


def _hand_written_trace(path: Path, *chunks: bytes) -> None:
    """A header, the given chunks, one PES event record and END, byte by byte."""
    header = b"LLTRACE\0" + struct.pack("<HHHHIIQ", 1, 32, 80, 0, 4242, 0, 1000)
    pes = np.zeros(1, EVENT_DTYPE)
    pes["kind"], pes["rtp_ssrc"], pes["pts"] = Kind.PES, 65, 324_000_202
    end = _chunk(Chunk.END, struct.pack("<QQQ", 9000, 1, 0))
    path.write_bytes(header + b"".join(chunks) + _chunk(Chunk.EVENTS, pes.tobytes()) + end)


def test_stats_chunks_are_parsed(tmp_path: Path) -> None:
    path = tmp_path / "h.lltrace"
    srtsink = (
        b'{"bytes-sent-total":84412,"callers":[{"rtt-ms":0.157,'
        b'"negotiated-latency-ms":50,"caller-address":null}]}'
    )
    _hand_written_trace(
        path,
        _stats_chunk(5000, "srtsink0", "srtsink", srtsink),
        _stats_chunk(5100, "src", "srtsrc", '{"rtt-ms":0.035,"name":"é"}'.encode()),
    )
    trace = read_trace(path)
    assert trace.complete and not trace.problems
    first, second = trace.stats
    assert (first.t_ns, first.element, first.factory) == (5000, "srtsink0", "srtsink")
    assert first.fields["callers"][0]["negotiated-latency-ms"] == 50
    assert first.fields["callers"][0]["caller-address"] is None
    assert second.fields == {"rtt-ms": 0.035, "name": "é"}
    assert list(trace.events["kind"]) == [Kind.PES]  # a pes record passes like any other
    assert int(trace.events["pts"][0]) == 324_000_202


@pytest.mark.parametrize("json_text", [b'{"rtt-ms": 0.1', b"[1, 2]", b'{"a": "\xff"}', b"\xff\xfe"])
def test_corrupt_stats_chunk_is_reported_not_fatal(tmp_path: Path, json_text: bytes) -> None:
    path = tmp_path / "h.lltrace"
    good = _stats_chunk(5100, "srtsrc0", "srtsrc", b'{"rtt-ms": 0.2}')
    _hand_written_trace(path, _stats_chunk(5000, "srtsrc0", "srtsrc", json_text), good)
    trace = read_trace(path)
    assert trace.complete
    assert trace.problems == ["corrupt chunk of type 9 at byte 32"]
    assert [s.fields for s in trace.stats] == [{"rtt-ms": 0.2}]
    assert len(trace.events) == 1


def test_segments_turn_pts_into_running_time(tmp_path: Path) -> None:
    """x264enc shifts its PTS by 1000 h and moves its segment's start with them."""
    shift = 3_600_000_000_000_000
    records = np.zeros(4, EVENT_DTYPE)
    records["pad_id"] = 1
    records["t_ns"] = [1000, 2000, 3000, 4000]
    records["pts"] = [shift + 5, shift + 33_333_338, 7, 0xFFFF_FFFF_FFFF_FFFF]
    path = tmp_path / "t.lltrace"
    with TraceWriter(path, pid=7) as w:
        w.info(process="sender")
        w.pad(1, "x264enc0", factory="x264enc", peer_element="mux", peer_pad="sink_65")
        w.segment(1, 500, start=shift - 2)
        w.segment(1, 2500, start=0, base=100)  # a new segment between the 2nd and 3rd buffer
        w.events(records)
    table = load_traces([path])
    (probe,) = table.probes
    assert table.running_pts(probe.index).tolist() == [7, 33_333_340, 107, -1]
    assert table.probes[0].peer_pad == "sink_65"
