"""latlab-sfu (sfu/, issue 18), standalone: its white-box probes read back by the Python
reader, and a three-layer simulcast call of headless Chromium through it.

* Loopback (no root): latlab-sfu with ``--trace`` forwards ``latlab-sfu-load``'s light
  participants (one publisher: Opus-sized audio and three VP8 layers; two subscribers);
  the trace is complete, names its probes ``sfu/ingress`` and ``sfu/egress:NAME``, and
  every ``fwd`` record leads back to an ``ingress`` record of the same source keys,
  sent after it was received.
* Chromium (root: a namespace): one publisher sending 1280x720/640x360/320x180 and Opus
  from the fake devices, two subscribers, the page latlab-sfu serves at ``/`` (WHIP and
  WHEP with fetch and RTCPeerConnection). Both subscribers decode video and reach the top
  layer as their estimate grows; then one subscriber's browser is killed, the SFU drops
  it (ICE consent stops) and the other keeps decoding.
* In the lab (``scenarios/sfu-latlab.toml`` with its probes on): latlab-sfu binds only its
  host's address, the capture's matcher finds every forwarded media packet, and the
  dwell it measures from outside agrees with the probes' from inside on the same run.
* A capped subscriber (``scenarios/sfu-latlab-simulcast.toml``): her leg drops to the
  lowest layer when her link is capped and climbs again when it is not.

Every wait is on a line a program prints (the SFU's ``ready``, the load's ``ready`` and
``summary``, the pages' getStats reports the SFU logs) with a deadline.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from latlab import rundir
from latlab.ingest.events import load_traces
from latlab.ingest.trace_format import Kind
from latlab.ingest.trace_reader import read_trace
from latlab.tracer import BUILD_DIR
from tests.conftest import latlab

SFU = BUILD_DIR / "latlab-sfu"
LOAD = BUILD_DIR / "latlab-sfu-load"
CHROMIUM = Path("/usr/lib/chromium/chromium")
NONE = 0xFFFF_FFFF_FFFF_FFFF

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not SFU.is_file() or not LOAD.is_file(),
        reason="latlab-sfu not built (bash scripts/setup.sh)",
    ),
]


class Lines:
    """A child's lines (stdout or stderr), read by a thread, waited for with a deadline."""

    def __init__(self, stream: object) -> None:
        self.queue: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.queue.put(line.rstrip("\n"))

    def wait(self, match: object, timeout_s: float) -> str:
        """The first line (from now on) for which ``match(line)`` is true."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.queue.get(timeout=left)
            except queue.Empty:
                break
            self.seen.append(line)
            if match(line):  # type: ignore[operator]
                return line
        raise AssertionError(f"no matching line in {timeout_s:g} s; last: {self.seen[-5:]}")


def start_sfu(argv_prefix: list[str], bind: str, http_port: int, udp_port: int,
              *extra: str) -> tuple[subprocess.Popen, Lines, Lines]:  # fmt: skip
    argv = [*argv_prefix, str(SFU), "--bind", bind, "--http-port", str(http_port),
            "--udp-port", str(udp_port), *extra]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = Lines(proc.stdout), Lines(proc.stderr)
    ready = out.wait(lambda line: line.startswith("ready"), 10)
    assert f"udp {bind}:{udp_port}" in ready
    return proc, out, err


def stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGINT)
    return proc.wait(timeout=10)


@pytest.mark.timeout(120)
def test_probes_round_trip_through_the_python_reader(tmp_path: Path) -> None:
    trace_path = tmp_path / "sfu.lltrace"
    port = 24000 + os.getpid() % 1000 * 2
    sfu, _, err = start_sfu([], "127.0.0.1", port, port + 1, "--trace", str(trace_path))
    try:
        load = subprocess.run(
            [str(LOAD), "--sfu", f"127.0.0.1:{port}", "--media", f"127.0.0.1:{port + 1}",
             "--publishers", "1", "--subscribers", "2", "--seconds", "3", "--name", "rt"],
            capture_output=True, text=True, timeout=60)  # fmt: skip
    finally:
        assert stop(sfu) == 0
    assert load.returncode == 0, load.stderr
    summary = json.loads(load.stdout.split("summary ", 1)[1])
    assert summary["received_video"] > 100 and summary["received_audio"] > 200

    trace = read_trace(trace_path)
    assert trace.complete and not trace.problems and trace.dropped == 0
    assert trace.info["kind"] == "sfu" and trace.info["tracer_version"].startswith("latlab-sfu")
    pads = {(p.element, p.pad) for p in trace.pads.values()}
    assert pads == {("ingress", ""), ("egress", "rt-sub0"), ("egress", "rt-sub1")}
    ev = trace.events
    ingress, fwd = ev[ev["kind"] == Kind.PUSH], ev[ev["kind"] == Kind.FWD]
    assert len(fwd) > 2 * summary["received_audio"] // 2
    # Every fwd record's source (SSRC, timestamp, seq) is an ingress record's keys, and
    # it was sent after that packet's receive call returned.
    key = lambda ssrc, ts, seq: (ssrc.astype(np.uint64) << 48) ^ (ts.astype(np.uint64) << 16) ^ seq  # noqa: E731
    src_ssrc = (fwd["dts"] & 0xFFFF_FFFF).astype(np.uint32)
    src_ts = (fwd["dts"] >> 32).astype(np.uint32)
    known = np.isin(key(src_ssrc, src_ts, fwd["list_index"]),
                    key(ingress["rtp_ssrc"], ingress["rtp_ts"], ingress["rtp_seq"]))  # fmt: skip
    assert known.all(), f"{(~known).sum()} fwd records without their ingress"
    dwell_ns = fwd["t_ns"].astype(np.int64) - fwd["offset_end"].astype(np.int64)
    assert (dwell_ns > 0).all()
    stamped = fwd["offset"] != NONE
    assert stamped.mean() > 0.99, "the kernel stamps loopback datagrams"
    assert (fwd["offset"][stamped] <= fwd["offset_end"][stamped]).all()
    # The kernel's transmit stamp (duration) lies between the receive call's return and
    # the send call's.
    sent = fwd["duration"] != NONE
    assert sent.mean() > 0.99, "the kernel stamps what loopback sends"
    assert (fwd["offset_end"][sent] < fwd["duration"][sent]).all()
    assert (fwd["duration"][sent] <= fwd["t_ns"][sent]).all()
    # The event table names the probes as DESIGN.md does.
    table = load_traces([trace_path])
    names = {p.name for p in table.probes}
    assert names == {"sfu/ingress", "sfu/egress:rt-sub0", "sfu/egress:rt-sub1"}
    assert "panic" not in "\n".join(err.seen)


# --- headless Chromium in a namespace -----------------------------------------------------

NS_ADDR = "10.253.{}.1"


@pytest.fixture
def namespace() -> Iterator[tuple[str, str]]:
    """A network namespace with a veth pair up (two addresses; the SFU binds the first)."""
    if os.geteuid() != 0 or not CHROMIUM.is_file():
        pytest.skip("needs root (a namespace) and Chromium")
    ns = f"llsfu{os.getpid()}"
    net = os.getpid() % 250
    addr = NS_ADDR.format(net)
    run = lambda *a: subprocess.run(["ip", *a], check=True, timeout=10)  # noqa: E731
    run("netns", "add", ns)
    try:
        run("-n", ns, "link", "set", "lo", "up")
        run("-n", ns, "link", "add", "v0", "type", "veth", "peer", "name", "v1")
        run("-n", ns, "addr", "add", f"{addr}/24", "dev", "v0")
        run("-n", ns, "addr", "add", f"10.253.{net}.2/24", "dev", "v1")
        run("-n", ns, "link", "set", "v0", "up")
        run("-n", ns, "link", "set", "v1", "up")
        yield ns, addr
    finally:
        subprocess.run(["ip", "netns", "del", ns], timeout=10, check=False)


def chromium(ns: str, url: str, origin: str, profile: Path, tmp: Path) -> subprocess.Popen:
    """A headless Chromium in ``ns`` on ``url``; its TMPDIR (where it makes its profile
    lock, and leaves it when killed) is ``tmp``, short enough for a socket's path."""
    argv = ["ip", "netns", "exec", ns, str(CHROMIUM), "--headless", "--no-sandbox",
            "--disable-gpu", "--use-fake-device-for-media-stream",
            "--use-fake-ui-for-media-stream", "--disable-background-networking",
            "--no-first-run", f"--user-data-dir={profile}",
            "--autoplay-policy=no-user-gesture-required",
            f"--unsafely-treat-insecure-origin-as-secure={origin}", url]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "TMPDIR": str(tmp)},
                            start_new_session=True)  # fmt: skip


