"""Virtual audio devices: servers live exactly as long as the run, report their latency,
show their period in the trace, fail the run loudly when they die; bad keys are one line."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from latlab.lab import owner
from latlab.lab.devices import parse_sink_inputs
from latlab.lab.jackfiles import JACK_SHM_DIR
from latlab.lab.runner import RunError, run_scenario
from latlab.lab.scenario import ScenarioError, parse_scenario
from latlab.pipeline import analyze_run
from latlab.tracer import is_built

HEAD = """
name = "dev"
duration_s = {duration}
[hosts.h]
[devices.snd]
host = "h"
server = "{server}"
period_frames = {period}
periods = 2
"""

JACK_PIPELINE = (
    "jackaudiosrc provide-clock=false latency-time=${{devices.snd.period_us}} "
    "buffer-time=${{devices.snd.buffer_us}} ! fakesink sync=false"
)
PULSE_PIPELINE = (
    "pulsesrc provide-clock=false latency-time=${{devices.snd.period_us}} "
    "buffer-time=${{devices.snd.buffer_us}} ! audio/x-raw,rate=48000,channels=2 "
    "! fakesink sync=false"
)


def scenario_text(server: str, period: int = 480, duration: float = 2.0) -> str:
    pipeline = JACK_PIPELINE if server == "jack" else PULSE_PIPELINE
    body = f'[processes.p]\nhost = "h"\npipeline = "{pipeline}"\n'
    return (HEAD + body).format(server=server, period=period, duration=duration)


def bad(extra: str, device: str = 'host = "h"\nserver = "jack"\n') -> str:
    return (
        'name = "x"\nduration_s = 1\n[hosts.h]\n[devices.snd]\n'
        + device
        + extra
        + '[processes.p]\nhost = "h"\npipeline = "fakesrc ! fakesink"\n'
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (bad('server = "alsa"\n', 'host = "h"\n'), "devices.snd.server: unknown server 'alsa'"),
        (bad("", 'host = "nope"\nserver = "jack"\n'), "devices.snd.host: unknown host 'nope'"),
        (bad("period_frames = 0\n"), "devices.snd.period_frames: must be an integer from 16"),
        (bad('rate = "48000"\n'), "devices.snd.rate: must be an integer from 8000"),
        (bad("periods = 0\n"), "devices.snd.periods: must be an integer from 1"),
        (bad("buffer = 3\n"), "devices.snd: unknown key 'buffer'"),
        (bad("", 'server = "jack"\n'), "devices.snd: missing 'host'"),
    ],
)
def test_bad_device_keys_are_one_line_errors(text: str, message: str) -> None:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(text, "s.toml")
    assert str(err.value).startswith(f"s.toml: {message}")
    assert "\n" not in str(err.value)


def test_unknown_device_reference_is_an_error() -> None:
    text = bad("").replace("fakesrc ! fakesink", "fakesrc num-buffers=${devices.other.rate}")
    with pytest.raises(ScenarioError, match=r"unknown reference '\$\{devices.other.rate\}'"):
        parse_scenario(text, "s.toml")


def test_two_devices_on_one_host_is_an_error() -> None:
    text = bad('[devices.two]\nhost = "h"\nserver = "pulse"\n')
    with pytest.raises(ScenarioError, match="already has device 'snd'"):
        parse_scenario(text, "s.toml")


def test_device_references_resolve() -> None:
    scenario = parse_scenario(scenario_text("jack", period=960), "s.toml")
    pipeline = scenario.resolved_pipeline(scenario.processes[0], {"h": "127.0.0.1"})
    assert "latency-time=20000 buffer-time=40000" in pipeline


SINK_INPUTS = """2 sink input(s) available.
    index: 3
\tdriver: <protocol-native.c>
\tstate: RUNNING
\tcurrent latency: 19.51 ms
\trequested latency: 0.50 ms
\tproperties:
\t\tmedia.name = "Playback Stream"
\t\tapplication.process.id = "4242"
    index: 7
