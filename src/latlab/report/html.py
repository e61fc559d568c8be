"""``latlab report DIR --html [OUT]``: one self-contained HTML file with plots and findings.

The page needs nothing from the network: the data is a JSON block and the charts are
drawn by a small canvas renderer (``assets/report.js``) inlined into the file. Every
text that came from traces (element, probe, process names) is escaped here with
:func:`html.escape`, and the renderer only ever sets text (``textContent``,
``fillText``), never markup.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from latlab import __version__
from latlab.analysis.segments import StreamAnalysis
from latlab.errors import UserInputError
from latlab.report import findings as fnd
from latlab.report.blackbox import ROWS as BLACKBOX_ROWS
from latlab.report.blackbox import span_text
from latlab.report.findings import Finding
from latlab.report.html_composite import composite
from latlab.report.html_data import CHARTS, MAX_POINTS, run_model, to_json
from latlab.report.html_sweep import sweep_model
from latlab.report.quality import has_quality, matrix_html, run_quality_html
from latlab.report.table import COLUMNS, clock_cell
from latlab.rundir import REPORT_FILE

ASSETS = Path(__file__).with_name("assets")
STAT_COLUMNS = COLUMNS  # the terminal table's statistics, in its order


def esc(value: Any) -> str:
    """Text for HTML content and attribute values."""
    return html.escape(str(value), quote=True)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _asset(name: str) -> str:
    return (ASSETS / name).read_text()


def figure(anchor: str, chart: str, source: str, caption: str, tall: bool = False) -> str:
    """A chart placeholder the renderer fills: its id is the anchor findings link to.

    ``caption`` is HTML: escape (``esc``) any part of it that came from traces.
    """
    size = " tall" if tall else ""
    return (
        f'<figure class="chart{size}" id="{esc(anchor)}" data-chart="{esc(chart)}" '
        f'data-src="{esc(source)}"><figcaption>{caption}</figcaption>'
        f'<canvas role="img" aria-label="{esc(chart)}"></canvas></figure>'
    )


def findings_list(groups: Iterable[tuple[str, Sequence[Finding]]]) -> str:
    """The findings, grouped per stream, each linking to its plot."""
    items = []
    for label, found in groups:
        if not found:
            continue
        head = f'<h3>{esc(label)}</h3><ul class="findings">' if label else '<ul class="findings">'
        rows = [
            f'<li class="finding {esc(f.topic)}{" notable" if f.notable else ""}">'
            f'<span class="topic">{esc(f.topic)}</span> {esc(f.text)} '
            f'<a class="see" href="#{esc(f.anchor)}">see plot</a></li>'
            for f in found
        ]
        items.append(head + "".join(rows) + "</ul>")
    body = "".join(items) or "<p>No findings.</p>"
    return f'<section id="findings"><h2>Findings</h2>{body}</section>'


def stage_table(stream: dict[str, Any]) -> str:
    """The per-stage table of one stream (as in the terminal report)."""
    head = "".join(f"<th>{label} ms</th>" for label, _ in STAT_COLUMNS)
    clocks = "clock_err_ms" in stream["end_to_end"]  # a run of several clock domains
    if clocks:
        head += '<th title="clock error of a span between clock domains">±clk ms</th>'
    rows = []
    previous = None
    for i, seg in enumerate(stream["segments"], 1):
        name = seg["to"]
        if previous and name.split("/", 1)[0] == previous.split("/", 1)[0]:
            name = name.split("/", 1)[1]
        cells = "".join(f"<td>{_ms(seg.get(key))}</td>" for _, key in STAT_COLUMNS)
        if clocks:
            cells += f"<td>{esc(clock_cell(seg))}</td>"
        rows.append(f"<tr><td>{i}</td><td>{esc(name)}</td><td>{esc(seg['kind'])}</td>{cells}</tr>")
        previous = seg["to"]
    e2e = stream["end_to_end"]
    cells = "".join(f"<td>{_ms(e2e.get(key))}</td>" for _, key in STAT_COLUMNS)
    if clocks:
        cells += f"<td>{esc(clock_cell(e2e))}</td>"
    rows.append(f'<tr class="total"><td></td><td>end to end</td><td></td>{cells}</tr>')
    return (
        '<table class="stats"><thead><tr><th>#</th><th>stage (to probe)</th><th>kind</th>'
        f"{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def stream_charts(model: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(anchor suffix, chart, caption) of each chart a stream has data for, in page order."""
    tail = model["tail"] or {}
    captions = {
        "waterfall": "Journey waterfall: each segment's p50 (dark) and p99 (light) along the "
        "path, each starting where the previous one's ended.",
        "tail": "Where the tail comes from: mean time per segment of the median units "
        f"({tail.get('median_units')} units between p45 and p55) and of the worst 1 % "
        f"({tail.get('worst_units')} units) by end to end.",
        "scatter": "Each unit's time at every probe relative to the first probe, over the run; "
        "one colour per probe (repeated lines are doubled periods).",
        "e2e": "End-to-end latency of every complete unit over the run.",
        "loss": "Units that did not complete their journey (lost or late), per "
        f"{model['loss']['bin_s']:g} s.",
        "conceal": "Concealed samples, % of received, per browser stats interval.",
        "jb": "Browser jitter buffer: delay and target per stats interval.",
    }
    return [(suffix, key, captions[suffix]) for suffix, key in CHARTS.items() if model.get(key)]


