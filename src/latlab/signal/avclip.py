"""The quality matrix's test clip: speech with time codes, and video with frame codes.

A browser's fake capture devices loop their files (``--use-file-for-fake-audio-capture``,
``--use-file-for-fake-video-capture``), so both files are one loop of ``LOOP_S`` seconds:

* **audio** (WAV, 48 kHz mono): speech synthesised by espeak-ng (offline, Debian's
  ``espeak-ng``), cut or looped to the clip, with latlab's time codes mixed in
  (``latlab.timecode/1``) every 200 ms, code *k* at ``0.1 + 0.2 k`` s: its *media time*.
  With a planted offset (``offset_ms``), the codes of the loop's second half are written
  that much later than their media time (the speech is not moved), so the audio's codes
  run ``offset_ms`` behind the video there: a known A/V offset inside every loop.
* **video** (Y4M, I420, ``FPS`` frames a second): a moving texture (so the encoder has
  work at every bitrate) under a bar of 16 black or white cells across the top, the
  frame's number (12 bits, most significant first) and a 4-bit check. Frame *n*'s media
  time is ``n / FPS``. A reader (the room page; :func:`read_frame_code` here) averages each
  cell's middle and thresholds it at mid-grey.

A/V skew at an instant is the audio's media time there less the video's, both as played
out (docs/sfu.md, "Quality matrix").
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from latlab.signal.errors import SignalError
from latlab.signal.timecode import DESIGN, frame_waveforms, template
from latlab.signal.wavio import read_wav, resample, write_wav

LOOP_S = 4.0
RATE = 48000
FPS = 30
WIDTH, HEIGHT = 1280, 720
CODE_INTERVAL_S = 0.2
CODE_START_S = 0.1
CODE_LEVEL_DBFS = -20.0
SPEECH_DBFS = -26.0  # the speech's RMS before the codes are mixed in
CELLS = 16
NUMBER_BITS = 12
BAR_ROWS = 80  # the code bar's height at 1280x720 (scaled with the frame)
MAX_OFFSET_MS = 100.0  # a planted offset keeps every code inside the loop, none overlapping
SPEECH_TEXT = (
    "Every listener hears the call through the same network. When the link is cut to a "
    "narrow pipe, or loses a packet in ten, the server in the middle has to choose what to "
    "send. Seven bright foxes jumped over three lazy dogs, while a quiet voice counted one, "
    "two, three, four, five."
)
CLIP_VERSION = 2  # bump when the clip changes: cached clips of another version are remade


def code_times(offset_ms: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Per code of one loop: its index (= its media time slot) and where it is written (s).
    With ``offset_ms``, the codes of the loop's second half are written that much later."""
    count = round(LOOP_S / CODE_INTERVAL_S)
    index = np.arange(count - 1)  # the last slot stays free so a late code fits the loop
    media = CODE_START_S + CODE_INTERVAL_S * index
    written = media + np.where(media >= LOOP_S / 2, offset_ms / 1000.0, 0.0)
    return index, written


def media_time(index: np.ndarray) -> np.ndarray:
    """The media time (s into the loop) of code ``index``."""
    return CODE_START_S + CODE_INTERVAL_S * np.asarray(index, dtype=np.float64)


def speech(seconds: float, rate: int = RATE) -> np.ndarray:
    """``seconds`` of espeak-ng speech at ``rate``, RMS at SPEECH_DBFS (looped if short)."""
    if shutil.which("espeak-ng") is None:
        raise SignalError("espeak-ng not found (the speech reference): bash scripts/setup.sh")
    with tempfile.NamedTemporaryFile(prefix="latlab-speech-", suffix=".wav") as tmp:
        out = Path(tmp.name)
        argv = ["espeak-ng", "-v", "en-us", "-s", "165", "-w", str(out), SPEECH_TEXT]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        if result.returncode != 0 or out.stat().st_size == 0:
            raise SignalError(f"espeak-ng failed: {result.stderr.strip() or result.returncode}")
        audio = read_wav(out)
    samples = resample(audio.samples.astype(np.float64), audio.rate, rate)
    samples = np.resize(samples, round(seconds * rate))
    rms = float(np.sqrt(np.mean(samples**2)))
    return samples * (10 ** (SPEECH_DBFS / 20) / rms if rms > 0 else 1.0)


def audio_clip(offset_ms: float = 0.0, rate: int = RATE) -> tuple[np.ndarray, dict]:
    """One loop of speech with the time codes; and its codes document (index, media time,
    where written)."""
    if not 0.0 <= offset_ms <= MAX_OFFSET_MS:
        raise SignalError(f"an A/V offset of {offset_ms:g} ms is outside 0-{MAX_OFFSET_MS:g} ms")
    samples = speech(LOOP_S, rate)
    index, written = code_times(offset_ms)
    tpl = template(rate, DESIGN)
    waves = frame_waveforms(index, rate, DESIGN) * 10 ** (CODE_LEVEL_DBFS / 20)
    starts = np.round(written * rate).astype(np.int64) - tpl.ref_offset
    samples[starts[:, None] + np.arange(tpl.length)[None, :]] += waves
    peak = float(np.max(np.abs(samples)))
    if peak > 0.99:
        samples *= 0.99 / peak
    codes = {
        "design": "latlab.timecode/1",
        "sample_rate": rate,
        "loop_s": LOOP_S,
        "offset_ms": offset_ms,
        "codes": [
            {"index": int(i), "media_s": round(float(m), 6), "time_s": round(float(w), 6)}
            for i, m, w in zip(index, media_time(index), written, strict=True)
        ],
    }
    return samples.astype(np.float32), codes


