"""The quality matrix's analysis and tables on synthetic inputs with known answers: A/V skew
and what the system added (latlab.analysis.quality), settling after a step, the matrix and
side-by-side tables at 80 columns and in HTML (latlab.report.quality)."""

from __future__ import annotations

import io
import shutil
from html import escape

import numpy as np
import pytest
from rich.console import Console

from latlab.analysis import quality as Q
from latlab.ingest.browser_signal import Recording
from latlab.ingest.quality_records import QualityRecords, VideoCodes
from latlab.report import quality as R
from latlab.signal import avclip

needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="no espeak-ng")
T0 = 5_000_000_000_000  # ns
LOOPS = 3


def _clip(offset_ms: float) -> tuple[np.ndarray, dict]:
    samples, codes = avclip.audio_clip(offset_ms)
    clip = {"loop_s": avclip.LOOP_S, "fps": avclip.FPS, "audio": codes,
            "video": {"frames": avclip.video_frames()}}  # fmt: skip
    return samples, clip


def _member(
    samples: np.ndarray, audio_at_ns: int, video_at_ns: int, fps: float = avclip.FPS
) -> QualityRecords:
    """A member that played the looped clip's audio from ``audio_at_ns`` and showed its
    frames from ``video_at_ns``, every frame on time (at ``fps``: a slower capture drifts)."""
    audio = np.tile(samples, LOOPS).astype(np.float64)
    span = len(audio) / avclip.RATE * 1e9
    times = np.array([audio_at_ns, audio_at_ns + round(span)])
    rec = Recording(audio, avclip.RATE, np.array([0, len(audio)]), times, np.array([len(audio)]))
    n = np.arange(LOOPS * avclip.video_frames())
    t = video_at_ns + np.round(n * 1e9 / fps).astype(np.int64)
    video = VideoCodes(t, n % avclip.video_frames(), np.full(len(n), 1280),
                       np.full(len(n), 720), n)  # fmt: skip
    return QualityRecords("x", None, rec, video)  # type: ignore[arg-type]


@needs_espeak
def test_skew_added_delays_and_planted_offset_have_their_known_values() -> None:
    """Publisher: audio 120 ms ahead of video (its capture skew). Subscriber: audio 300 ms
    and video 200 ms after the publisher's, so the system added -100 ms. A 50 ms offset
    planted in the clip's second half is seen at both, and does not move the added."""
    samples, clip = _clip(50.0)
    window = (None, None)
    pub = _member(samples, T0, T0 + 120_000_000)
    sub = _member(samples, T0 + 300_000_000, T0 + 320_000_000)
    pub_skew = Q.skew_series(pub, clip, window)
    sub_skew = Q.skew_series(sub, clip, window)
    first = pub_skew["audio_s"] < avclip.LOOP_S / 2
    # audio ahead: the video shows media 120 ms older than the audio plays
    assert np.median(pub_skew["skew_ns"][first]) / 1e6 == pytest.approx(120, abs=0.5)
    assert np.median(pub_skew["skew_ns"][~first]) / 1e6 == pytest.approx(70, abs=0.5)
    assert Q.offset_seen(pub_skew, clip)["p50_ms"] == pytest.approx(50, abs=0.5)
    sync = Q._av_sync(sub_skew, pub_skew, sub.video, pub.video, clip)
    assert sync["audio_delay_ms"]["p50_ms"] == pytest.approx(300, abs=0.5)
    assert sync["video_delay_ms"]["p50_ms"] == pytest.approx(200, abs=0.5)
    assert sync["added_ms"]["p50_ms"] == pytest.approx(-100, abs=0.5)
    assert sync["added_half_step_ms"] == pytest.approx(0, abs=0.5)


@needs_espeak
def test_a_drifting_capture_does_not_move_the_offset_seen() -> None:
    """A publisher whose camera runs at 28.5 frames/s for the clip's 30 (as a loaded
    Chromium's fake camera did): its skew drifts by 50 ms a second, and the 60 ms planted
    in the second half is still seen as 60 at every boundary between the halves, both
    ways (the step is fitted with the drift, not read off two codes 200 ms apart)."""
    samples, clip = _clip(60.0)
    pub = _member(samples, T0, T0 + 120_000_000, fps=28.5)
    skew = Q.skew_series(pub, clip, (None, None))
    drift = np.polyfit(skew["t_ns"] / 1e9, skew["skew_ns"] / 1e6, 1)[0]
    assert drift == pytest.approx(50, abs=5)  # ms per s: the test drifts as it says
    seen = Q.offset_seen(skew, clip)
    assert seen["boundaries"] >= 2 * (LOOPS - 1), seen
    assert seen["min_ms"] == pytest.approx(60, abs=1) and seen["max_ms"] == pytest.approx(60, abs=1)


