"""``latlab record``: run any command with the tracer loaded, outside the lab.

The command runs in its own session (so a terminal Ctrl-C reaches it once, forwarded by
us); SIGINT and SIGTERM received by latlab are forwarded to its process group. The run
directory gets ``run.json`` (kind ``record``), ``env.json``, ``traces/`` and ``logs/``.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from latlab.lab import rundir
from latlab.tracer import tracer_env


class RecordError(RuntimeError):
    """The command could not be started; ``str()`` is one line."""


def record(
    argv: Sequence[str], out_dir: Path, process_name: str | None = None, *, trace: bool = True
) -> int:
    """Run ``argv`` with the tracer env, wait for it, write the run dir; return its exit code.

    A command killed by a signal returns 128 + the signal number, as a shell would.
    Raises RecordError if the command cannot be started, TracerNotBuilt if ``trace`` is
    set and the tracer plugin is missing.
    """
    if not argv:
        raise RecordError("no command given")
    out_dir = Path(out_dir)
    name = process_name or Path(argv[0]).name
    tracing = tracer_env(out_dir / rundir.TRACES, name) if trace else {}
    rundir.prepare(out_dir)
    rundir.write_json(out_dir / "env.json", rundir.environment())
    started = rundir.Instant.now()
    with _forward_signals() as forwarder:
        try:
            child = subprocess.Popen(
                list(argv), env={**os.environ, **tracing}, start_new_session=True
            )
        except OSError as exc:
            raise RecordError(f"{argv[0]}: cannot run: {exc.strerror or exc}") from None
        forwarder.attach(child.pid)
        returncode = child.wait()
    ended_ns = rundir.Instant.now().monotonic_ns
    code = 128 - returncode if returncode < 0 else returncode
    run = _run_json(list(argv), name, child.pid, code, started, ended_ns, trace)
    rundir.write_json(out_dir / "run.json", run)
    return code


def print_env(out_dir: Path) -> str:
    """Shell ``export`` lines that make any GStreamer app trace into ``out_dir/traces``."""
    traces = Path(out_dir) / rundir.TRACES
    env = tracer_env(traces)
    traces.mkdir(parents=True, exist_ok=True)
    return "".join(f"export {key}={shlex.quote(value)}\n" for key, value in env.items())


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


class _Forwarder:
    """Sends the signals it gets to a process group; holds early ones until it has one."""

    def __init__(self) -> None:
        self.pgid: int | None = None
        self.pending: list[int] = []

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.pgid is None:
            self.pending.append(signum)
        else:
            _signal_group(self.pgid, signum)

    def attach(self, pgid: int) -> None:
        self.pgid = pgid
        for signum in self.pending:
            _signal_group(pgid, signum)
        self.pending.clear()


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


def _run_json(
    argv: list[str],
    name: str,
    pid: int,
    code: int,
    started: rundir.Instant,
    ended_ns: int,
    trace: bool,
) -> dict[str, Any]:
    return {
        "schema": rundir.RUN_SCHEMA,
        "kind": "record",
        "name": name,
        "scenario": None,
        "status": "ok" if code == 0 else "failed",
        "error": None if code == 0 else f"exit code {code}",
        "started_at": started.iso,
        "started_monotonic_ns": started.monotonic_ns,
        "duration_s": round((ended_ns - started.monotonic_ns) / 1e9, 6),
        "trace": trace,
        "params": {},
        "hosts": {},
        "links": [],
        "processes": [
            {"name": name, "host": None, "argv": argv, "pid": pid, "exit_code": code,
             "started_s": 0.0, "ready_s": None, "stopped": "exited"}
        ],
    }  # fmt: skip