def stream_section(index: int, model: dict[str, Any], stream: dict[str, Any]) -> str:
    """Tables and charts of one stream."""
    p = model["anchor"]
    src = f"streams.{index}"
    title = (
        f"{esc(model['id'])} <small>{model['complete_units']}/{model['units']} units of "
        f"{model['unit_ms']:g} ms · lost {stream['lost']} · late {stream['late']}</small>"
    )
    parts = [f'<section class="stream" id="{esc(p)}"><h2>{title}</h2>', stage_table(stream)]
    for name, chart, caption in stream_charts(model):
        parts.append(
            figure(f"{p}-{name}", chart, f"{src}.{chart}", caption, tall=chart == "scatter")
        )
    dists = [
        figure(f"{p}-dist-{k}", "distribution", f"{src}.distributions.{k}",
               f"{esc(d['title'])} <small>({esc(d['kind'])})</small>")
        for k, d in enumerate(model["distributions"])
    ]  # fmt: skip
    if dists:
        parts.append(
            f'<h3 id="{esc(p)}-dists">Distributions per segment: histogram (bars over the bulk; '
            "outliers in the end bins) and CDF (line)</h3>"
            f'<div class="grid">{"".join(dists)}</div>'
        )
    parts.append("</section>")
    return "".join(parts)


BLACKBOX_COLUMNS = (("p50", "p50_ms"), ("p90", "p90_ms"), ("p99", "p99_ms"), ("max", "max_ms"),
                    ("mean", "mean_ms"))  # fmt: skip


