"""Journeys across clock domains: the run's clock map, aligned times, errors per span.

A run whose processes ran in more than one clock domain (separate machines, or lab hosts
with planted clocks) is stitched on each process's own times; then, here, every domain
gets a map onto the run's reference domain (:mod:`latlab.analysis.clocks`: the tightest
valid source per pair of domains) and each journey's times are moved onto it.

Figures inside one domain stay exact: along a journey, each run of consecutive probes in
one domain is moved by one offset per unit (the map at the run's *anchor*: its last
probe for the journey's first run, its first probe for every later run), so differences
inside the run are the domain's own. A span that crosses domains carries the bound of
the map between them, plus the drift the anchor leaves out (|drift| x the time from the
anchor), largest over the units: ``clock_err_ns``.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from latlab.analysis.clocks import (
    SOURCE_EXCHANGE,
    SOURCE_KERNEL,
    SOURCE_MEDIA,
    ClockFit,
    ClockMap,
    Intervals,
    KernelView,
    PairAlignment,
    SourceResult,
    compose,
    exchange_intervals,
    fit_intervals,
    kernel_intervals,
    one_way_intervals,
    tightest,
)
from latlab.ingest.clock_log import ClockLogs, DomainSamples, read_clock_logs
from latlab.ingest.events import EventTable
from latlab.rundir import process_clock_domains
from latlab.stitch.journeys import Journeys
from latlab.stitch.position import MISSING

# A segment whose clock error is larger than this share of its p50 is flagged.
FLAG_SHARE = 0.1
# A network sink's render is when its send call returned, after the receiver may have
# read the packet (docs/architecture.md, known limits: -4 to -7 us): one-way media
# observations are widened by this much so that a delay seen below zero stays inside.
MEDIA_SLACK_NS = 50_000


# The domain of a clock whose machine is not named: a link log's, a browser page's
# (mapped onto CLOCK_MONOTONIC), a trace without a hostname. In a run of one machine it is
# that machine's clock (:func:`machine_domain`).
HOSTLESS = "monotonic@localhost"


def machine_domain(table: EventTable, meta: dict[str, Any]) -> str:
    """The clock domain of the machine that recorded the run: run.json's, else the one
    its traces name most (a run of one machine: every trace names it), else HOSTLESS."""
    named = [p.clock_domain for p in table.processes if p.hostname]
    if (meta.get("clock") or {}).get("domain"):
        return str(meta["clock"]["domain"])
    return Counter(named).most_common(1)[0][0] if named else HOSTLESS


def process_domains(table: EventTable, meta: dict[str, Any] | None) -> dict[str, str]:
    """The clock domain of each traced process, by process name (run.json's, else the
    trace's own ``monotonic@HOSTNAME``; a process that names no machine, such as a link
    log, is on the run's machine)."""
    meta = meta or {}
    by_file = process_clock_domains(meta)
    declared = (meta.get("clock") or {}).get("domain")
    default = machine_domain(table, meta)
    link_domain = next(
        (str(link["clock_domain"]) for link in meta.get("links") or []
         if isinstance(link, dict) and link.get("clock_domain")),
        None,
    )  # fmt: skip
    found = {}
    for p in table.processes:
        if p.kind == "link" and link_domain:
            found[p.name] = link_domain
        else:
            own = p.clock_domain if p.hostname else default
            found[p.name] = by_file.get(p.path.name) or declared or own
    return found


def column_domains(journeys: Journeys, domains: dict[str, str], default: str) -> list[str]:
    """The clock domain of each probe (column) of a stream's journeys; a probe of no traced
    process (a browser's) is in ``default``, the run's own domain."""
    return [domains.get(name.split("/", 1)[0], default) for name in journeys.probe_names]


def clock_map(
    run_dir: Path,
    meta: dict[str, Any] | None,
    domains: Sequence[str],
    journeys: Sequence[tuple[Journeys, list[str]]],
    logs: ClockLogs | None = None,
) -> ClockMap | None:
    """Every domain of the run mapped onto its reference (None with one domain)."""
    present = sorted(set(domains))
    if len(present) <= 1:
        return None
    logs = read_clock_logs(run_dir) if logs is None else logs
    reference = _reference(meta or {}, present)
    pairs = []
    for a, b in itertools.combinations(present, 2):
        results = [
            exchange_result(logs, a, b),
            kernel_result(logs, a, b),
            media_result(journeys, a, b),
        ]
        pairs.append(PairAlignment(a, b, results, tightest(results)))
    return compose(reference, present, pairs)


def _reference(meta: dict[str, Any], present: list[str]) -> str:
    clock = meta.get("clock") or {}
    for candidate in [clock.get("reference"), *(clock.get("domains") or {})]:
        if candidate in present:
            return str(candidate)
    return present[0]


def exchange_result(logs: ClockLogs, a: str, b: str) -> SourceResult:
    """The two-way exchanges between ``a`` and ``b`` (either started them)."""
    parts = []
    for ex in logs.exchanges:
        if (ex.client, ex.server) == (a, b):
            parts.append(exchange_intervals(ex.t1, ex.t2, ex.t3, ex.t4))
        elif (ex.client, ex.server) == (b, a):
            seen = exchange_intervals(ex.t1, ex.t2, ex.t3, ex.t4)  # theta' = a - b at b's time
            mid = (seen.lo + seen.hi) // 2
            parts.append(Intervals(seen.t + mid, -seen.hi, -seen.lo))
    if not parts:
        return SourceResult(SOURCE_EXCHANGE, None, "no two-way exchange between them")
    obs = Intervals(*(np.concatenate([getattr(p, k) for p in parts]) for k in ("t", "lo", "hi")))
    return fit_intervals(obs, a, b, SOURCE_EXCHANGE)


def kernel_view(samples: DomainSamples) -> KernelView:
    return KernelView(
        samples.mono_ns, samples.real_ns, samples.bracket_ns, samples.maxerror_us,
        samples.synced, samples.planted,
    )  # fmt: skip


def kernel_result(logs: ClockLogs, a: str, b: str) -> SourceResult:
    """Both kernels' synchronisation (CLOCK_REALTIME within each one's maximum error)."""
    views = {}
    for d in (a, b):
        samples = logs.domains.get(d)
        if samples is None:
            return SourceResult(SOURCE_KERNEL, None, f"{d}: no clock samples")
        view = kernel_view(samples)
        why = view.why_unusable()
        if why is not None:
            return SourceResult(SOURCE_KERNEL, None, f"{d}: {why}")
        views[d] = view
    obs = kernel_intervals(views[a], views[b])
    return fit_intervals(obs, a, b, SOURCE_KERNEL, window_ns=1)


def media_result(journeys: Sequence[tuple[Journeys, list[str]]], a: str, b: str) -> SourceResult:
    """Units crossing from ``a`` to ``b`` and from ``b`` to ``a`` (media both ways)."""
    fwd: list[tuple[np.ndarray, np.ndarray]] = []
    back: list[tuple[np.ndarray, np.ndarray]] = []
    for j, doms in journeys:
        for k in range(len(doms) - 1):
            if {doms[k], doms[k + 1]} != {a, b}:
                continue
            t0, t1 = j.times[:, k], j.times[:, k + 1]
            ok = (t0 != MISSING) & (t1 != MISSING)
            if doms[k] == a:  # A -> B: at A's send, t_B - t_A
                fwd.append((t0[ok], (t1 - t0)[ok]))
            else:  # B -> A: at A's arrival, t_A - t_B
                back.append((t1[ok], (t1 - t0)[ok]))
    if not fwd or not back:
        return SourceResult(SOURCE_MEDIA, None, "media does not cross both ways")
    tf, yf = (np.concatenate(x) for x in zip(*fwd, strict=True))
    tb, yb = (np.concatenate(x) for x in zip(*back, strict=True))
    obs = one_way_intervals(tf, yf + MEDIA_SLACK_NS, tb, yb + MEDIA_SLACK_NS)  # wider
    return fit_intervals(obs, a, b, SOURCE_MEDIA)


@dataclass
class StreamClock:
    """A stream's probes' domains and what it takes to state a span's clock error."""

    domains: list[str]
    fits: list[ClockFit | None]  # per column: its domain's map to the reference (None: ref)
    anchor_gap: np.ndarray  # (units, probes): |time - anchor| of the column's run, ns
    times: np.ndarray  # (units, probes): the column's own (unmoved) times
    unaligned: set[int] = field(default_factory=set)  # columns no map reaches
    reference: str = ""

    def crosses(self, i: int, j: int) -> bool:
        """Whether the span from column ``i`` to ``j`` is measured on two clocks."""
        return self.domains[i] != self.domains[j] or self._anchor_run(i) != self._anchor_run(j)

    def _anchor_run(self, k: int) -> int:
        runs = 0
        for m in range(1, k + 1):
            runs += self.domains[m] != self.domains[m - 1]
        return runs

    def span_err_ns(self, i: int, j: int, units: np.ndarray) -> float:
        """The largest clock error over ``units`` of the span from column i to column j."""
        if not self.crosses(i, j):
            return 0.0
        if i in self.unaligned or j in self.unaligned:
            return float("inf")
        total = np.zeros(int(units.sum()))
        if self.domains[i] != self.domains[j]:
            total += self._bound(i, units) + self._bound(j, units)
        for k in (i, j):
            fit = self.fits[k]
            if fit is not None:
                total += abs(fit.drift) * self.anchor_gap[units, k]
        return float(total.max()) if len(total) else 0.0

    def _bound(self, k: int, units: np.ndarray) -> np.ndarray | float:
        fit = self.fits[k]
        if fit is None:
            return 0.0
        return np.asarray(fit.bound_at(self.times[units, k].astype(np.float64)))


def align(j: Journeys, domains: list[str], cmap: ClockMap) -> tuple[Journeys, StreamClock]:
    """``j`` with its times moved onto the reference domain (see the module doc)."""
    times = j.times
    aligned = times.copy()
    gap = np.zeros(times.shape, np.float64)
    fits: list[ClockFit | None] = []
    unaligned: set[int] = set()
    runs = _runs(domains)
    for number, (start, stop, domain) in enumerate(runs):
        fit = cmap.to_reference.get(domain)
        fits += [fit] * (stop - start)
        if domain == cmap.reference:
            continue
        if fit is None:
            unaligned.update(range(start, stop))
            continue
        block = times[:, start:stop]
        anchor = _anchor(block, last=number == 0)
        offset = np.rint(fit.offset_at(anchor.astype(np.float64))).astype(np.int64)
        present = block != MISSING
        aligned[:, start:stop] = np.where(present, block + offset[:, None], MISSING)
        gap[:, start:stop] = np.where(present, np.abs(block - anchor[:, None]), 0)
    moved = replace(j, times=aligned, clock_domains=list(domains))
    moved.extra = {name: _move_extra(t, name, j, domains, aligned) for name, t in j.extra.items()}
    return moved, StreamClock(domains, fits, gap, times, unaligned, cmap.reference)


def _runs(domains: list[str]) -> list[tuple[int, int, str]]:
    runs = []
    start = 0
    for k in range(1, len(domains) + 1):
        if k == len(domains) or domains[k] != domains[start]:
            runs.append((start, k, domains[start]))
            start = k
    return runs


def _anchor(block: np.ndarray, last: bool) -> np.ndarray:
    """Per unit the time at the run's anchor column, or its nearest present column."""
    order = range(block.shape[1] - 1, -1, -1) if last else range(block.shape[1])
    anchor = np.full(block.shape[0], MISSING, np.int64)
    for k in order:
        fill = (anchor == MISSING) & (block[:, k] != MISSING)
        anchor[fill] = block[fill, k]
    return np.where(anchor == MISSING, 0, anchor)


def _move_extra(
    t: np.ndarray, name: str, j: Journeys, domains: list[str], aligned: np.ndarray
) -> np.ndarray:
    """An instant off the path moves with the column of its process nearest the end."""
    process = name.split("/", 1)[0]
    columns = [k for k, probe in enumerate(j.probe_names) if probe.split("/", 1)[0] == process]
    if not columns or len(t) != len(j.times):
        return t
    k = columns[-1]
    shift = np.where(j.times[:, k] != MISSING, aligned[:, k] - j.times[:, k], 0)
    return np.where(t != MISSING, t + shift, MISSING)


def describe_domains(cmap: ClockMap | None) -> dict[str, Any] | None:
    """summary.json's ``clocks`` (None for a run of one domain)."""
    return None if cmap is None else cmap.describe(FLAG_SHARE)


class Aligner:
    """Aligns a run's journeys (given to :func:`latlab.analysis.segments.analyze`) and
    keeps the clock map it made for the summary."""

    def __init__(self, run_dir: Path, meta: dict[str, Any] | None, table: EventTable) -> None:
        self.run_dir = Path(run_dir)
        self.meta = meta or {}
        self.domains = process_domains(table, self.meta)
        self.default = machine_domain(table, self.meta)
        self.cmap: ClockMap | None = None

    def __call__(self, journeys: Sequence[Journeys]) -> list[tuple[Journeys, StreamClock | None]]:
        columns = [column_domains(j, self.domains, self.default) for j in journeys]
        present = set(self.domains.values()) | {d for cols in columns for d in cols}
        self.cmap = clock_map(
            self.run_dir, self.meta, sorted(present), list(zip(journeys, columns, strict=True))
        )
        if self.cmap is None:
            return [(j, None) for j in journeys]
        return [align(j, cols, self.cmap) for j, cols in zip(journeys, columns, strict=True)]


def annotate_summary(summary: dict[str, Any], streams: Sequence[Any], aligner: Aligner) -> None:
    """Add the clock map and every span's clock error to summary.json (a run of more than
    one clock domain; one of a single domain is left as it is: its figures are exact)."""
    if aligner.cmap is None:
        return
    summary["clocks"] = describe_domains(aligner.cmap)
    for entry in summary.get("traces", []):
        entry["clock_domain"] = aligner.domains.get(entry.get("process"), entry.get("clock_domain"))
    for out, stream in zip(summary.get("streams", []), streams, strict=False):
        clock = getattr(stream, "clock", None)
        if clock is None:
            continue
        units = stream.journeys.complete
        names = stream.journeys.probe_names
        index = {name: k for k, name in enumerate(names)}
        out["clock_domains"] = sorted(set(clock.domains))
        by_kind: dict[str, float] = {}
        for k, segment in enumerate(out.get("segments", [])):
            err = _mark(segment, clock, k, k + 1, units)
            by_kind[segment.get("kind", "")] = by_kind.get(segment.get("kind", ""), 0.0) + err
        _mark(out["end_to_end"], clock, 0, len(names) - 1, units)
        for phase in out.get("phases", {}).values():
            if phase.get("from") in index and phase.get("to") in index:
                _mark(phase, clock, index[phase["from"]], index[phase["to"]], units)
        for kind, figures in out.get("kinds", {}).items():
            _set_err(figures, by_kind.get(kind, 0.0), by_kind.get(kind, 0.0) > 0)


def _mark(entry: dict[str, Any], clock: StreamClock, i: int, j: int, units: np.ndarray) -> float:
    err = clock.span_err_ns(i, j, units)
    _set_err(entry, err, clock.crosses(i, j))
    return err


def _set_err(entry: dict[str, Any], err_ns: float, crosses: bool) -> None:
    entry["cross_domain"] = bool(crosses)
    if not np.isfinite(err_ns):
        entry["clock_err_ms"] = None
        entry["clock_flagged"] = True
        return
    entry["clock_err_ms"] = round(err_ns / 1e6, 6)
    p50 = entry.get("p50_ms")
    entry["clock_flagged"] = bool(
        crosses and p50 is not None and err_ns / 1e6 > FLAG_SHARE * abs(float(p50))
    )
