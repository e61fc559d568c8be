"""Latency budgets for CI: ``latlab check DIR --budget "e2e.p99<40ms"``.

A budget is ``[STREAM@]METRIC.STAT OP VALUE UNIT``:

* ``METRIC``: ``e2e`` (end to end), a phase (``sender``, ``transport``, ``receiver``,
  ``encode``, …), a segment kind (``capture``, ``processing``, ``queue``, ``network``,
  ``jitterbuffer``, ``playout``, ``other``: the time per unit in all segments of that
  kind) or a segment, named by the probe it ends at: ``receiver/rtpjitterbuffer0:src``,
  ``rtpjitterbuffer0:src`` or ``rtpjitterbuffer0``;
* ``STAT``: ``p50``, ``p90``, ``p99``, ``p99.9`` (or ``p999``), ``max``, ``mean``, ``min``;
* ``OP``: ``<`` or ``<=``; ``UNIT``: ``ns``, ``us``, ``ms`` or ``s``;
* ``STREAM@`` (optional): only the streams whose id contains ``STREAM``, or ``#N``, the
  N-th stream of the run. Without it, the budget applies to every stream that has the
  metric.

Statistics are those of the run's per-unit values (the units that completed their
journey), computed as summary.json computes them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from latlab.analysis.segments import StreamAnalysis
from latlab.analysis.stats import Samples
from latlab.report.compare import Metric, ReportInputError, stream_metrics
from latlab.stitch.kinds import KINDS

STAT_KEYS = {
    "p50": "p50_ms",
    "p90": "p90_ms",
    "p99": "p99_ms",
    "p99.9": "p999_ms",
    "p999": "p999_ms",
    "max": "max_ms",
    "mean": "mean_ms",
    "min": "min_ms",
}
UNIT_MS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1e3}
E2E_NAMES = ("e2e", "end_to_end", "end-to-end")
FORM = "METRIC.STAT<VALUE UNIT, e.g. e2e.p99<40ms or rtpjitterbuffer0.p50<=25ms"
_BUDGET = re.compile(
    r"^\s*(?:(?P<stream>[^@]+)@)?(?P<metric>.+)\.(?P<stat>p99\.9|p999|p50|p90|p99|max|mean|min)"
    r"\s*(?P<op><=|<)\s*(?P<value>[+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(?P<unit>ns|us|µs|ms|s)\s*$"
)


class BudgetError(ReportInputError):
    """A budget that cannot be read, or names nothing in the run."""


@dataclass(frozen=True)
class Budget:
    """One latency budget as given on the command line."""

    text: str
    stream: str | None
    metric: str
    stat: str
    op: str
    limit_ms: float

    def holds(self, value_ms: float) -> bool:
        """Whether a measured value is within the budget (no value never is)."""
        if not math.isfinite(value_ms):
            return False
        return value_ms < self.limit_ms if self.op == "<" else value_ms <= self.limit_ms


def parse_budget(text: str) -> Budget:
    """Read ``[STREAM@]METRIC.STAT OP VALUE UNIT`` (BudgetError when malformed)."""
    match = _BUDGET.match(text)
    if match is None:
        raise BudgetError(f"budget {text!r}: {_problem(text)}; expected {FORM}")
    stream = match["stream"].strip() if match["stream"] else None
    value = float(match["value"]) * UNIT_MS[match["unit"]]
    return Budget(text.strip(), stream, match["metric"].strip(), match["stat"], match["op"], value)


def _problem(text: str) -> str:
    """What is wrong with a budget that does not parse, as precisely as can be said."""
    if not re.search(r"<=?", text):
        return "no < or <= (budgets are upper limits)"
    left, _, right = re.split(r"(<=?)", text, maxsplit=1)
    if not re.fullmatch(r"\s*[+-]?(\d+(\.\d*)?|\.\d+)\s*(ns|us|µs|ms|s)\s*", right):
        return f"limit {right.strip()!r} is not a number with a unit (ns, us, ms, s)"
    stat = left.rsplit(".", 1)[-1].strip() if "." in left else ""
    if stat not in STAT_KEYS:
        return f"statistic {stat!r} is not one of {', '.join(STAT_KEYS)}"
    return "no metric before the statistic"


@dataclass
class BudgetResult:
    """A budget evaluated on one stream."""

    budget: Budget
    stream_number: int  # 1-based, in the run's order
    stream_id: str
    metric: str  # what the budget's metric resolved to
    value_ms: float
    units: int

    @property
    def passed(self) -> bool:
        """The measured value is within the limit."""
        return self.budget.holds(self.value_ms)

    def to_json(self) -> dict[str, Any]:
        """One row of ``latlab check --json``."""
        return {
            "budget": self.budget.text,
            "stream": self.stream_id,
            "stream_number": self.stream_number,
            "metric": self.metric,
            "stat": self.budget.stat,
            "op": self.budget.op,
            "limit_ms": self.budget.limit_ms,
            "value_ms": None if not math.isfinite(self.value_ms) else round(self.value_ms, 4),
            "units": self.units,
            "passed": self.passed,
        }


def check_budgets(
    budgets: Sequence[Budget], streams: Sequence[StreamAnalysis]
) -> list[BudgetResult]:
    """Evaluate every budget on every stream it applies to (BudgetError if it names nothing)."""
    results = []
    for budget in budgets:
        chosen = _streams_for(budget, streams)
        found = [(s, _resolve(budget, s)) for s in chosen]
        found = [(s, m) for s, m in found if m is not None]
        if not found:
            raise BudgetError(f"budget {budget.text!r}: {_unknown(budget, chosen)}")
        for stream, metric in found:
            stats = Samples(metric.values_ns).describe()
            value = float(stats[STAT_KEYS[budget.stat]])
            number = next(i for i, s in enumerate(streams, 1) if s is stream)
            results.append(
                BudgetResult(
                    budget,
                    number,
                    stream.journeys.stream_id,
                    metric.name,
                    value,
                    int(stats["count"]),
                )
            )
    return results


def _streams_for(budget: Budget, streams: Sequence[StreamAnalysis]) -> list[StreamAnalysis]:
    if budget.stream is None:
        return list(streams)
    selector = budget.stream
    if selector.startswith("#") and selector[1:].isdigit():
        number = int(selector[1:])
        if not 1 <= number <= len(streams):
            raise BudgetError(f"budget {budget.text!r}: the run has {len(streams)} stream(s)")
        return [streams[number - 1]]
    chosen = [s for s in streams if selector in s.journeys.stream_id]
    if not chosen:
        ids = "; ".join(s.journeys.stream_id for s in streams) or "none"
        raise BudgetError(
            f"budget {budget.text!r}: no stream matches {selector!r} (streams: {ids})"
        )
    return chosen


def _resolve(budget: Budget, stream: StreamAnalysis) -> Metric | None:
    """The stream's metric a budget names, or None if the stream has none by that name."""
    metrics = stream_metrics(stream)
    name = budget.metric
    if name in E2E_NAMES:
        return metrics[0]
    by_key = {m.key: m for m in metrics}
    if ("phase", name) in by_key:
        return by_key[("phase", name)]
    if name in KINDS:
        return by_key.get(("kind", name))
    segments = [m for m in metrics if m.group == "segment" and _names_probe(name, m.to_probe)]
    if len(segments) > 1:
        listed = ", ".join(m.to_probe for m in segments)
        raise BudgetError(f"budget {budget.text!r}: {name!r} names several segments ({listed})")
    return segments[0] if segments else None


