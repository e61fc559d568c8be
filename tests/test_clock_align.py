"""Clock alignment with a stated error (docs/clocks.md), in the fast tier: the fit on
synthetic exchanges of planted offset, drift and path asymmetry, the sources' choice,
the clock logs' reader, and a synthetic run whose receiver is on another clock."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from latlab.analysis.clock_apply import FLAG_SHARE
from latlab.analysis.clocks import (
    ClockFit,
    PairAlignment,
    SourceResult,
    compose,
    exchange_intervals,
    fit_intervals,
    one_way_intervals,
)
from latlab.ingest.clock_log import read_clock_logs
from latlab.pipeline import analysis_of
from latlab.rundir import RUN_FILE, clock_log, read_json, write_json
from latlab.synthetic import MS, SyntheticRtpAudio, make_run_dir
from latlab.synthetic_clocks import PlantedClock, simulate_exchanges, write_clock_log

US = 1_000
OFFSETS_MS = (-500, -0.2, 0, 37, 500)
DRIFTS_PPM = (-100, -3, 0, 50, 100)
# one-way delays (forward, back) in us: symmetric, then up to 5 ms of asymmetry
PATHS_US = ((50, 50), (2_000, 2_000), (5_050, 50), (50, 5_050), (1_000, 3_500))


def _fit(clock: PlantedClock, path: tuple[int, int], **kw) -> ClockFit:
    t = simulate_exchanges(clock, path[0] * US, path[1] * US, **kw)
    result = fit_intervals(exchange_intervals(*t), "a", "b", "exchange")
    assert result.fit is not None, result.why
    return result.fit


def _worst_error(fit: ClockFit, clock: PlantedClock) -> float:
    t = np.linspace(fit.span_ns[0], fit.span_ns[1], 200)
    return float(np.max(np.abs(fit.offset_at(t) - clock.theta(t))))


@pytest.mark.parametrize(("offset_ms", "drift_ppm", "path"),
                         list(itertools.product(OFFSETS_MS, DRIFTS_PPM, PATHS_US)))  # fmt: skip
def test_the_recovered_offset_is_within_its_bound(
    offset_ms: float, drift_ppm: float, path: tuple[int, int]
) -> None:
    clock = PlantedClock(offset_ms * MS, drift_ppm)
    fit = _fit(clock, path, duration_s=60)
    assert _worst_error(fit, clock) <= fit.bound_ns
    # the bound is never less than half the round trip of an exchange used
    assert fit.bound_ns >= (path[0] + path[1]) * US / 2
    assert abs(fit.drift * 1e6 - drift_ppm) <= fit.drift_bound * 1e6


@pytest.mark.parametrize("drift_ppm", [-100, 0, 100])
def test_a_symmetric_path_gives_50_us_and_1_ppm_over_60_s(drift_ppm: float) -> None:
    """Symmetric 50 us paths with 20 us of queueing jitter each way (exponential): the
    narrowest exchange per 2 s window is within a few us of the truth."""
    clock = PlantedClock(-321 * MS, drift_ppm)
    fit = _fit(clock, (50, 50), duration_s=60, jitter_ns=20_000)
    assert _worst_error(fit, clock) <= 50 * US
    assert abs(fit.drift * 1e6 - drift_ppm) <= 1.0


def test_asymmetry_is_covered_not_seen() -> None:
    """5 ms one way, 50 us back: the midpoint is 2.5 ms off, and the bound says so."""
    clock = PlantedClock(100 * MS, 20)
    fit = _fit(clock, (5_050, 50))
    error = _worst_error(fit, clock)
    assert 2.4 * MS < error <= fit.bound_ns


def test_the_bound_grows_outside_the_span() -> None:
    fit = _fit(PlantedClock(0, 10), (100, 100), duration_s=20)
    inside = float(fit.bound_at(fit.span_ns[0]))
    length = fit.span_ns[1] - fit.span_ns[0]
    assert float(fit.bound_at(fit.span_ns[1] + length)) == pytest.approx(3 * inside)


def test_one_window_cannot_fit_a_drift() -> None:
    t = simulate_exchanges(PlantedClock(0, 0), 1e5, 1e5, duration_s=0.4)  # < one 0.5 s window
    result = fit_intervals(exchange_intervals(*t), "a", "b", "exchange")
    assert result.fit is None and "drift needs two" in result.why


def test_media_both_ways_bounds_the_offset() -> None:
    """Packets every 20 ms each way over 3 ms and 1 ms paths with jitter."""
    clock = PlantedClock(-250 * MS, 80)
    rng = np.random.default_rng(3)
    t_fwd = 1e12 + np.arange(3000) * 20 * MS
    d_fwd = 3 * MS + rng.exponential(200 * US, len(t_fwd))
    y_fwd = t_fwd + d_fwd + clock.theta(t_fwd + d_fwd) - t_fwd
    t_b = 1e12 + np.arange(3000) * 20 * MS + 7 * MS  # B's send instants on the true axis
    d_back = 1 * MS + rng.exponential(200 * US, len(t_b))
    arrive = t_b + d_back
    y_back = arrive - (t_b + clock.theta(t_b))
    obs = one_way_intervals(t_fwd, y_fwd, arrive, y_back)
    result = fit_intervals(obs, "a", "b", "media")
    assert result.fit is not None
    assert _worst_error(result.fit, clock) <= result.fit.bound_ns
    assert result.fit.bound_ns < 2.5 * MS  # half of 4 ms, and a little of the windows


def _chosen(a: str, b: str, offset: float, bound: float) -> PairAlignment:
    fit = ClockFit(a, b, "exchange", 0, offset, 0.0, bound, (0, 10**10), 5, 5, bound)
    return PairAlignment(a, b, [SourceResult("exchange", fit)], fit)


def test_compose_chains_through_the_tightest_path() -> None:
    pairs = [_chosen("a", "b", 10.0, 5.0), _chosen("b", "c", 20.0, 5.0),
             _chosen("a", "c", 31.0, 100.0)]  # fmt: skip
    cmap = compose("a", ["a", "b", "c"], pairs)
    via_b = cmap.to_reference["c"]  # c -> a: through b (5 + 5 < 100)
    assert via_b.bound_ns == pytest.approx(10.0)
    assert float(via_b.offset_at(0)) == pytest.approx(-30.0)
    lone = compose("a", ["a", "b", "d"], [_chosen("a", "b", 1.0, 1.0)])
    assert "d" in lone.unaligned


def test_the_clock_log_reader_skips_damage(tmp_path: Path) -> None:
    t = simulate_exchanges(PlantedClock(5 * MS, 0), 1e5, 1e5, duration_s=4)
    path = clock_log(tmp_path, "tx")
    write_clock_log(path, "monotonic@tx", exchanges={"monotonic@rx": t})
    with path.open("a", encoding="utf-8") as f:
        f.write('{"type": "exchange", "peer": "monotonic@rx", "t1": 1')  # cut short
    logs = read_clock_logs(tmp_path)
    (ex,) = logs.exchanges
    assert (ex.client, ex.server, len(ex.t1)) == ("monotonic@tx", "monotonic@rx", len(t[0]))
    assert logs.problems == ["tx.jsonl: 1 line(s) unreadable, skipped"]


def _two_domain_run(
    out: Path, offset_ms: float, drift_ppm: float, *, exchanges: bool = True, units: int = 1000
) -> None:
    """The synthetic RTP run (3 ms network) with its receiver on another clock."""
    params = SyntheticRtpAudio(units=units, receiver_offset=round(offset_ms * MS),
                               receiver_drift_ppm=drift_ppm)  # fmt: skip
    make_run_dir(out, params)
    run = read_json(out / RUN_FILE)
    run["hosts"] = {"tx": {"clock_domain": "monotonic@tx"}, "rx": {"clock_domain": "monotonic@rx"}}
    run["clock"] = {"domains": {"monotonic@tx": {}, "monotonic@rx": {}}}
    write_json(out / RUN_FILE, run)
    start = params.sender_base - 2_000 * MS
    duration = units * params.source_period / 1e9 + 4
    planted = PlantedClock(offset_ms * MS - drift_ppm * 1e-6 * params.sender_base, drift_ppm)
    ex = simulate_exchanges(planted, 60 * US, 60 * US, duration_s=duration, start_ns=start)
    mono = start + np.arange(0, duration * 1e9, 1e9)
    write_clock_log(clock_log(out, "tx"), "monotonic@tx", pairs=(mono, mono + 1.7e18),
                    exchanges={"monotonic@rx": ex} if exchanges else None)  # fmt: skip
    rx = mono + planted.theta(mono)
    write_clock_log(clock_log(out, "rx"), "monotonic@rx", pairs=(rx, mono + 1.7e18))


def _network(summary: dict) -> dict:
    (stream,) = summary["streams"]
    return next(s for s in stream["segments"] if s["to"] == "receiver/udpsrc0:src")


@pytest.mark.parametrize("drift_ppm", [0, 80])
def test_a_receiver_on_another_clock_recovers_the_network_delay(
    tmp_path: Path, drift_ppm: float
) -> None:
    """Planted 3 ms network, receiver 250 ms ahead (and 80 ppm fast): the network segment
    is 3 ms within its clock error; segments inside one machine are those of the run on
    one clock, exactly, as the receiver's own clock measured them (80 ppm fast: 1.6 us
    more over its 20 ms jitter buffer)."""
    same = analysis_of(_make(tmp_path / "one", 0, 0), write=False).summary
    two = analysis_of(_make(tmp_path / "two", 250, drift_ppm), write=False).summary
    net = _network(two)
    assert net["cross_domain"] and net["clock_err_ms"] < 0.1
    assert abs(net["p50_ms"] - _network(same)["p50_ms"]) <= net["clock_err_ms"]
    assert not net["clock_flagged"]  # 0.06 ms is well under 10 % of 3 ms
    (s1,), (s2,) = same["streams"], two["streams"]
    for a, b in zip(s1["segments"], s2["segments"], strict=True):
        if not b["cross_domain"]:
            on_its_clock = (
                a["max_ms"] * (1 + drift_ppm * 1e-6) if "receiver" in b["to"] else a["max_ms"]
            )
            assert b["max_ms"] == pytest.approx(on_its_clock, abs=1e-6)  # ns rounding
            assert b["clock_err_ms"] == 0
    # end to end: the same map, plus the drift over the receiver's 40 ms from its anchor
    # (80 ppm: 3.2 us; 0 ppm: the fitted drift's few ns)
    assert 0 <= s2["end_to_end"]["clock_err_ms"] - net["clock_err_ms"] < 0.005
    clocks = two["clocks"]
    assert clocks["reference"] == "monotonic@tx" and clocks["flag_share"] == FLAG_SHARE
    rx = clocks["domains"]["monotonic@rx"]
    assert rx["source"] == "exchange" and rx["aligned"]
    (pair,) = clocks["pairs"]
    assert pair["chosen"] == "exchange"
    kernel = next(s for s in pair["sources"] if s["source"] == "kernel")
    assert not kernel["valid"] and "not synchronised" in kernel["why"]


def _make(out: Path, offset_ms: float, drift_ppm: float) -> Path:
    if offset_ms or drift_ppm:
        _two_domain_run(out, offset_ms, drift_ppm)
    else:
        make_run_dir(out, SyntheticRtpAudio(units=1000))
    return out


def test_without_a_source_the_figures_say_so(tmp_path: Path) -> None:
    _two_domain_run(tmp_path, 100, 0, exchanges=False)
    summary = analysis_of(tmp_path, write=False).summary
    net = _network(summary)
    assert net["cross_domain"] and net["clock_err_ms"] is None and net["clock_flagged"]
    assert not summary["clocks"]["domains"]["monotonic@rx"]["aligned"]
    assert json.dumps(summary)  # still plain JSON


def _split(run: Path, out: Path, process: str, host: str, clock_file: str) -> Path:
    """One machine's part of the two-domain synthetic run, as ``latlab record`` writes it."""
    whole = read_json(run / RUN_FILE)
    (out / "traces").mkdir(parents=True)
    (out / "clock").mkdir()
    entry = next(p for p in whole["processes"] if p["name"] == process)
    trace = f"{process}-{entry['pid']}.lltrace"
    (out / "traces" / trace).write_bytes((run / "traces" / trace).read_bytes())
    (out / "clock" / clock_file).write_bytes((run / "clock" / clock_file).read_bytes())
    domain = f"monotonic@{host}"
    write_json(out / RUN_FILE, {**whole, "kind": "record", "name": process, "hosts": {},
                                "processes": [{**entry, "host": None, "clock_domain": domain}],
                                "clock": {"domain": domain, "domains": {domain: {}}}})  # fmt: skip
    return out


