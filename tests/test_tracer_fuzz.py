"""The tracer inside a real pipeline fed corrupt transport streams, and a panic inside it.

The tracer parses every buffer that looks like MPEG-TS on the user's streaming threads
(``tracer/src/latlab/pes.rs``). Its parsers are fuzzed by proptest in ``cargo test``; here
the whole plugin runs in ``gst-launch-1.0`` on corrupted streams, and a panic is injected
into a hook (``LATLAB_TRACER_PANIC_AT``, ``tracer/src/latlab/guard.rs``) to show that it
stops the tracer and never the pipeline.
"""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import numpy as np
import pytest

from latlab.ingest.trace_format import Kind
from latlab.ingest.trace_reader import FAULT_KEY, read_trace
from latlab.tracer import tracer_env

pytestmark = pytest.mark.e2e

TS = 188
FRAMES = 60
RUN_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def good_ts(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """Two seconds of H.264 in MPEG-TS (key frame every 10 frames), as mpegtsmux writes it."""
    path = tmp_path_factory.mktemp("ts") / "good.ts"
    argv = ["gst-launch-1.0", "-q", "videotestsrc", f"num-buffers={FRAMES}", "!",
            "video/x-raw,width=160,height=120,framerate=30/1", "!",
            "x264enc", "tune=zerolatency", "key-int-max=10", "!", "mpegtsmux", "!",
            "filesink", f"location={path}"]  # fmt: skip
    subprocess.run(argv, check=True, capture_output=True, timeout=RUN_TIMEOUT_S)
    data = path.read_bytes()
    assert len(data) % TS == 0 and len(data) > 100 * TS
    return data


def corrupt(good: bytes, how: str, seed: int) -> bytes:
    """``good`` damaged one way (deterministic for a seed)."""
    rng = random.Random(seed)
    data = bytearray(good)
    packets = len(data) // TS
    if how == "flip":  # random bytes anywhere but the sync bytes
        for _ in range(len(data) // 40):
            at = rng.randrange(len(data))
            if at % TS:
                data[at] = rng.randrange(256)
    elif how == "headers":  # the TS and PES headers only: what the parser reads
        for p in range(packets):
            for at in range(p * TS + 1, p * TS + 20):
                if rng.random() < 0.2:
                    data[at] = rng.randrange(256)
    elif how == "edges":  # every packet a PES start with extreme lengths
        for p in range(packets):
            base = p * TS
            data[base + 1] |= 0x40  # PUSI
            data[base + 3] = rng.choice([0x10, 0x20, 0x30])
            data[base + 4] = rng.choice([0, 1, 182, 183, 184, 255])
            data[base + 5 : base + 8] = b"\x00\x00\x01"
            data[base + 12] = rng.choice([0, 5, 10, 200, 255])
    elif how == "noise":  # random packets, sync bytes kept
        for p in rng.sample(range(packets), packets // 3):
            data[p * TS + 1 : (p + 1) * TS] = rng.randbytes(TS - 1)
    elif how == "shuffle":  # packets out of order, some repeated, some missing
        chunks = [bytes(data[p * TS : (p + 1) * TS]) for p in range(packets)]
        chunks = [rng.choice(chunks) for _ in chunks]
        data = bytearray(b"".join(chunks))
    elif how == "misaligned":  # a partial packet up front: no buffer starts with sync
        data = bytearray(rng.randbytes(rng.randrange(1, TS)) + bytes(data))
    else:
        raise AssertionError(how)
    return bytes(data)


KINDS = ["flip", "headers", "edges", "noise", "shuffle", "misaligned"]
SEEDS = range(4)


def run_pipeline(
    tmp_path: Path, source: Path, traced: bool, extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``filesrc ! queue ! tsparse ! fakesink`` on ``source`` (traced or not)."""
    argv = ["gst-launch-1.0", "filesrc", f"location={source}", "blocksize=1316", "!",
            "queue", "!", "tsparse", "!", "queue", "!", "fakesink"]  # fmt: skip
    env = {**os.environ}
    if traced:
        env.update(tracer_env(tmp_path / "traces", "fuzz"))
    env.update(extra or {})
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=False,
                          timeout=RUN_TIMEOUT_S)  # fmt: skip


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", KINDS)
def test_corrupt_streams_pass_a_traced_pipeline_as_an_untraced_one(
    tmp_path: Path, good_ts: bytes, how: str
) -> None:
    for seed in SEEDS:
        source = tmp_path / f"{how}-{seed}.ts"
        source.write_bytes(corrupt(good_ts, how, seed))
        plain = run_pipeline(tmp_path, source, traced=False)
        traced = run_pipeline(tmp_path / str(seed), source, traced=True)
        # The tracer changes nothing: same exit status (tsparse may refuse garbage itself).
        assert traced.returncode == plain.returncode, (how, seed, traced.stderr[-2000:])
        assert "panicked" not in traced.stderr, traced.stderr[-2000:]
        (path,) = (tmp_path / str(seed) / "traces").glob("*.lltrace")
        trace = read_trace(path)
        assert trace.complete, trace.problems
        assert FAULT_KEY not in trace.info
        pes = trace.events[trace.events["kind"] == Kind.PES]
        pushes = trace.events[trace.events["kind"] == Kind.PUSH]
        # A PES start per TS packet at most, on a pad that pushed TS.
        assert len(pes) <= len(source.read_bytes()) // TS * 2  # filesrc's and tsparse's
        assert np.isin(pes["pad_id"], pushes["pad_id"]).all()
        assert (pes["size"] % TS == 0).all()  # packet offsets within their buffers


def test_the_clean_stream_gives_a_pes_start_per_frame(tmp_path: Path, good_ts: bytes) -> None:
    """The control: the undamaged stream's PES starts are the frames (on each TS pad)."""
    source = tmp_path / "good.ts"
    source.write_bytes(good_ts)
    result = run_pipeline(tmp_path, source, traced=True)
    assert result.returncode == 0, result.stderr[-2000:]
    (path,) = (tmp_path / "traces").glob("*.lltrace")
    trace = read_trace(path)
    pes = trace.events[trace.events["kind"] == Kind.PES]
    video = pes[pes["rtp_pt"] == 0xE0]
    per_pad = np.unique(video["pad_id"], return_counts=True)[1]
    assert list(per_pad) == [FRAMES] * len(per_pad) and len(per_pad) >= 2


@pytest.mark.parametrize("at", [1, 40, 200])
def test_a_panic_in_a_hook_stops_the_tracer_and_not_the_pipeline(
    tmp_path: Path, good_ts: bytes, at: int
) -> None:
    """A Rust panic reaching GStreamer's C code would abort the process; the tracer's
    guard catches it, logs it, closes the trace and stays out of the way.

    Measured without the guard (the same build with ``guarded`` calling its body
    directly): gst-launch-1.0 died of SIGABRT (exit -6, "panic in a function that
    cannot unwind") at the injected push, every time."""
    source = tmp_path / "good.ts"
    source.write_bytes(good_ts)
    result = run_pipeline(tmp_path, source, traced=True,
                          extra={"LATLAB_TRACER_PANIC_AT": str(at)})  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Got EOS" in result.stdout
    assert "internal error in the pad-push-pre hook" in result.stderr
    (path,) = (tmp_path / "traces").glob("*.lltrace")
    trace = read_trace(path)
    assert trace.complete  # the writer closed the file
    assert trace.info[FAULT_KEY] == f"pad-push-pre: LATLAB_TRACER_PANIC_AT={at}: injected panic"
    assert any("stopped recording after an internal error" in p for p in trace.problems)
    pushes = trace.events[trace.events["kind"] == Kind.PUSH]
    clean = run_pipeline(tmp_path / "clean", source, traced=True)
    assert clean.returncode == 0
    (clean_path,) = (tmp_path / "clean" / "traces").glob("*.lltrace")
    all_pushes = int((read_trace(clean_path).events["kind"] == Kind.PUSH).sum())
    # Recording stopped at the panicking push: the pushes before it are there (other
    # threads may add a few while the panic is reported), not the rest of the run's.
    assert at - 1 <= len(pushes) < all_pushes // 2
