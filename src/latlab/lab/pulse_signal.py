"""The black-box rig on a PulseAudio device: play a time-coded signal in, record the output.

Run by ``latlab run`` inside a host's namespace, as a client of that host's PulseAudio
server (``PULSE_SERVER``)::

    python -m latlab.lab.pulse_signal inject --device llab_tx --wav sent.wav \
        --monitor-wav injected.wav --log inject.parquet
    python -m latlab.lab.pulse_signal record --device llab_rx.monitor --rate 48000 \
        --wav received.wav --log record.parquet

A device's null sink is what its host plays to, and the sink's monitor is what it
captures (``latlab.lab.devices``). ``inject`` plays the file into the null sink, so the
system under test captures it from the monitor, and records that monitor itself
(``--monitor-wav``): what the capture device delivered, and when. ``record`` records
the monitor of the playout device: what the system under test played, and when the
server took it. Both print ``ready`` once their streams are open and stop on SIGINT
or SIGTERM, then write their files.

Timing: no latency report of PulseAudio's (``pa_simple_get_latency`` interpolates, and
drifted by ~3 ms/s and jumped by 4.5 ms on a monitor stream here). A recorder reads
blocks of one device period (``--block-s``: the rig asks the server for no lower
latency than the system under test does) and logs when each read returned
(CLOCK_MONOTONIC). A block is there once the server delivered its last sample, so the
analysis (``latlab.analysis.blackbox``, ``"timing": "delivery"``) dates the samples by
the low envelope of return time less end position, the model latlab applies to every
device source's pushes.
"""

from __future__ import annotations

import argparse
import ctypes
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from latlab.errors import MeasurementError
from latlab.ingest.browser_signal import DELIVERY_TIMING, write_timing_log
from latlab.lab.rig_cli import rig_parser, run_rig

BLOCK_S = 0.01  # a recorder's read and a player's write, unless --block-s says otherwise
TAIL_S = 0.5  # --exit-at-end: monitor recorded after the file was drained into the sink
SAMPLE_S16LE = 3  # pa_sample_format_t PA_SAMPLE_S16LE
STREAM_PLAYBACK, STREAM_RECORD = 1, 2
DEFAULT = 0xFFFFFFFF  # (uint32_t) -1: the server's choice


class RigError(MeasurementError, RuntimeError):
    """The rig cannot run; ``str()`` is one line."""


class _SampleSpec(ctypes.Structure):
    _fields_ = [("format", ctypes.c_int), ("rate", ctypes.c_uint32), ("channels", ctypes.c_uint8)]


class _BufferAttr(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint32) for name in ("maxlength", "tlength", "prebuf", "minreq", "fragsize")
    ]


def _libpulse_simple() -> ctypes.CDLL:
    lib = ctypes.CDLL("libpulse-simple.so.0")
    err = ctypes.POINTER(ctypes.c_int)
    lib.pa_simple_new.restype = ctypes.c_void_p
    lib.pa_simple_new.argtypes = [
        ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p,
        ctypes.POINTER(_SampleSpec), ctypes.c_void_p, ctypes.POINTER(_BufferAttr), err,
    ]  # fmt: skip
    for name in ("pa_simple_write", "pa_simple_read"):
        getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, err]
    lib.pa_simple_drain.argtypes = [ctypes.c_void_p, err]
    lib.pa_simple_free.argtypes = [ctypes.c_void_p]
    lib.pa_strerror.restype = ctypes.c_char_p
    return lib


class Stream:
    """One mono 16-bit PulseAudio stream (libpulse-simple; its calls release the GIL)."""

    def __init__(self, mode: str, device: str, rate: int, block: int) -> None:
        self.lib = _libpulse_simple()
        self.device = device
        self.error = ctypes.c_int()
        playing = mode == "inject"
        # A player keeps the server's buffer sizes: it is timed where the capture device
        # delivers, not by its writes, and a small buffer would pull the null sink's
        # latency down to 0.5 ms (three times the interrupts of the run without it).
        # A recorder's fragment is one period, what the system under test reads too.
        fragment = DEFAULT if playing else 2 * block  # one period of 2-byte samples
        attr = _BufferAttr(DEFAULT, DEFAULT, DEFAULT, DEFAULT, fragment)
        spec = _SampleSpec(SAMPLE_S16LE, rate, 1)
        self.handle = self.lib.pa_simple_new(
            None, f"latlab-{mode}".encode(), STREAM_PLAYBACK if playing else STREAM_RECORD,
            device.encode(), b"latlab signal", ctypes.byref(spec), None, ctypes.byref(attr),
            ctypes.byref(self.error),
        )  # fmt: skip
        if not self.handle:
            raise RigError(f"cannot open a stream on '{device}': {self._strerror()}")
        self.playing = playing

    def _strerror(self) -> str:
        return self.lib.pa_strerror(self.error.value).decode(errors="replace")

    def transfer(self, samples: np.ndarray) -> None:
        """Write (playback) or read (record) these samples, blocking until done."""
        call = self.lib.pa_simple_write if self.playing else self.lib.pa_simple_read
        if call(self.handle, samples.ctypes.data, samples.nbytes, ctypes.byref(self.error)) < 0:
            raise RigError(f"'{self.device}': {self._strerror()}")

    def close(self) -> None:
        if self.playing:
            self.lib.pa_simple_drain(self.handle, ctypes.byref(self.error))
        self.lib.pa_simple_free(self.handle)


class StopFlag:
    """Set by a signal handler or another thread, read between blocks. A plain flag:
    a handler must not take a lock its own thread may hold (``threading.Event`` does)."""

    def __init__(self) -> None:
        self.raised = False

    def set(self) -> None:
        self.raised = True

    def is_set(self) -> bool:
        return self.raised


