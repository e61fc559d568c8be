"""The ready questions of ``latlab query``, as SQL both engines run unchanged.

Every question is about one per-unit figure, the **metric**: end to end (default), a
segment kind (``--kind``: per unit, the sum of its segments of that kind) or a segment
(``--segment``: its to-probe, whole or after the process name), over the complete units
of the runs selected (``--where KEY=VALUE``; keys are those of the ``labels`` table:
labels, sweep variables, params and run facts).

* ``runs``: the runs selected, oldest first.
* ``percentiles``: per stream and group (``--by KEY``…), runs, units, min, p50, p90, p99,
  p99.9, max and mean. A percentile is the **nearest rank**: the value at rank
  ceil(p x n) of the n values in order (exact integers of ns, the same on every engine).
* ``trend``: the same per period of the runs' start (``--every run|hour|day|month``).
* ``worst``: the units with the largest values, with their run directory, unit number and
  media position, and the segment that took longest in that unit.
* ``regression``: B - A between the runs of two label sets (``--a``, ``--b``) for every
  metric both have (or the one asked for): the p50, p99 and mean of each side and their
  differences with moving-block bootstrap intervals, by :func:`latlab.report.compare.
  compare_values`, the method of ``latlab compare``. Each side's values are its units in
  run order (by start), so blocks follow consecutive units.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from latlab.dataset.engines import Engine
from latlab.dataset.layout import DatasetError
from latlab.ingest.workers import parallel_map
from latlab.report.compare import CONFIDENCE, RESAMPLES, SEED, compare_values
from latlab.stitch.kinds import KINDS

QUESTIONS = ("runs", "percentiles", "trend", "worst", "regression")
PERCENTILES = (("p50", "0.5"), ("p90", "0.9"), ("p99", "0.99"), ("p999", "0.999"))
PERIODS = {"hour": 13, "day": 10, "month": 7}  # characters of the ISO start kept
EVERY = ("run", *PERIODS)
SCHEMA = "latlab.query/1"
ANSWER_COLUMNS = ("stream", "period", "run", "runs", "units")  # not --by keys


@dataclass
class Metric:
    """What a question measures per unit: end to end, a kind, or a segment."""

    kind: str | None = None
    segment: str | None = None

    @property
    def label(self) -> str:
        """How the metric is named in titles."""
        if self.segment:
            return f"segment {self.segment}"
        return f"kind {self.kind}" if self.kind else "end to end"


@dataclass
class Options:
    """What a question is asked with (``latlab query`` options)."""

    metric: Metric = field(default_factory=Metric)
    where: list[tuple[str, str]] = field(default_factory=list)
    by: list[str] = field(default_factory=list)
    stream: str | None = None
    every: str = "day"
    limit: int = 20
    a: list[tuple[str, str]] = field(default_factory=list)
    b: list[tuple[str, str]] = field(default_factory=list)
    resamples: int = RESAMPLES
    confidence: float = CONFIDENCE
    seed: int = SEED


@dataclass
class Answer:
    """A question's answer: rows of JSON values (ms as floats), and how to show them."""

    question: str
    title: str
    columns: list[str]
    rows: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    per_stream: bool = False  # shown as one table per stream


def parse_pairs(texts: Sequence[str], option: str) -> list[tuple[str, str]]:
    """``KEY=VALUE`` pairs of an option (DatasetError naming a malformed one)."""
    pairs = []
    for text in texts:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise DatasetError(f"{option} {text!r}: expected KEY=VALUE, e.g. build=4711")
        pairs.append((key.strip(), value))
    return list(dict.fromkeys(pairs))


def ask(engine: Engine, question: str, options: Options) -> Answer:
    """Answer a ready question on ``engine``."""
    if question not in QUESTIONS:
        raise DatasetError(f"{question!r}: not a question; ask one of {', '.join(QUESTIONS)}")
    if question == "regression":
        return regression(engine, options)
    taken = [key for key in options.by if key in ANSWER_COLUMNS]
    if taken:
        raise DatasetError(f"--by {taken[0]!r}: the name of a column of the answer; not a key")
    _check_keys(engine, [k for k, _ in options.where] + options.by)
    _register_where(engine, "q_where", options.where)
    return {"runs": runs, "percentiles": percentiles, "trend": trend, "worst": worst}[question](
        engine, options
    )


