"""Experiments: the lab's runs and their analysis together (what ``latlab run`` does).

The lab writes run directories and analyses nothing; the analysis reads run directories
and starts nothing. A sweep needs both, point by point: the figures sweep.json keeps of
each point come from that point's analysis. This module is where the two meet, above
both, beside the command line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from latlab.analysis.sweep_figures import point_figures
from latlab.lab.scenario import Scenario
from latlab.lab.sweep import SweepPoint, SweepResult, run_sweep
from latlab.pipeline import summary_of


def run_analysed_sweep(
    scenario: Scenario,
    out_dir: Path,
    *,
    unit_ms: float | None = None,
    progress: bool = True,
    console: Console | None = None,
) -> SweepResult:
    """Run ``scenario``'s sweep; each point is analysed (``unit_ms``, else its scenario's
    unit) and sweep.json keeps its figures."""

    def analyse(point: SweepPoint, point_dir: Path) -> dict[str, Any]:
        spec = point.scenario.analysis
        summary = summary_of(point_dir, unit_ms or spec.unit_ms)
        return point_figures(summary, spec.configured_latency_ms, spec.period_ms)

    return run_sweep(scenario, out_dir, analyse=analyse, progress=progress, console=console)
