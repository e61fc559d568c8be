"""The comparison table of a sweep (from sweep.json): one row per point (and stream)."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.text import Text

from latlab.report.fit import FitTable, emit
from latlab.report.quality import comparison_table as quality_comparison_table
from latlab.report.quality import matrix_tables as quality_matrix_tables
from latlab.report.sfu_load import (
    knee_lines,
    sfu_comparison_table,
    sfu_load_table,
    sfu_repeat_table,
)
from latlab.stitch.kinds import ordered

LABELS = {"jitterbuffer": "jitter\nbuffer", "sink-wait": "sink\nwait"}
RESIDUAL_PARTS = ("capture", "transit", "receiver")
RESIDUAL_HEADERS = ["Δt_c", "t_p", "r\np50", "r\np99", *(f"r in\n{p}" for p in RESIDUAL_PARTS)]
RESIDUAL_CAPTION = (
    "; Δt_c: configured latency, t_p: period, r = e2e - Δt_c - t_p; r in PART: mean time "
    "in that part minus what the configuration implies (capture: t_p, transit: 0, "
    "receiver: Δt_c), adding up to the mean r"
)


def _ms(value: float | None) -> str:
    """Milliseconds to 10 µs (sweep.json keeps every figure at full precision)."""
    return "-" if value is None else f"{value:.2f}"


def _kinds(points: list[dict[str, Any]]) -> list[str]:
    """Segment kinds seen in any point, in path order (capture first, playout last)."""
    seen = {k for p in points for s in p.get("streams", []) for k in s.get("kinds", {})}
    return ordered(seen)


def _has_residual(points: list[dict[str, Any]]) -> bool:
    """Whether any point's streams carry the residual (configured latency and period set)."""
    return any("residual" in s for p in points for s in p.get("streams", []))


def _residual_cells(stream: dict[str, Any]) -> list[str]:
    """Δt_c, t_p, r at p50 and p99, and the mean residual per part of the path."""
    res = stream.get("residual")
    if not res:
        return ["-"] * (4 + len(RESIDUAL_PARTS))
    excess = res.get("excess_ms", {})
    cells = [_ms(res.get("configured_latency_ms")), _ms(res.get("period_ms"))]
    cells += [_ms(res.get("p50_ms")), _ms(res.get("p99_ms"))]
    return cells + [_ms(excess.get(part)) for part in RESIDUAL_PARTS]


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


INTERVAL_COLUMNS = {  # browser stages per stats interval shown in a sweep, p50
    "jitter_buffer": "jitter\nbuffer",
    "jitter_buffer_target": "JB\ntarget",
    "capture_to_playout": "capture\n->playout",
}


def _interval_names(points: list[dict[str, Any]]) -> list[str]:
    seen = {n for p in points for s in p.get("streams", []) for n in s.get("intervals", {})}
    return [n for n in INTERVAL_COLUMNS if n in seen]


def _sweep_table(title: str, padding: int | tuple[int, int, int, int] = (0, 1, 0, 0)) -> FitTable:
    """A sweep comparison table: title on the left, a rule under the headers, no edges."""
    return FitTable(
        title=title,
        title_justify="left",
        header_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        padding=padding,
        show_edge=False,
    )


def _comparison_drops(cpu: bool, residual: bool, intervals: list[str]) -> list[int | None]:
    """Drop ranks of the columns after e2e, lost and late: the residual's parts first,
    then Δt_c and t_p, CPU, the browser's intervals, r p50/p99; never the kinds."""
    ranks: list[int | None] = [3] if cpu else []
    if residual:
        ranks += [2, 2, 5, 5, *([1] * len(RESIDUAL_PARTS))]
    return ranks + [4] * len(intervals)