def code_bits(number: np.ndarray) -> np.ndarray:
    """The 16 cells (bits, most significant first) of frame numbers: 12 bits and a check."""
    n = np.asarray(number, dtype=np.int64) & ((1 << NUMBER_BITS) - 1)
    check = (n ^ (n >> 4) ^ (n >> 8) ^ 0x5) & 0xF
    word = (n << 4) | check
    return ((word[..., None] >> np.arange(CELLS - 1, -1, -1)) & 1).astype(np.uint8)


def decode_cells(cells: np.ndarray) -> np.ndarray:
    """Frame numbers from cell bits (16 per row), -1 where the check fails."""
    cells = np.asarray(cells, dtype=np.int64)
    word = (cells << np.arange(CELLS - 1, -1, -1)).sum(axis=-1)
    n, check = word >> 4, word & 0xF
    ok = ((n ^ (n >> 4) ^ (n >> 8) ^ 0x5) & 0xF) == check
    return np.where(ok, n, -1)


def read_frame_code(luma: np.ndarray) -> int:
    """The frame number in a luma plane (any size), -1 if unreadable: each cell's middle
    third, averaged, against mid-grey."""
    height, width = luma.shape
    rows = max(1, round(BAR_ROWS * height / HEIGHT))
    edges = np.linspace(0, width, CELLS + 1)
    mids = []
    for k in range(CELLS):
        lo = int(edges[k] + (edges[k + 1] - edges[k]) / 3)
        hi = max(lo + 1, int(edges[k + 1] - (edges[k + 1] - edges[k]) / 3))
        mids.append(float(luma[rows // 3 : max(rows // 3 + 1, 2 * rows // 3), lo:hi].mean()))
    return int(decode_cells((np.array(mids) > 128).astype(np.int64)))


def _texture(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """A smooth random texture (luma) with some fine grain: enough detail that each
    simulcast layer's encoder uses its bitrate, not so much that it drops frames."""
    from scipy.ndimage import zoom

    coarse = rng.random((height // 32 + 2, width // 32 + 2))
    smooth = zoom(coarse, 32, order=3)[:height, :width]
    grain = rng.random((height, width)) * 0.04
    return (30 + 190 * np.clip(0.9 * smooth + grain, 0, 1)).astype(np.float32)


def video_frames(width: int = WIDTH, height: int = HEIGHT, fps: int = FPS) -> int:
    """Frames in one loop."""
    return round(LOOP_S * fps)


def write_video(path: Path, width: int = WIDTH, height: int = HEIGHT, fps: int = FPS) -> None:
    """One loop of the coded video as Y4M (I420) at ``path``."""
    count = video_frames(width, height, fps)
    rng = np.random.default_rng(17)
    travel = 8 * count  # pixels the texture moves over the loop
    texture = _texture(rng, height, width + travel)
    rows = max(2, round(BAR_ROWS * height / HEIGHT))
    edges = np.linspace(0, width, CELLS + 1).round().astype(int)
    chroma = np.full((height // 2) * (width // 2), 128, dtype=np.uint8).tobytes()
    tmp = path.with_name(path.name + ".part")
    with tmp.open("wb") as out:
        out.write(f"YUV4MPEG2 W{width} H{height} F{fps}:1 Ip A1:1 C420jpeg\n".encode())
        for n in range(count):
            shift = 8 * n
            luma = texture[:, shift : shift + width].copy()
            bits = code_bits(np.array(n))
            for k in range(CELLS):
                luma[:rows, edges[k] : edges[k + 1]] = 235.0 if bits[k] else 16.0
            out.write(b"FRAME\n")
            out.write(np.clip(luma, 0, 255).astype(np.uint8).tobytes())
            out.write(chroma)
            out.write(chroma)
    tmp.replace(path)


def make_clip(directory: Path, offset_ms: float = 0.0) -> tuple[Path, Path, dict]:
    """The clip in ``directory`` (made once per version and offset, kept there): the WAV,
    the Y4M and the codes document (also written beside the WAV as ``.codes.json``)."""
    directory.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(
        json.dumps([CLIP_VERSION, offset_ms, LOOP_S, WIDTH, HEIGHT, FPS, SPEECH_TEXT]).encode()
    ).hexdigest()[:12]
    wav = directory / f"quality-{key}.wav"
    codes_file = directory / f"quality-{key}.wav.codes.json"
    y4m = directory / f"quality-v{CLIP_VERSION}-{WIDTH}x{HEIGHT}-{FPS}.y4m"
    if not wav.is_file() or not codes_file.is_file():
        samples, codes = audio_clip(offset_ms)
        part = wav.with_name(wav.name + ".part")
        write_wav(part, samples, RATE)
        part.replace(wav)
        codes_file.write_text(json.dumps(codes, indent=1) + "\n", encoding="utf-8")
    if not y4m.is_file():
        write_video(y4m)
    codes = json.loads(codes_file.read_text(encoding="utf-8"))
    return wav, y4m, codes
