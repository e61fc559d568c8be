"""The GStreamer webrtcbin peer in a call with Chromium: traced, both directions, bad input.

Real Chromium and the real webrtcbin program (system python with gi) in network
namespaces (root), the real page server and link emulator.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import threading
from collections import Counter
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from latlab.ingest.events import EventTable, load_run
from latlab.ingest.link_log import read_link_log
from latlab.lab.browser import CHROMIUM, BrowserError, check_gst_peer
from latlab.lab.netns import list_namespaces, namespace_name
from latlab.lab.runner import RunError, run_scenario
from latlab.lab.scenario import ScenarioError, parse_scenario
from latlab.pipeline import analyze_run
from latlab.tracer import is_built


@cache
def gi_problem() -> str:
    """Why the system python cannot run the webrtcbin peer ("" if it can)."""
    try:
        check_gst_peer()
    except BrowserError as exc:
        return str(exc)
    return ""


NEEDS_LAB = (
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
    pytest.mark.skipif(
        not os.access(CHROMIUM, os.X_OK),
        reason=f"{CHROMIUM} missing (bash scripts/setup.sh installs chromium)",
    ),
    pytest.mark.skipif(not is_built(), reason="tracer plugin not built"),
)


def lab(test: Callable[..., None]) -> Callable[..., None]:
    """Mark a test that runs Chromium and the webrtcbin peer in namespaces."""
    for mark in NEEDS_LAB:
        test = mark(test)
    return test


def needs_gi() -> None:
    if gi_problem():
        pytest.skip(gi_problem())


def gst_scenario(
    *, caller: str = "alice", bob: str = "", duration: float = 5, delay_ms: float = 30
) -> str:
    """alice (Chromium, host a) and bob (webrtcbin, host b) in a call over a 30 ms link."""
    callee = "bob" if caller == "alice" else "alice"
    return f"""\
name = "webrtc-gst"
duration_s = {duration}
[hosts.a]
[hosts.b]
[[links]]
between = ["a", "b"]
delay_ms = {delay_ms}
[processes.alice]
host = "a"
browser = "chromium"
[processes.bob]
host = "b"
webrtc = "gstreamer"
{bob}
[calls.c1]
between = ["{caller}", "{callee}"]
timeout_s = 20
"""


def leftovers(tmp_path: Path) -> tuple[list[str], list[str]]:
    """This process's lab namespaces, and any peer program or Chromium of this test."""
    namespaces = [n for n in list_namespaces() if n.startswith(f"llab-{os.getpid()}-")]
    alive = []
    for entry in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
        if str(tmp_path) in cmdline or (
            "gstpeer.py" in cmdline and f"llab-{os.getpid()}-" in cmdline
        ):
            alive.append(cmdline)
    return namespaces, alive


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def rtp_ssrcs(table: EventTable, probe_name: str) -> Counter[int]:
    """SSRC -> number of RTP events at the probe named ``probe_name``."""
    index = next(i for i, p in enumerate(table.probes) if p.name == probe_name)
    is_rtp = table.probe_column(index, "is_rtp").astype(bool)
    return Counter(int(s) for s in table.probe_column(index, "ssrc")[is_rtp])


