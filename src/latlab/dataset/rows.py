"""A run's rows in the dataset's tables, built column-wise from its analysis.

``segments``: one row per unit and segment of every stream (units x segments, from the
journeys' times matrix); ``summaries``: summary.json's end to end, segments, kinds and
phases per stream; ``runs``: one row of facts; ``labels``: every key the run can be
selected or grouped by (docs/dataset.md).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from latlab.analysis.segments import StreamAnalysis
from latlab.dataset.layout import STAT_NAMES, STREAM_COUNTS, arrow_schema
from latlab.report.compare import stream_key
from latlab.stitch.journeys import Journeys
from latlab.stitch.position import MISSING

LINK_PROCESS = "link"  # an emulated link's probes (link/tx->rx:in): not a host
_SSRC = re.compile(r" ssrc=[0-9a-f]+$")  # as latlab.report.compare.stream_key drops it


def _strings(values: Sequence[str], indices: np.ndarray) -> pa.DictionaryArray:
    """``values[indices]`` as a dictionary array (few distinct names, many rows)."""
    return pa.DictionaryArray.from_arrays(
        pa.array(indices.astype(np.int32)), pa.array(list(values), pa.string())
    )


def _constant(value: str, rows: int) -> pa.DictionaryArray:
    return _strings([value], np.zeros(rows, np.int32))


def unit_flags(journeys: Journeys) -> tuple[np.ndarray, np.ndarray]:
    """Per unit, lost (left a host and never reached the next) and late (reached a host but
    not its later probes, and not lost): the rule of the stream's ``lost``/``late`` counts,
    per unit, read from the probe names (a probe's process is the name before ``/``)."""
    present = journeys.times != MISSING
    process = [name.split("/", 1)[0] for name in journeys.probe_names]
    hosts = [j for j, p in enumerate(process) if p != LINK_PROCESS]
    lost = np.zeros(len(present), bool)
    late = np.zeros(len(present), bool)
    for before, j in itertools.pairwise(hosts):
        if process[j] == process[before]:
            continue
        lost |= present[:, before] & ~present[:, j]
        for k in hosts:
            if k > j and process[k] == process[j]:
                late |= present[:, j] & ~present[:, k]
    return lost, late & ~lost


def stream_segments(run_id: str, index: int, stream: StreamAnalysis) -> pa.Table:
    """One row per unit and segment of ``stream`` (unit-major)."""
    j = stream.journeys
    units, probes = j.times.shape
    count = max(probes - 1, 0)
    rows = units * count
    present = j.times != MISSING
    arrived = present[:, 1:]
    timed = present[:, :-1] & arrived
    lost, late = unit_flags(j)
    segment = np.tile(np.arange(count, dtype=np.int32), units)
    columns = {
        "run_id": _constant(run_id, rows),
        "stream_index": pa.array(np.full(rows, index, np.int32)),
        "stream": _constant(stream_key(stream), rows),
        "unit": pa.array(np.repeat(np.arange(units, dtype=np.int64), count)),
        "unit_start_ns": pa.array(np.repeat(j.unit_start.astype(np.int64), count)),
        "segment": pa.array(segment),
        "kind": _strings(j.segment_kinds, segment),
        "from_probe": _strings(j.probe_names[:-1], segment),
        "to_probe": _strings(j.probe_names[1:], segment),
        "time_ns": pa.array((j.times[:, 1:] - j.times[:, :-1]).ravel(), mask=~timed.ravel()),
        "at_ns": pa.array(j.times[:, 1:].ravel(), mask=~arrived.ravel()),
        "complete": pa.array(np.repeat(j.complete, count)),
        "lost": pa.array(np.repeat(lost, count)),
        "late": pa.array(np.repeat(late, count)),
    }
    return pa.table(columns)


def segments_table(run_id: str, streams: Sequence[StreamAnalysis]) -> pa.Table | None:
    """Every stream's unit-segment rows (string columns dictionary-encoded); None when the
    run has no stream."""
    tables = [stream_segments(run_id, i, s) for i, s in enumerate(streams)]
    return pa.concat_tables(tables) if tables else None


def summaries_table(run_id: str, summary: dict[str, Any]) -> pa.Table:
    """summary.json's figures flattened: per stream its end to end, segments, kinds and
    phases (a few dozen rows a run: built from the JSON row by row)."""
    rows = []
    for index, stream in enumerate(summary.get("streams", [])):
        base = {
            "run_id": run_id,
            "stream_index": index,
            "stream": _SSRC.sub("", stream.get("id", "")),
            "stream_id": stream.get("id", ""),
            "media": stream.get("media"),
            **{name: stream.get(name) for name in STREAM_COUNTS},
        }
        spans = [("end_to_end", "end to end", None, None, stream.get("end_to_end", {}))]
        spans += [
            ("segment", seg.get("to"), i, seg.get("kind"), seg)
            for i, seg in enumerate(stream.get("segments", []))
        ]
        spans += [("kind", k, None, k, v) for k, v in stream.get("kinds", {}).items()]
        spans += [("phase", k, None, None, v) for k, v in stream.get("phases", {}).items()]
        for figure, name, segment, kind, stats in spans:
            rows.append(
                base
                | {"figure": figure, "name": name, "segment": segment, "kind": kind}
                | {"from_probe": stats.get("from"), "to_probe": stats.get("to")}
                | {n: stats.get(n) for n in ("count", *STAT_NAMES, "negative")}
            )
    return pa.Table.from_pylist(rows, schema=arrow_schema("summaries"))


def runs_table(facts: dict[str, Any]) -> pa.Table:
    """The run's row of ``runs``."""
    return pa.Table.from_pylist([facts], schema=arrow_schema("runs"))


def labels_table(run_id: str, keys: dict[str, tuple[str, str]]) -> pa.Table:
    """The run's rows of ``labels``: key -> (value, origin)."""
    rows = [
        {"run_id": run_id, "key": k, "value": v, "origin": o} for k, (v, o) in sorted(keys.items())
    ]
    return pa.Table.from_pylist(rows, schema=arrow_schema("labels"))
