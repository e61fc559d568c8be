"""What ``latlab signal generate`` and ``latlab signal decode`` do, apart from option parsing."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from latlab.signal.errors import SignalError
from latlab.signal.timecode import (
    COHERENCE_THRESHOLD,
    DESIGN,
    SYNC_THRESHOLD,
    Decoded,
    decode,
    generate,
)
from latlab.signal.wavio import Audio, read_wav, resample, write_wav

DESIGN_NAME = "latlab.timecode/1"
CLIPPED_SHARE = 0.001
"""Share of samples at full scale from which a recording counts as clipped."""
SILENT_DBFS = -80.0
COMMON_RATES = (8000, 16000, 22050, 24000, 32000, 44100, 48000)
_RATE_PROBE_S = 20.0


@dataclass(frozen=True)
class GenerateOptions:
    """Options of ``latlab signal generate``."""

    out: Path
    duration_s: float = 60.0
    rate: int = 48000
    interval_ms: float = 200.0
    start_ms: float = 500.0
    level_dbfs: float = -20.0
    mix: Path | None = None
    mix_db: float = 0.0


def codes_path(out: Path) -> Path:
    """Where ``generate`` writes the codes of ``out``: OUT.codes.json beside it."""
    return out.with_name(out.name + ".codes.json")


def _mix_material(path: Path, rate: int, length: int, gain_db: float) -> np.ndarray:
    """The mix file as mono at ``rate``, looped or cut to ``length`` samples, with a gain."""
    audio = read_wav(path)
    if len(audio.samples) == 0:
        raise SignalError(f"{path}: no samples to mix")
    material = resample(audio.samples, audio.rate, rate)
    material = np.resize(material, length)
    return (material * 10.0 ** (gain_db / 20.0)).astype(np.float32)


def generate_file(options: GenerateOptions) -> dict[str, Any]:
    """Write the test audio and OUT.codes.json; return the codes document."""
    if options.duration_s <= 0 or options.rate < 8000:
        raise SignalError(f"{options.out}: --duration must be positive, --rate at least 8000 Hz")
    try:
        signal = generate(
            options.duration_s,
            options.rate,
            options.interval_ms / 1000.0,
            options.start_ms / 1000.0,
            options.level_dbfs,
        )
    except SignalError as exc:
        raise SignalError(f"{options.out}: {exc}") from None
    if len(signal.index) == 0:
        raise SignalError(
            f"{options.out}: no code fits in {options.duration_s} s after {options.start_ms} ms"
        )
    samples = signal.samples
    if options.mix is not None:
        samples = samples + _mix_material(options.mix, options.rate, len(samples), options.mix_db)
    peak = float(np.max(np.abs(samples)))
    if peak > 1.0:
        raise SignalError(
            f"{options.out}: the mix peaks at {20 * np.log10(peak):+.1f} dBFS and would clip; "
            "lower --level-dbfs or --mix-db"
        )
    write_wav(options.out, samples, options.rate)
    document = {
        "design": DESIGN_NAME,
        "sample_rate": options.rate,
        "interval_s": options.interval_ms / 1000.0,
        "codes": [
            {"index": int(i), "time_s": round(float(t), 9)}
            for i, t in zip(signal.index, signal.time_s, strict=True)
        ],
    }
    codes_path(options.out).write_text(json.dumps(document, indent=1) + "\n")
    return document


def _peak_dbfs(samples: np.ndarray) -> float:
    peak = float(np.max(np.abs(samples))) if len(samples) else 0.0
    return 20 * np.log10(peak) if peak > 0 else float("-inf")


def _rate_that_fits(audio: Audio) -> int | None:
    """Another common rate at which the first seconds hold codes (a mislabelled file)."""
    head = audio.samples[: int(_RATE_PROBE_S * audio.rate)]
    for rate in COMMON_RATES:
        if rate != audio.rate and len(decode(head, rate).index) >= 2:
            return rate
    return None


def _check_recording(audio: Audio) -> None:
    """Silent or too short recordings: a SignalError saying what was found."""
    path, seconds = audio.path, audio.duration_s
    if seconds < DESIGN.frame_s:
        raise SignalError(
            f"{path}: {seconds:.3f} s of audio is shorter than one code "
            f"({DESIGN.frame_s * 1000:.0f} ms)"
        )
    peak = _peak_dbfs(audio.samples)
    if peak < SILENT_DBFS:
        level = "all samples are zero" if peak == float("-inf") else f"peak {peak:.1f} dBFS"
        raise SignalError(f"{path}: silent ({level} over {seconds:.1f} s); no codes to find")


def _no_codes_message(audio: Audio, found: Decoded) -> str:
    message = (
        f"{audio.path}: no time codes in {audio.duration_s:.1f} s of audio "
        f"at {audio.rate} Hz (peak {_peak_dbfs(audio.samples):.1f} dBFS; best sync correlation "
        f"{found.best_sync:.2f} at {found.best_sync_s:.3f} s, a code needs {SYNC_THRESHOLD:.2f}, "
        f"a valid CRC and bit coherence {COHERENCE_THRESHOLD:.1f}; "
        f"{found.candidates} candidates, {found.crc_valid} with a valid CRC)"
    )
    fitting = _rate_that_fits(audio)
    if fitting is not None:
        message += f"; the codes fit {fitting} Hz: the file's sample rate is wrong"
    return message


def load_codes(path: Path) -> dict[int, float]:
    """Index -> reference instant (s) from a ``generate`` codes file; malformed: SignalError."""
    if not path.is_file():
        raise SignalError(f"{path}: no such file")
    try:
        document = json.loads(path.read_text())
        return {int(code["index"]): float(code["time_s"]) for code in document["codes"]}
    except (ValueError, KeyError, TypeError) as exc:
        raise SignalError(f"{path}: not a codes file from latlab signal generate ({exc})") from None


def _latency_summary(latency_ms: list[float]) -> dict[str, Any]:
    values = np.asarray(latency_ms)
    summary: dict[str, Any] = {"matched": len(values)}
    for name, q in (("min", 0), ("p50", 50), ("p99", 99), ("max", 100)):
        summary[name] = round(float(np.percentile(values, q)), 6) if len(values) else None
    return summary


def decode_file(
    path: Path, channel: int = 0, allow_clipped: bool = False, codes_file: Path | None = None
) -> dict[str, Any]:
    """The codes in a recording as the ``decode --json`` document; bad input is a SignalError.

    With ``codes_file`` (what ``generate`` wrote), each code also gets its latency:
    recording time minus the sent time of the same index."""
    sent = load_codes(codes_file) if codes_file is not None else None
    audio = read_wav(path, channel)
    _check_recording(audio)
    found = decode(audio.samples, audio.rate)
    if len(found.index) == 0:
        raise SignalError(_no_codes_message(audio, found))
    if audio.full_scale_fraction >= CLIPPED_SHARE and not allow_clipped:
        raise SignalError(
            f"{path}: clipped ({audio.full_scale_fraction * 100:.2f} % of samples at full scale); "
            f"{len(found.index)} codes found anyway, pass --allow-clipped to use them"
        )
    codes = [
        {
            "index": int(i),
            "time_s": round(float(t), 9),
            "confidence": round(float(c), 4),
            "inferred": bool(inf),
        }
        for i, t, c, inf in zip(
            found.index, found.time_s, found.confidence, found.inferred, strict=True
        )
    ]
    document: dict[str, Any] = {
        "design": DESIGN_NAME,
        "file": str(path),
        "sample_rate": audio.rate,
        "duration_s": round(audio.duration_s, 6),
        "codes": codes,
    }
    if sent is not None:
        for code in codes:
            if code["index"] in sent:
                code["latency_ms"] = round((code["time_s"] - sent[code["index"]]) * 1000, 6)
        latencies = [code["latency_ms"] for code in codes if "latency_ms" in code]
        document["codes_file"] = str(codes_file)
        document["sent_codes"] = len(sent)
        document["latency_ms"] = _latency_summary(latencies)
    return document


def render_decoded(document: dict[str, Any], console: Console, rows: int = 40) -> None:
    """The codes as a table (the first and last ones when there are many)."""
    codes = document["codes"]
    inferred = sum(code["inferred"] for code in codes)
    console.print(
        f"{document['file']}: {len(codes)} codes in {document['duration_s']:.1f} s "
        f"at {document['sample_rate']} Hz ({inferred} inferred from their neighbours)",
        highlight=False,
        markup=False,
    )
    latency = document.get("latency_ms")
    if latency is not None and latency["p50"] is not None:
        console.print(
            f"latency against {document['codes_file']}: p50 {latency['p50']:.3f} ms, p99 "
            f"{latency['p99']:.3f} ms, min {latency['min']:.3f}, max {latency['max']:.3f} "
            f"({latency['matched']} of {document['sent_codes']} sent codes)",
            highlight=False,
            markup=False,
        )
    columns = ["index", "time s", "confidence", "read"]
    if latency is not None:
        columns.append("latency ms")
    table = Table(header_style="bold", box=None)
    for column in columns:
        table.add_column(column, justify="right")
    shown = codes if len(codes) <= rows else [*codes[: rows - 5], None, *codes[-5:]]
    for code in shown:
        if code is None:
            table.add_row("…", f"{len(codes) - rows + 5} more (--json)", *[""] * (len(columns) - 2))
            continue
        cells = [
            str(code["index"]),
            f"{code['time_s']:.6f}",
            f"{code['confidence']:.3f}",
            "sequence" if code["inferred"] else "bits",
        ]
        if latency is not None:
            cells.append(f"{code['latency_ms']:.3f}" if "latency_ms" in code else "")
        table.add_row(*cells)
    console.print(table)


def _finite_or_none(value: float) -> float | None:
    return round(float(value), 6) if np.isfinite(value) else None


def compare_files(
    sent_path: Path,
    received_path: Path,
    *,
    window_ms: float = 1000.0,
    hop_ms: float = 250.0,
    max_latency_ms: float = 2000.0,
    with_pesq: bool = False,
) -> dict[str, Any]:
    """Latency over time, disruptions and PESQ of a recording against what was sent."""
    from latlab.signal.correlate import compare

    sent, received = read_wav(sent_path), read_wav(received_path)
    for audio in (sent, received):
        _check_recording(audio)
    try:
        result = compare(
            sent.samples,
            sent.rate,
            received.samples,
            received.rate,
            window_s=window_ms / 1000,
            hop_s=hop_ms / 1000,
            max_latency_s=max_latency_ms / 1000,
            with_pesq=with_pesq,
        )
    except SignalError as exc:
        raise SignalError(f"{received_path}: against {sent_path}: {exc}") from None
    series = result.latency
    finite = series.latency_s[np.isfinite(series.latency_s)] * 1000
    events = result.disruptions
    return {
        "sent": str(sent_path),
        "received": str(received_path),
        "sample_rate": result.rate,
        "latency_ms": {
            "windows": len(series.time_s),
            "matched": len(finite),
            **{
                name: _finite_or_none(np.percentile(finite, q)) if len(finite) else None
                for name, q in (("min", 0), ("p50", 50), ("p99", 99), ("max", 100))
            },
        },
        "series": [
            {
                "time_s": round(float(t), 6),
                "latency_ms": _finite_or_none(lat * 1000),
                "correlation": round(float(c), 4),
            }
            for t, lat, c in zip(series.time_s, series.latency_s, series.correlation, strict=True)
        ],
        "disruptions": {
            "counts": events.counts(),
            "events": [
                {
                    "kind": str(k),
                    "start_s": round(float(s), 4),
                    "duration_s": round(float(d), 4),
                    "size_ms": _finite_or_none(z),
                }
                for k, s, d, z in zip(
                    events.kind, events.start_s, events.duration_s, events.size_ms, strict=True
                )
            ],
        },
        "pesq": result.pesq,
    }


def render_comparison(document: dict[str, Any], console: Console, rows: int = 30) -> None:
    """Latency summary, disruption counts and events, PESQ."""
    lat = document["latency_ms"]
    if lat["p50"] is None:
        console.print(f"{document['received']}: no window matched", highlight=False)
    else:
        console.print(
            f"{document['received']} against {document['sent']}: latency p50 {lat['p50']:.3f} ms"
            f", p99 {lat['p99']:.3f} ms, min {lat['min']:.3f}, max {lat['max']:.3f} "
            f"({lat['matched']}/{lat['windows']} windows matched)",
            highlight=False,
            markup=False,
        )
    counts = document["disruptions"]["counts"]
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none"
    console.print(f"disruptions: {summary}", highlight=False, markup=False)
    events = document["disruptions"]["events"]
    if events:
        table = Table(header_style="bold", box=None)
        for column in ("kind", "start s", "duration ms", "step ms"):
            table.add_column(column, justify="right")
        for event in events[:rows]:
            size = "" if event["size_ms"] is None else f"{event['size_ms']:+.3f}"
            table.add_row(
                event["kind"], f"{event['start_s']:.3f}", f"{event['duration_s'] * 1000:.0f}", size
            )
        if len(events) > rows:
            table.add_row("…", f"{len(events) - rows} more (--json)", "", "")
        console.print(table)
    if document["pesq"] is not None:
        scores = document["pesq"]
        console.print(
            f"PESQ MOS-LQO: narrowband {scores['nb']:.2f}, wideband {scores['wb']:.2f} "
            f"(mean of {len(scores['nb_chunks'])} chunks of 10 s)",
            highlight=False,
        )
