"""Browser records (``browsers/NAME.jsonl``, docs/browser-records.md) as columns on the trace clock.

The page's clock (``performance.timeOrigin + now()``, milliseconds) is mapped to
CLOCK_MONOTONIC through the server's clock pings: the server stamps a ping with
its own monotonic time, the page answers with the time it received it, and half
the round trip apart, the two name the same instant. The median over all pings
is the page's offset.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from latlab.ingest.browser_playout import Playout, read_playout
from latlab.ingest.chrome_trace import ChromeSlices, find_chrome_trace, read_chrome_trace
from latlab.ingest.trace_reader import TraceError
from latlab.rundir import BROWSER_RECORDS_SUFFIX, BROWSERS

MISSING = -1
FAST_PINGS = 0.1  # the share of clock pings (least round trips) the page's offset is from
MIN_FAST_PINGS = 5  # with fewer pings than this many fast ones: every ping
FRAME_FIELDS = ("t_ms", "capture_ms", "receive_ms", "abs_capture_ms")


@dataclass
class BrowserFrames:
    """Encoded frames seen by one side's transforms; times are CLOCK_MONOTONIC ns."""

    send: np.ndarray  # bool: sender transform (else receiver transform)
    audio: np.ndarray  # bool
    ssrc: np.ndarray  # int64
    rtp_ts: np.ndarray  # int64
    seq: np.ndarray  # int64, MISSING if unknown
    t_ns: np.ndarray
    bytes: np.ndarray
    capture_ns: np.ndarray  # MISSING if unknown
    receive_ns: np.ndarray
    abs_capture_ns: np.ndarray

    def select(self, mask: np.ndarray) -> BrowserFrames:
        """The frames where ``mask`` is true."""
        return BrowserFrames(**{k: getattr(self, k)[mask] for k in self.__dataclass_fields__})


@dataclass
class BrowserLog:
    """Everything one browser's page recorded."""

    process: str
    path: Path
    offset_ns: int  # page ms * 1e6 + offset_ns = CLOCK_MONOTONIC ns
    frames: BrowserFrames
    stats: list[tuple[int, list[dict[str, Any]]]] = field(default_factory=list)  # (t_ns, reports)
    sync: list[tuple[int, list[dict[str, Any]]]] = field(default_factory=list)
    console: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    functions: ChromeSlices | None = None  # its audio functions' calls (Chromium's trace)
    playout: Playout = field(default_factory=Playout)  # its receivers' playout records

    def stats_counters(self, kind: str, ssrc: int, names: tuple[str, ...]) -> np.ndarray:
        """Rows of (t_ns, *counters) of the ``getStats()`` reports of that type, in time
        order: those of the SSRC, or that name none (``media-playout``), and hold all."""
        rows = []
        for t_ns, reports in sorted(self.stats, key=lambda s: s[0]):
            for report in reports:
                if report.get("type") != kind or report.get("ssrc", ssrc) != ssrc:
                    continue
                values = [report.get(n) for n in names]
                if all(isinstance(v, int | float) for v in values):
                    rows.append((t_ns, *values))
        return np.array(rows, np.float64).reshape(-1, len(names) + 1)


def read_browser_logs(run_dir: Path) -> list[BrowserLog]:
    """The records of every browser of a run (none if it had no browser)."""
    return [
        read_browser_log(p) for p in sorted((run_dir / BROWSERS).glob(f"*{BROWSER_RECORDS_SUFFIX}"))
    ]


def read_browser_log(path: Path) -> BrowserLog:
    """Read one browser's records; a damaged line is reported and skipped, never fatal."""
    lines, problems = parse_lines(path)
    by_type: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        by_type.setdefault(str(line.get("type")), []).append(line)
    offset = clock_offset(by_type.get("clock", []))
    if offset is None:
        raise TraceError(f"{path}: no clock pings, so its times cannot be placed")
    log = BrowserLog(path.stem, path, offset, _frames(by_type.get("frame", []), offset))
    log.stats = [
        (_mono(r.get("t_ms"), offset), r.get("reports", [])) for r in by_type.get("stats", [])
    ]
    log.sync = [
        (_mono(r.get("t_ms"), offset), r.get("sources", [])) for r in by_type.get("sync", [])
    ]
    log.console = [
        f"{r.get('level', 'log')}: {r.get('text', '')}" for r in by_type.get("console", [])
    ]
    log.playout = read_playout(by_type, offset)
    log.problems = problems
    trace = find_chrome_trace(path.parent, path.stem)
    if trace is not None:
        try:
            log.functions = read_chrome_trace(trace)
        except TraceError as error:
            log.problems.append(str(error))
    return log


