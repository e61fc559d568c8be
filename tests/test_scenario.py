"""Scenario parsing and validation: valid files parse; each mistake is one clear line."""

from __future__ import annotations

import copy
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from latlab.lab.scenario import Scenario, ScenarioError, load_scenario, parse_scenario
from latlab.lab.scenario.errors import key_path
from latlab.lab.sweep import to_toml

VALID = """\
name = "l16-basic"
duration_s = 10
description = "L16 over RTP between two hosts"
[params]
latency = 20
[analysis]
unit_ms = 5
[hosts.tx]
[hosts.rx]
[[links]]
between = ["tx", "rx"]
[processes.receiver]
host = "rx"
pipeline = "udpsrc port=5004 ! rtpjitterbuffer latency=${params.latency} ! fakesink"
env = { GST_DEBUG = "2", PEER = "${hosts.tx.addr}" }
[processes.sender]
host = "tx"
pipeline = "audiotestsrc is-live=true ! rtpL16pay ! udpsink host=${hosts.rx.addr} port=5004"
"""

SRC = "scenarios/x.toml"


def parse(text: str) -> Scenario:
    return parse_scenario(text, SRC)


def error(text: str) -> str:
    with pytest.raises(ScenarioError) as info:
        parse(text)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{SRC}: ")
    return message


def test_valid_scenario_parses() -> None:
    s = parse(VALID)
    assert s.name == "l16-basic"
    assert s.duration_s == 10
    assert s.description.startswith("L16")
    assert s.analysis.unit_ms == 5
    assert s.host_names() == ["tx", "rx"]
    assert [(link.a, link.b) for link in s.links] == [("tx", "rx")]
    assert [p.name for p in s.processes] == ["receiver", "sender"]
    assert s.params == {"latency": "20"}
    assert s.source == SRC


def test_references_resolve() -> None:
    s = parse(VALID)
    addrs = {"tx": "10.77.0.1", "rx": "10.77.0.2"}
    assert "latency=20 " in s.resolved_pipeline(s.process("receiver"), addrs)
    assert "host=10.77.0.2 " in s.resolved_pipeline(s.process("sender"), addrs)
    assert s.resolved_env(s.process("receiver"), addrs) == {"GST_DEBUG": "2", "PEER": "10.77.0.1"}


def test_with_params_substitutes_for_sweeps() -> None:
    s = parse(VALID).with_params({"latency": 80})
    assert "latency=80 " in s.resolved_pipeline(s.process("receiver"), {"tx": "a", "rx": "b"})
    with pytest.raises(ScenarioError, match="unknown 'nope'"):
        parse(VALID).with_params({"nope": 1})


def test_dollar_escape() -> None:
    s = parse(VALID.replace('fakesink"', 'fakesink name=$${x}"'))
    assert s.resolved_pipeline(s.process("receiver"), {}).endswith("name=${x}")


def test_defaults_and_minimal() -> None:
    s = parse(
        'name = "m"\nduration_s = 0.5\n[hosts.h]\n'
        '[processes.p]\nhost = "h"\npipeline = "fakesrc ! fakesink"\n'
    )
    assert s.analysis.unit_ms == 10
    assert s.links == ()
    assert s.description == ""
    assert s.params == {}


