"""The link emulator on real namespaces: loss models, delay moments, rate, ordering,
schedules, reverse overrides, its death during a run, and scenario validation."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from latlab.ingest.link_log import (
    DELIVERED,
    LOSS,
    LinkLog,
    LinkLogError,
    late_release_problems,
    read_link_log,
    release_summary,
    traffic_summary,
)
from latlab.lab.links import LINKEMU, UDPGEN, emulator_config
from latlab.lab.netns import Lab, LabError, ip, list_namespaces
from latlab.lab.runner import RunError, run_scenario
from latlab.lab.scenario import ScenarioError, parse_scenario
from latlab.pipeline import analyze_run
from tests.test_fuzz_inputs import link_log_bytes

needs_lab = pytest.mark.skipif(
    os.geteuid() != 0 or not LINKEMU.is_file() or not UDPGEN.is_file(),
    reason="needs root and the built linkemu crate (bash scripts/setup.sh)",
)

BASE = """
name = "t"
duration_s = 10
[hosts.tx]
[hosts.rx]
[[links]]
between = ["tx", "rx"]
{link}
[processes.p]
host = "tx"
pipeline = "fakesrc ! fakesink"
"""

L16_BASIC = Path(__file__).resolve().parent.parent / "scenarios" / "l16-basic.toml"


def l16(duration: float, link: str) -> str:
    """The flagship scenario's text with extra keys on its link."""
    text = L16_BASIC.read_text(encoding="utf-8").replace(
        "duration_s = 10", f"duration_s = {duration}"
    )
    marker = 'between = ["tx", "rx"]\n'
    assert marker in text
    return text.replace(marker, marker + link + "\n")


def config(forward: Mapping[str, Any], reverse: Mapping[str, Any] | None = None,
           schedule: list[dict[str, Any]] | None = None) -> dict[str, Any]:  # fmt: skip
    return {"name": "tx-rx", "between": ["tx", "rx"], "forward": dict(forward),
            "reverse": dict(reverse or {}), "schedule": schedule or [], "seed": 3}  # fmt: skip


def send(lab: Lab, src: str, dst: str, pps: int, count: int, size: int = 200) -> subprocess.Popen:
    argv = [str(UDPGEN), "--dst", f"{lab.addr(dst)}:5004", "--pps", str(pps),
            "--count", str(count), "--size", str(size)]  # fmt: skip
    return subprocess.Popen(lab.exec_argv(src, argv), stdout=subprocess.PIPE, text=True)


def run_link(tmp: Path, cfg: dict[str, Any], flows: list[tuple[str, str, int, int]],
             size: int = 200) -> LinkLog:  # fmt: skip
    """Send each (src, dst, pps, count) flow at once through one emulated link; its log."""
    with Lab(["tx", "rx"], [("tx", "rx")], run_dir=tmp, link_configs=[cfg]) as lab:
        senders = [send(lab, s, d, pps, n, size) for s, d, pps, n in flows]
        for sender in senders:
            assert sender.wait(timeout=30) == 0
    return read_link_log(tmp / "links" / "tx-rx.lllink")


def flow(log: LinkLog, direction: int) -> dict[str, np.ndarray]:
    """The generator's packets in one direction, in sending order."""
    c = log.columns
    mask = (c["direction"] == direction) & c["is_rtp"] & (c["dst_port"] == 5004)
    order = np.argsort(c["packet_id"][mask], kind="stable")
    return {k: v[mask][order] for k, v in c.items()}


def delays_ms(f: dict[str, np.ndarray]) -> np.ndarray:
    sent = f["released_ns"] > 0
    return (f["released_ns"][sent].astype(np.int64) - f["arrival_ns"][sent].astype(np.int64)) / 1e6


# -- scenario validation (no root needed) --------------------------------------------------


