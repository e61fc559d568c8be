"""Test matrices: expand a scenario's ``[sweep]`` into points and run them one by one.

A sweep directory (``latlab.sweep/1``, see docs/run-dir.md) holds the sweep file as
given (``scenario.toml``), ``env.json``, ``sweep.json`` (kept up to date after every
point, also on Ctrl-C) and one run directory per point under ``points/NAME/``, each
with its own concrete ``scenario.toml`` and ``summary.json``.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date, time
from pathlib import Path
from typing import Any

from rich.console import Console

from latlab import rundir
from latlab.errors import DirectoryNotEmpty
from latlab.lab.environment import environment
from latlab.lab.runner import run_scenario
from latlab.lab.scenario import Scenario, ScenarioError, parse_scenario
from latlab.lab.scenario.sweep import point_name
from latlab.lab.signals import Terminated, signals_deferred, sigterm_raises
from latlab.rundir import POINTS_DIR, SWEEP_FILE, SWEEP_SCHEMA
from latlab.tracer import plugin_dir

PointAnalysis = Callable[["SweepPoint", Path], dict[str, Any]]


@dataclass(frozen=True)
class SweepPoint:
    """One point of a sweep: its name, its variables' values and its concrete scenario."""

    name: str
    values: Mapping[str, Any]
    scenario: Scenario


@dataclass
class SweepResult:
    """Outcome of a sweep: its directory and the contents of sweep.json."""

    out_dir: Path
    sweep: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> list[dict[str, Any]]:
        """The points that did not finish with status ``ok``."""
        return [p for p in self.sweep.get("points", []) if p["status"] != "ok"]


def expand_sweep(scenario: Scenario) -> list[SweepPoint]:
    """Every point of ``scenario``'s ``[sweep]``, each a validated concrete scenario.

    A point's scenario text is the template with its values substituted (what its
    run directory keeps as scenario.toml); its ``source`` is ``FILE [NAME]``.
    """
    sweep = scenario.sweep
    if sweep is None:
        raise ScenarioError(f"{scenario.source}: has no [sweep] table")
    points = []
    for values in sweep.combinations():
        name = point_name(values)
        header = f"# {scenario.source}: sweep point {name}\n"
        text = header + to_toml(sweep.point_data(values))
        points.append(SweepPoint(name, values, parse_scenario(text, f"{scenario.source} [{name}]")))
    return points


def run_sweep(
    scenario: Scenario,
    out_dir: Path,
    *,
    analyse: PointAnalysis,
    progress: bool = True,
    console: Console | None = None,
) -> SweepResult:
    """Run every point of ``scenario``'s sweep into ``out_dir/points/NAME``; ``analyse``
    (point, its run directory) gives the figures sweep.json keeps of it (the lab analyses
    nothing itself: :func:`latlab.experiment.run_analysed_sweep` passes the analysis).

    Writes ``out_dir/sweep.json`` after each point. A point that fails is recorded
    (status ``failed``, one-line ``error``) and the sweep goes on. Ctrl-C / SIGTERM
    stop the sweep after the current point's cleanup: sweep.json then says
    ``interrupted`` and KeyboardInterrupt / Terminated propagates.
    """
    out_dir = Path(out_dir)
    points = expand_sweep(scenario)  # every mistake is found before anything starts
    plugin_dir()  # fail once, not per point, when the tracer is not built
    console = console or Console()
    _prepare(scenario, out_dir)
    state = _new_sweep_json(scenario, points)
    result = SweepResult(out_dir, state)
    _write(out_dir, state)
    with sigterm_raises():
        try:
            for index, point in enumerate(points):
                if progress:
                    console.print(f"[bold]point {index + 1}/{len(points)}[/bold] {point.name}")
                entry = state["points"][index]
                entry["status"] = "running"
                _write(out_dir, state)
                _run_point(point, out_dir, entry, progress, analyse)
                _write(out_dir, state)
                if progress:
                    console.print(f"  {point_line(entry)}", highlight=False, soft_wrap=True)
        except (KeyboardInterrupt, Terminated):
            state["status"] = "interrupted"
            state["finished_at"] = rundir.Instant.now().iso
            _write(out_dir, state)
            raise
    state["status"] = "failed" if result.failed else "ok"
    state["finished_at"] = rundir.Instant.now().iso
    _write(out_dir, state)
    return result


def _run_point(
    point: SweepPoint,
    out_dir: Path,
    entry: dict[str, Any],
    progress: bool,
    analyse: PointAnalysis,
) -> None:
    """Run and analyse one point, recording the outcome in its ``entry`` of sweep.json."""
    point_dir = out_dir / entry["dir"]
    try:
        run_scenario(point.scenario, point_dir, progress=progress)
        entry.update(analyse(point, point_dir))
        entry["status"] = "ok"
    except (KeyboardInterrupt, Terminated) as exc:
        entry["status"] = "interrupted"
        sigint = isinstance(exc, KeyboardInterrupt)
        entry["error"] = "interrupted by SIGINT" if sigint else "terminated by SIGTERM"
        raise
    except Exception as exc:  # a failed point is reported and the sweep goes on
        entry["status"] = "failed"
        entry["error"] = _one_line(exc)


