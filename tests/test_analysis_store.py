"""The stored analysis: reports read it while it is current, and analyse again otherwise."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from latlab.analysis import store
from latlab.analysis.stats import describe
from latlab.analysis.summary import read_summary, write_summary
from latlab.pipeline import analysis_of, summary_of
from latlab.synthetic import MS, SyntheticRtpAudio, make_rtp_audio_run


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    make_rtp_audio_run(out, SyntheticRtpAudio(units=600, loss=0.01, network_jitter=MS))
    return out


def test_a_stored_analysis_gives_the_figures_of_a_fresh_one(run_dir: Path) -> None:
    fresh = analysis_of(run_dir)
    assert not fresh.reused and (run_dir / "analysis" / "manifest.json").is_file()
    again = analysis_of(run_dir)
    assert again.reused
    assert again.summary == json.loads((run_dir / "summary.json").read_text())
    for a, b in zip(fresh.streams, again.streams, strict=True):
        np.testing.assert_array_equal(a.journeys.times, b.journeys.times)
        np.testing.assert_array_equal(a.journeys.threads, b.journeys.threads)
        assert a.journeys.probe_names == b.journeys.probe_names
        assert [s.stats for s in a.segments] == [s.stats for s in b.segments]
        assert a.end_to_end.stats == b.end_to_end.stats
        assert {k: v.stats for k, v in a.kinds.items()} == {k: v.stats for k, v in b.kinds.items()}
        assert {k: v.stats for k, v in a.phases.items()} == {
            k: v.stats for k, v in b.phases.items()
        }
    assert again.processes == fresh.processes and again.threads == fresh.threads


def test_a_changed_input_a_new_unit_or_a_damaged_store_is_analysed_again(run_dir: Path) -> None:
    analysis_of(run_dir)
    assert analysis_of(run_dir, 20.0).reused is False  # another unit
    assert analysis_of(run_dir, 20.0).reused is True
    trace = next(run_dir.glob("*.lltrace"))
    stat = trace.stat()
    os.utime(trace, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert analysis_of(run_dir, 20.0).reused is False  # an input changed
    (run_dir / "analysis" / "stream-0.arrow").write_bytes(b"damaged")
    assert analysis_of(run_dir, 20.0).reused is False
    (run_dir / "summary.json").write_text("{")
    assert summary_of(run_dir, 20.0)["streams"]  # analysed again, not an error


def test_other_analysis_code_makes_the_store_stale(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    analysis_of(run_dir)
    monkeypatch.setattr(store, "code_version", lambda: "another-version")
    assert analysis_of(run_dir).reused is False


def test_summary_of_reads_only_the_summary_when_current(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = summary_of(run_dir)
    monkeypatch.setattr("latlab.pipeline.load_run", _never)
    assert summary_of(run_dir) == first


def test_a_store_that_cannot_be_written_only_costs_the_next_report(run_dir: Path) -> None:
    (run_dir / "analysis").write_text("not a directory")
    assert analysis_of(run_dir).summary["streams"]
    assert (run_dir / "summary.json").is_file()
    assert analysis_of(run_dir).reused is False


def _never(*_args: object, **_kwargs: object) -> None:
    raise AssertionError("a current stored analysis was read again from the traces")


def test_summary_json_is_strict_json_and_figures_of_no_samples_read_back_as_nan(
    tmp_path: Path,
) -> None:
    """A leg that forwarded nothing has a description of no samples (NaN figures, which
    JSON cannot hold: browsers' JSON.parse refuses a file with NaN): summary.json holds
    null there, and the stored summary reads it back as the analysis gave it."""
    empty = describe(np.zeros(0, dtype=np.int64))
    summary = {"schema": "x", "legs": [{"dwell": empty, "rate": None}], "ratio": 0.5}
    path = tmp_path / "summary.json"
    write_summary(summary, path)
    text = path.read_text()
    assert "NaN" not in text
    strict = json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in summary.json"))
    assert strict["legs"][0]["dwell"]["p50_ms"] is None
    back = read_summary(text)
    assert back["legs"][0]["rate"] is None and back["ratio"] == 0.5
    assert back["legs"][0]["dwell"].keys() == empty.keys()
    assert all(np.isnan(v) for k, v in back["legs"][0]["dwell"].items() if k != "count")
