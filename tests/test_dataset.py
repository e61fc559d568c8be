"""A dataset of runs (issue 21): ingest, dedup, bad runs skipped, crash safety, an older
minor version, and every ready question on DuckDB against answers computed here from the
runs' own analysis. Synthetic runs in the real formats (latlab.synthetic): no root, no
servers."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from latlab.dataset import ingest as ingest_module
from latlab.dataset import layout
from latlab.dataset.commands import engine_for
from latlab.dataset.engines import Engine
from latlab.dataset.ingest import IngestOptions, ingest, parse_labels
from latlab.dataset.layout import DatasetError
from latlab.dataset.questions import Metric, Options, ask, sql_answer
from latlab.dataset.rows import unit_flags
from latlab.pipeline import analysis_of
from latlab.report.compare import compare_values
from latlab.synthetic import MS, SyntheticRtpAudio, make_run_dir
from tests.conftest import latlab
from tests.dataset_data import build_dataset, info, nearest_rank, unit_values

PERCENTILES = (("p50_ms", "0.5"), ("p90_ms", "0.9"), ("p99_ms", "0.99"), ("p999_ms", "0.999"))


@pytest.fixture(scope="module")
def fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict]]:
    yield build_dataset(tmp_path_factory.mktemp("dataset"))


@pytest.fixture(scope="module")
def duck(fixture: tuple[Path, dict]) -> Iterator[Engine]:
    engine = engine_for(fixture[0])
    yield engine
    engine.close()


def table(dataset: Path, name: str) -> pa.Table:
    engine = engine_for(dataset)
    try:
        return engine.query(f"SELECT * FROM {name}")
    finally:
        engine.close()


# --- ingest ---------------------------------------------------------------------------


def test_every_run_is_in_every_table(fixture: tuple[Path, dict]) -> None:
    dataset, runs = fixture
    dirs = runs["41"] + runs["42"] + runs["points"]
    facts = table(dataset, "runs").to_pylist()
    assert sorted(r["run_dir"] for r in facts) == sorted(str(d.resolve()) for d in dirs)
    segments = table(dataset, "segments")
    expected = 0
    for d in dirs:
        (stream,) = analysis_of(d).streams
        expected += stream.journeys.times.shape[0] * (stream.journeys.times.shape[1] - 1)
    assert segments.num_rows == expected
    by_dir = {r["run_dir"]: r for r in facts}
    point = by_dir[str(runs["points"][1].resolve())]
    assert (point["scenario"], point["date"], point["point"]) == ("jb-sweep", "2026-11-04", "jb=40")
    assert point["gstreamer_version"] == "1.22.0" and point["hostname"] == "synthetic"
    assert by_dir[str(runs["42"][0].resolve())]["revision"] == "abc123"
    summaries = table(dataset, "summaries").to_pylist()
    summary = json.loads((runs["41"][0] / "summary.json").read_text())
    jb = next(s for s in summary["streams"][0]["segments"] if "jitterbuffer" in s["to"])
    row = next(
        r
        for r in summaries
        if r["run_id"] == by_dir[str(runs["41"][0].resolve())]["run_id"]
        and r["figure"] == "segment"
        and r["to_probe"] == jb["to"]
    )
    assert row["p99_ms"] == jb["p99_ms"] and row["count"] == jb["count"]


def test_labels_hold_labels_sweep_values_params_and_run_facts(fixture: tuple[Path, dict]) -> None:
    dataset, _ = fixture
    rows = table(dataset, "labels").to_pylist()
    keys = {(r["key"], r["value"], r["origin"]) for r in rows}
    assert {
        ("build", "41", "label"),
        ("build", "42", "label"),
        ("jb", "40", "sweep"),
        ("scenario", "jb-sweep", "run"),
        ("revision", "abc123", "run"),
        ("gstreamer_version", "1.22.0", "run"),
        ("date", "2026-11-01", "run"),
    } <= keys
    with pytest.raises(DatasetError, match="'scenario' is a run fact"):
        parse_labels(["scenario=x"])
    with pytest.raises(DatasetError, match="expected KEY=VALUE"):
        parse_labels(["build"])


def test_the_run_id_is_the_runs_identity_not_its_path(tmp_path: Path) -> None:
    make_run_dir(tmp_path / "a", SyntheticRtpAudio(units=100), info(1))
    shutil.copytree(tmp_path / "a", tmp_path / "copy")
    result = ingest([tmp_path / "a", tmp_path / "copy"], tmp_path / "ds")
    assert len(result.ingested) == 1
    (reason,) = result.skipped
    assert str(tmp_path / "copy") in reason and "the same run as" in reason


@pytest.mark.timeout(120)
def test_ingests_started_together_create_a_new_dataset_once(tmp_path: Path) -> None:
    """Ingests into a dataset that does not exist yet, released together: each run lands,
    none is refused because another had begun to create the dataset."""
    count = 6
    for i in range(count):
        make_run_dir(tmp_path / f"r{i}", SyntheticRtpAudio(units=50, seed=i), info(1, hour=i))
    dataset, start = tmp_path / "new" / "ds", threading.Barrier(count)

    def one(i: int) -> int:
        start.wait(timeout=60)
        return len(ingest([tmp_path / f"r{i}"], dataset).ingested)

    with ThreadPoolExecutor(max_workers=count) as pool:
        assert list(pool.map(one, range(count))) == [1] * count
    assert len(layout.read_manifest(dataset).runs) == count


def test_unit_flags_add_up_to_the_streams_lost_and_late(tmp_path: Path) -> None:
    params = SyntheticRtpAudio(
        units=2000, loss=0.03, network_jitter=12 * MS, jitterbuffer_latency=10 * MS, seed=3
    )
    make_run_dir(tmp_path / "r", params, info(1))
    (stream,) = analysis_of(tmp_path / "r").streams
    lost, late = unit_flags(stream.journeys)
    counts = stream.journeys.counts
    assert counts["lost"] > 0 and counts["late"] > 0  # the test means something
    assert (int(lost.sum()), int(late.sum())) == (counts["lost"], counts["late"])


def test_the_same_run_twice_is_refused_then_replaced(tmp_path: Path) -> None:
    for i in range(3):
        make_run_dir(tmp_path / f"r{i}", SyntheticRtpAudio(units=100, seed=i), info(1, hour=i))
    dataset = tmp_path / "ds"
    ingest([tmp_path / f"r{i}" for i in range(3)], dataset, IngestOptions({"build": "1"}))
    before = table(dataset, "segments").num_rows
    again = ingest([tmp_path / "r1"], dataset, IngestOptions({"build": "2"}))
    assert again.ingested == [] and len(again.skipped) == 1
    assert "already in the dataset" in again.skipped[0] and "--replace" in again.skipped[0]
    replaced = ingest([tmp_path / "r1"], dataset, IngestOptions({"build": "2"}, replace=True))
    assert len(replaced.ingested) == 1 and len(replaced.replaced) == 1
    assert table(dataset, "segments").num_rows == before
    builds = sorted(r["value"] for r in table(dataset, "labels").to_pylist() if r["key"] == "build")
    assert builds == ["1", "1", "2"]
    manifest = layout.read_manifest(dataset)
    on_disk = sorted(str(p.relative_to(dataset)) for p in dataset.rglob("*.parquet"))
    assert on_disk == sorted(manifest.files)  # the superseded files are gone


def test_the_cli_refuses_a_run_already_there_in_one_line(tmp_path: Path) -> None:
    make_run_dir(tmp_path / "r", SyntheticRtpAudio(units=100), info(1))
    first = latlab("ingest", str(tmp_path / "r"), "--into", str(tmp_path / "ds"), timeout=120)
    assert first.returncode == 0 and "ingested 1 run " in first.stdout, first.stderr
    second = latlab("ingest", str(tmp_path / "r"), "--into", str(tmp_path / "ds"), timeout=120)
    lines = second.stderr.strip().splitlines()
    assert second.returncode == 2 and len(lines) == 1 and "already in the dataset" in lines[0]


def bad_runs(root: Path) -> dict[str, Path]:
    """Run directories that cannot be ingested, one of each kind."""
    bad: dict[str, Path] = {"missing": root / "nothing-here"}
    (root / "no-run-json" / "traces").mkdir(parents=True)
    bad["no run.json"] = root / "no-run-json"
    for name, text in (("garbled", "{not json"), ("future", '{"schema": "latlab.run/99"}')):
        make_run_dir(root / name, SyntheticRtpAudio(units=100), info(2))
        (root / name / "run.json").write_text(text)
        bad[name] = root / name
    make_run_dir(root / "no-env", SyntheticRtpAudio(units=100), info(2))
    (root / "no-env" / "env.json").unlink()
    bad["no env.json"] = root / "no-env"
    make_run_dir(root / "failed", SyntheticRtpAudio(units=100), info(2))
    run = json.loads((root / "failed" / "run.json").read_text())
    (root / "failed" / "run.json").write_text(
        json.dumps(run | {"status": "failed", "error": "sender: exit 1"})
    )
    bad["failed"] = root / "failed"
    make_run_dir(root / "corrupt", SyntheticRtpAudio(units=100), info(2, hour=3))
    for trace in (root / "corrupt" / "traces").iterdir():
        trace.write_bytes(b"LLTRACE\0" + bytes(range(200)))
    bad["corrupt trace"] = root / "corrupt"
    return bad


def test_bad_runs_are_skipped_with_their_reason_and_the_rest_ingests(tmp_path: Path) -> None:
    bad = bad_runs(tmp_path)
    make_run_dir(tmp_path / "good", SyntheticRtpAudio(units=100), info(2, hour=5))
    result = ingest([*bad.values(), tmp_path / "good"], tmp_path / "ds")
    assert [p.name for _, p in result.ingested] == ["good"]
    assert len(result.skipped) == len(bad)
    for (what, path), reason in zip(bad.items(), result.skipped, strict=True):
        assert str(path) in reason and "\n" not in reason, (what, reason)
    assert "sender: exit 1" in result.skipped[list(bad).index("failed")]
    assert "unknown schema" in result.skipped[list(bad).index("future")]
    assert table(tmp_path / "ds", "runs").num_rows == 1


def test_a_sweep_point_that_failed_is_skipped(tmp_path: Path) -> None:
    _, runs = build_dataset(tmp_path)
    sweep = json.loads((runs["sweep"][0] / "sweep.json").read_text())
    sweep["points"][0] |= {"status": "failed", "error": "receiver: no media"}
    (runs["sweep"][0] / "sweep.json").write_text(json.dumps(sweep))
    result = ingest(runs["sweep"], tmp_path / "other")
    assert len(result.ingested) == 1
    (reason,) = result.skipped
    assert "jb=20" in reason and "receiver: no media" in reason


def test_a_crash_between_writing_and_committing_leaves_the_dataset_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(2):
        make_run_dir(tmp_path / f"r{i}", SyntheticRtpAudio(units=100, seed=i), info(1, hour=i))
    dataset = tmp_path / "ds"
    ingest([tmp_path / "r0"], dataset)
    before = table(dataset, "segments").num_rows
    manifest_before = (dataset / layout.MANIFEST_NAME).read_text()

    def crash(root: Path, manifest: layout.Manifest) -> None:
        tmp = root / f".{layout.MANIFEST_NAME}{layout.TMP_SUFFIX}"
        tmp.write_text(json.dumps(manifest.to_json()))  # written, never renamed
        raise KeyboardInterrupt

    monkeypatch.setattr(layout, "write_manifest", crash)
    with pytest.raises(KeyboardInterrupt):
        ingest([tmp_path / "r1"], dataset)
    monkeypatch.undo()
    assert (dataset / layout.MANIFEST_NAME).read_text() == manifest_before
    assert len(list(dataset.rglob("*.parquet"))) == 2 * len(layout.TABLE_NAMES)  # written
    assert table(dataset, "segments").num_rows == before  # but not part of the dataset
    result = ingest([tmp_path / "r1"], dataset)
    assert result.cleaned == len(layout.TABLE_NAMES) and len(result.ingested) == 1
    assert table(dataset, "segments").num_rows == 2 * before


def test_a_crash_while_a_file_is_written_leaves_the_dataset_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_run_dir(tmp_path / "r0", SyntheticRtpAudio(units=100), info(1))
    make_run_dir(tmp_path / "r1", SyntheticRtpAudio(units=100, seed=2), info(1, hour=2))
    dataset = tmp_path / "ds"
    ingest([tmp_path / "r0"], dataset)
    analysis_of(tmp_path / "r1")  # stored: the ingest below only writes the dataset's files
    real = pq.write_table

    def half(data: pa.Table, where: Path, **kwargs: object) -> None:
        Path(where).write_bytes(b"PAR1 half a file")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ingest_module.pq, "write_table", half)
    with pytest.raises(OSError):
        ingest([tmp_path / "r1"], dataset)
    monkeypatch.setattr(ingest_module.pq, "write_table", real)
    assert table(dataset, "runs").num_rows == 1
    assert len(ingest([tmp_path / "r1"], dataset).ingested) == 1
    assert table(dataset, "runs").num_rows == 2


def test_a_dataset_of_an_older_minor_version_stays_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Minor 1 adds a column: minor-0 files lack it (NULL), minor-1 files have it."""
    make_run_dir(tmp_path / "old", SyntheticRtpAudio(units=100), info(1))
    make_run_dir(tmp_path / "new", SyntheticRtpAudio(units=100, seed=2), info(2))
    dataset = tmp_path / "ds"
    ingest([tmp_path / "old"], dataset)  # written at minor 0
    added = layout.Column("queue_depth", pa.int32(), "INT", "added in minor 1", since=1)
    tables = dict(layout.TABLES) | {"runs": (*layout.TABLES["runs"], added)}
    monkeypatch.setattr(layout, "TABLES", tables)
    monkeypatch.setattr(layout, "MINOR", 1)
    monkeypatch.setattr(ingest_module, "MINOR", 1)
    only_old = table(dataset, "runs").to_pylist()
    assert [r["queue_depth"] for r in only_old] == [None]
    real_runs_table = ingest_module.runs_table
    monkeypatch.setattr(
        ingest_module, "runs_table", lambda facts: real_runs_table(facts | {"queue_depth": 7})
    )
    ingest([tmp_path / "new"], dataset)
    rows = sorted(table(dataset, "runs").to_pylist(), key=lambda r: r["started_at"])
    assert [r["queue_depth"] for r in rows] == [None, 7]
    assert layout.read_manifest(dataset).minor == 1


