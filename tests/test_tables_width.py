"""Every terminal table of latlab at 80 columns keeps its names whole (issue 14 item 5).

The summaries are real ones, trimmed (tests/data/tables-width.json: the L16 flagship, the
SRT flagship with its frame types, SRT stats and link traffic), plus a browser call made
by hand with the probe names latlab gives browsers and GStreamer peers. Comparisons and
budgets come from ``latlab.synthetic`` runs. No root, no GStreamer: the CLI is only run
to report, compare and check stored runs.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from latlab.analysis.sweep_figures import point_figures
from latlab.lab.scenario import Analysis
from latlab.report.budget import check_budgets, parse_budget, render_check
from latlab.report.compare import compare_runs, render_comparison
from latlab.report.fit import FitTable
from latlab.report.sweep_table import render_sweep
from latlab.report.table import render_summary
from latlab.synthetic import MS, SyntheticRtpAudio, make_rtp_audio_run

REPO = Path(__file__).resolve().parent.parent
DATA = json.loads((REPO / "tests" / "data" / "tables-width.json").read_text(encoding="utf-8"))
SUMMARIES = ("l16_basic", "srt", "browser")
BORDERS = " │┃║|"
ALL_STAGE_COLUMNS = ("p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms", "mean ms")


def render(draw: Callable[[Console], None], width: int = 80) -> str:
    """What ``draw`` prints on a console ``width`` columns wide, as plain text."""
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    draw(console)
    return console.export_text()


def appears_whole(text: str, name: str) -> bool:
    """Whether ``name`` is in ``text``, on one line or folded down a column: its pieces
    start at the same column on consecutive lines, each ending at the cell's edge (a
    fold at a space drops the space)."""
    lines = text.splitlines()
    for row, line in enumerate(lines):
        for x in range(len(line)):
            if line[x] == name[0] and _reads_down(lines, row, x, name):
                return True
    return False


def _reads_down(lines: list[str], row: int, x: int, name: str) -> bool:
    rest = name
    while rest:
        if row >= len(lines):
            return False
        piece = lines[row][x:]
        n = _common_prefix(piece, rest)
        if n == 0 or (n < len(rest) and n < len(piece) and piece[n] not in BORDERS):
            return False
        rest = rest[n:].lstrip(" ")
        row += 1
    return True


def _common_prefix(a: str, b: str) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


def assert_whole(text: str, names: list[str]) -> None:
    missing = [name for name in names if not appears_whole(text, name)]
    assert not missing, f"not whole: {missing}\n{text}"
    assert "…" not in text and "..." not in text, text


def assert_fits(text: str, width: int = 80) -> None:
    wide = [line for line in text.splitlines() if len(line) > width]
    assert not wide, "\n".join(wide)


def stage_labels(stream: dict[str, Any]) -> list[str]:
    """The probe names the per-stage table shows: the process part is left out when it is
    the previous probe's."""
    labels, previous = [], ""
    for seg in stream["segments"]:
        process, rest = seg["to"].split("/", 1)
        labels.append(rest if process == previous else seg["to"])
        previous = process
    return labels


def summary_names(summary: dict[str, Any]) -> list[str]:
    """Every name the tables of a summary show: probes, stream ids, spans, processes, ..."""
    names: list[str] = []
    for stream in summary["streams"]:
        names += [stream["id"], *stage_labels(stream), *stream.get("cadence", {})]
        for phase in stream.get("phases", {}).values():
            names.append(f"{phase['from'].rsplit('/', 1)[-1]} → {phase['to'].rsplit('/', 1)[-1]}")
        for seg in [*stream["segments"], stream["end_to_end"]]:
            names += [seg["from"], seg["to"]]  # the --dist titles
        for step in stream.get("adaptation", []):
            names += [step["link"], ", ".join(f"{k}={v}" for k, v in step["set"].items())]
    names += list(summary.get("resources", {}).get("processes", {}))
    names += [f"{e['process']}/{e['element']}" for e in summary.get("srt", [])]
    names += [row["direction"] for link in summary.get("links", []) for row in link["traffic"]]
    if summary.get("blackbox"):
        span = summary["blackbox"]["span"]
        names += [span["from"], span["to"]]
    return names


