"""``latlab ingest`` and ``latlab query``: what the command line calls."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from latlab.dataset import layout
from latlab.dataset.engines import DEFAULT_MASTER, Engine, open_engine
from latlab.dataset.ingest import IngestOptions, ingest, parse_labels, summary_line
from latlab.dataset.layout import DatasetError
from latlab.dataset.questions import Answer, Metric, Options, ask, parse_pairs, sql_answer
from latlab.dataset.render import render_answer, to_csv, to_json


def run_ingest(
    paths: Sequence[Path],
    dataset: Path,
    *,
    labels: Sequence[str] = (),
    revision: str | None = None,
    replace: bool = False,
    say: Callable[[str], None],
    warn: Callable[[str], None],
    report: Callable[[str], None],
) -> None:
    """Ingest ``paths``; ``say`` the outcome, ``warn`` each run skipped. DatasetError when
    nothing was ingested and something was skipped (one line: the reason, when one run)."""
    options = IngestOptions(parse_labels(labels), revision, replace)
    result = ingest(paths, dataset, options, report=report)
    if not result.ingested and len(result.skipped) == 1:
        raise DatasetError(result.skipped[0])
    for reason in result.skipped:
        warn(f"skipped {reason}")
    if not result.ingested and result.skipped:
        raise DatasetError(f"{dataset}: nothing ingested: all {len(result.skipped)} runs skipped")
    say(summary_line(result, dataset))


@dataclass
class QueryRequest:
    """What ``latlab query`` was asked."""

    dataset: Path
    question: str | None
    sql: str | None = None
    engine: str = "duckdb"
    master: str = DEFAULT_MASTER
    kind: str | None = None
    segment: str | None = None
    where: list[str] = field(default_factory=list)
    by: list[str] = field(default_factory=list)
    stream: str | None = None
    every: str = "day"
    limit: int = 20
    a: list[str] = field(default_factory=list)
    b: list[str] = field(default_factory=list)
    bootstrap: dict[str, Any] = field(default_factory=dict)  # resamples, confidence, seed


def answer_of(request: QueryRequest) -> tuple[Answer, str]:
    """The answer to a request, and the engine's name."""
    if (request.question is None) == (request.sql is None):
        raise DatasetError(
            "query: ask a question (runs, percentiles, trend, worst, regression) or give --sql"
        )
    if request.kind and request.segment:
        raise DatasetError("query: --kind and --segment name two metrics; give one")
    manifest = layout.read_manifest(request.dataset)
    if not manifest.runs:
        raise DatasetError(f"{request.dataset}: no runs yet (latlab ingest RUN_DIR --into DATASET)")
    engine = open_engine(request.engine, request.dataset, manifest, request.master)
    try:
        if request.sql is not None:
            return sql_answer(engine, request.sql), engine.name
        return ask(engine, request.question or "", _options(request)), engine.name
    finally:
        engine.close()


def _options(request: QueryRequest) -> Options:
    return Options(
        metric=Metric(request.kind, request.segment),
        where=parse_pairs(request.where, "--where"),
        by=list(dict.fromkeys(request.by)),
        stream=request.stream,
        every=request.every,
        limit=request.limit,
        a=parse_pairs(request.a, "--a"),
        b=parse_pairs(request.b, "--b"),
        **request.bootstrap,
    )


def run_query(
    request: QueryRequest, console: Any, *, as_json: bool, as_csv: bool, wide: bool
) -> None:
    """Answer and print: a table, ``--json`` or ``--csv``."""
    if as_json and as_csv:
        raise DatasetError("query: --json and --csv are two formats; give one")
    answer, engine = answer_of(request)
    if as_json:
        sys.stdout.write(to_json(answer, engine, str(request.dataset)))
    elif as_csv:
        sys.stdout.write(to_csv(answer))
    else:
        render_answer(answer, console, wide=wide)


def engine_for(dataset: Path, name: str = "duckdb", master: str = DEFAULT_MASTER) -> Engine:
    """An engine over a dataset (for scripts and benchmarks)."""
    return open_engine(name, dataset, layout.read_manifest(dataset), master)
