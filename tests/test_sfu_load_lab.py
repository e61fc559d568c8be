"""Loads through an SFU in the lab (``[loads.NAME]``, latlab.lab.loadgen): light WebRTC
participants against Janus as a sweep whose report gives the SFU's load curve, and a
load that cannot get media flowing as one line with the run directory kept."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from latlab import rundir
from latlab.lab.loadgen import LOADGEN
from latlab.lab.sfu.livekit import LIVEKIT_SERVER
from tests.conftest import latlab, sfu_and_load_host

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        os.geteuid() != 0
        or shutil.which("janus") is None
        or shutil.which("perf") is None
        or not LOADGEN.is_file(),
        reason="needs root (namespaces), Janus, perf and latlab-loadgen (scripts/setup.sh)",
    ),
]

SWEEP = """
name = "janus-load"
duration_s = 4
[sweep]
mode = "zip"
pubs = [1, 3]
subs = [2, 4]
[hosts.sfu]
capture = true
[hosts.load]
[hosts.other]
[[links]]
between = ["other", "sfu"]
[[links]]
between = ["load", "sfu"]
[sfus.janus]
host = "sfu"
server = "janus"
cost = true
[loads.crowd]
sfu = "janus"
host = "load"
publishers = "${pubs}"
subscribers = "${subs}"
"""


@pytest.fixture(scope="module")
def load_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Two loads through Janus: 1 publisher x 2 subscribers, 3 x 4. The load host is on
    the SFU host's second link: it reaches Janus's API address through a host route."""
    out = tmp_path_factory.mktemp("janus-load") / "sweep"
    path = out.parent / "janus-load.toml"
    path.write_text(SWEEP, encoding="utf-8")
    result = latlab("run", str(path), "--out", str(out), timeout=240)
    assert result.returncode == 0, result.stderr
    return out, result.stdout


@pytest.mark.timeout(300)
def test_every_subscriber_gets_every_publisher_through_janus(load_sweep: tuple[Path, str]) -> None:
    out, _ = load_sweep
    sweep = json.loads((out / rundir.SWEEP_FILE).read_text())
    for point, (pubs, subs) in zip(sweep["points"], ((1, 2), (3, 4)), strict=True):
        assert point["status"] == "ok", point
        run = json.loads((out / point["dir"] / rundir.RUN_FILE).read_text())
        load = run["loads"]["crowd"]
        assert (load["publishers"], load["subscribers"]) == (pubs, subs)
        assert load["ready_s"] is not None and load["stopped"] in ("sigint", "exited")
        totals = point["loads"]["crowd"]
        assert totals["sent"] > 0 and totals["lost"] <= 0.01 * totals["expected"]
        _every_subscriber_got_every_track(load["summary"]["participants"])
        box = point["forwarding"]["sfu"]
        assert box["match_rate"] >= 0.99 and box["not_forwarded"]["rate"] < 0.01
        assert point["costs"]["janus"]["per_packet"]["cpu_us"] > 0
        # the generator's CPU is counted apart from Janus's
        assert point["resources"]["cpu_pct"]["crowd"] > 0


def _every_subscriber_got_every_track(participants: list[dict]) -> None:
    """Each subscriber received every publisher's audio and video, most of it: a Janus
    subscriber joins 0.07-1.2 s after the generator starts (latlab-loadgen's own test),
    so over a 4 s run it misses at most a third of what was sent before it joined."""
    sent = {(p["name"], t["kind"]): t["packets"] for p in participants
            if p["role"] == "publisher" for t in p["tracks"]}  # fmt: skip
    for sub in (p for p in participants if p["role"] == "subscriber"):
        got = {(t["publisher"], t["kind"]): t["packets"] for t in sub["tracks"]}
        assert set(got) == set(sent), sub["name"]
        assert all(got[key] >= 0.5 * sent[key] for key in sent), (sub["name"], got, sent)