def test_a_newer_major_version_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / layout.MANIFEST_NAME).write_text('{"schema": "latlab.dataset/2"}')
    with pytest.raises(DatasetError, match=r"unknown schema 'latlab\.dataset/2'"):
        layout.read_manifest(tmp_path / "ds")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "something").write_text("x")
    with pytest.raises(DatasetError, match="not a latlab dataset"):
        ingest([tmp_path / "r"], tmp_path / "other")


# --- the ready questions on DuckDB ----------------------------------------------------


def test_runs_lists_the_runs_selected_oldest_first(duck: Engine, fixture: tuple) -> None:
    _, runs = fixture
    answer = ask(duck, "runs", Options())
    assert len(answer.rows) == 7
    assert [r["started_at"] for r in answer.rows] == sorted(r["started_at"] for r in answer.rows)
    selected = ask(duck, "runs", Options(where=[("build", "42"), ("revision", "abc123")]))
    assert sorted(r["run_dir"] for r in selected.rows) == sorted(
        str(d.resolve()) for d in runs["42"]
    )


def test_percentiles_are_the_nearest_rank_of_every_unit(duck: Engine, fixture: tuple) -> None:
    _, runs = fixture
    answer = ask(duck, "percentiles", Options(by=["build"], where=[("scenario", "rtp-audio")]))
    assert [r["build"] for r in answer.rows] == ["41", "42"]
    for row, build in zip(answer.rows, ("41", "42"), strict=True):
        values = np.concatenate([unit_values(d) for d in runs[build]])
        assert (row["runs"], row["units"]) == (len(runs[build]), len(values))
        for column, p in PERCENTILES:
            assert row[column] == nearest_rank(values, p) / 1e6
        assert row["max_ms"] == values.max() / 1e6 and row["min_ms"] == values.min() / 1e6
        assert row["mean_ms"] == pytest.approx(values.mean() / 1e6, abs=1e-9)