@pytest.mark.parametrize(
    ("link", "message"),
    [
        ("delay_ms = -1", "links[0].delay_ms: must be a non-negative number, not -1"),
        ("loss_pct = 101", "links[0].loss_pct: is a percentage: at most 100, not 101"),
        ('jitter_dist = "cauchy"', "links[0].jitter_dist: unknown jitter_dist 'cauchy'"),
        ("rate_kbit = 0", "links[0].rate_kbit: must be > 0 (omit rate_kbit"),
        ("delay = 5", "links[0]: unknown key 'delay'"),
        ("ge_p = 1", 'links[0].ge_p: needs loss_model = "gilbert-elliott"'),
        ('loss_model = "gilbert-elliott"', "needs ge_p"),
        ('loss_model = "gilbert-elliott"\nge_p = 1\nloss_pct = 2', "loss_pct: does not apply"),
        ("[links.reverse]\njitter_ms = -2", "links[0].reverse.jitter_ms: must be a non-negative"),
        ("[links.reverse]\nbogus = 1", "links[0].reverse: unknown key 'bogus'"),
        ("[[links.schedule]]\nat_s = 11\ndelay_ms = 1", "at_s: 11 is beyond duration_s 10"),
        ("[[links.schedule]]\nat_s = 1", "links[0].schedule[0]: sets no impairment key"),
        ('[[links.schedule]]\nat_s = 1\ndirection = "up"\ndelay_ms = 1', "unknown direction"),
        ("[[links.schedule]]\nat_s = 1\nge_r = 5", "schedule[0].ge_r: needs loss_model"),
    ],
)
def test_bad_link_keys_are_one_line_errors(link: str, message: str) -> None:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(BASE.format(link=link), "bad.toml")
    text = str(err.value)
    assert text.startswith("bad.toml: ") and "\n" not in text
    assert message in text, text


def test_config_from_scenario_merges_reverse_and_schedule() -> None:
    link = """delay_ms = 10
jitter_ms = 2
loss_model = "gilbert-elliott"
ge_p = 1
[links.reverse]
delay_ms = 4
[[links.schedule]]
at_s = 5
direction = "reverse"
rate_kbit = 600
[[links.schedule]]
at_s = 2
delay_ms = 30"""
    scenario = parse_scenario(BASE.format(link=link), "ok.toml")
    cfg = emulator_config(scenario.links[0])
    assert cfg is not None
    assert cfg["forward"] == {"delay_ms": 10, "jitter_ms": 2, "loss_model": "gilbert-elliott",
                              "ge_p": 1, "ge_r": 99}  # fmt: skip
    assert cfg["reverse"]["delay_ms"] == 4 and cfg["reverse"]["jitter_ms"] == 2
    assert [e["at_s"] for e in cfg["schedule"]] == [2, 5]
    assert cfg["schedule"][1] == {"at_s": 5, "direction": "reverse", "set": {"rate_kbit": 600}}
    plain = parse_scenario(BASE.format(link=""), "plain.toml").links[0]
    assert not plain.impaired and emulator_config(plain) is None


def test_foreign_and_truncated_logs(tmp_path: Path) -> None:
    foreign = tmp_path / "x.lllink"
    foreign.write_bytes(b"NOTALOG\0" + bytes(100))
    with pytest.raises(LinkLogError, match="not a latlab link log"):
        read_link_log(foreign)
    future = tmp_path / "v9.lllink"
    future.write_bytes(b"LLLINK\0\0" + (9).to_bytes(2, "little") + bytes(100))
    with pytest.raises(LinkLogError, match="version 9 is not supported"):
        read_link_log(future)


