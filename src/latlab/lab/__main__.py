"""``python -m latlab.lab SCENARIO OUT_DIR [--no-trace] [--no-progress]``: run one scenario.

A minimal entry point for scripts and tests; the user-facing command is ``latlab run``.
Exit status: as ``latlab`` (docs/exit-codes.md): 0 ok, 1 the run failed, 2 bad input,
3 the machine cannot, 130 Ctrl-C, 143 SIGTERM.
"""

from __future__ import annotations

import argparse
import faulthandler
import signal
import sys
from pathlib import Path

from latlab.errors import INTERRUPTED, LatlabError
from latlab.lab.runner import run_scenario
from latlab.lab.scenario import load_scenario
from latlab.lab.signals import interruptible


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the scenario, print errors as one line; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m latlab.lab")
    parser.add_argument("scenario", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--no-trace", action="store_true", help="do not load the tracer")
    parser.add_argument("--no-progress", action="store_true", help="no progress display")
    args = parser.parse_args(argv)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1: where it is stuck
    interruptible()  # a clean stop on SIGINT, also when started in the background
    try:
        scenario = load_scenario(args.scenario)
        result = run_scenario(
            scenario, args.out_dir, trace=not args.no_trace, progress=not args.no_progress
        )
    except LatlabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return INTERRUPTED
    print(f"run dir: {result.out_dir} ({len(result.trace_files)} trace files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
