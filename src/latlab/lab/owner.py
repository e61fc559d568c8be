"""Ownership of what the lab creates: a journal per latlab process, proven by its token.

Everything a latlab process creates outside its run directory (network namespaces,
interfaces, processes, audio servers' files and registrations, runtime directories) is
written to its **journal** *before* it is created, and struck off once it is removed:
``<journal dir>/<token>.journal``, one JSON line per entry, in a root-only directory
(``/run/latlab/owners`` as root, else ``$XDG_RUNTIME_DIR/latlab/owners``;
``LATLAB_OWNER_DIR`` overrides it). The token is random; the journal is the only proof of
ownership latlab accepts. Names (``llab-PID-HOST``) only keep runs apart.

While its latlab process lives, the journal is locked (``flock``, on a descriptor no
child inherits); the kernel drops the lock when the process ends, however it ends. The
cleanup (:func:`cleanup_dead`, run by ``latlab run``, ``lab up`` and ``lab cleanup``)
takes the lock of every journal it can: those are exactly the journals of latlab
processes that are gone. It removes what each lists, and nothing else: a namespace named
like latlab's that no journal lists is someone else's and stays, and so does everything
of a live run (its journal is locked). A process is killed only if its pid still has the
start time the journal recorded (a pid the kernel gave to another process is left).
A run directory the dead process was writing (``status = "running"`` in its run.json) is
marked ``"incomplete"``.

A standing lab (``latlab lab up``) outlives its command: its journal is marked
``standing`` when the lab is up, and only ``latlab lab down`` removes what it lists.

Entries (``{"add": KIND, "value": ...}``, later ``{"drop": KIND, "value": ...}``):
``namespace`` (a name), ``interface`` (a name in latlab's own namespace), ``process``
(``{"pid", "start", "what"}``; ``start`` is the process's start time in clock ticks after
boot, ``/proc/PID/stat`` field 22), ``jack`` (a JACK server name: its files in
/dev/shm and its registry slot), ``path`` (a file or directory latlab made),
``run_dir`` (a run directory being written), and ``{"standing": STATE_FILE}``.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import json
import os
import secrets
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from latlab import rundir

JOURNAL_SUFFIX = ".journal"
SCHEMA = "latlab.journal/1"
INCOMPLETE = "incomplete"  # run.json status of a run whose latlab process died
KINDS = ("namespace", "interface", "process", "jack", "path", "run_dir")


def runtime_dir() -> Path:
    """latlab's own runtime directory: /run/latlab as root, else under
    ``$XDG_RUNTIME_DIR`` (or ``~/.cache``); journals and the standing lab's state live here."""
    if os.geteuid() == 0:
        return Path("/run/latlab")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return (Path(runtime) if runtime else Path.home() / ".cache") / "latlab"


def journal_dir() -> Path:
    """Where journals are kept (root-only; ``LATLAB_OWNER_DIR`` overrides): see the module
    docstring."""
    override = os.environ.get("LATLAB_OWNER_DIR")
    return Path(override) if override else runtime_dir() / "owners"


def _private_dir(path: Path) -> Path:
    """``path`` created (with parents) as a directory only its owner may enter."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path


def process_start(pid: int) -> int | None:
    """A process's start time (clock ticks after boot), None if there is no such process;
    with the pid it names one process for as long as the machine runs."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])  # field 22 of the whole line


def same_process(pid: int, start: int | None) -> bool:
    """Whether ``pid`` is still the process that had start time ``start`` (and not a zombie)."""
    if start is None or process_start(pid) != start:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


@dataclass
class Journal:
    """The journal of this latlab process (see the module docstring)."""

    path: Path
    token: str
    fd: int
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def create(cls) -> Journal:
        directory = _private_dir(journal_dir())
        token = secrets.token_hex(12)
        path = directory / f"{token}{JOURNAL_SUFFIX}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC,
                     0o600)  # fmt: skip
        fcntl.flock(fd, fcntl.LOCK_EX)
        journal = cls(path, token, fd)
        atexit.register(close)
        journal._write({"schema": SCHEMA, "token": token, "pid": os.getpid(),
                        "start": process_start(os.getpid()),
                        "created_at": datetime.now(UTC).isoformat(timespec="seconds")})  # fmt: skip
        return journal

    def _write(self, entry: dict[str, Any]) -> None:
        line = (json.dumps(entry) + "\n").encode()
        with self.lock:
            os.write(self.fd, line)  # one write, O_APPEND: a line is whole or missing

    def add(self, kind: str, value: Any) -> None:
        """Record ``value`` of ``kind`` before it is created."""
        assert kind in KINDS, kind
        self._write({"add": kind, "value": value})

    def drop(self, kind: str, value: Any) -> None:
        """Strike ``value`` off once it is removed."""
        self._write({"drop": kind, "value": value})

    def mark_standing(self, state_file: Path) -> None:
        """What is listed belongs to a standing lab now: only ``lab down`` removes it."""
        self._write({"standing": str(state_file)})