def sql_answer(engine: Engine, sql: str) -> Answer:
    """``--sql``: any query over the views, its rows as they come."""
    table = engine.query(sql)
    rows = [{k: _plain(v) for k, v in row.items()} for row in table.to_pylist()]
    return Answer("sql", sql, list(table.column_names), rows)


# --- building blocks ---------------------------------------------------------------


def _strings(**columns: Sequence[Any]) -> pa.Table:
    return pa.table({k: pa.array(list(v), pa.string()) for k, v in columns.items()})


def _register_where(engine: Engine, name: str, pairs: list[tuple[str, str]]) -> None:
    engine.register(
        name,
        pa.table(
            {
                "key": pa.array([k for k, _ in pairs], pa.string()),
                "value": pa.array([v for _, v in pairs], pa.string()),
                "n": pa.array([len(pairs)] * len(pairs), pa.int64()),
            }
        ),
    )


def _keys(engine: Engine) -> list[str]:
    table = engine.query("SELECT DISTINCT key FROM labels ORDER BY key")
    return [str(k) for k in table.column("key").to_pylist()]


def _check_keys(engine: Engine, keys: list[str]) -> None:
    if not keys:
        return
    known = set(_keys(engine))
    for key in keys:
        if key not in known:
            raise DatasetError(f"{key!r}: no run has this key; keys: {', '.join(sorted(known))}")


def _selected(options_where: bool) -> str:
    """The CTE of the runs selected by ``--where`` (relational division over labels)."""
    if not options_where:
        return "sel AS (SELECT run_id FROM runs)"
    return (
        "sel AS (SELECT l.run_id FROM labels l JOIN q_where w ON l.key = w.key AND "
        "l.value = w.value GROUP BY l.run_id HAVING count(*) = max(w.n))"
    )


def _values(engine: Engine, options: Options) -> str:
    """The CTEs ``sel`` and ``vals``: one value per complete unit of the selected runs
    (run_id, stream_index, stream, unit, unit_start_ns, v)."""
    joins = ["JOIN sel ON sel.run_id = s.run_id"]
    if options.stream is not None:
        engine.register("q_streams", _strings(stream=_streams(engine, options.stream)))
        joins.append("JOIN q_streams qs ON qs.stream = s.stream")
    metric = options.metric
    if metric.segment:
        spans = _segments(engine, metric.segment)
        engine.register("q_segments", _strings(**spans))
        joins.append(
            "JOIN q_segments q ON q.stream = s.stream AND q.from_probe = s.from_probe "
            "AND q.to_probe = s.to_probe"
        )
        body = (
            "SELECT s.run_id, s.stream_index, s.stream, s.unit, s.unit_start_ns, "
            f"s.time_ns AS v FROM segments s {' '.join(joins)} WHERE s.complete"
        )
    else:
        if metric.kind:
            _check_kind(engine, metric.kind)
            engine.register("q_kind", _strings(kind=[metric.kind]))
            joins.append("JOIN q_kind q ON q.kind = s.kind")
        body = (
            "SELECT s.run_id, s.stream_index, s.stream, s.unit, "
            "min(s.unit_start_ns) AS unit_start_ns, CAST(sum(s.time_ns) AS BIGINT) AS v "
            f"FROM segments s {' '.join(joins)} WHERE s.complete "
            "GROUP BY s.run_id, s.stream_index, s.stream, s.unit"
        )
    return f"{_selected(bool(options.where))}, vals AS ({body})"


def _streams(engine: Engine, text: str) -> list[str]:
    table = engine.query("SELECT DISTINCT stream FROM summaries ORDER BY stream")
    streams = [str(s) for s in table.column("stream").to_pylist()]
    found = [s for s in streams if text in s]
    if not found:
        raise DatasetError(f"--stream {text!r}: no stream matches; streams: {'; '.join(streams)}")
    return found


def _segments(engine: Engine, name: str) -> dict[str, list[str]]:
    """The (stream, from, to) of the segments whose to-probe is ``name`` (whole, or after
    its process name)."""
    table = engine.query(
        "SELECT DISTINCT stream, from_probe, to_probe FROM summaries "
        "WHERE figure = 'segment' ORDER BY stream, from_probe, to_probe"
    )
    rows = table.to_pylist()
    found = [r for r in rows if name in (r["to_probe"], r["to_probe"].split("/", 1)[-1])]
    if not found:
        names = sorted({r["to_probe"] for r in rows})
        raise DatasetError(
            f"--segment {name!r}: no segment ends there; segments: {', '.join(names)}"
        )
    return {k: [r[k] for r in found] for k in ("stream", "from_probe", "to_probe")}