def comparison_table(sweep: dict[str, Any]) -> FitTable:
    """Per point: its values, end-to-end p50/p99, p50 per segment kind, lost, late (, CPU)."""
    points = sweep.get("points", [])
    names = list(sweep.get("sweep", {}).get("variables", {}))
    kinds = _kinds(points)
    many_streams = any(len(p.get("streams", [])) > 1 for p in points)
    with_cpu = any(p.get("resources") for p in points)
    with_residual = _has_residual(points)
    intervals = _interval_names(points)
    failed = sum(p["status"] != "ok" for p in points)
    title = (
        f"sweep {sweep.get('name', '')}  ·  {sweep.get('sweep', {}).get('mode', '')}  ·  "
        f"{len(points)} points" + (f", {failed} not ok" if failed else "")
    )
    table = _sweep_table(title, padding=0)
    headers = [*names, *(["stream"] if many_streams else []), "e2e\np50", "e2e\np99"]
    headers += [*(LABELS.get(k, k) for k in kinds), "lost", "late"]
    headers += ["CPU\n%"] if with_cpu else []
    headers += RESIDUAL_HEADERS if with_residual else []
    headers += [INTERVAL_COLUMNS[n] for n in intervals]
    rows = [
        r
        for p in points
        for r in _rows(p, names, kinds, many_streams, with_cpu, with_residual, intervals)
    ]
    named = len(names) + int(many_streams)  # the variables' values and the stream id
    fixed = 2 + len(kinds) + 2  # e2e p50, p99, the kinds, lost, late
    drops = [None] * (named + fixed) + _comparison_drops(with_cpu, with_residual, intervals)
    for i, header in enumerate(headers):  # wide enough that no figure is cut
        cells = [len(row[i]) if isinstance(row[i], str) else row[i].cell_len for row in rows]
        width = max([len(word) for word in header.split()] + cells)
        table.add_column(header, justify="right", min_width=width, fold=i < named, drop=drops[i])
    for row in rows:
        table.add_row(*row)
    table.caption = (
        "ms; each segment kind: p50 of the time a unit spent in all segments of that kind"
        + ("; CPU: all processes, % of one core" if with_cpu else "")
        + (RESIDUAL_CAPTION if with_residual else "")
        + (
            "; jitter buffer, JB target, capture->playout: the browser's stats, p50 over its "
            "200 ms intervals"
            if intervals
            else ""
        )
    )
    table.caption_justify = "left"
    return table


def _rows(
    point: dict[str, Any],
    names: list[str],
    kinds: list[str],
    many: bool,
    cpu: bool,
    residual: bool = False,
    intervals: tuple[str, ...] | list[str] = (),
) -> list[list[Any]]:
    values = [_value(point.get("values", {}).get(n, "")) for n in names]
    streams = point.get("streams", [])
    if point["status"] != "ok" or not streams:
        width = 2 + len(kinds) + 2 + int(many) + int(cpu)
        width += (len(RESIDUAL_HEADERS) if residual else 0) + len(intervals)
        status = point["status"] if point["status"] != "ok" else "no streams"
        return [[*values, Text(status, style="bold red"), *([""] * (width - 1))]]
    rows = []
    for stream in streams:
        e2e = stream["end_to_end"]
        row: list[Any] = [*values, *([stream["id"]] if many else [])]
        row += [Text(_ms(e2e["p50_ms"]), style="bold"), _ms(e2e["p99_ms"])]
        row += [_ms(stream["kinds"].get(k, {}).get("p50_ms")) for k in kinds]
        row += [str(stream["lost"]), str(stream["late"])]
        if cpu:
            resources = point.get("resources") or {}
            total = resources.get("cpu_pct_total")
            row.append("-" if total is None else f"{total:.1f}")
        if residual:
            row += _residual_cells(stream)
        row += [_ms(stream.get("intervals", {}).get(n, {}).get("p50_ms")) for n in intervals]
        rows.append(row)
    return rows


def render_sweep(sweep: dict[str, Any], console: Console, *, wide: bool = False) -> None:
    """Print the comparison table, then one line per point that is not ok.

    A sweep whose streams pass an encoder and a decoder gets the phase table
    (encode, transport, decode, total) after the per-kind one. The tables fit the
    console (low-priority columns left out, names folded); ``wide``: every column.
    """
    sfu = sfu_load_table(sweep)
    streams = any(point.get("streams") for point in sweep.get("points", []))
    if streams or sfu is None:  # a load through an SFU alone has no stream to compare
        emit(console, comparison_table(sweep), wide=wide)
    if has_codec_phases(sweep):
        emit(console, phase_comparison_table(sweep), wide=wide)
    if any(point.get("blackbox") for point in sweep.get("points", [])):
        emit(console, black_box_comparison_table(sweep), wide=wide)
    if sfu is not None:
        emit(console, sfu, wide=wide)
        for line in knee_lines(sweep):
            console.print(line, highlight=False, markup=False, soft_wrap=True)
    for table in (sfu_comparison_table(sweep), sfu_repeat_table(sweep)):
        if table is not None:
            emit(console, table, wide=wide)
    for table in quality_matrix_tables(sweep):
        emit(console, table, wide=wide)
    side_by_side = quality_comparison_table(sweep)
    if side_by_side is not None:
        emit(console, side_by_side, wide=wide)
    for point in sweep.get("points", []):
        if point["status"] != "ok":
            error = point.get("error") or ""
            console.print(
                f"{point['name']}: {point['status']}" + (f": {error}" if error else ""),
                highlight=False,
                markup=False,
                soft_wrap=True,
            )


PHASE_COLUMNS = ("encode", "transport", "decode")
PHASE_P99 = tuple(f"{phase}\np99" for phase in PHASE_COLUMNS)


def has_codec_phases(sweep: dict[str, Any]) -> bool:
    """Whether the sweep's streams went through an encoder and a decoder (video, Opus, ...)."""
    return any(
        "encode" in s.get("phases", {}) or "decode" in s.get("phases", {})
        for p in sweep.get("points", [])
        for s in p.get("streams", [])
    )


