"""The HTML report: rendered in headless Chromium (charts drawn, no console errors), findings
on planted data, decimation that keeps statistics exact, escaping, bad input."""

from __future__ import annotations

import atexit
import base64
import contextlib
import fcntl
import json
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from latlab.report import findings as fnd
from latlab.report.html import run_html
from latlab.report.html_data import decimate_minmax
from latlab.synthetic import SyntheticRtpAudio, make_rtp_audio_run

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/lib/chromium/chromium")
RUN_S = 3.0
WIDTH = 1280
SCENARIOS = ("l16-basic", "srt-720p30", "webrtc-call")
MIN_INK = 30  # coloured pixels a drawn chart has at least (an empty one has none)


# --- a minimal DevTools client over --remote-debugging-pipe ---------------------------------


class Browser:
    """Headless Chromium driven through its DevTools pipe (fd 3 in, fd 4 out)."""

    def __init__(self, profile: Path) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire() -> None:
            # Move both ends above 4 first: a pipe may itself be fd 3 or 4, and dup2 onto
            # the same number would leave it close-on-exec.
            high_r = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
            high_w = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.proc = subprocess.Popen(
            [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--remote-debugging-pipe", f"--user-data-dir={profile}",
             "--hide-scrollbars", "about:blank"],
            preexec_fn=wire, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "TMPDIR": str(profile)},  # its lock dir: removed with the profile
        )  # fmt: skip
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.session: str | None = None
        self.target: str | None = None

    def _read_message(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """One command; events that arrive meanwhile are kept in ``events``."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read_message()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def wait_event(self, method: str) -> dict[str, Any]:
        """Until an event of that name (it may have come already)."""
        for event in self.events:
            if event["method"] == method:
                return event
        while True:
            event = self._read_message()
            if "method" in event:
                self.events.append(event)
                if event["method"] == method:
                    return event

    def open(self, url: str) -> None:
        """A new page, with console and errors recorded from before it loads."""
        self.close_page()
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.target = target
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        for domain in ("Runtime", "Log", "Page"):
            self.send(f"{domain}.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=WIDTH, height=1000,
                  deviceScaleFactor=1, mobile=False)  # fmt: skip
        self.events.clear()
        self.send("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)  # fmt: skip
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"])
        return result["result"].get("value")

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries of the page."""
        out = []
        for event in self.events:
            params = event.get("params", {})
            if event["method"] == "Runtime.exceptionThrown":
                out.append(json.dumps(params["exceptionDetails"])[:300])
            elif event["method"] == "Runtime.consoleAPICalled" and params["type"] in (
                "error",
                "assert",
                "warning",
            ):
                out.append(json.dumps(params["args"])[:300])
            elif event["method"] == "Log.entryAdded" and params["entry"]["level"] == "error":
                out.append(params["entry"]["text"])
        return out

    def close_page(self) -> None:
        """Close the page ``open`` made, if any (the browser stays)."""
        if self.target is not None:
            target, self.target, self.session = self.target, None, None
            self.send("Target.closeTarget", targetId=target)

    @property
    def alive(self) -> bool:
        """Whether the browser process is still running."""
        return self.proc.poll() is None

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, OSError):
            self.send("Browser.close")
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=60)
        os.close(self._to_browser)
        os.close(self._from_browser)


INK_JS = """
(async () => {
  const rects = [...document.querySelectorAll('figure[data-chart] canvas')].map((c) => {
    const r = c.getBoundingClientRect();
    return {id: c.parentElement.id, x: Math.round(r.left + scrollX), y: Math.round(r.top + scrollY),
            w: Math.round(r.width), h: Math.round(r.height)};
  });
  const img = new Image();
  img.src = window.__shot;
  await img.decode();
  const canvas = document.createElement('canvas');
  canvas.width = img.width;
  canvas.height = img.height;
  const ctx = canvas.getContext('2d');
  ctx.drawImage(img, 0, 0);
  const ink = {};
  for (const r of rects) {
    const d = ctx.getImageData(r.x, r.y, r.w, r.h).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) {
      if (Math.max(d[i], d[i + 1], d[i + 2]) - Math.min(d[i], d[i + 1], d[i + 2]) > 60) n++;
    }
    ink[r.id] = n;
  }
  return {ink, width: img.width, height: img.height};
})()
"""


