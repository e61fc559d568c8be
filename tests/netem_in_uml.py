"""Run inside a User-Mode Linux kernel that has sch_netem (see tests/test_netem.py).

Sets up a two-host lab whose link goes through netem, pings across it before and
after a scheduled change, and writes what it saw as JSON to the file named by argv[1].
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from latlab.lab.netns import Lab, list_namespaces
from latlab.lab.scenario import parse_scenario
from tests.conftest import two_hosts

LINK = """\
backend = "netem"
delay_ms = 20
[[links.schedule]]
at_s = 2
direction = "forward"
delay_ms = 30
loss_pct = 25
"""
IDLE = "fakesrc ! fakesink"  # no process is started: the lab alone
RTT = re.compile(r"icmp_seq=(\d+) .*time=([0-9.]+) ms")


def ping(lab: Lab, count: int, interval_s: float) -> dict[str, object]:
    """Ping rx from tx; the round-trip times of the replies and how many were sent."""
    argv = ["ping", "-n", "-c", str(count), "-i", str(interval_s), "-W", "1", lab.addr("rx")]
    result = subprocess.run(
        lab.exec_argv("tx", argv), capture_output=True, text=True, check=False, timeout=60
    )
    rtts = [float(m.group(2)) for m in RTT.finditer(result.stdout)]
    return {"sent": count, "rtt_ms": rtts}


def main(out: Path) -> None:
    text = two_hosts(IDLE, IDLE, name="netem-in-uml", duration=10, link_keys=LINK)
    scenario = parse_scenario(text, "netem-in-uml.toml")
    seen: dict[str, object] = {}
    with Lab.from_scenario(scenario) as lab:
        seen["before"] = ping(lab, 20, 0.05)
        link = lab.netem_links[0]
        deadline = time.monotonic() + 10
        while len(link.applied) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)  # waiting for the scheduled change to be applied
        seen["after"] = ping(lab, 400, 0.01)
        lab_namespaces = [lab.namespace(h) for h in lab.hosts]
    seen["link"] = lab.describe()["links"][0]
    seen["left_behind"] = [n for n in list_namespaces() if n in lab_namespaces]
    out.write_text(json.dumps(seen), encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
