"""Terminal tables of a run summary (rich); each fits the console (latlab.report.fit)."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.text import Text

from latlab.report.blackbox import ROWS as BLACK_BOX_ROWS
from latlab.report.blackbox import estimated_segments, span_text
from latlab.report.fit import FitTable, emit
from latlab.report.forwarding import cost_views, forwarding_views
from latlab.report.quality import run_quality_views

COLUMNS = (
    ("p50", "p50_ms"),
    ("p90", "p90_ms"),
    ("p99", "p99_ms"),
    ("p99.9", "p999_ms"),
    ("max", "max_ms"),
    ("mean", "mean_ms"),
)
DROP = {"p99.9": 1, "max": 2, "mean": 3}  # left out first, second, third in a narrow console


def _titled(title: str) -> FitTable:
    """A table with its title on the left and bold headers (every table here)."""
    return FitTable(title=title, title_justify="left", header_style="bold")


def _figure_columns(table: FitTable, labels: tuple[str, ...] | list[str]) -> None:
    """Right-aligned ``LABEL ms`` columns; p99.9, max and mean give way in a narrow console."""
    for label in labels:
        table.add_column(f"{label} ms", justify="right", drop=DROP.get(label))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _short(probe: str, previous: str | None) -> str:
    """A probe name without the process part when it is the same as the previous one's."""
    if previous and probe.split("/", 1)[0] == previous.split("/", 1)[0]:
        return probe.split("/", 1)[1]
    return probe


def stage_table(stream: dict[str, Any]) -> FitTable:
    """The per-stage table of one stream: one row per segment, then end to end."""
    title = (
        f"{stream['id']}  ·  {stream['complete_units']}/{stream['units']} units of "
        f"{stream['unit']}  ·  lost {stream['lost']}  late {stream['late']}  "
        f"dup {stream['duplicated']}  reordered {stream.get('reordered', 0)}"
    )
    table = _titled(title)
    table.add_column("#", justify="right")
    table.add_column("stage (to probe)", fold=True)
    table.add_column("kind", fold=True)
    _figure_columns(table, [label for label, _ in COLUMNS])
    held = stream["media"] == "video"
    if held:
        table.add_column("frames\nheld", justify="right")
    clocks = "clock_err_ms" in stream["end_to_end"]  # a run of several clock domains
    if clocks:
        table.add_column("±clk ms", justify="right")
    previous = None
    for i, seg in enumerate(stream["segments"], 1):
        cells = [str(i), _short(seg["to"], previous), seg["kind"]]
        cells += [_ms(seg[key]) for _, key in COLUMNS]
        if held:
            frames = seg.get("frames_held_p50")
            cells.append("-" if frames is None else f"{frames:.1f}")
        if clocks:
            cells.append(clock_cell(seg))
        table.add_row(*cells)
        previous = seg["to"]
    e2e = stream["end_to_end"]
    flagged = [seg["to"] for seg in stream["segments"] if seg.get("clock_flagged")]
    negative = [seg for seg in stream["segments"] if seg.get("negative")]
    notes = [f"{seg['negative']} units reached {seg['to']} before {seg['from']}"
             for seg in negative]  # fmt: skip
    if flagged:
        notes.append(
            "! the clock error is more than 10 % of the p50: "
            + ", ".join(_short(name, None) for name in flagged)
        )
    if notes:
        table.caption = "; ".join(notes)
    table.add_section()
    table.add_row(
        "",
        Text("end to end", style="bold"),
        "",
        *(Text(_ms(e2e[key]), style="bold") for _, key in COLUMNS),
        *([""] if held else []),
        *([clock_cell(e2e)] if clocks else []),
    )
    return table


def clock_cell(figures: dict[str, Any]) -> str:
    """A span's clock error: blank inside one clock domain, ``?`` where a domain could not
    be aligned, ``!`` after it when it is more than the flagged share of the p50."""
    if not figures.get("cross_domain"):
        return ""
    err = figures.get("clock_err_ms")
    flag = " !" if figures.get("clock_flagged") else ""
    return f"?{flag}" if err is None else f"{err:.3f}{flag}"


