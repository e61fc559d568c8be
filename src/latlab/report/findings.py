"""Findings: what a run's measurements say, in words with numbers, each pointing at a plot.

Every function here works on whole columns (numpy), never unit by unit:

* :func:`median_and_tail` - which segments carry the median units' latency and which grew
  most for the worst 1 % of units by end-to-end latency;
* :func:`configured_vs_achieved` - a latency the configuration implies against what the
  units took over the same span;
* :func:`cadence_irregularities` - doubled periods between consecutive unit arrivals at a
  probe (the thesis's repeated lines, its figure 3.14), and where along the path they start;
* :func:`periodic_spikes` - latency spikes of the end-to-end series and whether they recur
  at a period (autocorrelation by FFT, the thesis's bursts every ~25 000 packets);
* :func:`bursts` - loss or concealment bursts in a per-unit or per-interval flag series;
* :func:`black_box_unexplained` and :func:`black_box_missing` - what a time-coded signal
  through the devices says about the probed end to end (summary.json ``blackbox``).

A finding's ``text`` is plain text (element names come from traces: the HTML report
escapes it); ``anchor`` is the id of the plot that shows it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

WORST_SHARE = 0.01  # the tail: the worst 1 % of units by end-to-end latency
MEDIAN_BAND = (45.0, 55.0)  # percentiles of end-to-end latency that make the "median units"
DOUBLED_FACTOR = 1.5  # an interval this many times the median period has a period missing
SPIKE_MADS = 6.0  # a spike is this many robust standard deviations above the median ...
SPIKE_FLOOR_MS = 1.0  # ... and at least this much above it (a jitter-free series has MAD 0)
SPIKE_GAP_UNITS = 5  # spike units closer than this belong to one burst
PERIODIC_ACF = 0.3  # autocorrelation of the spike series at its period to call it periodic
PERIODIC_SPREAD = 0.25  # burst intervals within this fraction of the period
MIN_PERIODIC_BURSTS = 3
OSCILLATION_ACF = 0.5  # autocorrelation of the whole series at its period to call it periodic
MIN_OSCILLATION_UNITS = 10  # shorter periods are framing (packets of several units), not news
UNEXPLAINED_FLOOR_MS = 1.0  # black box - probed p50 beyond this: the probes miss or add time


@dataclass(frozen=True)
class Finding:
    """One statement about a run, with the id of the plot that shows it."""

    topic: str  # median, tail, configured, cadence, spikes, loss, concealment, sweep, blackbox
    text: str
    anchor: str
    notable: bool = False  # worth a reader's attention (shown highlighted)


def _short(probe: str) -> str:
    """``receiver/rtpjitterbuffer0:src`` -> ``rtpjitterbuffer0:src``."""
    return probe.rsplit("/", 1)[-1]


def _ms(value: float) -> str:
    if not math.isfinite(value):
        return "-"
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"


def _share_pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.0f} %" if whole else "-"


def median_units(e2e: np.ndarray) -> np.ndarray:
    """Indices of the units whose end-to-end latency lies between p45 and p55 (at least one)."""
    lo, hi = np.percentile(e2e, MEDIAN_BAND)
    picked = np.flatnonzero((e2e >= lo) & (e2e <= hi))
    if len(picked):
        return picked
    return np.array([int(np.argmin(np.abs(e2e - np.median(e2e))))])


def worst_units(e2e: np.ndarray, share: float = WORST_SHARE) -> np.ndarray:
    """Indices of the worst ``share`` of units by end-to-end latency (at least one)."""
    count = max(1, math.ceil(len(e2e) * share))
    return np.argpartition(e2e, len(e2e) - count)[len(e2e) - count :]


@dataclass(frozen=True)
class TailSplit:
    """Mean time per segment of the median units and of the worst units (ns)."""

    median_ns: np.ndarray
    worst_ns: np.ndarray
    median_units: int
    worst_units: int
    worst_from_ns: float  # the lowest end-to-end latency among the worst units

    @property
    def growth_ns(self) -> np.ndarray:
        """How much longer each segment took for the worst units than for the median ones."""
        return self.worst_ns - self.median_ns


def tail_split(segments_ns: np.ndarray) -> TailSplit:
    """Split per segment for a (units, segments) matrix of complete units' segment times."""
    e2e = segments_ns.sum(axis=1)
    mid, worst = median_units(e2e), worst_units(e2e)
    return TailSplit(
        median_ns=segments_ns[mid].mean(axis=0),
        worst_ns=segments_ns[worst].mean(axis=0),
        median_units=len(mid),
        worst_units=len(worst),
        worst_from_ns=float(e2e[worst].min()),
    )


