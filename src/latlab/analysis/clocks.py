"""Clock alignment between clock domains, each estimate with an error bound that holds.

Two machines' CLOCK_MONOTONIC disagree by an offset that changes at a rate (their
oscillators differ by parts per million). Between domains A and B latlab models

    t_B = t_A + theta(t_A),   theta(t) = offset + drift * (t - t0)

and estimates ``theta`` from observations that each confine it to an interval at one
instant: ``lo <= theta(t) <= hi``. Every source gives such intervals:

* a **two-way exchange** (NTP-style, latlab's clock agents over UDP): A sends at t1, B
  receives at t2 and answers at t3, A receives at t4. Both one-way delays are >= 0, so
  ``t3 - t4 <= theta <= t2 - t1``: an interval as wide as the round trip minus B's
  hold, whatever the asymmetry of the path;
* the **kernel's synchronisation** (adjtimex): both machines' CLOCK_REALTIME is UTC
  within the maximum error each kernel reports, so ``theta = (real_A - mono_A) -
  (real_B - mono_B)`` within the sum of the two;
* **media flowing both ways** (a two-way call): a packet from A to B gives ``t_B - t_A
  = theta + d >= theta``, one from B to A ``t_A - t_B = d' - theta``; the lowest of each
  in a short window pair up like one exchange.

The fit (:func:`fit_intervals`) keeps, per window (2 s; shorter in a short run), the
observation with the narrowest interval (minimum-delay filtering), fits offset and drift
through their midpoints (weighted least squares), and states as bound the largest
``|residual| + half width`` over the kept observations. Both the truth and the fit are
straight lines, so their difference is largest at an end of the span: the bound holds
over the whole span (and is never less than half the round trip of any observation
used). Beyond the span it grows with twice the bound over the span per unit of time
(:meth:`ClockFit.bound_at`). Drift's own bound is twice the bound over the span's length.

This module is columnar (numpy over observations); it reads nothing. The clock logs are
read by :mod:`latlab.ingest.clock_log`; alignment is applied to journeys in
:mod:`latlab.analysis.clock_apply`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Observations are grouped into windows of this length (at most; a short run gets shorter
# ones, down to MIN_WINDOW_NS, so that it still has WINDOWS_WANTED); the narrowest of
# each is kept.
WINDOW_NS = 2_000_000_000
MIN_WINDOW_NS = 500_000_000
WINDOWS_WANTED = 16
# A window whose narrowest observation is wider than this many times the 10th percentile
# of the windows' narrowest (and 10 us more) is left out: a busy moment, not the path.
OUTLIER_FACTOR = 1.5
OUTLIER_SLACK_NS = 10_000
# Weights of the fit: 1 / (half width^2 + floor^2): the floor keeps one lucky observation
# from deciding alone.
WEIGHT_FLOOR_NS = 5_000.0
MIN_WINDOWS = 2  # a drift needs two instants
# A kernel that reports this maximum error (or more) is not synchronised (Linux caps
# maxerror at NTP_PHASE_LIMIT-like 16 s when nothing disciplines the clock).
KERNEL_MAXERROR_LIMIT_US = 16_000_000
STA_UNSYNC = 0x0040
TIME_ERROR = 5

SOURCE_EXCHANGE = "exchange"
SOURCE_KERNEL = "kernel"
SOURCE_MEDIA = "media"
SOURCES = (SOURCE_EXCHANGE, SOURCE_KERNEL, SOURCE_MEDIA)


@dataclass(frozen=True)
class Intervals:
    """Observations of theta = t_B - t_A: at A's time ``t``, ``lo <= theta <= hi`` (ns)."""

    t: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    @classmethod
    def empty(cls) -> Intervals:
        z = np.zeros(0, np.int64)
        return cls(z, z, z)

    def __len__(self) -> int:
        return len(self.t)


