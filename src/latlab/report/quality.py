"""The quality matrix of a sweep (rooms with ``quality = true``, docs/sfu.md): one table per
SFU, a row per cell (the point's values but the SFU and the repeat) and subscriber, as the
SFU study showed it; and the SFUs side by side, per cell, against the run-to-run spread.

Read from sweep.json's ``quality`` figures (``analysis.sweep_figures.quality_figures``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.text import Text

from latlab.report.fit import FitTable

REPEAT_VARIABLES = ("repeat", "rep", "run")
SFU_VARIABLES = ("sfu", "server")
# the schedule steps of a cell: the first is the step down, the second the step up
DOWN, UP = 0, 1


@dataclass(frozen=True)
class Cell:
    """One point's figures for one subscriber."""

    sfu: str
    condition: str
    repeat: str
    subscriber: str
    point: str
    directory: str
    figures: dict[str, Any]


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _sfu_of(point: dict[str, Any]) -> str:
    sfus = point.get("sfus") or {}
    kinds = sorted({str(s.get("server")) for s in sfus.values() if s.get("server")})
    if kinds:
        return "+".join(kinds)
    values = point.get("values", {})
    return next((_text(values[k]) for k in SFU_VARIABLES if k in values), "-")


def cells(sweep: dict[str, Any]) -> list[Cell]:
    """Every finished point with quality figures, one cell per subscriber."""
    out = []
    for point in sweep.get("points", []):
        quality = point.get("quality")
        if point.get("status") != "ok" or not quality or quality.get("error"):
            continue
        values = point.get("values", {})
        condition = ", ".join(
            f"{k}={_text(v)}"
            for k, v in values.items()
            if k not in REPEAT_VARIABLES and k not in SFU_VARIABLES
        )
        repeat = next((_text(values[k]) for k in REPEAT_VARIABLES if k in values), "1")
        for name, figures in quality.get("subscribers", {}).items():
            out.append(Cell(_sfu_of(point), condition or "-", repeat, name, point["name"],
                            point.get("dir", ""), figures))  # fmt: skip
    return out


def has_quality(sweep: dict[str, Any]) -> bool:
    """Whether any point of the sweep measured quality."""
    return any(p.get("quality") for p in sweep.get("points", []))


def _step_ms(figures: dict[str, Any], index: int, what: str) -> float | None:
    steps = figures.get("adaptation") or []
    return steps[index].get(f"{what}_ms") if len(steps) > index else None


# name, header, unit text, picker, higher is better (None: not compared), format
Metric = tuple[str, str, Callable[[dict[str, Any]], Any], bool | None, str]
METRICS: tuple[Metric, ...] = (
    ("visqol", "MOS\nViSQOL", lambda f: f.get("visqol"), True, "{:.2f}"),
    ("pesq", "MOS\nPESQ", lambda f: f.get("pesq"), True, "{:.2f}"),
    ("height", "height\np50", lambda f: f.get("height_p50"), True, "{:.0f}"),
    ("fps", "fps\np50", lambda f: f.get("fps_p50"), True, "{:.0f}"),
    ("kbps", "kbit/s\np50", lambda f: f.get("kbps_p50"), None, "{:.0f}"),
    ("freezes", "freezes", lambda f: f.get("freezes"), False, "{:.0f}"),
    ("switches", "layer\nswitches", lambda f: f.get("layer_switches"), None, "{:.0f}"),
    ("down", "layer\ndown ms", lambda f: _step_ms(f, DOWN, "layer"), False, "{:.0f}"),
    ("up", "layer\nup ms", lambda f: _step_ms(f, UP, "layer"), False, "{:.0f}"),
    ("rate_down", "bitrate\ndown ms", lambda f: _step_ms(f, DOWN, "bitrate_kbps"), False,
     "{:.0f}"),
    ("rate_up", "bitrate\nup ms", lambda f: _step_ms(f, UP, "bitrate_kbps"), False, "{:.0f}"),
    ("av", "A/V added\nms p50", lambda f: f.get("av_added_ms"), None, "{:+.1f}"),
)  # fmt: skip
COMPARED = ("visqol", "fps", "down", "up", "av")