def test_late_releases_are_counted_and_named(tmp_path: Path) -> None:
    """Known answer: forward, 1000 copies released 0-9 µs after their schedule and three
    1.5, 2 and 7.8 ms after it, two dropped (never released); reverse, all on time."""
    on_time = np.arange(1000) % 10 * 1_000
    late = np.array([1_500_000, 2_000_000, 7_800_000])
    error = np.concatenate([on_time, late, [0, 0], on_time[:100]])
    n = len(error)
    scheduled = 10_000_000 + np.arange(n, dtype=np.int64) * 100_000
    released = scheduled + error
    released[1003:1005] = 0  # dropped
    direction = np.r_[np.zeros(1005), np.ones(100)].astype(np.uint8)
    path = tmp_path / "tx-rx.lllink"
    path.write_bytes(link_log_bytes({"arrival_ns": scheduled - 20_000_000,
                                     "scheduled_ns": scheduled, "released_ns": released,
                                     "direction": direction, "packet_id": np.arange(n)},
                                    ("tx", "rx")))  # fmt: skip
    rows = release_summary(read_link_log(path))
    forward, reverse = rows
    assert forward == {"direction": "tx->rx", "released": 1003, "p50_us": 5.0,
                       "p99_us": pytest.approx(9.0), "max_us": 7800.0, "late": 3}  # fmt: skip
    assert reverse["late"] == 0 and reverse["released"] == 100 and reverse["max_us"] == 9.0
    [problem] = late_release_problems(rows)
    assert problem == (
        "tx->rx: 3 of 1003 packets released more than 1 ms after their "
        "schedule (latest 7.80 ms late): their delay was not the one asked for"
    )


# -- on real namespaces ------------------------------------------------------------------


@pytest.mark.exclusive
@pytest.mark.e2e
@needs_lab
def test_loss_models(tmp_path: Path) -> None:
    """Bernoulli 5 % forward and Gilbert-Elliott (p 2 %, r 20 %) reverse, 20 000 each."""
    n = 20_000
    ge = {"loss_model": "gilbert-elliott", "ge_p": 2, "ge_r": 20}
    log = run_link(tmp_path, config({"loss_pct": 5}, ge),
                   [("tx", "rx", 10_000, n), ("rx", "tx", 10_000, n)])  # fmt: skip
    assert log.closed and not log.problems
    fwd = flow(log, 0)
    lost = np.count_nonzero(fwd["verdict"] == LOSS)
    offered = len(fwd["verdict"])
    assert offered > 0.99 * n
    sigma = np.sqrt(offered * 0.05 * 0.95)
    assert abs(lost - 0.05 * offered) < 5 * sigma, (lost, offered)

    rev = flow(log, 1)
    lost_mask = rev["verdict"] == LOSS
    p, r = 0.02, 0.20
    pi_bad = p / (p + r)
    lam = 1 - p - r  # the chain's correlation per packet
    sigma = np.sqrt(pi_bad * (1 - pi_bad) * (1 + lam) / (1 - lam) / len(lost_mask))
    assert abs(lost_mask.mean() - pi_bad) < 5 * sigma, lost_mask.mean()
    edges = np.diff(np.concatenate([[0], lost_mask.astype(np.int8), [0]]))
    bursts = np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)
    burst_sd = np.sqrt((1 - r) / r**2)  # geometric with mean 1 / r
    assert abs(bursts.mean() - 1 / r) < 5 * burst_sd / np.sqrt(len(bursts)), bursts.mean()


@pytest.mark.exclusive
@pytest.mark.e2e
@needs_lab
def test_delay_moments_and_reverse_override(tmp_path: Path) -> None:
    """Forward 10 ms with normal 2 ms jitter; reverse overrides: 4 ms, uniform +-2 ms."""
    link = 'delay_ms = 10\njitter_ms = 2\njitter_dist = "normal"\n[links.reverse]\n'
    link += 'delay_ms = 4\njitter_dist = "uniform"'
    scenario = parse_scenario(BASE.format(link=link), "moments.toml")
    cfg = emulator_config(scenario.links[0])
    assert cfg is not None
    n = 5_000
    log = run_link(tmp_path, cfg, [("tx", "rx", 2_500, n), ("rx", "tx", 2_500, n)])
    for direction, mean, sd in ((0, 10.0, 2.0), (1, 4.0, 2.0 / np.sqrt(3))):
        d = delays_ms(flow(log, direction))
        assert len(d) > 0.99 * n
        assert abs(d.mean() - mean) < 5 * sd / np.sqrt(len(d)) + 0.02, (direction, d.mean())
        assert abs(d.std() - sd) < 5 * sd / np.sqrt(2 * len(d)) + 0.02, (direction, d.std())
    rev = flow(log, 1)
    planned = (rev["scheduled_ns"].astype(np.int64) - rev["arrival_ns"].astype(np.int64)) / 1e6
    assert planned.min() >= 2.0 and planned.max() <= 6.0  # uniform: within delay +- jitter