INT64 = (-(2**63), 2**63 - 1)
MAX_MS = 5e12  # page times: Unix milliseconds (until 2128), so that ns fit int64
# Per line type, the fields whose type the reader relies on: "int" (an integer within
# int64), "ms" (a finite number), "list"; a trailing "?" admits null or absence. A line
# whose field has another type is a damaged line: reported and skipped.
LINE_FIELDS: dict[str, dict[str, str]] = {
    "clock": {"srv_monotonic_ns": "int", "page_ms": "ms", "rtt_ms": "ms?"},
    "frame": {
        **{name: "int?" for name in ("ssrc", "rtp_ts", "seq", "bytes")},
        **{name: "ms?" for name in FRAME_FIELDS},
    },
    "stats": {"t_ms": "ms?", "reports": "list?"},
    "sync": {"t_ms": "ms?", "sources": "list?"},
}


def _field_problem(line: dict[str, Any]) -> str | None:
    """Why a line's field cannot be used, or None."""
    for name, kind in LINE_FIELDS.get(str(line.get("type")), {}).items():
        value = line.get(name)
        if value is None and kind.endswith("?"):
            continue
        kind = kind.rstrip("?")
        number = isinstance(value, int | float) and not isinstance(value, bool)
        ok = {
            "int": number and isinstance(value, int) and INT64[0] <= value <= INT64[1],
            "ms": number and math.isfinite(value) and abs(value) < MAX_MS,
            "list": isinstance(value, list) and all(isinstance(v, dict) for v in value),
        }[kind]
        if not ok:
            return f"{name} is {json.dumps(value)[:40]}"
    return None


def parse_lines(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """A records file's JSON objects, and a problem line per line that is not one (or
    whose fields do not have their types)."""
    lines, problems = [], []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror})") from exc
    for number, raw in enumerate(text.splitlines(), 1):
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            problems.append(f"line {number} is not JSON (skipped)")
            continue
        if not isinstance(line, dict):
            problems.append(f"line {number} is not a JSON object (skipped)")
        elif (problem := _field_problem(line)) is not None:
            problems.append(f"line {number}: {problem} (skipped)")
        else:
            lines.append(line)
    return lines, problems


def clock_offset(pings: list[dict[str, Any]]) -> int | None:
    """The page clock's offset from the server's monotonic clock, in ns: per ping, the
    server's send time plus half the round trip less the page's time at receipt; the
    median over the pings of the least round trips (the fastest ``FAST_PINGS`` share).

    A ping whose page read its clock late (its event loop busy) or whose server read the
    reply late has a longer round trip, and half of it is not where the page's reading
    was: under three browsers on two cores the median over every ping was 0.04 to 0.47
    ms early against the fastest tenth's."""
    rows = [
        (ping["srv_monotonic_ns"], ping["page_ms"], _number_or_nan(ping.get("rtt_ms")))
        for ping in pings
        if isinstance(ping.get("srv_monotonic_ns"), int | float)
        and isinstance(ping.get("page_ms"), int | float)
    ]
    if not rows:
        return None
    sent, page_ms, rtt_ms = (np.array(c, np.float64) for c in zip(*rows, strict=True))
    timed = np.isfinite(rtt_ms)
    offsets = sent + np.where(timed, rtt_ms, 0.0) * 1e6 / 2 - page_ms * 1e6
    if timed.sum() >= MIN_FAST_PINGS / FAST_PINGS:
        offsets = offsets[timed & (rtt_ms <= np.quantile(rtt_ms[timed], FAST_PINGS))]
    return round(float(np.median(offsets)))


def _number_or_nan(value: Any) -> float:
    """A finite number as a float; NaN for anything else (absent, null, a bool)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok and np.isfinite(value) else float("nan")


def _mono(page_ms: Any, offset: int) -> int:
    return round(page_ms * 1e6) + offset if isinstance(page_ms, int | float) else MISSING


def _frames(lines: list[dict[str, Any]], offset: int) -> BrowserFrames:
    def column(key: str) -> np.ndarray:
        values = [line.get(key) for line in lines]
        return np.array([MISSING if v is None else v for v in values], np.int64)

    def times(key: str) -> np.ndarray:
        values = np.array(
            [np.nan if line.get(key) is None else line[key] for line in lines], np.float64
        )
        return np.where(np.isnan(values), MISSING, np.rint(values * 1e6) + offset).astype(np.int64)

    return BrowserFrames(
        send=np.array([line.get("side") == "send" for line in lines], bool),
        audio=np.array([line.get("kind", "audio") == "audio" for line in lines], bool),
        ssrc=column("ssrc"),
        rtp_ts=column("rtp_ts"),
        seq=column("seq"),
        t_ns=times("t_ms"),
        bytes=column("bytes"),
        capture_ns=times("capture_ms"),
        receive_ns=times("receive_ms"),
        abs_capture_ns=times("abs_capture_ms"),
    )
