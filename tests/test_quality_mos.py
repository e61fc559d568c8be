"""MOS of received audio against its reference (latlab.signal.mos) and the quality clip's
codes (latlab.signal.avclip), on files: known degradations must score as they should."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import numpy as np
import pytest

from latlab.signal import avclip, mos
from latlab.signal.errors import SignalError

needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="no espeak-ng")


@needs_espeak
@pytest.mark.timeout(240)
def test_visqol_falls_monotonically_with_planted_loss() -> None:
    """The same 8 s of the clip's speech, looped and shifted as a recording would be,
    through a planted loss pattern (20 ms frames silenced, the frames lost at a lower rate
    also lost at every higher one): clean scores highest and every added loss lower.
    Measured: 4.51, 4.35, 4.17, 3.74, 3.14 for 0, 2, 5, 10, 20 % (one run; ViSQOL is
    deterministic on the same input), so each step moves the MOS by 0.16 or more; the
    assertion asks for 0.05."""
    reference, _ = avclip.audio_clip()
    recording = np.roll(np.tile(reference, 2), 12345)
    scores = [
        mos.mos(reference, 48000, mos.drop_frames(recording, 48000, loss), 48000).visqol
        for loss in (0.0, 0.03, 0.1, 0.2)
    ]
    assert scores[0] > 4.2, scores
    assert all(a - b >= 0.05 for a, b in itertools.pairwise(scores)), scores


@needs_espeak
def test_alignment_finds_where_the_loop_was_cut() -> None:
    reference, _ = avclip.audio_clip()
    x = mos.resample(reference.astype(np.float64), 48000, mos.MOS_RATE)
    chunk = np.roll(np.tile(x, 3), -5000)[: 4 * mos.MOS_RATE]
    _, lag = mos.align(x, chunk)
    assert lag == 5000


def test_a_silent_recording_scores_the_floor_without_a_model() -> None:
    rng = np.random.default_rng(1)
    reference = rng.normal(0, 0.1, 48000 * 4)
    result = mos.mos(reference, 48000, np.zeros(48000 * 4), 48000, with_pesq=False)
    assert result.visqol == 1.0
    assert result.chunks[0]["silent"] is True


def test_pesq_missing_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mos, "pesq_available", lambda: False)
    with pytest.raises(SignalError) as info:
        mos.mos(np.ones(48000 * 4), 48000, np.zeros(48000 * 4), 48000, with_pesq=True)
    assert "pip install -e '.[pesq]'" in str(info.value)
    assert "\n" not in str(info.value)
    result = mos.mos(np.ones(48000 * 4), 48000, np.zeros(48000 * 4), 48000)
    assert result.pesq is None
    assert "pip install" in result.as_dict()["pesq_note"]


def test_frame_codes_survive_a_round_trip_and_scaling(tmp_path: Path, monkeypatch) -> None:
    """Every frame of a small clip reads back its number, at full size and at a quarter
    (the lowest simulcast layer); a flipped cell fails the check."""
    monkeypatch.setattr(avclip, "LOOP_S", 1.0)
    path = tmp_path / "clip.y4m"
    w, h = 320, 180
    avclip.write_video(path, w, h)
    data = path.read_bytes()
    header = data.index(b"\n") + 1
    size = w * h * 3 // 2 + len(b"FRAME\n")
    for n in range(avclip.video_frames(w, h)):
        start = header + n * size + len(b"FRAME\n")
        luma = np.frombuffer(data[start : start + w * h], np.uint8).reshape(h, w).astype(float)
        assert avclip.read_frame_code(luma) == n
        assert avclip.read_frame_code(luma[::4, ::4]) == n
    bits = avclip.code_bits(np.arange(4096))
    assert (avclip.decode_cells(bits) == np.arange(4096)).all()
    flipped = bits.copy()
    flipped[:, 3] ^= 1
    assert (avclip.decode_cells(flipped) == -1).all()


def test_planted_offset_moves_the_second_half_codes() -> None:
    index, written = avclip.code_times(60.0)
    late = avclip.media_time(index) >= avclip.LOOP_S / 2
    assert np.allclose(written[late] - avclip.media_time(index)[late], 0.06)
    assert np.allclose(written[~late], avclip.media_time(index)[~late])
    assert written.max() + avclip.DESIGN.frame_s < avclip.LOOP_S
    with pytest.raises(SignalError):
        avclip.audio_clip(150.0)