def test_merge_of_two_machines_reproduces_the_single_run(tmp_path: Path) -> None:
    """The two-domain synthetic run, split into a record run per machine and merged again,
    gives the same summary figures as analysed whole."""
    from latlab.merge import merge_runs

    whole = tmp_path / "whole"
    _two_domain_run(whole, -400, 60)
    tx = _split(whole, tmp_path / "tx", "sender", "tx", "tx.jsonl")
    rx = _split(whole, tmp_path / "rx", "receiver", "rx", "rx.jsonl")
    merged = merge_runs([tx, rx], tmp_path / "merged")
    assert merged["kind"] == "merged" and merged["clock"]["reference"] == "monotonic@tx"
    one = analysis_of(whole, write=False).summary
    two = analysis_of(tmp_path / "merged", write=False).summary
    (a,), (b,) = one["streams"], two["streams"]
    assert a["probes"] == b["probes"]
    for x, y in zip([*a["segments"], a["end_to_end"]], [*b["segments"], b["end_to_end"]],
                    strict=True):  # fmt: skip
        assert {k: x[k] for k in ("p50_ms", "p99_ms", "clock_err_ms", "cross_domain")} == {
            k: y[k] for k in ("p50_ms", "p99_ms", "clock_err_ms", "cross_domain")
        }


