"""Compare two runs (or sweep points): per-segment and end-to-end differences with
bootstrap confidence intervals (``latlab compare A B``).

What is compared, per stream present in both runs (streams are matched by their path,
``origin->end`` without the SSRC, which changes every run): the end-to-end latency, every
segment both runs have (matched by its two probes), the time per unit in each segment
kind and in each phase. For each, the difference B - A of the p50, the p99 and the mean,
with a confidence interval from a moving-block bootstrap (docs/reports.md):

* each run's per-unit values are resampled independently, in blocks of consecutive units,
  so the autocorrelation of latency (a jitter buffer drifts, bursts last several units)
  widens the interval instead of making every small shift look significant; the block
  length is the first lag at which the sample autocorrelation falls under its noise level
  ``2/sqrt(n)``, at least ``n**(1/3)`` units;
* fixed seed, 2000 resamples by default, vectorised (a (resamples x units) index matrix
  per chunk of resamples);
* a difference is significant when its interval excludes 0.

The intervals describe the units recorded in the two runs. Run-to-run variation that
no unit of a run shows (e.g. the phase at which a source started) is not in them: repeat
runs (a sweep over a dummy variable) to see it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from latlab.analysis.segments import StreamAnalysis
from latlab.errors import UserInputError
from latlab.ingest.workers import parallel_map

SCHEMA = "latlab.compare/1"
RESAMPLES = 2000
SEED = 20261122
CONFIDENCE = 0.95
CHUNK_ELEMENTS = 4_000_000  # resampled values held at once (bounds memory)
STATS = ("p50", "p99", "mean")
_SSRC = re.compile(r" ssrc=[0-9a-f]+$")


def _quiet(_text: str) -> None:
    """A ``report`` that says nothing."""


class ReportInputError(UserInputError, ValueError):
    """A mistake in what the user gave a report command (one line, exit 2)."""


@dataclass
class RunInput:
    """A run directory given on the command line, and how to name it."""

    path: Path
    label: str


def resolve_run(spec: str) -> RunInput:
    """A run directory from ``DIR``, ``SWEEPDIR:POINT`` or ``SWEEPDIR/points/POINT``.

    ``POINT`` is a point's name (``jb=20``), a part of it that names one point
    (``jb=20`` of ``jb=20,delay=0``), or its number in run order (1-based).
    """
    from latlab.rundir import is_sweep_dir

    path = Path(spec)
    if path.is_dir() and not is_sweep_dir(path):
        return RunInput(path, spec)
    if path.is_dir():
        names = ", ".join(p["name"] for p in _sweep_points(path))
        raise ReportInputError(f"{spec}: a sweep directory; name a point: {spec}:POINT ({names})")
    if ":" in spec:
        sweep, point = spec.rsplit(":", 1)
        if Path(sweep).is_dir() and is_sweep_dir(Path(sweep)):
            return _sweep_point(Path(sweep), point, spec)
    raise ReportInputError(f"{spec}: no such run directory")


def _sweep_points(sweep_dir: Path) -> list[dict[str, Any]]:
    from latlab.rundir import read_sweep

    return list(read_sweep(sweep_dir).get("points", []))


def _sweep_point(sweep_dir: Path, point: str, spec: str) -> RunInput:
    points = _sweep_points(sweep_dir)
    if point.isdigit() and 1 <= int(point) <= len(points):
        chosen = [points[int(point) - 1]]
    else:
        wanted = set(point.split(","))
        chosen = [p for p in points if p["name"] == point] or [
            p for p in points if wanted <= set(p["name"].split(","))
        ]
    if len(chosen) != 1:
        names = ", ".join(p["name"] for p in points)
        how = "matches several points" if chosen else "is not a point"
        raise ReportInputError(f"{spec}: {point!r} {how} of {sweep_dir} ({names})")
    run_dir = sweep_dir / chosen[0].get("dir", f"points/{chosen[0]['name']}")
    if chosen[0].get("status") not in (None, "ok") or not run_dir.is_dir():
        raise ReportInputError(f"{spec}: point {chosen[0]['name']} did not run ({run_dir})")
    return RunInput(run_dir, spec)


# --- per-unit figures of a stream ----------------------------------------------------


@dataclass
class Metric:
    """One per-unit quantity of a stream: a segment, a kind's sum, a phase or end to end."""

    name: str  # as shown: "end to end", "rtpjitterbuffer0:src", "kind network", ...
    group: str  # "end_to_end", "segment", "kind", "phase"
    key: tuple  # what matches it across runs
    values_ns: np.ndarray
    kind: str = ""
    from_probe: str = ""
    to_probe: str = ""


