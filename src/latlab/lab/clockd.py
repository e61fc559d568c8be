"""The clock agent: a clock domain's samples and its two-way timing exchanges.

One agent runs per clock domain beside the measurement (in ``latlab record``, as a
thread of the recorder; in a run whose hosts have their own clocks, as a process
``python -m latlab.lab.clockd`` inside each such host). It appends to its clock log
(``clock/NAME.jsonl``, :mod:`latlab.ingest.clock_log` reads it):

* every second (and at start and stop) a CLOCK_MONOTONIC / CLOCK_REALTIME pair (the
  tightest of five bracketed reads) with the kernel's view of its synchronisation
  (``adjtimex``: state, status, maximum and estimated error), and at start and stop what
  ``chronyc tracking`` / ``pmc`` say where they are installed;
* as a server (``--serve``), it answers exchange requests on UDP: it reads its clock
  when a request arrives (t2) and just before it answers (t3);
* as a client (``--peer DOMAIN=ADDR:PORT``), it sends a request a few times a second
  (t1 read just before the send), reads its clock when the answer arrives (t4) and logs
  the four timestamps. Every timestamp is read in user space on CLOCK_MONOTONIC, so each
  one-way delay is >= 0 whatever the scheduler does: the interval [t3 - t4, t2 - t1]
  always holds the offset.

Standalone it prints ``ready`` once its sockets are bound and its first sample written,
and stops on SIGINT or SIGTERM (writing a last sample).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from latlab.ingest.clock_log import DOMAIN, EXCHANGE, PAIR, STATUS

MONO = time.CLOCK_MONOTONIC
REAL = time.CLOCK_REALTIME
SAMPLE_PERIOD_S = 1.0
EXCHANGE_RATE_HZ = 5.0
ANSWER_TIMEOUT_S = 0.5
MAGIC = b"LLCK"
REQUEST = struct.Struct("!4sQq")  # magic, sequence, t1
ANSWER = struct.Struct("!4sQqqq")  # magic, sequence, t1, t2, t3
HELLO = b"LLCH"  # a client asking the server's clock domain; answered HELLO + its name
HELLO_TIMEOUT_S = 10.0
STA_UNSYNC = 0x0040
TIME_ERROR = 5
STATUS_TOOLS = (("chronyc", ["chronyc", "-c", "tracking"]),
                ("pmc", ["pmc", "-u", "-b", "0", "GET TIME_STATUS_NP"]))  # fmt: skip


class _Timex(ctypes.Structure):
    """struct timex (x86-64 and other LP64 Linux)."""

    _fields_ = [
        ("modes", ctypes.c_uint), ("offset", ctypes.c_long), ("freq", ctypes.c_long),
        ("maxerror", ctypes.c_long), ("esterror", ctypes.c_long), ("status", ctypes.c_int),
        ("constant", ctypes.c_long), ("precision", ctypes.c_long),
        ("tolerance", ctypes.c_long), ("time_sec", ctypes.c_long), ("time_usec", ctypes.c_long),
        ("tick", ctypes.c_long), ("ppsfreq", ctypes.c_long), ("jitter", ctypes.c_long),
        ("shift", ctypes.c_int), ("stabil", ctypes.c_long), ("jitcnt", ctypes.c_long),
        ("calcnt", ctypes.c_long), ("errcnt", ctypes.c_long), ("stbcnt", ctypes.c_long),
        ("tai", ctypes.c_int), ("_pad", ctypes.c_int * 11),
    ]  # fmt: skip


_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def kernel_sync() -> dict[str, Any]:
    """What the kernel says of its clock's synchronisation (adjtimex, read only)."""
    tx = _Timex()
    state = _LIBC.adjtimex(ctypes.byref(tx))
    if state < 0:
        return {"state": None, "synced": False, "maxerror_us": None}
    unsync = bool(tx.status & STA_UNSYNC) or state == TIME_ERROR
    return {
        "state": state,
        "status": tx.status,
        "maxerror_us": tx.maxerror,
        "esterror_us": tx.esterror,
        "synced": not unsync,
    }