def test_merge_refuses_what_is_not_two_runs(tmp_path: Path) -> None:
    from latlab.merge import merge_runs
    from latlab.rundir import RunDirError

    make_run_dir(tmp_path / "a", SyntheticRtpAudio(units=100))
    with pytest.raises(RunDirError, match="two run directories"):
        merge_runs([tmp_path / "a"], tmp_path / "out")
    with pytest.raises(RunDirError, match="given twice"):
        merge_runs([tmp_path / "a", tmp_path / "a"], tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunDirError, match=r"no run\.json"):
        merge_runs([tmp_path / "a", tmp_path / "empty"], tmp_path / "out")


LATLAB = Path(__file__).resolve().parents[1] / "latlab"


def test_two_agents_on_loopback_find_no_offset_within_their_bound(tmp_path: Path) -> None:
    """Two clock agents of one machine (one clock) exchanging over 127.0.0.1 until each
    has logged enough: the exchange finds offset 0 within its bound."""
    import threading

    from latlab.analysis.clock_apply import exchange_result
    from latlab.lab.clockd import ClockAgent

    server = ClockAgent(clock_log(tmp_path, "b"), "monotonic@b", serve=("127.0.0.1", 0))
    port = server._server.getsockname()[1]  # type: ignore[union-attr]
    client = ClockAgent(clock_log(tmp_path, "a"), "monotonic@a", peers={None: ("127.0.0.1", port)},
                        rate_hz=50)  # fmt: skip
    server.start()
    client.start()
    done = threading.Event()
    # 2 windows of 2 s need 4 s of exchanges: wait on the agent's own count (50 a second)
    for _ in range(200):
        if client.exchanges >= 220 or done.wait(0.05):
            break
    client.stop()
    server.stop()
    result = exchange_result(read_clock_logs(tmp_path), "monotonic@a", "monotonic@b")
    assert result.fit is not None, result.why
    assert abs(result.fit.offset_ns) <= result.fit.bound_ns
    assert result.fit.min_width_ns < 5 * MS  # a loopback round trip