def test_load_from_file(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(VALID)
    s = load_scenario(path)
    assert s.source == str(path)
    assert s.text == VALID


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "nope.toml")


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            'pipeline = "audiotestsrc',
            'pipline = "audiotestsrc',
            "processes.sender: unknown key 'pipline' "
            "(known: host, pipeline, env, command, sched, cost, cost_idle_s)",
        ),
        ('host = "tx"', 'host = "tz"', "processes.sender.host: unknown host 'tz' (hosts: rx, tx)"),
        ("duration_s = 10", "duration_s = -1", "duration_s: must be a positive number"),
        ("duration_s = 10", 'duration_s = "ten"', "duration_s: must be a positive number"),
        ("duration_s = 10", "duration_s = true", "duration_s: must be a positive number"),
        ("duration_s = 10\n", "", "missing 'duration_s'"),
        ('name = "l16-basic"', 'name = "l16 basic!"', "name: invalid name 'l16 basic!'"),
        ('between = ["tx", "rx"]', 'between = ["tx", "ry"]', "unknown host 'ry' (hosts: rx, tx)"),
        ('between = ["tx", "rx"]', 'between = ["tx", "tx"]', "links host 'tx' with itself"),
        ('between = ["tx", "rx"]', 'between = ["tx"]', "links[0].between: must be two host"),
        ("${hosts.rx.addr}", "${hosts.ry.addr}", "unknown reference '${hosts.ry.addr}'"),
        ("${hosts.rx.addr}", "${hosts.rx.mac}", "unknown reference '${hosts.rx.mac}'"),
        ("${params.latency}", "${params.latenc}", "unknown reference '${params.latenc}'"),
        ("${hosts.tx.addr}", "${tx}", "processes.receiver.env.PEER: unknown reference '${tx}'"),
        ("[analysis]\nunit_ms = 5", "[analysis]\nunit_s = 5", "analysis: unknown key 'unit_s'"),
        ("unit_ms = 5", "unit_ms = 0", "analysis.unit_ms: must be a positive number"),
        (
            "[hosts.tx]",
            "[hosts.tx]\nos = 1",
            "hosts.tx: unknown key 'os' (known: capture, clock, cpus)",
        ),
        ("[hosts.tx]", "[hosts.tx]\nclock = 3", "hosts.tx.clock: "),
        (
            "[hosts.tx]",
            "[hosts.tx]\nclock = { offset_ms = 4e6 }",
            "hosts.tx.clock.offset_ms: must be from -3.6e+06 to 3.6e+06",
        ),
        (
            "[hosts.tx]",
            "[hosts.tx]\nclock = { drift_ppm = -1001 }",
            "hosts.tx.clock.drift_ppm: must be from -1000 to 1000",
        ),
        ("[hosts.tx]", '[hosts.tx]\nclock = { drift_ppm = "fast" }', "hosts.tx.clock.drift_ppm: "),
        (
            "[hosts.tx]",
            "[hosts.tx]\nclock = { skew_ppm = 5 }",
            "hosts.tx.clock: unknown key 'skew_ppm' (known: offset_ms, drift_ppm)",
        ),
        (
            "[hosts.tx]",
            "[hosts.tx]\ncapture = true\nclock = { drift_ppm = 5 }",
            "hosts.tx.clock.drift_ppm: capture = true takes the kernel's timestamps",
        ),
        ("[hosts.tx]", '[hosts."t x"]', "hosts.t x: invalid name 't x'"),
        ("[hosts.tx]", "[hosts.tx]\ncpus = []", "hosts.tx.cpus: must be a non-empty list"),
        ("[hosts.tx]", "[hosts.tx]\ncpus = [1, 1]", "hosts.tx.cpus: lists a CPU twice"),
        ("[hosts.tx]", "[hosts.tx]\ncpus = [-1]", "hosts.tx.cpus: must be an integer from 0"),
        ("[hosts.tx]", '[hosts.tx]\ncpus = "0-1"', "hosts.tx.cpus: must be a non-empty list"),
        ('name = "l16-basic"', 'name = "l16-basic"\nnmae = 1', "unknown key 'nmae'"),
        ("between = [", "betwen = [", "links[0]: unknown key 'betwen' (known: between, "),
        ('GST_DEBUG = "2"', '"GST DEBUG" = "2"', "invalid environment variable name"),
        ('GST_DEBUG = "2"', "GST_DEBUG = [2]", "processes.receiver.env.GST_DEBUG: must be"),
        ("latency = 20", "latency = [20]", "params.latency: must be a string, number or boolean"),
    ],
)
def test_bad_input_gives_one_line(old: str, new: str, expected: str) -> None:
    assert old in VALID
    assert expected in error(VALID.replace(old, new, 1))


def test_missing_pipeline() -> None:
    text = VALID.replace(
        'pipeline = "audiotestsrc is-live=true ! rtpL16pay ! udpsink host=${hosts.rx.addr} '
        'port=5004"\n',
        "",
    )
    assert error(text) == f"{SRC}: processes.sender: missing 'pipeline'"


