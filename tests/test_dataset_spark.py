"""DuckDB and Spark give the same answer to every ready question over the same Parquet
files (issue 21 item 3): exact counts, the same nearest-rank percentiles, the same
bootstrap intervals (the values reach numpy in the same order on both).

Spark runs locally (``local[2]``, a JVM from Debian's default-jre-headless, pyspark from
PyPI): no root, no network, but a JVM's start-up and Spark's per-query planning take
about a minute here (16 tests in 64 s, nearly all of it Spark's), so the module is in the
e2e tier."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from latlab.dataset import ingest as ingest_module
from latlab.dataset import layout
from latlab.dataset.commands import engine_for
from latlab.dataset.engines import Engine
from latlab.dataset.ingest import ingest
from latlab.dataset.questions import Metric, Options, ask, sql_answer
from latlab.synthetic import SyntheticRtpAudio, make_run_dir
from tests.conftest import latlab
from tests.dataset_data import build_dataset, info

pytestmark = pytest.mark.e2e
MASTER = "local[2]"

CASES: list[tuple[str, Options]] = [
    ("runs", Options()),
    ("runs", Options(where=[("build", "42"), ("revision", "abc123")])),
    ("percentiles", Options()),
    ("percentiles", Options(by=["build", "scenario"])),
    ("percentiles", Options(Metric(kind="jitterbuffer"), by=["jb"])),
    ("percentiles", Options(Metric(segment="rtpjitterbuffer0:src"), where=[("build", "41")])),
    ("trend", Options(every="day")),
    ("trend", Options(Metric(kind="network"), every="run", by=["build"])),
    ("trend", Options(every="hour", stream="fakesink0")),
    ("worst", Options(limit=12)),
    ("worst", Options(Metric(kind="jitterbuffer"), limit=5, where=[("scenario", "jb-sweep")])),
    ("regression", Options(a=[("build", "41")], b=[("build", "42")], resamples=400)),
    (
        "regression",
        Options(
            Metric(segment="fakesink0:sink"), a=[("jb", "20")], b=[("jb", "40")], resamples=400
        ),
    ),
]


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Engine, Engine, Path]]:
    dataset, _ = build_dataset(tmp_path_factory.mktemp("dataset"))
    duck = engine_for(dataset)
    spark = engine_for(dataset, "spark", MASTER)
    yield duck, spark, dataset
    duck.close()


@pytest.mark.timeout(400)
@pytest.mark.parametrize(("question", "options"), CASES)
def test_duckdb_and_spark_give_the_same_answer(
    engines: tuple[Engine, Engine, Path], question: str, options: Options
) -> None:
    duck, spark, _ = engines
    on_duckdb, on_spark = ask(duck, question, options), ask(spark, question, options)
    assert on_duckdb.rows, "the question means something: it has rows"
    assert on_spark.rows == on_duckdb.rows
    assert on_spark.extra == on_duckdb.extra


@pytest.mark.timeout(300)
def test_sql_reads_the_same_tables_on_both(engines: tuple[Engine, Engine, Path]) -> None:
    duck, spark, _ = engines
    sql = (
        "SELECT scenario, date, count(*) AS n, sum(time_ns) AS total, count(time_ns) AS "
        "timed, sum(CASE WHEN lost THEN 1 ELSE 0 END) AS lost FROM segments "
        "GROUP BY scenario, date ORDER BY scenario, date"
    )
    assert sql_answer(spark, sql).rows == sql_answer(duck, sql).rows
    for table in layout.TABLE_NAMES:
        count = f"SELECT count(*) AS n FROM {table}"
        assert sql_answer(spark, count).rows == sql_answer(duck, count).rows


@pytest.mark.timeout(300)
def test_spark_reads_a_dataset_of_two_minor_versions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_run_dir(tmp_path / "old", SyntheticRtpAudio(units=100), info(1))
    make_run_dir(tmp_path / "new", SyntheticRtpAudio(units=100, seed=2), info(2))
    dataset = tmp_path / "ds"
    ingest([tmp_path / "old"], dataset)
    added = layout.Column("queue_depth", pa.int32(), "INT", "added in minor 1", since=1)
    monkeypatch.setattr(
        layout, "TABLES", dict(layout.TABLES) | {"runs": (*layout.TABLES["runs"], added)}
    )
    monkeypatch.setattr(ingest_module, "MINOR", 1)
    real = ingest_module.runs_table
    monkeypatch.setattr(ingest_module, "runs_table", lambda facts: real(facts | {"queue_depth": 7}))
    sql = "SELECT started_at, queue_depth FROM runs ORDER BY started_at"
    assert sql_answer(engine_for(dataset, "spark", MASTER), sql).rows[0]["queue_depth"] is None
    ingest([tmp_path / "new"], dataset)
    rows = sql_answer(engine_for(dataset, "spark", MASTER), sql).rows
    assert [r["queue_depth"] for r in rows] == [None, 7]
    assert rows == sql_answer(engine_for(dataset), sql).rows


@pytest.mark.timeout(300)
def test_the_cli_runs_a_question_on_spark_quietly(engines: tuple[Engine, Engine, Path]) -> None:
    *_, dataset = engines
    args = ("query", str(dataset), "percentiles", "--by", "build", "--json")
    on_spark = latlab(*args, "--engine", "spark", "--master", MASTER, timeout=240)
    assert on_spark.returncode == 0 and on_spark.stderr == "", on_spark.stderr
    on_duckdb = latlab(*args, timeout=120)
    spark_doc, duck_doc = json.loads(on_spark.stdout), json.loads(on_duckdb.stdout)
    assert spark_doc["engine"] == "spark" and spark_doc["rows"] == duck_doc["rows"]


@pytest.mark.timeout(300)
def test_spark_keeps_its_scratch_in_a_directory_of_its_own(
    engines: tuple[Engine, Engine, Path],
) -> None:
    """Spark's block manager and its other scratch go to latlab's own directory (removed
    at exit), not to /tmp, where a killed query would leave them (two runs had)."""
    from latlab.dataset.engines import spark_session

    local = Path(spark_session(MASTER).conf.get("spark.local.dir"))
    assert local.name.startswith("latlab-spark-") and local.is_dir()
    assert list(local.glob("blockmgr-*"))