@dataclass(frozen=True)
class ClockFit:
    """theta(t) = offset_ns + drift * (t - t0_ns) (t on A's clock), with its bound."""

    a: str
    b: str
    source: str
    t0_ns: int
    offset_ns: float
    drift: float  # dimensionless (1e-6 = 1 ppm): B's clock gains this much per ns of A's
    bound_ns: float  # over [span_ns[0], span_ns[1]]
    span_ns: tuple[int, int]
    used: int  # observations kept (one per window)
    total: int  # observations given
    min_width_ns: float  # the narrowest interval (a round trip, for an exchange)

    def offset_at(self, t_ns: np.ndarray | float) -> np.ndarray | float:
        """theta at A's time ``t_ns``."""
        return self.offset_ns + self.drift * (np.asarray(t_ns, np.float64) - self.t0_ns)

    def bound_at(self, t_ns: np.ndarray | float) -> np.ndarray | float:
        """The bound at A's time ``t_ns``: constant over the span, growing outside it."""
        t = np.asarray(t_ns, np.float64)
        first, last = self.span_ns
        length = max(last - first, 1)
        outside = np.maximum(first - t, 0) + np.maximum(t - last, 0)
        return self.bound_ns + 2 * self.bound_ns * outside / length

    @property
    def drift_bound(self) -> float:
        """Bound on the drift (dimensionless): the line can tilt by 2 bounds over the span."""
        length = self.span_ns[1] - self.span_ns[0]
        return float("inf") if length <= 0 else 2 * self.bound_ns / length

    def inverted(self) -> ClockFit:
        """The same relation seen from B: t_A = t_B + theta'(t_B)."""
        t0_b = self.t0_ns + self.offset_ns
        span = tuple(int(s + self.offset_at(s)) for s in self.span_ns)
        return ClockFit(
            a=self.b, b=self.a, source=self.source, t0_ns=round(t0_b),
            offset_ns=-self.offset_ns, drift=-self.drift / (1 + self.drift),
            bound_ns=self.bound_ns, span_ns=(span[0], span[1]), used=self.used,
            total=self.total, min_width_ns=self.min_width_ns,
        )  # fmt: skip

    def then(self, other: ClockFit) -> ClockFit:
        """A -> B (self) followed by B -> C (other): A -> C; the bounds add."""
        t0 = self.t0_ns
        t0_b = t0 + self.offset_ns
        offset = self.offset_ns + float(other.offset_at(t0_b))
        drift = (1 + self.drift) * (1 + other.drift) - 1
        return ClockFit(
            a=self.a, b=other.b, source=f"{self.source}+{other.source}", t0_ns=t0,
            offset_ns=offset, drift=drift, bound_ns=self.bound_ns + other.bound_ns,
            span_ns=self.span_ns, used=min(self.used, other.used),
            total=self.total + other.total, min_width_ns=self.min_width_ns + other.min_width_ns,
        )  # fmt: skip

    def describe(self) -> dict[str, Any]:
        """For summary.json's ``clocks``."""
        return {
            "source": self.source,
            "offset_ms": round(self.offset_ns / 1e6, 6),
            "at_ns": self.t0_ns,
            "drift_ppm": round(self.drift * 1e6, 4),
            "err_ms": round(self.bound_ns / 1e6, 6),
            "drift_err_ppm": _finite_round(self.drift_bound * 1e6, 4),
            "span_s": round((self.span_ns[1] - self.span_ns[0]) / 1e9, 3),
            "used": self.used,
            "samples": self.total,
            "min_rtt_ms": round(self.min_width_ns / 1e6, 6),
        }


def _finite_round(value: float, digits: int) -> float | None:
    return round(value, digits) if np.isfinite(value) else None


@dataclass
class SourceResult:
    """One source's answer for a pair of domains: a fit, or why there is none."""

    source: str
    fit: ClockFit | None
    why: str = ""

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source, "valid": self.fit is not None}
        if self.fit is not None:
            out.update(self.fit.describe())
        else:
            out["why"] = self.why
        return out