def test_percentiles_of_a_kind_and_of_a_segment(duck: Engine, fixture: tuple) -> None:
    _, runs = fixture
    kind = ask(duck, "percentiles", Options(Metric(kind="jitterbuffer"), by=["jb"]))
    by_jb = {r["jb"]: r for r in kind.rows}
    assert set(by_jb) == {None, "20", "40"}
    for jb, run_dir in zip(("20", "40"), runs["points"], strict=True):
        assert (
            by_jb[jb]["p50_ms"] == nearest_rank(unit_values(run_dir, "jitterbuffer"), "0.5") / 1e6
        )
    assert 39 < by_jb["40"]["p50_ms"] - by_jb["20"]["p50_ms"] + 20 < 41  # a planted 20 ms
    segment = ask(duck, "percentiles", Options(Metric(segment="rtpjitterbuffer0:src")))
    (row,) = segment.rows
    assert row["p99_ms"] == kind.rows[0]["p99_ms"] or row["units"] == sum(
        r["units"] for r in kind.rows
    )
    whole = ask(duck, "percentiles", Options(Metric(segment="receiver/rtpjitterbuffer0:src")))
    assert whole.rows == segment.rows


def test_trend_groups_runs_by_the_day_they_started(duck: Engine) -> None:
    answer = ask(duck, "trend", Options(every="day"))
    assert [(r["period"], r["runs"]) for r in answer.rows] == [
        ("2026-11-01", 1),
        ("2026-11-02", 1),
        ("2026-11-03", 2),
        ("2026-11-04", 3),
    ]
    per_run = ask(duck, "trend", Options(every="run", where=[("build", "41")]))
    assert [r["runs"] for r in per_run.rows] == [1, 1, 1] and per_run.rows[0]["run"]
    month = ask(duck, "trend", Options(every="month", by=["build"]))
    assert [(r["period"], r["build"]) for r in month.rows] == [
        ("2026-11", None),
        ("2026-11", "41"),
        ("2026-11", "42"),
    ]


