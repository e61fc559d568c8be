"""The run directory: what a run directory holds, and reading its JSON documents.

The run directory is the contract between the lab (which writes it) and ingest, stitch,
analysis and reports (which read it); docs/run-dir.md documents the layout. This module
sits at the bottom of the package beside :mod:`latlab.errors` and imports nothing else of
latlab's, so every layer may use it.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from latlab.errors import DirectoryNotEmpty, UserInputError

RUN_SCHEMA = "latlab.run/1"
ENV_SCHEMA = "latlab.env/1"
SUMMARY_SCHEMA = "latlab.summary/1"
SWEEP_SCHEMA = "latlab.sweep/1"

# What the lab writes (the inputs of an analysis).
RUN_FILE = "run.json"
ENV_FILE = "env.json"
SCENARIO_FILE = "scenario.toml"
RESOURCES_FILE = "resources.parquet"
RESOURCES_SYSTEM = ""  # resources.parquet: the process name of the system-wide rows
TRACES = "traces"
LOGS = "logs"
LINKS = "links"
CAPTURES = "captures"  # captures/HOST.lllink and HOST.json: a host's packets (capture = true)
COSTS = "costs"  # costs/PROCESS.csv: perf's counts of a process with cost = true
SFUS = "sfus"  # sfus/NAME/: an SFU's configuration (written by latlab) and its log
SFU_LOG = "janus.log"  # in sfus/NAME/: Janus's log
LIVEKIT_CONFIG = "livekit.yaml"  # in sfus/NAME/: LiveKit's configuration (its log: stderr)
LOADS = "loads"  # loads/NAME.jsonl: a load generator's counters, a line a second
CLOCK_DIR = "clock"  # clock/NAME.jsonl: a clock domain's samples and two-way exchanges
CLOCK_LOG_SUFFIX = ".jsonl"
BROWSERS = "browsers"
SIGNAL = "signal"
# In signal/ (a [signal] table, the black box): what was played and what was recorded,
# and the rigs' timing logs.
SENT_WAV = "sent.wav"
RECEIVED_WAV = "received.wav"
INJECTED_WAV = "injected.wav"  # a device end: what its capture device delivered
INJECT_LOG = "inject.parquet"
RECORD_LOG = "record.parquet"
# A room with quality = true (the quality matrix, docs/sfu.md): the clip its publisher
# plays (clip.json: its codes, loop, frame rate, size; reference.wav: its audio).
QUALITY = "quality"
QUALITY_CLIP = "clip.json"
QUALITY_REFERENCE = "reference.wav"
# The elements latlab puts into a GStreamer end of [signal] (their probes are in its trace).
SIGNAL_SOURCE_ELEMENT = "latlab_signal_in"
SIGNAL_SINK_ELEMENT = "latlab_signal_out"
PAGESERVER_LOG = "pageserver"  # logs/pageserver.stdout and .stderr (browser runs)
LAB_STATE_FILE = "lab.json"  # a standing lab (latlab lab up): its state, in its directory
LOCK_FILE = "run.lock"  # latlab record: processes that share a run take it to update run.json
TRACE_SUFFIX = ".lltrace"
LINK_LOG_SUFFIX = ".lllink"
BROWSER_RECORDS_SUFFIX = ".jsonl"
DEVTOOLS_SUFFIX = ".devtools"  # logs/NAME.devtools: a browser's DevTools conversation
# What the analysis writes.
SUMMARY_FILE = "summary.json"
EVENTS_FILE = "events.parquet"
ELEMENT_STATS_FILE = "element-stats.parquet"
BLACKBOX_FILE = "blackbox.parquet"
FORWARDING_FILE = "forwarding.parquet"  # a captured host: every egress RTP packet, matched
ANALYSIS_DIR = "analysis"
ANALYSIS_MANIFEST = "manifest.json"
ARROW_SUFFIX = ".arrow"  # in analysis/, with stream-N.arrow and timeline-N.arrow
REPORT_FILE = "report.html"

# A sweep directory (latlab.sweep/1): sweep.json and one run directory per point.
SWEEP_FILE = "sweep.json"
POINTS_DIR = "points"

ANALYSIS_INPUT_FILES = (RUN_FILE, SCENARIO_FILE, RESOURCES_FILE)
ANALYSIS_INPUT_DIRS = (TRACES, LINKS, CAPTURES, COSTS, BROWSERS, SIGNAL, QUALITY)
ANALYSIS_INPUT_DIRS += (CLOCK_DIR,)  # the clock logs align the run's clock domains


class RunDirError(UserInputError, ValueError):
    """A run directory, or a file in it, that latlab cannot use: ``str()`` names the file."""


def read_json(path: Path, schema: str | None = None) -> dict[str, Any]:
    """A JSON document of a run directory; with ``schema``, one whose ``schema`` names that
    format and major version (a document without ``schema`` is taken as written before
    latlab named them). Raises RunDirError naming the file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise RunDirError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RunDirError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise RunDirError(f"{path}: not a JSON object")
    found = data.get("schema")
    if schema is not None and found is not None and found != schema:
        raise RunDirError(f"{path}: unknown schema {found!r} (this latlab reads {schema})")
    return data