@dataclass
class Recording:
    """Preallocated samples and, per read, its first sample and when the read returned."""

    rate: int
    seconds: float
    block: int
    samples: np.ndarray = field(init=False)
    position: np.ndarray = field(init=False)
    returned_ns: np.ndarray = field(init=False)
    reads: int = 0
    length: int = 0
    limit: int | None = None  # stop once this many samples are in (None: when full)
    error: RigError | None = None  # why the reads stopped early, if they did

    def __post_init__(self) -> None:
        self.samples = np.zeros(int(self.seconds * self.rate), dtype=np.int16)
        capacity = len(self.samples) // self.block + 1
        self.position = np.zeros(capacity, dtype=np.int64)
        self.returned_ns = np.zeros(capacity, dtype=np.int64)

    def record(self, stream: Stream, stop: StopFlag) -> None:
        """Read blocks until ``stop`` is set, the recording is full or a read fails
        (kept in ``error``: what was read stays)."""
        while not stop.is_set() and self.length + self.block <= (self.limit or len(self.samples)):
            try:
                stream.transfer(self.samples[self.length : self.length + self.block])
            except RigError as exc:
                self.error = exc
                return
            self.returned_ns[self.reads] = time.monotonic_ns()
            self.position[self.reads] = self.length
            self.reads += 1
            self.length += self.block

    def write(self, wav: Path, log: Path, source: str, beside: bool = False) -> None:
        """The recording and its timing log; ``beside``: the log's positions are in
        the recording, not in the file played (the log names it)."""
        from latlab.signal.wavio import write_wav

        # write_wav scales by 32767, so the samples read are written back exactly
        write_wav(wav, self.samples[: self.length] / 32767.0, self.rate)
        n = self.reads
        meta = {"rate": self.rate, "source": source, "timing": DELIVERY_TIMING}
        if beside:
            meta["recording"] = wav.name
        nframes = np.full(n, self.block, dtype=np.int64)
        write_timing_log(log, self.position[:n], self.returned_ns[:n], nframes, meta)


def play(stream: Stream, samples: np.ndarray, block: int, stop: StopFlag) -> int:
    """Write the file block by block until it ends or ``stop`` is set; samples played."""
    done = 0
    while not stop.is_set() and done < len(samples):
        stream.transfer(samples[done : done + block])
        done += min(block, len(samples) - done)
    return done


def _frames(seconds: float, rate: int) -> int:
    return max(1, round(seconds * rate))


def _stop_on_signals() -> StopFlag:
    """A flag SIGINT or SIGTERM sets (checked between blocks, each a period away)."""
    stop = StopFlag()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda _signum, _frame: stop.set())
    return stop


def _record(args: argparse.Namespace, stop: StopFlag) -> None:
    recording = Recording(args.rate, args.max_s, _frames(args.block_s, args.rate))
    stream = Stream("record", args.device, args.rate, recording.block)
    print("ready", flush=True)
    try:
        recording.record(stream, stop)
    finally:
        stream.close()
        recording.write(args.wav, args.log, f"latlab.lab.pulse_signal record {args.device}")
    print(f"record: {recording.length} samples in {recording.reads} reads", file=sys.stderr)
    if recording.error is not None:
        raise recording.error


def _inject(args: argparse.Namespace, stop: StopFlag) -> None:
    from latlab.signal.wavio import read_wav

    audio = read_wav(args.wav)
    samples = np.clip(np.round(audio.samples * 32768.0), -32768, 32767).astype(np.int16)
    block = _frames(args.block_s, audio.rate)
    monitor = Recording(audio.rate, len(samples) / audio.rate + args.max_s, block)
    tap = Stream("record", f"{args.device}.monitor", audio.rate, block)
    player = Stream("inject", args.device, audio.rate, block)
    tapping = StopFlag()
    reader = threading.Thread(target=monitor.record, args=(tap, tapping), daemon=True)
    reader.start()
    print("ready", flush=True)
    played = 0
    try:
        played = play(player, samples, block, stop)
        player.close()  # drained: every sample is in the sink
        if args.exit_at_end:  # what the sink still held reaches the monitor within its latency
            monitor.limit = min(monitor.length + round(TAIL_S * audio.rate), len(monitor.samples))
        while not stop.is_set() and reader.is_alive():
            reader.join(0.1)  # the runner stops the rigs together, after the processes
    finally:
        tapping.set()
        reader.join()
        tap.close()
        source = f"latlab.lab.pulse_signal inject {args.device}"
        monitor.write(args.monitor_wav, args.log, source, beside=True)
    print(f"inject: {played} samples played, {monitor.length} recorded", file=sys.stderr)
    if monitor.error is not None:
        raise monitor.error


def main(argv: list[str] | None = None) -> int:
    parser = rig_parser("python -m latlab.lab.pulse_signal", "per-read timing (Parquet)")
    parser.add_argument("--device", required=True, help="sink to play to / source to record")
    parser.add_argument("--monitor-wav", type=Path, help="inject: the sink's monitor, recorded")
    parser.add_argument("--rate", type=int, default=48000, help="record: sample rate")
    parser.add_argument(
        "--block-s", type=float, default=BLOCK_S, help="read/write size: the device's period"
    )
    args = parser.parse_args(argv)
    if args.mode == "inject" and args.monitor_wav is None:
        parser.error("inject needs --monitor-wav")
    stop = _stop_on_signals()
    return run_rig(lambda a: (_inject if a.mode == "inject" else _record)(a, stop), args)


if __name__ == "__main__":
    sys.exit(main())
