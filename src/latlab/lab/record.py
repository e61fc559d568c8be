"""``latlab record``: run any command with the tracer loaded, outside the lab.

The command runs in its own session (so a terminal Ctrl-C reaches it once, forwarded by
us); SIGINT and SIGTERM received by latlab are forwarded to its process group. The run
directory gets ``run.json`` (kind ``record``), ``env.json``, ``traces/`` and ``logs/``.

Several commands may record into one run directory, each under its own name (a sender
and a receiver started by hand in two terminals): the first creates the directory, the
others join it, at the same time or later. Every update of run.json is a
read-modify-write under the directory's lock file (``rundir.locked``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from latlab import rundir
from latlab.errors import UserInputError
from latlab.lab.clockd import ClockAgent, default_domain
from latlab.lab.environment import environment
from latlab.tracer import tracer_env

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
NAME_RULE = "letters, digits, '.', '_', '-', not starting with '.', '_' or '-'; at most 64"
STOPPED_BY = {signal.SIGINT: "sigint", signal.SIGTERM: "sigterm"}


class RecordError(UserInputError, RuntimeError):
    """The command could not be recorded (its name or run directory refused, or it could
    not be started); ``str()`` is one line."""


@dataclass(frozen=True)
class ClockOptions:
    """The recorder's clock agent (docs/clocks.md): this machine's clock domain, the
    address it answers two-way exchanges on, and the peers it asks."""

    domain: str | None = None  # default monotonic@HOSTNAME
    serve: tuple[str, int] | None = None
    peers: dict[str, tuple[str, int]] | None = None  # peer domain -> address

    @property
    def name(self) -> str:
        return self.domain or default_domain()


@dataclass(frozen=True)
class Recorded:
    """How one recorded command ended."""

    exit_code: int  # 128 + the signal number for a command killed by a signal
    still_running: tuple[str, ...]  # the run's other processes still recording then


def record(
    argv: Sequence[str], out_dir: Path, process_name: str | None = None, *, trace: bool = True
) -> int:
    """Run ``argv`` with the tracer env, wait for it, write the run dir; return its exit code.

    See :func:`record_process`.
    """
    return record_process(argv, out_dir, process_name, trace=trace).exit_code


def record_process(
    argv: Sequence[str],
    out_dir: Path,
    process_name: str | None = None,
    *,
    trace: bool = True,
    clock: ClockOptions | None = None,
) -> Recorded:
    """Run ``argv`` with the tracer env and wait for it, recording it in run.json.

    Without ``process_name`` (named after ``argv[0]``) ``out_dir`` must be new or empty.
    With one, ``out_dir`` may also be a record run directory, which the process joins
    under that name. A command killed by a signal ends with 128 + the signal number, as
    a shell would. Raises RecordError if the name or the directory is refused or the
    command cannot be started, TracerNotBuilt if ``trace`` is set and the tracer plugin
    is missing. Beside the command, a clock agent samples this machine's clock into
    ``clock/NAME.jsonl`` and, with ``clock``'s serve or peers, runs two-way exchanges.
    """
    if not argv:
        raise RecordError("no command given")
    if process_name is not None:
        check_name(process_name)
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise RecordError(f"{out_dir}: exists and is not a directory")
    name = process_name or Path(argv[0]).name
    tracing = tracer_env(out_dir / rundir.TRACES, name) if trace else {}
    clock = clock or ClockOptions()
    with _forward_signals() as forwarder:
        child, started_run, agent = _start(
            list(argv), tracing, out_dir, name, process_name is not None, clock
        )
        forwarder.attach(child.pid)
        try:
            returncode = child.wait()
        finally:
            agent.stop()
    ended_ns = rundir.Instant.now().monotonic_ns
    code = 128 - returncode if returncode < 0 else returncode
    stopped = STOPPED_BY.get(forwarder.forwarded[0], "exited") if forwarder.forwarded else "exited"
    with rundir.locked(out_dir):
        try:
            run = _read_run(out_dir)
        except RecordError:  # gone or spoilt meanwhile: write it again as this one saw it
            run = started_run
        process = _find_process(run, started_run["processes"][-1])
        process.update(exit_code=code, stopped=stopped, stopped_monotonic_ns=ended_ns)
        process["stopped_s"] = round((ended_ns - run["started_monotonic_ns"]) / 1e9, 6)
        _write_run(out_dir, run)
    return Recorded(code, tuple(p["name"] for p in run["processes"] if p["stopped"] is None))


def check_name(name: str) -> None:
    """RecordError unless ``name`` is a safe process name (it names the trace file)."""
    if not NAME_RE.fullmatch(name):
        raise RecordError(f"--name {name!r}: a process name is {NAME_RULE}")


def print_env(out_dir: Path) -> str:
    """Shell ``export`` lines that make any GStreamer app trace into ``out_dir/traces``."""
    traces = Path(out_dir) / rundir.TRACES
    env = tracer_env(traces)
    traces.mkdir(parents=True, exist_ok=True)
    return "".join(f"export {key}={shlex.quote(value)}\n" for key, value in env.items())


def _start(
    argv: list[str],
    tracing: dict[str, str],
    out_dir: Path,
    name: str,
    joining: bool,
    clock: ClockOptions,
) -> tuple[subprocess.Popen, dict[str, Any], ClockAgent]:
    """Under the lock: check the run dir, start the clock agent and the command, list it
    in run.json (the last entry of the run returned)."""
    with rundir.locked(out_dir):
        run = _joinable_run(out_dir, name, joining)
        if run is None:
            rundir.make_layout(out_dir)
            rundir.write_json(out_dir / rundir.ENV_FILE, environment())
        started = rundir.Instant.now()
        run = run or _new_run(name, started, bool(tracing))
        _check_domain(out_dir, run, clock.name)
        log = rundir.clock_log(out_dir, name)
        try:
            agent = ClockAgent(log, clock.name, serve=clock.serve, peers=clock.peers)
        except OSError as exc:
            raise RecordError(
                f"clock agent: cannot answer on {clock.serve}: {exc.strerror or exc}"
            ) from None
        agent.start()
        run["clock"] = {"domain": clock.name, "domains": {clock.name: {}}}
        procs = run["processes"] = [p for p in run["processes"] if p["name"] != name]
        try:
            env = {**os.environ, **tracing}
            child = subprocess.Popen(argv, env=env, start_new_session=True)
        except OSError as exc:
            agent.stop()
            procs.append(_process(name, argv, None, started, run, stopped="not-started"))
            _write_run(out_dir, run)
            raise RecordError(f"{argv[0]}: cannot run: {exc.strerror or exc}") from None
        procs.append(_process(name, argv, child.pid, started, run, stopped=None))
        procs[-1]["clock_domain"] = clock.name
        _write_run(out_dir, run)
    return child, run, agent


def _check_domain(out_dir: Path, run: dict[str, Any], domain: str) -> None:
    """A record run is one machine's: RecordError for a process of another clock domain."""
    known = (run.get("clock") or {}).get("domain")
    if known and known != domain:
        raise RecordError(
            f"{out_dir}: a run of clock domain '{known}', not '{domain}': record each "
            "machine into its own directory and join them with latlab merge"
        )


