"""The black box with GStreamer ends: ``${signal.source}`` plays the time-coded signal
inside the sender's pipeline, ``${signal.sink}`` records off a tee in the receiver's.

The timing of both ends comes from the trace, so the black box and the probes over the
same span (latlab_signal_in -> the tee) must agree to a few microseconds; a delay
planted on the link must move the black box by exactly that much.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from latlab.analysis.blackbox import raw_audio_layout
from latlab.lab.scenario import ScenarioError, parse_scenario
from latlab.pipeline import analyze_run
from latlab.rundir import RECEIVED_WAV
from latlab.rundir import SIGNAL as SIGNAL_DIR
from tests.conftest import delay_sweep, latlab

REPO = Path(__file__).resolve().parents[1]
SCENARIO = REPO / "scenarios" / "l16-gst-blackbox.toml"


def _text() -> str:
    return SCENARIO.read_text(encoding="utf-8")


# --- scenario -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda t: t.split("[signal]")[0],
            'processes.receiver: ${signal.sink} needs [signal] record = "receiver"',
        ),
        (
            lambda t: t.replace('record = "receiver"', 'record = "sender"'),
            "signal.record: process 'sender' must be a pipeline holding ${signal.sink} once",
        ),
        (
            lambda t: t.replace('record = "receiver"', 'record = "receiver"\nrecord_client = "x"'),
            "signal.record_client: only for a JACK device; 'receiver' is a process",
        ),
        (
            lambda t: t.replace("${signal.sink}", "${signal.sink} ! ${signal.sink}"),
            "signal.record: process 'receiver' must be a pipeline holding ${signal.sink} once",
        ),
        (
            lambda t: t.replace("interval_ms = 200", "interval_ms = 200\nrate = 7000"),
            "signal.rate: must be an integer from 8000 to 192000",
        ),
    ],
)
def test_bad_gstreamer_signal_ends_are_one_line_errors(edit, message: str) -> None:
    with pytest.raises(ScenarioError) as error:
        parse_scenario(edit(_text()), "bb.toml")
    assert str(error.value).startswith(f"bb.toml: {message}"), str(error.value)
    assert "\n" not in str(error.value)


def test_frame_size_and_rate_come_from_raw_audio_caps() -> None:
    caps = "audio/x-raw, format=(string){}, layout=(string)interleaved, rate=(int)48000, "
    assert raw_audio_layout(caps.format("S16BE") + "channels=(int)2") == (4, 48000)
    assert raw_audio_layout(caps.format("S24LE") + "channels=(int)1") == (3, 48000)
    assert raw_audio_layout(caps.format("S24_32LE") + "channels=(int)2") == (8, 48000)
    assert raw_audio_layout(caps.format("F64LE") + "channels=(int)1") == (8, 48000)
    assert raw_audio_layout("audio/x-opus, channels=(int)2") is None
    assert raw_audio_layout("audio/x-raw, format=(string)S16LE, channels=(int)2") is None


# --- the real stack ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict[float, tuple[Path, dict]]:
    """A two-point sweep of the shipped scenario: link delay 5 ms, then 35 ms."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    text = _text().replace(
        'between = ["tx", "rx"]', 'between = ["tx", "rx"]\ndelay_ms = "${delay}"', 1
    )
    return delay_sweep(text, tmp_path_factory.mktemp("blackbox-gst") / "sweep", (5, 35), 6)


@pytest.mark.exclusive
@pytest.mark.e2e
def test_black_box_and_probes_over_the_same_span_agree(planted: dict) -> None:
    for _, summary in planted.values():
        box = summary["blackbox"]
        codes = box["codes"]
        assert codes["injected"] >= 25
        assert codes["found"] == codes["injected"]
        assert codes["matched_to_units"] >= codes["injected"] - 3
        span = {"from": "sender/latlab_signal_in:src", "to": "receiver/playout:src_0"}
        assert box["span"] == span
        # both ends are timed by the trace: only the position of a code inside its unit
        # and the tee's two pushes separate them
        assert abs(box["unexplained"]["p50_ms"]) < 0.05
        assert box["unexplained"]["max_ms"] - box["unexplained"]["min_ms"] < 0.5


@pytest.mark.exclusive
@pytest.mark.e2e
def test_planted_link_delay_moves_the_black_box_by_that_much(planted: dict) -> None:
    shift = (
        planted[35.0][1]["blackbox"]["black_box"]["p50_ms"]
        - (planted[5.0][1]["blackbox"]["black_box"]["p50_ms"])
    )
    assert shift == pytest.approx(30.0, abs=0.3)


@pytest.mark.exclusive
@pytest.mark.e2e
def test_report_shows_the_span_and_the_recording_is_the_playout(planted: dict) -> None:
    run_dir, _ = planted[5.0]
    result = latlab("report", str(run_dir), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "probed from sender/latlab_signal_in:src to receiver/playout:src_0" in result.stdout
    run = json.loads((run_dir / "run.json").read_text())
    assert run["signal"]["inject"] == {"kind": "gst", "process": "sender"}
    assert (run_dir / SIGNAL_DIR / RECEIVED_WAV).stat().st_size > 6 * 48000 * 2


@pytest.mark.e2e
def test_a_trace_without_the_signal_elements_is_one_line(planted: dict, tmp_path: Path) -> None:
    run_dir, _ = planted[5.0]
    copy = tmp_path / "renamed"
    shutil.copytree(run_dir, copy)
    run = json.loads((copy / "run.json").read_text())
    run["signal"]["inject"]["process"] = "nobody"
    (copy / "run.json").write_text(json.dumps(run))
    summary, _, _ = analyze_run(copy)
    assert summary["streams"][0]["end_to_end"]["count"] > 0
    assert summary["blackbox"]["error"] == (
        f"{copy}: the trace of process 'nobody' has no buffers through latlab_signal_in "
        "(the signal's inject end): did its pipeline start?"
    )
