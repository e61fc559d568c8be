"""The netem link backend: its tc commands, the choice of backend, and a real netem.

This machine's kernel has no sch_netem (and no loadable modules), so the real netem
path runs inside a User-Mode Linux kernel (Debian's user-mode-linux, which ships
sch_netem as a module) with the host's file system as its root: the lab, tc and ping
are the host's own programs, the kernel is one that has netem.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from latlab.lab.netem import netem_args, netem_missing, qdisc_commands, tbf_args
from latlab.lab.netns import Lab, LabError, list_namespaces
from latlab.lab.scenario import ScenarioError, parse_scenario
from tests import uml
from tests.conftest import two_hosts

REPO = Path(__file__).resolve().parents[1]
root = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")

IDLE = "fakesrc ! fakesink"  # the lab tests start no process


def with_link(link_keys: str) -> str:
    """A two-host scenario whose link has ``link_keys``."""
    return two_hosts(IDLE, IDLE, name="netem", link_keys=link_keys)


def test_netem_arguments_follow_the_linkemu_model() -> None:
    assert netem_args({"delay_ms": 20, "jitter_ms": 5}) == [
        "limit", "100000", "delay", "20ms", "5ms", "distribution", "normal",
    ]  # fmt: skip
    assert netem_args({"delay_ms": 20, "jitter_ms": 2.5, "jitter_dist": "uniform"}) == [
        "limit", "100000", "delay", "20ms", "2.5ms",
    ]  # fmt: skip
    assert netem_args({"loss_pct": 1.5, "duplicate_pct": 0.1}) == [
        "limit", "100000", "loss", "random", "1.5%", "duplicate", "0.1%",
    ]  # fmt: skip
    # gemodel p r 1-h 1-k: ge_h and ge_k are already loss probabilities (linkemu's
    # defaults: r 100, h 100, k 0)
    assert netem_args({"loss_model": "gilbert-elliott", "ge_p": 2}) == [
        "limit", "100000", "loss", "gemodel", "2%", "100%", "100%", "0%",
    ]  # fmt: skip
    assert netem_args({"reorder_pct": 10}) == [
        "limit", "100000", "delay", "0ms", "reorder", "10%",
    ]  # fmt: skip
    assert netem_args({}) == ["limit", "100000"]


def test_bottleneck_is_a_tbf_under_netem() -> None:
    assert tbf_args({"delay_ms": 5}) is None
    assert tbf_args({"rate_kbit": 2400}) == [
        "rate", "2400kbit", "burst", "1540", "latency", "50ms",
    ]  # fmt: skip
    commands = qdisc_commands("llab-1-tx", "ll1v0a", {"rate_kbit": 600, "queue_ms": 80})
    assert commands == [
        ["tc", "-n", "llab-1-tx", "qdisc", "replace", "dev", "ll1v0a",
         "root", "handle", "1:", "netem", "limit", "100000"],
        ["tc", "-n", "llab-1-tx", "qdisc", "replace", "dev", "ll1v0a",
         "parent", "1:1", "handle", "10:", "tbf", "rate", "600kbit", "burst", "1540",
         "latency", "80ms"],
    ]  # fmt: skip


def test_unknown_backend_is_one_line() -> None:
    text = with_link('backend = "tc"\ndelay_ms = 5')
    with pytest.raises(ScenarioError) as error:
        parse_scenario(text, "n.toml")
    assert str(error.value) == (
        "n.toml: links[0].backend: unknown backend 'tc' (known: latlab-linkemu, netem, auto)"
    )


def _kernel_has_netem() -> bool:
    with Lab(["probe"]) as lab:
        return netem_missing(lab.namespace("probe")) is None


@pytest.mark.e2e
@root
def test_without_netem_auto_uses_the_emulator_and_netem_is_refused() -> None:
    if _kernel_has_netem():
        pytest.skip("this kernel has sch_netem")
    auto = parse_scenario(with_link('backend = "auto"\ndelay_ms = 5'), "a.toml")
    with Lab.from_scenario(auto) as lab:
        assert lab.describe()["links"][0]["backend"] == "latlab-linkemu"
        assert lab.emulators and not lab.netem_links
    forced = parse_scenario(with_link('backend = "netem"\ndelay_ms = 5'), "n.toml")
    lab = Lab.from_scenario(forced)
    names = [lab.namespace(h) for h in lab.hosts]
    with pytest.raises(LabError) as error:
        lab.up()
    assert str(error.value).startswith(
        "links[0] (tx-rx): backend netem, but this kernel cannot run it (Error: "
    )
    assert "\n" not in str(error.value)
    assert not set(names) & set(list_namespaces())


@pytest.fixture(scope="module")
def uml_guest() -> None:
    """Skip, naming the probe's reason, where no User-Mode Linux guest with netem can run
    (tests/uml: a boot probe, run once per host and kept)."""
    reason = uml.unavailable()
    if reason is not None:
        pytest.skip(f"User-Mode Linux with netem cannot run here: {reason}")


@pytest.mark.exclusive
@pytest.mark.e2e
@root
def test_netem_link_in_a_kernel_that_has_it(tmp_path: Path, uml_guest: None) -> None:
    out = tmp_path / "seen.json"
    console = uml.boot(tmp_path, f"{sys.executable} -m tests.netem_in_uml {out}", timeout=300)
    assert "latlab-uml-exit 0" in console, console[-3000:]
    seen = json.loads(out.read_text(encoding="utf-8"))
    link = seen["link"]
    assert link["backend"] == "netem"
    assert link["log"] is None
    assert [a["at_s"] for a in link["applied"]] == [0, 2]
    assert link["tc"][0].startswith("tc -n llab-")
    assert "netem limit 100000 delay 30ms loss random 25%" in link["tc"][0]
    assert "netem limit 100000 delay 20ms" in link["tc"][1]
    # 20 ms each way, then 30 + 20 ms: a round trip is at least that, and little more
    before, after = (np.array(seen[k]["rtt_ms"]) for k in ("before", "after"))
    assert len(before) == seen["before"]["sent"]
    assert before.min() >= 40.0 and np.median(before) < 45.0
    assert after.min() >= 50.0 and np.median(after) < 55.0
    # 25 % of the echo requests lost on the way out: binomial, 400 sent (sd 8.7)
    lost = seen["after"]["sent"] - len(after)
    assert 65 <= lost <= 135, lost
    egress = link["qdisc_stats"][0]["qdiscs"][0]
    assert egress["kind"] == "netem" and egress["drops"] >= lost  # (and any ARP lost)
    assert seen["left_behind"] == []


@pytest.mark.exclusive
@pytest.mark.e2e
@root
def test_shipped_impaired_scenario_runs_over_netem(tmp_path: Path, uml_guest: None) -> None:
    """scenarios/l16-impaired.toml (20 ms normal 2 ms, 0.5 % loss), backend netem, 5 s."""
    text = (REPO / "scenarios" / "l16-impaired.toml").read_text(encoding="utf-8")
    text = text.replace("loss_pct = 0.5", 'loss_pct = 0.5\nbackend = "netem"', 1)
    text = text.replace("duration_s = 10", "duration_s = 5", 1)
    scenario, out = tmp_path / "l16-netem.toml", tmp_path / "run"
    scenario.write_text(text, encoding="utf-8")
    console = uml.boot(tmp_path, f"./latlab run {scenario} --out {out}", timeout=300)
    assert "latlab-uml-exit 0" in console, console[-3000:]
    link = json.loads((out / "run.json").read_text(encoding="utf-8"))["links"][0]
    assert link["backend"] == "netem" and link["log"] is None
    assert "delay 20ms 2ms distribution normal loss random 0.5%" in link["tc"][0]
    sent = link["qdisc_stats"][0]["qdiscs"][0]["packets"]
    assert sent > 200  # 50 RTP packets/s for 5 s went through tx's netem
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    stream = summary["streams"][0]
    network = {s["to"]: s for s in stream["segments"]}["receiver/udpsrc0:src"]
    # netem's 20 ms (median of a normal jitter) is there. No upper bound: UML runs every
    # guest process on one host thread, each syscall through ptrace, and the receiver
    # falls behind real time (network p50 448, 454.7 and 469 ms in three runs of this
    # test, the receiver at 84 % CPU); ping asserts netem's delay precisely above.
    assert network["p50_ms"] >= 19.5, network["p50_ms"]


PANIC = """\
Linux version 6.1.0-... (uml)
userspace - ptrace set fp regs failed, errno = 14
Kernel panic - not syncing: Attempted to kill init! exitcode=0x0000000b
 [<606931e5>] panic+0x197/0x376
"""


def test_a_failed_guest_boot_is_named_by_its_first_failure_lines() -> None:
    assert uml.failure_reason(PANIC) == (
        "userspace - ptrace set fp regs failed, errno = 14; "
        "Kernel panic - not syncing: Attempted to kill init! exitcode=0x0000000b"
    )
    assert uml.failure_reason("") == "the guest printed no reason: no output"


@pytest.mark.e2e
@root
def test_the_probe_names_why_uml_cannot_run(uml_guest: None) -> None:
    """On a host whose XSAVE size UML's register writes cannot meet (AMX), every guest
    panics at boot; simulated here by failing those writes with EFAULT, as such a host's
    kernel does (tests/uml/seccomp_xstate.py), the probe says why."""
    wrapper = (sys.executable, str(uml.HERE / "seccomp_xstate.py"), "efault-set")
    reason = uml.probe(wrapper=wrapper)
    assert reason is not None and "ptrace set fp regs failed, errno = 14" in reason, reason