def median_and_tail(
    segments_ns: np.ndarray, names: list[str], kinds: list[str], anchors: tuple[str, str]
) -> list[Finding]:
    """Which segments carry the median and which the tail.

    ``segments_ns`` is (complete units, segments); ``names`` the segments' end probes;
    ``anchors`` the plots of the median (waterfall) and of the tail (median vs worst).
    """
    if segments_ns.size == 0:  # no complete unit, or a path of one probe
        return []
    split = tail_split(segments_ns)
    total = float(split.median_ns.sum())
    order = np.argsort(-split.median_ns)
    carried = [i for i in order[:3] if total > 0 and split.median_ns[i] / total >= 0.1]
    parts = ", ".join(
        f"{_short(names[i])} ({kinds[i]}) {_ms(split.median_ns[i] / 1e6)} ms "
        f"= {_share_pct(split.median_ns[i], total)}"
        for i in carried
    )
    median_text = (
        f"The median units ({split.median_units} units between p45 and p55, "
        f"{_ms(total / 1e6)} ms end to end) spend most in: {parts or 'no single segment'}."
    )
    growth = split.growth_ns
    grown = float(growth.sum())
    rising = float(growth[growth > 0].sum())
    lead, shrunk = int(np.argmax(growth)), int(np.argmin(growth))
    tail_text = (
        f"The worst {WORST_SHARE:.0%} ({split.worst_units} units, end to end "
        f"≥ {_ms(split.worst_from_ns / 1e6)} ms, mean {_ms(float(split.worst_ns.sum()) / 1e6)} ms)"
        f" took {_ms(grown / 1e6)} ms longer than the median units; "
        f"{_short(names[lead])} ({kinds[lead]}) grew most: +{_ms(growth[lead] / 1e6)} ms"
        + (f" ({_share_pct(growth[lead], rising)} of what grew)" if rising > 0 else "")
    )
    runner_up = np.argsort(-growth)[1:2]
    if len(runner_up) and growth[runner_up[0]] > 0.1 * growth[lead] > 0:
        second = int(runner_up[0])
        tail_text += f", then {_short(names[second])} +{_ms(growth[second] / 1e6)} ms"
    if growth[shrunk] < -0.1 * max(growth[lead], 0):
        tail_text += (
            f"; {_short(names[shrunk])} ({kinds[shrunk]}) took "
            f"{_ms(-growth[shrunk] / 1e6)} ms less, absorbing part of it"
        )
    return [
        Finding("median", median_text, anchors[0]),
        Finding("tail", tail_text + ".", anchors[1], notable=grown > 0),
    ]


def percentiles_ms(values_ns: np.ndarray) -> tuple[float, float]:
    """p50 and p99 in ms (NaN when empty)."""
    if not len(values_ns):
        return math.nan, math.nan
    p50, p99 = np.percentile(values_ns, [50.0, 99.0]) / 1e6
    return float(p50), float(p99)


def configured_vs_achieved(
    what: str, configured_ms: float, achieved_ns: np.ndarray, span: str, anchor: str
) -> Finding:
    """A configured latency against the units' time over the span it governs."""
    p50, p99 = percentiles_ms(achieved_ns)
    over = p50 - configured_ms
    text = (
        f"{what}: configured {_ms(configured_ms)} ms, achieved p50 {_ms(p50)} ms, "
        f"p99 {_ms(p99)} ms ({span}); p50 {'+' if over >= 0 else '-'}{_ms(abs(over))} ms "
        "against the configuration."
    )
    notable = configured_ms > 0 and abs(over) > 0.1 * configured_ms
    return Finding("configured", text, anchor, notable=notable)