@pytest.mark.exclusive
@pytest.mark.e2e
@needs_lab
def test_rate_bottleneck(tmp_path: Path) -> None:
    kbit, payload = 1000, 1000
    frame = payload + 8 + 20 + 14
    pps = int(kbit * 1000 * 1.25 / (frame * 8))
    cfg = config({"rate_kbit": kbit, "queue_ms": 50})
    log = run_link(tmp_path, cfg, [("tx", "rx", pps, pps * 3)], size=payload)
    f = flow(log, 0)
    ok = f["verdict"] == DELIVERED
    t = np.sort(f["released_ns"][ok].astype(np.int64))
    rate = f["size"][ok][1:].sum() * 8 / ((t[-1] - t[0]) / 1e9) / 1000
    assert abs(rate / kbit - 1) < 0.03, rate
    assert np.count_nonzero(f["verdict"] == 2) > 0  # the 25 % excess is tail-dropped
    summary = traffic_summary(log)
    udp = next(r for r in summary if r["protocol"] == "UDP" and r["port"] == 5004)
    assert udp["direction"] == "tx->rx" and udp["packets"] == len(f["verdict"])


@pytest.mark.exclusive
@pytest.mark.e2e
@needs_lab
def test_fifo_without_jitter_and_schedule_step(tmp_path: Path) -> None:
    """20 ms, then 5 ms from at_s = 1: the step applies on time and nothing overtakes."""
    cfg = config({"delay_ms": 20}, schedule=[{"at_s": 1.0, "direction": "forward",
                                              "set": {"delay_ms": 5}}])  # fmt: skip
    log = run_link(tmp_path, cfg, [("tx", "rx", 5_000, 10_000)])
    f = flow(log, 0)
    assert np.all(f["verdict"] == DELIVERED)
    released = f["released_ns"].astype(np.int64)
    assert np.all(np.diff(released) >= 0), "reordered without jitter"
    step = log.start_ns + 1_000_000_000
    arrival = f["arrival_ns"].astype(np.int64)
    planned = (f["scheduled_ns"].astype(np.int64) - arrival) / 1e6
    assert np.allclose(planned[arrival < step], 20, atol=0.001)
    after = arrival > step + 20_000_000  # past the packets still held behind the old delay
    assert after.sum() > 1000 and np.allclose(planned[after], 5, atol=0.001)
    held = (arrival >= step) & ~after
    assert np.all(planned[held] >= 5 - 0.001)


@pytest.mark.e2e
@needs_lab
def test_emulator_death_fails_the_run_and_cleans_up(tmp_path: Path) -> None:
    scenario = parse_scenario(l16(5, "delay_ms = 5"), "death.toml")
    out = tmp_path / "run"
    killer = threading.Thread(target=kill_emulator_when_running, args=(out,), daemon=True)
    killer.start()
    with pytest.raises(RunError) as err:
        run_scenario(scenario, out, progress=False)
    text = str(err.value)
    assert "\n" not in text and "link tx-rx" in text and "latlab-linkemu died" in text, text
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "failed" and "link tx-rx" in run["error"]
    assert run["links"][0]["backend"] == "latlab-linkemu"
    assert not [ns for ns in list_namespaces() if ns.startswith(f"llab-{os.getpid()}-")]