def _check_kind(engine: Engine, kind: str) -> None:
    table = engine.query("SELECT DISTINCT kind FROM summaries WHERE figure = 'kind' ORDER BY kind")
    kinds = [str(k) for k in table.column("kind").to_pylist()]
    if kind not in kinds:
        raise DatasetError(f"--kind {kind!r}: no run has it; kinds: {', '.join(kinds)}")


def _rank_stats(groups: list[str]) -> str:
    """Aggregates over ``ranked`` (v, rk, n per group): nearest-rank percentiles, min, max,
    mean (the sum is exact integers, divided once)."""
    partition = ", ".join([*groups, "stream"])
    ranks = ", ".join(
        f"max(CASE WHEN rk = greatest(1, CAST(ceil({p} * n) AS BIGINT)) THEN v END) AS {name}_ns"
        for name, p in PERCENTILES
    )
    return (
        f"ranked AS (SELECT grouped.*, row_number() OVER (PARTITION BY {partition} ORDER BY v) "
        f"AS rk, count(*) OVER (PARTITION BY {partition}) AS n FROM grouped) "
        f"SELECT {partition}, count(DISTINCT run_id) AS runs, count(*) AS units, "
        f"min(v) AS min_ns, {ranks}, max(v) AS max_ns, "
        "CAST(sum(v) AS DOUBLE) / count(*) AS mean_ns "
        f"FROM ranked GROUP BY {partition} "
        f"ORDER BY {', '.join(f'{g} ASC NULLS FIRST' for g in [*groups, 'stream'])}"
    )


def _by_joins(engine: Engine, keys: list[str]) -> tuple[list[str], list[str]]:
    """Per ``--by`` key, its column g0, g1, ... and the LEFT JOIN that gives it."""
    engine.register(
        "q_by",
        pa.table(
            {"pos": pa.array(range(len(keys)), pa.int64()), "key": pa.array(keys, pa.string())}
        ),
    )
    columns, joins = [], []
    for i in range(len(keys)):
        columns.append(f"g{i}.value AS g{i}")
        joins.append(
            f"LEFT JOIN (SELECT l.run_id, l.value FROM labels l JOIN q_by b ON l.key = b.key "
            f"AND b.pos = {i}) g{i} ON g{i}.run_id = v.run_id"
        )
    return columns, joins


def _stat_rows(table: pa.Table, names: dict[str, str]) -> list[dict[str, Any]]:
    """Result rows with ``*_ns`` turned into ``*_ms`` and group columns renamed."""
    out = []
    for row in table.to_pylist():
        item: dict[str, Any] = {}
        for key, value in row.items():
            if key.endswith("_ns"):
                item[key[:-3] + "_ms"] = None if value is None else float(value) / 1e6
            else:
                item[names.get(key, key)] = _plain(value)
        out.append(item)
    return out


def _plain(value: Any) -> Any:
    """A JSON value (decimals as numbers, dates as ISO text)."""
    from decimal import Decimal

    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return value


STAT_COLUMNS = [
    "runs",
    "units",
    "min_ms",
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "p999_ms",
    "max_ms",
    "mean_ms",
]


# --- the questions -----------------------------------------------------------------


def runs(engine: Engine, options: Options) -> Answer:
    """The runs selected, oldest first."""
    table = engine.query(
        f"WITH {_selected(bool(options.where))} SELECT r.run_id, r.scenario, r.date, "
        "r.started_at, r.point, r.status, r.revision, r.streams, r.units, r.run_dir "
        "FROM runs r JOIN sel ON sel.run_id = r.run_id ORDER BY r.started_at, r.run_id"
    )
    rows = _stat_rows(table, {})
    return Answer("runs", f"{len(rows)} runs", list(table.column_names), rows)


def percentiles(engine: Engine, options: Options) -> Answer:
    """Per stream and ``--by`` group: nearest-rank percentiles of the metric."""
    groups = [f"g{i}" for i in range(len(options.by))]
    columns, joins = _by_joins(engine, options.by)
    select = ", ".join([*columns, "v.stream", "v.run_id", "v.v"])
    sql = (
        f"WITH {_values(engine, options)}, grouped AS (SELECT {select} FROM vals v "
        f"{' '.join(joins)}), {_rank_stats(groups)}"
    )
    names = dict(zip(groups, options.by, strict=True))
    rows = _stat_rows(engine.query(sql), names)
    title = f"{options.metric.label}: percentiles" + (
        f" by {', '.join(options.by)}" if options.by else ""
    )
    return Answer(
        "percentiles",
        title,
        [*options.by, "stream", *STAT_COLUMNS],
        rows,
        ["percentiles: nearest rank over the complete units of every run"],
        per_stream=True,
    )


