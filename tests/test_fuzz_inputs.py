"""Fuzzing every input latlab parses (Hypothesis): a clear error or a usable result.

The property, for each input: reading it (and analysing a run that holds it) either
returns a result or raises latlab's error type (:class:`latlab.errors.LatlabError`) whose
message is one line; never another exception (a traceback for the user), never a hang
(each example has a deadline, each test a time limit). Inputs:

* ``.lltrace`` traces: valid traces of every chunk type and record kind, mutated bytewise
  and generated chunk by chunk, read alone and analysed as part of a run;
* ``.lllink`` link logs, browser records (``.jsonl``), Chromium's Perfetto traces;
* scenario files (TOML), signal recordings (WAV);
* what a run directory says about itself and other versions leave behind: ``run.json``,
  ``summary.json`` and the stored analysis's manifest; a dataset's manifest.

CI runs each with a small budget (``LATLAB_FUZZ_EXAMPLES``, default 40 examples per
test; the whole module in about 30 s here); a long run sets it higher
(``LATLAB_FUZZ_EXAMPLES=5000 .venv/bin/pytest tests/test_fuzz_inputs.py -p no:timeout``).
Inputs that once failed are kept as explicit examples (``@example``) beside each test.
"""

from __future__ import annotations

import io
import json
import os
import resource
import shutil
import struct
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from latlab import rundir
from latlab.errors import LatlabError
from latlab.ingest.browser_records import read_browser_log
from latlab.ingest.chrome_trace import read_chrome_trace
from latlab.ingest.events import load_traces
from latlab.ingest.link_events import merge_link_logs
from latlab.ingest.link_log import FIXED_HEADER, MAGIC, RECORD_DTYPE, read_link_log
from latlab.ingest.trace_format import EVENT_DTYPE, HEADER_SIZE, Chunk, Kind
from latlab.ingest.trace_reader import read_trace
from latlab.ingest.trace_writer import TraceWriter
from latlab.synthetic import SyntheticRtpAudio, make_run_dir