_SHARED: list[Browser] = []  # one Chromium per test process, a page per report


def shared_browser() -> Browser:
    """The test process's Chromium (started on first use, again if it died; closed at
    exit): starting one per report cost each render its start-up."""
    if _SHARED and _SHARED[0].alive:
        return _SHARED[0]
    _SHARED.clear()
    profile = Path(tempfile.mkdtemp(prefix="latlab-render-"))
    browser = Browser(profile)
    _SHARED.append(browser)
    atexit.register(_close_shared, browser, profile)
    return browser


def _close_shared(browser: Browser, profile: Path) -> None:
    browser.close()
    shutil.rmtree(profile, ignore_errors=True)


def render(html_path: Path, tmp_path: Path) -> dict[str, Any]:
    """Load a report in Chromium (a new page of the shared browser), screenshot the whole
    page, and read what was drawn."""
    browser = shared_browser()
    try:
        browser.open(html_path.as_uri())
        height = browser.evaluate("document.documentElement.scrollHeight")
        shot = browser.send(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": WIDTH, "height": height, "scale": 1},
        )
        (tmp_path / "report.png").write_bytes(base64.b64decode(shot["data"]))  # to look at
        browser.evaluate(f"window.__shot = 'data:image/png;base64,{shot['data']}'; 1")
        page = browser.evaluate(INK_JS)
        page["figures"] = browser.evaluate(
            "[...document.querySelectorAll('figure[data-chart]')]"
            ".map((f) => ({id: f.id, drawn: f.dataset.drawn === '1',"
            " canvas: !!f.querySelector('canvas')}))"
        )
        page["links"] = browser.evaluate(
            "[...document.querySelectorAll('#findings a.see')].map((a) => a.getAttribute('href'))"
        )
        page["findings"] = browser.evaluate(
            "[...document.querySelectorAll('#findings li')].map((li) => li.textContent)"
        )
        page["ids"] = browser.evaluate("[...document.querySelectorAll('[id]')].map((e) => e.id)")
        page["sections"] = browser.evaluate(
            "Object.fromEntries([...document.querySelectorAll('section[id]')]"
            ".map((s) => [s.id, s.innerText]))"
        )
        page["data"] = browser.evaluate(
            "JSON.parse(document.getElementById('latlab-data').textContent)"
        )
        page["errors"] = browser.errors()
        page["requests"] = [e for e in browser.events if e["method"] == "Network.requestWillBeSent"]
    finally:
        browser.close_page()
    return page


def expected_charts(summary: dict[str, Any]) -> set[str]:
    """The charts a run's report must have, from its summary (not from the report's model)."""
    ids = set()
    for i, stream in enumerate(summary["streams"]):
        ids |= {f"s{i}-scatter", f"s{i}-loss"}
        if stream["complete_units"]:
            ids |= {f"s{i}-waterfall", f"s{i}-tail", f"s{i}-e2e"}
            ids |= {f"s{i}-dist-{k}" for k in range(len(stream["segments"]) + 1)}
        if "concealed_pct" in stream.get("intervals", {}):  # a browser receiver's stats
            ids.add(f"s{i}-conceal")
        if stream.get("timeline"):
            ids.add(f"s{i}-jb")
    if summary.get("resources"):
        ids.add("cpu")
    box = summary.get("blackbox") or {}
    if box and not box.get("error"):
        if box["codes"]["found"]:
            ids.add("blackbox-series")
        if box["unexplained"]["count"]:
            ids.add("blackbox-dist")
    return ids


def check_rendered(page: dict[str, Any], expected: set[str]) -> None:
    """Every expected chart is in the DOM, drawn and not blank; links resolve; no errors."""
    assert page["errors"] == [], page["errors"]
    figures = {f["id"]: f for f in page["figures"]}
    assert expected <= set(figures), expected - set(figures)
    assert all(f["drawn"] and f["canvas"] for f in figures.values())
    blank = {fid: page["ink"].get(fid, 0) for fid in figures if page["ink"].get(fid, 0) < MIN_INK}
    assert blank == {}, f"charts without data drawn: {blank}"
    assert page["links"], "no findings"
    assert {href.lstrip("#") for href in page["links"]} <= set(page["ids"])