@lab
@pytest.mark.parametrize("caller", ["alice", "bob"])
def test_call_with_chromium_traced_both_ways(tmp_path: Path, caller: str) -> None:
    needs_gi()
    out = tmp_path / "run"
    run_scenario(parse_scenario(gst_scenario(caller=caller), str(tmp_path / "s.toml")), out,
                 progress=False)  # fmt: skip

    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "ok"
    bob_run = next(p for p in run["processes"] if p["name"] == "bob")
    assert bob_run["stopped"] == "sigint" and bob_run["exit_code"] == 0  # EOS, clean exit
    assert bob_run["webrtc"]["states"]["connection"] == "connected"
    assert bob_run["webrtc"]["media_s"] is not None and bob_run["ready_s"] is not None
    trace = out / "traces" / f"bob-{bob_run['pid']}.lltrace"
    assert trace.is_file()
    bob_log = records(out / "webrtc/bob.jsonl")
    assert {r["value"] for r in bob_log if r["type"] == "state"} >= {"connected"}
    assert {r["side"] for r in bob_log if r["type"] == "media"} == {"send", "recv"}
    assert any(r.get("text") == "EOS reached both ends" for r in bob_log)

    alice = [r for r in records(out / "browsers/alice.jsonl") if r["type"] == "frame"]
    (alice_ssrc,) = {r["ssrc"] for r in alice if r["side"] == "send"}
    (bob_ssrc,) = {r["ssrc"] for r in alice if r["side"] == "recv"}
    assert alice_ssrc != bob_ssrc

    table = load_run(out)
    names = {p.name for p in table.probes}
    # receive path: alice's packets out of webrtcbin's jitter buffer, into the depayloader
    for probe in ("bob/rtpjitterbuffer0:src", "bob/wb:src_0", "bob/rx:sink"):
        assert rtp_ssrcs(table, probe)[alice_ssrc] > 150, probe  # 50 packets/s, ~5 s
    assert {"bob/depay:src", "bob/dec:src", "bob/sink:sink"} <= names
    # send path: bob's packets from the payloader into webrtcbin and its RTP session
    for probe in ("bob/pay:src", "bob/wb:sink_0", "bob/rtpbin:send_rtp_src_0"):
        assert set(rtp_ssrcs(table, probe)) == {bob_ssrc}, probe
    # alice's page received bob's frames: as many as webrtcbin sent, give or take start-up
    sent = rtp_ssrcs(table, "bob/rtpbin:send_rtp_src_0")[bob_ssrc]
    received = sum(1 for r in alice if r["side"] == "recv")
    assert 150 < received <= sent
    jitterbuffer = next(
        i for i, p in enumerate(table.probes) if p.name == "bob/rtpjitterbuffer0:src"
    )
    is_rtp = table.probe_column(jitterbuffer, "is_rtp").astype(bool)
    seqs = table.probe_column(jitterbuffer, "seq")[is_rtp]
    assert np.all(np.diff(seqs.astype(np.int64)) % 65536 == 1)  # in order, none lost
    # only the link addresses (no management address, 10.78.x.x) crossed the link
    log = read_link_log(out / "links/a-b.lllink")
    sources = {ipaddress.IPv4Address(int(ip)) for ip in np.unique(log["src_ip"]) if ip}
    link = ipaddress.ip_network(run["links"][0]["addrs"][0], strict=False)
    assert sources and all(a in link for a in sources), sources
    assert leftovers(tmp_path) == ([], [])
    check_one_journey_per_direction(out)


def check_one_journey_per_direction(out: Path) -> dict[str, dict[str, Any]]:
    """Each direction is one stream from capture to playout, across the browser and bob."""
    summary, _, _ = analyze_run(out)
    streams = {s["id"].split(" ")[0]: s for s in summary["streams"]}
    assert {"alice->bob", "bob->alice"} <= set(streams)
    to_bob, to_alice = streams["alice->bob"], streams["bob->alice"]
    hops = [(s["from"], s["to"]) for s in to_bob["segments"]]
    assert hops[0] == ("alice/capture", "alice/sender-transform")
    assert hops[1] == ("alice/sender-transform", "link/a->b:in")
    assert hops[-1][1] == "bob/sink:sink"  # played by bob's sink, through webrtcbin
    assert any(s["kind"] == "jitterbuffer" for s in to_bob["segments"])
    assert "bob/dec:src" in {s["to"] for s in to_bob["segments"]}
    hops = [(s["from"], s["to"]) for s in to_alice["segments"]]
    assert hops[0][0] == "bob/src:capture"
    # after alice's transform her own stages (stitch.browser_receiver): NetEq's decode,
    # its hand-over to the renderer, Opus's look-ahead (bob's encoder is not followed
    # into) and her output device
    assert [to for _, to in hops[-5:]] == [
        "alice/receiver-transform", "alice/decoded", "alice/rendered-est",
        "alice/lookahead-est", "alice/played-est",
    ]  # fmt: skip
    assert "jitter_buffer" in to_alice["intervals"]  # alice's stages after her transform
    assert "jitter_buffer" not in to_bob["intervals"]  # bob is no browser: no getStats
    for stream in (to_bob, to_alice):
        assert stream["complete_units"] >= 250  # 10 ms units over ~4 s of media
    return streams