def clock_lines(clocks: dict[str, Any]) -> list[str]:
    """How each clock domain was aligned with the reference (summary.json ``clocks``)."""
    lines = [f"clocks: reference {clocks['reference']}; figures between domains carry ±clk"]
    for name, domain in clocks.get("domains", {}).items():
        if name == clocks["reference"]:
            continue
        if not domain.get("aligned"):
            lines.append(f"  {name}: not aligned ({domain.get('why')})")
            continue
        lines.append(
            f"  {name}: {domain['source']}, offset {domain['offset_ms']:+.3f} ms, drift "
            f"{domain['drift_ppm']:+.3f} ppm, error ±{domain['err_ms']:.3f} ms over "
            f"{domain['span_s']:g} s ({domain['used']} of {domain['samples']} samples)"
        )
    return lines


PHASE_ORDER = ("encode", "mux", "sender", "transport", "buffer", "decode", "render", "receiver")


def phase_table(stream: dict[str, Any]) -> FitTable:
    """The phases people budget for (encode, transport, decode, ...), per unit."""
    table = _titled("phases (each a distribution of the units' own sums)")
    table.add_column("phase", fold=True)
    table.add_column("from → to", fold=True)
    _figure_columns(table, [label for label, _ in COLUMNS])
    phases = stream.get("phases", {})
    for name in [p for p in PHASE_ORDER if p in phases]:
        phase = phases[name]
        span = f"{phase['from'].rsplit('/', 1)[-1]} → {phase['to'].rsplit('/', 1)[-1]}"
        table.add_row(name, span, *(_ms(phase[key]) for _, key in COLUMNS))
    table.add_section()
    e2e = stream["end_to_end"]
    table.add_row(Text("total", style="bold"), "", *(_ms(e2e[key]) for _, key in COLUMNS))
    return table


INTERVAL_LABELS = {
    "pacer": "pacer (sender)",
    "jitter_buffer": "jitter buffer",
    "jitter_buffer_target": "jitter buffer target",
    "jitter_buffer_minimum": "jitter buffer minimum",
    "processing": "receipt -> decoded (incl. jitter buffer)",
    "playout": "playout",
    "concealed_pct": "concealed samples %",
    "decode": "decode, per frame (video)",
    "frozen": "frozen, per interval (video)",
    "capture_to_playout": "capture -> playout (abs-capture-time)",
}


def interval_table(intervals: dict[str, Any]) -> FitTable:
    """A browser's own stages, one value per 200 ms stats interval, as distributions."""
    title = "in the browser, per stats interval (getStats every 200 ms)"
    return _stage_distributions(title, "intervals", INTERVAL_LABELS, intervals)


