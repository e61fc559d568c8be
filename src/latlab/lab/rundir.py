"""Run directory helpers: environment description, JSON files, timestamps.

The layout is documented in ``docs/run-dir.md``.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import latlab
from latlab.errors import DirectoryNotEmpty

RUN_SCHEMA = "latlab.run/1"
ENV_SCHEMA = "latlab.env/1"
TRACES = "traces"
LOGS = "logs"
LOCK = "run.lock"


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


def gstreamer_version() -> str | None:
    """GStreamer version reported by ``gst-launch-1.0 --version`` (None if unavailable)."""
    try:
        out = subprocess.run(
            ["gst-launch-1.0", "--version"], capture_output=True, text=True, check=False
        ).stdout
    except OSError:
        return None
    for line in out.splitlines():
        if line.startswith("GStreamer "):
            return line.split()[1]
    return None


def environment() -> dict[str, Any]:
    """What ran the experiment: versions of latlab, GStreamer, kernel, Python; host name."""
    return {
        "schema": ENV_SCHEMA,
        "latlab_version": latlab.__version__,
        "gstreamer_version": gstreamer_version(),
        "kernel": platform.release(),
        "hostname": socket.gethostname(),
        "python_version": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
    }


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
    fd = os.open(out_dir / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the only descriptor releases the lock


def trace_files(out_dir: Path) -> list[Path]:
    """Trace files written under ``out_dir/traces``, sorted by name."""
    directory = out_dir / TRACES
    return sorted(p for p in directory.iterdir() if p.is_file()) if directory.is_dir() else []
