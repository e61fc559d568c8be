"""Clock logs (``clock/NAME.jsonl``): what each clock domain's agent recorded.

One JSON object per line, each with ``type`` (docs/clocks.md has the format):

* ``domain``: the first line: ``domain`` (the clock domain every other line's times are
  in), ``hostname``, ``boot_id``, ``planted`` (true when the lab planted this clock),
  ``agent``, ``pid``;
* ``pair``: ``mono_ns``, ``real_ns`` (CLOCK_MONOTONIC and CLOCK_REALTIME read together;
  ``bracket_ns``: the monotonic time the read took) and the kernel's view then
  (adjtimex): ``state``, ``status``, ``maxerror_us``, ``esterror_us``, ``synced``;
* ``exchange``: one two-way exchange this domain started with ``peer``: ``t1`` (sent),
  ``t4`` (answer received) on this clock, ``t2`` (received), ``t3`` (answered) on the
  peer's;
* ``status``: what ``chronyc`` or ``pmc`` said (``tool``, ``text``), recorded as is.

Read damage-tolerantly: a line that is not a JSON object of a known type (a log cut
short) is skipped and counted in ``problems``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from latlab.rundir import clock_logs

DOMAIN, PAIR, EXCHANGE, STATUS = "domain", "pair", "exchange", "status"
PAIR_FIELDS = ("mono_ns", "real_ns", "bracket_ns", "maxerror_us")
EXCHANGE_FIELDS = ("t1", "t2", "t3", "t4")


@dataclass
class DomainSamples:
    """One domain's clock samples (all its logs together), as columns."""

    domain: str
    mono_ns: np.ndarray
    real_ns: np.ndarray
    bracket_ns: np.ndarray
    maxerror_us: np.ndarray
    synced: np.ndarray
    planted: bool = False
    hostnames: list[str] = field(default_factory=list)
    boot_ids: list[str] = field(default_factory=list)
    status: list[dict[str, Any]] = field(default_factory=list)  # chronyc / pmc texts


@dataclass
class Exchanges:
    """Two-way exchanges from ``client`` to ``server`` (t1, t4 on the client's clock)."""

    client: str
    server: str
    t1: np.ndarray
    t2: np.ndarray
    t3: np.ndarray
    t4: np.ndarray


@dataclass
class ClockLogs:
    """Every clock log of a run directory."""

    domains: dict[str, DomainSamples]
    exchanges: list[Exchanges]
    files: list[Path]
    problems: list[str]

    def __bool__(self) -> bool:
        return bool(self.domains or self.exchanges)


def read_clock_logs(run_dir: Path) -> ClockLogs:
    """Read ``clock/*.jsonl`` of ``run_dir`` (none: an empty ClockLogs)."""
    pairs: dict[str, dict[str, list[Any]]] = {}
    headers: dict[str, list[dict[str, Any]]] = {}
    statuses: dict[str, list[dict[str, Any]]] = {}
    exchanges: dict[tuple[str, str], dict[str, list[int]]] = {}
    problems: list[str] = []
    files = clock_logs(run_dir)
    for path in files:
        _read_one(path, pairs, headers, statuses, exchanges, problems)
    domains = {}
    for domain in sorted(set(pairs) | set(headers)):
        cols = pairs.get(domain, {})
        heads = headers.get(domain, [])
        domains[domain] = DomainSamples(
            domain=domain,
            mono_ns=np.array(cols.get("mono_ns", []), np.int64),
            real_ns=np.array(cols.get("real_ns", []), np.int64),
            bracket_ns=np.array(cols.get("bracket_ns", []), np.int64),
            maxerror_us=np.array(cols.get("maxerror_us", []), np.float64),
            synced=np.array(cols.get("synced", []), bool),
            planted=any(bool(h.get("planted")) for h in heads),
            hostnames=sorted({str(h.get("hostname", "")) for h in heads}),
            boot_ids=sorted({str(h.get("boot_id", "")) for h in heads}),
            status=statuses.get(domain, []),
        )
    found = [
        Exchanges(client, server, *(np.array(cols[k], np.int64) for k in EXCHANGE_FIELDS))
        for (client, server), cols in sorted(exchanges.items())
    ]
    return ClockLogs(domains, found, files, problems)


def _read_one(
    path: Path,
    pairs: dict[str, dict[str, list[Any]]],
    headers: dict[str, list[dict[str, Any]]],
    statuses: dict[str, list[dict[str, Any]]],
    exchanges: dict[tuple[str, str], dict[str, list[int]]],
    problems: list[str],
) -> None:
    domain = None
    skipped = 0
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        problems.append(f"{path.name}: cannot read: {exc.strerror or exc}")
        return
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            skipped += 1
            continue
        if not isinstance(entry, dict):
            skipped += 1
            continue
        kind = entry.get("type")
        try:
            if kind == DOMAIN:
                domain = str(entry["domain"])
                headers.setdefault(domain, []).append(entry)
            elif domain is None:
                skipped += 1
            elif kind == PAIR:
                cols = pairs.setdefault(domain, {})
                values = [int(entry[k]) for k in PAIR_FIELDS[:3]]
                values.append(float(entry.get("maxerror_us", float("inf"))))
                for key, value in zip(PAIR_FIELDS, values, strict=True):
                    cols.setdefault(key, []).append(value)
                cols.setdefault("synced", []).append(bool(entry.get("synced", False)))
            elif kind == EXCHANGE:
                key = (domain, str(entry["peer"]))
                values = [int(entry[k]) for k in EXCHANGE_FIELDS]
                cols = exchanges.setdefault(key, {k: [] for k in EXCHANGE_FIELDS})
                for k, value in zip(EXCHANGE_FIELDS, values, strict=True):
                    cols[k].append(value)
            elif kind == STATUS:
                statuses.setdefault(domain, []).append(
                    {"tool": str(entry.get("tool", "")), "text": str(entry.get("text", ""))}
                )
            else:
                skipped += 1
        except (KeyError, TypeError, ValueError):
            skipped += 1
    if domain is None and lines:
        problems.append(f"{path.name}: no domain line: not a clock log")
    elif skipped:
        problems.append(f"{path.name}: {skipped} line(s) unreadable, skipped")