EXAMPLES = int(os.environ.get("LATLAB_FUZZ_EXAMPLES", "40"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=10_000,  # ms per example: far above any here (a hang fails, not waits)
    database=None,  # failures are kept as @example lines, not in a local database
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=os.environ.get("LATLAB_FUZZ_RANDOM") is None,  # CI: the same inputs each run
)
# Values that make parsers allocate, index or convert badly.
EDGE_U32 = [0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF]
EDGE_U64 = [*EDGE_U32, 0x7FFF_FFFF_FFFF_FFFF, 0x8000_0000_0000_0000, 0xFFFF_FFFF_FFFF_FFFF]


def clean(call: Callable[[], Any]) -> Any:
    """``call()``'s result, or None if it raised latlab's error with a one-line message.
    Any other exception propagates: that is the finding."""
    try:
        return call()
    except LatlabError as exc:
        message = str(exc)
        assert message and "\n" not in message, f"not one line: {message!r}"
        return None


# Address space the fuzzed code may use: a damaged input that makes latlab allocate more
# (a time span of years cut into 10 ms units) is a finding (MemoryError), not a machine
# brought down.
MEMORY_LIMIT = 4 << 30


@pytest.fixture(scope="module", autouse=True)
def memory_limit() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = MEMORY_LIMIT if hard == resource.RLIM_INFINITY else min(MEMORY_LIMIT, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="latlab-fuzz-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


# --- bytes, mutated ---------------------------------------------------------------


@st.composite
def mutations(draw: st.DrawFn, seed: bytes) -> bytes:
    """``seed`` with a few edits: bytes set, aligned words set to edge values, pieces
    inserted or deleted, the end cut off."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 6))):
        if not data:
            break
        op = draw(st.sampled_from(["byte", "u32", "u64", "insert", "delete", "cut"]))
        at = draw(st.integers(0, len(data) - 1))
        if op == "byte":
            data[at] = draw(st.integers(0, 255))
        elif op == "u32":
            at -= at % 4
            data[at : at + 4] = struct.pack("<I", draw(st.sampled_from(EDGE_U32)))
        elif op == "u64":
            at -= at % 8
            data[at : at + 8] = struct.pack("<Q", draw(st.sampled_from(EDGE_U64)))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=48))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 96))]
        else:
            del data[at:]
    return bytes(data)


# --- traces -----------------------------------------------------------------------


def every_kind_trace(path: Path) -> bytes:
    """A trace with a chunk of every type and a record of every kind (as the tracer and
    the SFU write them), returned as bytes."""
    with TraceWriter(path, pid=42, start_mono_ns=1_000) as w:
        w.info(process="fuzz", hostname="h", gst_version="1.22", tracer_version="0.1.0")
        w.pad(1, "src0", "src", factory="audiotestsrc", peer_element="pay", peer_pad="sink")
        w.pad(2, "pay", "src", factory="rtpL16pay", klass="Codec/Payloader/Network/RTP",
              peer_element="sink", peer_factory="udpsink")  # fmt: skip
        w.thread(1, 100, "src0:src")
        w.caps(1, 5_000, "audio/x-raw, rate=(int)48000")
        w.caps(2, 5_000, "application/x-rtp, media=(string)audio, clock-rate=(int)48000")
        w.clock(1, mono_ns=6_000, clock_ns=5_000, base_time=1_000)
        w.segment(1, 6_500)
        stats = struct.pack("<Q", 7_000) + b"".join(
            struct.pack("<H", len(s)) + s for s in (b"srtsink0", b"srtsink", b'{"rtt-ms": 1.5}')
        )
        w._chunk(Chunk.STATS, stats)
        w._chunk(Chunk.LATENCY, struct.pack("<IQQ", 2, 7_500, 20_000_000))
        w._chunk(Chunk.DROPS, struct.pack("<QQ", 8_000, 0))
        records = np.zeros(len(Kind) * 4, EVENT_DTYPE)
        for i, row in enumerate(records):
            row["t_ns"] = 10_000 + 1_000 * i
            row["pts"] = 10_000_000 * (i // len(Kind))
            row["duration"] = 10_000_000
            row["pad_id"] = 1 + i % 2
            row["thread_idx"] = 1
            row["size"] = 960
            row["kind"] = list(Kind)[i % len(Kind)]
            row["rtp_ssrc"], row["rtp_seq"], row["rtp_ts"] = 0x1234, i, 480 * i
        w.events(records)
        w.close(t_ns=99_000)
    return path.read_bytes()


@st.composite
def generated_traces(draw: st.DrawFn) -> bytes:
    """A valid header and chunks of any type: known types with well-formed fields of any
    value (pad ids, thread indices, times, kinds at their edges), and unknown ones."""
    header = bytearray(every_kind_trace_header())
    chunks = []
    for _ in range(draw(st.integers(0, 8))):
        ctype = draw(st.sampled_from([*Chunk, 0, 12, 99, 0xFFFF_FFFF]))
        if ctype == Chunk.EVENTS:
            n = draw(st.integers(0, 6))
            records = np.frombuffer(
                draw(
                    st.binary(min_size=n * EVENT_DTYPE.itemsize, max_size=n * EVENT_DTYPE.itemsize)
                ),
                EVENT_DTYPE,
            ).copy()
            for field in ("pad_id", "thread_idx", "kind"):
                if n and draw(st.booleans()):
                    edge = draw(
                        st.sampled_from(EDGE_U32 if field != "kind" else [0, 1, 2, 3, 4, 5, 255])
                    )
                    records[field] = np.array(edge).astype(records.dtype[field])
            payload = records.tobytes()
        elif ctype in (Chunk.PAD, Chunk.THREAD, Chunk.CAPS, Chunk.LATENCY):
            ids = struct.pack("<I", draw(st.sampled_from(EDGE_U32)))
            payload = ids + draw(st.binary(max_size=80))
        else:
            payload = draw(st.binary(max_size=80))
        chunks.append(struct.pack("<II", ctype, len(payload)) + payload)
    return bytes(header) + b"".join(chunks)


def every_kind_trace_header() -> bytes:
    path = Path(tempfile.mkdtemp(prefix="latlab-fuzz-h-")) / "h.lltrace"
    data = every_kind_trace(path)[:HEADER_SIZE]
    shutil.rmtree(path.parent)
    return data


_EVERY_KIND: bytes | None = None


def every_kind_bytes() -> bytes:
    global _EVERY_KIND
    if _EVERY_KIND is None:
        with tempfile.TemporaryDirectory(prefix="latlab-fuzz-") as tmp:
            _EVERY_KIND = every_kind_trace(Path(tmp) / "t.lltrace")
    return _EVERY_KIND


def read_and_table(path: Path) -> None:
    """The trace read, then made into the event table every analysis starts from."""
    clean(lambda: read_trace(path))
    clean(lambda: load_traces([path]))


@FUZZ
@given(data=st.data())
def test_a_mutated_trace_of_every_kind_reads_or_fails_in_one_line(
    data: st.DataObject, workdir: Path
) -> None:
    path = workdir / "mutated.lltrace"
    path.write_bytes(data.draw(mutations(every_kind_bytes())))
    read_and_table(path)


HEADER_ONLY = b"LLTRACE\0\x01\x00 \x00P\x00\x00\x00*" + bytes(7) + b"\xe8\x03" + bytes(6)


@FUZZ
@given(raw=generated_traces())
@example(raw=HEADER_ONLY)  # found: a header and no chunk made the event table raise ValueError
def test_generated_traces_read_or_fail_in_one_line(raw: bytes, workdir: Path) -> None:
    path = workdir / "generated.lltrace"
    path.write_bytes(raw)
    read_and_table(path)


# --- whole runs: every input of a run directory, analysed -------------------------


def link_log_bytes(columns: dict[str, np.ndarray], between: tuple[str, str]) -> bytes:
    """A ``.lllink`` file (docs/link-log-format.md) of ``columns``, closed cleanly."""
    info = json.dumps({"program": "latlab-linkemu", "name": "-".join(between),
                       "between": list(between)}).encode()  # fmt: skip
    data_offset = -(-(FIXED_HEADER.size + len(info)) // 64) * 64
    records = np.zeros(len(columns["arrival_ns"]), RECORD_DTYPE)
    for name, values in columns.items():
        if name in RECORD_DTYPE.names:
            records[name] = values
    header = FIXED_HEADER.pack(MAGIC, 1, 64, data_offset, 1, 0, 1, len(info)) + info
    return header.ljust(data_offset, b"\0") + records.tobytes()


@pytest.fixture(scope="module")
def seed_run(workdir: Path) -> Path:
    """A small synthetic RTP run with a link log: traces, link, run.json, env.json."""
    run = workdir / "seed-run"
    result = make_run_dir(run, SyntheticRtpAudio(units=60, link_in_delay=1_000_000))
    assert result.link_columns is not None
    (run / rundir.LINKS).mkdir()
    (run / rundir.LINKS / "tx-rx.lllink").write_bytes(
        link_log_bytes(result.link_columns, ("tx", "rx"))
    )
    return run


def analysed(run: Path) -> None:
    """The whole analysis of ``run`` and its terminal report, or one line of error."""
    from latlab.pipeline import analysis_of

    analysis = clean(lambda: analysis_of(run, write=False, reuse=False))
    if analysis is not None:
        json.dumps(analysis.summary, allow_nan=True)  # summary.json can be written
        render(analysis.summary)


def render(summary: dict[str, Any]) -> None:
    """The terminal report of ``summary`` (or one line of error)."""
    from rich.console import Console

    from latlab.report.table import render_summary

    console = Console(file=io.StringIO(), width=100)
    clean(lambda: render_summary(summary, console))


def fresh_copy(seed_run: Path, workdir: Path, name: str) -> Path:
    run = workdir / name
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(seed_run, run)
    return run


def test_the_seed_run_analyses(seed_run: Path, workdir: Path) -> None:
    from latlab.pipeline import analysis_of

    run = fresh_copy(seed_run, workdir, "control")
    analysis = analysis_of(run, write=False, reuse=False)
    assert len(analysis.streams) == 1 and "links" in analysis.summary


@FUZZ
@given(data=st.data(), which=st.sampled_from(["sender-100", "receiver-200"]))
def test_a_run_with_a_mutated_trace_analyses_or_fails_in_one_line(
    data: st.DataObject, which: str, seed_run: Path, workdir: Path
) -> None:
    run = fresh_copy(seed_run, workdir, "run-trace")
    path = run / rundir.TRACES / f"{which}.lltrace"
    path.write_bytes(data.draw(mutations(path.read_bytes())))
    analysed(run)


@FUZZ
@given(data=st.data())
def test_a_mutated_link_log_reads_or_fails_in_one_line(
    data: st.DataObject, seed_run: Path, workdir: Path
) -> None:
    run = fresh_copy(seed_run, workdir, "run-link")
    path = run / rundir.LINKS / "tx-rx.lllink"
    path.write_bytes(data.draw(mutations(path.read_bytes())))
    log = clean(lambda: read_link_log(path))
    if log is not None:
        clean(lambda: merge_link_logs([log]))
    analysed(run)


JSON_SCALARS = (
    st.none() | st.booleans() | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
)  # fmt: skip
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def json_mutations(draw: st.DrawFn, seed: Any) -> Any:
    """``seed`` (parsed JSON) with a few values replaced by any JSON, keys dropped or added."""
    doc = json.loads(json.dumps(seed))
    for _ in range(draw(st.integers(1, 5))):
        paths = list(_json_paths(doc))
        if not paths:
            return draw(JSON_VALUES)
        parent, key = draw(st.sampled_from(paths))
        op = draw(st.sampled_from(["replace", "drop", "add"]))
        if op == "replace" or (op == "drop" and isinstance(parent, list)):
            parent[key] = draw(JSON_VALUES)
        elif op == "drop":
            del parent[key]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=8))] = draw(JSON_VALUES)
    return doc


def _json_paths(doc: Any) -> Iterator[tuple[Any, Any]]:
    if isinstance(doc, dict):
        for key, value in list(doc.items()):
            yield doc, key
            yield from _json_paths(value)
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield doc, i
            yield from _json_paths(value)


@FUZZ
@given(data=st.data())
def test_a_run_json_of_any_shape_analyses_or_fails_in_one_line(
    data: st.DataObject, seed_run: Path, workdir: Path
) -> None:
    run = fresh_copy(seed_run, workdir, "run-json")
    path = run / rundir.RUN_FILE
    doc = data.draw(json_mutations(json.loads(path.read_text())))
    path.write_text(json.dumps(doc))
    analysed(run)


@pytest.fixture(scope="module")
def stored_run(seed_run: Path, workdir: Path) -> Path:
    """The seed run analysed once, with its stored analysis and summary.json."""
    from latlab.pipeline import analysis_of

    run = fresh_copy(seed_run, workdir, "stored-seed")
    analysis_of(run)
    assert (run / rundir.SUMMARY_FILE).is_file()
    return run


@FUZZ
@given(data=st.data(), which=st.sampled_from(["summary", "manifest"]))
def test_a_stored_summary_of_any_shape_is_read_or_analysed_again(
    data: st.DataObject, which: str, stored_run: Path, workdir: Path
) -> None:
    """A run directory from another latlab version (or damaged) keeps a summary.json and
    a stored analysis this one did not write: they are used, analysed again, or refused
    in one line."""
    from latlab.pipeline import analysis_of

    run = fresh_copy(stored_run, workdir, "stored")
    path = (
        run / rundir.SUMMARY_FILE
        if which == "summary"
        else run / rundir.ANALYSIS_DIR / rundir.ANALYSIS_MANIFEST
    )
    doc = data.draw(json_mutations(json.loads(path.read_text())))
    path.write_text(json.dumps(doc))
    analysis = clean(lambda: analysis_of(run, write=False))
    if analysis is not None:
        render(analysis.summary)


# --- browser records and Chromium's trace ------------------------------------------


def browser_lines() -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    for i in range(6):
        server_ms = 1000.0 + 250 * i
        lines.append({"type": "clock", "srv_monotonic_ns": int(server_ms * 1e6),
                      "page_ms": server_ms + 7.5, "rtt_ms": 0.3})  # fmt: skip
    for i in range(8):
        lines.append({"type": "frame", "side": "send", "kind": "audio", "ssrc": 4660,
                      "rtp_ts": 960 * i, "seq": i, "t_ms": 2000.0 + 20 * i, "bytes": 80,
                      "capture_ms": 1995.0 + 20 * i})  # fmt: skip
    lines.append({"type": "stats", "t_ms": 2100.0, "reports": [
        {"type": "inbound-rtp", "kind": "audio", "ssrc": 4660, "jitterBufferDelay": 1.5,
         "jitterBufferEmittedCount": 100}]})  # fmt: skip
    lines.append({"type": "console", "level": "log", "text": "hello"})
    return lines


@FUZZ
@given(data=st.data())
def test_browser_records_of_any_shape_read_or_fail_in_one_line(
    data: st.DataObject, workdir: Path
) -> None:
    path = workdir / "browsers" / "alice.jsonl"
    path.parent.mkdir(exist_ok=True)
    lines = data.draw(json_mutations(browser_lines()))
    pieces = [json.dumps(line) for line in (lines if isinstance(lines, list) else [lines])]
    raw = "\n".join(pieces).encode()
    if data.draw(st.booleans()):  # and the bytes of the file damaged too
        raw = data.draw(mutations(raw))
    path.write_text(raw.decode("utf-8", errors="replace"), encoding="utf-8")
    clean(lambda: read_browser_log(path))


def chrome_trace_bytes() -> bytes:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    trace = pb.Trace()
    defaults = trace.packet.add(trusted_packet_sequence_id=1)
    defaults.trace_packet_defaults.timestamp_clock_id = 64
    defaults.trace_packet_defaults.track_event_defaults.track_uuid = 7
    snapshot = trace.packet.add(trusted_packet_sequence_id=1)
    snapshot.clock_snapshot.clocks.add(clock_id=3, timestamp=5_000_000_000)
    snapshot.clock_snapshot.clocks.add(clock_id=64, timestamp=1000, is_incremental=True,
                                       unit_multiplier_ns=1000)  # fmt: skip
    names = trace.packet.add(trusted_packet_sequence_id=1, sequence_flags=1)
    names.interned_data.event_names.add(iid=1, name="AudioDecoder::Decode")
    for delta, kind in ((10, 1), (30, 2), (5, 1), (40, 2)):
        packet = trace.packet.add(trusted_packet_sequence_id=1, timestamp=delta)
        packet.track_event.type = kind
        if kind == 1:
            packet.track_event.name_iid = 1
    return trace.SerializeToString()


@FUZZ
@given(data=st.data())
def test_a_mutated_chrome_trace_reads_or_fails_in_one_line(
    data: st.DataObject, workdir: Path
) -> None:
    path = workdir / "chrome.pftrace"
    path.write_bytes(data.draw(mutations(chrome_trace_bytes())))
    clean(lambda: read_chrome_trace(path))


# --- scenarios, recordings, datasets ------------------------------------------------

SCENARIO_DIR = Path(__file__).resolve().parents[1] / "scenarios"
SCENARIOS = sorted(SCENARIO_DIR.glob("*.toml"))


@FUZZ
@given(data=st.data(), source=st.sampled_from(SCENARIOS))
def test_a_mutated_scenario_loads_or_fails_in_one_line(
    data: st.DataObject, source: Path, workdir: Path
) -> None:
    from latlab.lab.scenario import load_scenario

    path = workdir / "scenario.toml"
    path.write_bytes(data.draw(mutations(source.read_bytes())))
    clean(lambda: load_scenario(path))


@FUZZ
@given(data=st.data(), source=st.sampled_from(SCENARIOS))
def test_a_scenario_of_any_values_loads_or_fails_in_one_line(
    data: st.DataObject, source: Path, workdir: Path
) -> None:
    """The scenario's structure kept, its values replaced by anything TOML can hold."""
    import tomllib

    from latlab.lab.scenario import load_scenario

    doc = data.draw(json_mutations(tomllib.loads(source.read_text())))
    path = workdir / "scenario-values.toml"
    path.write_text(_toml(doc) if isinstance(doc, dict) else "x = 1\n", encoding="utf-8")
    clean(lambda: load_scenario(path))


def _toml(doc: dict[str, Any]) -> str:
    """``doc`` as TOML (inline tables; None and non-finite floats dropped, as TOML
    has neither null nor NaN keys of our kind)."""

    def value(v: Any) -> str | None:
        if v is None:
            return None
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return str(max(min(v, 2**63 - 1), -(2**63)))
        if isinstance(v, float):
            return (
                repr(v) if np.isfinite(v) else ("nan" if v != v else ("inf" if v > 0 else "-inf"))
            )
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            items = [x for x in (value(i) for i in v) if x is not None]
            return "[" + ", ".join(items) + "]"
        items = [f"{json.dumps(str(k))} = {x}" for k, i in v.items() if (x := value(i)) is not None]
        return "{" + ", ".join(items) + "}"

    lines = []
    for key, v in doc.items():
        rendered = value(v)
        if rendered is not None:
            lines.append(f"{json.dumps(str(key))} = {rendered}")
    return "\n".join(lines) + "\n"


def wav_bytes() -> bytes:
    from latlab.signal.wavio import write_wav

    path = Path(tempfile.mkdtemp(prefix="latlab-fuzz-")) / "s.wav"
    write_wav(path, np.sin(np.arange(4800) / 7.0).astype(np.float32) * 0.5, 48_000)
    data = path.read_bytes()
    shutil.rmtree(path.parent)
    return data


@FUZZ
@given(data=st.data())
def test_a_mutated_wav_reads_or_fails_in_one_line(data: st.DataObject, workdir: Path) -> None:
    from latlab.signal.wavio import read_wav

    path = workdir / "rec.wav"
    path.write_bytes(data.draw(mutations(wav_bytes())))
    clean(lambda: read_wav(path))


@FUZZ
@given(data=st.data())
def test_a_dataset_manifest_of_any_shape_is_read_or_refused_in_one_line(
    data: st.DataObject, workdir: Path
) -> None:
    from latlab.dataset.layout import MANIFEST_NAME, read_manifest

    root = workdir / "dataset"
    root.mkdir(exist_ok=True)
    seed = {"schema": "latlab.dataset/1", "minor": 0,
            "files": {"segments": ["segments/part-0.parquet"]},
            "runs": {"abc": {"path": "/runs/a", "ingested_at": "2026-11-01"}}}  # fmt: skip
    doc = data.draw(json_mutations(seed))
    raw = json.dumps(doc).encode()
    if data.draw(st.booleans()):
        raw = data.draw(mutations(raw))
    (root / MANIFEST_NAME).write_bytes(raw)
    clean(lambda: read_manifest(root))


# --- inputs that once failed, kept ----------------------------------------------------


def _trace_with_pad_id(pad_id: int) -> bytes:
    raw = bytearray(every_kind_bytes())
    records = np.zeros(1, EVENT_DTYPE)
    records["pad_id"], records["kind"] = pad_id, Kind.PUSH
    payload = records.tobytes()
    return bytes(raw) + struct.pack("<II", Chunk.EVENTS, len(payload)) + payload


def _wav_without_fmt() -> bytes:
    data = b"\x00\x01" * 8
    body = b"WAVE" + b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


@pytest.mark.parametrize(
    ("what", "found"),
    [
        ("header-only", "a trace of a header and no chunk: ValueError in the event table"),
        ("pad-id", "a pad id of 0xFFFFFFFF: numpy asked for a 24 GiB table (the OOM killer)"),
        ("thread-id", "a THREAD chunk of index 0xFFFFFFFF: a 16 GiB lookup table"),
        ("browser-int", "a page time of 2**70 ms: TypeError in isfinite"),
        ("browser-nan", "a NaN page time: ValueError rounding the clock offset"),
        ("wav-no-fmt", "a WAV without its fmt chunk: scipy's UnboundLocalError"),
        ("run-null", "run.json duration_s null: TypeError building the summary"),
    ],
)
def test_inputs_that_once_failed(what: str, found: str, seed_run: Path, workdir: Path) -> None:
    """Each found by the tests above (``found``), kept as a fixed input."""
    if what == "header-only":
        path = workdir / "kept.lltrace"
        path.write_bytes(HEADER_ONLY)
        read_and_table(path)
    elif what == "pad-id":
        path = workdir / "kept.lltrace"
        path.write_bytes(_trace_with_pad_id(0xFFFF_FFFF))
        read_and_table(path)
    elif what == "thread-id":
        path = workdir / "kept.lltrace"
        extra = struct.pack("<II", 0xFFFF_FFFF, 7) + struct.pack("<H", 1) + b"t"
        path.write_bytes(every_kind_bytes() + struct.pack("<II", Chunk.THREAD, len(extra)) + extra)
        read_and_table(path)
    elif what.startswith("browser"):
        path = workdir / "browsers" / "kept.jsonl"
        path.parent.mkdir(exist_ok=True)
        lines = browser_lines()
        if what == "browser-int":
            lines.append({"type": "frame", "side": "recv", "t_ms": 2**70, "ssrc": 4660})
        else:
            lines.append({"type": "clock", "srv_monotonic_ns": 1, "page_ms": float("nan")})
        path.write_text("\n".join(json.dumps(line) for line in lines))
        log = clean(lambda: read_browser_log(path))
        assert log is not None and any("skipped" in p for p in log.problems)
    elif what == "wav-no-fmt":
        from latlab.signal.wavio import read_wav

        path = workdir / "kept.wav"
        path.write_bytes(_wav_without_fmt())
        assert clean(lambda: read_wav(path)) is None
    else:
        run = fresh_copy(seed_run, workdir, "kept-run")
        doc = json.loads((run / rundir.RUN_FILE).read_text())
        doc["duration_s"] = None
        (run / rundir.RUN_FILE).write_text(json.dumps(doc))
        analysed(run)
