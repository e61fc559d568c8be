"""latlab command line: ``run``, ``record``, ``report``, ``export``, ``compare``, ``check``,
``ingest``, ``query``."""

from __future__ import annotations

import faulthandler
import json
import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from latlab.errors import INTERNAL, INTERRUPTED, TERMINATED, LatlabError, UserInputError
from latlab.lab.scenario import Scenario
from latlab.lab.signals import Terminated, interruptible
from latlab.rundir import SUMMARY_FILE, SWEEP_FILE, is_sweep_dir

app = typer.Typer(
    name="latlab",
    help="Where does my end-to-end latency go? Per-stage latency distributions of real-time media.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)

UnitMs = Annotated[
    float | None, typer.Option("--unit-ms", help="Unit of media followed, in ms (default 10).")
]
Wide = Annotated[
    bool,
    typer.Option(
        "--wide",
        help="Every column of every table, names on one line, however wide that is. Without "
        "it the tables fit the terminal: low-priority columns (p99.9, max, mean, ...) are "
        "left out, then names folded, never cut. Output to a file or pipe is wide unless "
        "COLUMNS is set (docs/reports.md).",
    ),
]


def _wide(wide: bool) -> bool:
    """--wide, or stdout is no terminal and COLUMNS is unset: a file has no width to fit."""
    import os

    return wide or (not console.is_terminal and not os.environ.get("COLUMNS"))


@app.command()
def run(
    scenario: Annotated[Path, typer.Argument(help="Scenario file (TOML).")],
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Run directory to write (default: runs/NAME-TIME)."),
    ] = None,
    unit_ms: UnitMs = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    duration: Annotated[
        float | None, typer.Option("--duration", help="Override the scenario's duration_s.")
    ] = None,
    wide: Wide = False,
) -> None:
    """Run a scenario: hosts as namespaces, processes traced; then print the per-stage table.

    A scenario with a sweep table runs every point and prints the comparison table.
    """
    from latlab.lab.runner import run_scenario
    from latlab.lab.scenario import load_scenario
    from latlab.pipeline import summary_of
    from latlab.report.table import render_summary

    spec = load_scenario(scenario)
    if duration is not None:
        spec = spec.with_duration(duration)
    out = out or Path("runs") / f"{spec.name}-{datetime.now():%Y%m%d-%H%M%S}"
    if spec.sweep is not None:
        _run_sweep(spec, out, progress, unit_ms, _wide(wide))
        return
    try:
        run_scenario(spec, out, progress=progress)
    except (KeyboardInterrupt, Terminated):
        err_console.print(f"latlab: stopped; traces so far are in {out} (latlab report {out})")
        raise
    summary = summary_of(out, unit_ms or spec.analysis.unit_ms)
    render_summary(summary, console, wide=_wide(wide))
    console.print(f"[dim]summary: {out / SUMMARY_FILE}[/dim]")
    _fail_on_black_box_error(summary)


def _fail_on_black_box_error(summary: dict[str, Any]) -> None:
    """Exit 1 with one line when the run's black-box files could not be used."""
    error = summary.get("blackbox", {}).get("error")
    if error:
        err_console.print(
            f"latlab: error: black box: {error}", highlight=False, markup=False, soft_wrap=True
        )
        raise typer.Exit(1)


def _run_sweep(
    spec: Scenario, out: Path, progress: bool, unit_ms: float | None, wide: bool = False
) -> None:
    """Run every point of a sweep and print the comparison; exit 1 if a point failed."""
    from latlab.experiment import run_analysed_sweep
    from latlab.report.sweep_table import render_sweep

    try:
        result = run_analysed_sweep(spec, out, unit_ms=unit_ms, progress=progress, console=console)
    except (KeyboardInterrupt, Terminated):
        err_console.print(f"latlab: sweep stopped; finished points and sweep.json are in {out}")
        raise
    render_sweep(result.sweep, console, wide=wide)
    console.print(f"[dim]sweep: {out / SWEEP_FILE}[/dim]")
    if result.failed:
        total = len(result.sweep["points"])
        err_console.print(f"latlab: {len(result.failed)} of {total} points failed", highlight=False)
        raise typer.Exit(1)


