"""Synthetic clock observations with known answers: two clocks of planted offset and drift
exchanging timestamps over a path of planted (a)symmetric delay and jitter, for tests and
``bench/bench_clocks.py``. The truth is a true time axis ``T`` (ns): clock A reads ``T``,
clock B reads ``T + offset + drift * T``, so theta(t_A) = offset + drift * t_A."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class PlantedClock:
    """B against A: ``offset_ns`` at A's time 0 and ``drift_ppm``."""

    offset_ns: float
    drift_ppm: float

    def theta(self, t_a: np.ndarray | float) -> np.ndarray | float:
        """t_B - t_A at A's time ``t_a``."""
        return self.offset_ns + self.drift_ppm * 1e-6 * np.asarray(t_a, np.float64)


def simulate_exchanges(
    clock: PlantedClock,
    forward_ns: float,
    back_ns: float,
    *,
    jitter_ns: float = 20_000.0,
    hold_ns: float = 10_000.0,
    duration_s: float = 60.0,
    rate_hz: float = 5.0,
    start_ns: float = 1e12,
    seed: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """t1..t4 of exchanges A -> B -> A: A sends ``rate_hz`` a second; each way takes its
    base delay plus an exponential queueing jitter of mean ``jitter_ns``; B holds each
    request ``hold_ns`` before answering."""
    rng = np.random.default_rng(seed)
    n = int(duration_s * rate_hz)
    send = start_ns + np.arange(n) / rate_hz * 1e9 + rng.uniform(0, 1e9 / rate_hz / 4, n)
    fwd = forward_ns + rng.exponential(jitter_ns, n)
    back = back_ns + rng.exponential(jitter_ns, n)
    hold = hold_ns + rng.exponential(hold_ns / 4, n)
    arrive = send + fwd
    answer = arrive + hold
    home = answer + back
    t1 = send
    t2 = arrive + clock.theta(arrive)
    t3 = answer + clock.theta(answer)
    t4 = home
    return tuple(np.rint(x).astype(np.int64) for x in (t1, t2, t3, t4))  # type: ignore[return-value]


def write_clock_log(
    path: Path,
    domain: str,
    *,
    exchanges: dict[str, tuple[np.ndarray, ...]] | None = None,
    pairs: tuple[np.ndarray, np.ndarray] | None = None,
    maxerror_us: float = 16_000_000.0,
    synced: bool = False,
    planted: bool = False,
) -> None:
    """A clock log (docs/clocks.md) as a domain's agent writes it: its header, its clock
    samples (``pairs``: monotonic and realtime ns) and the exchanges it started
    (``exchanges``: peer domain -> t1..t4)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [{"type": "domain", "domain": domain, "hostname": "synthetic", "boot_id": "",
              "planted": planted, "agent": "synthetic", "pid": 0}]  # fmt: skip
    if pairs is not None:
        for mono, real in zip(*pairs, strict=True):
            lines.append({"type": "pair", "mono_ns": int(mono), "real_ns": int(real),
                          "bracket_ns": 100, "state": 0 if synced else 5,
                          "status": 0 if synced else 0x40, "maxerror_us": maxerror_us,
                          "esterror_us": maxerror_us, "synced": synced})  # fmt: skip
    for peer, (t1, t2, t3, t4) in (exchanges or {}).items():
        for row in zip(t1, t2, t3, t4, strict=True):
            stamps = dict(zip(("t1", "t2", "t3", "t4"), map(int, row), strict=True))
            lines.append({"type": "exchange", "peer": peer, **stamps})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