def test_worst_names_the_run_directory_and_unit_to_open(duck: Engine, fixture: tuple) -> None:
    _, runs = fixture
    answer = ask(duck, "worst", Options(limit=5, where=[("scenario", "rtp-audio")]))
    everything = {d: unit_values(d) for d in runs["41"] + runs["42"]}
    largest = np.sort(np.concatenate(list(everything.values())))[::-1][:5]
    assert [r["value_ms"] for r in answer.rows] == list(largest / 1e6)
    for row in answer.rows:
        (stream,) = analysis_of(Path(row["run_dir"])).streams
        j = stream.journeys
        assert j.times[row["unit"], -1] - j.times[row["unit"], 0] == round(row["value_ms"] * 1e6)
        assert j.unit_start[row["unit"]] == round(row["unit_start_ms"] * 1e6)
        assert row["slowest_segment"] in j.probe_names and row["slowest_ms"] > 0


def test_regression_is_compares_bootstrap_over_the_label_sets(duck: Engine, fixture: tuple) -> None:
    _, runs = fixture
    options = Options(a=[("build", "41")], b=[("build", "42")], resamples=300)
    answer = ask(duck, "regression", options)
    assert (answer.extra["runs_a"], answer.extra["runs_b"]) == (3, 2)
    rows = {r["metric"]: r for r in answer.rows}
    jb = rows["kind jitterbuffer"]
    assert jb["diff_p50"]["significant"] and 9.5 < jb["diff_p50"]["estimate"] < 10.5  # 20 -> 30 ms
    assert not rows["kind capture"]["diff_p50"]["significant"]
    assert list(rows)[:2] == ["end to end", "kind capture"]
    # the same figures as latlab compare's bootstrap on the units in run order
    a = np.concatenate([unit_values(d, "jitterbuffer") for d in runs["41"]])
    b = np.concatenate([unit_values(d, "jitterbuffer") for d in runs["42"]])
    only = ask(
        duck,
        "regression",
        Options(Metric(kind="jitterbuffer"), a=options.a, b=options.b, resamples=300),
    )
    (row,) = only.rows
    seed = np.random.SeedSequence(options.seed).spawn(1)[0]
    direct = compare_values(a, b, resamples=300, rng=np.random.default_rng(seed))
    assert row["diff_p99"] == direct["diff"]["p99"].to_json()
    assert row["a_units"] == len(a) and row["b_mean_ms"] == pytest.approx(direct["b"]["mean"])


