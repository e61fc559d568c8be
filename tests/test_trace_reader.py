"""Reading trace files: damaged, truncated, foreign and future files."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from latlab.ingest.events import load_run
from latlab.ingest.trace_reader import TraceError, read_trace
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