def draw_summary(summary: dict[str, Any], **options: bool) -> Callable[[Console], None]:
    def draw(console: Console) -> None:
        render_summary(summary, console, cadence=True, distributions=True, **options)

    return draw


@pytest.mark.parametrize("name", SUMMARIES)
def test_every_run_table_keeps_its_names_whole_at_80_columns(name: str) -> None:
    summary = DATA[name]
    text = render(draw_summary(summary))
    assert_fits(text)
    assert_whole(text, summary_names(summary))
    for label in ("pacer (sender)", "NetEq GetAudio (decode, conceal, stretch)"):
        if summary["streams"][0].get("intervals"):
            assert appears_whole(text, label)


def test_flagship_stage_table_drops_p999_then_max_then_mean() -> None:
    summary = DATA["l16_basic"]
    (stream,) = summary["streams"]
    headers_at = {}
    for width in (80, 90, 100, 200):
        text = render(draw_summary(summary), width)
        header = next(line for line in text.splitlines() if "stage (to probe)" in line)
        headers_at[width] = [c for c in ALL_STAGE_COLUMNS if c in header]
        assert_whole(text, stage_labels(stream))
    assert headers_at[80] == ["p50 ms", "p90 ms", "p99 ms"]
    assert headers_at[90] == ["p50 ms", "p90 ms", "p99 ms", "mean ms"]
    assert headers_at[100] == ["p50 ms", "p90 ms", "p99 ms", "max ms", "mean ms"]
    assert headers_at[200] == list(ALL_STAGE_COLUMNS)
    text = render(draw_summary(summary))
    assert "left out to fit 80 columns: p99.9 ms, max ms, mean ms; --wide shows" in text
    # at 80 columns the names fit on one line once the three columns are gone
    for label in stage_labels(stream):
        assert any(label in line for line in text.splitlines()), label


def test_names_fold_over_lines_in_a_narrower_console() -> None:
    summary = DATA["srt"]
    text = render(draw_summary(summary), 60)
    assert_fits(text, 60)
    assert_whole(text, summary_names(summary))
    stage_table = text[: text.index("where the time goes")].splitlines()
    labels = stage_labels(summary["streams"][0])
    folded = [label for label in labels if not any(label in line for line in stage_table)]
    assert folded  # the test means something: some names did need folding


def test_a_name_breaks_after_a_slash_or_at_a_space() -> None:
    table = FitTable(title="t")
    table.add_column("probe", fold=True)
    table.add_column("p50 ms", justify="right")
    table.add_row("receiver/srtsrc0:src first byte", "120.446")
    lines = render(lambda c: c.print(table), 34).splitlines()  # 20 for the probe
    cells = [line.split("│")[1].strip() for line in lines if line.startswith("│")]
    assert cells == ["receiver/srtsrc0:src", "first byte"]


@pytest.mark.parametrize("name", SUMMARIES)
def test_wide_shows_every_column_on_one_line(name: str) -> None:
    summary = DATA[name]
    text = render(draw_summary(summary, wide=True))
    assert max(len(line) for line in text.splitlines()) > 80
    assert "left out" not in text
    header = next(line for line in text.splitlines() if "stage (to probe)" in line)
    assert all(column in header for column in ALL_STAGE_COLUMNS)
    lines = text.splitlines()
    for label in summary_names(summary):
        assert any(label in line for line in lines), label


# --- sweeps ---------------------------------------------------------------------------


