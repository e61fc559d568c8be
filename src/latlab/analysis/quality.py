"""The quality matrix's figures of one run (a room with ``quality = true``, docs/sfu.md):
per subscriber, what a listener heard and a viewer saw.

* **MOS**: the subscriber's recording of what it played out, over the measured window
  (from 1 s after it began), against the clip's audio (``latlab.signal.mos``: ViSQOL,
  and PESQ where installed).
* **Video**: from the subscriber's ``getStats()`` (inbound video, over the measured
  window): resolution (p50 and its changes over time), frames per second, freezes
  (``freezeCount``, ``totalFreezesDuration``), received bitrate.
* **Layers**: the simulcast layer each video packet forwarded to the subscriber came from
  (the SFU host's capture, ``forwarding.parquet``), per 100 ms, and how often it changed.
* **Adaptation**: per step of an emulated link's schedule (its time from the link's log),
  how long the received bitrate, the layer (capture) and the decoded resolution (stats)
  took to settle at the level they held in the last second before the next step.
* **A/V sync**: at every audio time code a member played out, the audio's media time less
  the video's (the frame code on screen then, interpolated between frames), wrapped to
  half the clip's loop; at the subscriber and at the publisher (local preview and local
  track: its own capture skew). What the system added is the subscriber's skew less the
  publisher's when the publisher showed the same frame; the delay between those two
  showings is the video's glass-to-glass delay (preview to remote display).

Columnar throughout; one call of the MOS per 8 s chunk.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from latlab import rundir
from latlab.analysis.browser_adaptation import schedule_steps
from latlab.analysis.stats import describe, median_interval
from latlab.ingest.browser_records import BrowserLog
from latlab.ingest.link_log import LinkLog
from latlab.ingest.quality_records import QualityRecords, VideoCodes, read_quality_records
from latlab.signal.errors import SignalError
from latlab.signal.mos import mos
from latlab.signal.timecode import decode
from latlab.signal.wavio import read_wav

SETTLE_S = 1.0  # the recording's first second after the window opened is left out
MIN_STEADY_S = 4.0  # a steady part shorter than this has no MOS (a chunk needs 3 s)
LAYER_BIN_NS = 100_000_000
LEVEL_WINDOW_NS = 1_000_000_000  # the level a series settled at: its last second
BASELINE_WINDOW_NS = 2_000_000_000
SETTLED_BAND = 0.2  # within 20 % of the move of the level it settled at
MIN_MOVE = 0.1  # a level that moved less than 10 % did not change
MOVING_GAP_NS = 100_000_000  # a skew needs new frames shown within 100 ms around the code
MATCH_WINDOW_NS = 3_000_000_000  # the publisher showed a frame at most this long before
BOUNDARY_SIDE_NS = 1_000_000_000  # a half boundary's step: the codes within 1 s either side
BOUNDARY_GAP_NS = 500_000_000  # codes further apart than this are not in a row
MEDIAN_LEVEL = 0.99  # the confidence asked of the medians over boundaries


class QualityError(SignalError):
    """A quality room's inputs that cannot be used at all; ``str()`` names the file."""


