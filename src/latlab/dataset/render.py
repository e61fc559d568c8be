"""A question's answer as a table that fits the terminal, as JSON, or as CSV."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from latlab.dataset.questions import SCHEMA, Answer

# column -> (header, drop rank when the console is narrow, a name column that folds)
COLUMNS: dict[str, tuple[str, int | None, bool]] = {
    "stream": ("stream", None, True),
    "metric": ("metric", None, True),
    "period": ("period", None, True),
    "run": ("run", None, True),
    "run_id": ("run id", 3, False),
    "run_dir": ("run directory", None, True),
    "scenario": ("scenario", None, True),
    "date": ("date", 2, False),
    "started_at": ("started", 1, True),
    "point": ("point", None, True),
    "status": ("status", 1, False),
    "revision": ("revision", 1, True),
    "streams": ("streams", 2, False),
    "runs": ("runs", 3, False),
    "units": ("units", 2, False),
    "unit": ("unit", None, False),
    "unit_start_ms": ("media pos ms", 2, False),
    "value_ms": ("ms", None, False),
    "slowest_segment": ("slowest segment", 1, True),
    "slowest_ms": ("slowest ms", 1, False),
    "min_ms": ("min ms", 1, False),
    "p50_ms": ("p50 ms", None, False),
    "p90_ms": ("p90 ms", 2, False),
    "p99_ms": ("p99 ms", None, False),
    "p999_ms": ("p99.9 ms", 1, False),
    "max_ms": ("max ms", 1, False),
    "mean_ms": ("mean ms", 2, False),
    "a_p50_ms": ("A p50", None, False),
    "b_p50_ms": ("B p50", None, False),
    "diff_p50": ("Δ p50 ms", None, False),
    "a_p99_ms": ("A p99", 2, False),
    "b_p99_ms": ("B p99", 2, False),
    "diff_p99": ("Δ p99 ms", None, False),
    "diff_mean": ("Δ mean ms", 1, False),
}


def to_json(answer: Answer, engine: str, dataset: str) -> str:
    """The answer as one JSON document (schema ``latlab.query/1``)."""
    document = {
        "schema": SCHEMA,
        "question": answer.question,
        "engine": engine,
        "dataset": dataset,
        "title": answer.title,
        **answer.extra,
        "columns": answer.columns,
        "rows": answer.rows,
    }
    return json.dumps(document, indent=1) + "\n"


def to_csv(answer: Answer) -> str:
    """The answer as CSV: a header, then a line per row (nested figures flattened:
    ``diff_p50_estimate``, ``diff_p50_low``, ``diff_p50_high``, ``diff_p50_significant``)."""
    rows = [_flat(row) for row in answer.rows]
    header = list(dict.fromkeys(k for row in rows for k in row)) or list(answer.columns)
    out = io.StringIO()
    writer = csv.DictWriter(out, header, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def _flat(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, dict) and "estimate" in value:
            low, high = value["ci"]
            out |= {
                f"{key}_estimate": value["estimate"],
                f"{key}_low": low,
                f"{key}_high": high,
                f"{key}_significant": value["significant"],
            }
        elif isinstance(value, dict):
            out |= {f"{key}_{k}": v for k, v in value.items()}
        else:
            out[key] = value
    return out


def render_answer(answer: Answer, console: Any, *, wide: bool = False) -> None:
    """The answer as a table that fits the console (low-priority columns left out, names
    folded, never cut), one per stream where the answer is per stream; ``wide``: every
    column at its natural width."""
    from rich.markup import escape

    from latlab.report.fit import emit

    if not answer.per_stream:
        emit(console, _table(escape(answer.title), answer.columns, answer.rows), wide=wide)
    else:
        console.print(answer.title, highlight=False, markup=False)
        columns = [c for c in answer.columns if c != "stream"]
        for stream in dict.fromkeys(row["stream"] for row in answer.rows):
            rows = [row for row in answer.rows if row["stream"] == stream]
            emit(console, _table(escape(stream), columns, rows), wide=wide)
    for note in answer.notes:
        console.print(note, style="dim", highlight=False, markup=False)
    if not answer.rows:
        console.print("no rows", highlight=False)


def _table(title: str, columns: list[str], rows: list[dict[str, Any]]) -> Any:
    from rich import box
    from rich.markup import escape

    from latlab.report.fit import FitTable

    table = FitTable(
        title=title, header_style="bold", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False
    )
    for name in columns:
        header, drop, fold = COLUMNS.get(name, (name, None, True))
        numeric = not fold and name not in ("run_id", "date", "status")
        table.add_column(header, justify="right" if numeric else "left", drop=drop, fold=fold)
    for index, row in enumerate(rows):
        last = index + 1 == len(rows) or rows[index + 1].get("figure") != row.get("figure")
        table.add_row(
            *(escape(_cell(name, row.get(name))) for name in columns),
            end_section="figure" in row and last,
        )
    return table


def _cell(name: str, value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict) and "estimate" in value:
        if value["estimate"] is None:
            return "-"
        low, high = value["ci"]
        mark = " *" if value["significant"] else "  "
        return f"{value['estimate']:+.3f}{mark}\n[{low:+.3f}, {high:+.3f}]"
    if name.endswith("_ms") and isinstance(value, int | float):
        return f"{value:.3f}"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
