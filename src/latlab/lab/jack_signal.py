"""The black-box rig on a JACK device: play a time-coded signal in, record the output.

Run by ``latlab run`` inside a host's namespace, as a JACK client of that host's
server (``JACK_DEFAULT_SERVER``)::

    python -m latlab.lab.jack_signal inject --client tx --wav sent.wav --log inject.parquet
    python -m latlab.lab.jack_signal record --client rx --wav received.wav --log record.parquet

``inject`` connects its output port to every audio input port of client ``--client``
(the system under test's capture, e.g. a ``jackaudiosrc client-name=tx``) and plays the
file from the first cycle after connecting; ``record`` connects the first audio output
port of ``--client`` (e.g. a ``jackaudiosink``) to its input and records it. Both
print ``ready`` once connected and stop on SIGINT or SIGTERM, then write their files.

The timing log (Parquet, one row per JACK cycle) says which file sample each cycle
started with and when that cycle started on JACK's clock (``jack_get_cycle_times``):
a sample at offset ``i`` of cycle ``k`` is handed over at ``cycle_us[k] + i / rate``.
That start is JACK's estimate (its DLL), which under load wandered by up to 7.7 ms
from the device's real cycles within one run; so each row also holds when the process
callback ran (``wake_us``, ``jack_get_time``), which the analysis uses to follow such
a wander (``latlab.analysis.blackbox.follow_wakes``). JACK's clock is not
CLOCK_MONOTONIC (jackd2 on Linux reads CLOCK_MONOTONIC_RAW), so the log's metadata
holds bracketed calibration pairs taken at the start and the end: ``(monotonic_ns
before, jack_us, monotonic_ns after)``.

The process callback only copies samples between preallocated arrays and the port
buffers; everything else happens before activation or after deactivation.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from latlab.errors import MeasurementError
from latlab.lab.rig_cli import rig_parser, run_rig

LOG_SCHEMA = "latlab.jack-signal/1"
CONNECT_TIMEOUT_S = 10.0
CALIBRATION_PAIRS = 64
_CYCLE_TYPES = """
typedef uint32_t jack_nframes_t;
typedef uint64_t jack_time_t;
jack_time_t jack_get_time(void);
int jack_get_cycle_times(void *client, jack_nframes_t *current_frames,
    jack_time_t *current_usecs, jack_time_t *next_usecs, float *period_usecs);
"""


class RigError(MeasurementError, RuntimeError):
    """The rig cannot run; ``str()`` is one line."""


@dataclass
class CycleLog:
    """Preallocated per-cycle timing: file position, JACK frame and microseconds."""

    capacity: int
    position: np.ndarray = field(init=False)
    frames: np.ndarray = field(init=False)
    cycle_us: np.ndarray = field(init=False)
    wake_us: np.ndarray = field(init=False)
    nframes: np.ndarray = field(init=False)
    count: int = 0
    overflowed: int = 0

    def __post_init__(self) -> None:
        self.position = np.zeros(self.capacity, dtype=np.int64)
        self.frames = np.zeros(self.capacity, dtype=np.uint32)
        self.cycle_us = np.zeros(self.capacity, dtype=np.uint64)
        self.wake_us = np.zeros(self.capacity, dtype=np.uint64)
        self.nframes = np.zeros(self.capacity, dtype=np.uint32)

    def table(self) -> pa.Table:
        n = self.count
        return pa.table(
            {
                "position": self.position[:n],
                "frames": self.frames[:n],
                "cycle_us": self.cycle_us[:n],
                "wake_us": self.wake_us[:n],
                "nframes": self.nframes[:n],
            }
        )


class CycleClock:
    """``jack_get_cycle_times`` and ``jack_get_time``, which JACK-Client does not wrap."""

    def __init__(self, client: Any) -> None:
        import cffi
        import jack

        self.ffi = cffi.FFI()
        self.ffi.cdef(_CYCLE_TYPES)
        try:
            self.lib = self.ffi.dlopen("libjack.so.0")
        except OSError as exc:
            raise RigError(f"cannot load libjack.so.0: {exc}") from None
        address = int(jack._ffi.cast("uintptr_t", client._ptr))
        self.client = self.ffi.cast("void *", address)
        self.frames = self.ffi.new("jack_nframes_t *")
        self.current = self.ffi.new("jack_time_t *")
        self.next = self.ffi.new("jack_time_t *")
        self.period = self.ffi.new("float *")

    def now(self) -> int:
        """JACK's clock now, microseconds."""
        return int(self.lib.jack_get_time())

    def cycle(self) -> tuple[int, int]:
        """(frame, microseconds) at the start of the current cycle; only in the callback."""
        lib = self.lib
        lib.jack_get_cycle_times(self.client, self.frames, self.current, self.next, self.period)
        return self.frames[0], self.current[0]

    def calibrate(self, pairs: int = CALIBRATION_PAIRS) -> list[list[int]]:
        """Bracketed readings ``[monotonic_ns before, jack_us, monotonic_ns after]``."""
        out = []
        for _ in range(pairs):
            before = time.monotonic_ns()
            jack_us = int(self.lib.jack_get_time())
            after = time.monotonic_ns()
            out.append([before, jack_us, after])
        return out


