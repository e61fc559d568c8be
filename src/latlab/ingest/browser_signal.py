"""The black box's browser ends: timing logs (and the recording) from what Chromium and
latlab's page left behind.

* **Capture** (``[signal] inject`` is a browser): Chromium's fake capture device reads
  the signal file; each call of ``AudioInputDevice::AudioThreadCallback::Process`` in
  the browser's own trace hands over the file's next period (10 ms). The k-th call
  therefore began with file sample ``k * period``, at the call's start.
* **Recording** (``[signal] record`` is a browser): the page's AudioWorklet tap on the
  remote track sends every sample as ``signal_audio`` records (16-bit, base64, with
  the AudioContext frame of the first sample), and with each an ``output_ts`` record:
  ``AudioContext.getOutputTimestamp()``, which context time the output device was
  playing out at which page time. Position ``p`` of the recording is context frame
  ``first + p``, played out at the page time a least-squares line through the
  ``output_ts`` pairs gives it, on CLOCK_MONOTONIC through the page's clock pings.

Both become a timing log (``TIMING_SCHEMA``: position, time_ns, nframes), read by
``latlab.analysis.blackbox.read_rig_log``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from latlab.errors import UserInputError
from latlab.ingest.browser_records import clock_offset, parse_lines
from latlab.ingest.chrome_trace import ChromeSlices
from latlab.signal.wavio import write_wav

TIMING_SCHEMA = "latlab.signal-timing/1"
DELIVERY_TIMING = "delivery"  # meta "timing": times are when reads returned (a device rig)
CAPTURE_FUNCTION = "AudioInputDevice::AudioThreadCallback::Process"
CAPTURE_PERIOD_S = 0.01
MAX_GAP_S = 5.0


class BrowserSignalError(UserInputError, ValueError):
    """A browser end's records cannot be used; ``str()`` names the file and the problem."""


def write_timing_log(
    path: Path, position: np.ndarray, time_ns: np.ndarray, nframes: np.ndarray, meta: dict
) -> None:
    """A timing log: per block, its first file sample, when (CLOCK_MONOTONIC) and length."""
    table = pa.table(
        {
            "position": np.asarray(position, dtype=np.int64),
            "time_ns": np.asarray(time_ns, dtype=np.int64),
            "nframes": np.asarray(nframes, dtype=np.int64),
        }
    )
    document = {"schema": TIMING_SCHEMA, **meta}
    pq.write_table(table.replace_schema_metadata({"latlab": json.dumps(document)}), path)


def capture_timing(slices: ChromeSlices, rate: int, source: Path, out: Path) -> int:
    """Write the capturing browser's timing log from its trace; return the calls used."""
    calls = slices.of(CAPTURE_FUNCTION).start_ns
    if len(calls) < 2:
        raise BrowserSignalError(
            f"{source}: Chromium's trace has {len(calls)} capture calls "
            f"({CAPTURE_FUNCTION}): the signal's capture cannot be timed"
        )
    period = round(rate * CAPTURE_PERIOD_S)
    position = np.arange(len(calls), dtype=np.int64) * period
    write_timing_log(
        out,
        position,
        calls,
        np.full(len(calls), period),
        {"rate": rate, "source": str(source), "method": "capture calls in Chromium's trace"},
    )
    return len(calls)


@dataclass(frozen=True)
class Recording:
    """What a page's tap recorded: the samples (float, silence in gaps), their rate, and
    per chunk its first position, when it played out (CLOCK_MONOTONIC ns) and length."""

    samples: np.ndarray
    rate: int
    starts: np.ndarray
    time_ns: np.ndarray
    lengths: np.ndarray

    def times_of(self, positions: np.ndarray) -> np.ndarray:
        """When samples at ``positions`` played out (ns, interpolated between chunks)."""
        return np.interp(np.asarray(positions, np.float64), self.starts, self.time_ns)

    def positions_of(self, time_ns: np.ndarray) -> np.ndarray:
        """The sample positions that played out at ``time_ns``."""
        return np.interp(np.asarray(time_ns, np.float64), self.time_ns, self.starts)


def recording_of(lines: list[dict], records: Path) -> Recording:
    """The recording in a page's records (``lines``: ``parse_lines`` of ``records``)."""
    offset = clock_offset([line for line in lines if line.get("type") == "clock"])
    if offset is None:
        raise BrowserSignalError(f"{records}: no clock pings, so its times cannot be placed")
    chunks = [line for line in lines if line.get("type") == "signal_audio"]
    if not chunks:
        raise BrowserSignalError(f"{records}: no recorded audio (signal_audio records)")
    rate = int(chunks[0].get("rate", 0))
    frames, pcm = _chunks(chunks, records)
    starts = frames - frames[0]
    lengths = np.array([len(p) for p in pcm], dtype=np.int64)
    samples = np.zeros(int(starts[-1] + lengths[-1]), dtype=np.float64)
    for start, chunk in zip(starts, pcm, strict=True):
        samples[start : start + len(chunk)] = chunk / 32767.0
    time_ns = _output_line(lines, records)(frames / rate) * 1e6 + offset
    return Recording(samples, rate, starts, np.round(time_ns).astype(np.int64), lengths)