def clock_pair(reads: int = 5) -> dict[str, int]:
    """CLOCK_MONOTONIC and CLOCK_REALTIME read together: of ``reads`` brackets
    (monotonic, realtime, monotonic) the tightest, its monotonic midpoint."""
    best = None
    for _ in range(reads):
        before = time.clock_gettime_ns(MONO)
        real = time.clock_gettime_ns(REAL)
        after = time.clock_gettime_ns(MONO)
        if best is None or after - before < best[2] - best[0]:
            best = (before, real, after)
    assert best is not None
    before, real, after = best
    return {
        "mono_ns": before + (after - before) // 2,
        "real_ns": real,
        "bracket_ns": after - before,
    }


def boot_id() -> str:
    with contextlib.suppress(OSError):
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return ""


def default_domain() -> str:
    """This machine's clock domain name: ``monotonic@HOSTNAME``."""
    return f"monotonic@{socket.gethostname() or 'localhost'}"


def parse_peers(texts: list[str], what: str = "--peer") -> dict[str | None, tuple[str, int]]:
    """``[DOMAIN=]ADDRESS:PORT`` each (without a domain, the peer is asked its own)."""
    peers: dict[str | None, tuple[str, int]] = {}
    for text in texts:
        domain, sep, address = text.rpartition("=")
        peers[domain if sep else None] = parse_address(address, what)
    return peers


def parse_address(text: str, what: str) -> tuple[str, int]:
    """``HOST:PORT`` (a port alone: every address) -> (host, port); ValueError naming it."""
    host, _, port = text.rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{what} {text!r}: not ADDRESS:PORT (a port from 1 to 65535)")
    return host or "0.0.0.0", int(port)


