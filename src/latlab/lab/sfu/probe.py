"""An SFU's readiness probe, run inside its host's namespace (the runner's namespace has no
route to it): ``python -m latlab.lab.sfu.probe URL TIMEOUT_S`` asks ``URL`` every 20 ms
until it answers HTTP 200, prints the answer's body and exits 0, or exits 1 after the
timeout. The server's class judges the body (:meth:`SfuServer.accept`)."""

from __future__ import annotations

import sys
import time
import urllib.error
import urllib.request

PROBE_EVERY_S = 0.02


def probe(url: str, timeout_s: float) -> int:
    """Ask ``url`` until it answers 200 (0, its body printed) or ``timeout_s`` passed (1)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1.0) as answer:
                body = answer.read().decode("utf-8", errors="replace")
        except (urllib.error.URLError, OSError, ValueError):
            time.sleep(PROBE_EVERY_S)
            continue
        sys.stdout.write(body)
        return 0
    return 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m latlab.lab.sfu.probe URL TIMEOUT_S")
    sys.exit(probe(sys.argv[1], float(sys.argv[2])))