def quality_summary(
    run_dir: Path,
    meta: dict[str, Any],
    browsers: list[BrowserLog],
    link_logs: list[LinkLog],
    forwarded: pa.Table | None,
) -> dict[str, Any] | None:
    """summary.json's ``quality`` (None without a quality room)."""
    clip_path = run_dir / rundir.QUALITY / rundir.QUALITY_CLIP
    if not clip_path.is_file():
        return None
    clip = rundir.read_json(clip_path)
    window = (meta.get("measure_start_monotonic_ns"), meta.get("measure_end_monotonic_ns"))
    reference = read_wav(run_dir / rundir.QUALITY / rundir.QUALITY_REFERENCE)
    records = {
        name: read_quality_records(rundir.browser_records(run_dir, name))
        for name in [clip["publisher"], *clip["subscribers"]]
    }
    stats = {log.process: log for log in browsers}
    steps = schedule_steps(link_logs)
    publisher = records[clip["publisher"]]
    pub_skew = skew_series(publisher, clip, window)
    out: dict[str, Any] = {
        "room": clip["room"],
        "publisher": clip["publisher"],
        "offset_ms": clip.get("offset_ms", 0.0),
        "capture_skew_ms": _describe_ms(pub_skew["skew_ns"]),
        "offset_seen_ms": offset_seen(pub_skew, clip),
        "steps": [_step(s, window) for s in steps],
        "subscribers": {},
        "problems": list(publisher.problems),
    }
    addrs = _host_addrs(meta)
    pub_host = _host_of(meta, clip["publisher"])
    for name in clip["subscribers"]:
        mine = records[name]
        entry: dict[str, Any] = {"problems": list(mine.problems)}
        # the steps of the links this subscriber's media crosses: its own, the publisher's
        links = _links_of(meta, {_host_of(meta, name), pub_host})
        mine_steps = [step for step in steps if step["link"] in links]
        steady = steady_window(window, mine_steps)
        entry["steady_s"] = (
            None if None in steady else round((steady[1] - steady[0]) / 1e9, 3)  # type: ignore[operator]
        )
        if entry["steady_s"] is not None and entry["steady_s"] < MIN_STEADY_S:
            entry["problems"].append(
                f"{name}: {entry['steady_s']:g} s before its link's first step (the room met "
                "late): no MOS or video figures of the steady part"
            )
            entry["mos"] = {"visqol": None, "pesq": None, "chunks": []}
            entry["video"] = {"samples": 0}
        else:
            entry["mos"] = _mos(reference, mine, steady, entry["problems"])
            entry["video"] = _video_figures(_video_series(stats.get(name), steady))
        series = _video_series(stats.get(name), window)
        layers = _layers(forwarded, addrs.get(_host_of(meta, name), set()), window)
        entry["layers"] = _layer_figures(layers)
        entry["adaptation"] = _adaptation(mine_steps, series, layers, window)
        sub_skew = skew_series(mine, clip, window)
        entry["av_sync"] = _av_sync(sub_skew, pub_skew, mine.video, publisher.video, clip)
        entry["av_sync"]["offset_seen_ms"] = offset_seen(sub_skew, clip)
        out["subscribers"][name] = entry
    return out


def steady_window(window: tuple, steps: list[dict]) -> tuple:
    """The measured window up to the first link schedule step: the MOS and the video
    figures are of the steady part (the steps are the adaptation's). A step before the
    window opened (the room took longer to meet) leaves no steady part: (start, start)."""
    start, end = window
    if not steps:
        return start, end
    first = min(s["t_ns"] for s in steps)
    if start is not None and first <= start:
        return start, start
    return start, first if end is None else min(end, first)


# --- MOS ---------------------------------------------------------------------------------


def _mos(reference: Any, mine: QualityRecords, window: tuple, problems: list[str]) -> dict:
    rec = mine.recording
    if rec is None:
        return {"visqol": None, "pesq": None, "chunks": []}
    start, end = window
    lo = 0
    hi = len(rec.samples)
    if start is not None:
        lo = max(lo, int(rec.positions_of(np.array([start]))[0] + SETTLE_S * rec.rate))
    if end is not None:
        hi = min(hi, int(rec.positions_of(np.array([end]))[0]))
    try:
        found = mos(reference.samples, reference.rate, rec.samples[lo:hi], rec.rate)
    except SignalError as exc:
        problems.append(f"{mine.path}: MOS: {exc}")
        return {"visqol": None, "pesq": None, "chunks": []}
    return {**found.as_dict(), "seconds": round((hi - lo) / rec.rate, 3)}


# --- video (the subscriber's stats) ---------------------------------------------------------

VIDEO_COUNTERS = ("frameWidth", "frameHeight", "framesPerSecond", "freezeCount",
                  "totalFreezesDuration", "bytesReceived", "framesDecoded")  # fmt: skip