def _open_client(name: str) -> Any:
    import jack

    try:
        return jack.Client(name, no_start_server=True)
    except jack.JackError as exc:
        raise RigError(f"cannot open JACK client '{name}': {exc}") from None


def _await_ports(client: Any, pattern: str, **kinds: bool) -> list[Any]:
    """Ports of ``pattern`` once they exist (the system under test registers them)."""
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        ports = client.get_ports(pattern, is_audio=True, **kinds)
        if ports:
            return ports
        if time.monotonic() > deadline:
            side = "input" if kinds.get("is_input") else "output"
            raise RigError(f"no JACK {side} ports match '{pattern}' after {CONNECT_TIMEOUT_S:g} s")
        time.sleep(0.01)


def _connect(client: Any, own: Any, other: Any, own_is_source: bool) -> None:
    """Connect our port and another client's; if that client connected them first, fine."""
    import jack

    pair = (own, other) if own_is_source else (other, own)
    try:
        client.connect(*pair)
    except jack.JackError:
        deadline = time.monotonic() + 1.0  # the other client's connect may be under way
        while not own.is_connected_to(other):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


class Rig:
    """One JACK client that plays (``inject``) or records (``record``) a mono signal."""

    def __init__(self, mode: str, target: str, seconds: float, played: np.ndarray | None = None):
        """``played`` is what ``inject`` plays; ``record`` keeps up to ``seconds``."""
        self.mode = mode
        self.client = _open_client(f"latlab-{mode}")
        self.rate = int(self.client.samplerate)
        self.samples = (
            played if played is not None else np.zeros(int(seconds * self.rate), np.float32)
        )
        self.position = 0
        self.running = False
        self.xruns = 0
        self.xrun_ns: list[int] = []  # CLOCK_MONOTONIC when JACK told us of each xrun
        period = max(1, int(self.client.blocksize))
        self.log = CycleLog(int(seconds * self.rate / period * 1.5) + 16)
        self.clock = CycleClock(self.client)
        self.port = (
            self.client.outports.register("out")
            if mode == "inject"
            else self.client.inports.register("in")
        )
        self.target = target
        self.calibration_start: list[list[int]] = []
        self.calibration_end: list[list[int]] = []
        self.client.set_process_callback(self._process)
        self.client.set_xrun_callback(self._xrun)
        self.server_gone = False
        self.client.set_shutdown_callback(self._shutdown)

    def _xrun(self, _delay_us: float) -> None:
        self.xruns += 1
        self.xrun_ns.append(time.monotonic_ns())

    def _shutdown(self, _status: Any, _reason: str) -> None:
        self.server_gone = True

    def _process(self, frames: int) -> None:
        wake_us = self.clock.now()  # first: how late this callback ran into its cycle
        buffer = self.port.get_array()
        if not self.running:
            if self.mode == "inject":
                buffer[:] = 0.0
            return
        log = self.log
        start = self.position
        if start >= len(self.samples) or log.count >= log.capacity:
            log.overflowed += start < len(self.samples)  # a full log, not the end of the file
            if self.mode == "inject":
                buffer[:] = 0.0
            return
        frame, cycle_us = self.clock.cycle()
        i = log.count
        log.position[i], log.frames[i], log.cycle_us[i], log.nframes[i] = (
            start,
            frame,
            cycle_us,
            frames,
        )
        log.wake_us[i] = wake_us
        log.count = i + 1
        n = min(frames, len(self.samples) - start)
        if self.mode == "inject":
            buffer[:n] = self.samples[start : start + n]
            buffer[n:] = 0.0
        else:
            self.samples[start : start + n] = buffer[:n]
        self.position = start + n

    def start(self) -> None:
        """Activate, connect to the target's ports, then begin playing or recording."""
        self.calibration_start = self.clock.calibrate()
        self.client.activate()
        kind = {"is_input": True} if self.mode == "inject" else {"is_output": True}
        ports = _await_ports(self.client, f"{self.target}:", **kind)
        for port in ports if self.mode == "inject" else ports[:1]:
            _connect(self.client, self.port, port, own_is_source=self.mode == "inject")
        self.running = True

    def stop(self) -> None:
        self.running = False
        if not self.server_gone:
            self.client.deactivate()
            self.calibration_end = self.clock.calibrate()
        self.client.close()

    def write_log(self, path: Path) -> None:
        meta = {
            "schema": LOG_SCHEMA,
            "mode": self.mode,
            "target": self.target,
            "rate": self.rate,
            "samples": self.position,
            "xruns": self.xruns,
            "xrun_monotonic_ns": self.xrun_ns,
            "server_gone": self.server_gone,
            "cycles_lost_to_full_log": self.log.overflowed,
            "clock": "jack_get_cycle_times current_usecs (JACK's clock, microseconds)",
            "calibration_start": self.calibration_start,
            "calibration_end": self.calibration_end,
        }
        table = self.log.table().replace_schema_metadata({"latlab": json.dumps(meta)})
        pq.write_table(table, path)