_journal: Journal | None = None
_journal_lock = threading.Lock()


def journal() -> Journal:
    """This process's journal, created on first use (and reopened after a fork)."""
    global _journal
    with _journal_lock:
        if _journal is None or _journal_pid != os.getpid():
            _set(Journal.create())
        assert _journal is not None
        return _journal


_journal_pid = 0


def _set(j: Journal | None) -> None:
    global _journal, _journal_pid
    _journal, _journal_pid = j, os.getpid()


def record(kind: str, value: Any) -> None:
    """Add ``value`` to this process's journal (before creating it)."""
    journal().add(kind, value)


def forget(kind: str, value: Any) -> None:
    """Strike ``value`` off this process's journal (once removed); nothing if none."""
    if _journal is not None and _journal_pid == os.getpid():
        _journal.drop(kind, value)


def record_process(pid: int, what: str) -> dict[str, Any]:
    """Add a started process (pid and start time) to the journal; returns the entry."""
    entry = {"pid": pid, "start": process_start(pid), "what": what}
    record("process", entry)
    return entry


def private_tmp() -> Path:
    """A directory of this process's own for files its servers need (a PulseAudio
    runtime directory: socket, configuration): ``<journal dir>/../tmp/<token>``, only its
    owner may enter it, its name unpredictable; recorded before it is made, so a killed
    run's is removed with the rest (never a fixed path under /tmp)."""
    j = journal()
    path = journal_dir().parent / "tmp" / j.token
    if not path.is_dir():
        record("path", str(path))
        _private_dir(path.parent)
        path.mkdir(mode=0o700)
    return path


def current_token() -> str | None:
    """This process's journal token, if it has a journal."""
    return _journal.token if _journal is not None and _journal_pid == os.getpid() else None


def release_standing(state_file: Path) -> Journal:
    """Hand this process's journal over to a standing lab (``lab up``): marked standing,
    and no longer this process's (a later entry starts a new journal)."""
    j = journal()
    j.mark_standing(state_file)
    os.close(j.fd)
    _set(None)
    return j


@dataclass
class Entries:
    """What a journal lists now (adds not dropped), in the order they were added."""

    path: Path
    header: dict[str, Any] = field(default_factory=dict)
    items: dict[str, list[Any]] = field(default_factory=lambda: {k: [] for k in KINDS})
    standing: str | None = None

    @classmethod
    def read(cls, path: Path) -> Entries:
        out = cls(path)
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return out
        for raw in text.splitlines():
            try:
                line = json.loads(raw)
            except ValueError:
                continue  # a line cut by a kill: what it named was not created yet
            if not isinstance(line, dict):
                continue
            if "schema" in line:
                out.header = line
            elif "standing" in line:
                out.standing = str(line["standing"])
            elif line.get("add") in KINDS:
                out.items[line["add"]].append(line.get("value"))
            elif line.get("drop") in KINDS:
                with contextlib.suppress(ValueError):
                    out.items[line["drop"]].remove(line.get("value"))
        return out


@contextlib.contextmanager
def _dead_journals() -> Iterator[Iterator[tuple[Path, int]]]:
    """Yield (path, locked fd) of every journal whose process is gone (its lock free)."""
    directory = journal_dir()
    held: list[int] = []

    def walk() -> Iterator[tuple[Path, int]]:
        if not directory.is_dir():
            return
        for path in sorted(directory.glob(f"*{JOURNAL_SUFFIX}")):
            if _journal is not None and path == _journal.path:
                continue
            try:
                fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    continue  # a live latlab process holds it
                raise
            held.append(fd)
            yield path, fd

    try:
        yield walk()
    finally:
        for fd in held:
            os.close(fd)


@dataclass
class Cleaner:
    """How to remove each kind of entry (the lab modules provide them: no import circle)."""

    namespace: Callable[[str], None]
    interface: Callable[[str], None]
    jack: Callable[[str], None]