@pytest.fixture
def browser_tmp() -> Iterator[Path]:
    """The browsers' TMPDIR, removed after the test."""
    path = Path(tempfile.mkdtemp(prefix="llab-browser-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def report(line: str, name: str) -> dict | None:
    """A page's getStats summary from the SFU's log line ``page NAME: {json}``."""
    marker = f"page {name}: "
    if marker not in line:
        return None
    try:
        return json.loads(line.split(marker, 1)[1])
    except ValueError:
        return None


def decoding(line: str, name: str, width: int) -> bool:
    r = report(line, name)
    return bool(r) and any(v["decoded"] > 0 and v["width"] >= width for v in r["video"])


@pytest.mark.timeout(240)
def test_chromium_simulcast_call_through_latlab_sfu(
    tmp_path: Path, namespace: tuple[str, str], browser_tmp: Path
) -> None:
    ns, addr = namespace
    http_port, udp_port = 8089, 20000
    origin = f"http://{addr}:{http_port}"
    sfu, _, err = start_sfu(["ip", "netns", "exec", ns], addr, http_port, udp_port)
    browsers: dict[str, subprocess.Popen] = {}
    try:
        page = f"{origin}/?room=call&report_ms=1000"
        browsers["alice"] = chromium(ns, f"{page}&role=publish&name=alice", origin,
                                     tmp_path / "alice", browser_tmp)  # fmt: skip
        err.wait(lambda line: "alice: connected" in line, 60)
        for name in ("bob", "carol"):
            browsers[name] = chromium(ns, f"{page}&role=subscribe&name={name}", origin,
                                      tmp_path / name, browser_tmp)  # fmt: skip
        # The publisher sends three layers; each subscriber decodes, first whatever layer
        # its first estimate affords, then 1280x720 (in 5-10 s in the first runs).
        err.wait(lambda line: (r := report(line, "alice")) is not None
                 and sorted(v["width"] for v in r["video"]) == [320, 640, 1280], 60)  # fmt: skip
        for name in ("bob", "carol"):
            err.wait(lambda line, n=name: decoding(line, n, 1), 60)
        at_top = set()
        deadline = time.monotonic() + 60
        while at_top != {"bob", "carol"}:
            line = err.wait(lambda line: "page " in line, deadline - time.monotonic())
            at_top |= {n for n in ("bob", "carol") if decoding(line, n, 1280)}
        ask = f"import urllib.request as u; print(u.urlopen('{origin}/stats').read().decode())"
        answer = subprocess.run(["ip", "netns", "exec", ns, "python3", "-c", ask],
                                capture_output=True, text=True, timeout=10, check=True)  # fmt: skip
        stats = json.loads(answer.stdout)
        # both reached 1280x720 (their pages said so above); the legs' layers when /stats
        # is read a moment later are the estimates of that moment: in one CI run beside
        # other tests one leg was back on 640x360 by then
        assert stats["layer_switches"] >= 2 and stats["panics"] == 0
        assert len(stats["legs"]) == 2
        assert {leg["width"] for leg in stats["legs"]} <= {320, 640, 1280}

        # carol's browser dies: the SFU notices (no ICE consent for 15 s) and drops her;
        # bob keeps decoding meanwhile.
        os.killpg(browsers.pop("carol").pid, signal.SIGKILL)
        before = report(err.wait(lambda line: decoding(line, "bob", 1280), 10), "bob")
        err.wait(lambda line: "carol: left" in line, 40)  # 14.8 s in the first run
        after = report(err.wait(lambda line: decoding(line, "bob", 1280), 10), "bob")
        assert after["video"][0]["decoded"] > before["video"][0]["decoded"] + 100
    finally:
        for proc in browsers.values():
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        code = stop(sfu)
    assert code == 0
    assert not [line for line in err.seen if "panic" in line]


MATCH_WINDOW_NS = 500_000_000  # latlab.analysis.forwarding.DEFAULT_WINDOW_NS
MIN_EPOCH = 8  # latlab.analysis.forwarding.DEFAULT_MIN_EPOCH


def check_matches_against_the_probes(table: pa.Table, fwd: np.ndarray) -> None:
    """Per media packet latlab-sfu sent, its source as its ``fwd`` record names it (the
    truth) against the capture matcher's: every match within the matching window is the
    true source, and every packet left unmatched stayed inside longer than it (an SFU starved
    of CPU: 0.61-0.71 s with three rooms on two cores) or belongs to a layer epoch
    shorter than the matcher needs to tell it from chance (the SFU flapping between
    layers under load: a one-frame epoch of 3 packets, all 0.6-0.8 ms inside)."""
    out_key = (fwd["rtp_ssrc"].astype(np.int64) << 16) | fwd["rtp_seq"].astype(np.int64)
    order = np.argsort(out_key)
    out_key, truth = out_key[order], fwd[order]
    src_ssrc = (truth["dts"] & 0xFFFF_FFFF).astype(np.int64)
    src_seq = truth["list_index"].astype(np.int64) & 0xFFFF
    dwell_ns = truth["duration"].astype(np.int64) - truth["offset"].astype(np.int64)
    # a layer epoch: a run of one leg's packets under one (source, sequence offset)
    epoch = (src_ssrc << 16) | ((truth["rtp_seq"].astype(np.int64) - src_seq) & 0xFFFF)
    leg = truth["rtp_ssrc"].astype(np.int64)
    by_leg = np.lexsort((truth["t_ns"], leg))  # each leg in the order it was sent
    starts = np.r_[
        True, (epoch[by_leg][1:] != epoch[by_leg][:-1]) | (leg[by_leg][1:] != leg[by_leg][:-1])
    ]
    run_id = np.cumsum(starts) - 1
    run_length = np.bincount(run_id)[run_id]
    epoch_length = np.empty_like(run_length)
    epoch_length[by_leg] = run_length

    ssrc = table.column("ssrc").to_numpy().astype(np.int64)
    seq = table.column("seq").to_numpy().astype(np.int64)
    status = table.column("status").to_numpy(zero_copy_only=False)
    key = (ssrc << 16) | seq
    at = np.minimum(np.searchsorted(out_key, key), len(out_key) - 1)
    media = out_key[at] == key  # egress packets of a media leg (not str0m's own)
    matched = media & (status == "matched")
    source = (table.column("source_ssrc").to_numpy().astype(np.int64) << 16) | (
        table.column("source_seq").to_numpy().astype(np.int64)
    )
    true_source = (src_ssrc << 16) | src_seq
    late = dwell_ns[at] > MATCH_WINDOW_NS
    # a packet beyond the window has no true match to find: it stays unmatched, or (2 of
    # 6069 with three rooms on two cores, 514 ms inside) one of its shape 8 packets later
    within = matched & ~late
    assert np.array_equal(source[within], true_source[at[within]]), "a false match"
    left = media & np.isin(status, ["unmatched", "edge"])
    short = epoch_length[at] < MIN_EPOCH
    unexplained = left & ~late & ~short
    assert not unexplained.any(), (
        f"{int(unexplained.sum())} of {int(left.sum())} unmatched media packets neither "
        f"late nor in a short epoch: {np.column_stack((ssrc, seq))[unexplained][:5]}"
    )


# --- in the lab: scenarios/sfu-latlab.toml, probes on -------------------------------------

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(300)
def test_inside_and_outside_dwell_agree_in_the_lab(tmp_path: Path) -> None:
    if os.geteuid() != 0 or not CHROMIUM.is_file():
        pytest.skip("needs root (namespaces) and Chromium")
    text = (REPO / "scenarios" / "sfu-latlab.toml").read_text(encoding="utf-8")
    assert "\ncost = true\n" in text
    scenario = tmp_path / "sfu-latlab-probes.toml"
    scenario.write_text(text.replace("\ncost = true\n", "\ncost = false\n"), encoding="utf-8")
    out = tmp_path / "run"
    result = latlab("run", str(scenario), "--out", str(out), timeout=280)
    assert result.returncode == 0, result.stderr
    run = json.loads((out / rundir.RUN_FILE).read_text())
    sfu = run["sfus"]["sfu"]
    assert sfu["server"] == "latlab" and sfu["version"].startswith("latlab-sfu")
    addr = sfu["api"].split("//")[1].split(":")[0]
    assert sfu["listening"] == [f"tcp {addr}:8089", f"udp {addr}:20000"]
    assert sfu["trace"] == "traces/sfu.lltrace"

    summary = json.loads((out / rundir.SUMMARY_FILE).read_text())
    fwd_summary = summary["forwarding"]["sfu"]
    # The probes know each forwarded packet's source: the matcher's matches are those
    # sources, and what it left unmatched it could not match by design (str0m's RTX
    # padding has no source at all, and is not a media leg).
    trace = read_trace(out / sfu["trace"])
    assert trace.complete and trace.dropped == 0
    ev = trace.events
    fwd = ev[ev["kind"] == Kind.FWD]
    media_ssrcs = set(np.unique(fwd["rtp_ssrc"]).tolist())
    legs = fwd_summary["legs"]
    media_legs = [leg for leg in legs if int(leg["ssrc"], 16) in media_ssrcs]
    assert len(media_legs) == 4  # audio and video to each of two subscribers
    assert all(leg["matched"] > 100 for leg in media_legs), media_legs
    check_matches_against_the_probes(pq.read_table(out / rundir.FORWARDING_FILE), fwd)

    # The same packets, from outside (the capture) and from inside (the probes).
    table = pq.read_table(out / rundir.FORWARDING_FILE)
    matched = table.column("status").to_numpy(zero_copy_only=False) == "matched"
    ssrc, seq = (table.column(c).to_numpy()[matched].astype(np.int64) for c in ("ssrc", "seq"))
    egress_key = (ssrc << 16) | seq
    outside_ms = table.column("dwell_ms").to_numpy()[matched]
    fwd_key = (fwd["rtp_ssrc"].astype(np.int64) << 16) | fwd["rtp_seq"].astype(np.int64)
    order = np.argsort(fwd_key)
    at = np.searchsorted(fwd_key[order], egress_key)
    found = (at < len(order)) & (fwd_key[order][np.minimum(at, len(order) - 1)] == egress_key)
    assert found.mean() > 0.99, "matched packets the probes did not record"
    inside = fwd[order][at[found]]
    stamped = (inside["offset"] != NONE) & (inside["duration"] != NONE)
    assert stamped.mean() > 0.99
    rx, tx = (inside[f][stamped].astype(np.int64) for f in ("offset", "duration"))
    outside, kernel = np.median(outside_ms[found][stamped]), np.median((tx - rx) / 1e6)
    # The kernel's receive and transmit stamps against the capture's, on the same packets.
    # Issue 18 asks for p50 within 0.1 ms; syscall returns gave 0.06-0.11 ms apart (the
    # capture sees a packet leave before the send call returns).
    assert abs(outside - kernel) < 0.1, (outside, kernel)


# --- in the lab: scenarios/sfu-latlab-simulcast.toml, a capped subscriber ------------------

SIMULCAST = REPO / "scenarios" / "sfu-latlab-simulcast.toml"
CAP_S, UNCAP_S = 16.0, 26.0  # the scenario's steps of carol's link


@pytest.mark.timeout(300)
def test_a_capped_subscriber_gets_the_lowest_layer_and_climbs_back(tmp_path: Path) -> None:
    """The shipped scenario as shipped (36 s): carol's link from latlab-sfu drops to 400
    kbit/s at 16 s and returns to 5000 at 26 s, bob's is never capped. Her leg goes from
    a higher layer to the lowest after the cap and climbs again after it (three runs:
    2 -> 0 in 2.1-4.2 s, back to 1 in 4.1-7.5 s), as her page's stats and the
    capture's matching both say; the dwell table has her video per layer it carried;
    bob has no step and his leg is above hers while she is capped."""
    if os.geteuid() != 0 or not CHROMIUM.is_file():
        pytest.skip("needs root (namespaces) and Chromium")
    from latlab.lab.scenario import load_scenario
    from tests.test_e2e_scenarios import check_shipped

    out = tmp_path / "run"
    result = latlab("run", str(SIMULCAST), "--out", str(out), timeout=280)
    assert result.returncode == 0, result.stderr[-2000:]
    check_shipped(load_scenario(SIMULCAST), out, tmp_path, run_s=36)
    summary = json.loads((out / rundir.SUMMARY_FILE).read_text())
    subs = summary["quality"]["subscribers"]
    down, up = subs["carol"]["adaptation"]
    assert (down["at_s"], up["at_s"]) == (CAP_S, UNCAP_S)
    assert down["layer"]["before"] > 0 and down["layer"]["after"] == 0, down
    # the timeline counts from the measured window (the room met 3.6-4.1 s after the
    # links started): at the lowest layer when the cap lifts, higher after it
    timeline = [(p["t_s"], p["layer"]) for p in subs["carol"]["layers"]["timeline"]]
    lifted = up["window_s"]
    assert [layer for t, layer in timeline if t < lifted][-1] == 0, (lifted, timeline)
    assert max(layer for t, layer in timeline if t >= lifted) > 0, (lifted, timeline)
    assert up["layer"]["after"] > 0, up
    # bob's leg is chosen apart from hers: above hers at some point while she is capped
    # (alone he stayed on the top layer for 76-97 % of the run; beside other tests in CI
    # his own estimate wavered too, 46 %, down to layer 0 for 3 s)
    assert subs["bob"]["adaptation"] == []
    bob = [(p["t_s"], p["layer"]) for p in subs["bob"]["layers"]["timeline"]]
    during = np.arange(down["window_s"], lifted, 0.1)
    assert np.any(_layer_at(bob, during) > _layer_at(timeline, during)), (bob, timeline)
    addr = json.loads((out / rundir.RUN_FILE).read_text())["hosts"]["sub2"]["addr"]
    legs = summary["forwarding"]["sfu"]["legs"]
    carried = {source["layer"] for leg in legs if leg["to"].startswith(f"{addr}:")
               and leg["kind"] == "video" for source in leg["sources"]}  # fmt: skip
    assert carried >= {0, 1, 2}
    assert "carol: at 16 s (rate_kbit=400)" in result.stdout


def _layer_at(timeline: list[tuple[float, int]], t_s: np.ndarray) -> np.ndarray:
    """A layer timeline's layer at each instant (-1 before its first entry)."""
    starts = np.array([t for t, _ in timeline])
    layers = np.array([layer for _, layer in timeline])
    at = np.searchsorted(starts, t_s, side="right") - 1
    return np.where(at >= 0, layers[np.maximum(at, 0)], -1)