def kill_emulator_when_running(out: Path) -> None:
    """SIGKILL the emulator of link 0 once the run's processes are started."""
    deadline = time.monotonic() + 20
    router = f"llab-{os.getpid()}-l0"
    while time.monotonic() < deadline:
        if (out / "logs" / "sender.stdout").exists() and router in list_namespaces():
            pids = ip("netns", "pids", router, check=False).stdout.split()
            if pids:
                time.sleep(0.5)  # let the run reach its measuring phase
                os.kill(int(pids[0]), signal.SIGKILL)
                return
        time.sleep(0.05)


@pytest.mark.e2e
@needs_lab
def test_lab_error_names_the_dead_link(tmp_path: Path) -> None:
    with Lab(["tx", "rx"], [("tx", "rx")], run_dir=tmp_path,
             link_configs=[config({"delay_ms": 1})]) as lab:  # fmt: skip
        lab.check_links()
        pid = lab.emulators[0].child.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        lab.emulators[0].child.popen.wait(timeout=60)  # type: ignore[union-attr]
        with pytest.raises(LabError, match="link tx-rx: latlab-linkemu died"):
            lab.check_links()
    assert not [ns for ns in list_namespaces() if ns.startswith(f"llab-{os.getpid()}-")]


@pytest.mark.exclusive
@needs_lab
@pytest.mark.e2e
def test_l16_over_20ms_link_network_segment(tmp_path: Path) -> None:
    scenario = parse_scenario(l16(3, "delay_ms = 20"), "l16-delay.toml")
    out = tmp_path / "run"
    result = run_scenario(scenario, out, progress=False)
    link = result.run["links"][0]
    assert link["backend"] == "latlab-linkemu" and link["log"] == "links/tx-rx.lllink"
    summary, _, _ = analyze_run(out, scenario.analysis.unit_ms)
    segments = summary["streams"][0]["segments"]
    names = [s["to"] for s in segments]
    start = names.index("sender/udpsink0:sink") + 1
    end = names.index("receiver/udpsrc0:src") + 1
    network = sum(s["p50_ms"] for s in segments[start:end])  # link probes may split it
    assert network == pytest.approx(20, abs=1), segments[start:end]
    # By kind, the network is the link's 20 ms plus the stacks (20.027-20.056 ms at p50
    # over three runs here); udpsink's clock wait on the sender is its own kind.
    kinds = summary["streams"][0]["kinds"]
    assert 20 - NETWORK_KIND_MS <= kinds["network"]["p50_ms"] <= 20 + NETWORK_KIND_MS, kinds
    assert segments[start - 1]["kind"] == "sink-wait"
    log = read_link_log(out / "links" / "tx-rx.lllink")
    rtp = flow_rtp(log)
    assert len(rtp) > 250 and rtp.min() >= 20 - 0.001
    assert np.median(rtp) == pytest.approx(20, abs=0.05)
    # how exactly the emulator kept its schedule is in the summary, late copies named
    [link_summary] = summary["links"]
    release = {row["direction"]: row for row in link_summary["release"]}["tx->rx"]
    assert release["released"] >= len(rtp)  # and ARP, IPv6 neighbour discovery
    assert release["p50_us"] <= release["p99_us"] <= release["max_us"]
    named = [p for p in link_summary["problems"] if "after their schedule" in p]
    assert len(named) == (release["late"] > 0), link_summary["problems"]


NETWORK_KIND_MS = 0.3  # issue 14: the network kind is the link's delay plus the stacks


def flow_rtp(log: LinkLog) -> np.ndarray:
    c = log.columns
    m = (c["direction"] == 0) & c["is_rtp"] & (c["released_ns"] > 0)
    return (c["released_ns"][m].astype(np.int64) - c["arrival_ns"][m].astype(np.int64)) / 1e6