def test_where_narrows_both_sides_and_by_run_id_gives_each_run(duck: Engine) -> None:
    same_day = Options(a=[("build", "41")], b=[("build", "42")], where=[("date", "2026-11-03")],
                       resamples=100)  # fmt: skip
    answer = ask(duck, "regression", same_day)
    assert (answer.extra["runs_a"], answer.extra["runs_b"]) == (1, 1)
    per_run = ask(duck, "percentiles", Options(by=["run_id"], where=[("build", "41")]))
    assert [r["runs"] for r in per_run.rows] == [1, 1, 1]


def test_sql_is_the_escape_hatch(duck: Engine) -> None:
    answer = sql_answer(
        duck, "SELECT scenario, count(*) AS n FROM runs GROUP BY scenario ORDER BY scenario"
    )
    assert answer.rows == [{"scenario": "jb-sweep", "n": 2}, {"scenario": "rtp-audio", "n": 5}]
    with pytest.raises(DatasetError, match=r"^duckdb: "):
        sql_answer(duck, "SELECT nothing FROM nowhere")


@pytest.mark.parametrize(
    ("question", "options", "message"),
    [
        ("percentiles", Options(by=["nosuchkey"]), "'nosuchkey': no run has this key"),
        ("percentiles", Options(Metric(kind="warp")), "--kind 'warp': no run has it"),
        ("worst", Options(Metric(segment="nowhere:src")), "--segment 'nowhere:src'"),
        ("trend", Options(every="week"), "--every 'week'"),
        ("regression", Options(a=[("build", "41")]), "give both label sets"),
        ("regression", Options(a=[("build", "41")], b=[("build", "99")]), "no run of B"),
        ("percentiles", Options(stream="no such stream"), "--stream 'no such stream'"),
        ("why", Options(), "'why': not a question"),
        ("percentiles", Options(by=["stream"]), "--by 'stream': the name of a column"),
    ],
)
def test_a_question_it_cannot_answer_is_one_line(
    duck: Engine, question: str, options: Options, message: str
) -> None:
    with pytest.raises(DatasetError) as caught:
        ask(duck, question, options)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_cli_prints_tables_json_and_csv(fixture: tuple) -> None:
    dataset, _ = fixture
    as_json = latlab("query", str(dataset), "percentiles", "--by", "build", "--json", timeout=120)
    document = json.loads(as_json.stdout)
    assert document["schema"] == "latlab.query/1" and document["engine"] == "duckdb"
    assert [r["build"] for r in document["rows"]] == [None, "41", "42"]
    as_csv = latlab(
        "query",
        str(dataset),
        "regression",
        "--a",
        "build=41",
        "--b",
        "build=42",
        "--kind",
        "jitterbuffer",
        "--resamples",
        "200",
        "--csv",
        timeout=120,
    )
    header, row = as_csv.stdout.strip().splitlines()
    assert "diff_p50_estimate" in header and "diff_p50_significant" in header
    assert ",kind jitterbuffer," in row and ",True," in row
    text = latlab("query", str(dataset), "worst", "--limit", "3", timeout=120)
    assert text.returncode == 0 and "latlab report RUN_DIR" in text.stdout, text.stderr
    sql = latlab(
        "query", str(dataset), "--sql", "SELECT count(*) AS n FROM runs", "--csv", timeout=120
    )
    assert sql.stdout == "n\n7\n"


def test_the_document_names_every_table_column_and_question() -> None:
    from latlab.dataset.questions import QUESTIONS

    text = (Path(__file__).resolve().parents[1] / "docs" / "dataset.md").read_text()
    for name, columns in layout.TABLES.items():
        assert f"`{name}`" in text, name
        missing = [c.name for c in columns if f"`{c.name}`" not in text]
        assert missing == [], (name, missing)
    assert [q for q in QUESTIONS if f"| `{q}" not in text] == []
    assert layout.SCHEMA in text and f"This is minor {layout.MINOR}." in text