def _video_series(log: BrowserLog | None, window: tuple) -> dict[str, np.ndarray]:
    """Per stats sample of the inbound video (in the window): time, size, fps, freezes,
    bytes; and per interval the received bitrate (kbit/s)."""
    rows = []
    if log is not None:
        for t_ns, reports in sorted(log.stats, key=lambda s: s[0]):
            for report in reports:
                if report.get("type") != "inbound-rtp" or report.get("kind") != "video":
                    continue
                rows.append([t_ns, *(_num(report.get(c)) for c in VIDEO_COUNTERS)])
    table = np.asarray(rows, dtype=np.float64).reshape(-1, len(VIDEO_COUNTERS) + 1)
    start, end = window
    keep = np.ones(len(table), bool)
    if start is not None:
        keep &= table[:, 0] >= start
    if end is not None:
        keep &= table[:, 0] <= end
    table = table[keep]
    out = {"t_ns": table[:, 0]}
    out.update({name: table[:, i + 1] for i, name in enumerate(VIDEO_COUNTERS)})
    dt = np.diff(out["t_ns"]) / 1e9
    kbps = np.diff(out["bytesReceived"]) * 8 / 1000 / np.where(dt > 0, dt, np.nan)
    out["kbps"] = np.concatenate([[np.nan], kbps]) if len(table) else np.empty(0)
    return out


def _num(value: Any) -> float:
    return (
        float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    )


def _video_figures(series: dict[str, np.ndarray]) -> dict[str, Any]:
    if not len(series["t_ns"]):
        return {"samples": 0}
    height = series["frameHeight"]

    def p50(values: np.ndarray) -> float | None:
        finite = values[np.isfinite(values)]
        return round(float(np.median(finite)), 3) if len(finite) else None

    def delta(values: np.ndarray) -> float | None:
        finite = values[np.isfinite(values)]
        return round(float(finite[-1] - finite[0]), 3) if len(finite) else None

    known = np.isfinite(height)
    changes = np.flatnonzero(np.diff(height[known]) != 0) + 1 if known.any() else []
    t0 = series["t_ns"][0]
    resolutions = [
        {"t_s": round((series["t_ns"][known][i] - t0) / 1e9, 3),
         "width": int(series["frameWidth"][known][i]), "height": int(height[known][i])}
        for i in [0, *changes]
    ] if known.any() else []  # fmt: skip
    return {
        "samples": len(series["t_ns"]),
        "width_p50": p50(series["frameWidth"]),
        "height_p50": p50(height),
        "fps_p50": p50(series["framesPerSecond"]),
        "kbps_p50": p50(series["kbps"]),
        "freezes": delta(series["freezeCount"]),
        "freezes_s": delta(series["totalFreezesDuration"]),
        "frames_decoded": delta(series["framesDecoded"]),
        "resolution_changes": len(resolutions) - 1 if resolutions else 0,
        "resolutions": resolutions,
    }


# --- layers (the SFU host's capture) ---------------------------------------------------------


def _host_addrs(meta: dict[str, Any]) -> dict[str, set[str]]:
    """Each host's lab addresses (run.json ``links``: each link's ends and addresses)."""
    out: dict[str, set[str]] = {}
    for link in meta.get("links", []):
        for host, addr in zip(link.get("between") or [], link.get("addrs") or [], strict=False):
            out.setdefault(str(host), set()).add(str(addr).split("/")[0])
    return out


def _links_of(meta: dict[str, Any], hosts: set[str | None]) -> set[str]:
    """The names of the links (as their logs name them: ``A-B``) with an end in ``hosts``."""
    return {"-".join(link["between"]) for link in meta.get("links", [])
            if len(link.get("between") or []) == 2 and hosts & set(link["between"])}  # fmt: skip


def _host_of(meta: dict[str, Any], process: str) -> str | None:
    return next((p.get("host") for p in meta.get("processes", []) if p.get("name") == process),
                None)  # fmt: skip