def fit_intervals(
    obs: Intervals, a: str, b: str, source: str, window_ns: int | None = None
) -> SourceResult:
    """Offset and drift of B against A from interval observations (see the module doc);
    ``window_ns``: the minimum-delay filter's window (default: 2 s, shorter for a run of
    less than 32 s)."""
    t = np.asarray(obs.t, np.int64)
    lo = np.asarray(obs.lo, np.float64)
    hi = np.asarray(obs.hi, np.float64)
    ok = np.isfinite(lo) & np.isfinite(hi) & (hi >= lo)
    t, lo, hi = t[ok], lo[ok], hi[ok]
    if len(t) == 0:
        return SourceResult(source, None, "no observations")
    half = (hi - lo) / 2
    mid = (hi + lo) / 2
    if window_ns is None:
        span = int(t.max() - t.min())
        window_ns = min(WINDOW_NS, max(MIN_WINDOW_NS, span // WINDOWS_WANTED))
    keep = _narrowest_per_window(t, half, window_ns)
    keep = _near_the_minimum(keep, t, half)
    if len(keep) < MIN_WINDOWS or t[keep].max() == t[keep].min():
        return SourceResult(
            source, None, f"{len(t)} observation(s) in {len(keep)} window(s): a drift needs two"
        )
    tk, mk, hk = t[keep], mid[keep], half[keep]
    weights = 1.0 / (hk**2 + WEIGHT_FLOOR_NS**2)
    t0 = int(np.round(np.average(tk, weights=weights)))
    x = (tk - t0).astype(np.float64)
    sw = weights.sum()
    xm = (weights * x).sum() / sw
    ym = (weights * mk).sum() / sw
    sxx = (weights * (x - xm) ** 2).sum()
    drift = float((weights * (x - xm) * (mk - ym)).sum() / sxx) if sxx > 0 else 0.0
    offset = float(ym - drift * xm)
    residual = mk - (offset + drift * x)
    bound = float(np.max(np.abs(residual) + hk))
    fit = ClockFit(
        a=a, b=b, source=source, t0_ns=t0, offset_ns=offset, drift=drift, bound_ns=bound,
        span_ns=(int(tk.min()), int(tk.max())), used=len(keep), total=len(t),
        min_width_ns=float(2 * half.min()),
    )  # fmt: skip
    return SourceResult(source, fit)


def _near_the_minimum(keep: np.ndarray, t: np.ndarray, half: np.ndarray) -> np.ndarray:
    """Of the windows' narrowest observations, those near the narrowest of all (the path's
    own delay, without a busy moment's): within ``OUTLIER_FACTOR`` times the 10th
    percentile plus ``OUTLIER_SLACK_NS``, while they still span most of the run (a fourth
    of the windows at least); else the tightest fourth."""
    if len(keep) < 2 * MIN_WINDOWS:
        return keep
    narrow = half[keep]
    limit = OUTLIER_FACTOR * float(np.percentile(narrow, 10)) + OUTLIER_SLACK_NS
    good = keep[narrow <= limit]
    enough = max(MIN_WINDOWS, len(keep) // 4)
    if len(good) < enough:
        good = keep[np.argsort(narrow, kind="stable")[:enough]]
    span = t[keep].max() - t[keep].min()
    if span and t[good].max() - t[good].min() < span / 2:  # the drift needs the run's length
        good = keep[narrow <= float(np.median(narrow)) + OUTLIER_SLACK_NS]
    return np.sort(good)


def _narrowest_per_window(t: np.ndarray, half: np.ndarray, window_ns: int) -> np.ndarray:
    """Index of the narrowest observation of each window of ``window_ns`` (by time)."""
    bins = (t - t.min()) // max(int(window_ns), 1)
    order = np.lexsort((half, bins))
    first = np.ones(len(order), bool)
    first[1:] = bins[order][1:] != bins[order][:-1]
    return np.sort(order[first])


# --- the sources' observations ---------------------------------------------------------


def exchange_intervals(t1: Any, t2: Any, t3: Any, t4: Any) -> Intervals:
    """A two-way exchange's observations: client A sent at t1 and received at t4, server
    B received at t2 and answered at t3 (each on its own clock)."""
    t1, t2, t3, t4 = (np.asarray(v, np.int64) for v in (t1, t2, t3, t4))
    ok = (t4 >= t1) & (t3 >= t2)
    t1, t2, t3, t4 = t1[ok], t2[ok], t3[ok], t4[ok]
    return Intervals(t1 + (t4 - t1) // 2, t3 - t4, t2 - t1)


@dataclass(frozen=True)
class KernelView:
    """One domain's clock samples: CLOCK_MONOTONIC <-> CLOCK_REALTIME pairs and what its
    kernel said of its synchronisation at each (adjtimex)."""

    mono_ns: np.ndarray
    real_ns: np.ndarray
    bracket_ns: np.ndarray  # the pair's read uncertainty (monotonic before to after)
    maxerror_us: np.ndarray
    synced: np.ndarray  # bool per sample: not STA_UNSYNC, not TIME_ERROR
    planted: bool = False  # the lab planted this domain's clock: its realtime is not UTC

    def why_unusable(self) -> str | None:
        """Why this domain's kernel view cannot align it, or None."""
        if self.planted:
            return "the lab planted this clock (its kernel's view is of the machine's)"
        if len(self.mono_ns) == 0:
            return "no clock samples"
        if not np.any(self.synced):
            return "the kernel's clock is not synchronised (STA_UNSYNC)"
        return None


def kernel_intervals(view_a: KernelView, view_b: KernelView) -> Intervals:
    """theta = (real_A - mono_A) - (real_B - mono_B) at A's synchronised samples, within
    the two kernels' maximum errors (and the pairs' read uncertainty)."""
    sa, sb = view_a.synced, view_b.synced
    if not sa.any() or not sb.any():
        return Intervals.empty()
    rho_a = (view_a.real_ns - view_a.mono_ns)[sa].astype(np.float64)
    real_a = view_a.real_ns[sa]
    order = np.argsort(view_b.real_ns[sb])
    real_b = view_b.real_ns[sb][order].astype(np.float64)
    rho_b = (view_b.real_ns - view_b.mono_ns)[sb][order].astype(np.float64)
    err_b = view_b.maxerror_us[sb][order] * 1000.0 + view_b.bracket_ns[sb][order]
    inside = (real_a >= real_b[0] - 5e9) & (real_a <= real_b[-1] + 5e9)
    rho_b_at = np.interp(real_a, real_b, rho_b)
    err_b_at = np.interp(real_a, real_b, err_b)
    err = view_a.maxerror_us[sa] * 1000.0 + view_a.bracket_ns[sa] + err_b_at
    theta = rho_a - rho_b_at
    return Intervals(view_a.mono_ns[sa][inside], (theta - err)[inside], (theta + err)[inside])


def one_way_intervals(
    t_fwd: np.ndarray,
    y_fwd: np.ndarray,
    t_back: np.ndarray,
    y_back: np.ndarray,
    window_ns: int = WINDOW_NS // 4,
) -> Intervals:
    """Observations from packets both ways: ``y_fwd = t_B - t_A`` (A -> B, at A's time
    ``t_fwd``: theta + delay), ``y_back = t_A - t_B`` (B -> A, at A's time ``t_back``:
    delay - theta). Per window the lowest of each bounds theta from above and below;
    a first estimate's drift is taken out before, its spread added to the width."""
    t_fwd, t_back = np.asarray(t_fwd, np.int64), np.asarray(t_back, np.int64)
    y_fwd, y_back = np.asarray(y_fwd, np.float64), np.asarray(y_back, np.float64)
    if len(t_fwd) == 0 or len(t_back) == 0:
        return Intervals.empty()
    start = min(t_fwd.min(), t_back.min())
    drift = 0.0
    for _ in range(2):  # once without drift, once with the first estimate's
        fwd_adj = y_fwd - drift * (t_fwd - start)
        back_adj = y_back + drift * (t_back - start)
        bins_f = (t_fwd - start) // window_ns
        bins_b = (t_back - start) // window_ns
        common = np.intersect1d(bins_f, bins_b)
        if len(common) == 0:
            return Intervals.empty()
        hi = _min_per_bin(bins_f, fwd_adj, common)
        lo = -_min_per_bin(bins_b, back_adj, common)
        t = start + common * window_ns + window_ns // 2
        lo_t, hi_t = lo + drift * (t - start), hi + drift * (t - start)
        first = fit_intervals(Intervals(t, lo_t, hi_t), "a", "b", SOURCE_MEDIA, window_ns)
        if first.fit is None:
            break
        drift = first.fit.drift
    slack = abs(drift) * window_ns  # the windows' own span at the remaining drift
    return Intervals(t, lo_t - slack, hi_t + slack)


def _min_per_bin(bins: np.ndarray, values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    order = np.lexsort((values, bins))
    sorted_bins = bins[order]
    first = np.ones(len(order), bool)
    first[1:] = sorted_bins[1:] != sorted_bins[:-1]
    minima = dict(zip(sorted_bins[first].tolist(), values[order][first].tolist(), strict=True))
    return np.array([minima[b] for b in wanted.tolist()], np.float64)


# --- choosing and composing -------------------------------------------------------------


def tightest(results: Iterable[SourceResult]) -> ClockFit | None:
    """The valid source with the smallest bound."""
    fits = [r.fit for r in results if r.fit is not None]
    return min(fits, key=lambda f: f.bound_ns) if fits else None


@dataclass
class PairAlignment:
    """Every source's answer for one pair of domains and the one chosen."""

    a: str
    b: str
    results: list[SourceResult]
    chosen: ClockFit | None

    def describe(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "chosen": self.chosen.source if self.chosen is not None else None,
            "sources": [r.describe() for r in self.results],
        }


@dataclass
class ClockMap:
    """Every domain mapped onto the reference domain (identity for the reference)."""

    reference: str
    to_reference: dict[str, ClockFit]  # domain -> fit with a = domain, b = reference
    pairs: list[PairAlignment] = field(default_factory=list)
    unaligned: dict[str, str] = field(default_factory=dict)  # domain -> why

    @property
    def domains(self) -> list[str]:
        return [self.reference, *sorted(self.to_reference)]

    def is_trivial(self) -> bool:
        """One domain only: nothing to align."""
        return not self.to_reference and not self.unaligned

    def describe(self, flag_share: float) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "flag_share": flag_share,
            "domains": {
                d: (
                    {"aligned": True, **fit.describe()}
                    if (fit := self.to_reference.get(d)) is not None
                    else {"aligned": d == self.reference, "why": self.unaligned.get(d)}
                )
                for d in [self.reference, *sorted(set(self.to_reference) | set(self.unaligned))]
            },
            "pairs": [p.describe() for p in self.pairs],
        }


def compose(reference: str, domains: Sequence[str], pairs: Sequence[PairAlignment]) -> ClockMap:
    """Map every domain onto ``reference`` through the chosen pair fits, taking the path
    whose bounds add up to the least (a domain no chosen fit reaches stays unaligned)."""
    edges: dict[str, list[ClockFit]] = {}
    for pair in pairs:
        if pair.chosen is None:
            continue
        edges.setdefault(pair.chosen.a, []).append(pair.chosen)
        edges.setdefault(pair.chosen.b, []).append(pair.chosen.inverted())
    # Dijkstra from the reference over inverted edges: best[d] is d -> reference
    best: dict[str, ClockFit] = {}
    cost = {reference: 0.0}
    frontier = [reference]
    while frontier:
        node = min(frontier, key=lambda d: cost[d])
        frontier.remove(node)
        for fit in edges.get(node, []):  # fit: node -> other; we want other -> reference
            other = fit.b
            back = fit.inverted()  # other -> node
            path = back if node == reference else back.then(best[node])
            if other != reference and path.bound_ns < cost.get(other, float("inf")):
                cost[other] = path.bound_ns
                best[other] = path
                frontier.append(other)
    unaligned = {
        d: "no source aligns it with the reference"
        for d in domains
        if d != reference and d not in best
    }
    return ClockMap(reference, best, list(pairs), unaligned)