def test_half_steps_fit_the_step_through_a_drift_and_unwrap() -> None:
    """Known answer: values drifting 40 ms/s with +25 ms in the second half of a 4 s
    loop, wrapped to +-2 s around the wrap point: every boundary's step is 25."""
    clip = {"loop_s": 4.0}
    t = np.arange(0, 12, 0.2) * 1e9
    media = np.mod(t / 1e9, 4.0)
    raw = 1990e6 + 40e6 * t / 1e9 + np.where(media >= 2, 25e6, 0.0)
    wrapped = np.mod(raw + 2e9, 4e9) - 2e9
    steps = Q.half_steps(t, media, wrapped, clip, wrap_ns=4e9)
    assert len(steps) == 5 and np.allclose(steps, 25e6, atol=1e3), steps / 1e6


def test_latest_before_takes_the_same_key_not_later_and_not_too_early() -> None:
    keys = np.array([1, 2, 1, 2, 1])
    times = np.array([0, 10, 20, 30, 4_000_000_000], dtype=np.float64)
    found = Q.latest_before(keys, times, np.array([1, 2, 1, 3]), np.array([25, 25, 3.5e9, 5]))
    assert found[0] == 20 and found[1] == 10
    assert np.isnan(found[2])  # the last showing of 1 before it is 3.5 s earlier
    assert np.isnan(found[3])


def test_settling_times_a_step_from_when_it_happened() -> None:
    t = np.arange(0, 10_000_000_000, 200_000_000)
    level = np.where(t < 4_300_000_000, 2000.0, 300.0)  # settles 300 ms after a 4 s step
    level[(t > 4_300_000_000) & (t < 4_700_000_000)] = 900.0  # a bounce that is not settled
    found = Q.settling(t, level, 4_000_000_000, 10_000_000_000)
    assert found["changed"] and found["before"] == 2000 and found["after"] == 300
    assert found["settled_ms"] == 800.0  # the first sample after the bounce, at 4.8 s
    layers = np.where(t < 5_000_000_000, 2.0, 0.0)
    assert Q.settling(t, layers, 4_000_000_000, 10_000_000_000, exact=True)["settled_ms"] == 1000
    flat = Q.settling(t, np.full(len(t), 5.0), 4_000_000_000, 10_000_000_000)
    assert flat["changed"] is False and flat["settled_ms"] is None


def _point(sfu: str, loss: float, rep: int, mos: float, down: float) -> dict:
    return {
        "name": f"sfu={sfu},loss={loss},repeat={rep}",
        "dir": f"points/sfu={sfu},loss={loss},r{rep}",
        "status": "ok", "values": {"sfu": sfu, "loss": loss, "repeat": rep},
        "sfus": {"sfu": {"server": sfu}},
        "quality": {"subscribers": {"bob": {
            "visqol": mos, "pesq": None, "height_p50": 720, "fps_p50": 29, "kbps_p50": 2100,
            "freezes": 0, "layer_switches": 2, "av_added_ms": -40.0,
            "adaptation": [{"layer_ms": down, "bitrate_kbps_ms": 300.0},
                           {"layer_ms": 5000.0, "bitrate_kbps_ms": None}]}}},
    }  # fmt: skip


def _sweep() -> dict:
    points = [
        _point("janus", 0, 1, 4.30, 900.0), _point("janus", 0, 2, 4.20, 1100.0),
        _point("livekit", 0, 1, 4.25, 1300.0), _point("livekit", 0, 2, 4.31, 1250.0),
        _point("janus", 10, 1, 2.40, 800.0), _point("livekit", 10, 1, 3.60, 1200.0),
        {"name": "sfu=janus,loss=2", "dir": "points/x", "status": "failed", "values": {}},
    ]  # fmt: skip
    return {"name": "q", "sweep": {"mode": "zip", "variables": {}}, "points": points}