def _report_sweep(sweep_dir: Path, as_json: bool, wide: bool = False) -> None:
    """The comparison table of a sweep directory (or its sweep.json)."""
    from latlab.report.sweep_table import render_sweep
    from latlab.rundir import read_sweep

    sweep = read_sweep(sweep_dir)
    if as_json:
        sys.stdout.write(json.dumps(sweep, indent=1) + "\n")
        return
    render_sweep(sweep, console, wide=wide)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def record(
    command: Annotated[list[str] | None, typer.Argument(help="Command to run (after --).")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Run directory to write.")] = Path(
        "latlab-record"
    ),
    name: Annotated[
        str | None,
        typer.Option(
            help="Process name in probe names; with it, the command may join a record run "
            "directory (e.g. a sender started in a second terminal)."
        ),
    ] = None,
    print_env: Annotated[
        bool, typer.Option("--print-env", help="Print the variables that load the tracer.")
    ] = False,
    analyze: Annotated[bool, typer.Option(help="Analyse and print the table afterwards.")] = True,
    clock_domain: Annotated[
        str | None,
        typer.Option(
            "--clock-domain",
            help="This machine's clock domain (default monotonic@HOSTNAME); docs/clocks.md.",
        ),
    ] = None,
    clock_serve: Annotated[
        str | None,
        typer.Option(
            "--clock-serve",
            help="[ADDRESS:]PORT: answer two-way clock exchanges from the other machine.",
        ),
    ] = None,
    clock_peer: Annotated[
        list[str] | None,
        typer.Option(
            "--clock-peer",
            help="[DOMAIN=]ADDRESS:PORT: exchange timestamps with the machine recording with "
            "--clock-serve there (a few UDP packets a second, beside the measurement).",
        ),
    ] = None,
    wide: Wide = False,
) -> None:
    """Run any command with the tracer loaded, like ``perf record -- CMD``.

    Processes recorded into one directory under different --name are stitched together;
    the table comes when the last of them ends. Beside the command, the machine's clock is
    sampled (and, with --clock-serve / --clock-peer, exchanged with another machine's) so
    that runs of two machines can be merged (latlab merge).
    """
    from latlab.lab.clockd import parse_address, parse_peers
    from latlab.lab.record import ClockOptions, record_process
    from latlab.lab.record import print_env as env_lines

    if print_env:
        console.print(env_lines(out), highlight=False, markup=False, soft_wrap=True)
        return
    if not command:
        raise UserInputError(
            "record: give the command to record after --, e.g. latlab record -- gst-launch-1.0 ..."
        )
    try:
        serve = None
        if clock_serve is not None:
            serve = parse_address(clock_serve if ":" in clock_serve else f":{clock_serve}",
                                  "--clock-serve")  # fmt: skip
        peers = parse_peers(clock_peer or [], "--clock-peer")
    except ValueError as exc:
        raise UserInputError(f"record: {exc}") from None
    clock = ClockOptions(clock_domain, serve, peers)
    result = record_process(list(command), out, process_name=name, clock=clock)
    if analyze and result.still_running:
        others = ", ".join(result.still_running)
        err_console.print(
            f"latlab: not analysed: {others} still recording into {out} "
            f"(latlab report {out} once it ends)",
            highlight=False, markup=False, soft_wrap=True,
        )  # fmt: skip
    elif analyze:
        from latlab.pipeline import summary_of
        from latlab.report.table import render_summary

        summary = summary_of(out)
        render_summary(summary, console, wide=_wide(wide))
    raise typer.Exit(result.exit_code)