class ClockAgent:
    """Samples, serves and exchanges for one clock domain, in threads, into one log."""

    def __init__(
        self,
        log: Path,
        domain: str,
        *,
        serve: tuple[str, int] | None = None,
        peers: dict[str | None, tuple[str, int]] | None = None,
        rate_hz: float = EXCHANGE_RATE_HZ,
        planted: bool = False,
        agent: str = "latlab",
    ) -> None:
        self.log = Path(log)
        self.domain = domain
        self.peers = dict(peers or {})
        self.rate_hz = rate_hz
        self.stop_event = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.log.open("a", encoding="utf-8")
        self._write({"type": DOMAIN, "domain": domain, "hostname": socket.gethostname(),
                     "boot_id": boot_id(), "planted": planted, "agent": agent,
                     "pid": os.getpid()})  # fmt: skip
        self._server = None
        if serve is not None:
            self._server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._server.bind(serve)
            _receive_timeout(self._server, 0.2)
        self.exchanges = 0

    def _write(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._file.write(json.dumps(entry, separators=(",", ":")) + "\n")
            self._file.flush()

    def sample(self) -> None:
        """One clock pair with the kernel's view."""
        self._write({"type": PAIR, **clock_pair(), **kernel_sync()})

    def status(self) -> None:
        """What chronyc / pmc say, where installed."""
        for tool, argv in STATUS_TOOLS:
            if shutil.which(argv[0]) is None:
                continue
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                done = subprocess.run(argv, capture_output=True, text=True, timeout=2, check=False)
                self._write({"type": STATUS, "tool": tool,
                             "text": (done.stdout + done.stderr).strip()[:4000]})  # fmt: skip

    def start(self) -> None:
        self.sample()
        self.status()
        targets = [self._sampler]
        if self._server is not None:
            targets.append(self._serve)
        targets += [lambda peer=peer: self._client(peer) for peer in self.peers]
        for target in targets:
            thread = threading.Thread(target=target, daemon=True, name="latlab-clock")
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self.stop_event.set()
        for thread in self._threads:
            thread.join(timeout=2)
        self.sample()
        self.status()
        with self._lock:
            self._file.close()
        if self._server is not None:
            self._server.close()

    def _sampler(self) -> None:
        while not self.stop_event.wait(SAMPLE_PERIOD_S):
            self.sample()

    def _serve(self) -> None:
        assert self._server is not None
        while not self.stop_event.is_set():
            try:
                data, peer = self._server.recvfrom(64)
            except BlockingIOError:  # SO_RCVTIMEO ran out
                continue
            except OSError:
                return
            t2 = time.clock_gettime_ns(MONO)
            if data == HELLO:
                with contextlib.suppress(OSError):
                    self._server.sendto(HELLO + self.domain.encode(), peer)
                continue
            if len(data) != REQUEST.size:
                continue
            magic, seq, t1 = REQUEST.unpack(data)
            if magic != MAGIC:
                continue
            t3 = time.clock_gettime_ns(MONO)
            with contextlib.suppress(OSError):
                self._server.sendto(ANSWER.pack(MAGIC, seq, t1, t2, t3), peer)

    def _client(self, peer: str | None) -> None:
        address = self.peers[peer]
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        _receive_timeout(sock, ANSWER_TIMEOUT_S)
        peer_domain = peer or self._hello(sock, address)
        if peer_domain is None:
            self._write({"type": "problem", "text": f"no clock agent answered at {address}"})
            return
        seq = 0
        period = 1.0 / self.rate_hz
        next_at = time.monotonic()
        with sock:
            while not self.stop_event.is_set():
                seq += 1
                t1 = time.clock_gettime_ns(MONO)
                try:
                    sock.sendto(REQUEST.pack(MAGIC, seq, t1), address)
                    answer = self._answer(sock, seq)
                except OSError:
                    answer = None
                if answer is not None:
                    t4, (_, _, a_t1, t2, t3) = answer
                    if a_t1 == t1:
                        self.exchanges += 1
                        self._write({"type": EXCHANGE, "peer": peer_domain,
                                     "t1": t1, "t2": t2, "t3": t3, "t4": t4})  # fmt: skip
                next_at += period
                self.stop_event.wait(max(next_at - time.monotonic(), 0))

    def _hello(self, sock: socket.socket, address: tuple[str, int]) -> str | None:
        """The peer's clock domain (asked until it answers, HELLO_TIMEOUT_S at most)."""
        deadline = time.monotonic() + HELLO_TIMEOUT_S
        while not self.stop_event.is_set() and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                sock.sendto(HELLO, address)
                data = sock.recv(512)
                if data.startswith(HELLO) and len(data) > len(HELLO):
                    return data[len(HELLO) :].decode("utf-8", "replace")
        return None

    @staticmethod
    def _answer(sock: socket.socket, seq: int) -> tuple[int, tuple[Any, ...]] | None:
        """The answer to request ``seq`` (older ones are dropped), or None on timeout."""
        while True:
            try:
                data = sock.recv(64)
            except BlockingIOError:  # SO_RCVTIMEO ran out
                return None
            t4 = time.clock_gettime_ns(MONO)
            if len(data) == ANSWER.size:
                fields = ANSWER.unpack(data)
                if fields[0] == MAGIC and fields[1] == seq:
                    return t4, fields


def _receive_timeout(sock: socket.socket, seconds: float) -> None:
    """A blocking socket whose receive gives up after ``seconds`` (SO_RCVTIMEO): the
    thread sleeps in recv itself, not in poll first (Python's settimeout), one wake-up
    less on each leg of an exchange."""
    sock.settimeout(None)
    whole = int(seconds)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                    struct.pack("ll", whole, int((seconds - whole) * 1e6)))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m latlab.lab.clockd", description=__doc__)
    parser.add_argument("--log", required=True, type=Path)
    parser.add_argument("--domain", default=None)
    parser.add_argument("--serve", default=None, help="ADDRESS:PORT to answer exchanges on")
    parser.add_argument("--peer", action="append", default=[], help="[DOMAIN=]ADDRESS:PORT")
    parser.add_argument("--rate", type=float, default=EXCHANGE_RATE_HZ)
    parser.add_argument("--planted", action="store_true")
    args = parser.parse_args(argv)
    try:
        serve = parse_address(args.serve, "--serve") if args.serve else None
        peers = parse_peers(args.peer)
    except ValueError as exc:
        print(f"clockd: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    agent = ClockAgent(args.log, args.domain or default_domain(), serve=serve, peers=peers,
                       rate_hz=args.rate, planted=args.planted, agent="clockd")  # fmt: skip
    agent.start()
    print("ready", flush=True)
    stop.wait()
    agent.stop()
    print(f"exchanges {agent.exchanges}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
