"""What a JACK server leaves behind: its files in /dev/shm and its slot in JACK's registry.

Used by the devices (a server stopped) and by the cleanup of a killed run's journal
(:mod:`latlab.lab.owner`): the names come from a journal, never from a guess.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

JACK_SHM_DIR = Path("/dev/shm")
JACK_REGISTRY = JACK_SHM_DIR / "jack-shm-registry"
JACK_REGISTRY_RE = re.compile(rb"jack-\d+:(llab-\d+-[A-Za-z0-9_-]+):")
ANY_REGISTRATION_RE = re.compile(rb"jack-\d+:([^:\x00]+):")
JACK_MAX_SERVERS = 8  # the slots of JACK's server registry (JACK_MAX_SERVERS in jack2)
READY_TIMEOUT_S = 10.0
STOP_GRACE_S = 3.0
POLL_S = 0.02
PROBE_TIMEOUT_S = 5.0


def remove_jack_files(server_name: str) -> None:
    """Remove a JACK server's sockets and semaphores from /dev/shm (if any are left)."""
    if not JACK_SHM_DIR.is_dir():
        return
    for path in JACK_SHM_DIR.iterdir():
        name = path.name
        if name.startswith(f"jack_{server_name}_") or (
            name.startswith("jack_sem.") and f"_{server_name}_" in name
        ):
            with contextlib.suppress(OSError):
                path.unlink()


def registrations() -> dict[str, int]:
    """The latlab-named (``llab-PID-...``) servers JACK's shared registry holds a slot for,
    with the pid in each slot.

    A jackd that was killed (SIGKILL) keeps its slot in ``/dev/shm/jack-shm-registry``;
    JACK has 8 slots and frees one only when a server of the same name starts while the
    pid in the slot is gone. A slot is the server's pid (4 bytes, host order) followed by
    ``jack-UID:NAME:``.
    """
    try:
        data = JACK_REGISTRY.read_bytes()
    except OSError:
        return {}
    return {
        m.group(1).decode(): int.from_bytes(data[m.start() - 4 : m.start()], sys.byteorder)
        for m in JACK_REGISTRY_RE.finditer(data)
        if m.start() >= 4
    }


def _wait_gone(pid: int, timeout_s: float) -> bool:
    """Wait until ``pid`` no longer exists, zombie included (JACK's ``kill(pid, 0)``
    still finds a killed server its new parent has not reaped yet)."""
    deadline = time.monotonic() + timeout_s
    while os.path.exists(f"/proc/{pid}"):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    return True


def registry_full_hint() -> str:
    """A sentence naming the servers in JACK's registry when all its slots are taken
    (a new server then exits 255 saying little), else ''."""
    try:
        data = JACK_REGISTRY.read_bytes()
    except OSError:
        return ""
    names = sorted(
        {m.group(1).decode(errors="replace") for m in ANY_REGISTRATION_RE.finditer(data)}
    )
    if len(names) < JACK_MAX_SERVERS:
        return ""
    return (
        f"; JACK's server registry ({JACK_REGISTRY}) is full: {', '.join(names)} "
        "(a killed jackd keeps its slot until a server of its name starts again)"
    )


def reclaim_jack_registration(name: str) -> None:
    """Free a dead server's registry slot the JACK way: start a server of that name
    (JACK reclaims the slot of a dead owner), wait until it answers, stop it (SIGTERM
    unregisters it)."""
    env = {**os.environ, "JACK_NO_START_SERVER": "1", "JACK_DEFAULT_SERVER": name}
    argv = ["jackd", "--name", name, "--no-realtime", "-d", "dummy", "-p", "1024"]
    with subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, env=env) as server:  # fmt: skip
        deadline = time.monotonic() + READY_TIMEOUT_S
        while server.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                probe = subprocess.run(["jack_lsp", "-s", name], env=env, capture_output=True,
                                       timeout=PROBE_TIMEOUT_S)  # fmt: skip
                if probe.returncode == 0:
                    break
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.wait(POLL_S)
        server.terminate()
        try:
            server.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            server.kill()
    remove_jack_files(name)


def remove_jack_server(name: str) -> None:
    """What a killed JACK server of latlab's left: its files, its registry slot (once the
    killed server is gone: JACK reclaims no slot whose pid still exists)."""
    remove_jack_files(name)
    pid = registrations().get(name)
    if pid is None or not shutil.which("jackd"):
        return
    _wait_gone(pid, STOP_GRACE_S)
    reclaim_jack_registration(name)
