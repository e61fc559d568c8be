"""The quality matrix's inputs (a room with ``quality = true``, docs/sfu.md).

Before the browsers start, the room's clip (:mod:`latlab.signal.avclip`: speech with time
codes, and a Y4M whose frames carry their number) is made once per version and planted
offset in latlab's cache (``~/.cache/latlab/quality-clips``; the Y4M is 166 MB, so it stays
there), and the run directory gets ``quality/clip.json`` (what the analysis needs: the
codes' media times, the loop, the video's size and rate, the room and its members) and
``quality/reference.wav`` (the clip's audio, the MOS reference). The publisher's fake
capture devices play the two files (Chromium loops them); every member's page records
what it plays out (``quality=1``: its audio through the AudioWorklet tap, the frame
codes of its video through requestVideoFrameCallback; the publisher its local preview
and a tap on its local track).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from latlab import rundir
from latlab.errors import MeasurementError
from latlab.lab.scenario import Room, Scenario
from latlab.signal import avclip
from latlab.signal.errors import SignalError


class QualityError(MeasurementError, RuntimeError):
    """The clip could not be made; ``str()`` is one line."""


@dataclass(frozen=True)
class QualityClip:
    """A quality room's clip: its audio and video files (in the cache) and the room."""

    room: Room
    wav: Path
    y4m: Path
    codes: dict[str, Any]


def cache_dir() -> Path:
    """Where the clips are kept (created, private to the user)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    directory = base / "latlab" / "quality-clips"
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    return directory


def quality_room(scenario: Scenario) -> Room | None:
    """The scenario's room with ``quality = true`` (at most one)."""
    return next((room for room in scenario.rooms if room.quality), None)


def prepare(scenario: Scenario, run_dir: Path) -> QualityClip | None:
    """Make (or find) the clip and write ``quality/`` into the run; None without a
    quality room."""
    room = quality_room(scenario)
    if room is None:
        return None
    try:
        wav, y4m, codes = avclip.make_clip(cache_dir(), room.av_offset_ms)
    except (SignalError, OSError) as exc:
        raise QualityError(f"room '{room.name}': the quality clip: {exc}") from None
    out = run_dir / rundir.QUALITY
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(wav, out / rundir.QUALITY_REFERENCE)
    document = {
        "room": room.name,
        "publisher": room.publishers[0],
        "subscribers": list(room.subscribers),
        "loop_s": avclip.LOOP_S,
        "fps": avclip.FPS,
        "width": avclip.WIDTH,
        "height": avclip.HEIGHT,
        "offset_ms": room.av_offset_ms,
        "audio": {"file": str(wav), **codes},
        "video": {"file": str(y4m), "frames": avclip.video_frames(), "cells": avclip.CELLS},
    }
    rundir.write_json(out / rundir.QUALITY_CLIP, document)
    return QualityClip(room, wav, y4m, codes)