def test_missing_processes_and_hosts() -> None:
    assert "processes: at least one process" in error(
        'name = "a"\nduration_s = 1\n[hosts.h]\n[processes]\n'
    )
    assert "missing 'processes'" in error('name = "a"\nduration_s = 1\n[hosts.h]\n')
    assert "hosts: at least one host" in error('name = "a"\nduration_s = 1\n[processes.p]\n')


def test_toml_syntax_error_names_line() -> None:
    message = error(VALID.replace('host = "rx"', "host = rx"))
    assert "TOML syntax error" in message
    assert "line 13" in message


def test_processes_keep_file_order() -> None:
    text = VALID.replace("[processes.receiver]", "[processes.zz]").replace(
        "[processes.sender]", "[processes.aa]"
    )
    assert [p.name for p in parse(text).processes] == ["zz", "aa"]


# --- the typed model: every table, its unknown keys, and pydantic's text never shown --------

FULL = """\
name = "full"
duration_s = 10
[params]
jb = 20
[analysis]
unit_ms = 5
configured_latency_ms = 20
period_ms = 10
[hosts.a]
[hosts.b]
[[links]]
between = ["a", "b"]
delay_ms = 5
loss_model = "gilbert-elliott"
ge_p = 1
[links.reverse]
delay_ms = 7
[[links.schedule]]
at_s = 4
direction = "forward"
delay_ms = 30
[[links.schedule]]
at_s = 2
jitter_ms = 1
[devices.snd_a]
host = "a"
server = "jack"
period_frames = 240
[devices.snd_b]
host = "b"
server = "pulse"
[processes.rx]
host = "b"
pipeline = "udpsrc ! queue name=q${params.jb} ! tee name=t ! fakesink t. ! ${signal.sink}"
env = { GST_DEBUG = 2 }
sched = "rr:10"
[processes.tx]
host = "a"
command = ["prog", "${hosts.b.addr}", "${devices.snd_a.buffer_us}"]
[processes.alice]
host = "a"
browser = "chromium"
audio_file = "tone.wav"
[processes.bob]
host = "b"
webrtc = "gstreamer"
[calls.c1]
between = ["alice", "bob"]
[signal]
inject = "snd_a"
inject_client = "tx"
record = "rx"
"""
PYDANTIC_TEXT = (
    "validation error",
    "Input should",
    "[type=",
    "pydantic",
    "For further information",
)


def test_every_table_builds_what_the_lab_runs() -> None:
    s = parse(FULL)
    (link,) = s.links
    assert dict(link.impairment) == {"delay_ms": 5, "loss_model": "gilbert-elliott", "ge_p": 1}
    assert dict(link.reverse) == {"delay_ms": 7}
    assert [dict(step) for step in link.schedule] == [  # in time order
        {"at_s": 2, "jitter_ms": 1},
        {"at_s": 4, "delay_ms": 30, "direction": "forward"},
    ]
    assert [(d.name, d.server, d.period_us) for d in s.devices] == [
        ("snd_a", "jack", 5000),
        ("snd_b", "pulse", 10000),
    ]
    rx, tx, alice, bob = s.processes
    assert rx.env == {"GST_DEBUG": "2"} and str(rx.sched) == "rr:10"
    addrs = {"a": "10.0.0.1", "b": "10.0.0.2"}
    assert s.resolved_command(tx, addrs) == ["prog", "10.0.0.2", "10000"]
    assert alice.audio_file == str(Path(SRC).resolve().parent / "tone.wav")
    assert (alice.call_peer, bob.call_peer) == ("chromium", "gstreamer webrtcbin")
    assert bob.jitterbuffer_ms == 40 and alice.jitterbuffer_ms is None
    assert s.call_of("bob") is not None and s.call_of("bob").between == ("alice", "bob")
    assert s.signal is not None
    assert s.signal.inject.describe() == {"kind": "jack", "device": "snd_a", "client": "tx"}
    assert s.signal.record.describe() == {"kind": "gst", "process": "rx"}
    assert s.signal.rate == 48000 and s.analysis.configured_latency_ms == 20