@pytest.mark.exclusive
@lab
def test_planted_link_delay_lands_in_transport_of_mixed_call(tmp_path: Path) -> None:
    """10 -> 40 ms on the link: both directions' transport phase grows by 30 ms (p50)."""
    needs_gi()
    phases = {}
    for delay in (10, 40):
        out = tmp_path / f"d{delay}"
        text = gst_scenario(delay_ms=delay)
        run_scenario(parse_scenario(text, str(tmp_path / "s.toml")), out, progress=False)
        streams = check_one_journey_per_direction(out)
        phases[delay] = {d: streams[d]["phases"]["transport"]["p50_ms"] for d in streams}
    for direction in ("alice->bob", "bob->alice"):
        grew = phases[40][direction] - phases[10][direction]
        assert grew == pytest.approx(30.0, abs=1.0), direction


@pytest.mark.exclusive
@pytest.mark.timeout(240)
@lab
def test_black_box_from_chromium_to_webrtcbin_is_explained(tmp_path: Path) -> None:
    """The shipped scenario's black box: alice's capture plays the time-coded signal,
    bob records it off a tee before his sink. The probes follow each 10 ms from alice's
    capture callback (less Opus's look-ahead) through webrtcbin to the tee: what is left
    is the resampling in alice's capture path (0.32-0.35 ms at p50 in six runs, none of a
    code beyond 0.63 ms; 6.95 ms before the look-ahead was counted, and 10.3 ms in every
    other run before a code in the second 10 ms of a 20 ms Opus buffer was timed with
    its unit, as the probes time it)."""
    needs_gi()
    path = Path(__file__).resolve().parents[1] / "scenarios/webrtc-gst.toml"
    scenario = parse_scenario(path.read_text(), str(path)).with_duration(5)
    out = tmp_path / "run"
    run_scenario(scenario, out, progress=False)
    summary, _, _ = analyze_run(out)
    box = summary["blackbox"]
    assert box["span"]["from"] == "alice/capture" and box["span"]["to"].startswith("bob/rxtee:")
    assert box["codes"]["matched_to_units"] >= 15  # a code every 200 ms
    assert abs(box["unexplained"]["p50_ms"]) <= 1.0
    run = json.loads((out / "run.json").read_text())
    bob = next(p for p in run["processes"] if p["name"] == "bob")
    assert bob["stopped"] == "sigint" and bob["exit_code"] == 0  # EOS reached the file too


@lab
def test_peer_program_crash_is_one_line_naming_it(tmp_path: Path) -> None:
    needs_gi()
    out = tmp_path / "run"
    scenario = parse_scenario(
        gst_scenario(bob='audio_caps = "audio/x-raw,rate=7"'), str(tmp_path / "s.toml")
    )
    with pytest.raises(RunError) as info:
        run_scenario(scenario, out, progress=False)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        "process 'bob' (gstreamer webrtcbin) exited during start-up (exit code 1): "
    ), message
    assert message.endswith("stderr: error: could not link txconv to enc"), message
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "failed" and run["error"] == message
    assert leftovers(tmp_path) == ([], [])


@pytest.mark.parametrize(
    ("bob", "error"),
    [
        ('webrtc = "pion"', "processes.bob.webrtc: unknown peer 'pion' (peers: gstreamer)"),
        ('webrtc = "gstreamer"\npipeline = "fakesrc ! fakesink"',
         "processes.bob: 'pipeline' does not apply to a webrtc process"),
        ('webrtc = "gstreamer"\naudio_caps = "video/x-raw"',
         "processes.bob.audio_caps: must be raw audio caps"),
        ('webrtc = "gstreamer"\njitterbuffer_ms = -1',
         "processes.bob.jitterbuffer_ms: must be an integer from 0 to 1000000, not -1"),
        ('pipeline = "fakesrc ! fakesink"\njitterbuffer_ms = 10',
         "processes.bob.jitterbuffer_ms: applies only to a browser or webrtc process"),
        ('browser = "chromium"\njitterbuffer_ms = 5000',
         "processes.bob.jitterbuffer_ms: must be an integer from 0 to 4000, not 5000"),
        ('browser = "chromium"\naudio_caps = "audio/x-raw"',
         "processes.bob: 'audio_caps' does not apply to a browser process"),
        ('browser = "chromium"\nvideo = 1',
         "processes.bob.video: must be true or false, not an integer"),
        ('webrtc = "gstreamer"\nvideo = true',
         "processes.bob: 'video' does not apply to a webrtc process"),
        ('webrtc = "gstreamer"\n[signal]\ninject = "bob"\nrecord = "alice"',
         "signal.inject: 'bob' is a webrtcbin peer, which sends its own tone: it only records"),
    ],
)  # fmt: skip
def test_scenario_errors(bob: str, error: str) -> None:
    text = gst_scenario().replace('webrtc = "gstreamer"\n', f"{bob}\n")
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text, "s.toml")
    assert error in str(info.value)


