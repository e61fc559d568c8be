"""The engines a dataset is queried with: DuckDB (embedded, the default) and Apache Spark
(``--engine spark``, ``--master`` passed through, ``local[*]`` by default).

Both read the same Parquet files, the ones the manifest lists, as four views (``segments``,
``summaries``, ``runs``, ``labels``, each with the partition columns ``scenario`` and
``date`` as strings); a column that the files of an older minor version lack is NULL. The
ready questions are the same SQL text on both (:mod:`latlab.dataset.questions`); what a
question is given (keys, values, probe names) is registered as a small table, never
spliced into the SQL.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

from latlab.dataset import layout
from latlab.dataset.layout import (
    PARTITION_KEYS,
    TABLE_NAMES,
    DatasetError,
    Manifest,
    missing_columns,
)
from latlab.errors import EnvironmentProblem

ENGINES = ("duckdb", "spark")
DEFAULT_MASTER = "local[*]"
LOCAL_SHUFFLE_PARTITIONS = 8  # local Spark: a few tasks per shuffle, not 200
_SPARK_TYPES = {
    pa.string(): "STRING",
    pa.int64(): "BIGINT",
    pa.int32(): "INT",
    pa.float64(): "DOUBLE",
    pa.bool_(): "BOOLEAN",
}
_LOG4J = """rootLogger.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = spark: %p %c{1}: %m%n
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
"""
SPARK_LOG = "spark.log"  # in the session's temporary conf directory: the JVM's stderr


class Engine(ABC):
    """A SQL engine over one dataset's tables."""

    name: str

    def __init__(self, root: Path, manifest: Manifest) -> None:
        self.root = Path(root)
        self.manifest = manifest

    @abstractmethod
    def register(self, name: str, table: pa.Table) -> None:
        """Make ``table`` (a question's parameters) a view called ``name``."""

    @abstractmethod
    def query(self, sql: str) -> pa.Table:
        """The result of ``sql`` (DatasetError with the engine's message when it fails)."""

    def close(self) -> None:  # noqa: B027 (most engines have nothing to release)
        """Release the engine (a Spark session is kept for the process: see SparkEngine)."""

    def _select_list(self, table: str) -> list[str]:
        """The view's columns: the files' own, NULL for those their minor version lacks,
        then the partition columns."""
        absent = {c.name for c in missing_columns(table, self.manifest.newest_minor(table))}
        return [
            f"CAST(NULL AS {c.sql}) AS {c.name}" if c.name in absent else c.name
            for c in layout.TABLES[table]
        ] + list(PARTITION_KEYS)

    def _files(self, table: str) -> list[str]:
        return [str(self.root / p) for p in self.manifest.table_files(table)]

    def _merge(self, table: str) -> bool:
        """Whether the files' schemas differ (several minor versions): merge by name."""
        return self.manifest.oldest_minor(table) != self.manifest.newest_minor(table)


def _empty_select(table: str) -> str:
    columns = [f"CAST(NULL AS {c.sql}) AS {c.name}" for c in layout.TABLES[table]]
    columns += [f"CAST(NULL AS STRING) AS {key}" for key in PARTITION_KEYS]
    return f"SELECT {', '.join(columns)} FROM (SELECT 1 AS one) AS nothing WHERE 1 = 0"


class DuckDBEngine(Engine):
    """DuckDB, in this process."""

    name = "duckdb"

    def __init__(self, root: Path, manifest: Manifest) -> None:
        import duckdb

        super().__init__(root, manifest)
        self._duckdb = duckdb
        self.con = duckdb.connect()
        for table in TABLE_NAMES:
            self.con.execute(f"CREATE VIEW {table} AS {self._source(table)}")

    def _source(self, table: str) -> str:
        files = self._files(table)
        if not files:
            return _empty_select(table)
        listed = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
        options = "hive_partitioning = true, hive_types = {'scenario': VARCHAR, 'date': VARCHAR}"
        if self._merge(table):
            options += ", union_by_name = true"
        columns = ", ".join(self._select_list(table))
        return f"SELECT {columns} FROM read_parquet([{listed}], {options})"

    def register(self, name: str, table: pa.Table) -> None:
        """A view of an Arrow table."""
        self.con.register(name, table)

    def query(self, sql: str) -> pa.Table:
        """Run ``sql``; its result as an Arrow table."""
        try:
            relation = self.con.sql(sql)
            if relation is None:
                return pa.table({})
            fetch = getattr(relation, "to_arrow_table", None) or relation.fetch_arrow_table
            return fetch()
        except self._duckdb.Error as exc:
            raise DatasetError(f"duckdb: {_first_line(exc)}") from None

    def close(self) -> None:
        """Close the connection."""
        self.con.close()


