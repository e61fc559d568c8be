"""Shared helpers for the tests, and the guard that keeps the fast tier honest.

Tests come in two tiers (``scripts/test.sh``): the fast tier (no root, no namespaces, no
servers, no browsers: units, synthetic traces, parsers) and the end-to-end tier, marked
``@pytest.mark.e2e``, on the real stack. A test not marked e2e that starts one of the
programs in ``E2E_PROGRAMS`` fails, naming the program: it belongs in the e2e tier.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Any

import pytest

from latlab.lab.process import STOP_STEPS
from latlab.lab.runner import run_scenario
from latlab.lab.scenario import parse_scenario
from latlab.pipeline import analyze_run

RunScenario = Callable[..., dict[str, Any]]
LATLAB = str(Path(__file__).resolve().parent.parent / "latlab")

# What only the end-to-end tier may start: namespaces and tc, GStreamer pipelines, audio
# servers, browsers, guest kernels, latlab's own lab programs.
E2E_PROGRAMS = frozenset(
    {
        "ip", "tc", "nsenter", "unshare", "jackd", "pulseaudio",
        "chromium", "linux.uml", "qemu-system-x86_64", "latlab-linkemu", "latlab-kuprobe",
        "latlab-capture", "latlab-relay", "janus", "perf", "livekit-server",
        "latlab-loadgen", "latlab-sfu", "latlab-sfu-load",
    }
)  # fmt: skip


LOG = "ran.log"


class _FastTierGuard:
    """Stand-ins for ``E2E_PROGRAMS`` in a temporary directory: each logs that it ran and
    fails. While a fast-tier test runs (its fixtures included), PATH starts there and
    ``subprocess.Popen`` refuses those programs given by their full path.

    The directory is made on first use: test modules that import ``tests.conftest`` load
    a second copy of this module, whose guard is never used, nor removed at exit."""

    @cached_property
    def shims(self) -> Path:
        """The stand-ins' directory (made on first use; ``pytest_unconfigure`` removes it)."""
        shims = Path(tempfile.mkdtemp(prefix="latlab-fast-tier-"))
        for name in E2E_PROGRAMS:
            shim = shims / name
            shim.write_text(
                f"#!/bin/sh\necho {shlex.quote(name)} >> {shlex.quote(str(shims / LOG))}\n"
                f"echo 'latlab tests: a fast-tier test ran {name}: mark it e2e' >&2\nexit 127\n",
                encoding="utf-8",
            )
            shim.chmod(0o755)
        return shims

    @property
    def log(self) -> Path:
        """Where the stand-ins and the Popen guard log the programs refused."""
        return self.shims / LOG

    @contextmanager
    def active(self) -> Iterator[None]:
        """The guard in place for the duration of the block."""
        patch = pytest.MonkeyPatch()
        patch.setenv("PATH", f"{self.shims}{os.pathsep}{os.environ.get('PATH', '')}")
        original = subprocess.Popen.__init__
        guard = self

        def guarded(self: subprocess.Popen, args: Any, *rest: Any, **kwargs: Any) -> None:
            first = args if isinstance(args, str | bytes | os.PathLike) else args[0]
            name = Path(os.fsdecode(first).split()[0] if kwargs.get("shell") else first).name
            if name in E2E_PROGRAMS and not os.fsdecode(first).startswith(str(guard.shims)):
                with guard.log.open("a", encoding="utf-8") as out:
                    out.write(name + "\n")
                raise AssertionError(f"a fast-tier test started {name}: mark it e2e")
            original(self, args, *rest, **kwargs)

        patch.setattr(subprocess.Popen, "__init__", guarded)
        try:
            yield
        finally:
            patch.undo()

    def ran(self) -> list[str]:
        """The programs run since the last call (and forget them)."""
        if not self.log.exists():
            return []
        names = sorted(set(self.log.read_text(encoding="utf-8").split()))
        self.log.unlink()
        return names


_GUARD = _FastTierGuard()


