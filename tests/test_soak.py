"""The soaks' 20-second versions (bench/soak_tracer.py, bench/soak_linkemu.py; the
10-minute runs and their figures are in docs/benchmarks.md). Their speed is printed, not
checked here: these tests hold what must be true at any speed (nothing lost unseen,
memory that does not grow with the run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parent.parent

RING_BYTES = 65536 * 80  # the tracer's ring per streaming thread (settings.rs, record.rs)


def soak(script: str, out: Path, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), "--json", str(out), *args],
        capture_output=True, text=True, timeout=240, check=False, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.mark.timeout(300)
def test_a_traced_pipeline_for_20_s_loses_no_event_unseen_and_does_not_grow(
    tmp_path: Path,
) -> None:
    """100 000 buffers/s for 20 s (2 million buffers, two pushes each): every event the
    trace's END says was written reached the reader, every push was written or counted as
    dropped, and the resident memory grew by at most two rings after the first slice (a
    leak of 5 bytes a buffer would pass that)."""
    found = soak("soak_tracer.py", tmp_path / "soak.json", "--seconds", "20",
                 "--baseline-seconds", "5", "--every", "5")  # fmt: skip
    events, rss = found["events"], found["rss_mb"]
    assert events["problem"] is None and events["written"] is not None, events
    assert events["read"] == events["written"], events
    assert events["written"] + events["dropped"] >= 2 * 2_000_000, events
    assert rss["samples"] >= 10, rss
    assert rss["peak"] - rss["first_slice_peak"] <= 2 * RING_BYTES / 2**20, rss


@pytest.mark.timeout(300)
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_the_link_emulator_for_20_s_releases_every_packet_and_does_not_grow(
    tmp_path: Path,
) -> None:
    """10 000 packets/s through 20 +- 5 ms for 20 s: every packet the emulator logged was
    released, it logged no more than the sender sent, and its memory did not grow by a
    megabyte after the first slice (0.0 MB in the runs here; 200 000 packets: a leak of
    5 bytes a packet would show)."""
    found = soak("soak_linkemu.py", tmp_path / "soak.json", "--seconds", "20", "--every", "5")
    assert 0 < found["logged"] <= found["sent"], found
    assert found["released"] == found["logged"], found
    rss = found["rss_mb"]
    assert rss["samples"] >= 10, rss
    assert rss["peak"] - rss["first_slice_peak"] < 1.0, rss


@pytest.mark.timeout(300)
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_the_flagship_for_20_s_is_followed_whole_and_analysed_in_a_fresh_process(
    tmp_path: Path,
) -> None:
    """The flagship for 20 s (bench/soak_flagship.py; its hour is in docs/benchmarks.md):
    every 10 ms unit of the 20 s is followed and none lost, the analysis runs in a process
    of its own, and no traced pipeline grew after its first 5 s by more than the tracer's
    two rings per streaming thread (its rings are allocated once; three threads here)."""
    found = soak("soak_flagship.py", tmp_path / "soak.json", "--seconds", "20", "--every", "5",
                 "--out", str(tmp_path / "run"))  # fmt: skip
    assert found["record"]["exit"] == 0, found["record"]
    [stream] = found["analysis"]["streams"]
    assert stream["lost"] == 0 and stream["units"] >= 0.95 * 20 / 0.010, stream
    pipelines = {k: m for k, m in found["record"]["memory_mb"].items()
                 if k.startswith(("sender ", "receiver "))}  # fmt: skip
    assert len(pipelines) == 2, found["record"]["memory_mb"]
    for name, memory in pipelines.items():
        assert memory["slices"] >= 4, (name, memory)
        grew = memory["peak"] - memory["first_slice_peak"]
        assert grew <= 3 * 2 * RING_BYTES / 2**20, (name, memory)