_SESSIONS: dict[str, Any] = {}  # master -> SparkSession (one JVM per process)


class SparkEngine(Engine):
    """Apache Spark through pyspark: a session on ``master`` (``local[*]``: this machine)."""

    name = "spark"

    def __init__(self, root: Path, manifest: Manifest, master: str = DEFAULT_MASTER) -> None:
        super().__init__(root, manifest)
        self.spark = spark_session(master)
        for table in TABLE_NAMES:
            self._frame(table).createOrReplaceTempView(table)

    def _frame(self, table: str) -> Any:
        files = self._files(table)
        if not files:
            return self.spark.sql(_empty_select(table))
        reader = self.spark.read.option("basePath", str(self.root / table))
        if self._merge(table):
            reader = reader.option("mergeSchema", "true")
        return reader.parquet(*files).selectExpr(*self._select_list(table))

    def register(self, name: str, table: pa.Table) -> None:
        """A temporary view of an Arrow table's rows."""
        ddl = ", ".join(f"{f.name} {_SPARK_TYPES[f.type]}" for f in table.schema)
        frame = self.spark.createDataFrame(table.to_pylist(), ddl)
        frame.createOrReplaceTempView(name)

    def query(self, sql: str) -> pa.Table:
        """Run ``sql``; its result as an Arrow table."""
        from pyspark.errors import PySparkException

        try:
            frame = self.spark.sql(sql)
            return frame.toArrow()
        except PySparkException as exc:
            raise DatasetError(f"spark: {_first_line(exc)}") from None


def spark_session(master: str = DEFAULT_MASTER) -> Any:
    """A Spark session on ``master`` (made once per process and master): quiet logs, no UI,
    partition columns read as strings, UTC, its scratch in a directory of its own that
    goes at exit; EnvironmentProblem if pyspark or Java is missing."""
    if master in _SESSIONS:
        return _SESSIONS[master]
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise EnvironmentProblem(
            "--engine spark needs pyspark: pip install 'latlab[spark]' (scripts/setup.sh "
            "installs it)"
        ) from None
    conf_dir = Path(tempfile.mkdtemp(prefix="latlab-spark-"))
    atexit.register(shutil.rmtree, conf_dir, True)
    (conf_dir / "log4j2.properties").write_text(_LOG4J, encoding="utf-8")
    if "SPARK_CONF_DIR" not in os.environ:  # a user's own Spark configuration wins
        os.environ["SPARK_CONF_DIR"] = str(conf_dir)
    builder = (
        SparkSession.builder.master(master)
        .appName("latlab query")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # its scratch (blockmgr-*, spark-*) in latlab's own directory, removed at exit,
        # not left in /tmp by a query that was killed
        .config("spark.local.dir", str(conf_dir))
    )
    if master.startswith("local"):
        builder = builder.config("spark.sql.shuffle.partitions", str(LOCAL_SHUFFLE_PARTITIONS))
    log = conf_dir / SPARK_LOG
    try:
        with _stderr_to(log):  # the JVM keeps this stderr: its warnings go to the log
            session = builder.getOrCreate()
    except Exception as exc:  # pyspark says so in many types; all mean no session
        said = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
        raise EnvironmentProblem(
            f"spark: cannot start a session on {master}: {_first_line(exc)}"
            f"{': ' + said[-1] if said else ''} (a Java runtime is needed: scripts/setup.sh "
            "installs default-jre-headless)"
        ) from None
    session.sparkContext.setLogLevel("ERROR")
    _SESSIONS[master] = session
    return session


@contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """File descriptor 2 goes to ``path`` while the block runs (children keep it)."""
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


def open_engine(name: str, root: Path, manifest: Manifest, master: str = DEFAULT_MASTER) -> Engine:
    """The engine called ``name`` over the dataset at ``root``."""
    if name == "duckdb":
        return DuckDBEngine(root, manifest)
    if name == "spark":
        return SparkEngine(root, manifest, master)
    raise DatasetError(f"--engine {name!r}: expected one of {', '.join(ENGINES)}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