def trend(engine: Engine, options: Options) -> Answer:
    """Per period of the runs' start (and ``--by`` group): the metric's percentiles."""
    if options.every not in EVERY:
        raise DatasetError(f"--every {options.every!r}: expected one of {', '.join(EVERY)}")
    if options.every == "run":
        period, extra = "r.started_at", ["r.run_id AS run"]
    else:
        period, extra = f"substr(r.started_at, 1, {PERIODS[options.every]})", []
    columns, joins = _by_joins(engine, options.by)
    groups = ["period", *(["run"] if extra else []), *(f"g{i}" for i in range(len(options.by)))]
    select = ", ".join([f"{period} AS period", *extra, *columns, "v.stream", "v.run_id", "v.v"])
    sql = (
        f"WITH {_values(engine, options)}, grouped AS (SELECT {select} FROM vals v "
        f"JOIN runs r ON r.run_id = v.run_id {' '.join(joins)}), {_rank_stats(groups)}"
    )
    names = {f"g{i}": key for i, key in enumerate(options.by)}
    rows = _stat_rows(engine.query(sql), names)
    head = ["period", *(["run"] if extra else []), *options.by, "stream"]
    return Answer(
        "trend",
        f"{options.metric.label}: trend by {options.every}",
        [*head, *STAT_COLUMNS],
        rows,
        ["period: the runs' start (UTC); percentiles: nearest rank"],
        per_stream=True,
    )


def worst(engine: Engine, options: Options) -> Answer:
    """The ``limit`` units with the largest values, where they are, and their slowest
    segment."""
    if options.limit < 1:
        raise DatasetError(f"--limit {options.limit}: expected at least 1")
    key = "t.run_id = s.run_id AND t.stream_index = s.stream_index AND t.unit = s.unit"
    sql = (
        f"WITH {_values(engine, options)}, top AS (SELECT * FROM vals ORDER BY v DESC, run_id, "
        f"stream_index, unit LIMIT {int(options.limit)}), "
        "slow AS (SELECT s.run_id, s.stream_index, s.unit, s.to_probe, s.time_ns, row_number() "
        "OVER (PARTITION BY s.run_id, s.stream_index, s.unit ORDER BY s.time_ns DESC, s.segment) "
        f"AS rk FROM segments s JOIN top t ON {key}) "
        "SELECT t.v AS value_ns, t.run_id, r.run_dir, r.started_at, t.stream, t.unit, "
        "t.unit_start_ns, w.to_probe AS slowest_segment, w.time_ns AS slowest_ns "
        "FROM top t JOIN runs r ON r.run_id = t.run_id LEFT JOIN slow w ON w.run_id = t.run_id "
        "AND w.stream_index = t.stream_index AND w.unit = t.unit AND w.rk = 1 "
        "ORDER BY t.v DESC, t.run_id, t.stream_index, t.unit"
    )
    table = engine.query(sql)
    rows = _stat_rows(table, {})
    columns = [
        "value_ms",
        "run_id",
        "run_dir",
        "started_at",
        "stream",
        "unit",
        "unit_start_ms",
        "slowest_segment",
        "slowest_ms",
    ]
    return Answer(
        "worst",
        f"{options.metric.label}: the {len(rows)} worst units",
        columns,
        rows,
        [
            "open one: latlab report RUN_DIR; its journey: latlab export RUN_DIR --perfetto "
            "OUT.json, slices with args.unit = unit (unit_start_ms: its media position)"
        ],
    )


# --- regression ----------------------------------------------------------------------


def _sides(engine: Engine, options: Options) -> None:
    if not options.a or not options.b:
        raise DatasetError("regression: give both label sets, e.g. --a build=41 --b build=42")
    a = list(dict.fromkeys(options.a + options.where))  # --where holds on both sides
    b = list(dict.fromkeys(options.b + options.where))
    _check_keys(engine, [k for k, _ in a + b])
    rows = [("a", k, v, len(a)) for k, v in a]
    rows += [("b", k, v, len(b)) for k, v in b]
    engine.register(
        "q_sides",
        pa.table(
            {
                "side": pa.array([r[0] for r in rows], pa.string()),
                "key": pa.array([r[1] for r in rows], pa.string()),
                "value": pa.array([r[2] for r in rows], pa.string()),
                "n": pa.array([r[3] for r in rows], pa.int64()),
            }
        ),
    )