NUMBER = (int, float)
# The types of run.json's fields where present (docs/run-dir.md; None: JSON null). A run
# directory from elsewhere (another version, damaged, hand-edited) whose run.json has
# another type is refused in one line naming the field, before anything reads it.
RUN_FIELDS: dict[str, tuple[type | None, ...]] = {
    "schema": (str,),
    "kind": (str,),
    "name": (str,),
    "scenario": (str, None),
    "status": (str,),
    "error": (str, None),
    "started_at": (str,),
    "started_monotonic_ns": (int,),
    "duration_s": NUMBER,
    "planned_duration_s": (*NUMBER, None),
    "measure_start_monotonic_ns": (int, None),
    "measure_end_monotonic_ns": (int, None),
    "trace": (bool,),
    "params": (dict,),
    "hosts": (dict,),
    "links": (list,),
    "captures": (dict,),
    "costs": (dict,),
    "loads": (dict,),
    "sfus": (dict,),
    "devices": (list,),
    "processes": (list,),
    "calls": (list,),
    "pageserver": (dict, None),
    "signal": (dict, None),
    "unit_ms": NUMBER,
}
# Fields whose entries (list items or mapping values) are JSON objects.
RUN_OBJECTS = ("hosts", "links", "captures", "costs", "loads", "sfus", "devices", "processes",
               "calls")  # fmt: skip


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def check_run(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (run.json read from ``path``) if its fields have their types, else
    RunDirError naming the first field that does not."""
    for key, types in RUN_FIELDS.items():
        if key not in data:
            continue
        value = data[key]
        allowed = tuple(t for t in types if t is not None)
        ok = (value is None and None in types) or (
            isinstance(value, allowed) and not (isinstance(value, bool) and bool not in allowed)
        )
        if isinstance(value, float) and value != value:  # NaN: no duration, no time
            ok = False
        if not ok:
            wanted = " or ".join("null" if t is None else t.__name__ for t in types)
            raise RunDirError(f"{path}: {key} is {_type_name(value)}, not {wanted}")
    for key in RUN_OBJECTS:
        entries = data.get(key)
        values = entries.values() if isinstance(entries, dict) else entries or []
        if not all(isinstance(v, dict) for v in values):
            raise RunDirError(f"{path}: {key} holds something that is not a JSON object")
    return data


def read_run(run_dir: Path) -> dict[str, Any] | None:
    """run.json of ``run_dir``; None where there is none (a directory of bare traces).
    RunDirError naming the file when it is not one, or a field has another type."""
    path = Path(run_dir) / RUN_FILE
    return check_run(path, read_json(path, RUN_SCHEMA)) if path.is_file() else None


def analysis_inputs(run_dir: Path) -> list[Path]:
    """Every file of ``run_dir`` an analysis reads (run.json, the scenario, resources,
    traces, link logs, browser records, signal files), sorted."""
    run_dir = Path(run_dir)
    found = [run_dir / name for name in ANALYSIS_INPUT_FILES if (run_dir / name).is_file()]
    found += [p for p in run_dir.glob(f"*{TRACE_SUFFIX}") if p.is_file()]  # bare traces
    for name in ANALYSIS_INPUT_DIRS:
        directory = run_dir / name
        if directory.is_dir():
            found += [p for p in directory.rglob("*") if p.is_file()]
    return sorted(found)


def is_sweep_dir(path: Path) -> bool:
    """Whether ``path`` is a sweep directory (holds sweep.json)."""
    return (Path(path) / SWEEP_FILE).is_file()


def read_sweep(sweep_dir: Path) -> dict[str, Any]:
    """sweep.json of a sweep directory (RunDirError naming the file when unusable)."""
    path = Path(sweep_dir) / SWEEP_FILE
    data = read_json(path)
    if data.get("schema") != SWEEP_SCHEMA:
        raise RunDirError(
            f"{path}: unknown schema {data.get('schema')!r} (expected {SWEEP_SCHEMA})"
        )
    return data


@dataclass(frozen=True)
class Instant:
    """One moment on both the wall clock (ISO-8601 UTC) and CLOCK_MONOTONIC (ns)."""

    iso: str
    monotonic_ns: int

    @classmethod
    def now(cls) -> Instant:
        """The current moment."""
        mono = time.monotonic_ns()
        return cls(datetime.now(UTC).isoformat(timespec="microseconds"), mono)


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as indented JSON (atomically: temp file, then rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def prepare(out_dir: Path) -> None:
    """Create ``out_dir`` with ``traces/`` and ``logs/``; refuse a non-empty existing dir."""
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise DirectoryNotEmpty(f"{out_dir}: run directory exists and is not empty")
    make_layout(out_dir)


def make_layout(out_dir: Path) -> None:
    """Create ``out_dir`` with ``traces/`` and ``logs/`` (those that exist are kept)."""
    (out_dir / TRACES).mkdir(parents=True, exist_ok=True)
    (out_dir / LOGS).mkdir(exist_ok=True)


@contextmanager
def locked(out_dir: Path) -> Iterator[None]:
    """Hold the run directory's lock file (``run.lock``, flock) while the block runs.

    Creates ``out_dir`` if needed. Processes that update one run.json together take it
    around each read-modify-write.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(out_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the only descriptor releases the lock


def trace_files(out_dir: Path) -> list[Path]:
    """Trace files written under ``out_dir/traces``, sorted by name."""
    directory = out_dir / TRACES
    return sorted(p for p in directory.iterdir() if p.is_file()) if directory.is_dir() else []


def trace_file(process: str, pid: int) -> str:
    """The name of a process's trace in ``traces/``."""
    return f"{process}-{pid}{TRACE_SUFFIX}"


def process_logs(run_dir: Path, process: str) -> tuple[Path, Path]:
    """Where a process's standard output and error go: ``logs/NAME.stdout``, ``.stderr``."""
    logs = Path(run_dir) / LOGS
    return logs / f"{process}.stdout", logs / f"{process}.stderr"


def browser_records(run_dir: Path, process: str) -> Path:
    """What a browser process's page recorded: ``browsers/NAME.jsonl``."""
    return Path(run_dir) / BROWSERS / f"{process}{BROWSER_RECORDS_SUFFIX}"


def capture_log(run_dir: Path, host: str) -> Path:
    """A host's packet capture: ``captures/HOST.lllink``."""
    return Path(run_dir) / CAPTURES / f"{host}{LINK_LOG_SUFFIX}"


def capture_stats(run_dir: Path, host: str) -> Path:
    """What a host's capture counted (frames, kernel drops, clock): ``captures/HOST.json``."""
    return Path(run_dir) / CAPTURES / f"{host}.json"


def sfu_dir(run_dir: Path, name: str) -> Path:
    """An SFU's configuration and log: ``sfus/NAME/``."""
    return Path(run_dir) / SFUS / name


def load_stats(run_dir: Path, load: str) -> Path:
    """A load generator's counters, one JSON line a second: ``loads/NAME.jsonl``."""
    return Path(run_dir) / LOADS / f"{load}.jsonl"


def cost_file(run_dir: Path, process: str) -> Path:
    """perf's counts of a process with ``cost = true``: ``costs/PROCESS.csv``."""
    return Path(run_dir) / COSTS / f"{process}.csv"


def capture_hosts(run_dir: Path) -> list[str]:
    """The hosts whose packets a run captured, sorted."""
    directory = Path(run_dir) / CAPTURES
    if not directory.is_dir():
        return []
    return sorted(p.name.removesuffix(LINK_LOG_SUFFIX) for p in directory.iterdir()
                  if p.name.endswith(LINK_LOG_SUFFIX))  # fmt: skip


def clock_log(run_dir: Path, name: str) -> Path:
    """A clock agent's log (a domain's samples and exchanges): ``clock/NAME.jsonl``."""
    return Path(run_dir) / CLOCK_DIR / f"{name}{CLOCK_LOG_SUFFIX}"


def clock_logs(run_dir: Path) -> list[Path]:
    """The clock logs of a run, sorted."""
    directory = Path(run_dir) / CLOCK_DIR
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.name.endswith(CLOCK_LOG_SUFFIX))


def process_clock_domains(meta: dict[str, Any] | None) -> dict[str, str]:
    """The clock domain of each trace file of a run (``NAME-PID.lltrace`` -> domain) and of
    its link logs (``links/A-B.lllink`` -> domain), from run.json: a process's
    ``clock_domain``, else its host's, else the run's; empty for a run of one domain
    that does not name it."""
    if not meta:
        return {}
    default = (meta.get("clock") or {}).get("domain")
    hosts = meta.get("hosts") or {}
    found: dict[str, str] = {}
    for proc in meta.get("processes") or []:
        if not isinstance(proc, dict) or proc.get("pid") is None:
            continue
        host = hosts.get(proc.get("host") or "") or {}
        domain = proc.get("clock_domain") or host.get("clock_domain") or default
        if domain:
            found[trace_file(str(proc.get("name")), int(proc["pid"]))] = str(domain)
    for link in meta.get("links") or []:
        if isinstance(link, dict) and link.get("log") and link.get("clock_domain"):
            found[Path(str(link["log"])).name] = str(link["clock_domain"])
    return found


def trace_dir(run_dir: Path) -> Path:
    """Where a run's traces are: ``traces/``, or the directory itself (bare traces)."""
    traces = Path(run_dir) / TRACES
    return traces if traces.is_dir() else Path(run_dir)


def analysis_stream_file(index: int, what: str = "stream") -> str:
    """A stored analysis's file for stream ``index`` (``stream`` or ``timeline``)."""
    return f"{what}-{index}{ARROW_SUFFIX}"
