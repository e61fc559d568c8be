"""One child process of a run: started in its own session, logged, watched, stopped."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from latlab.lab import owner

# gst-launch-1.0 (1.22) prints this when the pipeline goes PAUSED -> PLAYING, for live and
# non-live pipelines alike (the pipeline selects and distributes its clock at that moment).
READY_MARKER = "New clock:"
# SIGINT makes gst-launch -e send EOS and wait for it. GStreamer 1.22 can deadlock when that
# EOS comes within milliseconds of PLAYING (send_event vs. the sink's preroll wait), hence
# the escalation to SIGTERM and SIGKILL.
CLOSE_GRACE_S = 5.0  # how long a program asked to close may take
STOP_STEPS: tuple[tuple[signal.Signals, str, float | None], ...] = (
    (signal.SIGINT, "sigint", 5.0),
    (signal.SIGTERM, "sigterm", 2.0),
    (signal.SIGKILL, "sigkill", None),
)
_SOURCE_LINE = re.compile(r"^\S+\.(c|cc|cpp|rs)\(\d+\):")
# gst-launch-1.0's report of an element's message: "ERROR: from element /GstPipeline:pipeline0/
# GstSRTSrc:srtsrc0: text" (errors on stderr, warnings on stdout).
_ELEMENT_MESSAGE = re.compile(
    r"^(ERROR|WARNING): from element (\S*?)([A-Za-z0-9_]+):([^/:\s]+): (.*)$"
)


def failure_line(result: subprocess.CompletedProcess[str]) -> str:
    """A failed command's stderr as one line (its exit code if it printed nothing)."""
    return " ".join(result.stderr.split()) or f"exit code {result.returncode}"


def _pinned(
    preexec: Callable[[], None] | None, cpus: Sequence[int] | None
) -> Callable[[], None] | None:
    """``preexec`` preceded by setting the CPU affinity to ``cpus`` (inherited across exec
    by every thread and child)."""
    if not cpus:
        return preexec
    allowed = set(cpus)

    def run() -> None:
        os.sched_setaffinity(0, allowed)
        if preexec is not None:
            preexec()

    return run