def _names_probe(name: str, probe: str) -> bool:
    """``name`` is the probe's full name, its name without the process, or its element."""
    local = probe.split("/", 1)[-1]
    return name in (probe, local, local.rsplit(":", 1)[0])


def _unknown(budget: Budget, streams: Sequence[StreamAnalysis]) -> str:
    if not streams:
        return "the run has no stream"
    if budget.metric in KINDS:
        return f"no segment of kind {budget.metric!r} in the run"
    names = sorted(
        {_short(m.to_probe) for s in streams for m in stream_metrics(s) if m.group == "segment"}
    )
    phases = sorted({name for s in streams for name in s.phases})
    return (
        f"no segment, kind or phase {budget.metric!r} in the run (segments: "
        f"{', '.join(names)}; phases: {', '.join(phases)}; kinds: {', '.join(KINDS)}; e2e)"
    )


def _short(probe: str) -> str:
    return probe.split("/", 1)[-1]


def render_check(results: Sequence[BudgetResult], console: Any, *, wide: bool = False) -> None:
    """The table of budgets: measured value, limit, pass or fail; then which stream is which.

    The table fits the console (units left out, budgets and metrics folded); ``wide``:
    every column, at the table's natural width.
    """
    from latlab.report.fit import FitTable, emit

    table = FitTable(header_style="bold")
    for column in ("budget", "stream", "metric", "measured ms", "limit ms", "units", "result"):
        numeric = "ms" in column or column == "units"
        table.add_column(
            column,
            justify="right" if numeric else "left",
            overflow="fold",
            fold=column in ("budget", "metric"),
            drop=1 if column == "units" else None,
        )
    for r in results:
        measured = "-" if not math.isfinite(r.value_ms) else f"{r.value_ms:.3f}"
        verdict = "[green]pass[/green]" if r.passed else "[bold red]FAIL[/bold red]"
        table.add_row(
            _escape(r.budget.text),
            f"#{r.stream_number}",
            _escape(r.metric),
            measured,
            f"{r.budget.op} {r.budget.limit_ms:g}",
            str(r.units),
            verdict,
        )
    emit(console, table, wide=wide)
    streams = dict(sorted({(r.stream_number, r.stream_id) for r in results}))
    for number, stream_id in streams.items():
        console.print(f"#{number}: {stream_id}", highlight=False, markup=False, soft_wrap=True)


def failures_line(results: Sequence[BudgetResult]) -> str | None:
    """One line naming the budgets exceeded (None when all hold)."""
    failed = [r for r in results if not r.passed]
    if not failed:
        return None
    parts = [
        f"{r.budget.text} ({'no units' if not np.isfinite(r.value_ms) else f'{r.value_ms:.3f} ms'}"
        f" on {r.stream_id})"
        for r in failed
    ]
    return f"{len(failed)} of {len(results)} budget checks exceeded: " + "; ".join(parts)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