def stream_key(stream: StreamAnalysis) -> str:
    """A stream's identity across runs: its path without the (random) SSRC."""
    return _SSRC.sub("", stream.journeys.stream_id)


def stream_metrics(stream: StreamAnalysis) -> list[Metric]:
    """End to end, each segment, each kind (per-unit sums) and each phase of a stream."""
    e2e = stream.end_to_end
    out = [
        Metric(
            "end to end", "end_to_end", ("e2e",), e2e.values_ns, "", e2e.from_probe, e2e.to_probe
        )
    ]
    for seg in stream.segments:
        out.append(
            Metric(
                _short(seg.to_probe),
                "segment",
                ("segment", seg.from_probe, seg.to_probe),
                seg.values_ns,
                seg.kind,
                seg.from_probe,
                seg.to_probe,
            )
        )
    for kind, total in stream.kinds.items():
        out.append(Metric(f"kind {kind}", "kind", ("kind", kind), total.values_ns, kind))
    for name, seg in stream.phases.items():
        out.append(
            Metric(
                f"phase {name}",
                "phase",
                ("phase", name),
                seg.values_ns,
                "",
                seg.from_probe,
                seg.to_probe,
            )
        )
    return out


def _short(probe: str) -> str:
    return probe.split("/", 1)[-1]


# --- the bootstrap -------------------------------------------------------------------