needs_chromium = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium")


# --- real runs -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any]]]:
    """l16-basic, srt-720p30 and webrtc-call (two Chromium peers), RUN_S seconds each,
    analysed, their HTML reports written."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    from latlab.lab.runner import run_scenario
    from latlab.lab.scenario import load_scenario
    from latlab.report.html import report_html

    base = tmp_path_factory.mktemp("html-runs")
    out = {}
    for name in SCENARIOS:
        run_dir = base / name
        run_scenario(load_scenario(REPO / "scenarios" / f"{name}.toml").with_duration(RUN_S),
                     run_dir, progress=False)  # fmt: skip
        html_path = report_html(run_dir, None)
        out[name] = (html_path, json.loads((run_dir / "summary.json").read_text()))
    return out


@pytest.mark.e2e
@needs_chromium
@pytest.mark.parametrize("name", SCENARIOS)
def test_report_of_a_real_run_renders_every_chart(
    name: str, real_runs: dict[str, tuple[Path, dict[str, Any]]], tmp_path: Path
) -> None:
    html_path, summary = real_runs[name]
    text = html_path.read_text()
    assert "http://" not in text and "https://" not in text  # nothing fetched: offline
    page = render(html_path, tmp_path)
    check_rendered(page, expected_charts(summary))
    topics = " ".join(page["findings"]).lower()
    for topic in ("median", "tail", "configured", "cadence"):
        assert topic in topics
    if name == "srt-720p30":
        assert any("SRT latency" in f for f in page["findings"])
    if name == "webrtc-call":
        assert len(summary["streams"]) == 2  # one per direction, both drawn
        assert any("Browser jitter buffer" in f for f in page["findings"])


@pytest.mark.e2e
@needs_chromium
def test_sweep_report_has_a_chart_per_metric(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    from latlab.experiment import run_analysed_sweep
    from latlab.lab.scenario import parse_scenario
    from latlab.report.html import report_html

    text = (REPO / "scenarios" / "l16-jitterbuffer-sweep.toml").read_text()
    text = text.replace("jb = [10, 20, 40, 80]", "jb = [10, 40]")
    scenario = parse_scenario(text, "sweep.toml").with_duration(2.0)
    run_analysed_sweep(scenario, tmp_path / "sweep", progress=False)
    html_path = report_html(tmp_path / "sweep", None)
    page = render(html_path, tmp_path)
    metrics = {"e2e_p50", "e2e_p99", "kind_jitterbuffer", "kind_capture", "lost", "late"}
    check_rendered(page, {f"sweep-{m}" for m in metrics} | {"sweep-composite"})
    slope = [f for f in page["findings"] if "end to end p50" in f and "per unit of jb" in f]
    assert slope, page["findings"]
    value = float(slope[0].split("; ")[1].split(" ms per")[0])
    sweep = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    p50 = [p["streams"][0]["end_to_end"]["p50_ms"] for p in sweep["points"]]
    assert value == pytest.approx((p50[1] - p50[0]) / 30, abs=0.001)
    assert value > 0.3  # a longer jitter buffer holds each unit longer


BLACKBOX_RUN_S = 5.0


@pytest.fixture(scope="module")
def blackbox_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """l16-jack-blackbox (a time-coded signal through JACK devices), its HTML report written."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    from latlab.lab.runner import run_scenario
    from latlab.lab.scenario import load_scenario
    from latlab.report.html import report_html

    run_dir = tmp_path_factory.mktemp("html-blackbox") / "run"
    scenario = load_scenario(REPO / "scenarios" / "l16-jack-blackbox.toml")
    run_scenario(scenario.with_duration(BLACKBOX_RUN_S), run_dir, progress=False)
    html_path = report_html(run_dir, None)
    return html_path, json.loads((run_dir / "summary.json").read_text())


