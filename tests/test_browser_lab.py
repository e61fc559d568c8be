"""Browser peers in the lab: two headless Chromium pages in a call, their records, bad input.

Real Chromium in network namespaces (root), the real page server and link emulator.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from latlab.ingest.link_log import read_link_log
from latlab.lab.browser import CHROMIUM
from latlab.lab.netns import list_namespaces
from latlab.lab.runner import RunError, run_scenario
from latlab.lab.scenario import ScenarioError, load_scenario, parse_scenario

NEEDS_LAB = (
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
    pytest.mark.skipif(
        not os.access(CHROMIUM, os.X_OK),
        reason=f"{CHROMIUM} missing (bash scripts/setup.sh installs chromium)",
    ),
)


def lab(test: Callable[..., None]) -> Callable[..., None]:
    """Mark a test that runs browsers in namespaces."""
    for mark in NEEDS_LAB:
        test = mark(test)
    return test


def call_scenario(
    *, duration: float = 5, link: str = "delay_ms = 20", alice: str = "", timeout_s: float = 20
) -> str:
    """alice on host a calls bob on host b over one link."""
    return f"""\
name = "browser-call"
duration_s = {duration}
[hosts.a]
[hosts.b]
[[links]]
between = ["a", "b"]
{link}
[processes.alice]
host = "a"
browser = "chromium"
{alice}
[processes.bob]
host = "b"
browser = "chromium"
[calls.c1]
between = ["alice", "bob"]
timeout_s = {timeout_s}
"""


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def frames(recs: list[dict[str, Any]], side: str) -> dict[tuple[int, int], float]:
    """(ssrc, rtp_ts) -> t_ms of each frame at one transform side."""
    return {
        (r["ssrc"], r["rtp_ts"]): r["t_ms"]
        for r in recs
        if r["type"] == "frame" and r["side"] == side
    }


def leftovers(tmp_path: Path) -> tuple[list[str], str]:
    """This process's lab namespaces, the lock directories Chromium made in its TMPDIR
    for a profile under tmp_path (its ``SingletonSocket`` link points there), and any
    Chromium still using such a profile."""
    left = [n for n in list_namespaces() if n.startswith(f"llab-{os.getpid()}-")]
    for link in tmp_path.rglob("profiles/*/SingletonSocket"):
        lock_dir = Path(os.readlink(link)).parent
        if lock_dir.exists():
            left.append(str(lock_dir))
    found = subprocess.run(
        ["pgrep", "-af", f"user-data-dir={tmp_path}"], capture_output=True, text=True, timeout=60
    ).stdout
    return left, found


def run_failing(tmp_path: Path, text: str) -> tuple[str, dict[str, Any]]:
    """Run a scenario that must fail; its one-line error and run.json."""
    path = tmp_path / "s.toml"
    path.write_text(text)
    out = tmp_path / "run"
    with pytest.raises(RunError) as info:
        run_scenario(load_scenario(path), out, trace=False, progress=False)
    message = str(info.value)
    assert "\n" not in message
    assert leftovers(tmp_path) == ([], "")
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "failed" and run["error"] == message
    return message, run


@lab
def test_call_records_both_sides_both_directions(tmp_path: Path) -> None:
    out = tmp_path / "run"
    scenario = parse_scenario(call_scenario(), str(tmp_path / "call.toml"))
    run_scenario(scenario, out, trace=False, progress=False)

    alice, bob = records(out / "browsers/alice.jsonl"), records(out / "browsers/bob.jsonl")
    for recs in (alice, bob):
        types = {r["type"] for r in recs}
        assert {"hello", "clock", "stats", "sync", "tap", "state", "frame"} <= types
        assert all(isinstance(r["srv_ns"], int) for r in recs)
    # the same frames at the sender's and the receiver's transform, both directions
    for sender, receiver in ((alice, bob), (bob, alice)):
        sent, received = frames(sender, "send"), frames(receiver, "recv")
        assert len(received) > 150  # 50 frames/s for about 5 s
        common = sent.keys() & received.keys()
        assert len(common) >= 0.95 * len(received)
        # media took the 20 ms link, not the management veth
        delay = np.median([received[k] - sent[k] for k in common])
        assert 20.0 <= delay < 30.0, delay

    # nothing from the management addresses (10.78.x.x) crossed the link
    log = read_link_log(out / "links/a-b.lllink")
    sources = {ipaddress.IPv4Address(int(ip)) for ip in np.unique(log["src_ip"]) if ip}
    assert sources and not [a for a in sources if a in ipaddress.ip_network("10.78.0.0/16")]

    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "ok"
    names = [p["name"] for p in run["processes"]]
    assert names == ["alice", "bob"]
    for proc in run["processes"]:
        assert proc["argv"][:4] == ["ip", "netns", "exec", f"llab-{os.getpid()}-{proc['host']}"]
        assert proc["argv"][4] == str(CHROMIUM)
        # closed through DevTools (so it finished its trace), not signalled
        assert proc["stopped"] == "closed" and proc["ready_s"] is not None
        assert proc["browser"]["states"]["connection"] == "connected"
    assert run["pageserver"]["namespace"] == f"llab-{os.getpid()}-_pages"
    assert leftovers(tmp_path) == ([], "")


@lab
def test_missing_audio_file_fails_before_anything_starts(tmp_path: Path) -> None:
    message, run = run_failing(tmp_path, call_scenario(alice='audio_file = "nope.wav"'))
    assert message == f"process 'alice': audio_file {tmp_path}/nope.wav: No such file or directory"
    assert run["processes"] == []


@lab
def test_page_that_never_says_hello(tmp_path: Path) -> None:
    no_script = 'browser_args = ["--blink-settings=scriptEnabled=false"]'
    message, run = run_failing(tmp_path, call_scenario(alice=no_script, timeout_s=4))
    assert message.startswith("process 'alice' (chromium): the page did not say hello within 4 s")
    # asked to close through DevTools; one still starting up may not manage in time and
    # is then stopped by SIGTERM (its own exit, not a kill)
    stops = [(p["stopped"], p["exit_code"]) for p in run["processes"]]
    assert all(how in ("closed", "sigterm") and code == 0 for how, code in stops), stops
    assert (tmp_path / "run/logs/alice.stderr").stat().st_size > 0


@lab
def test_ice_that_never_connects(tmp_path: Path) -> None:
    message, run = run_failing(tmp_path, call_scenario(link="loss_pct = 100", timeout_s=4))
    assert message.startswith(
        "process 'alice' (chromium): call 'c1': media did not flow within 4 s"
    )
    assert "ICE checking" in message or "ICE failed" in message, message
    assert "console: " in message  # the page's last console lines
    assert all(p["browser"]["hello_s"] is not None for p in run["processes"])


@pytest.mark.e2e
def test_scenario_errors() -> None:
    good = call_scenario()
    cases = [
        (
            call_scenario(alice='webrtc = "gstreamer"'),
            "processes.alice: give either 'browser' or 'webrtc', not both",
        ),
        (good.split("[calls.c1]")[0], "processes.alice: a browser must be in a call"),
        (
            good.replace('"alice", "bob"]', '"alice", "alice"]'),
            "calls.c1.between: must be two process names",
        ),
        (
            good.replace('host = "b"', 'host = "a"'),
            "calls.c1.between: 'alice' and 'bob' must be on two hosts joined by a [[links]]",
        ),
        (
            call_scenario(alice="audio_processing = 1"),
            "processes.alice.audio_processing: must be true or false",
        ),
        (
            call_scenario(alice='browser_args = "--x"'),
            "processes.alice.browser_args: must be an array of flags",
        ),
    ]
    for text, want in cases:
        with pytest.raises(ScenarioError) as info:
            parse_scenario(text, "t.toml")
        assert str(info.value).startswith(f"t.toml: {want}"), str(info.value)
    assert parse_scenario(good, "t.toml").calls[0].between == ("alice", "bob")
