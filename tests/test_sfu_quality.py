"""The SFU quality matrix (docs/sfu.md, "Quality matrix"): the shipped sweep
(scenarios/sfu-quality.toml) reduced to one cell per SFU, through Janus and LiveKit; and
the figures proven on what was planted: a loss pattern per subscriber link (MOS), a
bandwidth step whose time the link's log knows (adaptation), an A/V offset between the
clip's audio and video (A/V sync)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from latlab import rundir
from latlab.lab.scenario import parse_scenario
from latlab.lab.sfu.livekit import CLIENT_BUNDLE, LIVEKIT_SERVER
from tests.conftest import latlab

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "scenarios" / "sfu-quality.toml"

pytestmark = [
    pytest.mark.e2e,
    # four or five Chromiums at once: beside another test on two cores the publisher's
    # own preview lagged by up to 4 s (its A/V offset read 15 ms for 60 planted)
    pytest.mark.exclusive,
    pytest.mark.skipif(
        os.geteuid() != 0
        or shutil.which("janus") is None
        or not LIVEKIT_SERVER.is_file()
        or not CLIENT_BUNDLE.is_file()
        or shutil.which("espeak-ng") is None
        or not Path("/usr/lib/chromium/chromium").is_file(),
        reason="needs root (namespaces), Janus, LiveKit and its SDK, espeak-ng and Chromium "
        "(bash scripts/setup.sh)",
    ),
]

REDUCED = """[sweep]
mode = "zip"
sfu = ["janus", "livekit"]
rate = [100000, 100000]
loss = [2, 2]
delay = [0, 0]
down = [300, 300]
repeat = [1, 1]