def write_recording(records: Path, wav_out: Path, log_out: Path) -> int:
    """Write the recording browser's ``signal_audio`` as a WAV file and its timing log;
    return the samples written (see ``_chunks`` for gaps and damage)."""
    lines, _ = parse_lines(records)
    found = recording_of(lines, records)
    write_wav(wav_out, found.samples, found.rate)
    write_timing_log(
        log_out,
        found.starts,
        found.time_ns,
        found.lengths,
        {"rate": found.rate, "source": str(records),
         "method": "AudioWorklet tap, getOutputTimestamp"},
    )  # fmt: skip
    return len(found.samples)


def _chunks(chunks: list[dict], records: Path) -> tuple[np.ndarray, list[np.ndarray]]:
    """Frames and samples of the chunks up to the first damaged one, or one that goes
    back in time or leaves a gap longer than MAX_GAP_S.

    The render thread skips quanta it could not render in time (the context's frames
    jump ahead, at start-up especially); such a gap stays silence in the recording, so
    that positions remain the context's frames. Chromium once gave a chunk a start
    frame one render quantum early while the next chunk's frame followed on from the
    samples counted (a CI run: steps of -128 and +128 frames); a frame that the next
    chunk contradicts in this way is taken from the count instead."""
    decoded = _decoded(chunks)
    if not decoded:
        raise BrowserSignalError(f"{records}: the recorded audio cannot be decoded")
    frames = [decoded[0][0]]
    pcm = [decoded[0][1]]
    for number in range(1, len(decoded)):
        frame, samples, rate = decoded[number]
        counted = frames[-1] + len(pcm[-1])
        following = decoded[number + 1][0] if number + 1 < len(decoded) else None
        if following == counted + len(samples):
            frame = counted  # this chunk's frame alone disagrees with the count
        if not 0 <= frame - counted <= MAX_GAP_S * rate:
            break  # the tap restarted: positions would no longer be frames
        frames.append(frame)
        pcm.append(samples)
    return np.asarray(frames, dtype=np.int64), pcm


def _decoded(chunks: list[dict]) -> list[tuple[int, np.ndarray, float]]:
    """(frame, samples, rate) of each chunk, up to the first that cannot be decoded."""
    decoded = []
    for chunk in chunks:
        try:
            samples = np.frombuffer(base64.b64decode(chunk["pcm"], validate=True), "<i2")
            decoded.append((int(chunk["frame"]), samples, float(chunk.get("rate", 48000))))
        except (KeyError, TypeError, ValueError, binascii.Error):
            break
    return decoded


def _output_line(lines: list[dict], records: Path) -> Callable[[np.ndarray], np.ndarray]:
    """Page ms of a context time, through the ``output_ts`` pairs.

    Piecewise: between two pairs the context's output runs at the device's rate, but
    where the device glitched (played silence, or ran late) the output jumps ahead of the
    context's frames and stays so. One line through all pairs spread such a jump over
    the whole run (a 37 ms jump at 6 s of 11 drifted the black box by 4 ms a second).
    A pair off both its neighbours' lines by more than ``OUTPUT_OUTLIER_MS`` is left out
    (``getOutputTimestamp`` once returned a time one device callback off); outside the
    pairs the times continue at the median rate of the steps."""
    pairs = np.array(
        [
            (line["context_s"], line["out_ms"])
            for line in lines
            if line.get("type") == "output_ts"
            and isinstance(line.get("context_s"), int | float)
            and isinstance(line.get("out_ms"), int | float)
            and line["context_s"] > 0
        ],
        dtype=np.float64,
    ).reshape(-1, 2)
    pairs = pairs[np.argsort(pairs[:, 0], kind="stable")]
    pairs = pairs[np.diff(pairs[:, 0], prepend=-np.inf) > 0]
    if len(pairs) < 2:
        raise BrowserSignalError(
            f"{records}: fewer than two output timestamps, so the recording cannot be timed"
        )
    pairs = pairs[~_output_outliers(pairs)]
    x, y = pairs[:, 0], pairs[:, 1]
    rate = float(np.median(np.diff(y) / np.diff(x))) if len(x) > 1 else 1000.0

    def page_ms(context_s: np.ndarray) -> np.ndarray:
        at = np.asarray(context_s, dtype=np.float64)
        inside = np.interp(at, x, y)
        return np.where(
            at < x[0],
            y[0] + (at - x[0]) * rate,
            np.where(at > x[-1], y[-1] + (at - x[-1]) * rate, inside),
        )

    return page_ms


OUTPUT_OUTLIER_MS = 1.0


def _output_outliers(pairs: np.ndarray) -> np.ndarray:
    """Pairs off the line through the two before them and off the line through the two
    after them (an output time that is wrong, not a jump: after a jump the pairs that
    follow agree with each other)."""
    out = np.zeros(len(pairs), bool)
    if len(pairs) < 5:
        return out
    x, y = pairs[:, 0], pairs[:, 1]

    def off(a: np.ndarray, b: np.ndarray, at: np.ndarray) -> np.ndarray:
        slope = (y[b] - y[a]) / (x[b] - x[a])
        return np.abs(y[a] + (x[at] - x[a]) * slope - y[at])

    i = np.arange(2, len(pairs) - 2)
    out[i] = (off(i - 2, i - 1, i) > OUTPUT_OUTLIER_MS) & (off(i + 1, i + 2, i) > OUTPUT_OUTLIER_MS)
    return out