def _stage_distributions(
    title: str,
    counted: str,
    labels: dict[str, str],
    figures: dict[str, Any],
    row_header: str = "stage",
) -> FitTable:
    """One row per stage present in ``figures``: how many values, p50 … mean in ms."""
    table = _titled(title)
    table.add_column(row_header, fold=True)
    table.add_column(counted, justify="right")
    _figure_columns(table, ("p50", "p90", "p99", "max", "mean"))
    for name, label in labels.items():
        if name in figures:
            f = figures[name]
            cells = [_ms(f[k]) for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms", "mean_ms")]
            table.add_row(label, str(int(f["count"])), *cells)
    return table


def blackbox_view(summary: dict[str, Any]) -> Group:
    """Black box, probed and unexplained end to end side by side, with the codes' count."""
    box = summary["blackbox"]
    if box.get("error"):
        return Group(Text(f"black box: {box['error']}", style="yellow"))
    codes = box["codes"]
    title = (
        f"black box (time-coded signal): {codes['found']} of {codes['injected']} codes found, "
        f"{codes['matched_to_units']} matched to probed units"
    )
    labels = {key: label for label, key in BLACK_BOX_ROWS}
    parts: list[Any] = [_stage_distributions(title, "codes", labels, box, row_header="")]
    if span_text(box):
        parts.append(Text(span_text(box), style="dim"))
    estimated = estimated_segments(summary, box.get("stream"))
    if estimated:
        parts.append(
            Text(
                "the probed end to end includes estimated device time: "
                + ", ".join(estimated)
                + "; the black box runs from where the signal went in to where it was "
                "recorded (a device's driver latencies are outside it)",
                style="dim",
            )
        )
    xruns = box.get("xruns") or {}
    if xruns.get("at_s"):
        when = ", ".join(f"{t:g}" for t in xruns["at_s"])
        parts.append(
            Text(
                f"JACK xruns: {xruns['inject']} at the injecting device, {xruns['record']} at "
                f"the recording one (at {when} s): an xrun may move how the device's cycles "
                "line up with its clients, which the probes cannot see",
                style="yellow",
            )
        )
    return Group(*parts)


FUNCTION_LABELS = {
    "capture_interval": "capture interval (sender)",
    "audio_processing": "audio processing (sender)",
    "encode": "encode, per packet (sender)",
    "decode": "decode, per packet",
    "neteq_get_audio": "NetEq GetAudio (decode, conceal, stretch)",
    "mix": "mix",
    "render_pull": "render pull (mix + resample)",
    "playout_interval": "playout interval",
}


def function_table(functions: dict[str, Any]) -> FitTable:
    """The browsers' audio functions, one value per call, from Chromium's own trace."""
    title = "in the browser, per call (Chromium's trace of its audio functions)"
    return _stage_distributions(title, "calls", FUNCTION_LABELS, functions)


ADAPTING_LABELS = {
    "target": "jitter-buffer target ms",
    "send_rate": "send rate kbit/s",
    "latency": "latency (e2e p50) ms",
}


def adaptation_table(steps: list[dict[str, Any]]) -> FitTable:
    """Per scheduled link change and series: the level before and after, and when it settled."""
    table = _titled("adaptation to link changes (per stats interval)")
    for label in ("at s", "link", "set", "series", "before", "after", "settled after s"):
        named = label in ("link", "set", "series")
        table.add_column(label, justify="left" if named else "right", fold=named)
    for step in steps:
        change = ", ".join(f"{k}={v}" for k, v in step["set"].items())
        for key, label in ADAPTING_LABELS.items():
            series = step.get(key)
            if series is None:
                continue
            settled = series["settled_s"]
            if not series["changed"]:
                how = "unchanged"
            else:
                how = "-" if settled is None else f"{settled:.1f}"
            table.add_row(
                f"{step['at_s']:g}", step["link"], change, label,
                _ms(series["before"]), _ms(series["after"]), how,
            )  # fmt: skip
    return table


SRT_DROP = {"Mbit/s p50": 1, "sent": 2, "received": 2, "RTT max ms": 3, "RTT at conn. ms": 4}


def srt_table(entries: list[dict[str, Any]]) -> FitTable:
    """Per SRT connection end: latency, RTT, the TSBPD prediction and packet counts."""
    table = _titled("SRT (srtsink/srtsrc stats, read about every 100 ms)")
    table.add_column("element", fold=True)
    labels = ("latency ms", "RTT at conn. ms", "RTT p50 ms", "RTT max ms", "TSBPD ms")
    labels += ("sent", "received", "lost", "retrans.", "dropped", "Mbit/s p50")
    for label in labels:
        table.add_column(label, justify="right", drop=SRT_DROP.get(label))
    for e in entries:
        lost = (e.get("packets_sent_lost") or 0) + (e.get("packets_received_lost") or 0)
        rate = e.get("send_rate_mbps_p50") or e.get("receive_rate_mbps_p50")
        table.add_row(
            f"{e['process']}/{e['element']}",
            _ms(e.get("negotiated_latency_ms")),
            _ms(e.get("rtt_at_connection_ms")),
            _ms(e.get("rtt_p50_ms")),
            _ms(e.get("rtt_max_ms")),
            _ms(e.get("tsbpd_prediction_ms")),
            str(e.get("packets_sent") or 0),
            str(e.get("packets_received") or 0),
            str(lost),
            str(e.get("packets_retransmitted") or 0),
            str(e.get("packets_sent_dropped") or 0),
            "-" if rate is None else f"{rate:.3f}",
        )
    table.caption = (
        "TSBPD: negotiated latency + half the RTT at connection, what TSBPD makes of a "
        "packet's transport; compare the transport phase"
    )
    table.caption_justify = "left"
    return table


def frame_table(frames: dict[str, Any]) -> FitTable:
    """I- versus P-frames: size, transport time and the wait from first to last byte."""
    table = _titled("frame types")
    table.add_column("type", fold=True)
    table.add_column("frames", justify="right")
    table.add_column("bytes p50", justify="right")
    table.add_column("bytes max", justify="right", drop=1)
    measures = [
        m
        for m in ("transport", "link_crossing", "link_drain", "first_to_last_byte")
        if any(m in entry for entry in frames.values())
    ]
    for measure in measures:
        label = measure.replace("_", " ")
        table.add_column(f"{label} p50 ms", justify="right")
        table.add_column(f"{label} p99 ms", justify="right", drop=2)
    for kind, entry in frames.items():
        cells = [kind, str(entry["frames"]), f"{entry['bytes_p50']:.0f}", str(entry["bytes_max"])]
        for measure in measures:
            stats = entry.get(measure, {})
            cells += [_ms(stats.get("p50_ms")), _ms(stats.get("p99_ms"))]
        table.add_row(*cells)
    return table


def distribution(segment: dict[str, Any], label: str) -> FitTable:
    """A bucket table like the WebRTC study's: value range, count, share."""
    table = _titled(label)
    table.add_column("ms", justify="right")
    table.add_column("count", justify="right")
    table.add_column("share", justify="right")
    table.add_column("")
    for row in segment["histogram"]:
        bar = "█" * round(row["share"] * 40)
        upper = f"{row['hi_ms']:g}]" if row.get("open") else f"{row['hi_ms']:g})"
        table.add_row(
            f"[{row['lo_ms']:g}, {upper}", str(row["count"]), f"{row['share'] * 100:.1f}%", bar
        )
    return table


def cadence_table(stream: dict[str, Any]) -> FitTable:
    """Intervals between consecutive buffers at each probe of the path."""
    table = _titled("cadence (interval between buffers)")
    table.add_column("probe", fold=True)
    for label in ("p50 ms", "p99 ms", "max ms", "irregular"):
        table.add_column(label, justify="right")
    for probe, c in stream["cadence"].items():
        table.add_row(
            probe, _ms(c["p50_ms"]), _ms(c["p99_ms"]), _ms(c["max_ms"]), str(c["irregular"])
        )
    return table


def where_time_goes(stream: dict[str, Any], top: int = 4) -> str:
    """The segments that carry most of the mean end-to-end latency, with their shares."""
    total = stream["end_to_end"]["mean_ms"]
    if not total or total <= 0:
        return ""
    ranked = sorted(stream["segments"], key=lambda s: s["mean_ms"] or 0.0, reverse=True)
    return " · ".join(
        f"{seg['to'].rsplit('/', 1)[-1]} ({seg['kind']}) {seg['mean_ms'] / total:.0%}"
        for seg in ranked[:top]
        if seg["mean_ms"] and seg["mean_ms"] / total >= 0.01
    )


def time_by_kind(stream: dict[str, Any]) -> str:
    """Each segment kind's p50 (of the units' own sums over that kind's segments), in path
    order: ``capture 27.4 · sink-wait 7.2 · network 0.03 · ...`` (ms)."""
    kinds = stream.get("kinds") or {}
    return " · ".join(f"{kind} {_ms(figures['p50_ms'])}" for kind, figures in kinds.items())


def resources_table(resources: dict[str, Any]) -> FitTable:
    """CPU, context switches and threads per process, and the system's rates."""
    system = resources.get("system") or {}
    title = "resources (measured window)"
    if system:
        title += (
            f"  ·  system: {system['interrupts_per_s']:.0f} interrupts/s, "
            f"{system['context_switches_per_s']:.0f} context switches/s"
        )
    table = _titled(title)
    table.add_column("process", fold=True)
    table.add_column("user % mean", justify="right")
    table.add_column("max", justify="right", drop=1, called="user % max")
    table.add_column("sys % mean", justify="right")
    table.add_column("max", justify="right", drop=1, called="sys % max")
    for label in ("vol cs/s", "invol cs/s", "threads"):
        table.add_column(label, justify="right")
    for name, p in resources.get("processes", {}).items():
        table.add_row(
            name,
            f"{p['cpu_user_pct_mean']:.1f}",
            f"{p['cpu_user_pct_max']:.0f}",
            f"{p['cpu_system_pct_mean']:.1f}",
            f"{p['cpu_system_pct_max']:.0f}",
            f"{p['voluntary_ctxt_per_s']:.0f}",
            f"{p['involuntary_ctxt_per_s']:.0f}",
            str(p["threads_max"]),
        )
    return table


def link_traffic_table(link: dict[str, Any]) -> FitTable:
    """What crossed an emulated link, per direction, protocol and port, busiest first."""
    table = _titled(f"link {link['log']}: traffic")
    for label in ("direction", "protocol", "port"):
        table.add_column(label, fold=True)
    for label in ("packets/s", "kbit/s", "delivered", "lost", "queue drops"):
        table.add_column(label, justify="right")
    for row in link["traffic"]:
        port = "" if row["port"] is None else str(row["port"])
        if row.get("service"):
            port += f" ({row['service']})"
        table.add_row(row["direction"], row["protocol"], port, f"{row['packets_per_s']:.1f}",
                      f"{row['kbit_per_s']:.1f}", str(row["delivered"]), str(row["dropped_loss"]),
                      str(row["dropped_queue"]))  # fmt: skip
    return table


def render_summary(
    summary: dict[str, Any],
    console: Console,
    *,
    distributions: bool = False,
    cadence: bool = False,
    wide: bool = False,
) -> None:
    """Print the per-stage table of every stream, and optionally more detail.

    The tables fit the console's width (low-priority columns left out, names folded);
    ``wide``: every column, at the tables' natural width (docs/reports.md).
    """
    if not summary["streams"]:
        console.print("[yellow]no stream found in the traces[/yellow]")
    for stream in summary["streams"]:
        emit(console, Group(*_stream_parts(stream, distributions, cadence)), wide=wide)
    for part in _run_parts(summary):
        emit(console, part, wide=wide)


def _stream_parts(stream: dict[str, Any], distributions: bool, cadence: bool) -> list[Any]:
    """The tables and lines of one stream, in the order they are printed."""
    parts: list[Any] = [stage_table(stream)]
    shares = where_time_goes(stream)
    if shares:
        parts.append(Text(f"where the time goes (share of the mean): {shares}"))
    by_kind = time_by_kind(stream)
    if by_kind:
        parts.append(Text(f"by kind (p50 ms of each unit's sum): {by_kind}"))
    if stream.get("phases"):
        parts.append(phase_table(stream))
    if stream.get("frames"):
        parts.append(frame_table(stream["frames"]))
    if stream.get("intervals"):
        parts.append(interval_table(stream["intervals"]))
    if stream.get("browser_functions"):
        parts.append(function_table(stream["browser_functions"]))
    if stream.get("adaptation"):
        parts.append(adaptation_table(stream["adaptation"]))
    handoffs = stream["thread_handoffs"]
    parts.append(
        Text(
            f"thread hand-offs per journey: mean {handoffs['mean']:.2f}, max {handoffs['max']}",
            style="dim",
        )
    )
    if cadence:
        parts.append(cadence_table(stream))
    if distributions:
        for seg in [*stream["segments"], stream["end_to_end"]]:
            parts.append(distribution(seg, f"{seg['from']} → {seg['to']}"))
    return parts


def _run_parts(summary: dict[str, Any]) -> list[Any]:
    """What is printed after the streams: configured latency, black box, resources, ..."""
    parts: list[Any] = []
    if summary.get("clocks"):
        parts += [Text(line) for line in clock_lines(summary["clocks"])]
    latencies = [
        f"{t['process']} {t['configured_latency_ms']:.3f} ms"
        for t in summary.get("traces", [])
        if t.get("configured_latency_ms") is not None
    ]
    if latencies:
        parts.append(
            Text(
                "pipeline latency configured (each clocked sink renders a buffer this long "
                f"after its running time): {', '.join(latencies)}"
            )
        )
    if summary.get("blackbox"):
        parts.append(blackbox_view(summary))
    if summary.get("forwarding"):
        parts += forwarding_views(summary["forwarding"])
    if summary.get("quality"):
        parts += run_quality_views(summary["quality"])
    if summary.get("costs"):
        parts += cost_views(summary["costs"])
    if summary.get("resources", {}).get("processes"):
        parts.append(resources_table(summary["resources"]))
    for link in summary.get("links", []):
        parts.append(link_traffic_table(link))
        parts += [f"[yellow]{link['log']}: {note}[/yellow]" for note in link.get("problems", [])]
    if summary.get("srt"):
        parts.append(srt_table(summary["srt"]))
    for trace in summary.get("traces", []):
        notes = list(trace["problems"])
        if trace["dropped_events"]:
            notes.append(f"{trace['dropped_events']} events dropped by the tracer")
        parts += [f"[yellow]{trace['file']}: {note}[/yellow]" for note in notes]
    return parts