def _layers(forwarded: pa.Table | None, addrs: set[str], window: tuple) -> dict[str, np.ndarray]:
    """Per 100 ms bin of the window: the layer most video packets sent to ``addrs`` came
    from (-1: none sent)."""
    empty = {"t_ns": np.empty(0, np.int64), "layer": np.empty(0, np.int64)}
    if forwarded is None or not addrs or window[0] is None or window[1] is None:
        return empty
    to = np.array([a.rsplit(":", 1)[0] for a in forwarded.column("to").to_pylist()], dtype=object)
    layer = forwarded.column("layer").to_numpy().astype(np.int64)
    status = np.asarray(forwarded.column("status").to_pylist(), dtype=object)
    t = forwarded.column("egress_ns").to_numpy()
    mine = np.isin(to, list(addrs)) & (layer >= 0) & (status == "matched")
    start, end = window
    mine &= (t >= start) & (t < end)
    bins = int((end - start) // LAYER_BIN_NS)
    if not mine.any() or bins <= 0:
        return empty
    index = ((t[mine] - start) // LAYER_BIN_NS).astype(np.int64)
    inside = index < bins
    counts = np.zeros((bins, int(layer.max()) + 1), np.int64)
    np.add.at(counts, (index[inside], layer[mine][inside]), 1)
    dominant = np.where(counts.sum(axis=1) > 0, counts.argmax(axis=1), -1)
    return {"t_ns": start + (np.arange(bins) + 1) * LAYER_BIN_NS, "layer": dominant}


def _layer_figures(layers: dict[str, np.ndarray]) -> dict[str, Any]:
    series = layers["layer"]
    known = series >= 0
    if not known.any():
        return {"bins": len(series), "switches": None, "timeline": []}
    values = series[known]
    times = layers["t_ns"][known]
    changes = np.flatnonzero(np.diff(values) != 0) + 1
    t0 = layers["t_ns"][0] - LAYER_BIN_NS
    share = np.bincount(values, minlength=3) / len(values)
    return {
        "bins": len(series),
        "switches": len(changes),
        "switches_down": int((np.diff(values) < 0).sum()),
        "switches_up": int((np.diff(values) > 0).sum()),
        "share": [round(float(x), 4) for x in share],
        "timeline": [
            {"t_s": round((times[i] - t0) / 1e9, 3), "layer": int(values[i])} for i in [0, *changes]
        ],
    }


# --- adaptation ----------------------------------------------------------------------------


def _adaptation(steps: list[dict], series: dict, layers: dict, window: tuple) -> list[dict]:
    """Per link schedule step inside the window: how long bitrate, layer and resolution
    took to settle (ms), and their levels before and after."""
    out = []
    end_of_run = window[1]
    for i, step in enumerate(steps):
        start = step["t_ns"]
        end = steps[i + 1]["t_ns"] if i + 1 < len(steps) else end_of_run
        if end is None or (window[0] is not None and start < window[0]):
            continue
        entry: dict[str, Any] = {"at_s": step["at_s"], "window_s": _window_s(start, window),
                                 "link": step["link"], "set": step["set"]}  # fmt: skip
        entry["bitrate_kbps"] = settling(series["t_ns"], series["kbps"], start, end)
        entry["layer"] = settling(layers["t_ns"], np.where(layers["layer"] >= 0,
                                  layers["layer"], np.nan), start, end, exact=True)  # fmt: skip
        entry["height"] = settling(series["t_ns"], series["frameHeight"], start, end, exact=True)
        out.append(entry)
    return out


def _step(step: dict[str, Any], window: tuple) -> dict[str, Any]:
    """A link schedule step as summary.json's ``quality.steps`` has it."""
    return {**{k: step[k] for k in ("at_s", "link", "set")},
            "window_s": _window_s(step["t_ns"], window)}  # fmt: skip


def _window_s(t_ns: int, window: tuple) -> float | None:
    """An instant in seconds after the measured window opened, the origin of the layer
    timeline (a step's ``at_s`` counts from its link's start, which is earlier)."""
    return None if window[0] is None else round((t_ns - window[0]) / 1e9, 3)


def settling(
    t: np.ndarray, values: np.ndarray, start: int, end: int, *, exact: bool = False
) -> dict[str, Any] | None:
    """The level before ``start`` (median of the 2 s before), the level held in the last
    second before ``end``, whether it changed, and ``settled_ms``: from ``start`` to the
    first sample from which on every sample up to that last second is at the new level
    (``exact``: equal to it, a layer or a height; else within 20 % of the move)."""
    t = np.asarray(t, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    before = values[(t >= start - BASELINE_WINDOW_NS) & (t < start)]
    level = values[(t >= end - LEVEL_WINDOW_NS) & (t < end)]
    before, level = before[np.isfinite(before)], level[np.isfinite(level)]
    if not len(before) or not len(level):
        return None
    base, new = float(np.median(before)), float(np.median(level))
    move = abs(new - base)
    changed = (move > 0) if exact else move >= MIN_MOVE * max(abs(base), 1.0)
    after = (t >= start) & (t < end)
    tt, vv = t[after], values[after]
    out = {"before": round(base, 3), "after": round(new, 3), "changed": bool(changed),
           "settled_ms": None}  # fmt: skip
    if not changed or not len(tt):
        return out
    ok = (vv == new) if exact else (np.abs(vv - new) <= SETTLED_BAND * move)
    ok |= ~np.isfinite(vv)  # a missing sample does not unsettle
    bad = np.flatnonzero(~ok)
    first = 0 if not len(bad) else bad[-1] + 1
    if first < len(tt):
        out["settled_ms"] = round((tt[first] - start) / 1e6, 1)
    return out


# --- A/V sync ------------------------------------------------------------------------------


def skew_series(records: QualityRecords, clip: dict[str, Any], window: tuple) -> dict:
    """At every audio code a member played out (in the window, where its video is known):
    when (ns), the code's index and media time, the video's media time then, the frame
    code on screen, and the skew (ns): audio less video, wrapped to half the loop."""
    names = ("t_ns", "index", "audio_s", "video_s", "frame", "skew_ns")
    empty = {k: np.empty(0) for k in names}
    rec, video = records.recording, records.video
    if rec is None or not len(video.t_ns):
        return empty
    found = decode(rec.samples.astype(np.float32), rec.rate)
    media = {int(c["index"]): float(c["media_s"]) for c in clip["audio"]["codes"]}
    known = np.array([int(i) in media for i in found.index], dtype=bool)
    index, pos_s = found.index[known], found.time_s[known]
    t_audio = rec.times_of(pos_s * rec.rate)
    audio_s = np.array([media[int(i)] for i in index], dtype=np.float64)
    vt, vpos, vcode = _video_positions(video, int(clip["video"]["frames"]))
    keep = _within(t_audio, window)
    if len(vt) >= 2:
        keep &= (t_audio >= vt[0]) & (t_audio <= vt[-1])
        # only where the video moves: new frames shown on both sides of the code
        after = np.clip(np.searchsorted(vt, t_audio, side="left"), 1, len(vt) - 1)
        keep &= (vt[after] - vt[after - 1]) <= MOVING_GAP_NS
    else:
        keep[:] = False
    t_audio, index, audio_s = t_audio[keep], index[keep], audio_s[keep]
    if not len(t_audio):
        return empty
    loop, fps = float(clip["loop_s"]), float(clip["fps"])
    video_s = np.mod(np.interp(t_audio, vt, vpos), int(clip["video"]["frames"])) / fps
    shown = vcode[np.clip(np.searchsorted(vt, t_audio, side="right") - 1, 0, len(vt) - 1)]
    skew_s = np.mod(audio_s - video_s + loop / 2, loop) - loop / 2
    return dict(zip(names, (t_audio, index, audio_s, video_s, shown, skew_s * 1e9), strict=True))


def offset_seen(skew: dict, clip: dict[str, Any]) -> dict[str, Any] | None:
    """The A/V offset a member saw planted in the clip's second half: at each boundary
    between the loop's halves (both ways), the skew's step from the first half's side to
    the second's (``half_steps``: a line through the codes within a second either side,
    so the capture's drift cancels), negated (codes written late read as audio behind),
    median over the boundaries with its confidence interval (``ci_ms``); None without
    such a boundary."""
    loop_ns = float(clip["loop_s"]) * 1e9
    jumps = -half_steps(skew["t_ns"], skew["audio_s"], skew["skew_ns"], clip, loop_ns) / 1e6
    if not len(jumps):
        return None
    return {
        "boundaries": len(jumps),
        "p50_ms": round(float(np.median(jumps)), 3),
        "ci_ms": _interval_ms(jumps),
        "min_ms": round(float(jumps.min()), 3),
        "max_ms": round(float(jumps.max()), 3),
    }


def _interval_ms(values_ms: np.ndarray) -> dict[str, float] | None:
    """The median's distribution-free interval (``stats.median_interval``, 99 % where
    the boundaries allow, else the range and its coverage), rounded: one boundary's
    step moves with what the video delay did at that moment (hundreds of ms through a
    lossy link), so the median of a dozen boundaries is known to tens of ms."""
    found = median_interval(values_ms, MEDIAN_LEVEL)
    if found is None:
        return None
    return {"lo": round(found["lo"], 3), "hi": round(found["hi"], 3),
            "coverage": found["coverage"]}  # fmt: skip


def half_steps(
    t_ns: np.ndarray,
    audio_s: np.ndarray,
    values: np.ndarray,
    clip: dict[str, Any],
    wrap_ns: float | None = None,
) -> np.ndarray:
    """Per boundary between the loop's halves, either way (codes in a row, less than
    BOUNDARY_GAP_NS apart): how much higher ``values`` are on the second half's side,
    fitted as one line with a step over the codes within BOUNDARY_SIDE_NS either side (at
    least two on each), so that what drifts across the boundary cancels. ``wrap_ns``:
    values wrapped to half of it are unwrapped around the boundary first."""
    t = np.asarray(t_ns, dtype=np.float64)
    second = np.asarray(audio_s, dtype=np.float64) >= float(clip["loop_s"]) / 2
    if len(t) < 4:
        return np.empty(0)
    turns, in_row = second[1:] != second[:-1], np.diff(t) < BOUNDARY_GAP_NS
    segment = np.concatenate(([0], np.cumsum(turns | ~in_row)))
    joins = 1 + np.flatnonzero(turns & in_row)
    values = np.asarray(values, dtype=np.float64)
    steps = [_step_at(t, second, values, segment, int(i), wrap_ns) for i in joins]
    return np.array([s for s in steps if s is not None], dtype=np.float64)


def _step_at(
    t: np.ndarray,
    second: np.ndarray,
    values: np.ndarray,
    segment: np.ndarray,
    join: int,
    wrap_ns: float | None,
) -> float | None:
    """``half_steps`` at one boundary (``join`` is the first code after it)."""
    middle = (t[join - 1] + t[join]) / 2
    near = (np.abs(t - middle) <= BOUNDARY_SIDE_NS) & (
        (segment == segment[join - 1]) | (segment == segment[join])
    )
    side = second[near].astype(np.float64)
    if side.sum() < 2 or (1 - side).sum() < 2:
        return None
    y = values[near]
    if wrap_ns is not None:
        y = y[0] + np.mod(y - y[0] + wrap_ns / 2, wrap_ns) - wrap_ns / 2
    x = (t[near] - middle) / 1e9
    design = np.column_stack((np.ones_like(x), x, side))
    coef = np.linalg.lstsq(design, y, rcond=None)[0]
    return float(coef[2])


def _within(t: np.ndarray, window: tuple) -> np.ndarray:
    keep = np.ones(len(t), dtype=bool)
    if window[0] is not None:
        keep &= t >= window[0]
    if window[1] is not None:
        keep &= t <= window[1]
    return keep


def _video_positions(video: VideoCodes, frames: int) -> tuple[np.ndarray, ...]:
    """The frames shown with a readable code, once each (a repeat keeps its first
    showing): times, unwrapped frame positions (the loop's count added), codes."""
    ok = video.code >= 0
    t, code = video.t_ns[ok].astype(np.float64), video.code[ok] % frames
    if not len(t):
        return t, t, code
    new = np.concatenate([[True], np.diff(code) != 0])
    t, code = t[new], code[new]
    step = np.mod(np.diff(code) + frames // 2, frames) - frames // 2  # -frames/2..frames/2
    unwrapped = code[0] + np.concatenate([[0], np.cumsum(step)])
    return t, unwrapped.astype(np.float64), code


def latest_before(
    keys: np.ndarray, times: np.ndarray, want_keys: np.ndarray, want_times: np.ndarray
) -> np.ndarray:
    """Per (wanted key, wanted time): the latest of ``times`` with the same key at or
    before it, at most MATCH_WINDOW_NS before (NaN where none): a code's earlier showing."""
    out = np.full(len(want_times), np.nan)
    if not len(times) or not len(want_times):
        return out
    times = np.asarray(times, np.float64)
    want_times = np.asarray(want_times, np.float64)
    base = min(times.min(), want_times.min())
    span = max(times.max(), want_times.max()) - base + 1.0
    combined = np.asarray(keys, np.float64) * span + (times - base)
    order = np.argsort(combined, kind="stable")
    combined, t, k = combined[order], times[order], np.asarray(keys)[order]
    wanted = np.asarray(want_keys, np.float64) * span + (want_times - base)
    pos = np.searchsorted(combined, wanted, side="right") - 1
    ok = pos >= 0
    pos = np.clip(pos, 0, len(t) - 1)
    gap = want_times - t[pos]
    ok &= (k[pos] == want_keys) & (gap >= 0) & (gap <= MATCH_WINDOW_NS)
    out[ok] = t[pos][ok]
    return out


def _rolling_median(values: np.ndarray, width: int) -> np.ndarray:
    """Centred running median over ``width`` samples (NaNs ignored)."""
    if len(values) < width:
        return np.full(len(values), np.nanmedian(values) if len(values) else np.nan)
    pad = width // 2
    padded = np.pad(values, (pad, width - 1 - pad), mode="edge")
    windows = np.lib.stride_tricks.sliding_window_view(padded, width)
    return np.nanmedian(windows, axis=1)


def _av_sync(
    sub: dict, pub: dict, sub_video: VideoCodes, pub_video: VideoCodes, clip: dict
) -> dict[str, Any]:
    """The subscriber's A/V skew, and what the system added to the publisher's: the
    video's delay (preview to remote display of the same frame, a running median over
    half a second of frames) less the audio's (the publisher's tap to the subscriber's,
    the same code) at each code the subscriber played."""
    out: dict[str, Any] = {"codes": len(sub["t_ns"]), "skew_ms": _describe_ms(sub["skew_ns"])}
    none = {"added_ms": None, "audio_delay_ms": None, "video_delay_ms": None, "per_second": []}
    if not len(sub["t_ns"]) or not len(pub["t_ns"]):
        return {**out, **none}
    frames = int(clip["video"]["frames"])
    audio_from = latest_before(pub["index"], pub["t_ns"], sub["index"], sub["t_ns"])
    audio_delay = sub["t_ns"] - audio_from
    st, _, scode = _video_positions(sub_video, frames)
    pt, _, pcode = _video_positions(pub_video, frames)
    video_delay = st - latest_before(pcode, pt, scode, st)
    known = np.isfinite(video_delay)
    if known.sum() < 2:
        return {**out, **none}
    smooth = _rolling_median(video_delay[known], round(float(clip["fps"]) / 2) | 1)
    at_codes = np.interp(sub["t_ns"], st[known], smooth)
    added = at_codes - audio_delay
    ok = np.isfinite(added)
    second = ((sub["t_ns"] - sub["t_ns"][0]) // 1e9).astype(np.int64)
    per_second = [
        {"t_s": int(s), "added_ms": round(float(np.median(added[ok & (second == s)])) / 1e6, 3)}
        for s in np.unique(second[ok])
    ]
    steps = half_steps(sub["t_ns"][ok], sub["audio_s"][ok], added[ok], clip)
    return {
        **out,
        "matched": int(ok.sum()),
        "added_ms": _describe_ms(added[ok]),
        # at the boundaries between the loop's halves, the second half's side less the
        # first's: what drifts (a link step, NetEq's buffer) cancels, a planted offset
        # counted as added would not
        "added_half_step_ms": (round(float(np.median(steps)) / 1e6, 3) if len(steps) else None),
        "added_half_step_ci_ms": _interval_ms(steps / 1e6),
        "added_half_steps": len(steps),
        "audio_delay_ms": _describe_ms(audio_delay[ok]),
        "video_delay_ms": _describe_ms(video_delay[known]),
        "per_second": per_second,
    }


def _describe_ms(values_ns: np.ndarray) -> dict[str, Any] | None:
    values = np.asarray(values_ns, dtype=np.float64)
    values = values[np.isfinite(values)]
    if not len(values):
        return None
    found = describe(values)
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in found.items()}