@dataclass
class ChildProcess:
    """A child started with stdout read line by line (to detect readiness) and logged."""

    name: str
    argv: list[str]
    stdout_log: Path
    stderr_log: Path
    exited: threading.Event
    ready_marker: str | None = READY_MARKER  # None: readiness comes from mark_ready
    preexec: Callable[[], None] | None = None  # run in the child before exec (sched policy)
    cpus: Sequence[int] | None = None  # the CPUs it (every thread and child) may run on
    cpus_seen: list[int] | None = None  # its affinity as the kernel had it after exec
    on_line: Callable[[str], None] | None = None  # called with each stdout line, as read
    stop_steps: Sequence[tuple[signal.Signals, str, float | None]] = STOP_STEPS
    # asks the program to close itself (a browser: DevTools); tried before the signals
    close_request: Callable[[], bool] | None = None
    popen: subprocess.Popen[str] | None = None
    started_ns: int | None = None
    ready_ns: int | None = None
    stopped: str = "not-started"
    state_changed: threading.Event = field(default_factory=threading.Event)
    _eof: bool = False
    _reader: threading.Thread | None = None
    _stderr_file: IO[str] | None = None
    _closing: threading.Thread | None = None  # a close request already under way
    _closed_as_asked: bool = False
    _journaled: dict[str, Any] | None = None  # its entry in the owner's journal

    def start(self, env: Mapping[str, str]) -> None:
        """Start in a new session (own process group) with ``env`` as its environment."""
        self._stderr_file = self.stderr_log.open("w", encoding="utf-8")
        self.started_ns = time.monotonic_ns()
        self.stopped = "running"
        self.popen = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr_file,
            env=dict(env),
            text=True,
            errors="replace",
            start_new_session=True,
            preexec_fn=_pinned(self.preexec, self.cpus),
        )
        self._journaled = owner.record_process(self.popen.pid, self.name)
        if self.cpus:  # what the kernel holds for it, once exec'd (Popen returns after)
            with contextlib.suppress(OSError):
                self.cpus_seen = sorted(os.sched_getaffinity(self.popen.pid))
        self._reader = threading.Thread(target=self._read_stdout, name=f"stdout-{self.name}")
        self._reader.daemon = True
        self._reader.start()

    @property
    def pid(self) -> int | None:
        """Process id (also its process group id), once started."""
        return self.popen.pid if self.popen else None

    @property
    def ready(self) -> bool:
        """Whether the readiness line has been seen."""
        return self.ready_ns is not None

    @property
    def eof(self) -> bool:
        """Whether stdout was closed (the process exited or is exiting)."""
        return self._eof

    def died(self) -> int | None:
        """The exit code if the process exited on its own while it should run (not
        stopped by us), else None."""
        popen = self.popen
        if popen is not None and self.stopped == "running" and popen.poll() is not None:
            return popen.returncode
        return None

    def mark_ready(self) -> None:
        """The program is ready (seen on its stdout, or reported otherwise, e.g. a server
        that answered its API)."""
        self.ready_ns = time.monotonic_ns()
        self.state_changed.set()

    def wait_ready(self, timeout: float) -> bool:
        """Block until ready or stdout closes, at most ``timeout`` s; True if ready."""
        self.state_changed.wait(timeout)
        return self.ready

    def exit_code(self, timeout: float = 2.0) -> int | None:
        """Exit code after the process ends (waits up to ``timeout`` s); None if still alive."""
        if self.popen is None:
            return None
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, steps: Sequence[tuple[signal.Signals, str, float | None]] | None = None) -> str:
        """Stop the process group: by default SIGINT (gst-launch -e sends EOS), then SIGTERM,
        SIGKILL (``steps``, else the process's ``stop_steps``)."""
        steps = self.stop_steps if steps is None else steps
        if self.popen is None or self.stopped != "running":  # not started, or stopped already
            return self.stopped
        if self.popen.poll() is not None and self._closing is None:
            self.stopped = "exited"
        else:  # running, or it closed when asked (begin_close) before its turn came
            self.stopped = self._closed_on_request() or self._escalate(steps)
        self.close()
        return self.stopped

    def begin_close(self) -> None:
        """Start asking the program to close (``close_request``) without waiting, so that
        several programs can close at once (a browser takes seconds to finish its trace);
        ``stop`` then waits for the answer."""
        if self.close_request is None or self._closing is not None or self.popen is None:
            return
        if self.popen.poll() is not None:
            return

        def ask() -> None:
            assert self.close_request is not None
            self._closed_as_asked = self.close_request()

        self._closing = threading.Thread(target=ask, name=f"close-{self.name}", daemon=True)
        self._closing.start()

    def _closed_on_request(self) -> str | None:
        """``"closed"`` if the program closed itself when asked (``close_request``)."""
        assert self.popen is not None
        if self.close_request is None:
            return None
        self.begin_close()
        assert self._closing is not None
        self._closing.join()
        if not self._closed_as_asked:
            return None
        try:
            self.popen.wait(timeout=CLOSE_GRACE_S)
        except subprocess.TimeoutExpired:
            return None
        return "closed"

    def kill_group(self) -> None:
        """SIGKILL the process group if the process has not been reaped yet."""
        if self.popen is not None and self.popen.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()
        self.close()

    def close(self) -> None:
        """Finish reading stdout and close log files (and, once the process is reaped,
        strike it off the journal)."""
        reaped = self.popen is not None and self.popen.poll() is not None
        if self._journaled is not None and reaped:
            owner.forget("process", self._journaled)
            self._journaled = None
        if self._reader is not None:
            self._reader.join(timeout=5)
        if self._stderr_file is not None:
            self._stderr_file.close()
            self._stderr_file = None

    def stderr_summary(self, limit: int = 2) -> str:
        """The error lines gst-launch printed (or the last lines of stderr), on one line."""
        if self._stderr_file is not None:
            self._stderr_file.flush()
        try:
            text = self.stderr_log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        return summarize_stderr(text.splitlines(), limit)

    def last_element_message(self) -> ElementMessage | None:
        """The last ERROR or WARNING an element posted, from both logs (errors first)."""
        found: list[ElementMessage] = []
        for log in (self.stderr_log, self.stdout_log):
            try:
                text = log.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            found += [m for m in map(element_message, text.splitlines()) if m is not None]
        errors = [m for m in found if m.level == "ERROR"]
        return (errors or found or [None])[-1]

    def describe(self, origin_ns: int) -> dict[str, Any]:
        """Plain data for run.json; times are seconds after ``origin_ns`` (CLOCK_MONOTONIC)."""

        def since(ns: int | None) -> float | None:
            return None if ns is None else round((ns - origin_ns) / 1e9, 6)

        return {
            "pid": self.pid,
            "exit_code": self.popen.returncode if self.popen else None,
            "started_s": since(self.started_ns),
            "ready_s": since(self.ready_ns),
            "started_monotonic_ns": self.started_ns,
            "ready_monotonic_ns": self.ready_ns,
            "stopped": self.stopped,
            **({"cpus": self.cpus_seen} if self.cpus else {}),
        }

    def _escalate(self, steps: Sequence[tuple[signal.Signals, str, float | None]]) -> str:
        assert self.popen is not None
        how = "exited"
        for signum, how, grace in steps:
            try:
                os.killpg(self.popen.pid, signum)
            except ProcessLookupError:
                self.popen.wait()
                return "exited"
            try:
                self.popen.wait(timeout=grace)
                return how
            except subprocess.TimeoutExpired:
                continue
        return how

    def _read_stdout(self) -> None:
        assert self.popen is not None and self.popen.stdout is not None
        with self.stdout_log.open("w", encoding="utf-8") as log:
            for line in self.popen.stdout:
                if (self.ready_ns is None and self.ready_marker is not None
                        and line.startswith(self.ready_marker)):  # fmt: skip
                    self.mark_ready()
                if self.on_line is not None:
                    self.on_line(line.rstrip("\n"))
                log.write(line)
                log.flush()
        self.popen.stdout.close()
        self._eof = True
        self.state_changed.set()
        self.exited.set()