def pytest_unconfigure(config: pytest.Config) -> None:
    if "shims" in vars(_GUARD):  # made
        shutil.rmtree(_GUARD.shims, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A fast-tier test and the fixtures it sets up run with the guard in place."""
    if item.get_closest_marker("e2e"):
        yield
        return
    with _GUARD.active():
        yield


# Modules whose tests share nothing (no module-scoped fixture): xdist may spread their
# tests over its workers. Every other module's tests stay together on one worker, so that
# a module fixture (a run, a sweep) is made once.
SPREAD_MODULES = frozenset({"test_e2e_scenarios"})


# Tests that hold a WebRTC call between Chromium processes (or through an SFU): two of
# them at once would load both cores with four or more browsers encoding media, and
# their sub-millisecond figures (a sink's send return, an SFU's dwell) would measure the
# contention, so they share one worker.
BROWSER_CALL_MODULES = frozenset({
    "test_browser_lab", "test_gst_peer", "test_sfu_quality", "test_blackbox_browser",
    "test_latlab_sfu", "test_sfu_janus", "test_sfu_livekit", "test_e2e_browser_receiver",
})  # fmt: skip
# Shipped scenarios (test_e2e_scenarios) with such a call or an SFU under load
BROWSER_CALL_WORDS = ("webrtc", "sfu-")

# Tests that start JACK servers or remove a killed run's (its /dev/shm files and its slot
# in JACK's shared registry): a registry edited while another jackd starts makes that
# jackd exit 255 (seen: thesis-suite beside the crash drill), so they share one worker.
JACK_MODULES = frozenset({"test_devices", "test_crash_drill", "test_lab_ownership"})
JACK_WORDS = ("jack", "thesis-suite")
JACK_GROUP = "jack-servers"
BROWSER_CALL_GROUP = "browser-calls"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep each module's tests on one xdist worker (``--dist loadgroup``), but for the
    modules in ``SPREAD_MODULES``; every test with a browser call on one worker."""
    if int(pytest.__version__.split(".")[0]) >= 9:
        raise pytest.UsageError("the xdist groups need pytest < 9 (pyproject.toml says why)")
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        browsers = any(word in item.name for word in BROWSER_CALL_WORDS)
        jack = any(word in item.name for word in JACK_WORDS)
        if module in BROWSER_CALL_MODULES or (module in SPREAD_MODULES and browsers):
            item.add_marker(pytest.mark.xdist_group(BROWSER_CALL_GROUP))
        elif module in JACK_MODULES or (module in SPREAD_MODULES and jack):
            item.add_marker(pytest.mark.xdist_group(JACK_GROUP))
        elif module not in SPREAD_MODULES:
            item.add_marker(pytest.mark.xdist_group(module))


@pytest.fixture(autouse=True)
def _fast_tier_check(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a fast-tier test whose child processes ran a program of the e2e tier."""
    yield
    ran = _GUARD.ran()
    if ran and not request.node.get_closest_marker("e2e"):
        pytest.fail(f"a fast-tier test ran {', '.join(ran)}: mark it @pytest.mark.e2e")


def latlab(
    *args: str, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """Run the ``./latlab`` CLI (200 columns wide, so tables do not wrap); never raises
    for its exit status."""
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [LATLAB, *args], capture_output=True, text=True, env=env, cwd=cwd, check=False,
        timeout=timeout,
    )  # fmt: skip


@pytest.fixture()
def run_and_analyze(tmp_path: Path) -> RunScenario:
    """Run a scenario given as TOML text (with optional param overrides); return summary.json."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")

    def run(text: str, tag: str = "run", **params: Any) -> dict[str, Any]:
        scenario = parse_scenario(text, f"{tag}.toml")
        if params:
            scenario = scenario.with_params(params)
        out = tmp_path / tag
        run_scenario(scenario, out, progress=False)
        summary, _, _ = analyze_run(out, scenario.analysis.unit_ms)
        return summary

    return run


def as_if_in_background() -> None:
    """``preexec_fn`` for a child that starts with SIGINT ignored, as a shell starts
    commands in the background (``&``, nohup, CI runners): latlab must still stop cleanly
    on SIGINT (the fresh-machine run that failed test_interrupt_mid_run_cleans_up had its
    tests started so)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def stop_budget_s(processes: int = 2) -> float:
    """How long a run may take to stop after Ctrl-C: each process through all of its stop
    steps in turn (SIGINT, then SIGTERM, each with its grace time), plus 10 s for the lab's
    teardown and the analysis that follows. A stop that takes longer is a hang."""
    graces = sum(grace or 0.0 for _, _, grace in STOP_STEPS)
    return processes * graces + 10.0


def delay_sweep(
    text: str, out: Path, delays: tuple[float, ...], duration: float
) -> dict[float, tuple[Path, dict[str, Any]]]:
    """Run scenario ``text`` (whose link delay reads ``${delay}``) as a sweep over
    ``delays``; per delay, the point's run directory and summary.json."""
    from latlab.experiment import run_analysed_sweep

    values = ", ".join(f"{d:g}" for d in delays)
    scenario = parse_scenario(text + f"\n[sweep]\ndelay = [{values}]\n", "planted.toml")
    result = run_analysed_sweep(scenario.with_duration(duration), out, progress=False)
    assert not result.failed, result.failed
    points = {float(p["values"]["delay"]): out / p["dir"] for p in result.sweep["points"]}
    return {
        delay: (path, json.loads((path / "summary.json").read_text()))
        for delay, path in points.items()
    }


def planted_link_delays(
    scenario: Path, out: Path, delays: tuple[float, ...] = (5, 35), duration: float = 6
) -> dict[float, tuple[Path, dict[str, Any]]]:
    """A shipped scenario run as a sweep over its (first) link's delay (``delay_sweep``)."""
    text = scenario.read_text(encoding="utf-8").replace(
        'between = ["tx", "rx"]', 'between = ["tx", "rx"]\ndelay_ms = "${delay}"', 1
    )
    return delay_sweep(text, out, delays, duration)


def black_box_shifts(planted: dict[float, tuple[Path, dict[str, Any]]]) -> tuple[float, float]:
    """Between the lowest and highest planted link delay: how far the link segment moved,
    and how far the black box moved beyond what the probes saw move besides the link
    (both should be the planted difference)."""
    low, high = min(planted), max(planted)
    boxes = {delay: summary["blackbox"] for delay, (_, summary) in planted.items()}
    black_box, probed = (boxes[high][k]["p50_ms"] - boxes[low][k]["p50_ms"] for k in
                         ("black_box", "probed"))  # fmt: skip
    link = {delay: segment(summary, "link/tx->rx:out")["p50_ms"] for delay, (_, summary) in
            planted.items()}  # fmt: skip
    on_link = link[high] - link[low]
    return on_link, black_box - (probed - on_link)


@contextmanager
def signal_on_one_device(tmp_path: Path, server: str) -> Iterator[tuple[dict[str, str], Path]]:
    """One audio device (``server``) running, a 4 s signal in ``signal/sent.wav``: the
    environment of the device's clients and the signal directory; stopped after."""
    from latlab.lab.devices import Devices
    from latlab.lab.scenario import Device
    from latlab.rundir import SIGNAL as SIGNAL_DIR
    from latlab.signal.commands import GenerateOptions, generate_file

    device = Device(name="snd", host="h", server=server)
    (tmp_path / "logs").mkdir()
    devices = Devices([device], tmp_path / "logs")
    signal_dir = tmp_path / SIGNAL_DIR
    signal_dir.mkdir()
    generate_file(GenerateOptions(out=signal_dir / "sent.wav", duration_s=4.0))
    devices.start_all(lambda _host, argv: list(argv))
    try:
        yield {**os.environ, **devices.env_for(device.host)}, signal_dir
    finally:
        devices.stop_all()


def rig_code_delays(signal_dir: Path) -> Any:
    """``code_delays`` of a rig's files in ``signal_dir`` (sent codes, both timing logs)."""
    from latlab.analysis.blackbox import code_delays, read_rig_log, read_sent_codes

    return code_delays(
        signal_dir,
        read_sent_codes(signal_dir),
        read_rig_log(signal_dir / "inject.parquet"),
        read_rig_log(signal_dir / "record.parquet"),
    )


def segment(summary: dict[str, Any], to_probe_suffix: str, stream: int = 0) -> dict[str, Any]:
    """The segment of a stream that ends at the probe whose name ends with the suffix."""
    matches = [
        s for s in summary["streams"][stream]["segments"] if s["to"].endswith(to_probe_suffix)
    ]
    assert len(matches) == 1, [s["to"] for s in summary["streams"][stream]["segments"]]
    return matches[0]


L16_CAPS = "application/x-rtp,media=audio,clock-rate=48000,encoding-name=L16,channels=2,payload=96"


def two_hosts(
    receiver: str,
    sender: str,
    *,
    name: str = "t",
    duration: float | str = 2,
    head: str = "",
    receiver_keys: str = "",
    sender_keys: str = "",
    link_keys: str = "",
) -> str:
    """A scenario text: hosts tx and rx on one link, a receiver on rx started before a sender.

    ``head`` goes before the hosts (e.g. a ``[sweep]`` table); ``*_keys`` are extra
    TOML lines for each process and for the link (e.g. ``delay_ms = 10``). Pipelines
    are quoted as TOML strings here.
    """
    return f"""\
name = "{name}"
duration_s = {duration}
{head}
[hosts.tx]
[hosts.rx]
[[links]]
between = ["tx", "rx"]
{link_keys}
[processes.receiver]
host = "rx"
{receiver_keys}
pipeline = {json.dumps(receiver)}
[processes.sender]
host = "tx"
{sender_keys}
pipeline = {json.dumps(sender)}
"""


def sfu_and_load_host(name: str, server: str, *, cost: bool = False, duration: float = 4) -> str:
    """A scenario text's head: a captured SFU host running ``server`` (as ``[sfus.SERVER]``)
    and a load host linked to it; the test adds its load or processes."""
    return f"""\
name = "{name}"
duration_s = {duration}
[hosts.sfu]
capture = true
[hosts.load]
[[links]]
between = ["load", "sfu"]
[sfus.{server}]
host = "sfu"
server = "{server}"
{"cost = true" if cost else ""}
"""
