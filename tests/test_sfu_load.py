"""An SFU's load curve (latlab.analysis.sfu_load, latlab.report.sfu_load) on sweep points
with known answers: where the knee is, why, and what limited it."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from latlab.analysis.sfu_load import knee, load_rows
from latlab.report.sfu_load import knee_line, sfu_load_table


def _point(pubs: int, out_per_s: float, p99: float, not_fwd: float, busy: float,
           sfu_cpu: float = 20.0, load_cpu: float = 30.0) -> dict[str, Any]:  # fmt: skip
    return {
        "name": f"pubs={pubs}", "status": "ok", "values": {"pubs": pubs},
        "forwarding": {"sfu": {
            "received_per_s": out_per_s / 3, "forwarded_per_s": out_per_s,
            "not_forwarded": {"rate": not_fwd}, "match_rate": 1.0,
            "dwell": {"p50_ms": 0.3, "p99_ms": p99},
        }},
        "costs": {"janus": {"host": "sfu", "per_packet": {"cpu_us": 50.0, "syscalls": 4.0,
                                                           "context_switches": 1.5}}},
        "loads": {"crowd": {"expected": 1000, "lost": 0}},
        "resources": {"cpu_pct": {"janus": sfu_cpu, "crowd": load_cpu},
                      "system": {"cpu_busy_pct_mean": busy, "cpus": 2}},
    }  # fmt: skip


def test_the_knee_is_the_first_point_that_does_not_keep_up() -> None:
    points = [
        _point(4, 4000, 1.5, 0.0, 120.0),
        _point(1, 1000, 1.0, 0.0, 40.0),  # out of order: rows sort by packets sent
        _point(2, 2000, 1.2, 0.001, 80.0),
        _point(8, 6000, 9.0, 0.05, 195.0, sfu_cpu=70.0, load_cpu=110.0),
    ]
    rows = load_rows(points)
    assert [r["point"] for r in rows] == ["pubs=1", "pubs=2", "pubs=4", "pubs=8"]
    found = knee(rows)
    assert found is not None and found["found"]
    assert (found["below_point"], found["at_point"]) == ("pubs=4", "pubs=8")
    assert found["why"] == ["5.0% not forwarded", "dwell p99 9.0 ms (lightest 1.0 ms)"]
    assert found["limited_by"] == (
        "the machine (its 2 CPUs 98 % busy; most of it: the load generator)"
    )


def test_an_sfu_that_drops_on_an_idle_machine_is_the_limit() -> None:
    points = [_point(1, 1000, 1.0, 0.0, 30.0), _point(2, 2000, 1.1, 0.2, 60.0, sfu_cpu=99.0)]
    found = knee(load_rows(points))
    assert found is not None and found["at_point"] == "pubs=2"
    assert found["limited_by"] == "the SFU (SFU CPU 99 %, machine 60 % of one core)"


def test_no_knee_when_every_point_keeps_up_and_none_without_an_sfu() -> None:
    points = [_point(1, 1000, 1.0, 0.0, 30.0), _point(2, 2000, 1.1, 0.0, 60.0)]
    sweep = {"name": "s", "sweep": {"variables": {"pubs": [1, 2]}}, "points": points}
    assert (
        knee_line(sweep)
        == "knee: none up to 2000 packets/s forwarded (point pubs=2): every point kept up"
    )
    assert knee(load_rows([{"name": "x", "status": "ok", "streams": []}])) is None
    assert sfu_load_table({"points": [{"name": "x", "status": "ok"}]}) is None


def test_the_table_fits_80_columns() -> None:
    points = [_point(1, 1000, 1.0, 0.0, 30.0), _point(8, 6000, 9.0, 0.05, 195.0)]
    sweep = {"name": "sfu-load", "sweep": {"variables": {"pubs": [1, 8]}}, "points": points}
    table = sfu_load_table(sweep)
    assert table is not None
    out = io.StringIO()
    Console(file=out, width=80, force_terminal=False).print(table)
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80
    assert any("6000" in line and "5.00" in line for line in lines)