"""


PLANTED_AV_MS = 60


def reduced_matrix(directory: Path) -> Path:
    """The shipped matrix with one cell (2 % loss) per SFU: its [sweep] table replaced,
    and an A/V offset planted in the clip's second half (its room's ``av_offset_ms``)."""
    text = SHIPPED.read_text(encoding="utf-8")
    start, end = text.index("[sweep]"), text.index("[hosts.sfu]")
    text = text[:start] + REDUCED + text[end:]
    room = text.index("[rooms.meeting]\n") + len("[rooms.meeting]\n")
    text = text[:room] + f"av_offset_ms = {PLANTED_AV_MS}\n" + text[room:]
    path = directory / "sfu-quality-ci.toml"
    path.write_text(text, encoding="utf-8")
    parse_scenario(text, str(path))
    return path


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    directory = tmp_path_factory.mktemp("quality-matrix")
    out = directory / "sweep"
    done = latlab("run", str(reduced_matrix(directory)), "--out", str(out), timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    return out, done.stdout


@pytest.mark.timeout(960)
def test_the_reduced_matrix_measures_every_figure_per_cell(matrix: tuple[Path, str]) -> None:
    """Both SFUs' cells: a MOS, the video figures, layer switches, adaptation down and up
    (ms from the link log's step), and the A/V sync the system added; the terminal shows
    a table per SFU and the side-by-side comparison."""
    out, stdout = matrix
    sweep = json.loads((out / rundir.SWEEP_FILE).read_text())
    assert [p["status"] for p in sweep["points"]] == ["ok", "ok"]
    for point in sweep["points"]:
        cell = point["quality"]["subscribers"]["bob"]
        assert 1.0 <= cell["visqol"] <= 5.0, point["name"]
        # 2 % loss: video comes through both (Janus forwards its top layer, LiveKit
        # chooses); its frame rate is the subscriber's decoding, busy machine or not
        assert cell["height_p50"] in (180, 360, 720), point["name"]
        assert cell["fps_p50"] is not None and cell["fps_p50"] > 0, point["name"]
        assert cell["layer_switches"] is not None
        assert len(cell["adaptation"]) == 2  # the step down at 30 s and up at 38 s
        assert cell["av_added_ms"] is not None
        # what the browsers themselves add is a few frames at most: |p50| under 200 ms
        assert abs(cell["av_added_ms"]) < 200, point["name"]
    assert "quality matrix · janus" in stdout and "quality matrix · livekit" in stdout
    assert "SFUs side by side" in stdout


@pytest.mark.timeout(960)
def test_the_planted_av_offset_is_seen_through_both_sfus(matrix: tuple[Path, str]) -> None:
    """In every cell the clip's audio codes run 60 ms behind its video in the second half
    of every loop: the publisher (its preview against its local track) sees a 60 ms step
    at the boundaries between the loop's halves, the subscriber sees it too (within the
    error the figure states), and what the system added (measured against the
    publisher's own skew) does not step there."""
    out, _ = matrix
    for point in json.loads((out / rundir.SWEEP_FILE).read_text())["points"]:
        summary = json.loads((out / point["dir"] / rundir.SUMMARY_FILE).read_text())
        quality = summary["quality"]
        assert quality["offset_ms"] == PLANTED_AV_MS
        bob = quality["subscribers"]["bob"]["av_sync"]
        seen = {"alice": quality["offset_seen_ms"], "bob": bob["offset_seen_ms"]}
        for who, found in seen.items():
            assert found is not None and found["boundaries"] >= 4, (point["name"], who, found)
        # the publisher's display times come in refresh steps (16.7 ms): eight cells read
        # 55.0 to 69.0 for 60 planted
        alice = seen["alice"]
        assert abs(alice["p50_ms"] - PLANTED_AV_MS) < 16.7, (point["name"], alice)
        assert alice["ci_ms"]["lo"] <= PLANTED_AV_MS <= alice["ci_ms"]["hi"], alice
        # the subscriber's step also holds what its video delay did at that moment over a
        # 2 % loss link (its video delay up to 0.6-2.1 s): one boundary reads -53 to +210
        # ms, the median of 8-15 boundaries 12.4 (Janus) to 79.2 in eight cells. What
        # holds is the figure with its stated error: the planted 60 ms lies within its
        # interval (99 % where 8 boundaries or more allow it, else their range), which a
        # step missed or counted twice at every boundary leaves.
        bob_seen = seen["bob"]
        assert bob_seen["ci_ms"]["lo"] <= PLANTED_AV_MS <= bob_seen["ci_ms"]["hi"], (
            point["name"],
            bob_seen,
        )
        # the planted offset counted as added would step by 60: six cells read -12.9 to
        # +24.4 ms (mostly a few ms below 0: -9.5 with its interval, over 4 boundaries,
        # -37.5 to -1.1), so half the planted step tells one from the other
        step = bob["added_half_step_ms"]
        assert step is not None and abs(step) < PLANTED_AV_MS / 2, (point["name"], step)


@pytest.mark.timeout(300)
def test_the_html_matrix_links_each_cell_to_its_run(matrix: tuple[Path, str]) -> None:
    out, _ = matrix
    done = latlab("report", str(out), "--html", timeout=240)
    assert done.returncode == 0, done.stderr
    page = (out / rundir.REPORT_FILE).read_text()
    assert 'id="quality-matrix"' in page
    for point in json.loads((out / rundir.SWEEP_FILE).read_text())["points"]:
        assert f'href="{point["dir"]}/report.html"' in page
        assert (out / point["dir"] / rundir.REPORT_FILE).is_file()


PROOF = """
name = "quality-proof"
duration_s = 50
[hosts.sfu]
capture = true
[hosts.pub]
[hosts.s1]
[hosts.s2]
[hosts.s3]
[[links]]
between = ["pub", "sfu"]
[[links]]
between = ["sfu", "s1"]
rate_kbit = 5000
queue_ms = 200
[[links.schedule]]
at_s = 40
rate_kbit = 250
[[links.schedule]]
at_s = 48
rate_kbit = 5000
[[links]]
between = ["sfu", "s2"]
loss_pct = 5
[[links]]
between = ["sfu", "s3"]
loss_pct = 15
[sfus.sfu]
host = "sfu"
server = "livekit"
[processes.alice]
host = "pub"
browser = "chromium"
[processes.bob]
host = "s1"
browser = "chromium"
[processes.carol]
host = "s2"
browser = "chromium"
[processes.dave]
host = "s3"
browser = "chromium"
[rooms.meeting]
sfu = "sfu"
publishers = ["alice"]
subscribers = ["bob", "carol", "dave"]
quality = true
av_offset_ms = 60
timeout_s = 40
"""


@pytest.fixture(scope="module")
def proof(tmp_path_factory: pytest.TempPathFactory) -> dict:
    directory = tmp_path_factory.mktemp("quality-proof")
    path = directory / "quality-proof.toml"
    path.write_text(PROOF, encoding="utf-8")
    parse_scenario(PROOF, str(path))
    out = directory / "run"
    done = latlab("run", str(path), "--out", str(out), timeout=400)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((out / rundir.SUMMARY_FILE).read_text())
    return {"out": out, "quality": summary["quality"], "links": summary.get("links", [])}


@pytest.mark.timeout(480)
def test_mos_falls_with_the_loss_planted_on_each_link(proof: dict) -> None:
    """Three subscribers of one publisher, their links losing 0, 5 and 15 % of packets:
    the MOS of what each played out falls in that order, chunk by chunk at the median.
    (The reported MOS is the chunks' mean, a stall and all: in one CI run four browsers
    on two cores stalled bob's playout in one 8 s chunk, 1.78 against 4.28-4.38 in its
    neighbours, and his mean, 3.33, fell below carol's 3.35; the medians were 3.58,
    3.35 and 2.31.)"""
    subs = proof["quality"]["subscribers"]
    scores = [subs[name]["mos"]["visqol"] for name in ("bob", "carol", "dave")]
    assert all(s is not None for s in scores), scores
    medians = [
        float(np.median([c["visqol"] for c in subs[name]["mos"]["chunks"] if c["visqol"]]))
        for name in ("bob", "carol", "dave")
    ]
    assert medians[0] > medians[1] > medians[2], (medians, scores)


@pytest.mark.timeout(480)
def test_under_four_browsers_the_planted_offset_is_not_counted_as_added(proof: dict) -> None:
    """Four browsers on two cores: the publisher's fake camera falls behind (28.5 of 30
    frames/s, its skew drifting by 50 ms a second) and pages show frames late, so a
    boundary's step reads anything from -42 to +74 ms for the 60 planted (one CI run).
    What the system added to bob (his link clean until its step) still does not step
    by the planted 60 ms at the loop's half boundaries: -3.6, -1.2, 18.8 and 0.0 ms in
    four runs, bound two display refreshes; every subscriber has the figure. Bob's codes
    with moving video on both sides lie between the browsers' meeting (11 to 20 s) and
    his link's step: with the step at 30 s runs kept 1 to 6 boundaries; at 40 s the
    first run kept 10 (-0.003 ms); 2 are asked."""
    quality = proof["quality"]
    assert quality["offset_ms"] == 60
    bob = quality["subscribers"]["bob"]["av_sync"]
    assert bob["added_half_step_ms"] is not None and bob["added_half_steps"] >= 2, bob
    assert abs(bob["added_half_step_ms"]) < 2 * 16.7, bob["added_half_step_ms"]
    for name, sub in quality["subscribers"].items():
        sync = sub["av_sync"]
        assert sync["added_ms"] is not None and abs(sync["added_ms"]["p50_ms"]) < 300, name


@pytest.mark.timeout(480)
def test_adaptation_is_timed_from_the_step_the_link_logged(proof: dict) -> None:
    """bob's link steps from 5000 to 250 kbit/s 40 s after it started (the link's log
    has the origin; four browsers take 11 to 20 s to meet) and back at 48 s: his
    received bitrate falls under the cap and settles after the step, within its
    interval; the other subscribers' links had no step, so they have no adaptation.
    The step back up is found at its time, but its recovery is not asserted: 2 s are
    too short for a receiver's estimate to ramp up (2 s after it bob's rate was still
    the capped one's, 34.7 against 39.8 kbit/s); a longer run would cost every CI run
    its seconds."""
    subs = proof["quality"]["subscribers"]
    down, up = subs["bob"]["adaptation"]
    assert (down["at_s"], up["at_s"]) == (40.0, 48.0)
    rate = down["bitrate_kbps"]
    assert rate["changed"] and rate["before"] > 250 > rate["after"], rate
    # within the interval it had (the docstring's claim): 1.5-4 s alone, 6.6 s in CI
    assert 0 < rate["settled_ms"] < 1000 * (up["at_s"] - down["at_s"]), rate
    assert up["bitrate_kbps"]["before"] is not None, up
    assert subs["carol"]["adaptation"] == [] and subs["dave"]["adaptation"] == []
    assert subs["bob"]["layers"]["switches"] is not None