@dataclass(frozen=True)
class Cadence:
    """Intervals between consecutive unit arrivals at one probe."""

    probe: str
    period_ns: float  # the median interval
    intervals: int
    doubled: int  # intervals of at least DOUBLED_FACTOR periods
    doubled_p50_ns: float


def probe_cadence(arrivals_ns: np.ndarray, probe: str) -> Cadence | None:
    """Cadence of the distinct arrival instants of units at one probe."""
    times = np.unique(arrivals_ns)
    intervals = np.diff(times)
    intervals = intervals[intervals > 0]
    if len(intervals) < 2:
        return None
    period = float(np.median(intervals))
    long = intervals[intervals >= DOUBLED_FACTOR * period]
    return Cadence(
        probe, period, len(intervals), len(long), float(np.median(long)) if len(long) else 0.0
    )


def cadence_irregularities(
    times_ns: np.ndarray, probes: list[str], missing: int, anchor: str
) -> list[Finding]:
    """Doubled periods between unit arrivals, per probe of the path (first probe included).

    ``times_ns`` is the (units, probes) journey matrix, ``missing`` its marker for a unit
    that did not pass a probe.
    """
    found = []
    for j, probe in enumerate(probes):  # one pass per probe, columnar inside
        column = times_ns[:, j]
        cadence = probe_cadence(column[column != missing], probe)
        if cadence is not None:
            found.append(cadence)
    irregular = [c for c in found if c.doubled]
    if not found:
        return []
    if not irregular:
        return [
            Finding(
                "cadence",
                f"Cadence: no doubled periods at any of the {len(found)} probes (no interval "
                f"between consecutive unit arrivals reached {DOUBLED_FACTOR:g}x the median).",
                anchor,
            )
        ]
    worst = max(irregular, key=lambda c: c.doubled / c.intervals)
    first = irregular[0]
    text = (
        f"Cadence: at {_short(worst.probe)}, {worst.doubled} of {worst.intervals} intervals "
        f"between consecutive unit arrivals ({worst.doubled / worst.intervals:.1%}) were "
        f"≥ {DOUBLED_FACTOR:g}x the {_ms(worst.period_ns / 1e6)} ms period "
        f"(median of those {_ms(worst.doubled_p50_ns / 1e6)} ms: periods doubled up)"
    )
    if first.probe != worst.probe:
        text += (
            f"; the first probe along the path with doubled periods is {_short(first.probe)} "
            f"({first.doubled} of {first.intervals})"
        )
    text += f"; {len(irregular)} of {len(found)} probes show some."
    return [Finding("cadence", text, anchor, notable=worst.doubled / worst.intervals >= 0.001)]