def _value(metric: Metric, figures: dict[str, Any]) -> float | None:
    value = metric[2](figures)
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _cell_text(metric: Metric, figures: dict[str, Any]) -> str:
    value = _value(metric, figures)
    return "-" if value is None else metric[4].format(value)


def mos_style(mos: float | None) -> str:
    """A cell's colour by MOS, as the study coloured its matrix: red (1) to green (4.5)."""
    if mos is None:
        return "dim"
    return "bold green" if mos >= 4.0 else "green" if mos >= 3.5 else "yellow" if mos >= 3.0 \
        else "red"  # fmt: skip


def matrix_tables(sweep: dict[str, Any]) -> list[FitTable]:
    """One table per SFU: a row per cell (and repeat, subscriber)."""
    found = cells(sweep)
    with_pesq = any(c.figures.get("pesq") is not None for c in found)
    metrics = [m for m in METRICS if with_pesq or m[0] != "pesq"]
    tables = []
    for sfu in sorted({c.sfu for c in found}):
        mine = [c for c in found if c.sfu == sfu]
        many = len({c.subscriber for c in mine}) > 1
        table = FitTable(title=f"quality matrix · {sfu}", title_justify="left",
                         header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False,
                         padding=(0, 1, 0, 0), show_edge=False)  # fmt: skip
        table.add_column("cell", fold=True)
        table.add_column("rep", justify="right", drop=3)
        if many:
            table.add_column("subscriber", fold=True)
        for metric in metrics:
            drop = None if metric[0] in ("visqol", "down", "up", "av") else 2
            table.add_column(metric[1], justify="right", drop=drop)
        for c in mine:
            mos = _value(metrics[0], c.figures)
            row: list[Any] = [c.condition, c.repeat, *([c.subscriber] if many else [])]
            row += [Text(_cell_text(metrics[0], c.figures), style=mos_style(mos))]
            row += [_cell_text(m, c.figures) for m in metrics[1:]]
            table.add_row(*row)
        table.caption = (
            "MOS: of the steady part before the first link step (ViSQOL v3 speech"
            + ("; PESQ P.862 wideband" if with_pesq else "; PESQ not installed")
            + "); height, fps, kbit/s, freezes: the subscriber's getStats over that part; "
            "layer switches: the capture's layer per 100 ms over the run; down/up ms: from "
            "the link's step (its log) until the layer (capture) or the received bitrate "
            "settled; A/V added: the subscriber's skew less the publisher's capture skew "
            "(+: audio ahead)"
        )
        table.caption_justify = "left"
        tables.append(table)
    return tables


def spreads(found: list[Cell]) -> dict[tuple[str, str], float]:
    """Per (SFU, metric): the widest range of the metric over a cell's repeats (the
    run-to-run spread); absent where no cell ran twice."""
    out: dict[tuple[str, str], float] = {}
    groups: dict[tuple[str, str, str], list[Cell]] = {}
    for c in found:
        groups.setdefault((c.sfu, c.condition, c.subscriber), []).append(c)
    for (sfu, _, _), group in groups.items():
        if len({c.repeat for c in group}) < 2:
            continue
        for metric in METRICS:
            values = [v for c in group if (v := _value(metric, c.figures)) is not None]
            if len(values) >= 2:
                key = (sfu, metric[0])
                out[key] = max(out.get(key, 0.0), max(values) - min(values))
    return out


