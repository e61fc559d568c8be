"""What a quality room's pages recorded (``quality.js``, docs/browser-records.md): the audio
each played out (``signal_audio``, ``output_ts``) and the frame code of every video frame
it showed (``video_codes``), with times on CLOCK_MONOTONIC through the page's clock pings.

A page's records that cannot be used are named in ``problems`` (one line each), never
fatal: the analysis reports what it could measure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from latlab.ingest.browser_records import clock_offset, parse_lines
from latlab.ingest.browser_signal import BrowserSignalError, Recording, recording_of
from latlab.ingest.trace_reader import TraceError

VIDEO_COLUMNS = ("t_ms", "code", "width", "height", "presented")


@dataclass
class VideoCodes:
    """Frames a page showed, in display order: when (ns), its code (-1: unreadable), its
    size and the element's count of presented frames."""

    t_ns: np.ndarray
    code: np.ndarray
    width: np.ndarray
    height: np.ndarray
    presented: np.ndarray

    @classmethod
    def empty(cls) -> VideoCodes:
        return cls(*(np.empty(0, np.int64) for _ in VIDEO_COLUMNS))


@dataclass
class QualityRecords:
    """One page's quality records."""

    process: str
    path: Path
    recording: Recording | None
    video: VideoCodes
    problems: list[str] = field(default_factory=list)


def read_quality_records(path: Path) -> QualityRecords:
    """The recording and the frame codes of one page's records file."""
    problems: list[str] = []
    try:
        lines, _ = parse_lines(path)
    except TraceError as exc:
        return QualityRecords(path.stem, path, None, VideoCodes.empty(), [str(exc)])
    try:
        recording = recording_of(lines, path)
    except BrowserSignalError as exc:
        recording = None
        problems.append(str(exc))
    offset = clock_offset([line for line in lines if line.get("type") == "clock"])
    video = _video(lines, offset) if offset is not None else VideoCodes.empty()
    if not len(video.t_ns):
        problems.append(f"{path}: no video frame codes (video_codes records)")
    return QualityRecords(path.stem, path, recording, video, problems)


def _video(lines: list[dict[str, Any]], offset: int) -> VideoCodes:
    rows = [
        row
        for line in lines
        if line.get("type") == "video_codes" and isinstance(line.get("frames"), list)
        for row in line["frames"]
        if isinstance(row, list)
        and len(row) == len(VIDEO_COLUMNS)
        and all(isinstance(v, int | float) and np.isfinite(v) for v in row)
    ]
    if not rows:
        return VideoCodes.empty()
    table = np.asarray(rows, dtype=np.float64)
    table = table[np.argsort(table[:, 0], kind="stable")]
    t_ns = np.round(table[:, 0] * 1e6).astype(np.int64) + offset
    ints = table[:, 1:].astype(np.int64)
    return VideoCodes(t_ns, ints[:, 0], ints[:, 1], ints[:, 2], ints[:, 3])