def point_line(entry: Mapping[str, Any]) -> str:
    """One line on a point's outcome: its end-to-end figures (or, without a followed
    stream, what its SFU hosts forwarded and cost), or why it failed."""
    if entry["status"] != "ok":
        return f"{entry['name']}: {entry['status']}: {entry.get('error') or ''}".rstrip(": ")
    parts = []
    for stream in entry["streams"]:
        e2e = stream["end_to_end"]
        parts.append(
            f"end to end p50 {_ms(e2e['p50_ms'])} p99 {_ms(e2e['p99_ms'])} ms · "
            f"lost {stream['lost']} late {stream['late']}"
        )
    parts = parts or _forwarding_parts(entry)
    return f"{entry['name']}: ok · " + (" | ".join(parts) or "no streams found")


def _forwarding_parts(entry: Mapping[str, Any]) -> list[str]:
    """Per captured host, what it forwarded and how long packets stayed; per counted SFU
    its CPU per forwarded packet."""
    parts = []
    for host, box in (entry.get("forwarding") or {}).items():
        if "error" in box:
            parts.append(f"{host}: {box['error']}")
            continue
        rate, dwell = box.get("match_rate"), box.get("dwell") or {}
        matched = "-" if rate is None else f"{100 * rate:.1f} %"
        parts.append(
            f"{host} forwarded {_count(box.get('forwarded_per_s'))} pkt/s, matched {matched}, "
            f"dwell p50 {_ms(dwell.get('p50_ms'))} p99 {_ms(dwell.get('p99_ms'))} ms"
        )
    for name, cost in (entry.get("costs") or {}).items():
        cpu_us = (cost.get("per_packet") or {}).get("cpu_us")
        if cpu_us is not None:
            parts.append(f"{name} {cpu_us:.1f} µs CPU per packet")
    return parts


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def _prepare(scenario: Scenario, out_dir: Path) -> None:
    """Create the sweep directory (refusing a non-empty one) with the scenario and env.json."""
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise DirectoryNotEmpty(f"{out_dir}: sweep directory exists and is not empty")
    (out_dir / POINTS_DIR).mkdir(parents=True, exist_ok=True)
    source = Path(scenario.source)
    if source.is_file():
        shutil.copyfile(source, out_dir / rundir.SCENARIO_FILE)
    else:
        (out_dir / rundir.SCENARIO_FILE).write_text(scenario.text, encoding="utf-8")
    rundir.write_json(out_dir / rundir.ENV_FILE, environment())


def _new_sweep_json(scenario: Scenario, points: list[SweepPoint]) -> dict[str, Any]:
    assert scenario.sweep is not None
    return {
        "schema": SWEEP_SCHEMA,
        "name": scenario.name,
        "scenario": scenario.source,
        "status": "running",
        "started_at": rundir.Instant.now().iso,
        "finished_at": None,
        "sweep": scenario.sweep.definition(),
        "points": [
            {
                "name": p.name,
                "values": dict(p.values),
                "dir": f"{POINTS_DIR}/{p.name}",
                "status": "pending",
                "error": None,
                "duration_s": None,
                "streams": [],
                "resources": None,
            }
            for p in points
        ],
    }


def _write(out_dir: Path, state: dict[str, Any]) -> None:
    with signals_deferred():
        rundir.write_json(out_dir / SWEEP_FILE, state)


# --- a small TOML writer for the concrete scenario of each point -----------------------


def to_toml(data: Mapping[str, Any]) -> str:
    """``data`` (decoded TOML: tables, arrays, scalars) as TOML text that decodes to it."""
    lines: list[str] = []
    _table(data, [], lines, array=False)
    return "\n".join(lines).lstrip("\n") + "\n"


def _table(table: Mapping[str, Any], path: list[str], lines: list[str], array: bool) -> None:
    nested = {k: v for k, v in table.items() if _is_table(v) or _is_table_array(v)}
    if path and (array or len(nested) < len(table) or not table):  # else implied by subtables
        dotted = ".".join(_key(p) for p in path)
        lines.extend(["", f"[[{dotted}]]" if array else f"[{dotted}]"])
    lines.extend(f"{_key(k)} = {_value(v)}" for k, v in table.items() if k not in nested)
    for key, value in nested.items():
        items = value if _is_table_array(value) else [value]
        for item in items:
            _table(item, [*path, key], lines, array=_is_table_array(value))


def _is_table(value: Any) -> bool:
    return isinstance(value, dict)


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _key(key: str) -> str:
    bare = key and all(c.isascii() and (c.isalnum() or c in "_-") for c in key)
    return key if bare else _string(key)


def _string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, date | time):
        return value.isoformat()
    raise TypeError(f"cannot write {type(value).__name__} as TOML")