@pytest.mark.timeout(300)
def test_the_sweep_prints_the_load_curve_and_its_knee(load_sweep: tuple[Path, str]) -> None:
    out, stdout = load_sweep
    assert "SFU under load" in stdout
    assert "knee: " in stdout
    report = latlab("report", str(out), timeout=120)
    assert report.returncode == 0, report.stderr
    assert "SFU under load" in report.stdout and "no streams" not in report.stdout


NO_MEDIA = """
name = "janus-no-media"
duration_s = 3
[hosts.sfu]
[hosts.load]
[[links]]
between = ["load", "sfu"]
[[links.schedule]]
at_s = 0
loss_pct = 100
[sfus.janus]
host = "sfu"
server = "janus"
[loads.crowd]
sfu = "janus"
host = "load"
publishers = 1
subscribers = 1
timeout_s = 4
"""


@pytest.mark.timeout(120)
def test_a_load_that_gets_no_media_flowing_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "no-media.toml"
    path.write_text(NO_MEDIA, encoding="utf-8")
    out = tmp_path / "run"
    result = latlab("run", str(path), "--out", str(out), timeout=100)
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.startswith("latlab: error")]
    assert len(lines) == 1 and "load 'crowd'" in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    run = json.loads((out / rundir.RUN_FILE).read_text())
    assert run["status"] == "failed" and "crowd" in run["loads"]


LIVEKIT = (
    sfu_and_load_host("livekit-load", "livekit")
    + """[loads.crowd]
sfu = "livekit"
host = "load"
publishers = 2
subscribers = 2
"""
)


@pytest.mark.timeout(180)
@pytest.mark.skipif(not LIVEKIT_SERVER.is_file(), reason="needs livekit-server (scripts/setup.sh)")
def test_a_load_through_livekit_keeps_its_secret_off_the_command_line(tmp_path: Path) -> None:
    """The generator makes its tokens from the run's API key and secret; the secret goes
    through its environment, never into its argv (run.json, the process list)."""
    path = tmp_path / "livekit-load.toml"
    path.write_text(LIVEKIT, encoding="utf-8")
    out = tmp_path / "run"
    result = latlab("run", str(path), "--out", str(out), timeout=150)
    assert result.returncode == 0, result.stderr
    run = json.loads((out / rundir.RUN_FILE).read_text())
    load = run["loads"]["crowd"]
    assert "--secret" not in load["argv"]
    secret = (rundir.sfu_dir(out, "livekit") / rundir.LIVEKIT_CONFIG).read_text()
    secret = secret.split("keys:", 1)[1].split(":", 1)[1].split("\n", 1)[0].strip().strip('"')
    assert secret and secret not in (out / rundir.RUN_FILE).read_text()
    _every_subscriber_got_every_track(load["summary"]["participants"])
    summary = json.loads((out / rundir.SUMMARY_FILE).read_text())
    assert summary["forwarding"]["sfu"]["match_rate"] >= 0.99


@pytest.mark.timeout(120)
def test_a_capture_that_dropped_packets_says_so(
    load_sweep: tuple[Path, str], tmp_path: Path
) -> None:
    """What the capture could not read (its socket buffer full: the kernel's count, in
    captures/HOST.json) is one line under the dwell table, and in summary.json."""
    out, _ = load_sweep
    point = tmp_path / "point"
    shutil.copytree(out / rundir.POINTS_DIR / "pubs=1,subs=2", point)
    stats = rundir.capture_stats(point, "sfu")
    counted = json.loads(stats.read_text())
    stats.write_text(json.dumps({**counted, "kernel_drops": 1234}))
    report = latlab("report", str(point), timeout=60)
    assert report.returncode == 0, report.stderr
    line = "the kernel dropped 1234 frames before the capture read them"
    assert line in report.stdout
    summary = json.loads((point / rundir.SUMMARY_FILE).read_text())
    assert any(line in p for p in summary["forwarding"]["sfu"]["problems"])