def _regression_values(engine: Engine, options: Options) -> pa.Table:
    """Per side, stream and metric, the per-unit values in run order."""
    metric = options.metric
    joins = []
    if options.stream is not None:
        engine.register("q_streams", _strings(stream=_streams(engine, options.stream)))
        joins.append("JOIN q_streams qs ON qs.stream = s.stream")
    unit = "run_id, stream_index, stream, unit"
    branches = []
    if not metric.kind and not metric.segment:
        branches.append(
            f"SELECT {unit}, 'end_to_end' AS figure, 'end to end' AS name, '' AS from_probe, "
            f"'' AS to_probe, CAST(sum(seg.time_ns) AS BIGINT) AS v FROM seg GROUP BY {unit}"
        )
    if not metric.segment:
        join = ""
        if metric.kind:
            _check_kind(engine, metric.kind)
            engine.register("q_kind", _strings(kind=[metric.kind]))
            join = "JOIN q_kind q ON q.kind = seg.kind "
        branches.append(
            f"SELECT {_qualified(unit)}, 'kind' AS figure, seg.kind AS name, '' AS "
            f"from_probe, '' AS to_probe, CAST(sum(seg.time_ns) AS BIGINT) AS v FROM seg {join}"
            f"GROUP BY {_qualified(unit)}, seg.kind"
        )
    if not metric.kind:
        join = ""
        if metric.segment:
            engine.register("q_segments", _strings(**_segments(engine, metric.segment)))
            join = (
                "JOIN q_segments q ON q.stream = seg.stream AND q.from_probe = seg.from_probe "
                "AND q.to_probe = seg.to_probe"
            )
        branches.append(
            f"SELECT {_qualified(unit)}, 'segment' AS figure, seg.to_probe AS name, "
            "seg.from_probe AS from_probe, seg.to_probe AS to_probe, seg.time_ns AS v "
            f"FROM seg {join}"
        )
    sql = (
        "WITH sides AS (SELECT l.run_id, w.side FROM labels l JOIN q_sides w ON l.key = w.key "
        "AND l.value = w.value GROUP BY l.run_id, w.side HAVING count(*) = max(w.n)), "
        "seg AS (SELECT s.run_id, s.stream_index, s.stream, s.unit, s.segment, s.kind, "
        "s.from_probe, s.to_probe, s.time_ns FROM segments s JOIN (SELECT DISTINCT run_id FROM "
        f"sides) x ON x.run_id = s.run_id {' '.join(joins)} WHERE s.complete), "
        f"vals AS ({' UNION ALL '.join(branches)}) "
        "SELECT d.side, v.stream, v.figure, v.name, v.from_probe, v.to_probe, v.run_id, v.v "
        "FROM vals v JOIN sides d ON d.run_id = v.run_id JOIN runs r ON r.run_id = v.run_id "
        "ORDER BY d.side, v.stream, v.figure, v.name, v.from_probe, v.to_probe, r.started_at, "
        "v.run_id, v.stream_index, v.unit"
    )
    return engine.query(sql)


def _qualified(columns: str) -> str:
    """``a, b`` as ``seg.a, seg.b``."""
    return ", ".join(f"seg.{c.strip()}" for c in columns.split(","))


FIGURE_ORDER = {"end_to_end": 0, "kind": 1, "segment": 2}
KEY_COLUMNS = ("side", "stream", "figure", "name", "from_probe", "to_probe")


def _series(table: pa.Table) -> dict[tuple, tuple[np.ndarray, int]]:
    """Per (side, stream, figure, name, from, to): its values (ns) and how many runs."""
    if table.num_rows == 0:
        return {}
    keys = [table.column(k).to_numpy(zero_copy_only=False) for k in KEY_COLUMNS]
    change = np.zeros(table.num_rows - 1, bool)
    for column in keys:
        change |= column[1:] != column[:-1]
    starts = np.concatenate([[0], np.flatnonzero(change) + 1, [table.num_rows]])
    values = table.column("v").to_numpy()
    run_ids = table.column("run_id").to_numpy(zero_copy_only=False)
    out = {}
    for lo, hi in itertools.pairwise(starts):
        key = tuple(str(column[lo]) for column in keys)
        out[key] = (values[lo:hi], len(np.unique(run_ids[lo:hi])))
    return out