def comparison(sweep: dict[str, Any]) -> list[dict[str, Any]]:
    """Per cell and compared metric with two or more SFUs: each SFU's mean over repeats,
    the better one, and whether the difference is beyond the spread (the larger of the
    two SFUs' spreads; unknown without repeats)."""
    found = cells(sweep)
    sfus = sorted({c.sfu for c in found})
    if len(sfus) < 2:
        return []
    spread = spreads(found)
    rows = []
    conditions = list(dict.fromkeys((c.condition, c.subscriber) for c in found))
    for condition, subscriber in conditions:
        for metric in (m for m in METRICS if m[0] in COMPARED):
            means: dict[str, float] = {}
            for sfu in sfus:
                values = [v for c in found if c.sfu == sfu and c.condition == condition
                          and c.subscriber == subscriber
                          and (v := _value(metric, c.figures)) is not None]  # fmt: skip
                if values:
                    means[sfu] = sum(values) / len(values)
            if len(means) < 2:
                continue
            higher = metric[3]
            ranked = sorted(means, key=lambda s: means[s], reverse=bool(higher))
            best, other = ranked[0], ranked[1]
            diff = abs(means[best] - means[other])
            limits = [spread[(s, metric[0])] for s in (best, other) if (s, metric[0]) in spread]
            limit = max(limits) if limits else None
            rows.append({
                "condition": condition, "subscriber": subscriber, "metric": metric[0],
                "label": metric[1].replace("\n", " "), "means": means,
                "better": best if higher is not None and diff > 0 else None,
                "difference": diff, "spread": limit,
                "beyond": None if limit is None else diff > limit,
            })  # fmt: skip
    return rows


def comparison_table(sweep: dict[str, Any]) -> FitTable | None:
    """The SFUs side by side per cell: MOS, frame rate, adaptation down and up, A/V."""
    rows = comparison(sweep)
    if not rows:
        return None
    sfus = sorted({s for r in rows for s in r["means"]})
    table = FitTable(title="quality matrix · SFUs side by side", title_justify="left",
                     header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False,
                     padding=(0, 1, 0, 0), show_edge=False)  # fmt: skip
    table.add_column("cell", fold=True)
    table.add_column("metric", fold=True)
    for sfu in sfus:
        table.add_column(sfu, justify="right")
    table.add_column("better", fold=True)
    table.add_column("Δ", justify="right")
    table.add_column("spread", justify="right", drop=2)
    table.add_column("verdict", fold=True)
    for r in rows:
        fmt = next(m[4] for m in METRICS if m[0] == r["metric"])
        verdict = ("beyond spread" if r["beyond"] else "within spread") \
            if r["beyond"] is not None else "no repeats"  # fmt: skip
        table.add_row(
            r["condition"], r["label"],
            *[fmt.format(r["means"][s]) if s in r["means"] else "-" for s in sfus],
            r["better"] or "-", f"{r['difference']:.2f}",
            "-" if r["spread"] is None else f"{r['spread']:.2f}",
            Text(verdict, style="bold" if r["beyond"] else ""),
        )  # fmt: skip
    table.caption = (
        "per cell, each SFU's mean over its repeats; spread: the widest range one cell's "
        "repeats took (the larger of the two SFUs'); beyond spread: the difference exceeds it"
    )
    table.caption_justify = "left"
    return table


# --- HTML ---------------------------------------------------------------------------------


def mos_colour(mos: float | None) -> str:
    """Background colour of a MOS cell: red at 1, yellow at 3, green at 4.5."""
    if mos is None:
        return "#eeeeee"
    x = min(max((mos - 1.0) / 3.5, 0.0), 1.0)
    red = round(230 - 120 * max(0.0, x - 0.57) / 0.43) if x > 0.57 else 230
    green = round(90 + 130 * min(1.0, x / 0.57))
    return f"#{red:02x}{green:02x}78"