def _tsbpd(point: dict[str, Any]) -> float | None:
    """The TSBPD prediction at the receiving end of the point's SRT connection."""
    entries = point.get("srt") or []
    receiving = [e for e in entries if e.get("factory") == "srtsrc"] or entries
    values = [e.get("tsbpd_prediction_ms") for e in receiving]
    return next((v for v in values if v is not None), None)


def _srt_counts(point: dict[str, Any]) -> list[str]:
    entries = point.get("srt") or []
    if not entries:
        return ["-", "-", "-"]
    total = {
        key: sum(e.get(key) or 0 for e in entries)
        for key in ("packets_retransmitted", "packets_received_lost", "packets_sent_dropped")
    }
    return [str(v) for v in total.values()]


def phase_comparison_table(sweep: dict[str, Any]) -> FitTable:
    """Per point: encode, transport (with the TSBPD prediction), decode and total, p50/p99."""
    points = sweep.get("points", [])
    names = list(sweep.get("sweep", {}).get("variables", {}))
    many_streams = any(len(p.get("streams", [])) > 1 for p in points)
    table = _sweep_table(f"sweep {sweep.get('name', '')}  ·  {len(points)} points")
    headers = [*names, *(["stream"] if many_streams else [])]
    for phase in PHASE_COLUMNS:
        headers += [f"{phase}\np50", f"{phase}\np99"] + (["TSBPD"] if phase == "transport" else [])
    headers += [
        "total\np50",
        "total\np99",
        "lost",
        "late",
        "SRT\nretrans",
        "SRT\nlost",
        "SRT\ndropped",
    ]
    named = len(names) + int(many_streams)
    for i, header in enumerate(headers):  # SRT counts go first, then the phases' p99
        drop = 1 if header.startswith("SRT") else 2 if header in PHASE_P99 else None
        table.add_column(header, justify="right", fold=i < named, drop=drop)
    for point in points:
        values = [_value(point.get("values", {}).get(n, "")) for n in names]
        streams = point.get("streams", [])
        if point["status"] != "ok" or not streams:
            status = point["status"] if point["status"] != "ok" else "no streams"
            table.add_row(
                *values, Text(status, style="bold red"), *[""] * (len(headers) - len(values) - 1)
            )
            continue
        for stream in streams:
            row: list[Any] = [*values, *([stream["id"]] if many_streams else [])]
            phases = stream.get("phases", {})
            for phase in PHASE_COLUMNS:
                figures = phases.get(phase, {})
                row += [_ms(figures.get("p50_ms")), _ms(figures.get("p99_ms"))]
                if phase == "transport":
                    row.append(_ms(_tsbpd(point)))
            e2e = stream["end_to_end"]
            row += [Text(_ms(e2e["p50_ms"]), style="bold"), _ms(e2e["p99_ms"])]
            row += [str(stream["lost"]), str(stream["late"]), *_srt_counts(point)]
            table.add_row(*row)
    table.caption = (
        "ms, per unit (frame); transport: from the network sink's send to the unit whole at "
        "the receiver; TSBPD: SRT latency + RTT/2 at connection; lost: units that left the "
        "sender and never arrived; late: arrived but did not reach the end; SRT: packets"
    )
    table.caption_justify = "left"
    return table


BLACK_BOX_COLUMNS = (
    ("black box", "black_box"),
    ("probed", "probed"),
    ("unexplained", "unexplained"),
)


def black_box_comparison_table(sweep: dict[str, Any]) -> FitTable:
    """Per point: codes found, and black box, probed (same units) and unexplained p50/p99."""
    names = list(sweep.get("sweep", {}).get("variables", {}))
    table = _sweep_table("black box (time-coded signal) per point")
    headers = [*names, "codes\nfound"]
    for label, _ in BLACK_BOX_COLUMNS:
        headers += [f"{label}\np50", f"{label}\np99"]
    for i, header in enumerate(headers):  # the p99 columns give way first
        table.add_column(
            header, justify="right", fold=i < len(names), drop=1 if "p99" in header else None
        )
    for point in sweep.get("points", []):
        values = [_value(point.get("values", {}).get(n, "")) for n in names]
        figures = point.get("blackbox")
        if not figures or figures.get("error"):
            problem = (figures or {}).get("error") or point["status"]
            table.add_row(
                *values, Text(problem, style="red"), *[""] * (len(headers) - len(values) - 1)
            )
            continue
        codes = figures["codes"]
        row: list[Any] = [*values, f"{codes['found']}/{codes['injected']}"]
        for _, key in BLACK_BOX_COLUMNS:
            row += [_ms(figures[key].get("p50_ms")), _ms(figures[key].get("p99_ms"))]
        table.add_row(*row)
    table.caption = (
        "ms, per code; probed: the unit that carried each code; unexplained = black box - probed"
    )
    table.caption_justify = "left"
    return table