def _wait_for_stop(rig: Rig, exit_at_end: bool) -> None:
    """Until SIGINT or SIGTERM (blocked before JACK's threads started), the server
    shuts down, or with ``exit_at_end`` until the player has played the whole file."""
    while signal.sigtimedwait({signal.SIGINT, signal.SIGTERM}, 0.05) is None:
        if rig.server_gone or (exit_at_end and rig.position >= len(rig.samples)):
            return


def run(args: argparse.Namespace) -> None:
    from latlab.signal.wavio import read_wav, write_wav

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    if args.mode == "inject":
        audio = read_wav(args.wav)
        rig = Rig("inject", args.client, audio.duration_s, audio.samples.astype(np.float32))
        if audio.rate != rig.rate:
            raise RigError(f"{args.wav}: {audio.rate} Hz; the JACK server runs at {rig.rate} Hz")
    else:
        rig = Rig("record", args.client, args.max_s)
    rig.start()
    print("ready", flush=True)
    _wait_for_stop(rig, args.exit_at_end and args.mode == "inject")
    rig.stop()
    if args.mode == "record":
        write_wav(args.wav, rig.samples[: rig.position], rig.rate)
    rig.write_log(args.log)
    print(
        f"{args.mode}: {rig.position} samples in {rig.log.count} cycles, {rig.xruns} xruns",
        file=sys.stderr,
    )


def main(argv: list[str] | None = None) -> int:
    parser = rig_parser("python -m latlab.lab.jack_signal", "per-cycle timing (Parquet)")
    parser.add_argument("--client", required=True, help="JACK client to connect to")
    return run_rig(run, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