def test_side_by_side_says_which_sfu_is_better_and_against_what_spread() -> None:
    rows = {(r["condition"], r["metric"]): r for r in R.comparison(_sweep())}
    clean, lossy = rows[("loss=0", "visqol")], rows[("loss=10", "visqol")]
    assert clean["spread"] == pytest.approx(0.10)  # janus's repeats: 4.30 and 4.20
    assert clean["beyond"] is False  # 4.25 vs 4.28: within it
    assert lossy["better"] == "livekit" and lossy["beyond"] is True  # 3.60 vs 2.40
    down = rows[("loss=10", "down")]
    assert down["better"] == "janus"  # lower is better: 800 against 1200 ms
    assert down["spread"] == pytest.approx(200.0) and down["beyond"] is True


def test_matrix_tables_fit_80_columns_and_keep_each_cell_whole() -> None:
    console = Console(width=80, record=True, file=io.StringIO(), color_system=None)
    for table in [*R.matrix_tables(_sweep()), R.comparison_table(_sweep())]:
        console.print(table)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert "quality matrix · janus" in text and "quality matrix · livekit" in text
    assert "beyond spread" in text and "within spread" in text
    assert "…" not in text


def test_html_matrix_colours_by_mos_links_each_cell_and_escapes() -> None:
    sweep = _sweep()
    sweep["points"][0]["values"]["loss"] = "<b>0</b>"
    page = R.matrix_html(sweep, escape)
    assert 'href="points/sfu=janus,loss=0,r1/report.html"' in page
    assert "<b>0</b>" not in page and "&lt;b&gt;0&lt;/b&gt;" in page
    assert R.mos_colour(4.5) != R.mos_colour(1.0)
    assert f"background:{R.mos_colour(2.40)}" in page


def test_a_runs_quality_table_fits_80_columns_and_its_html_escapes() -> None:
    quality = {
        "room": "meeting", "publisher": "alice", "capture_skew_ms": {"p50_ms": 36.8},
        "subscribers": {"<bob>": {
            "mos": {"visqol": 4.31, "pesq": None, "pesq_note": R_NOTE},
            "video": {"height_p50": 720, "fps_p50": 28, "freezes": 0},
            "layers": {"switches": 3},
            "av_sync": {"skew_ms": {"p50_ms": 26.6}, "added_ms": {"p50_ms": -21.2},
                        "video_delay_ms": {"p50_ms": 83.4}, "audio_delay_ms": {"p50_ms": 100.4}},
            "adaptation": [{"at_s": 14.0, "set": {"rate_kbit": 300},
                            "bitrate_kbps": {"before": 2300, "after": 210, "changed": True,
                                             "settled_ms": 270.0}}],
            "problems": [],
        }},
    }  # fmt: skip
    console = Console(width=80, record=True, file=io.StringIO(), color_system=None)
    for part in R.run_quality_views(quality):
        console.print(part)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert "<bob>" in text and "4.31" in text and "-21.2" in text
    assert "bitrate 2300 -> 210 in 270 ms" in text
    page = R.run_quality_html(quality, escape)
    assert "&lt;bob&gt;" in page and "<bob>" not in page


R_NOTE = "PESQ not installed (optional): pip install -e '.[pesq]'"


def test_the_medians_interval_is_the_order_statistics_its_coverage_names() -> None:
    """12 boundaries: x(2) and x(11), 99.37 %; 4: their range, 87.5 %; and over 5000
    draws of 12 normal samples the interval holds the true median as often as it says."""
    from latlab.analysis.stats import median_interval

    assert median_interval(np.arange(12.0)) == {"lo": 1.0, "hi": 10.0, "coverage": 0.9937}
    assert median_interval(np.array([3.0, 1.0, 2.0, 9.0])) == {
        "lo": 1.0, "hi": 9.0, "coverage": 0.875,
    }  # fmt: skip
    assert median_interval(np.array([])) is None
    draws = np.random.default_rng(7).normal(size=(5000, 12))
    held = [(f := median_interval(d))["lo"] <= 0 <= f["hi"] for d in draws]
    assert abs(np.mean(held) - 0.9937) < 0.005
