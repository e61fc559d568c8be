"""Scenario parsing and validation: valid files parse; each mistake is one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest

from latlab.lab.scenario import Scenario, ScenarioError, load_scenario, parse_scenario

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
            "processes.sender: unknown key 'pipline' (known: host, pipeline, env, command, sched)",
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
        ("[hosts.tx]", "[hosts.tx]\nos = 1", "hosts.tx: unknown key 'os' (known: none)"),
        ("[hosts.tx]", '[hosts."t x"]', "hosts.t x: invalid name 't x'"),
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