@pytest.mark.parametrize(
    ("table", "where"),
    [
        ("duration_s = 10", ""),
        ("[analysis]", "analysis: "),
        ("[hosts.a]", "hosts.a: "),
        ("[[links]]", "links[0]: "),
        ("[links.reverse]", "links[0].reverse: "),
        ("[[links.schedule]]", "links[0].schedule[0]: "),
        ("[devices.snd_a]", "devices.snd_a: "),
        ("[processes.rx]", "processes.rx: "),
        ("[processes.alice]", "processes.alice: "),
        ("[processes.bob]", "processes.bob: "),
        ("[calls.c1]", "calls.c1: "),
        ("[signal]", "signal: "),
    ],
)
def test_an_unknown_key_is_one_line_naming_its_table(table: str, where: str) -> None:
    assert table in FULL
    message = error(FULL.replace(table, f"{table}\nzzz = 1", 1))
    assert message.startswith(f"{SRC}: {where}unknown key 'zzz' (known: "), message


def test_an_unknown_key_beside_a_sweep_names_the_file_not_a_point() -> None:
    text = FULL.replace("duration_s = 10", "duration_s = 10\nzzz = 1\n[sweep]\njb = [20, 40]")
    assert error(text).startswith(f"{SRC}: unknown key 'zzz' (known: name, duration_s, ")


def test_misplaced_process_keys_say_which_kind_takes_them() -> None:
    assert error(FULL.replace('audio_file = "tone.wav"', 'audio_caps = "audio/x-raw"')) == (
        f"{SRC}: processes.alice: 'audio_caps' does not apply to a browser process"
    )
    assert error(FULL.replace('sched = "rr:10"', "audio_processing = true")) == (
        f"{SRC}: processes.rx.audio_processing: applies only to a browser process"
    )


def _leaves(value: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _leaves(v, (*path, k))] + [path]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _leaves(v, (*path, i))] + [path]
    return [path]


def _mutated(data: dict[str, Any], path: tuple, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(data)
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    if value is _DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return data


_DELETE = object()
ODD_VALUES = ("x", "", -1, 0, 1e9, True, [1], [], {"k": 1}, "${nope}", _DELETE)


@pytest.mark.parametrize("sweep", ["", "[sweep]\njb = [20, 40]\n"])
def test_pydantic_text_never_reaches_a_user(sweep: str) -> None:
    """Every key of every table replaced by values of every type, or removed: each file
    parses or fails with one line naming the file, never pydantic's report."""
    data = tomllib.loads(FULL + sweep)
    failures = 0
    for path in _leaves(data):
        for value in ODD_VALUES:
            if not path or (value is _DELETE and isinstance(path[-1], int)):
                continue
            text = to_toml(_mutated(data, path, value))
            try:
                parse(text)
            except ScenarioError as exc:
                message = str(exc)
                failures += 1
                assert "\n" not in message and message.startswith(SRC), message
                assert not any(t in message for t in PYDANTIC_TEXT), message
    assert failures > 500


def test_sched_of_the_wrong_type_is_said_once() -> None:
    text = VALID.replace('GST_DEBUG = "2", ', "").replace("env = {", "sched = 10\nenv = {")
    assert error(text) == f"{SRC}: processes.receiver.sched: must be a string, not an integer"


def test_a_pulse_device_needs_two_periods() -> None:
    assert error(FULL.replace('server = "pulse"', 'server = "pulse"\nperiods = 1')) == (
        f"{SRC}: devices.snd_b.periods: must be an integer from 2 to 32, not 1"
    )
    jack = parse(FULL.replace('server = "jack"', 'server = "jack"\nperiods = 1')).devices[0]
    assert jack.periods == 1


def test_key_paths() -> None:
    assert key_path(("links", 0, "schedule", 2, "at_s")) == "links[0].schedule[2].at_s"
    assert key_path(("processes", "rx", "command", 1)) == "processes.rx.command[1]"
    assert key_path(()) == ""


def test_every_shipped_scenario_parses() -> None:
    paths = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.toml"))
    assert paths
    for path in paths:
        scenario = load_scenario(path)
        assert (scenario.processes or scenario.loads) and scenario.source == str(path)


def test_importing_the_scenario_types_leaves_pydantic_unloaded() -> None:
    """``latlab --help`` and the lab's modules do not pay for pydantic; a parse does."""
    code = (
        "import sys, latlab.lab.scenario as s\n"
        "assert 'pydantic' not in sys.modules\n"
        "s.parse_scenario(sys.argv[1])\n"
        "assert 'pydantic' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code, VALID], check=True, timeout=60)
