"""What ``latlab ingest`` is given: run directories and sweep directories (each point a
run), and what a run directory says about itself (run.json, env.json, its sweep point).

A run's id is stable: 16 hex digits of a digest of run.json's ``started_at`` and ``name``
and env.json's ``hostname``, so the same run ingested from another path (a copy, a
mounted archive) is recognised as the same run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from latlab.errors import LatlabError
from latlab.rundir import (
    ENV_FILE,
    ENV_SCHEMA,
    POINTS_DIR,
    RUN_FILE,
    is_sweep_dir,
    read_json,
    read_run,
    read_sweep,
)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
INGESTED = ("ok", "interrupted")  # run.json statuses whose runs are ingested
# Keys every run has in ``labels`` (origin "run"): a --label may not take one.
RUN_KEYS = (
    "run_id",
    "scenario",
    "date",
    "name",
    "point",
    "run_kind",
    "status",
    "hostname",
    "latlab_version",
    "gstreamer_version",
    "chromium_version",
    "kernel",
    "python_version",
    "machine",
    "cpu_count",
    "unit_ms",
    "revision",
)


class Skip(Exception):
    """A run directory that is not ingested, and why (one line naming it)."""


@dataclass
class Candidate:
    """A run directory to ingest, with the sweep point it is (if any)."""

    run_dir: Path
    sweep_dir: Path | None = None
    point: str | None = None
    values: dict[str, Any] = field(default_factory=dict)  # the point's sweep values
    problem: str | None = None  # known before reading it: why it is skipped


def candidates(paths: Sequence[Path]) -> list[Candidate]:
    """The runs named by ``paths``: a run directory is one, a sweep directory each of its
    points (a point that did not finish is a candidate with its ``problem``)."""
    out: list[Candidate] = []
    for path in map(Path, paths):
        if not is_sweep_dir(path):
            out.append(Candidate(path))
            continue
        try:
            points = read_sweep(path).get("points", [])
        except LatlabError as exc:
            out.append(Candidate(path, problem=str(exc)))
            continue
        for point in points:
            run_dir = path / point.get("dir", f"{POINTS_DIR}/{point.get('name')}")
            status = point.get("status")
            problem = None
            if status != "ok":
                error = f": {point['error']}" if point.get("error") else ""
                problem = f"{run_dir}: sweep point {status}{error}"
            out.append(
                Candidate(run_dir, path, point.get("name"), dict(point.get("values", {})), problem)
            )
    return out


@dataclass
class RunFacts:
    """What the dataset records about a run besides its analysis."""

    run_id: str
    scenario: str
    date: str
    row: dict[str, Any]  # its row of ``runs`` (without units, streams)
    keys: dict[str, tuple[str, str]]  # key -> (value, origin) for ``labels``


def read_facts(c: Candidate, revision: str | None, now: str) -> tuple[RunFacts, dict[str, Any]]:
    """The facts of a candidate and its run.json; Skip with the reason when it is not a
    run directory that can be ingested (missing or unknown run.json, env.json, a run
    still running or failed)."""
    if c.problem:
        raise Skip(c.problem)
    if not c.run_dir.is_dir():
        raise Skip(f"{c.run_dir}: no such run directory")
    try:
        run = read_run(c.run_dir)
        if run is None:
            raise Skip(f"{c.run_dir}: not a run directory (no {RUN_FILE})")
        env = _env(c)
    except LatlabError as exc:
        raise Skip(str(exc)) from None
    status = run.get("status")
    if status not in INGESTED:
        error = f": {run['error']}" if run.get("error") else ""
        raise Skip(f"{c.run_dir}: run {status}{error} ({RUN_FILE})")
    started = _started(c.run_dir, run)
    name = str(run.get("name") or c.run_dir.name)
    hostname = str(env.get("hostname") or "")
    digest = hashlib.sha256(f"{run['started_at']}\0{name}\0{hostname}".encode())
    run_id = digest.hexdigest()[:16]
    row = {
        "run_id": run_id,
        "run_dir": str(c.run_dir.resolve()),
        "sweep_dir": str(c.sweep_dir.resolve()) if c.sweep_dir else None,
        "point": c.point,
        "name": name,
        "run_kind": run.get("kind"),
        "scenario_file": run.get("scenario"),
        "status": status,
        "started_at": started.isoformat(timespec="microseconds"),
        "started_ns": (started - EPOCH) // timedelta(microseconds=1) * 1000,
        "duration_s": _float(run.get("duration_s")),
        "hostname": hostname,
        "chromium_version": _chromium(run),
        "revision": revision,
        "ingested_at": now,
        **{k: env.get(k) for k in ("latlab_version", "gstreamer_version", "kernel")},
        **{k: env.get(k) for k in ("python_version", "machine", "cpu_count")},
    }
    date = started.date().isoformat()
    facts = RunFacts(run_id, name, date, row, {})
    return facts, run


def label_keys(
    facts: RunFacts, run: dict[str, Any], values: dict[str, Any], labels: dict[str, str]
) -> dict[str, tuple[str, str]]:
    """Every key of the run for ``labels``, by precedence: a label over a sweep value over
    a scenario param over a run fact."""
    keys = {k: (text(v), "param") for k, v in (run.get("params") or {}).items()}
    keys |= {k: (text(v), "sweep") for k, v in values.items()}
    keys |= {k: (v, "label") for k, v in labels.items()}
    row = facts.row | {"scenario": facts.scenario, "date": facts.date}
    for key in RUN_KEYS:
        if row.get(key) is not None:
            keys.setdefault(key, (text(row[key]), "run"))
    return {k: v for k, v in keys.items() if v[0] is not None}


def text(value: Any) -> str:
    """A value as the text ``labels`` keeps: integers as such, whole floats as integers
    (``20``), others shortest (``2.5``), booleans ``true``/``false``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.0f}" if value.is_integer() and abs(value) < 1e15 else repr(value)
    return str(value)


def _env(c: Candidate) -> dict[str, Any]:
    """env.json of the run, else of its sweep (Skip if neither has one)."""
    for directory in (c.run_dir, c.sweep_dir):
        if directory is not None and (directory / ENV_FILE).is_file():
            return read_json(directory / ENV_FILE, ENV_SCHEMA)
    raise Skip(f"{c.run_dir}: incomplete run directory (no {ENV_FILE})")


def _started(run_dir: Path, run: dict[str, Any]) -> datetime:
    try:
        started = datetime.fromisoformat(str(run["started_at"]))
    except (KeyError, ValueError):
        raise Skip(f"{run_dir / RUN_FILE}: no valid started_at") from None
    if started.tzinfo is None:
        started = started.replace(tzinfo=UTC)
    return started.astimezone(UTC)


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _chromium(run: dict[str, Any]) -> str | None:
    for process in run.get("processes", []):
        browser = process.get("browser") if isinstance(process, dict) else None
        if isinstance(browser, dict) and browser.get("version"):
            return str(browser["version"])
    return None
