"""What a page recorded about how its receivers played out what they got, as columns on
the trace clock (docs/browser-records.md; ``stitch.browser_receiver`` uses them):

* ``sources``: ``getSynchronizationSources()`` polled every 10 ms, each change once: when
  a receiver delivered a frame of an SSRC and the frame's RTP timestamp (for audio, the
  NetEq call that decoded the packet; for video, the decoded frame handed on), in whole
  page milliseconds;
* ``presented``: every received video frame the page composited
  (``requestVideoFrameCallback``).

A line or an entry whose fields are not numbers is left out (the reader reports damaged
lines, ``browser_records.parse_lines``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

MISSING = -1
PRESENTED_FIELDS = ("receive_ms", "capture_ms", "presentation_ms", "expected_display_ms")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and np.isfinite(value)


def _empty(dtype: type = np.int64) -> np.ndarray:
    return np.zeros(0, dtype)


@dataclass
class Presented:
    """Received video frames the page composited, in callback order; ns on the trace
    clock (MISSING where the metadata had none)."""

    rtp_ts: np.ndarray = field(default_factory=_empty)
    receive_ns: np.ndarray = field(default_factory=_empty)
    capture_ns: np.ndarray = field(default_factory=_empty)
    presentation_ns: np.ndarray = field(default_factory=_empty)
    expected_display_ns: np.ndarray = field(default_factory=_empty)
    processing_ns: np.ndarray = field(default_factory=_empty)  # decode: processingDuration


@dataclass
class Playout:
    """A page's records of its receivers' playout (empty arrays where it had none)."""

    source_video: np.ndarray = field(default_factory=lambda: _empty(bool))
    source_ssrc: np.ndarray = field(default_factory=_empty)
    source_ns: np.ndarray = field(default_factory=_empty)  # delivered (page ms, whole)
    source_rtp: np.ndarray = field(default_factory=_empty)
    presented: Presented = field(default_factory=Presented)
    recorded: bool = False  # the page recorded its remote audio (the black box's recorder)

    def sources_of(self, ssrc: int, video: bool) -> tuple[np.ndarray, np.ndarray]:
        """(delivered ns, RTP timestamp) of one SSRC's source entries, in time order."""
        mine = (self.source_ssrc == ssrc) & (self.source_video == video)
        order = np.argsort(self.source_ns[mine], kind="stable")
        return self.source_ns[mine][order], self.source_rtp[mine][order]


def read_playout(by_type: dict[str, list[dict[str, Any]]], offset_ns: int) -> Playout:
    """A page's playout records (``by_type``: its lines by type), placed by the page's
    clock offset."""
    out = Playout(recorded=bool(by_type.get("signal_audio")))
    entries = [
        e
        for line in by_type.get("sources", [])
        if isinstance(line.get("entries"), list)
        for e in line["entries"]
        if isinstance(e, list) and len(e) == 4 and all(_number(v) for v in e[1:])
    ]
    if not entries:  # runs before the fast poll: the stats sampling's sync records
        entries = [
            ["audio", e.get("source"), e.get("timestamp"), e.get("rtpTimestamp")]
            for line in by_type.get("sync", [])
            if isinstance(line.get("sources"), list)
            for e in line["sources"]
            if isinstance(e, dict)
            and all(_number(e.get(k)) for k in ("source", "timestamp", "rtpTimestamp"))
        ]
    if entries:
        out.source_video = np.array([e[0] == "video" for e in entries], bool)
        out.source_ssrc = np.array([int(e[1]) for e in entries], np.int64)
        out.source_ns = np.array([round(e[2] * 1e6) + offset_ns for e in entries], np.int64)
        out.source_rtp = np.array([int(e[3]) for e in entries], np.int64)
    out.presented = _presented(by_type.get("presented", []), offset_ns)
    return out


def _presented(lines: list[dict[str, Any]], offset_ns: int) -> Presented:
    frames = [
        f
        for line in lines
        if isinstance(line.get("frames"), list)
        for f in line["frames"]
        if isinstance(f, dict) and _number(f.get("rtp_ts")) and _number(f.get("presentation_ms"))
    ]
    if not frames:
        return Presented()

    def times(key: str, scale: float = 1e6, offset: int = offset_ns) -> np.ndarray:
        return np.array(
            [round(f[key] * scale) + offset if _number(f.get(key)) else MISSING for f in frames],
            np.int64,
        )

    return Presented(
        rtp_ts=np.array([int(f["rtp_ts"]) for f in frames], np.int64),
        receive_ns=times("receive_ms"),
        capture_ns=times("capture_ms"),
        presentation_ns=times("presentation_ms"),
        expected_display_ns=times("expected_display_ms"),
        processing_ns=times("processing_ms", offset=0),
    )