def _side_runs(table: pa.Table, side: str) -> int:
    """How many runs of a side have complete units."""
    sides = table.column("side").to_numpy(zero_copy_only=False)
    run_ids = table.column("run_id").to_numpy(zero_copy_only=False)
    return len(np.unique(run_ids[sides == side]))


def _order(engine: Engine, keys: set[tuple]) -> list[tuple]:
    """Metrics per stream: end to end, kinds in path order, segments in path order."""
    table = engine.query(
        "SELECT stream, to_probe, min(segment) AS pos FROM summaries WHERE figure = 'segment' "
        "GROUP BY stream, to_probe"
    )
    position = {(r["stream"], r["to_probe"]): r["pos"] for r in table.to_pylist()}
    kinds = {kind: i for i, kind in enumerate(KINDS)}

    def rank(key: tuple) -> tuple:
        stream, figure, name, _, to_probe = key
        within = (
            kinds.get(name, len(kinds))
            if figure == "kind"
            else position.get((stream, to_probe), 1 << 30)
        )
        return (stream, FIGURE_ORDER[figure], within, name, to_probe)

    return sorted(keys, key=rank)


def regression(engine: Engine, options: Options) -> Answer:
    """B - A for every metric both label sets have, with bootstrap intervals."""
    _sides(engine, options)
    table = _regression_values(engine, options)
    runs_a, runs_b = _side_runs(table, "a"), _side_runs(table, "b")
    if not runs_a or not runs_b:
        empty, pairs = ("A", options.a) if not runs_a else ("B", options.b)
        raise DatasetError(f"regression: no run of {empty} ({_pairs(pairs)}) has a complete unit")
    series = _series(table)
    shared = _order(
        engine, {k[1:] for k in series if k[0] == "a"} & {k[1:] for k in series if k[0] == "b"}
    )
    seeds = np.random.SeedSequence(options.seed).spawn(len(shared))

    def figures(item: tuple[tuple, np.random.SeedSequence]) -> dict[str, Any]:
        key, seed = item
        return compare_values(
            series[("a", *key)][0],
            series[("b", *key)][0],
            resamples=options.resamples,
            confidence=options.confidence,
            rng=np.random.default_rng(seed),
        )

    results = parallel_map(figures, list(zip(shared, seeds, strict=True)))
    rows = [_regression_row(k, series, result) for k, result in zip(shared, results, strict=True)]
    pct = f"{options.confidence * 100:g}%"
    title = (
        f"A = {_pairs(options.a)} ({runs_a} runs)   B = {_pairs(options.b)} ({runs_b} runs)"
        f"   (B - A; [{pct} CI], moving-block bootstrap, {options.resamples} resamples; "
        "* = interval excludes 0)"
    )
    columns = [
        "stream",
        "metric",
        "a_p50_ms",
        "b_p50_ms",
        "diff_p50",
        "a_p99_ms",
        "b_p99_ms",
        "diff_p99",
        "diff_mean",
    ]
    extra = {
        "a": _pairs(options.a),
        "b": _pairs(options.b),
        "runs_a": runs_a,
        "runs_b": runs_b,
        "resamples": options.resamples,
        "confidence": options.confidence,
        "seed": options.seed,
    }
    return Answer("regression", title, columns, rows, extra=extra, per_stream=True)


def _pairs(pairs: list[tuple[str, str]]) -> str:
    return ",".join(f"{k}={v}" for k, v in pairs)


def _regression_row(key: tuple, series: dict, result: dict[str, Any]) -> dict[str, Any]:
    stream, figure, name, from_probe, to_probe = key
    metric = {"end_to_end": "end to end", "kind": f"kind {name}"}.get(
        figure, name.split("/", 1)[-1]
    )
    row: dict[str, Any] = {
        "stream": stream,
        "metric": metric,
        "figure": figure,
        "from_probe": from_probe or None,
        "to_probe": to_probe or None,
    }
    for side in ("a", "b"):
        row[f"{side}_units"] = int(result[side]["count"])
        row[f"{side}_runs"] = series[(side, *key)][1]
        for stat in ("p50", "p99", "mean"):
            row[f"{side}_{stat}_ms"] = _finite(result[side][stat])
    for stat, diff in result["diff"].items():
        row[f"diff_{stat}"] = diff.to_json()
    row["block_units"] = result["block_units"]
    return row


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None