@pytest.mark.e2e
@needs_chromium
def test_black_box_section_of_a_real_run_renders(
    blackbox_run: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    html_path, summary = blackbox_run
    box = summary["blackbox"]
    assert "error" not in box, box
    assert box["codes"]["matched_to_units"] > 0
    page = render(html_path, tmp_path)
    expected = expected_charts(summary)
    assert {"blackbox-series", "blackbox-dist"} <= expected
    check_rendered(page, expected)
    section = page["sections"]["blackbox"]
    assert section.startswith("Black box vs probes")
    for label, key in (("black box end to end", "black_box"),
                       ("probed, same units and span", "probed"),
                       ("unexplained (black box - probed)", "unexplained")):  # fmt: skip
        stats = box[key]
        row = next(line for line in section.splitlines() if line.startswith(label))
        cells = row[len(label) :].split()
        assert cells == [str(stats["count"])] + [
            f"{stats[k]:.3f}" for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms", "mean_ms")
        ], row
    # the chart draws every counted code, read from blackbox.parquet
    series = page["data"]["blackbox"]["series"]
    assert len(series["x"]) == box["codes"]["injected"]
    assert sum(v is not None for v in series["unexplained"]) == box["codes"]["matched_to_units"]
    assert page["data"]["blackbox"]["distribution"]["count"] == box["unexplained"]["count"]
    # the finding says which way the probes are off, by how much, and where it likely is
    said = [f for f in page["findings"] if "Black box vs probes" in f]
    assert len(said) == 1, page["findings"]
    p50 = box["unexplained"]["p50_ms"]
    if abs(p50) > fnd.UNEXPLAINED_FLOOR_MS:
        way = "over-count" if p50 < 0 else "under-count"
        assert f"the probes {way} the end to end by {fnd._ms(abs(p50))} ms" in said[0]
        stream = next(s for s in summary["streams"] if s["id"] == box["stream"])
        in_span = [seg["to"] for seg in stream["segments"]].index(box["span"]["to"]) + 1
        estimated = [seg["to"] for seg in stream["segments"][:in_span] if seg.get("estimated")]
        assert estimated and all(name in said[0] for name in estimated)
        assert "not certain" in said[0]
    else:
        assert "agree within" in said[0]
    missing = [f for f in page["findings"] if "were not found in the recording" in f]
    assert len(missing) == (1 if box["codes"]["missing"] else 0)


@pytest.mark.e2e
@needs_chromium
def test_black_box_error_is_shown_escaped(tmp_path: Path) -> None:
    from latlab.report.html import report_html

    evil = '<img src=x onerror=alert(1)>&"x'
    run_dir = tmp_path / f"run{evil}"
    make_rtp_audio_run(run_dir, SyntheticRtpAudio(units=400))
    (run_dir / "signal").mkdir()
    (run_dir / "signal" / "sent.wav").write_bytes(b"RIFF")  # a signal, but no sent codes
    html_path = report_html(run_dir, tmp_path / "report.html")
    text = html_path.read_text()
    assert "<img src=x" not in text
    assert "&lt;img src=x onerror=alert(1)&gt;&amp;&quot;x" in text
    page = render(html_path, tmp_path)
    assert page["errors"] == []
    section = page["sections"]["blackbox"]
    error = f"{run_dir / 'signal' / 'sent.wav.codes.json'}: cannot read the sent codes"
    lines = [line for line in section.splitlines() if line.strip()]
    assert lines[0] == "Black box vs probes" and lines[1].startswith(f"black box: {error}"), lines
    assert not any(f["id"].startswith("blackbox") for f in page["figures"])
    assert any("Black box: no figures" in f and error in f for f in page["findings"])


def test_black_box_findings_on_planted_figures() -> None:
    def stats(p50: float, count: int = 40) -> dict[str, Any]:
        return {"count": count, "p50_ms": p50}

    (under,) = fnd.black_box_unexplained(stats(52.5), stats(50.0), stats(2.5), [], "a")
    assert "under-count the end to end by 2.500 ms" in under.text and under.notable
    assert "No segment of the stream is estimated" in under.text and under.anchor == "a"
    (over,) = fnd.black_box_unexplained(
        stats(60.0), stats(96.0), stats(-36.0), ["rx/k:device 40.000 ms"], "a"
    )
    assert (
        "over-count the end to end by 36.0 ms" in over.text and "rx/k:device 40.000 ms" in over.text
    )
    (agree,) = fnd.black_box_unexplained(stats(50.4), stats(50.0), stats(0.4), ["x"], "a")
    assert "agree within" in agree.text and not agree.notable
    assert fnd.black_box_unexplained(stats(50.0), stats(0, 0), stats(0, 0), [], "a") == []
    codes = {"injected": 40, "found": 37, "missing": 3, "inferred": 0, "matched_to_units": 35}
    (missing,) = fnd.black_box_missing(codes, "b")
    assert "3 of 40 injected codes (7.5%) were not found" in missing.text
    assert "2 of 37 found codes fell in no complete unit" in missing.text and missing.notable
    whole = {"injected": 40, "found": 40, "missing": 0, "inferred": 0, "matched_to_units": 40}
    assert fnd.black_box_missing(whole, "b") == []


# --- synthetic runs (no root needed) --------------------------------------------------------


def synthetic_report(tmp_path: Path, **params: Any) -> tuple[Path, dict[str, Any]]:
    from latlab.pipeline import analyze_run, run_metadata

    run_dir = tmp_path / "run"
    make_rtp_audio_run(run_dir, SyntheticRtpAudio(**params))
    summary, _, streams = analyze_run(run_dir)
    html_path = tmp_path / "report.html"
    html_path.write_text(run_html(run_dir, run_metadata(run_dir), summary, streams))
    return html_path, summary


@pytest.mark.e2e
@needs_chromium
def test_synthetic_run_with_loss_renders_and_finds_the_loss(tmp_path: Path) -> None:
    html_path, summary = synthetic_report(tmp_path, units=3000, loss=0.02, network_jitter=300_000)
    page = render(html_path, tmp_path)
    check_rendered(page, expected_charts(summary))
    stream = summary["streams"][0]
    incomplete = stream["units"] - stream["complete_units"]
    assert incomplete > 0
    loss = [f for f in page["findings"] if f.lower().startswith("loss")]
    assert len(loss) == 1 and f"Loss: {incomplete} of {stream['units']} units" in loss[0]


def test_trace_names_are_escaped(tmp_path: Path) -> None:
    from latlab.pipeline import analyze_run, run_metadata

    run_dir = tmp_path / "run"
    make_rtp_audio_run(run_dir, SyntheticRtpAudio(units=400))
    summary, _, streams = analyze_run(run_dir)
    evil = 'x"><script>alert(1)</script><img src=x onerror=alert(2)>'
    streams[0].journeys.probe_names[2] = evil
    summary["streams"][0]["segments"][1]["to"] = evil
    summary["streams"][0]["id"] = evil
    text = run_html(run_dir, run_metadata(run_dir), summary, streams)
    assert "<script>alert" not in text and "<img src=x" not in text
    assert "&lt;script&gt;alert(1)" in text  # shown as text in the tables
    data = text.split('id="latlab-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in data and "\\u003cscript\\u003e" in data


def test_report_of_a_directory_without_traces_is_one_line(tmp_path: Path) -> None:
    result = subprocess.run([str(REPO / "latlab"), "report", str(tmp_path), "--html"],
                            capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and str(tmp_path) in lines[0], result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "report.html").exists()


# --- findings on planted data ----------------------------------------------------------------


def test_tail_is_pinned_on_the_segment_planted_to_carry_it() -> None:
    rng = np.random.default_rng(7)
    units = 20_000
    base = np.array([5.0, 0.2, 3.0, 20.0, 1.0]) * 1e6
    segments = base + rng.normal(0, 0.05e6, (units, len(base)))
    # segment 1 is small at the median but carries the tail: 1.5 % of units wait 8 ms more there
    tail = rng.random(units) < 0.015
    segments[tail, 1] += 8e6
    # segment 3 carries the median, with ordinary noise
    names = [f"p/e{i}:src" for i in range(1, 6)]
    kinds = ["capture", "processing", "network", "jitterbuffer", "playout"]
    median, tail_finding = fnd.median_and_tail(segments, names, kinds, ("a", "b"))
    assert "e4:src (jitterbuffer)" in median.text.split("spend most in:")[1].split(",")[0]
    assert "e2:src (processing) grew most: +8.0" in tail_finding.text
    split = fnd.tail_split(segments)
    assert int(np.argmax(split.growth_ns)) == 1
    assert split.worst_units == 200


def test_periodic_spikes_are_found_with_their_period() -> None:
    rng = np.random.default_rng(3)
    series = 40 + rng.normal(0, 0.1, 12_000)
    series[np.arange(137, 12_000, 1000)] += 15  # a burst every 1000 units (10 s of 10 ms)
    series[np.arange(138, 12_000, 1000)] += 9
    found = fnd.find_spikes(series)
    assert found is not None and len(found.burst_starts) == 12
    assert found.period_units is not None and abs(found.period_units - 1000) <= 2
    text = fnd.periodic_spikes(series, 0.01, "s0-e2e")[0].text
    assert "recur every" in text and "10.00 s" in text


def test_random_spikes_are_not_called_periodic() -> None:
    rng = np.random.default_rng(5)
    series = 40 + rng.normal(0, 0.1, 12_000)
    at = np.sort(rng.choice(12_000, 12, replace=False))
    series[at] += 15
    found = fnd.find_spikes(series)
    assert found is not None and found.period_units is None
    assert "not periodic" in fnd.periodic_spikes(series, 0.01, "x")[0].text


def test_doubled_periods_are_found_where_they_start() -> None:
    units, period = 5000, 10_000_000
    t = np.arange(units, dtype=np.int64) * period
    rng = np.random.default_rng(2)
    late = rng.choice(np.arange(10, units - 10, 3), 40, replace=False)  # never adjacent
    second = t + 3_000_000
    second[late] += period  # unit k waits for k+1: a doubled period, then a zero interval
    third = second + 1_000_000
    times = np.column_stack([t, t + 100, second, third])
    probes = ["a/src0:capture", "a/src0:src", "b/queue0:src", "b/sink0:sink"]
    (finding,) = fnd.cadence_irregularities(times, probes, -1, "s0-scatter")
    cadence = fnd.probe_cadence(second, "b/queue0:src")
    assert cadence is not None and cadence.doubled == 40
    assert "40 of" in finding.text
    assert "queue0:src" in finding.text and "src0:src," not in finding.text


def test_loss_bursts() -> None:
    flags = np.zeros(1000, bool)
    flags[[5, 6, 7, 300, 301, 302, 303, 304, 305, 306, 900]] = True
    starts, lengths = fnd.runs_of(flags)
    assert starts.tolist() == [5, 300, 900] and lengths.tolist() == [3, 7, 1]
    (finding,) = fnd.bursts("loss", flags, 0.01, "units", "s0-loss")
    assert (
        "11 of 1000 units (1.1%), in 3 bursts" in finding.text
        and "longest 7 units (70 ms) at 3.00 s" in finding.text
    )


def test_decimation_keeps_extremes_and_bounds_points() -> None:
    rng = np.random.default_rng(1)
    x = np.arange(600_000, dtype=np.float64)
    y = rng.normal(0, 1, len(x))
    y[123_457] = 50.0
    y[400_001] = -50.0
    dx, dy = decimate_minmax(x, y, 4000)
    assert len(dx) <= 4000
    assert dy.max() == 50.0 and dy.min() == -50.0
    assert 123_457 in dx and 400_001 in dx
    assert np.all(np.diff(dx) > 0)


def test_a_sawtooth_is_a_periodic_pattern_and_framing_is_not() -> None:
    rng = np.random.default_rng(4)
    n = 12_000
    sawtooth = 40 + 2 * (np.arange(n) % 700) / 700 + rng.normal(0, 0.2, n)  # a drifting buffer
    found = fnd.oscillation_period(sawtooth)
    assert found is not None and abs(found[0] - 700) <= 3
    (spikes, pattern) = fnd.periodicity(sawtooth, 0.01, "s0-e2e")
    assert "none" in spikes.text and "repeats every" in pattern.text and "7.0" in pattern.text
    packets = 40 + (np.arange(n) % 2) * 5 + rng.normal(0, 0.2, n)  # 2 units per packet
    assert fnd.oscillation_period(packets) is None
    assert fnd.oscillation_period(40 + np.arange(n) * 1e-4 + rng.normal(0, 0.2, n)) is None


@pytest.mark.parametrize(
    "series",
    [
        np.full(500, 40.0),
        np.where(np.arange(500) % 2, 40.0, 45.0),
        np.concatenate([np.full(495, np.nan), [1.0, 2, 3, 4, 5]]),
        np.linspace(0, 100, 50),
        -np.cos(np.arange(300) * np.pi / 2),
    ],
    ids=["constant", "alternating", "mostly-missing", "ramp", "quarter-wave"],
)
def test_periodicity_never_fails_on_odd_series(series: np.ndarray) -> None:
    for finding in fnd.periodicity(series, 0.01, "x"):
        assert finding.text and finding.anchor == "x"


def _sweep(values: list[dict[str, float]], e2e: list[float]) -> dict[str, Any]:
    """A sweep.json with one stream per point and the given end-to-end p50s."""
    names = list(values[0])
    points = [
        {"name": ",".join(f"{k}={v:g}" for k, v in vals.items()), "values": vals, "status": "ok",
         "streams": [{"id": f"a/src->b/sink ssrc={i:08x}", "lost": 0, "late": 0, "kinds": {},
                      "end_to_end": {"p50_ms": y, "p99_ms": y + 1}}]}
        for i, (vals, y) in enumerate(zip(values, e2e, strict=True))
    ]  # fmt: skip
    return {"name": "s", "sweep": {"mode": "product", "variables": {n: [] for n in names}},
            "points": points}  # fmt: skip


def test_sweep_findings_give_each_variables_effect() -> None:
    from latlab.report.html_sweep import sweep_model

    grid = [{"lat": lat, "delay": d} for lat in (0, 40, 120) for d in (10, 40)]
    e2e = [30 + 1.0 * v["lat"] + 2.0 * v["delay"] for v in grid]
    model = sweep_model(_sweep(grid, e2e))
    first = model["findings"][0].text
    assert "+1.000 ms per unit of lat, +2.000 ms per unit of delay" in first
    # the SSRC differs in every point; the stream is still one line across them
    assert [s["stream"] for s in model["metrics"][0]["series"]] == ["a/src->b/sink"]
    zipped = [{"lat": x, "delay": x} for x in (0, 40, 120, 200)]
    text = sweep_model(_sweep(zipped, [30 + 3 * x for x in (0, 40, 120, 200)]))["findings"][0].text
    assert "per unit" not in text and "from 30.00 ms at lat=0,delay=0" in text


def test_configured_latency_is_read_from_the_pipeline_and_compared() -> None:
    from latlab.report.html_data import element_property, process_spans

    pipeline = "udpsrc port=5004 ! rtpjitterbuffer latency=35 ! rtpL16depay ! fakesink sync=true"
    argv = ["ip", "netns", "exec", "ns", "gst-launch-1.0", "-e", *shlex.split(pipeline)]
    assert element_property(argv, "rtpjitterbuffer", "latency") == 35.0
    assert element_property(argv, "udpsrc", "latency") is None  # not past its own "!"
    assert element_property(argv, "srtsrc", "latency") is None
    spans = process_spans(
        ["tx/src:capture", "tx/src:src", "tx/sink:sink", "rx/src:src", "rx/k:sink"]
    )
    assert spans == {"tx": (0, 2), "rx": (3, 4)}
    rng = np.random.default_rng(0)
    achieved = (35e6 + 5e6 + rng.normal(0, 1e4, 1000)).astype(np.int64)  # 5 ms over
    finding = fnd.configured_vs_achieved("rtpjitterbuffer latency", 35.0, achieved, "a → b", "x")
    assert "configured 35.0 ms, achieved p50 40.0 ms" in finding.text
    over = float(finding.text.split("; p50 +")[1].split(" ms")[0])
    assert over == pytest.approx(5.0, abs=0.01)
    assert finding.notable  # more than 10 % off