@dataclass(frozen=True)
class ElementMessage:
    """An ERROR or WARNING message of one element, as gst-launch-1.0 printed it."""

    level: str  # "ERROR" | "WARNING"
    element_type: str  # e.g. "GstSRTSrc"
    element: str  # e.g. "srtsrc0"
    text: str

    def __str__(self) -> str:
        return f"{self.element}: {self.text}"


def element_message(line: str) -> ElementMessage | None:
    """Parse one ``ERROR|WARNING: from element /PATH/Type:name: text`` line (else None)."""
    match = _ELEMENT_MESSAGE.match(line.strip())
    if match is None:
        return None
    level, _, element_type, element, text = match.groups()
    return ElementMessage(level, element_type, element, text.strip())


def summarize_stderr(lines: Sequence[str], limit: int = 2) -> str:
    """Pick gst-launch's ERROR/erroneous-pipeline lines (or the last lines) for a message.

    An element's error line is shortened to ``element: text``.
    """
    lines = [line.strip() for line in lines if line.strip()]
    start = next(
        (i for i, line in enumerate(lines) if line.startswith(("ERROR", "WARNING: erroneous"))),
        None,
    )
    picked = lines[start:] if start is not None else lines[-limit:]
    picked = [p for p in picked if p != "Additional debug info:" and not _SOURCE_LINE.match(p)]
    picked = [_short(p) for p in picked]
    return " | ".join(picked[:limit]) or "(nothing on stderr)"


def _short(line: str) -> str:
    """``ERROR: from element /PATH/Type:name: text`` as ``name: text`` (else unchanged)."""
    message = element_message(line)
    return line if message is None else str(message)