@app.command()
def merge(
    run_dirs: Annotated[
        list[Path], typer.Argument(help="Run directories recorded on different machines.")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="The merged run directory to write.")],
    analyze: Annotated[bool, typer.Option(help="Analyse and print the table afterwards.")] = True,
    wide: Wide = False,
) -> None:
    """Join runs recorded on different machines into one: journeys across the machines,
    stitched by media position, every figure between their clocks with its error
    (docs/clocks.md)."""
    from latlab.merge import merge_runs

    merge_runs(list(run_dirs), out)
    console.print(f"merged: {out}", highlight=False)
    if analyze:
        from latlab.pipeline import summary_of
        from latlab.report.table import render_summary

        render_summary(summary_of(out), console, wide=_wide(wide))


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="Run directory (or a directory of traces).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print summary.json.")] = False,
    distributions: Annotated[
        bool, typer.Option("--dist", help="Distribution tables per segment.")
    ] = False,
    cadence: Annotated[bool, typer.Option(help="Buffer cadence per probe.")] = False,
    unit_ms: UnitMs = None,
    html: Annotated[
        bool,
        typer.Option("--html", help="Write one self-contained HTML report (plots, findings)."),
    ] = False,
    out: Annotated[
        Path | None,
        typer.Argument(help="With --html: the file to write (default DIR/report.html)."),
    ] = None,
    wide: Wide = False,
) -> None:
    """Per-stage tables from the stored traces of a run; the comparison table of a sweep.

    A run analysed before is read from its stored analysis while its traces and latlab's
    analysis are unchanged; otherwise it is analysed now (and stored)."""
    from latlab.pipeline import summary_json, summary_of
    from latlab.report.table import render_summary

    if not run_dir.is_dir():
        raise UserInputError(f"{run_dir}: no such run directory")
    if out is not None and not html:
        raise UserInputError(f"{out}: an output file is only for --html")
    if html:
        from latlab.report.html import report_html

        written = report_html(run_dir, out, unit_ms)
        console.print(f"report: {written}", highlight=False)
        summary_file = run_dir / SUMMARY_FILE
        if summary_file.is_file():
            _fail_on_black_box_error(json.loads(summary_file.read_text(encoding="utf-8")))
        return
    if is_sweep_dir(run_dir):
        _report_sweep(run_dir, as_json, _wide(wide))
        return
    summary = summary_of(run_dir, unit_ms)
    if as_json:
        sys.stdout.write(summary_json(summary))
        return
    render_summary(summary, console, distributions=distributions, cadence=cadence, wide=_wide(wide))
    _fail_on_black_box_error(summary)


@app.command()
def export(
    run_dir: Annotated[str, typer.Argument(help="Run directory (or SWEEPDIR:POINT).")],
    perfetto: Annotated[
        Path | None,
        typer.Option("--perfetto", help="Write a trace for ui.perfetto.dev (trace-event JSON)."),
    ] = None,
    unit_ms: UnitMs = None,
) -> None:
    """Export a run's journeys: a slice per unit per segment, flow arrows along each unit."""
    from latlab.report.compare import ReportInputError, resolve_run
    from latlab.report.perfetto import export_perfetto

    if perfetto is None:
        raise ReportInputError("export: give the trace to write, e.g. --perfetto OUT.json")
    run = resolve_run(run_dir)
    result = export_perfetto(run.path, perfetto, unit_ms)
    console.print(
        f"{result.path}: {result.slices} slices of {result.units} units in {result.streams} "
        f"stream(s), {result.flows} flows, {result.tracks} tracks in {result.processes} "
        f"processes ({result.bytes / 1e6:.1f} MB); open it in ui.perfetto.dev",
        highlight=False,
    )


@contextmanager
def _status_line(first: str) -> Iterator[Callable[[str], None]]:
    """Yield ``report(text)``: a status line on stderr while it works, if that is a terminal."""
    if not err_console.is_terminal:
        yield lambda _text: None
        return
    with err_console.status(first) as status:
        yield lambda text: status.update(text)


@app.command()
def compare(
    a: Annotated[str, typer.Argument(help="Run directory A (or SWEEPDIR:POINT).")],
    b: Annotated[str, typer.Argument(help="Run directory B (or SWEEPDIR:POINT).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples.", min=100)] = 2000,
    confidence: Annotated[
        float, typer.Option(help="Confidence of the intervals.", min=0.5, max=0.999)
    ] = 0.95,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap.")] = 20261122,
    unit_ms: UnitMs = None,
    wide: Wide = False,
) -> None:
    """B - A per segment and end to end at p50, p99 and mean, with bootstrap intervals."""
    from latlab.report.compare import compare_runs, render_comparison

    with _status_line("comparing") as report:
        result = compare_runs(
            a,
            b,
            unit_ms=unit_ms,
            resamples=resamples,
            confidence=confidence,
            seed=seed,
            report=report,
        )
    if as_json:
        sys.stdout.write(json.dumps(result.to_json(), indent=1) + "\n")
        return
    render_comparison(result, console, wide=_wide(wide))