def _joinable_run(out_dir: Path, name: str, joining: bool) -> dict[str, Any] | None:
    """The record run that ``name`` may join (None: start a new one there: the directory
    is new, empty, or its run never started a process), else RecordError saying why not."""
    if not any(p.name != rundir.LOCK_FILE for p in out_dir.iterdir()):
        return None
    if not (out_dir / rundir.RUN_FILE).is_file():
        raise RecordError(f"{out_dir}: not empty and not a latlab run directory (no run.json)")
    run = _read_run(out_dir)
    if all(p["stopped"] == "not-started" for p in run["processes"]):
        return None  # nothing ever ran: start the run afresh
    if not joining:
        raise RecordError(
            f"{out_dir}: run directory exists and is not empty "
            "(give --name NAME to add a process to its recording)"
        )
    if any(p["name"] == name and p["stopped"] != "not-started" for p in run["processes"]):
        raise RecordError(f"{out_dir}: process name '{name}' is already used there")
    return run


def _read_run(out_dir: Path) -> dict[str, Any]:
    """run.json of a record run; RecordError if it is not one."""
    path = out_dir / rundir.RUN_FILE
    try:
        run = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RecordError(f"{path}: cannot read: {exc}") from None
    kind = run.get("kind") if isinstance(run, dict) else None
    if isinstance(kind, str) and kind != "record":
        raise RecordError(f"{out_dir}: a latlab {kind} run, not a record run; record elsewhere")
    if not (
        isinstance(run, dict)
        and run.get("schema") == rundir.RUN_SCHEMA
        and isinstance(run.get("started_monotonic_ns"), int)
        and isinstance(run.get("processes"), list)
        and all(isinstance(p, dict) and "name" in p for p in run["processes"])
    ):
        raise RecordError(f"{path}: not the run.json of a latlab record run")
    for process in run["processes"]:  # entries written before record could be joined
        process.setdefault("stopped", None)
        process.setdefault("stopped_monotonic_ns", None)
    return run