def remove_entries(entries: Entries, cleaner: Cleaner) -> list[str]:
    """Remove what ``entries`` list (processes, namespaces, interfaces, JACK servers,
    paths; run directories marked incomplete); returns what was removed."""
    removed = []
    for proc in reversed(entries.items["process"]):
        if isinstance(proc, dict) and kill_if_same(proc):
            removed.append(f"process {proc.get('pid')} ({proc.get('what', '')})")
    for name in reversed(entries.items["namespace"]):
        if isinstance(name, str):
            cleaner.namespace(name)
            removed.append(name)
    for name in entries.items["interface"]:
        if isinstance(name, str):
            cleaner.interface(name)
            removed.append(name)
    for name in entries.items["jack"]:
        if isinstance(name, str):
            cleaner.jack(name)
            removed.append(f"JACK server {name}")
    for path in entries.items["path"]:
        if isinstance(path, str) and os.path.isabs(path):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            removed.append(path)
    for run_dir in entries.items["run_dir"]:
        if isinstance(run_dir, str) and mark_incomplete(Path(run_dir), entries.header):
            removed.append(f"{run_dir} (marked incomplete)")
    return removed


def mark_incomplete(run_dir: Path, header: dict[str, Any]) -> bool:
    """Mark the run directory of a dead latlab process ``incomplete`` (if its run.json
    still says ``running``): what was recorded up to then stays readable."""
    path = run_dir / rundir.RUN_FILE
    if not run_dir.is_dir():
        return False
    try:
        run = rundir.read_json(path) if path.exists() else {"schema": rundir.RUN_SCHEMA,
                                                            "status": "running"}  # fmt: skip
    except rundir.RunDirError:
        return False
    if run.get("status") != "running":
        return False
    now = rundir.Instant.now()
    run["status"] = INCOMPLETE
    run["error"] = (
        f"latlab (pid {header.get('pid', '?')}) ended without finishing this run (killed?); "
        f"latlab (pid {os.getpid()}) removed what it left at {now.iso}"
    )
    run["incomplete_at"] = now.iso
    with contextlib.suppress(OSError):
        rundir.write_json(path, run)
        return True
    return False


def kill_if_same(proc: dict[str, Any]) -> bool:
    """SIGKILL a recorded process and its process group if its pid is still that process."""
    pid, start = proc.get("pid"), proc.get("start")
    if not isinstance(pid, int) or pid <= 1 or not same_process(pid, start):
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:  # started in its own session: take its group too
            os.killpg(pid, signal.SIGKILL)
        os.kill(pid, signal.SIGKILL)
    return True


def cleanup_dead(cleaner: Cleaner) -> list[str]:
    """Remove what every dead latlab process's journal lists (not standing labs');
    returns what was removed."""
    removed: list[str] = []
    with _dead_journals() as journals:
        for path, _fd in journals:
            entries = Entries.read(path)
            if entries.standing is not None:
                continue  # a standing lab: latlab lab down removes it
            removed += remove_entries(entries, cleaner)
            with contextlib.suppress(OSError):
                path.unlink()
    return removed


def remove_standing(journal_path: Path, cleaner: Cleaner) -> list[str]:
    """``lab down``: remove what a standing lab's journal lists, then the journal."""
    entries = Entries.read(journal_path)
    removed = remove_entries(entries, cleaner)
    with contextlib.suppress(OSError):
        journal_path.unlink()
    return removed


def _drop_private_tmp(j: Journal, entries: Entries) -> None:
    """Remove this process's private directory (:func:`private_tmp`) when the journal lists
    nothing else: whatever used it has been stopped and struck off."""
    tmp = str(journal_dir().parent / "tmp" / j.token)
    if entries.items["path"] != [tmp] or any(v for k, v in entries.items.items() if k != "path"):
        return
    shutil.rmtree(tmp, ignore_errors=True)
    j.drop("path", tmp)
    entries.items["path"].clear()


def close() -> None:
    """Remove this process's journal if it lists nothing any more but its private
    directory, and that directory (at a clean exit)."""
    global _journal
    with _journal_lock:
        j = _journal
        if j is None or _journal_pid != os.getpid():
            return
        entries = Entries.read(j.path)
        _drop_private_tmp(j, entries)
        if not any(entries.items.values()):
            with contextlib.suppress(OSError):
                j.path.unlink()
            os.close(j.fd)
            _set(None)