def test_shipped_scenario_parses() -> None:
    path = Path(__file__).resolve().parents[1] / "scenarios/webrtc-gst.toml"
    scenario = parse_scenario(path.read_text(), str(path))
    bob = scenario.process("bob")
    assert bob.webrtc == "gstreamer" and bob.call_peer == "gstreamer webrtcbin"
    call = scenario.call_of("bob")
    assert call is not None and call.between == ("alice", "bob")
    # the black box: alice's capture plays the signal, bob records off a tee
    assert scenario.signal is not None
    assert scenario.signal.record.describe() == {"kind": "gst", "process": "bob"}


def test_recording_branch_off_a_tee_before_the_sink() -> None:
    from latlab.lab.gstpeer import RECV_BIN, recv_bin

    assert recv_bin() == RECV_BIN
    branch = "queue name=latlab_signal_out ! audioconvert ! wavenc ! filesink location=r.wav"
    assert recv_bin(branch) == (
        "rtpopusdepay name=depay ! opusdec name=dec ! audioconvert name=rxconv ! tee name=rxtee"
        f" ! queue ! fakesink name=sink sync=true rxtee. ! {branch}"
    )


def kill_when_media_flows(out: Path, victim: str, stop: threading.Event) -> None:
    """SIGKILL ``victim`` (alice: her Chromium's browser process; bob: the webrtcbin peer
    program) once bob reports media flowing both ways (the run's measured phase). Only a
    process of this run is a candidate: one inside the run's own namespace for the
    victim's host (another test's peers may run beside it)."""
    records_file = out / "webrtc" / "bob.jsonl"
    namespace = namespace_name(os.getpid(), VICTIM_HOSTS[victim])
    while not stop.wait(0.05):
        text = records_file.read_text() if records_file.exists() else ""
        if sum(1 for line in text.splitlines() if '"media"' in line) < 2:
            continue
        for pid in namespace_pids(namespace):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
            except (OSError, ValueError):
                continue
            browser = argv[0] == str(CHROMIUM) and not any(a.startswith("--type=") for a in argv)
            bob = any(a.endswith("gstpeer.py") for a in argv) and "bob" in argv  # --id bob
            if (victim == "alice" and browser) or (victim == "bob" and bob):
                os.kill(pid, signal.SIGKILL)
                return


VICTIM_HOSTS = {"alice": "a", "bob": "b"}  # gst_scenario's hosts


def namespace_pids(namespace: str) -> list[int]:
    """The processes inside a network namespace (``ip netns pids``)."""
    found = subprocess.run(
        ["ip", "netns", "pids", namespace], capture_output=True, text=True, timeout=10
    )
    return [int(word) for word in found.stdout.split() if word.isdigit()]


@lab
@pytest.mark.parametrize("victim", ["bob", "alice"])
def test_peer_killed_mid_call_fails_the_run_in_one_line(tmp_path: Path, victim: str) -> None:
    needs_gi()
    out = tmp_path / "run"
    scenario = parse_scenario(gst_scenario(duration=20), str(tmp_path / "s.toml"))
    stop = threading.Event()
    killer = threading.Thread(target=kill_when_media_flows, args=(out, victim, stop))
    killer.start()
    try:
        with pytest.raises(RunError) as failure:
            run_scenario(scenario, out, progress=False)
    finally:
        stop.set()
        killer.join()
    message = str(failure.value)
    assert message.startswith(f"process '{victim}' (")
    # bob reports media before the run has seen both peers ready: either phase may be hit
    assert "exited during" in message and "(exit code -9)" in message and "\n" not in message
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "failed" and run["error"] == message
    assert (out / "traces").is_dir() and (out / "browsers/alice.jsonl").stat().st_size > 0
    assert leftovers(tmp_path) == ([], [])
