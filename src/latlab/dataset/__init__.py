"""Many runs in one Parquet dataset (``latlab ingest``), queried with DuckDB or Spark
(``latlab query``).

A dataset (schema ``latlab.dataset/1``, docs/dataset.md) is a directory of four
hive-partitioned Parquet tables, ``segments`` (per unit and segment), ``summaries``
(summary.json's rows flattened), ``runs`` (one row per run) and ``labels`` (every key a
run can be selected or grouped by), and a manifest that lists the files each table is
made of. :mod:`latlab.dataset.ingest` appends runs (their stored analysis, read through
:func:`latlab.pipeline.analysis_of`); :mod:`latlab.dataset.questions` answers the ready
questions with the same SQL on either engine (:mod:`latlab.dataset.engines`).
"""