@app.command()
def check(
    run_dir: Annotated[str, typer.Argument(help="Run directory (or SWEEPDIR:POINT).")],
    budget: Annotated[
        list[str],
        typer.Option(
            "--budget",
            "-b",
            help='[STREAM@]METRIC.STAT<VALUE UNIT, e.g. "e2e.p99<40ms"; repeat for more.',
        ),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
    unit_ms: UnitMs = None,
    wide: Wide = False,
) -> None:
    """Latency budgets for CI: exit 1 naming the budgets exceeded, 2 on a bad budget."""
    from latlab.pipeline import analysis_of
    from latlab.report.budget import check_budgets, failures_line, parse_budget, render_check
    from latlab.report.compare import resolve_run

    budgets = [parse_budget(text) for text in budget]
    run = resolve_run(run_dir)
    # another unit than the run's own is analysed for this check only, not stored
    results = check_budgets(budgets, analysis_of(run.path, unit_ms, write=unit_ms is None).streams)
    if as_json:
        sys.stdout.write(json.dumps([r.to_json() for r in results], indent=1) + "\n")
    else:
        render_check(results, console, wide=_wide(wide))
    failed = failures_line(results)
    if failed:
        err_console.print(f"latlab: {failed}", highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(1)


@app.command()
def ingest(
    run_dirs: Annotated[
        list[Path], typer.Argument(help="Run directories; a sweep directory: each point.")
    ],
    into: Annotated[Path, typer.Option("--into", help="Dataset directory (made if absent).")],
    label: Annotated[
        list[str] | None,
        typer.Option("--label", help="KEY=VALUE kept with every run (repeat for more)."),
    ] = None,
    revision: Annotated[
        str | None, typer.Option(help="Revision of the system under test (e.g. a commit).")
    ] = None,
    replace: Annotated[
        bool, typer.Option("--replace", help="Replace runs already in the dataset.")
    ] = False,
) -> None:
    """Append runs to a Parquet dataset for latlab query (docs/dataset.md); a run already
    in it is refused (--replace replaces it), one that cannot be read is skipped."""
    from latlab.dataset.commands import run_ingest

    with _status_line("ingesting") as report:
        run_ingest(
            run_dirs,
            into,
            labels=label or [],
            revision=revision,
            replace=replace,
            say=lambda text: console.print(text, highlight=False, markup=False, soft_wrap=True),
            warn=_error_line,
            report=report,
        )


@app.command()
def query(
    dataset: Annotated[Path, typer.Argument(help="Dataset directory (latlab ingest).")],
    question: Annotated[
        str | None,
        typer.Argument(help="runs, percentiles, trend, worst or regression (or give --sql)."),
    ] = None,
    sql: Annotated[
        str | None, typer.Option(help="Any SQL over segments, summaries, runs, labels.")
    ] = None,
    kind: Annotated[str | None, typer.Option(help="Metric: a segment kind's per-unit sum.")] = None,
    segment: Annotated[
        str | None, typer.Option(help="Metric: the segment ending at this probe.")
    ] = None,
    by: Annotated[list[str] | None, typer.Option(help="Group by this key (repeat).")] = None,
    where: Annotated[
        list[str] | None, typer.Option(help="Only runs with KEY=VALUE (repeat: all).")
    ] = None,
    stream: Annotated[str | None, typer.Option(help="Only streams whose path has this.")] = None,
    every: Annotated[str, typer.Option(help="trend: run, hour, day or month.")] = "day",
    limit: Annotated[int, typer.Option(help="worst: how many units.")] = 20,
    a: Annotated[list[str] | None, typer.Option("--a", help="regression: runs of A.")] = None,
    b: Annotated[list[str] | None, typer.Option("--b", help="regression: runs of B.")] = None,
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples.", min=100)] = 2000,
    confidence: Annotated[
        float, typer.Option(help="Confidence of the intervals.", min=0.5, max=0.999)
    ] = 0.95,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap.")] = 20261122,
    engine: Annotated[str, typer.Option(help="duckdb (embedded) or spark.")] = "duckdb",
    master: Annotated[str, typer.Option(help="Spark master URL.")] = "local[*]",
    as_json: Annotated[bool, typer.Option("--json", help="Print the answer as JSON.")] = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="Print the answer as CSV.")] = False,
    wide: Wide = False,
) -> None:
    """Ready questions over a dataset of runs, on DuckDB or Spark (docs/dataset.md)."""
    from latlab.dataset.commands import QueryRequest, run_query

    request = QueryRequest(
        dataset,
        question,
        sql,
        engine,
        master,
        kind,
        segment,
        where or [],
        by or [],
        stream,
        every,
        limit,
        a or [],
        b or [],
        {"resamples": resamples, "confidence": confidence, "seed": seed},
    )
    run_query(request, console, as_json=as_json, as_csv=as_csv, wide=_wide(wide))


