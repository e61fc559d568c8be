"""Clock alignment against planted truth: for a matrix of offset, drift and path
asymmetry cases, the truth, latlab's estimate, its stated bound and whether it held.

Each case is a pair of lab hosts (a, b) with their own clocks (docs/clocks.md: a time
namespace for the offset, libllclockskew for the rate), joined by an emulated link of the
case's delay each way; every pair runs at once in one lab run of ``--duration`` seconds
(the clock agents exchange 5 times a second over the link). The estimate is what latlab
derives from the clock logs alone (the exchange source); the truth comes from run.json's
planted clocks. As root:

    .venv/bin/python bench/bench_clocks.py                  # 60 s, the full matrix
    .venv/bin/python bench/bench_clocks.py --duration 20 --quick
    .venv/bin/python bench/bench_clocks.py --synthetic      # the fit alone, no lab

Columns: offset (ms, b against a) and drift (ppm) planted, the one-way delays, the
recovered offset's worst error over the run (us), the stated bound (us), whether it held,
the drift error and its bound (ppm).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from latlab.analysis.clock_apply import exchange_result
from latlab.analysis.clocks import ClockFit, exchange_intervals, fit_intervals
from latlab.ingest.clock_log import read_clock_logs
from latlab.rundir import read_run


@dataclass(frozen=True)
class Case:
    """b's clock against a's (a runs at the machine's clock shifted by ``a_offset_ms``)."""

    offset_ms: float  # b - a
    drift_ppm: float  # b against a
    forward_ms: float  # a -> b one-way delay (emulated)
    back_ms: float

    @property
    def label(self) -> str:
        return (f"{self.offset_ms:+g}ms {self.drift_ppm:+g}ppm "
                f"{self.forward_ms:g}/{self.back_ms:g}ms")  # fmt: skip


# a's own planted clock, so that both ends of every pair are moved
A_OFFSET_MS, A_DRIFT_PPM = 37.5, -20.0

FULL = [
    Case(o, d, f, b)
    for o, d, (f, b) in itertools.product(
        (-500, 0.25, 500), (-100, 0, 100), ((0, 0), (2, 2), (5, 0), (0, 5))
    )
]
QUICK = [
    Case(-500, -100, 0, 0), Case(250, 80, 0, 0), Case(500, 100, 5, 0), Case(-250, -50, 0, 5),
    Case(0.25, 0, 2, 2),
]  # fmt: skip


def scenario_text(cases: list[Case], duration_s: float) -> str:
    """One lab run holding every case as a pair of hosts and a link."""
    lines = [f'name = "clock-matrix"\nduration_s = {duration_s}\n']
    for i, case in enumerate(cases):
        a_drift = A_DRIFT_PPM
        # b's rate against the machine: (1 + a)(1 + d) - 1
        b_drift = ((1 + a_drift * 1e-6) * (1 + case.drift_ppm * 1e-6) - 1) * 1e6
        lines.append(
            f"[hosts.a{i}]\nclock = {{ offset_ms = {A_OFFSET_MS}, drift_ppm = {a_drift} }}"
        )
        lines.append(f"[hosts.b{i}]\nclock = {{ offset_ms = {A_OFFSET_MS + case.offset_ms}, "
                     f"drift_ppm = {b_drift:.6f} }}")  # fmt: skip
    for i, case in enumerate(cases):
        link = f'[[links]]\nbetween = ["a{i}", "b{i}"]\n'
        if case.forward_ms or case.back_ms:
            link += f"delay_ms = {case.forward_ms}\n[links.reverse]\ndelay_ms = {case.back_ms}\n"
        lines.append(link)
    lines.append(
        '[processes.idle]\nhost = "a0"\ncommand = ["sh", "-c", "echo ready; exec sleep 3600"]'
    )
    return "\n".join(lines) + "\n"


def truth(run: dict, a: str, b: str, t_a: np.ndarray) -> np.ndarray:
    """theta = t_b - t_a at a's times, from the planted clocks in run.json: a host's
    clock reads C(T) = T + O + k (T + O - E) at the machine's T (E: its epoch)."""
    ca, cb = run["hosts"][a]["clock"], run["hosts"][b]["clock"]
    oa, ka, ea = ca["offset_ms"] * 1e6, ca["drift_ppm"] * 1e-6, ca["epoch_ns"]
    ob, kb, eb = cb["offset_ms"] * 1e6, cb["drift_ppm"] * 1e-6, cb["epoch_ns"]
    t_a = np.asarray(t_a, np.float64)
    machine = (t_a - oa + ka * (ea - oa)) / (1 + ka)  # invert C_a
    t_b = machine + ob + kb * (machine + ob - eb)
    return t_b - t_a


def true_drift(run: dict, a: str, b: str) -> float:
    ka = run["hosts"][a]["clock"]["drift_ppm"] * 1e-6
    kb = run["hosts"][b]["clock"]["drift_ppm"] * 1e-6
    return (1 + kb) / (1 + ka) - 1


@dataclass
class Row:
    case: Case
    error_us: float
    bound_us: float
    drift_error_ppm: float
    drift_bound_ppm: float
    used: int
    min_rtt_us: float

    @property
    def held(self) -> bool:
        return self.error_us <= self.bound_us


def evaluate(fit: ClockFit, case: Case, theta_true, drift_true: float) -> Row:
    t = np.linspace(fit.span_ns[0], fit.span_ns[1], 400)
    error = float(np.max(np.abs(fit.offset_at(t) - theta_true(t))))
    return Row(case, error / 1e3, fit.bound_ns / 1e3, abs(fit.drift - drift_true) * 1e6,
               fit.drift_bound * 1e6, fit.used, fit.min_width_ns / 1e3)  # fmt: skip


def lab_rows(cases: list[Case], duration_s: float, out: Path) -> list[Row]:
    """Run the matrix in the lab (root) and evaluate each pair."""
    from latlab.lab.runner import run_scenario
    from latlab.lab.scenario import parse_scenario

    scenario = parse_scenario(scenario_text(cases, duration_s), "clock-matrix.toml")
    run_scenario(scenario, out, progress=False)
    run = read_run(out) or {}
    logs = read_clock_logs(out)
    rows = []
    for i, case in enumerate(cases):
        a, b = f"a{i}", f"b{i}"
        result = exchange_result(logs, f"monotonic@{a}", f"monotonic@{b}")
        if result.fit is None:
            raise SystemExit(f"case {case.label}: no fit: {result.why}")
        rows.append(evaluate(result.fit, case, lambda t, a=a, b=b: truth(run, a, b, t),
                             true_drift(run, a, b)))  # fmt: skip
    return rows


def synthetic_rows(cases: list[Case], duration_s: float) -> list[Row]:
    """The fit alone on simulated exchanges (latlab.synthetic_clocks)."""
    from latlab.synthetic_clocks import PlantedClock, simulate_exchanges

    rows = []
    for case in cases:
        clock = PlantedClock(case.offset_ms * 1e6, case.drift_ppm)
        t = simulate_exchanges(clock, case.forward_ms * 1e6 + 40e3, case.back_ms * 1e6 + 40e3,
                               duration_s=duration_s)  # fmt: skip
        fit = fit_intervals(exchange_intervals(*t), "a", "b", "exchange").fit
        assert fit is not None
        rows.append(evaluate(fit, case, clock.theta, case.drift_ppm * 1e-6))
    return rows


def print_rows(rows: list[Row], title: str) -> None:
    print(title)
    names = ("offset ms", "drift ppm", "fwd/back ms", "error us", "bound us", "held",
             "drift err", "bound ppm", "rtt us")  # fmt: skip
    widths = (10, 10, 11, 10, 10, 5, 10, 10, 8)
    print(" ".join(f"{n:>{w}}" for n, w in zip(names, widths, strict=True)))
    for r in rows:
        c = r.case
        cells = (f"{c.offset_ms:g}", f"{c.drift_ppm:g}", f"{c.forward_ms:g}/{c.back_ms:g}",
                 f"{r.error_us:.1f}", f"{r.bound_us:.1f}", "yes" if r.held else "NO",
                 f"{r.drift_error_ppm:.3f}", f"{r.drift_bound_ppm:.2f}",
                 f"{r.min_rtt_us:.0f}")  # fmt: skip
        print(" ".join(f"{cell:>{w}}" for cell, w in zip(cells, widths, strict=True)))
    held = sum(r.held for r in rows)
    symmetric = [r for r in rows if r.case.forward_ms == r.case.back_ms == 0]
    print(f"bound held in {held} of {len(rows)} cases")
    if symmetric:
        worst = max(r.error_us for r in symmetric)
        drift = max(r.drift_error_ppm for r in symmetric)
        print(f"direct veth (symmetric): offset error <= {worst:.1f} us, "
              f"drift error <= {drift:.3f} ppm")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--quick", action="store_true", help="5 cases instead of 36")
    parser.add_argument("--synthetic", action="store_true", help="the fit alone, no lab")
    parser.add_argument("--out", type=Path, default=None, help="keep the lab run here")
    args = parser.parse_args()
    cases = QUICK if args.quick else FULL
    if args.synthetic:
        print_rows(synthetic_rows(cases, args.duration), f"synthetic, {args.duration:g} s")
        return 0
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-clocks-")) / "run"
    rows = lab_rows(cases, args.duration, out)
    print_rows(rows, f"lab, {args.duration:g} s, {len(cases)} host pairs at once ({out})")
    return 0 if all(r.held for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