def test_record_samples_its_clock_and_names_its_domain(tmp_path: Path) -> None:
    import subprocess

    out = tmp_path / "rec"
    done = subprocess.run([str(LATLAB), "record", "--out", str(out), "--no-analyze",
                           "--clock-domain", "monotonic@here", "--", "true"],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    run = read_json(out / RUN_FILE)
    assert run["clock"]["domain"] == "monotonic@here"
    assert run["processes"][0]["clock_domain"] == "monotonic@here"
    logs = read_clock_logs(out)
    assert list(logs.domains) == ["monotonic@here"]
    assert len(logs.domains["monotonic@here"].mono_ns) >= 2  # at start and at the end
    bad = subprocess.run([str(LATLAB), "record", "--out", str(tmp_path / "x"),
                          "--clock-peer", "nowhere", "--", "true"],
                         capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "latlab: error: record: --clock-peer 'nowhere': not ADDRESS:PORT (a port from 1 to 65535)"
    ]


def test_a_standing_lab_refuses_hosts_with_their_own_clocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from latlab.lab.standing import StandingLabError, lab_up

    monkeypatch.setenv("LATLAB_STATE_DIR", str(tmp_path / "state"))
    scenario = tmp_path / "clocks.toml"
    scenario.write_text('name = "c"\nduration_s = 1\n[hosts.tx]\nclock = { offset_ms = 5 }\n'
                        "[hosts.rx]\n")  # fmt: skip
    with pytest.raises(StandingLabError, match="tx have their own clocks"):
        lab_up(scenario, tmp_path / "out")


def test_media_seen_a_little_before_it_was_sent_still_bounds_the_offset() -> None:
    """A network sink's render is when its send call returned, up to tens of us after the
    receiver read the packet (docs/architecture.md, known limits): one-way media delays of
    -30 us to 20 us each way, widened by MEDIA_SLACK_NS, still bound the offset."""
    from latlab.analysis.clock_apply import MEDIA_SLACK_NS

    clock = PlantedClock(120 * MS, -40)
    rng = np.random.default_rng(5)
    t_a = 1e12 + np.arange(2000) * 10 * MS
    d_fwd = rng.uniform(-30 * US, 20 * US, len(t_a))
    y_fwd = d_fwd + clock.theta(t_a + d_fwd)
    t_b = t_a + 3 * MS
    d_back = rng.uniform(-30 * US, 20 * US, len(t_b))
    y_back = t_b + d_back - (t_b + clock.theta(t_b))
    obs = one_way_intervals(t_a, y_fwd + MEDIA_SLACK_NS, t_b + d_back, y_back + MEDIA_SLACK_NS)
    result = fit_intervals(obs, "a", "b", "media")
    assert result.fit is not None, result.why
    assert _worst_error(result.fit, clock) <= result.fit.bound_ns <= 100 * US


def test_every_view_carries_the_clock_error(tmp_path: Path) -> None:
    """The terminal table (±clk column, the clocks line), the HTML report (its column and
    Clocks section) and the Perfetto trace (each crossing slice's clock_err_ms)."""
    from rich.console import Console

    from latlab.report.html import report_html
    from latlab.report.perfetto import export_perfetto
    from latlab.report.table import render_summary

    run = tmp_path / "run"
    _two_domain_run(run, 250, 80, units=300)
    summary = analysis_of(run).summary
    console = Console(width=80, record=True, force_terminal=False)
    render_summary(summary, console)
    text = console.export_text()
    assert "±clk" in text and "clocks: reference monotonic@tx" in text
    assert "monotonic@rx: exchange, offset" in text
    html = report_html(run, tmp_path / "r.html").read_text(encoding="utf-8")
    assert "±clk ms" in html and '<section id="clocks">' in html
    export_perfetto(run, tmp_path / "t.json")
    trace = json.loads((tmp_path / "t.json").read_text(encoding="utf-8"))
    crossing = [e for e in trace["traceEvents"] if "clock_err_ms" in e.get("args", {})]
    assert crossing and all(e["args"]["clock_err_ms"] > 0 for e in crossing)
    assert trace["otherData"]["clocks"]["reference"] == "monotonic@tx"
