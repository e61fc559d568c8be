"""Scheduling policy of a lab process: parse ``sched = "..."``, apply it, read it back.

Forms (scenario key ``sched`` of a process):

* ``"other"``: the default time-sharing policy (SCHED_OTHER);
* ``"rr:PRIO"`` / ``"fifo:PRIO"``: real-time SCHED_RR / SCHED_FIFO, priority 1..99;
* ``"deadline:RUNTIME_US/DEADLINE_US/PERIOD_US"``: SCHED_DEADLINE with those
  microseconds (runtime <= deadline <= period).

other/rr/fifo are set in the child between fork and exec (:func:`preexec`), so
the program and every thread it creates inherit them. A SCHED_DEADLINE task
cannot fork or create threads (the kernel refuses with EAGAIN), so deadline is
applied once the process is ready, to each thread listed in ``/proc/PID/task``
with the ``sched_setattr`` system call (:func:`apply_deadline`). Because a thread
that GStreamer creates lazily (a thread pool's first worker, when the pipeline goes
to PLAYING) could then never be created and the pipeline would stall, deadline is
applied once the process's set of threads has not changed for
``SETTLE_S`` seconds. Threads created later by a thread without deadline run with the
default policy; before the process is stopped, its threads are set back to
SCHED_OTHER so that it can create the threads it needs to shut down.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from latlab.errors import MeasurementError

SCHED_DEADLINE = 6
POLICY_NAMES = {
    os.SCHED_OTHER: "other",
    os.SCHED_FIFO: "fifo",
    os.SCHED_RR: "rr",
    os.SCHED_BATCH: "batch",
    os.SCHED_IDLE: "idle",
    SCHED_DEADLINE: "deadline",
}
# sched_setattr / sched_getattr system call numbers (not wrapped by glibc 2.36).
SYSCALLS = {"x86_64": (314, 315), "aarch64": (274, 275)}
SETTLE_S = 0.3
SETTLE_TIMEOUT_S = 3.0
SCHED_FORMS = '"other", "rr:PRIO", "fifo:PRIO" or "deadline:RUNTIME_US/DEADLINE_US/PERIOD_US"'


class SchedError(MeasurementError, RuntimeError):
    """Applying or reading a scheduling policy failed; ``str()`` is one line."""


@dataclass(frozen=True)
class SchedPolicy:
    """A parsed ``sched`` value."""

    kind: str  # "other" | "rr" | "fifo" | "deadline"
    priority: int = 0
    runtime_us: int = 0
    deadline_us: int = 0
    period_us: int = 0

    def __str__(self) -> str:
        if self.kind in ("rr", "fifo"):
            return f"{self.kind}:{self.priority}"
        if self.kind == "deadline":
            return f"deadline:{self.runtime_us}/{self.deadline_us}/{self.period_us}"
        return self.kind

    @property
    def at_exec(self) -> bool:
        """Whether the policy is set before exec (inherited) rather than once ready."""
        return self.kind != "deadline"


def parse_sched(text: str) -> SchedPolicy:
    """Parse a ``sched`` value; ValueError with a one-line problem if it is invalid."""
    kind, _, arg = text.strip().partition(":")
    if kind == "other" and not arg:
        return SchedPolicy("other")
    if kind in ("rr", "fifo"):
        low, high = (
            os.sched_get_priority_min(os.SCHED_FIFO),
            os.sched_get_priority_max(os.SCHED_FIFO),
        )
        if not arg.isdigit() or not low <= int(arg) <= high:
            raise ValueError(f"'{text}': priority must be an integer {low}..{high}")
        return SchedPolicy(kind, priority=int(arg))
    if kind == "deadline":
        return _parse_deadline(text, arg)
    raise ValueError(f"'{text}' is not a scheduling policy (use {SCHED_FORMS})")


def _parse_deadline(text: str, arg: str) -> SchedPolicy:
    parts = arg.split("/")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(
            f"'{text}': deadline needs three positive integers RUNTIME_US/DEADLINE_US/PERIOD_US"
        )
    runtime, deadline, period = (int(p) for p in parts)
    if not runtime <= deadline <= period:
        raise ValueError(f"'{text}': needs runtime <= deadline <= period")
    return SchedPolicy("deadline", runtime_us=runtime, deadline_us=deadline, period_us=period)


def preexec(policy: SchedPolicy | None) -> Callable[[], None] | None:
    """A function for ``Popen(preexec_fn=...)`` setting other/rr/fifo (None for deadline)."""
    if policy is None or not policy.at_exec:
        return None
    number = {"other": os.SCHED_OTHER, "rr": os.SCHED_RR, "fifo": os.SCHED_FIFO}[policy.kind]
    param = os.sched_param(policy.priority)

    def set_policy() -> None:
        os.sched_setscheduler(0, number, param)

    return set_policy


class _SchedAttr(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_uint32),
        ("sched_policy", ctypes.c_uint32),
        ("sched_flags", ctypes.c_uint64),
        ("sched_nice", ctypes.c_int32),
        ("sched_priority", ctypes.c_uint32),
        ("sched_runtime", ctypes.c_uint64),
        ("sched_deadline", ctypes.c_uint64),
        ("sched_period", ctypes.c_uint64),
    ]


def _syscall(index: int) -> int:
    numbers = SYSCALLS.get(platform.machine())
    if numbers is None:
        raise SchedError(f"sched_setattr: unsupported machine '{platform.machine()}'")
    return numbers[index]


_libc = ctypes.CDLL(None, use_errno=True)


def set_deadline(tid: int, policy: SchedPolicy) -> None:
    """Give thread ``tid`` SCHED_DEADLINE with the policy's parameters (OSError on failure)."""
    attr = _SchedAttr(
        size=ctypes.sizeof(_SchedAttr),
        sched_policy=SCHED_DEADLINE,
        sched_runtime=policy.runtime_us * 1000,
        sched_deadline=policy.deadline_us * 1000,
        sched_period=policy.period_us * 1000,
    )
    if _libc.syscall(_syscall(0), tid, ctypes.byref(attr), 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def set_other(tid: int) -> None:
    """Put thread ``tid`` back on SCHED_OTHER (OSError on failure)."""
    attr = _SchedAttr(size=ctypes.sizeof(_SchedAttr), sched_policy=os.SCHED_OTHER)
    if _libc.syscall(_syscall(0), tid, ctypes.byref(attr), 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def wait_threads_settled(
    pid: int, settle_s: float = SETTLE_S, timeout_s: float = SETTLE_TIMEOUT_S
) -> float:
    """Wait until ``pid``'s thread ids stay the same for ``settle_s``; seconds waited."""
    start = last_change = time.monotonic()
    seen = thread_ids(pid)
    while (now := time.monotonic()) - last_change < settle_s and now - start < timeout_s:
        time.sleep(0.02)
        current = thread_ids(pid)
        if current != seen:
            seen, last_change = current, time.monotonic()
    return round(time.monotonic() - start, 3)


def reset_other(pid: int) -> list[int]:
    """Set every deadline thread of ``pid`` back to SCHED_OTHER; returns their ids."""
    reset = []
    for info in thread_policies(pid):
        if info["policy"] == "deadline":
            try:
                set_other(info["tid"])
            except OSError:
                continue
            reset.append(info["tid"])
    return reset


def thread_ids(pid: int) -> list[int]:
    """Thread ids of process ``pid`` (empty if it is gone)."""
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return []


def thread_policy(tid: int) -> dict[str, Any] | None:
    """A thread's name and current policy (with priority or deadline parameters)."""
    attr = _SchedAttr()
    if _libc.syscall(_syscall(1), tid, ctypes.byref(attr), ctypes.sizeof(attr), 0) != 0:
        return None
    try:
        comm = Path(f"/proc/{tid}/comm").read_text().strip()
    except OSError:
        return None
    info: dict[str, Any] = {"tid": tid, "comm": comm}
    info["policy"] = POLICY_NAMES.get(attr.sched_policy, str(attr.sched_policy))
    if attr.sched_policy in (os.SCHED_FIFO, os.SCHED_RR):
        info["priority"] = attr.sched_priority
    if attr.sched_policy == SCHED_DEADLINE:
        info["runtime_us"] = attr.sched_runtime // 1000
        info["deadline_us"] = attr.sched_deadline // 1000
        info["period_us"] = attr.sched_period // 1000
    return info


def thread_policies(pid: int) -> list[dict[str, Any]]:
    """Policy of every thread of ``pid`` now."""
    return [p for p in (thread_policy(t) for t in thread_ids(pid)) if p is not None]


def apply_deadline(pid: int, policy: SchedPolicy) -> list[dict[str, Any]]:
    """Set SCHED_DEADLINE on every thread of ``pid``; per thread ``{tid, comm, ok, error}``.

    Raises SchedError when no thread got it.
    """
    results = []
    for tid in thread_ids(pid):
        entry: dict[str, Any] = {"tid": tid, "ok": True, "error": None}
        try:
            set_deadline(tid, policy)
        except OSError as exc:
            reason = exc.strerror
            if exc.errno == errno.EBUSY:
                reason = "the kernel's SCHED_DEADLINE bandwidth is used up (EBUSY)"
            entry.update(ok=False, error=reason)
        current = thread_policy(tid)
        entry["comm"] = current["comm"] if current else None
        results.append(entry)
    if not any(r["ok"] for r in results):
        reason = results[0]["error"] if results else "process has no threads"
        raise SchedError(f"cannot set {policy} on process {pid}: {reason}")
    return results
