"""An SFU's load curve (latlab.analysis.sfu_load, latlab.report.sfu_load) on sweep points
with known answers: where the knee is, why, and what limited it."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from latlab.analysis.sfu_load import knee, load_rows, repeats
from latlab.report.sfu_load import (
    knee_lines,
    sfu_comparison_table,
    sfu_load_table,
    sfu_repeat_table,
)


def _point(pubs: int, out_per_s: float, p99: float, not_fwd: float, busy: float,
           sfu_cpu: float = 20.0, load_cpu: float = 30.0, server: str = "janus",
           cpu_us: float = 50.0) -> dict[str, Any]:  # fmt: skip
    values: dict[str, Any] = {"pubs": pubs} if server == "janus" else {"sfu": server, "pubs": pubs}
    return {
        "name": f"pubs={pubs}", "status": "ok", "values": values,
        "sfus": {"sfu": {"server": server, "host": "sfu"}},
        "forwarding": {"sfu": {
            "received_per_s": out_per_s / 3, "forwarded_per_s": out_per_s,
            "not_forwarded": {"rate": not_fwd}, "match_rate": 1.0,
            "dwell": {"p50_ms": 0.3, "p99_ms": p99},
        }},
        "costs": {"sfu": {"host": "sfu", "per_packet": {"cpu_us": cpu_us, "syscalls": 4.0,
                                                           "context_switches": 1.5}}},
        "loads": {"crowd": {"expected": 1000, "lost": 0}},
        "resources": {"cpu_pct": {"sfu": sfu_cpu, "crowd": load_cpu},
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
        knee_lines(sweep)[0]
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


def test_two_sfus_compared_at_the_heaviest_load_both_kept_up_with() -> None:
    def both(server: str, cpu_us: float, at_8: float) -> list[dict[str, Any]]:
        points = [_point(1, 1000, 1.0, 0.0, 30.0, server=server, cpu_us=cpu_us),
                  _point(4, 4000, 1.5, 0.0, 90.0, server=server, cpu_us=cpu_us),
                  _point(8, 8000, 1.8, at_8, 150.0, server=server, cpu_us=cpu_us)]  # fmt: skip
        for point in points:
            point["values"] = {"sfu": server, "pubs": point["values"]["pubs"]}
        return points

    points = both("janus", 60.0, 0.0) + both("livekit", 90.0, 0.2)
    sweep = {"name": "s", "sweep": {"variables": {"sfu": ["janus", "livekit"], "pubs": [1, 4, 8]}},
             "points": points}  # fmt: skip
    lines = knee_lines(sweep)
    assert (
        lines[0]
        == "janus knee: none up to 8000 packets/s forwarded (point pubs=8): every point kept up"
    )
    assert lines[1].startswith("livekit knee: between 4000 (point pubs=4) and 8000")
    table = sfu_comparison_table(sweep)
    assert table is not None and "pubs=4" in str(table.title)  # livekit left pubs=8 unsent
    out = io.StringIO()
    Console(file=out, width=80, force_terminal=False).print(table)
    text = out.getvalue()
    assert "janus" in text and "livekit" in text and "60.0" in text and "90.0" in text
    assert "none" in text and "8000" in text


def test_repeated_runs_of_one_load_give_each_sfus_spread_and_no_knee() -> None:
    """Three rounds of one load per SFU (a ``round`` sweep variable): medians and spreads
    known from the planted costs; rounds are not a load curve, so no knee."""
    points = []
    for server, costs in (("janus", (30.0, 33.0, 36.0)), ("latlab", (10.0, 10.5, 11.0))):
        for k, cpu_us in enumerate(costs, start=1):
            point = _point(8, 3000 + k, 1.0 + k, 0.0, 60.0, server=server, cpu_us=cpu_us)
            point["values"] = {"round": k, "sfu": server}
            point["name"] = f"round={k},sfu={server}"
            points.append(point)
    sweep = {"name": "r", "sweep": {"variables": {"round": [1, 2, 3], "sfu": ["janus", "latlab"]}},
             "points": points}  # fmt: skip
    found = {r["server"]: r for r in repeats(load_rows(points))}
    assert set(found) == {"janus", "latlab"} and found["janus"]["runs"] == 3
    assert found["janus"]["cpu_us"]["median"] == 33.0
    assert found["janus"]["cpu_us"]["spread"] == pytest.approx(6 / 33)
    assert found["latlab"]["cpu_us"]["spread"] == pytest.approx(1 / 10.5)
    assert found["latlab"]["syscalls"]["spread"] == 0.0
    assert (
        found["janus"]["dwell_p99_ms"]["min"] == 2.0
        and found["janus"]["dwell_p99_ms"]["max"] == 4.0
    )
    assert knee_lines(sweep) == []
    out = io.StringIO()
    Console(file=out, width=80, force_terminal=False).print(sfu_repeat_table(sweep))
    text = out.getvalue()
    assert "33.0" in text and "18.2" in text and "10.5" in text and "9.5" in text
    assert sfu_repeat_table({"points": points[:1]}) is None