def _write_run(out_dir: Path, run: dict[str, Any]) -> None:
    """Set the run's status, error and duration from its processes; write run.json."""
    procs = run["processes"]
    failures = [(p["name"], why) for p in procs if (why := _failure(p))]
    texts = [f"{name}: {why}" if len(procs) > 1 else why for name, why in failures]
    running = any(p["stopped"] is None for p in procs)
    run["status"] = "running" if running else "failed" if failures else "ok"
    run["error"] = "; ".join(texts) if run["status"] == "failed" else None
    ends = [p["stopped_monotonic_ns"] for p in procs if p["stopped_monotonic_ns"] is not None]
    start = run["started_monotonic_ns"]
    run["duration_s"] = round((max(ends) - start) / 1e9, 6) if ends else 0.0
    rundir.write_json(out_dir / rundir.RUN_FILE, run)


def _failure(process: dict[str, Any]) -> str | None:
    if process["stopped"] == "not-started":
        return "not started"
    code = process.get("exit_code")
    return None if code in (None, 0) else f"exit code {code}"


def _find_process(run: dict[str, Any], mine: dict[str, Any]) -> dict[str, Any]:
    """This recorder's entry in ``run`` (listed again if someone removed it meanwhile)."""
    for process in run["processes"]:
        if process["name"] == mine["name"] and process.get("pid") == mine["pid"]:
            return process
    run["processes"].append(mine)
    return mine


def _new_run(name: str, started: rundir.Instant, trace: bool) -> dict[str, Any]:
    return {
        "schema": rundir.RUN_SCHEMA,
        "kind": "record",
        "name": name,
        "scenario": None,
        "status": "running",
        "error": None,
        "started_at": started.iso,
        "started_monotonic_ns": started.monotonic_ns,
        "duration_s": 0.0,
        "trace": trace,
        "params": {},
        "hosts": {},
        "links": [],
        "processes": [],
    }


def _process(
    name: str,
    argv: list[str],
    pid: int | None,
    started: rundir.Instant,
    run: dict[str, Any],
    *,
    stopped: str | None,
) -> dict[str, Any]:
    """A run.json process entry; ``stopped`` None while it runs."""
    offset = round((started.monotonic_ns - run["started_monotonic_ns"]) / 1e9, 6)
    return {
        "name": name, "host": None, "argv": argv, "pid": pid, "exit_code": None,
        "started_s": offset, "ready_s": None,
        "started_monotonic_ns": started.monotonic_ns, "ready_monotonic_ns": None,
        "stopped": stopped, "stopped_s": None, "stopped_monotonic_ns": None,
    }  # fmt: skip


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


class _Forwarder:
    """Sends the signals it gets to a process group; holds early ones until it has one."""

    def __init__(self) -> None:
        self.pgid: int | None = None
        self.pending: list[int] = []
        self.forwarded: list[int] = []

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.pgid is None:
            self.pending.append(signum)
        else:
            self._send(signum)

    def attach(self, pgid: int) -> None:
        self.pgid = pgid
        for signum in self.pending:
            self._send(signum)
        self.pending.clear()

    def _send(self, signum: int) -> None:
        assert self.pgid is not None
        self.forwarded.append(signum)
        _signal_group(self.pgid, signum)


@contextmanager
def _forward_signals() -> Iterator[_Forwarder]:
    """While the block runs, SIGINT/SIGTERM we receive go to the attached process group."""
    forwarder = _Forwarder()
    if threading.current_thread() is not threading.main_thread():
        yield forwarder
        return
    signums = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, forwarder.handle) for s in signums}
    try:
        yield forwarder
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
    if forwarder.pending:  # the command never started: act on the signal ourselves
        signal.raise_signal(forwarder.pending[0])
