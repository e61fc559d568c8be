"""``latlab merge``: run directories recorded on different machines become one run.

Each input is a record or scenario run directory copied from its machine; each states
its clock domain(s) (run.json ``clock``; a run from before latlab recorded one:
``monotonic@HOSTNAME`` from env.json). The merged directory holds every input's traces,
link logs and clock logs, and a run.json of ``kind`` ``"merged"`` whose processes and
links name their clock domain, with the inputs in ``sources``. Its analysis stitches the
journeys across the machines by media position and aligns the domains from the clock
logs (docs/clocks.md); the first input's domain is the reference.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from latlab import rundir
from latlab.rundir import RunDirError

MERGED_KIND = "merged"


def run_domains(run_dir: Path, run: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A run's own clock domain (its reference) and every domain it states."""
    clock = run.get("clock") or {}
    domains = dict(clock.get("domains") or {})
    domain = clock.get("domain") or clock.get("reference")
    if not domain:
        env_path = Path(run_dir) / rundir.ENV_FILE
        host = rundir.read_json(env_path).get("hostname") if env_path.is_file() else None
        domain = f"monotonic@{host or Path(run_dir).name}"
    domains.setdefault(domain, {})
    return str(domain), domains


def merge_runs(inputs: list[Path], out: Path) -> dict[str, Any]:
    """Write the merged run of ``inputs`` into ``out`` (new or empty); its run.json.

    RunDirError naming the input that is not a run directory, or when two inputs hold
    the same directory."""
    if len(inputs) < 2:
        raise RunDirError("merge: give two run directories or more")
    resolved = [Path(p).resolve() for p in inputs]
    if len(set(resolved)) != len(resolved):
        raise RunDirError("merge: the same run directory is given twice")
    runs = []
    for path in inputs:
        if not Path(path).is_dir():
            raise RunDirError(f"{path}: no such run directory")
        run = rundir.read_run(Path(path))
        if run is None:
            raise RunDirError(f"{path}: not a run directory (no run.json)")
        if run.get("kind") == MERGED_KIND:
            raise RunDirError(f"{path}: already a merged run; merge its sources instead")
        if not rundir.trace_files(Path(path)) and not (Path(path) / rundir.LINKS).is_dir():
            raise RunDirError(f"{path}: no traces to merge")
        runs.append(run)
    rundir.prepare(out)
    merged = _merged_run(inputs, runs, out)
    first_env = Path(inputs[0]) / rundir.ENV_FILE
    env = rundir.read_json(first_env) if first_env.is_file() else {}
    env["merged_from"] = [
        rundir.read_json(p / rundir.ENV_FILE) if (p / rundir.ENV_FILE).is_file() else {}
        for p in map(Path, inputs)
    ]
    rundir.write_json(out / rundir.ENV_FILE, env)
    rundir.write_json(out / rundir.RUN_FILE, merged)
    return merged


def _merged_run(inputs: list[Path], runs: list[dict[str, Any]], out: Path) -> dict[str, Any]:
    processes: list[dict[str, Any]] = []
    links: list[dict[str, Any]] = []
    hosts: dict[str, Any] = {}
    domains: dict[str, Any] = {}
    sources = []
    taken: set[str] = set()
    reference = None
    for number, (path, run) in enumerate(zip(map(Path, inputs), runs, strict=True)):
        domain, stated = run_domains(path, run)
        reference = reference or domain
        for name, info in stated.items():
            domains.setdefault(name, {**info, "source": number})
        copied = _copy_traces(path, out, run, domain, taken)
        processes += copied
        links += _copy_links(path, out, run, domain, number)
        _copy_clock_logs(path, out, number)
        for host, info in (run.get("hosts") or {}).items():
            hosts[host if host not in hosts else f"{host}.{number}"] = info
        sources.append({
            "dir": str(path), "name": run.get("name"), "kind": run.get("kind"),
            "status": run.get("status"), "started_at": run.get("started_at"),
            "clock_domain": domain, "unit_ms": run.get("unit_ms"),
        })  # fmt: skip
    first = runs[0]
    statuses = [r.get("status") for r in runs]
    unit = next((r.get("unit_ms") for r in runs if r.get("unit_ms")), None)
    merged = {
        "schema": rundir.RUN_SCHEMA,
        "kind": MERGED_KIND,
        "name": "+".join(str(r.get("name", "?")) for r in runs),
        "scenario": None,
        "status": "ok" if all(s == "ok" for s in statuses) else "failed",
        "error": None if all(s == "ok" for s in statuses) else "; ".join(
            f"{s['dir']}: {s['status']}" for s in sources if s["status"] != "ok"
        ),
        "started_at": min(str(r.get("started_at", "")) for r in runs),
        "started_monotonic_ns": first.get("started_monotonic_ns", 0),
        "duration_s": max(float(r.get("duration_s") or 0.0) for r in runs),
        "trace": True,
        "params": {},
        "hosts": hosts,
        "links": links,
        "processes": processes,
        "clock": {"reference": reference, "domains": domains},
        "sources": sources,
    }  # fmt: skip
    if unit is not None:
        merged["unit_ms"] = unit
    for key in ("measure_start_monotonic_ns", "measure_end_monotonic_ns"):
        merged[key] = first.get(key)  # on the reference domain's clock
    return merged


def _link_or_copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _copy_traces(
    path: Path, out: Path, run: dict[str, Any], domain: str, taken: set[str]
) -> list[dict[str, Any]]:
    """Every trace of ``path`` into ``out/traces`` (a name taken by an earlier input gets
    ``.N``), with its process entry naming its clock domain."""
    hosts = run.get("hosts") or {}
    entries = {
        rundir.trace_file(str(p.get("name")), int(p["pid"])): p
        for p in run.get("processes") or []
        if isinstance(p, dict) and p.get("pid") is not None
    }
    found = []
    for trace in rundir.trace_files(path):
        entry = dict(entries.get(trace.name) or {})
        stem, _, pid = trace.stem.rpartition("-")
        name = entry.get("name") or stem
        pid_value = int(entry.get("pid") or (pid if pid.isdigit() else 0))
        while rundir.trace_file(str(name), pid_value) in taken:
            name = f"{name}.{len(taken)}"
        target = rundir.trace_file(str(name), pid_value)
        taken.add(target)
        _link_or_copy(trace, out / rundir.TRACES / target)
        host_domain = (hosts.get(entry.get("host") or "") or {}).get("clock_domain")
        entry.update(name=name, pid=pid_value,
                     clock_domain=entry.get("clock_domain") or host_domain or domain)  # fmt: skip
        entry.setdefault("host", None)
        found.append(entry)
    return found


def _copy_links(
    path: Path, out: Path, run: dict[str, Any], domain: str, number: int
) -> list[dict[str, Any]]:
    """The input's emulated links' logs and their run.json entries (in their domain)."""
    found = []
    for link in run.get("links") or []:
        if not isinstance(link, dict):
            continue
        entry = dict(link)
        log = link.get("log")
        if log and (path / log).is_file():
            target = Path(rundir.LINKS) / f"{number}-{Path(log).name}"
            _link_or_copy(path / log, out / target)
            entry["log"] = str(target)
        entry["clock_domain"] = link.get("clock_domain") or domain
        found.append(entry)
    return found


def _copy_clock_logs(path: Path, out: Path, number: int) -> None:
    for log in rundir.clock_logs(path):
        _link_or_copy(log, rundir.clock_log(out, f"{number}-{log.stem}"))