def runs_of(flags: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start indices and lengths of the runs of True in a boolean series."""
    padded = np.concatenate([[False], np.asarray(flags, bool), [False]])
    edges = np.flatnonzero(np.diff(padded.astype(np.int8)))
    starts, ends = edges[::2], edges[1::2]
    return starts, ends - starts


@dataclass(frozen=True)
class Spikes:
    """Spikes of a latency series and whether they recur at a period."""

    threshold_ms: float
    median_ms: float
    burst_starts: np.ndarray  # unit indices where each burst starts
    peak_ms: float
    period_units: int | None  # the recurrence period, when periodic
    acf_at_period: float


def spike_threshold_ms(values_ms: np.ndarray) -> tuple[float, float]:
    """The median of a series and the level above which a value is a spike."""
    median = float(np.median(values_ms))
    mad = float(np.median(np.abs(values_ms - median))) * 1.4826
    return median, median + max(SPIKE_MADS * mad, SPIKE_FLOOR_MS)


def autocorrelation(series: np.ndarray) -> np.ndarray:
    """Normalised autocorrelation of a series by FFT (lag 0 is 1; zero-padded, unbiased)."""
    x = np.asarray(series, np.float64) - np.mean(series)
    n = len(x)
    size = 1 << (2 * n - 1).bit_length()
    spectrum = np.fft.rfft(x, size)
    acf = np.fft.irfft(spectrum * np.conj(spectrum), size)[:n]
    acf /= np.arange(n, 0, -1)  # unbiased: each lag has n - lag products
    return acf / acf[0] if acf[0] > 0 else np.zeros(n)


def find_spikes(values_ms: np.ndarray) -> Spikes | None:
    """Spikes of a per-unit series (NaN where a unit has no value) and their period."""
    known = np.isfinite(values_ms)
    if known.sum() < 10:
        return None
    median, threshold = spike_threshold_ms(values_ms[known])
    spike = known & (values_ms > threshold)
    if not spike.any():
        return Spikes(threshold, median, np.empty(0, np.int64), math.nan, None, 0.0)
    index = np.flatnonzero(spike)
    new_burst = np.concatenate([[True], np.diff(index) >= SPIKE_GAP_UNITS])
    starts = index[new_burst]
    period, acf_value = _spike_period(spike, starts)
    return Spikes(threshold, median, starts, float(values_ms[spike].max()), period, acf_value)


def _spike_period(spike: np.ndarray, starts: np.ndarray) -> tuple[int | None, float]:
    """The lag at which the spike series correlates best with itself, if bursts recur there."""
    if len(starts) < MIN_PERIODIC_BURSTS:
        return None, 0.0
    acf = autocorrelation(spike.astype(np.float64))
    lo, hi = 2 * SPIKE_GAP_UNITS, len(acf) // 2
    if hi <= lo:
        return None, 0.0
    # Spikes may jitter by a unit or two: smooth the lags over +-2 before picking the peak.
    smooth = np.convolve(acf, np.ones(5) / 5, mode="same")
    # The shortest lag near the best: multiples of the period correlate as well.
    window = smooth[lo:hi]
    if window.max() <= 0:
        return None, 0.0
    lag = lo + int(np.flatnonzero(window >= 0.8 * window.max())[0])
    lag = max(lag - 2, lo) + int(np.argmax(acf[max(lag - 2, lo) : lag + 3]))
    intervals = np.diff(starts)
    regular = np.abs(intervals - lag) <= PERIODIC_SPREAD * lag
    # Allow a missed burst: an interval of about two periods is still on the beat.
    regular |= np.abs(intervals - 2 * lag) <= PERIODIC_SPREAD * lag
    peak = float(smooth[lag])
    if peak >= PERIODIC_ACF / 2 and regular.mean() >= 0.75:
        return lag, float(acf[lag])
    return None, float(acf[lag])


def periodicity(values_ms: np.ndarray, unit_s: float, anchor: str) -> list[Finding]:
    """Spikes of an end-to-end series and their period; else a periodic pattern, if any."""
    spikes = find_spikes(values_ms)
    found = periodic_spikes(values_ms, unit_s, anchor, spikes)
    if spikes is None or spikes.period_units is None:
        found += oscillation(values_ms, unit_s, anchor)
    return found


def periodic_spikes(
    values_ms: np.ndarray, unit_s: float, anchor: str, spikes: Spikes | None = None
) -> list[Finding]:
    """Latency spikes of an end-to-end series over the unit grid, and their period."""
    spikes = spikes or find_spikes(values_ms)
    if spikes is None:
        return []
    if not len(spikes.burst_starts):
        return [
            Finding(
                "spikes",
                f"Spikes: none (no unit above {_ms(spikes.threshold_ms)} ms, the median "
                f"{_ms(spikes.median_ms)} ms + max({SPIKE_MADS:g} robust SD, "
                f"{SPIKE_FLOOR_MS:g} ms)).",
                anchor,
            )
        ]
    count = len(spikes.burst_starts)
    text = (
        f"Spikes: {count} burst{'s' if count > 1 else ''} above {_ms(spikes.threshold_ms)} ms "
        f"(median {_ms(spikes.median_ms)} ms), highest {_ms(spikes.peak_ms)} ms"
    )
    if spikes.period_units is not None:
        text += (
            f"; they recur every {spikes.period_units} units "
            f"({spikes.period_units * unit_s:.2f} s; autocorrelation {spikes.acf_at_period:.2f} "
            "at that lag)"
        )
    elif count > 1:
        gaps = np.diff(spikes.burst_starts) * unit_s
        text += f", not periodic (from {gaps.min():.2f} s to {gaps.max():.2f} s apart)"
    return [Finding("spikes", text + ".", anchor, notable=True)]


def oscillation_period(values_ms: np.ndarray) -> tuple[int, float] | None:
    """The period (units) of a periodic pattern of the whole series, with its autocorrelation.

    Gaps are filled with the median and a straight trend is removed; the period is the
    first local maximum of the autocorrelation after it first crosses zero, if it is at
    least MIN_OSCILLATION_UNITS, fits three times into the series and correlates at
    OSCILLATION_ACF or more.
    """
    known = np.isfinite(values_ms)
    if known.sum() < 3 * MIN_OSCILLATION_UNITS:
        return None
    y = np.where(known, values_ms, np.median(values_ms[known]))
    x = np.arange(len(y), dtype=np.float64)
    y = y - np.polyval(np.polyfit(x, y, 1), x)
    acf = autocorrelation(y)
    crossed = np.flatnonzero(acf < 0)
    limit = len(acf) // 3
    if not len(crossed) or limit <= crossed[0] + 1:
        return None
    start = int(crossed[0])
    window = acf[start:limit]
    if window.max() < OSCILLATION_ACF:
        return None
    # The shortest lag near the best: multiples of the period correlate as well.
    lag = start + int(np.flatnonzero(window >= 0.8 * window.max())[0])
    near = max(lag - lag // 20 - 1, start)
    lag = near + int(np.argmax(acf[near : lag + lag // 20 + 2]))
    if lag < MIN_OSCILLATION_UNITS or acf[lag] < OSCILLATION_ACF:
        return None
    return lag, float(acf[lag])


def oscillation(values_ms: np.ndarray, unit_s: float, anchor: str) -> list[Finding]:
    """A finding when the end-to-end series repeats a pattern (a sawtooth, a slow wave)."""
    found = oscillation_period(values_ms)
    if found is None:
        return []
    lag, acf = found
    known = values_ms[np.isfinite(values_ms)]
    swing = float(np.percentile(known, 95) - np.percentile(known, 5))
    text = (
        f"Periodic pattern: end-to-end latency repeats every {lag} units ({lag * unit_s:.2f} s; "
        f"autocorrelation {acf:.2f} at that lag), swinging {_ms(swing)} ms from p5 to p95."
    )
    return [Finding("periodic", text, anchor, notable=True)]


def bursts(
    topic: str,
    flags: np.ndarray,
    step_s: float,
    noun: str,
    anchor: str,
    t0_s: float = 0.0,
    meaning: str = "",
) -> list[Finding]:
    """Bursts of a per-step flag series (``loss``: units that did not complete, ``concealment``:
    stats intervals that concealed); ``meaning`` says what a flagged step is."""
    flags = np.asarray(flags, bool)
    if not flags.any():
        return []
    starts, lengths = runs_of(flags)
    longest = int(np.argmax(lengths))
    text = (
        f"{topic.capitalize()}: {int(flags.sum())} of {len(flags)} {noun} ({flags.mean():.1%})"
        + (f" {meaning}" if meaning else "")
        + f", in {len(starts)} burst{'s' if len(starts) > 1 else ''}; the longest "
        f"{int(lengths[longest])} {noun} ({lengths[longest] * step_s * 1e3:.0f} ms) "
        f"at {t0_s + starts[longest] * step_s:.2f} s"
    )
    return [Finding(topic, text + ".", anchor, notable=True)]


def black_box_unexplained(
    black_box: dict[str, Any],
    probed: dict[str, Any],
    unexplained: dict[str, Any],
    estimated: Sequence[str],
    anchor: str,
) -> list[Finding]:
    """Black box against probed end to end over the same units (stats dicts of summary.json
    ``blackbox``): whether the probes over- or under-count, and where that is likely to be.

    ``estimated``: the carrier stream's estimated (modelled) device segments, as text.
    """
    p50 = unexplained.get("p50_ms")
    if not unexplained.get("count") or p50 is None:
        return []
    figures = (
        f"p50 of black box - probed over {unexplained['count']} codes; black box p50 "
        f"{_ms(black_box['p50_ms'])} ms, probed p50 {_ms(probed['p50_ms'])} ms"
    )
    if abs(p50) <= UNEXPLAINED_FLOOR_MS:
        text = (
            f"Black box vs probes: they agree within {_ms(UNEXPLAINED_FLOOR_MS)} ms "
            f"(unexplained {_ms(p50)} ms, {figures})."
        )
        return [Finding("blackbox", text, anchor)]
    if p50 < 0:
        what = (
            f"the probes over-count the end to end by {_ms(-p50)} ms: they count time the "
            "signal did not spend"
        )
    else:
        what = (
            f"the probes under-count the end to end by {_ms(p50)} ms: the signal spent time "
            "where no probe saw it"
        )
    if estimated:
        where = (
            "The likely place is the stream's estimated device time, modelled rather than "
            f"observed: {', '.join(estimated)} (likely, not certain: the black box says how "
            "much, not where)."
        )
    else:
        where = (
            "No segment of the stream is estimated, so the likely place is a device or OS "
            "buffer outside the probes (likely, not certain: the black box says how much, "
            "not where)."
        )
    return [Finding("blackbox", f"Black box vs probes: {what} ({figures}). {where}", anchor,
                    notable=True)]  # fmt: skip


def black_box_missing(codes: dict[str, int], anchor: str) -> list[Finding]:
    """Codes injected but not found in the recording, or found but not matched to a unit."""
    injected, found = codes["injected"], codes["found"]
    unmatched = found - codes["matched_to_units"]
    if injected == found and not unmatched:
        return []
    parts = []
    if injected > found:
        parts.append(
            f"{injected - found} of {injected} injected codes "
            f"({(injected - found) / max(injected, 1):.1%}) were not found in the recording "
            "(lost, or too damaged to decode); the black box has no figure for them"
        )
        if codes.get("dropouts"):
            parts[-1] += (
                f" ({codes['dropouts']} where the recording is silent: the path played "
                "nothing there)"
            )
    if unmatched:
        parts.append(
            f"{unmatched} of {found} found codes fell in no complete unit's capture window, "
            "so they have no probed or unexplained figure"
        )
    return [Finding("blackbox", "Black box codes: " + "; ".join(parts) + ".", anchor,
                    notable=injected > found)]  # fmt: skip


def forwarding(host: str, box: dict[str, Any], anchor: str) -> list[Finding]:
    """What a captured host's forwarding says (summary.json ``forwarding.HOST``): how long
    packets stayed inside and how many of them the matcher could name."""
    if box.get("error"):
        return [Finding("sfu", f"Inside {host}: {box['error']}", anchor, notable=True)]
    dwell = box["dwell"]
    if not dwell.get("count"):
        text = f"Inside {host}: no forwarded packet was matched ({box['forwarded']} sent)."
        return [Finding("sfu", text, anchor, notable=bool(box["forwarded"]))]
    text = (f"Inside {host}, forwarded packets stayed {_ms(dwell['p50_ms'])} ms at p50, "
            f"{_ms(dwell['p99_ms'])} ms at p99 ({box['matched']} of {box['forwarded']} "
            "matched to their source).")  # fmt: skip
    found = [Finding("sfu", text, anchor, notable=box["matched"] < 0.99 * box["forwarded"])]
    found += [Finding("sfu", f"{host} capture: {problem}.", anchor, notable=True)
              for problem in box["problems"]]  # fmt: skip
    return found


def forwarding_cost(name: str, cost: dict[str, Any], anchor: str) -> list[Finding]:
    """What a counted process cost per forwarded packet (summary.json ``costs.NAME``)."""
    per = cost.get("per_packet")
    if not per:
        return []
    text = (f"{name} cost {per['cpu_us']:.0f} us of CPU, {per['syscalls']:.1f} syscalls and "
            f"{per['context_switches']:.1f} context switches per forwarded packet, its idle "
            "baseline taken off.")  # fmt: skip
    return [Finding("sfu", text, anchor)]