def sweep_json() -> dict[str, Any]:
    """A sweep of the fixture's runs: residual columns, a point with two streams, the black
    box of the browser call, a failed point."""
    both = {**DATA["l16_basic"], "streams": DATA["l16_basic"]["streams"] + DATA["srt"]["streams"]}
    residual = Analysis(configured_latency_ms=993.0, period_ms=33.3)
    runs = [
        ("120", "tx-rx 10 ms", DATA["srt"]),
        ("120", "both", both),
        ("60", "browser call", DATA["browser"]),
    ]
    points = [
        point(f"latency={latency},link={link}", {"latency": latency, "link": link})
        | point_figures(summary, residual.configured_latency_ms, residual.period_ms)
        for latency, link, summary in runs
    ]
    failed = point("latency=20,link=none", {"latency": "20", "link": "none"}, "failed")
    points.append(failed | {"error": "srtsrc0: connection refused", "streams": []})
    variables = {"latency": ["120", "60", "20"], "link": ["tx-rx 10 ms", "both", "none"]}
    sweep = {"mode": "product", "variables": variables}
    return {"name": "srt-latency-sweep", "sweep": sweep, "points": points}


def point(name: str, values: dict[str, Any], status: str = "ok") -> dict[str, Any]:
    return {"name": name, "values": values, "status": status}


def sweep_names(sweep: dict[str, Any]) -> list[str]:
    names = [str(v) for p in sweep["points"] for v in p["values"].values()]
    return names + [s["id"] for p in sweep["points"] for s in p["streams"]]


def test_sweep_tables_keep_values_and_stream_ids_whole_at_80_columns() -> None:
    sweep = sweep_json()
    text = render(lambda console: render_sweep(sweep, console))
    assert_fits(text)
    assert_whole(text, sweep_names(sweep))
    assert "left out to fit 80 columns: r in capture" in text
    for title in ("sweep srt-latency-sweep", "black box (time-coded signal) per point"):
        assert title in text


def test_a_single_stream_sweep_splits_no_figure_at_80_columns() -> None:
    residual = Analysis(configured_latency_ms=993.0, period_ms=33.3)
    points = [
        point(f"latency={v}", {"latency": v})
        | point_figures(DATA["srt"], residual.configured_latency_ms, residual.period_ms)
        for v in (60, 120)
    ]
    variables = {"latency": [60, 120]}
    sweep = {"name": "s", "sweep": {"mode": "product", "variables": variables}, "points": points}
    text = render(lambda console: render_sweep(sweep, console))
    assert_fits(text)
    e2e = points[0]["streams"][0]["end_to_end"]
    assert f"{e2e['p50_ms']:.2f}" in text and f"{e2e['p99_ms']:.2f}" in text


def test_wide_sweep_tables_keep_every_column() -> None:
    sweep = sweep_json()
    text = render(lambda console: render_sweep(sweep, console, wide=True))
    assert "left out" not in text
    for header in ("Δt_c", "CPU", "SRT", "unexplained"):
        assert header in text
    lines = text.splitlines()
    for name in sweep_names(sweep):
        assert any(name in line for line in lines), name


# --- compare and check ----------------------------------------------------------------


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """Two synthetic RTP audio runs, the second with a jitter buffer 20 ms longer."""
    tmp = tmp_path_factory.mktemp("runs")
    make_rtp_audio_run(tmp / "a", SyntheticRtpAudio(units=300))
    make_rtp_audio_run(tmp / "b", SyntheticRtpAudio(units=300, jitterbuffer_latency=40 * MS))
    yield tmp / "a", tmp / "b"


def test_comparison_keeps_segment_names_whole_at_80_columns(runs: tuple[Path, Path]) -> None:
    comparison = compare_runs(str(runs[0]), str(runs[1]), resamples=100)
    names = [row["name"] for s in comparison.streams for row in s.rows]
    names += [s.key for s in comparison.streams]
    text = render(lambda console: render_comparison(comparison, console))
    assert_whole(text, names)
    table = text[text.index(comparison.streams[0].key) :]
    assert_fits(table)
    header = next(line for line in table.splitlines() if "Δ p50 ms" in line)
    assert "Δ p99 ms" in header and "A p50" in header and "Δ mean ms" not in header
    wide = render(lambda console: render_comparison(comparison, console, wide=True))
    assert "Δ mean ms" in wide and "A p99" in wide and "left out" not in wide


