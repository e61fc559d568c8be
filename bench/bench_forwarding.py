#!/usr/bin/env python3
"""The SFU dwell matcher (latlab.analysis.forwarding) on synthetic SFU traffic of a
given length (latlab.synthetic_sfu: three simulcast layers and audio in, two legs out,
layer switches, losses, retransmissions; with --renumber, a leg that leaves out every
other frame and the publisher's padding and keeps its numbering contiguous, as LiveKit
does): egress packets matched per second, and the
time against an anchor measured in the same run, one ``np.unique(axis=0)`` over as many
five-column rows as the matcher forms candidate pairs (its dominant primitive).
It checks every match against the known truth and prints; it asserts nothing.

    .venv/bin/python bench/bench_forwarding.py [--seconds 120] [--repeat 3] [--renumber]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from latlab.analysis.forwarding import DEFAULT_WINDOW_NS, candidate_pairs, match_forwarded
from latlab.synthetic_sfu import sfu_traffic


def _best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--renumber", action="store_true")
    args = parser.parse_args()
    run = sfu_traffic(seconds=args.seconds, seed=1, renumber=args.renumber)
    result = match_forwarded(run.ingress, run.egress)
    wrong = int((result.status != run.status).sum())
    pairs = len(candidate_pairs(run.ingress, run.egress, DEFAULT_WINDOW_NS)[0])
    rows = np.random.default_rng(0).integers(0, 1 << 20, (pairs, 5))
    matcher = _best(lambda: match_forwarded(run.ingress, run.egress), args.repeat)
    anchor = _best(lambda: np.unique(rows, axis=0), args.repeat)
    n = len(run.egress)
    print(
        f"{args.seconds:g} s of traffic: {len(run.ingress)} ingress, {n} egress packets, "
        f"{pairs} candidate pairs; status differs from the truth on {wrong}"
    )
    print(
        f"matcher {matcher:.3f} s ({n / matcher:,.0f} egress packets/s); anchor "
        f"np.unique over {pairs} rows {anchor:.3f} s; ratio {matcher / anchor:.2f}"
    )


if __name__ == "__main__":
    main()