lab_app = typer.Typer(
    name="lab",
    help="A standing lab (hosts and links of a scenario) for your own commands.",
    no_args_is_help=True,
)
app.add_typer(lab_app, name="lab")


@lab_app.command("up")
def lab_up(
    scenario: Annotated[Path, typer.Argument(help="Scenario file (TOML); processes ignored.")],
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Directory for link logs (default: runs/lab-TIME)."),
    ] = None,
) -> None:
    """Create the scenario's hosts and links, leave them up; print how to use them."""
    from latlab.lab.standing import lab_up as standing_up
    from latlab.lab.standing import state_path

    state = standing_up(scenario, out)
    console.print(f"lab '{state['name']}' is up ({state['scenario']})", highlight=False)
    table = Table(header_style="bold", box=None)
    for column in ("host", "namespace", "address"):
        table.add_column(column)
    for host, info in state["hosts"].items():
        table.add_row(host, info["namespace"], info["addr"])
    console.print(table)
    for link in state["links"]:
        backend = link.get("backend", "direct")
        console.print(f"link {link['between'][0]} <-> {link['between'][1]}: {backend}")
    first = next(iter(state["hosts"]))
    console.print(
        f"run a command:  latlab lab exec {first} -- ping -c 3 ADDRESS\n"
        f"                (or: ip netns exec {state['hosts'][first]['namespace']} CMD)\n"
        f"remove it:      latlab lab down  (link logs stay in {state['out_dir']})\n"
        f"state:          {state_path()}",
        highlight=False,
    )