def blackbox_table(box: dict[str, Any]) -> str:
    """Black box, probed (same units) and unexplained end to end: codes and statistics."""
    head = "".join(f"<th>{label} ms</th>" for label, _ in BLACKBOX_COLUMNS)
    rows = []
    for label, key in BLACKBOX_ROWS:
        stats = box[key]
        cells = "".join(f"<td>{_ms(stats.get(k))}</td>" for _, k in BLACKBOX_COLUMNS)
        rows.append(f"<tr><td>{esc(label)}</td><td>{esc(stats.get('count', 0))}</td>{cells}</tr>")
    return (
        '<table class="stats blackbox"><thead><tr><th></th><th>codes</th>'
        f"{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def blackbox_section(model: dict[str, Any], box: dict[str, Any]) -> str:
    """The section "Black box vs probes": the time-coded signal's end to end beside the probes'.

    ``model``: html_data.blackbox_model; ``box``: summary.json ``blackbox``.
    """
    a = model["anchor"]
    head = f'<section id="{esc(a)}"><h2>Black box vs probes</h2>'
    if model.get("error"):
        return f'{head}<p class="error">black box: {esc(model["error"])}</p></section>'
    codes = model["codes"]
    stream = model["stream"]
    if model["stream_index"] is not None:
        stream = f'<a href="#s{model["stream_index"]}">{esc(stream)}</a>'
    else:
        stream = esc(stream or "none found")
    intro = (
        f"<p>{esc(codes['found'])} of {esc(codes['injected'])} time codes injected found in the "
        f"recording ({esc(codes['inferred'])} inferred), {esc(codes['matched_to_units'])} "
        f"matched to probed units of the carrier stream {stream}. "
        "Unexplained = black box - probed, per code: positive is time the probes did not see, "
        f"negative is time they counted that the signal did not spend.</p>"
        f"<p><small>{esc(box.get('method', ''))}"
        f"{'; ' + esc(span_text(box)) if span_text(box) else ''}</small></p>"
    )
    parts = [head, intro, blackbox_table(box)]
    if model["estimated"]:
        parts.append(
            "<p>The probed end to end includes estimated (modelled, not observed) device time: "
            f"{esc(', '.join(model['estimated']))}.</p>"
        )
    if not model["parquet"]:
        parts.append("<p>No per-code figures: blackbox.parquet could not be read.</p>")
    if model["series"]:
        parts.append(figure(f"{a}-series", "blackbox", "blackbox.series",
                            "Per code: black box, probed (the unit that carried it) and "
                            "unexplained end to end, over the run."))  # fmt: skip
    if model["distribution"]:
        parts.append(figure(f"{a}-dist", "distribution", "blackbox.distribution",
                            "Unexplained (black box - probed) over the codes matched to a unit: "
                            "histogram and CDF."))  # fmt: skip
    return "".join(parts) + "</section>"


def forwarding_findings(host: str, box: dict[str, Any], costs: dict[str, Any]) -> list[Finding]:
    """The findings of a captured host's forwarding and of its counted processes."""
    anchor = f"sfu-{host}"
    found = fnd.forwarding(host, box, anchor)
    for name, cost in sorted(costs.items()):
        found += fnd.forwarding_cost(name, cost, anchor)
    return found


def forwarding_section(host: str, box: dict[str, Any], costs: dict[str, Any]) -> str:
    """A captured host's forwarding (docs/sfu.md): the dwell per subscriber leg and per
    source it carried, then what each counted process cost per forwarded packet."""
    head = f'<section id="sfu-{esc(host)}"><h2>Forwarded inside {esc(host)}</h2>'
    if box.get("error"):
        return head + f"<p>{esc(box['error'])}</p></section>"
    rows = []
    for leg in box["legs"]:
        name = f"{leg['to']} {leg['ssrc']} {leg['kind']}"
        rows.append(_dwell_row(name, "all", leg["matched"], leg["dwell"]))
        for source in leg["sources"] if len(leg["sources"]) > 1 else []:
            layer = f" layer {source['layer']}" if source["layer"] is not None else ""
            rows.append(_dwell_row("", source["ssrc"] + layer, source["dwell"]["count"],
                                   source["dwell"]))  # fmt: skip
    rows.append(_dwell_row("all legs", "", box["dwell"]["count"], box["dwell"]))
    table = ('<table class="stats"><thead><tr><th>leg (to)</th><th>source</th>'
             "<th>packets</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>max ms</th>"
             "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>")  # fmt: skip
    intro = (f"<p>{box['matched']} of {box['forwarded']} egress RTP packets matched to "
             f"their source ({box['ambiguous']} ambiguous, {box['unmatched']} unmatched, "
             f"{box['repeat']} repeats, {box.get('edge', 0)} the SFU's own at a leg's start "
             "or end); one kernel clock for ingress and egress.</p>")  # fmt: skip
    parts = [head, intro, table]
    parts += [f"<p>{esc(host)} capture: {esc(p)}</p>" for p in box["problems"]]
    for name, cost in sorted(costs.items()):
        per = cost.get("per_packet") or {}
        cells = "".join(f"<td>{_ms(per.get(k))}</td>" for k in
                        ("cpu_us", "syscalls", "context_switches", "sched_switches"))  # fmt: skip
        parts.append(f"<h3>cost of {esc(name)} per forwarded packet, idle baseline taken off</h3>"
                     '<table class="stats"><thead><tr><th>CPU µs</th><th>syscalls</th>'
                     "<th>context switches</th><th>scheduler switches</th></tr></thead>"
                     f"<tbody><tr>{cells}</tr></tbody></table>")  # fmt: skip
    return "".join(parts) + "</section>"


def _dwell_row(name: str, source: str, count: int, dwell: dict[str, Any]) -> str:
    cells = "".join(f"<td>{_ms(dwell.get(k)) if count else '-'}</td>"
                    for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms"))  # fmt: skip
    return f"<tr><td>{esc(name)}</td><td>{esc(source)}</td><td>{count}</td>{cells}</tr>"


def traces_table(traces: list[dict[str, Any]]) -> str:
    """Traced processes: configured pipeline latency and problems."""
    rows = "".join(
        f"<tr><td>{esc(t['process'])}</td><td>{esc(t['file'])}</td>"
        f"<td>{_ms(t.get('configured_latency_ms'))}</td>"
        f"<td>{esc('; '.join(t.get('problems') or []) or '-')}</td></tr>"
        for t in traces
    )
    return (
        '<section id="traces"><h2>Traces</h2><table class="stats"><thead><tr><th>process</th>'
        "<th>file</th><th>configured latency ms</th><th>problems</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></section>"
    )


def page(title: str, subtitle: str, body: str, model: dict[str, Any]) -> str:
    """The whole document: CSS, body, data and renderer inline."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{_asset('report.css')}</style></head>"
        f"<body><header><h1>{esc(title)}</h1><p>{subtitle}</p></header><main>{body}</main>"
        f"<footer>latlab {esc(__version__)}</footer>"
        f'<script type="application/json" id="latlab-data">{to_json(model)}</script>'
        f"<script>{_asset('report.js')}</script></body></html>\n"
    )


def clocks_section(clocks: dict[str, Any]) -> str:
    """How the run's clock domains were aligned: every source's answer per pair."""
    rows = []
    for pair in clocks.get("pairs", []):
        for source in pair.get("sources", []):
            chosen = source["source"] == pair.get("chosen")
            if source.get("valid"):
                what = (f"offset {source['offset_ms']:+.3f} ms, drift {source['drift_ppm']:+.3f} "
                        f"ppm, ±{source['err_ms']:.3f} ms over {source['span_s']:g} s "
                        f"({source['used']} of {source['samples']} samples)")  # fmt: skip
            else:
                what = source.get("why", "")
            rows.append(f"<tr><td>{esc(pair['a'])} → {esc(pair['b'])}</td>"
                        f"<td>{esc(source['source'])}{' (chosen)' if chosen else ''}</td>"
                        f"<td>{esc(what)}</td></tr>")  # fmt: skip
    intro = (f"<p>Reference: {esc(clocks['reference'])}. A figure between two clock domains "
             "carries the error of their alignment (±clk); one larger than "
             f"{clocks.get('flag_share', 0.1):.0%} of its p50 is marked !.</p>")  # fmt: skip
    return (
        f'<section id="clocks"><h2>Clocks</h2>{intro}<table class="stats"><thead><tr>'
        "<th>domains</th><th>source</th><th>alignment</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></section>"
    )


def run_html(
    run_dir: Path,
    meta: dict[str, Any],
    summary: dict[str, Any],
    streams: Sequence[StreamAnalysis],
    max_points: int = MAX_POINTS,
) -> str:
    """The report of one analysed run."""
    model = run_model(run_dir, meta, summary, streams, max_points)
    many = len(model["streams"]) > 1
    groups = [(m["id"] if many else "", m["findings"]) for m in model["streams"]]
    box = model["blackbox"]
    if box:
        groups.append(("black box" if many else "", box["findings"]))
    sections = [
        stream_section(i, m, s)
        for i, (m, s) in enumerate(zip(model["streams"], summary["streams"], strict=True))
    ]
    if box:
        sections.append(blackbox_section(box, summary["blackbox"]))
    for host, forwarded in sorted((summary.get("forwarding") or {}).items()):
        costs = {n: c for n, c in (summary.get("costs") or {}).items() if c.get("host") == host}
        groups.append((f"forwarded inside {host}" if many else "",
                       forwarding_findings(host, forwarded, costs)))  # fmt: skip
        sections.append(forwarding_section(host, forwarded, costs))
    if summary.get("quality"):
        sections.append(run_quality_html(summary["quality"], esc))
    if model["cpu"]:
        sections.append(
            '<section id="resources"><h2>Resources</h2>'
            + figure("cpu", "cpu", "cpu", "CPU per process (user + system), % of one core, "
                     "between consecutive 100 ms samples.") + "</section>"
        )  # fmt: skip
    if summary.get("clocks"):
        sections.append(clocks_section(summary["clocks"]))
    sections.append(traces_table(model["traces"]))
    run = summary["run"]
    params = ", ".join(f"{k}={v}" for k, v in (run.get("params") or {}).items())
    subtitle = esc(
        f"run {run.get('started_at') or '-'} · {run.get('duration_s', 0):.1f} s measured"
        + (f" · {params}" if params else "")
        + (f" · scenario {run['scenario']}" if run.get("scenario") else "")
    )
    if not model["streams"]:
        sections.insert(0, "<p>No stream found in the traces.</p>")
    body = findings_list(groups) + "".join(sections)
    return page(f"latlab report: {model['name']}", subtitle, body, model)


def sweep_table(model: dict[str, Any]) -> str:
    """The comparison table: one row per point and stream."""
    variables = model["variables"]
    metrics = model["metrics"]
    head = "".join(f"<th>{esc(v)}</th>" for v in variables) + "<th>stream</th>"
    head += "".join(f"<th>{esc(m['label'])} <small>{esc(m['unit'])}</small></th>" for m in metrics)
    rows = []
    streams = range(len(metrics[0]["series"])) if metrics else range(0)
    for i, point in enumerate(model["points"]):
        values = "".join(f"<td>{esc(point['values'].get(v, ''))}</td>" for v in variables)
        if point["status"] != "ok":
            error = f": {point['error']}" if point.get("error") else ""
            rows.append(f'<tr class="failed">{values}<td colspan="{len(metrics) + 1}">'
                        f"{esc(point['status'] + error)}</td></tr>")  # fmt: skip
            continue
        for k in streams:
            cells = []
            for m in metrics:
                series = m["series"][min(k, len(m["series"]) - 1)]  # CPU: one for all
                value = series["y"][i]
                cells.append("<td>-</td>" if value is None else f"<td>{value:g}</td>")
            label = metrics[0]["series"][k]["stream"]
            rows.append(f"<tr>{values}<td>{esc(label)}</td>{''.join(cells)}</tr>")
    return (
        f'<section id="sweep-table"><h2>Comparison</h2><table class="stats"><thead><tr>{head}'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        "<p>Each segment kind: p50 of the time a unit spent in all segments of that kind. "
        "Open a point's own report with <code>latlab report DIR/points/NAME --html</code>.</p>"
        "</section>"
    )


def sweep_html(sweep: dict[str, Any], composite: dict[str, Any] | None = None) -> str:
    """The report of a sweep directory (``composite``: see html_composite.composite)."""
    model = sweep_model(sweep)
    model["composite"] = composite
    charts = "".join(
        figure(f"sweep-{m['key']}", "sweep_metric", f"metrics.{k}",
               f"{esc(m['label'])} <small>({esc(m['unit'])})</small> per point")
        for k, m in enumerate(model["metrics"])
    )  # fmt: skip
    body = (
        findings_list([("", model["findings"])])
        + matrix_html(sweep, esc)
        + sweep_table(model)
        + '<section id="sweep-charts"><h2>Per metric</h2>'
        + f'<div class="grid">{charts}</div></section>'
    )
    if composite:
        body += (
            '<section id="composite"><h2>Composite</h2>'
            + figure("sweep-composite", "composite", "composite",
                     f"Every point side by side: {composite['slice_units']} consecutive units from "
                     "the middle of its run, each probe's time relative to the first probe, one "
                     "colour per probe (as the thesis's composite figures 3.12-3.13).", tall=True)
            + "</section>"
        )  # fmt: skip
    subtitle = esc(f"sweep · {model['mode']} · {len(model['points'])} points")
    return page(f"latlab sweep: {model['name']}", subtitle, body, model)


class ReportError(UserInputError, ValueError):
    """A report that cannot be made from what was given (shown as one line)."""


def write_html(text: str, out: Path) -> Path:
    """Write the report; a directory given as OUT gets report.html inside it."""
    if out.is_dir():
        out = out / REPORT_FILE
    try:
        out.write_text(text)
    except OSError as exc:
        raise ReportError(f"{out}: cannot write the report: {exc.strerror}") from None
    return out


def report_html(run_dir: Path, out: Path | None, unit_ms: float | None = None) -> Path:
    """Analyse a run (or read a sweep) and write its HTML report; returns the file written."""
    from latlab.pipeline import analysis_of
    from latlab.rundir import is_sweep_dir, read_sweep

    target = out or run_dir / REPORT_FILE
    if is_sweep_dir(run_dir):
        sweep = read_sweep(run_dir)
        if has_quality(sweep):  # the matrix's cells link to their runs' reports
            for point in sweep.get("points", []):
                point_dir = run_dir / point.get("dir", "")
                if point.get("status") == "ok" and not (point_dir / REPORT_FILE).exists():
                    report_html(point_dir, None, unit_ms)
        return write_html(sweep_html(sweep, composite(run_dir, sweep)), target)
    analysis = analysis_of(run_dir, unit_ms)
    page = run_html(run_dir, analysis.meta, analysis.summary, analysis.streams)
    return write_html(page, target)