\tcurrent latency: 12.00 ms
\tproperties:
\t\tapplication.name = "pacat"
"""


def test_a_pulse_servers_stream_listing_gives_each_streams_queue_and_client() -> None:
    assert parse_sink_inputs(SINK_INPUTS) == {
        3: {"queue_ms": 19.51, "pid": 4242},
        7: {"queue_ms": 12.0},
    }
    assert parse_sink_inputs("") == {}


def require(program: str) -> None:
    """Skip unless root (namespaces), the tracer and ``program`` are there."""
    if os.geteuid() != 0 or not is_built() or shutil.which(program) is None:
        pytest.skip(f"needs root, the tracer and {program}")


def server_processes() -> list[tuple[int, str]]:
    """(pid, command line) of every running jackd, pulseaudio and pacat."""
    out = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if entry.name.isdigit() and os.path.basename(argv[0].decode(errors="replace")) in (
            "jackd", "pulseaudio", "pacat",
        ):  # fmt: skip
            out.append((int(entry.name), " ".join(a.decode(errors="replace") for a in argv)))
    return out


def leftovers(pid: int) -> list[str]:
    """Servers, JACK files and pulse runtime dirs named after latlab process ``pid``
    (in /tmp, where they once were, and in latlab's private directories)."""
    tag = f"llab-{pid}-"
    found = [cmd for _, cmd in server_processes() if tag in cmd]
    found += [p.name for p in JACK_SHM_DIR.iterdir() if tag in p.name]
    found += [p.name for p in Path(tempfile.gettempdir()).glob(f"{tag}*")]
    private = owner.journal_dir().parent / "tmp"
    found += [str(p) for p in private.glob(f"*/{tag}*")] if private.is_dir() else []
    return found


def run(server: str, out: Path, period: int = 480) -> tuple[dict[str, Any], dict[str, Any]]:
    result = run_scenario(parse_scenario(scenario_text(server, period), "s.toml"), out,
                          progress=False)  # fmt: skip
    summary, _, _ = analyze_run(out)
    return result.run, summary


@pytest.mark.e2e
@pytest.mark.parametrize("server", ["jack", "pulse"])
def test_server_lives_exactly_as_long_as_the_run(tmp_path: Path, server: str) -> None:
    require({"jack": "jackd", "pulse": "pulseaudio"}[server])
    meta, summary = run(server, tmp_path / "run")
    assert meta["status"] == "ok"
    (device,) = meta["devices"]
    assert device["server"] == server and device["version"]
    assert device["server_name"] == f"llab-{os.getpid()}-snd"
    assert device["exit_code"] is not None  # stopped by latlab
    assert leftovers(os.getpid()) == []
    if server == "pulse":  # its socket was in latlab's private directory, not under /tmp
        runtime = Path(device["env"]["PULSE_RUNTIME_PATH"])
        assert runtime.parent.parent == owner.journal_dir().parent / "tmp"
        assert not runtime.is_relative_to(tempfile.gettempdir())
    capture = summary["streams"][0]["segments"][0]
    assert capture["kind"] == "capture" and capture["device"] is True
    if server == "jack":
        assert device["reported_latency"]["capture_frames"] == 480
        assert device["reported_latency"]["playback_frames"] == 960


@pytest.mark.exclusive
@pytest.mark.e2e
@pytest.mark.parametrize("period", [480, 960])
def test_period_shows_in_the_source_cadence(tmp_path: Path, period: int) -> None:
    """The device source delivers one buffer of one period per period."""
    require("jackd")
    _, summary = run("jack", tmp_path / "run", period)
    cadence = summary["streams"][0]["cadence"]
    (source,) = [v for k, v in cadence.items() if k.endswith("jackaudiosrc0:src")]
    assert abs(source["p50_ms"] - period / 48) < 0.5


@pytest.mark.e2e
def test_server_death_fails_the_run_naming_the_device(tmp_path: Path) -> None:
    require("jackd")
    scenario = parse_scenario(scenario_text("jack", duration=20), "s.toml")
    outcome: dict[str, BaseException] = {}

    def target() -> None:
        try:
            run_scenario(scenario, tmp_path / "run", progress=False)
        except BaseException as exc:  # handed to the test thread
            outcome["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    deadline = time.monotonic() + 15
    name = f"llab-{os.getpid()}-snd"
    log = tmp_path / "run" / "logs" / "p.stdout"
    while not (log.exists() and "New clock:" in log.read_text()):  # the process is ready
        assert time.monotonic() < deadline and thread.is_alive()
        time.sleep(0.05)
    (pid,) = [p for p, cmd in server_processes() if name in cmd]
    os.kill(pid, signal.SIGKILL)
    thread.join(30)
    error = outcome["error"]
    assert isinstance(error, RunError)
    assert str(error).startswith(f"audio device 'snd' (jack server {name}) died")
    assert "\n" not in str(error)
    assert leftovers(os.getpid()) == []