@lab_app.command(
    "exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)
def lab_exec(
    host: Annotated[str, typer.Argument(help="Host of the standing lab.")],
    command: Annotated[list[str] | None, typer.Argument(help="Command to run (after --).")] = None,
) -> None:
    """Run a command inside a host's namespace; its exit code is passed through."""
    import os

    from latlab.lab.standing import exec_argv, host_cpus

    argv = exec_argv(host, list(command or []))
    sys.stdout.flush()
    try:
        cpus = host_cpus(host)
        if cpus:  # the host's CPUs, as latlab run gives its programs
            os.sched_setaffinity(0, cpus)
        os.execvp(argv[0], argv)
    except OSError as exc:
        raise UserInputError(f"{argv[0]}: cannot run: {exc.strerror}") from None


@lab_app.command("down")
def lab_down() -> None:
    """Stop the lab's link emulators and remove its namespaces; keeps the link logs."""
    from latlab.lab.standing import lab_down as standing_down

    state = standing_down()
    console.print(
        f"lab '{state['name']}' removed ({len(state['namespaces'])} namespaces); "
        f"logs: {state['out_dir']}",
        highlight=False,
    )


@lab_app.command("cleanup")
def lab_cleanup() -> None:
    """Remove what killed latlab runs left (namespaces, processes, audio servers), by
    their journals; a live run's and a standing lab's stay. `latlab run` does it first."""
    from latlab.lab.netns import cleanup_stale

    removed = cleanup_stale()
    for what in removed:
        console.print(f"removed {what}", highlight=False)
    console.print(f"{len(removed)} left-overs of killed runs removed", highlight=False)


signal_app = typer.Typer(
    name="signal",
    help="Black-box measurement with test audio: time codes (generate, decode), and the "
    "received audio against the sent (compare).",
    no_args_is_help=True,
)
app.add_typer(signal_app, name="signal")


@signal_app.command("generate")
def signal_generate(
    out: Annotated[Path, typer.Option("--out", "-o", help="WAV file to write.")],
    duration: Annotated[float, typer.Option(help="Length in seconds.")] = 60.0,
    rate: Annotated[int, typer.Option(help="Sample rate in Hz.")] = 48000,
    interval_ms: Annotated[float, typer.Option(help="Time between codes (>= 97 ms).")] = 200.0,
    start_ms: Annotated[float, typer.Option(help="Reference instant of the first code.")] = 500.0,
    level_dbfs: Annotated[float, typer.Option(help="RMS of the codes in dBFS.")] = -20.0,
    mix: Annotated[Path | None, typer.Option(help="WAV (speech, music) to mix in.")] = None,
    mix_db: Annotated[float, typer.Option(help="Gain applied to the --mix audio.")] = 0.0,
) -> None:
    """Write test audio carrying time codes, and OUT.codes.json (index, reference instant)."""
    from latlab.signal.commands import GenerateOptions, codes_path, generate_file

    options = GenerateOptions(out, duration, rate, interval_ms, start_ms, level_dbfs, mix, mix_db)
    document = generate_file(options)
    console.print(
        f"{out}: {len(document['codes'])} codes every {interval_ms:g} ms at {rate} Hz; "
        f"codes: {codes_path(out)}",
        highlight=False,
        markup=False,
    )


@signal_app.command("decode")
def signal_decode(
    recording: Annotated[Path, typer.Argument(help="Recording (WAV).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the codes as JSON.")] = False,
    channel: Annotated[int, typer.Option(help="Channel to read (0 = first).")] = 0,
    allow_clipped: Annotated[
        bool, typer.Option("--allow-clipped", help="Decode a clipped recording anyway.")
    ] = False,
    codes: Annotated[
        Path | None, typer.Option(help="OUT.codes.json of the sent audio: latency per code.")
    ] = None,
) -> None:
    """Find every time code in a recording: index, reference instant, confidence."""
    from latlab.signal.commands import decode_file, render_decoded

    document = decode_file(recording, channel, allow_clipped, codes)
    if as_json:
        sys.stdout.write(json.dumps(document) + "\n")
        return
    render_decoded(document, console)


@signal_app.command("compare")
def signal_compare(
    sent: Annotated[Path, typer.Argument(help="What was sent (WAV).")],
    received: Annotated[Path, typer.Argument(help="What was received (WAV).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print everything as JSON.")] = False,
    pesq: Annotated[bool, typer.Option("--pesq", help="PESQ MOS (speech only).")] = False,
    window_ms: Annotated[float, typer.Option(help="Correlation window.")] = 1000.0,
    hop_ms: Annotated[float, typer.Option(help="Step between windows.")] = 250.0,
    max_latency_ms: Annotated[float, typer.Option(help="Largest latency searched.")] = 2000.0,
) -> None:
    """Latency over time by windowed cross-correlation, disruptions (steps, dropouts,
    distortions) and PESQ of a recording against the audio that was sent."""
    from latlab.signal.commands import compare_files, render_comparison

    document = compare_files(
        sent, received, window_ms=window_ms, hop_ms=hop_ms,
        max_latency_ms=max_latency_ms, with_pesq=pesq,
    )  # fmt: skip
    if as_json:
        sys.stdout.write(json.dumps(document) + "\n")
        return
    render_comparison(document, console)


_DEBUG = {"on": False}


@app.callback()
def _options(
    debug: Annotated[
        bool,
        typer.Option("--debug", help="On an internal error, print the whole traceback."),
    ] = False,
) -> None:
    """Where does my end-to-end latency go? Per-stage latency distributions of real-time
    media. Exit codes: docs/exit-codes.md."""
    _DEBUG["on"] = debug


def _error_line(text: str) -> None:
    err_console.print(f"latlab: {text}", highlight=False, markup=False, soft_wrap=True)


def main() -> None:
    """Entry point: every error becomes one line on stderr and its exit code
    (latlab.errors); a bug prints its traceback only with ``--debug``.

    ``kill -USR1 PID`` prints every thread's Python stack to stderr (where a run hangs)."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    interruptible()
    try:
        app(prog_name="latlab")
    except LatlabError as exc:
        _error_line(f"error: {exc}")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        _error_line("interrupted")
        sys.exit(INTERRUPTED)
    except Terminated:
        _error_line("terminated")
        sys.exit(TERMINATED)
    except Exception as exc:  # a bug: say so in one line, the traceback with --debug
        if _DEBUG["on"]:
            traceback.print_exc()
        _error_line(
            f"internal error: {type(exc).__name__}: {exc} (a bug in latlab; "
            "run again with --debug for the traceback and report it)"
        )
        sys.exit(INTERNAL)