def block_length(values: np.ndarray) -> int:
    """Block length for the moving-block bootstrap: the autocorrelation's reach.

    The first lag at which the sample autocorrelation falls under ``2/sqrt(n)``, at
    least ``n**(1/3)``, at most ``n/4`` units.
    """
    n = len(values)
    if n < 8:
        return 1
    x = np.asarray(values, np.float64) - np.mean(values)
    spectrum = np.fft.rfft(x, 2 * n)
    acf = np.fft.irfft(spectrum * np.conj(spectrum))[:n]
    if acf[0] <= 0:
        return 1  # all values equal
    below = np.abs(acf / acf[0]) < 2 / np.sqrt(n)
    reach = int(np.argmax(below)) if below.any() else n
    return int(np.clip(max(reach, np.ceil(n ** (1 / 3))), 1, max(1, n // 4)))


def bootstrap_stats(
    values_ms: np.ndarray, resamples: int, rng: np.random.Generator, block: int
) -> np.ndarray:
    """(resamples, 3): p50, p99 and mean of moving-block bootstrap resamples."""
    n = len(values_ms)
    out = np.empty((resamples, len(STATS)))
    if n == 0:
        out.fill(np.nan)
        return out
    blocks = -(-n // block)
    per_chunk = max(1, CHUNK_ELEMENTS // (blocks * block))
    offsets = np.arange(block)
    for lo in range(0, resamples, per_chunk):
        count = min(per_chunk, resamples - lo)
        starts = rng.integers(0, n - block + 1, size=(count, blocks))
        index = (starts[:, :, None] + offsets).reshape(count, -1)[:, :n]
        sample = values_ms[index]
        out[lo : lo + count, :2] = np.percentile(sample, [50, 99], axis=1).T
        out[lo : lo + count, 2] = sample.mean(axis=1)
    return out


def point_stats(values_ms: np.ndarray) -> np.ndarray:
    """p50, p99 and mean of the values (NaN when there are none)."""
    if len(values_ms) == 0:
        return np.full(len(STATS), np.nan)
    return np.array([*np.percentile(values_ms, [50, 99]), values_ms.mean()])


@dataclass
class Difference:
    """B - A of one statistic, with its bootstrap confidence interval."""

    estimate: float
    low: float
    high: float

    @property
    def significant(self) -> bool:
        """The interval excludes 0."""
        return bool(self.low > 0 or self.high < 0)

    def to_json(self) -> dict[str, Any]:
        """``estimate``, ``ci`` [low, high] and ``significant`` (ms, rounded to 0.1 µs)."""
        return {
            "estimate": _r(self.estimate),
            "ci": [_r(self.low), _r(self.high)],
            "significant": self.significant,
        }


def compare_values(
    a_ns: np.ndarray,
    b_ns: np.ndarray,
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    rng: np.random.Generator | None = None,
) -> dict[str, Any]:
    """The p50, p99 and mean of A and B and their differences with bootstrap intervals."""
    rng = rng or np.random.default_rng(SEED)
    a, b = np.asarray(a_ns, np.float64) / 1e6, np.asarray(b_ns, np.float64) / 1e6
    block_a, block_b = block_length(a), block_length(b)
    boot = bootstrap_stats(b, resamples, rng, block_b) - bootstrap_stats(a, resamples, rng, block_a)
    tail = (1 - confidence) / 2 * 100
    if len(a) and len(b):
        low, high = np.percentile(boot, [tail, 100 - tail], axis=0)
    else:
        low = high = np.full(len(STATS), np.nan)
    pa_, pb_ = point_stats(a), point_stats(b)
    return {
        "a": {"count": len(a), **dict(zip(STATS, pa_, strict=True))},
        "b": {"count": len(b), **dict(zip(STATS, pb_, strict=True))},
        "diff": {
            s: Difference(float(pb_[i] - pa_[i]), float(low[i]), float(high[i]))
            for i, s in enumerate(STATS)
        },
        "block_units": {"a": block_a, "b": block_b},
    }


# --- comparing two runs -------------------------------------------------------------


@dataclass
class StreamComparison:
    """The rows of one stream found in both runs."""

    key: str
    a_id: str
    b_id: str
    rows: list[dict[str, Any]]
    only_in_a: list[str] = field(default_factory=list)
    only_in_b: list[str] = field(default_factory=list)


@dataclass
class Comparison:
    """``latlab compare A B``."""

    a: RunInput
    b: RunInput
    streams: list[StreamComparison]
    streams_only_in_a: list[str]
    streams_only_in_b: list[str]
    resamples: int
    confidence: float
    seed: int

    def to_json(self) -> dict[str, Any]:
        """The comparison as JSON (schema ``latlab.compare/1``)."""
        return {
            "schema": SCHEMA,
            "a": {"spec": self.a.label, "dir": str(self.a.path)},
            "b": {"spec": self.b.label, "dir": str(self.b.path)},
            "resamples": self.resamples,
            "confidence": self.confidence,
            "seed": self.seed,
            "streams": [_stream_json(s) for s in self.streams],
            "streams_only_in_a": self.streams_only_in_a,
            "streams_only_in_b": self.streams_only_in_b,
        }


def compare_streams(
    a: Sequence[StreamAnalysis],
    b: Sequence[StreamAnalysis],
    run_a: RunInput,
    run_b: RunInput,
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
    report: Callable[[str], None] = _quiet,
) -> Comparison:
    """Match the streams of two runs by path and compare every metric they share;
    ``report`` hears what is being done (for a status line)."""
    pairs, only_a, only_b = _match(a, b)
    seeds = np.random.SeedSequence(seed).spawn(len(pairs))
    streams = [
        _compare_stream(sa, sb, resamples, confidence, stream_seed, _numbered(report, i, pairs))
        for i, ((sa, sb), stream_seed) in enumerate(zip(pairs, seeds, strict=True))
    ]
    return Comparison(run_a, run_b, streams, only_a, only_b, resamples, confidence, seed)


def compare_runs(
    spec_a: str,
    spec_b: str,
    *,
    unit_ms: float | None = None,
    report: Callable[[str], None] = _quiet,
    **options: Any,
) -> Comparison:
    """The analyses of two runs (their stored ones where current) compared."""
    from latlab.pipeline import analysis_of

    run_a, run_b = resolve_run(spec_a), resolve_run(spec_b)
    report(f"analysing A ({run_a.path})")
    keep = unit_ms is None  # another unit than a run's own is not stored in it
    streams_a = analysis_of(run_a.path, unit_ms, write=keep).streams
    report(f"analysing B ({run_b.path})")
    streams_b = analysis_of(run_b.path, unit_ms, write=keep).streams
    return compare_streams(streams_a, streams_b, run_a, run_b, report=report, **options)


def _numbered(report: Callable[[str], None], index: int, pairs: list) -> Callable[[str], None]:
    """``report`` with the stream's number in front, when there is more than one."""
    if len(pairs) < 2:
        return report
    return lambda text: report(f"stream {index + 1}/{len(pairs)}: {text}")


def _match(
    a: Sequence[StreamAnalysis], b: Sequence[StreamAnalysis]
) -> tuple[list[tuple[StreamAnalysis, StreamAnalysis]], list[str], list[str]]:
    """Pairs of streams with the same path (in order of appearance), and the rest."""
    remaining = list(b)
    pairs, only_a = [], []
    for stream in a:
        match = next((s for s in remaining if stream_key(s) == stream_key(stream)), None)
        if match is None:
            only_a.append(stream.journeys.stream_id)
        else:
            remaining.remove(match)
            pairs.append((stream, match))
    return pairs, only_a, [s.journeys.stream_id for s in remaining]


def _compare_stream(
    a: StreamAnalysis,
    b: StreamAnalysis,
    resamples: int,
    confidence: float,
    seed: np.random.SeedSequence,
    report: Callable[[str], None] = _quiet,
) -> StreamComparison:
    """Every metric both streams have, bootstrapped on a few threads (each row its own
    seed, so the figures do not depend on the threads' order)."""
    metrics_a = {m.key: m for m in stream_metrics(a)}
    metrics_b = {m.key: m for m in stream_metrics(b)}
    shared = [(ma, metrics_b[key]) for key, ma in metrics_a.items() if key in metrics_b]
    # A kind or phase with one segment has that segment's values: bootstrapped once.
    distinct = list(dict.fromkeys(_values_key(ma, mb) for ma, mb in shared))
    by_key = {_values_key(ma, mb): (ma, mb) for ma, mb in reversed(shared)}
    seeds = dict(zip(distinct, seed.spawn(len(distinct)), strict=True))

    done = itertools.count(1)
    report(f"bootstrapping {len(distinct)} metrics")

    def figures(key: tuple[bytes, bytes]) -> dict[str, Any]:
        ma, mb = by_key[key]
        rng = np.random.default_rng(seeds[key])
        result = compare_values(
            ma.values_ns, mb.values_ns, resamples=resamples, confidence=confidence, rng=rng
        )
        report(f"bootstrapping metrics: {next(done)}/{len(distinct)} done")
        return result

    computed = dict(zip(distinct, parallel_map(figures, distinct), strict=True))
    rows = [
        {
            "name": ma.name,
            "group": ma.group,
            "kind": ma.kind,
            "from": ma.from_probe,
            "to": ma.to_probe,
            **computed[_values_key(ma, mb)],
        }
        for ma, mb in shared
    ]
    return StreamComparison(
        stream_key(a),
        a.journeys.stream_id,
        b.journeys.stream_id,
        rows,
        _segments_missing(metrics_a, metrics_b),
        _segments_missing(metrics_b, metrics_a),
    )


def _values_key(a: Metric, b: Metric) -> tuple[bytes, bytes]:
    """Identifies a pair of value arrays by content (a digest of each)."""
    return (_digest(a.values_ns), _digest(b.values_ns))


def _digest(values: np.ndarray) -> bytes:
    import hashlib

    return hashlib.blake2b(np.ascontiguousarray(values).tobytes(), digest_size=16).digest()


def _segments_missing(have: dict[tuple, Metric], other: dict[tuple, Metric]) -> list[str]:
    return [
        f"{m.from_probe} -> {m.to_probe}"
        for k, m in have.items()
        if m.group == "segment" and k not in other
    ]


def _stream_json(s: StreamComparison) -> dict[str, Any]:
    return {
        "key": s.key,
        "a_id": s.a_id,
        "b_id": s.b_id,
        "rows": [_row_json(r) for r in s.rows],
        "segments_only_in_a": s.only_in_a,
        "segments_only_in_b": s.only_in_b,
    }


def _row_json(row: dict[str, Any]) -> dict[str, Any]:
    out = {k: row[k] for k in ("name", "group", "kind", "from", "to", "block_units")}
    for side in ("a", "b"):
        out[side] = {k: (v if k == "count" else _r(v)) for k, v in row[side].items()}
    out["diff"] = {stat: d.to_json() for stat, d in row["diff"].items()}
    return out


def _r(value: float) -> float | None:
    return None if not np.isfinite(value) else round(float(value), 4)


# --- the table -----------------------------------------------------------------------


COMPARE_COLUMNS = (  # header, rank at which it is left out in a narrow console
    ("A p50", None),
    ("B p50", None),
    ("Δ p50 ms", None),
    ("A p99", 2),
    ("B p99", 2),
    ("Δ p99 ms", None),
    ("Δ mean ms", 1),
)


def render_comparison(comparison: Comparison, console: Any, *, wide: bool = False) -> None:
    """Rich tables: one per stream, B - A at p50, p99 and mean with confidence intervals.

    The tables fit the console (Δ mean, then A and B p99 left out, names
    folded); ``wide``: every column, at the tables' natural width.
    """
    from rich import box
    from rich.markup import escape

    from latlab.report.fit import FitTable, emit

    pct = f"{comparison.confidence * 100:g}%"
    console.print(
        f"A = {comparison.a.label}   B = {comparison.b.label}   "
        f"(B - A; [{pct} CI], moving-block bootstrap, {comparison.resamples} resamples; "
        "* = interval excludes 0)",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    for stream in comparison.streams:
        table = FitTable(
            title=escape(stream.key),
            header_style="bold",
            title_justify="left",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
        )
        table.add_column("", fold=True)
        for column, drop in COMPARE_COLUMNS:
            table.add_column(column, justify="right", drop=drop)
        for row in stream.rows:
            table.add_row(
                escape(row["name"]),
                _ms(row["a"]["p50"]),
                _ms(row["b"]["p50"]),
                _diff(row["diff"]["p50"]),
                _ms(row["a"]["p99"]),
                _ms(row["b"]["p99"]),
                _diff(row["diff"]["p99"]),
                _diff(row["diff"]["mean"]),
                end_section=_ends_group(row, stream.rows),
            )
        emit(console, table, wide=wide)
        _print_missing(console, "segments only in A", stream.only_in_a)
        _print_missing(console, "segments only in B", stream.only_in_b)
    _print_missing(console, "streams only in A", comparison.streams_only_in_a)
    _print_missing(console, "streams only in B", comparison.streams_only_in_b)
    if not comparison.streams:
        console.print("no stream is in both runs", highlight=False)


def _ends_group(row: dict[str, Any], rows: list[dict[str, Any]]) -> bool:
    index = next(i for i, r in enumerate(rows) if r is row)
    return index + 1 < len(rows) and rows[index + 1]["group"] != row["group"]


def _print_missing(console: Any, title: str, names: Iterable[str]) -> None:
    names = list(names)
    if names:
        console.print(
            f"{title}: " + "; ".join(names), highlight=False, markup=False, soft_wrap=True
        )


def _ms(value: float) -> str:
    return "-" if not np.isfinite(value) else f"{value:.3f}"


def _diff(d: Difference) -> str:
    """The estimate (``*`` when significant) over its interval."""
    if not np.isfinite(d.estimate):
        return "-"
    mark = " *" if d.significant else "  "
    return f"{d.estimate:+.3f}{mark}\n[{d.low:+.3f}, {d.high:+.3f}]"