def matrix_html(sweep: dict[str, Any], esc: Callable[[str], str]) -> str:
    """The matrix as HTML: one table per SFU, cells coloured by MOS, each row linking to
    its point's report (``points/NAME/report.html``); then the side-by-side table."""
    found = cells(sweep)
    if not found:
        return ""
    with_pesq = any(c.figures.get("pesq") is not None for c in found)
    metrics = [m for m in METRICS if with_pesq or m[0] != "pesq"]
    parts = ['<section id="quality-matrix"><h2>Quality matrix</h2>']
    for sfu in sorted({c.sfu for c in found}):
        head = "<th>cell</th><th>rep</th><th>subscriber</th>" + "".join(
            f"<th>{esc(m[1].replace(chr(10), ' '))}</th>" for m in metrics
        )
        rows = []
        for c in (c for c in found if c.sfu == sfu):
            mos = _value(metrics[0], c.figures)
            link = f"{c.directory}/report.html"
            cellsx = [f'<td><a href="{esc(link)}">{esc(c.condition)}</a></td>',
                      f"<td>{esc(c.repeat)}</td>", f"<td>{esc(c.subscriber)}</td>",
                      f'<td style="background:{mos_colour(mos)}">'
                      f"{esc(_cell_text(metrics[0], c.figures))}</td>"]  # fmt: skip
            for m in metrics[1:]:
                style = (f' style="background:{mos_colour(_value(m, c.figures))}"'
                         if m[0] == "pesq" else "")  # fmt: skip
                cellsx.append(f"<td{style}>{esc(_cell_text(m, c.figures))}</td>")
            rows.append(f"<tr>{''.join(cellsx)}</tr>")
        parts.append(
            f'<h3>{esc(sfu)}</h3><table class="stats"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>"
        )
    compared = comparison(sweep)
    if compared:
        sfus = sorted({s for r in compared for s in r["means"]})
        head = "<th>cell</th><th>metric</th>" + "".join(f"<th>{esc(s)}</th>" for s in sfus)
        head += "<th>better</th><th>Δ</th><th>spread</th><th>verdict</th>"
        rows = []
        for r in compared:
            verdict = ("beyond spread" if r["beyond"] else "within spread") \
                if r["beyond"] is not None else "no repeats"  # fmt: skip
            means = "".join(f"<td>{r['means'][s]:.2f}</td>" if s in r["means"] else "<td>-</td>"
                            for s in sfus)  # fmt: skip
            spread = "-" if r["spread"] is None else f"{r['spread']:.2f}"
            rows.append(
                f"<tr><td>{esc(r['condition'])}</td><td>{esc(r['label'])}</td>{means}"
                f"<td>{esc(r['better'] or '-')}</td><td>{r['difference']:.2f}</td>"
                f"<td>{spread}</td><td>{esc(verdict)}</td></tr>"
            )
        parts.append(
            '<h3>SFUs side by side</h3><table class="stats"><thead><tr>'
            f"{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        )
    parts.append(
        "<p>MOS of the steady part before the first link step; cells coloured by MOS (red 1, "
        "yellow 3, green 4.5); each cell opens its run's report. Spread: the widest range "
        "one cell's repeats took.</p></section>"
    )
    return "".join(parts)


# --- one run ------------------------------------------------------------------------------


def _ms(figures: dict[str, Any] | None, key: str = "p50_ms") -> str:
    value = (figures or {}).get(key)
    return "-" if not isinstance(value, int | float) else f"{value:+.1f}"


def _adapt_text(step: dict[str, Any]) -> str:
    parts = []
    for what, label in (("bitrate_kbps", "bitrate"), ("layer", "layer"), ("height", "height")):
        found = step.get(what) or {}
        if found.get("changed"):
            settled = found.get("settled_ms")
            when = "did not settle" if settled is None else f"{settled:.0f} ms"
            parts.append(f"{label} {found['before']:g} -> {found['after']:g} in {when}")
    setting = ", ".join(f"{k}={v}" for k, v in (step.get("set") or {}).items())
    return f"at {step.get('at_s', 0):g} s ({setting}): " + ("; ".join(parts) or "no change")


def run_quality_views(quality: dict[str, Any]) -> list[Any]:
    """A quality room's figures in a run's terminal report: a table with a row per
    subscriber, then a line per adaptation step and problem."""
    if quality.get("error"):
        return [Text(f"quality: {quality['error']}", style="red")]
    table = FitTable(title=f"quality of room {quality.get('room')} (publisher "
                     f"{quality.get('publisher')}; capture skew "
                     f"{_ms(quality.get('capture_skew_ms'))} ms)", title_justify="left",
                     header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False,
                     padding=(0, 1, 0, 0), show_edge=False)  # fmt: skip
    headers = ("subscriber", "MOS\nViSQOL", "MOS\nPESQ", "height\np50", "fps\np50",
               "freezes", "layer\nswitches", "A/V skew\nms p50", "added\nms p50",
               "video\ndelay ms", "audio\ndelay ms")  # fmt: skip
    for i, header in enumerate(headers):
        drop = 3 if i == 2 else 2 if i in (9, 10) else None  # PESQ, then the delays
        table.add_column(header, justify="left" if i == 0 else "right", fold=i == 0, drop=drop)
    notes = []
    for name, sub in quality.get("subscribers", {}).items():
        mos, video = sub.get("mos") or {}, sub.get("video") or {}
        sync = sub.get("av_sync") or {}

        def num(value: Any, fmt: str = "{:.2f}") -> str:
            return "-" if not isinstance(value, int | float) else fmt.format(value)

        table.add_row(
            name, Text(num(mos.get("visqol")), style=mos_style(mos.get("visqol"))),
            num(mos.get("pesq")), num(video.get("height_p50"), "{:.0f}"),
            num(video.get("fps_p50"), "{:.0f}"), num(video.get("freezes"), "{:.0f}"),
            num((sub.get("layers") or {}).get("switches"), "{:.0f}"),
            _ms(sync.get("skew_ms")), _ms(sync.get("added_ms")),
            _ms(sync.get("video_delay_ms")).lstrip("+"),
            _ms(sync.get("audio_delay_ms")).lstrip("+"),
        )  # fmt: skip
        notes += [f"{name}: {_adapt_text(step)}" for step in sub.get("adaptation", [])]
        notes += [f"{name}: {problem}" for problem in sub.get("problems", [])]
        if mos.get("pesq_note"):
            notes.append(mos["pesq_note"])
    table.caption = (
        "MOS of the steady part (before the first step of its links); A/V: + audio ahead; "
        "added: its skew less the publisher's capture skew"
    )
    table.caption_justify = "left"
    return [table, *(Text(note) for note in dict.fromkeys(notes))]


def run_quality_html(quality: dict[str, Any], esc: Callable[[str], str]) -> str:
    """A quality room's figures in a run's HTML report."""
    if quality.get("error"):
        return f'<section id="quality"><h2>Quality</h2><p>{esc(quality["error"])}</p></section>'
    rows, notes = [], []
    for name, sub in quality.get("subscribers", {}).items():
        mos, video = sub.get("mos") or {}, sub.get("video") or {}
        sync = sub.get("av_sync") or {}
        visqol = mos.get("visqol")
        cells = [
            esc(name), f'<span style="background:{mos_colour(visqol)}">{esc(str(visqol))}</span>',
            esc(str(mos.get("pesq"))), esc(str(video.get("height_p50"))),
            esc(str(video.get("fps_p50"))), esc(str(video.get("freezes"))),
            esc(str((sub.get("layers") or {}).get("switches"))),
            esc(_ms(sync.get("skew_ms"))), esc(_ms(sync.get("added_ms"))),
        ]  # fmt: skip
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        notes += [f"{name}: {_adapt_text(step)}" for step in sub.get("adaptation", [])]
        notes += [f"{name}: {problem}" for problem in sub.get("problems", [])]
    head = "".join(f"<th>{h}</th>" for h in ("subscriber", "MOS ViSQOL", "MOS PESQ",
                   "height", "fps", "freezes", "layer switches", "A/V skew ms",
                   "added ms"))  # fmt: skip
    items = "".join(f"<li>{esc(n)}</li>" for n in dict.fromkeys(notes))
    return (
        f'<section id="quality"><h2>Quality (room {esc(str(quality.get("room")))})</h2>'
        f'<table class="stats"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody>'
        f"</table><ul>{items}</ul></section>"
    )