def test_budget_table_keeps_budgets_and_metrics_whole_at_80_columns(
    runs: tuple[Path, Path],
) -> None:
    from latlab.pipeline import analyze_run

    _, _, streams = analyze_run(runs[0], None, write=False)
    texts = [
        "e2e.p99<40ms",
        "receiver/rtpjitterbuffer0:src.p99.9<=25ms",
        "sender@network.mean<15ms",
    ]
    results = check_budgets([parse_budget(t) for t in texts], streams)
    text = render(lambda console: render_check(results, console))
    assert_fits(text)
    assert_whole(text, [*texts, *(r.metric for r in results), *(r.stream_id for r in results)])
    wide = render(lambda console: render_check(results, console, wide=True))
    assert "units" in wide and "left out" not in wide


# --- the command line: a pipe, COLUMNS, --wide -----------------------------------------


def latlab(*args: str, columns: str | None) -> str:
    """``./latlab ARGS`` with its stdout to a pipe, COLUMNS as given (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns
    command = [str(REPO / "latlab"), *args]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def probe_names(run_dir: Path) -> list[str]:
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    return stage_labels(summary["streams"][0])


def test_piped_report_has_every_column_and_whole_names(runs: tuple[Path, Path]) -> None:
    out = latlab("report", str(runs[0]), columns=None)
    header = next(line for line in out.splitlines() if "stage (to probe)" in line)
    assert all(column in header for column in ALL_STAGE_COLUMNS)
    assert "left out" not in out
    lines = out.splitlines()
    for name in probe_names(runs[0]):
        assert any(name in line for line in lines), name


def test_piped_report_fits_columns_when_set(runs: tuple[Path, Path]) -> None:
    out = latlab("report", str(runs[0]), columns="80")
    assert_fits(out)
    assert "left out to fit 80 columns" in out
    assert_whole(out, probe_names(runs[0]))
    wide = latlab("report", str(runs[0]), "--wide", columns="80")
    header = next(line for line in wide.splitlines() if "stage (to probe)" in line)
    assert all(column in header for column in ALL_STAGE_COLUMNS) and "left out" not in wide


def test_compare_and_check_take_wide(runs: tuple[Path, Path]) -> None:
    a, b = (str(run) for run in runs)
    compared = latlab("compare", a, b, "--resamples", "100", "--wide", columns="80")
    assert "Δ mean ms" in compared and "left out" not in compared
    checked = latlab("check", a, "--budget", "e2e.p99<400ms", "--wide", columns="40")
    assert "units" in checked and "left out" not in checked


# --- latlab query ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def dataset_answers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Any]]:
    """Every ready question's answer over the shared synthetic dataset (tests/dataset_data)."""
    from latlab.dataset.commands import engine_for
    from latlab.dataset.questions import Metric, Options, ask
    from tests.dataset_data import build_dataset

    dataset, _ = build_dataset(tmp_path_factory.mktemp("dataset"))
    engine = engine_for(dataset)
    sides = {"a": [("build", "41")], "b": [("build", "42")], "resamples": 100}
    yield [
        ask(engine, "runs", Options()),
        ask(engine, "percentiles", Options(by=["build", "scenario"])),
        ask(engine, "trend", Options(Metric(kind="jitterbuffer"), every="run")),
        ask(engine, "worst", Options(limit=5)),
        ask(engine, "regression", Options(**sides)),  # type: ignore[arg-type]
    ]
    engine.close()


def test_query_tables_keep_names_whole_at_80_columns(dataset_answers: list[Any]) -> None:
    from latlab.dataset.render import render_answer

    for answer in dataset_answers:
        text = render(lambda console, answer=answer: render_answer(answer, console))
        assert_fits(text)
        names = [str(row[key]) for row in answer.rows for key in ("stream", "run_dir", "metric",
                 "build", "scenario", "run") if row.get(key)]  # fmt: skip
        assert_whole(text, names)
        wide = render(lambda console, answer=answer: render_answer(answer, console, wide=True))
        assert "left out" not in wide
        slowest = [row["slowest_segment"] for row in answer.rows if "slowest_segment" in row]
        assert all(name in wide for name in slowest)
