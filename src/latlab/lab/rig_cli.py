"""The command line the device rigs share (``latlab.lab.jack_signal``,
``latlab.lab.pulse_signal``): run by ``latlab run`` inside a host's namespace, they take
the same file arguments and report a failure as one line for the run's log."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def rig_parser(prog: str, log_help: str) -> argparse.ArgumentParser:
    """A parser with the arguments every rig takes; the rig adds what it connects to."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("mode", choices=("inject", "record"))
    parser.add_argument("--wav", type=Path, required=True, help="signal to play / recording")
    parser.add_argument("--log", type=Path, required=True, help=log_help)
    parser.add_argument("--max-s", type=float, default=600.0, help="longest recording")
    parser.add_argument(
        "--exit-at-end", action="store_true", help="inject: stop once the file has been played"
    )
    return parser


def run_rig(run: Callable[[argparse.Namespace], None], args: argparse.Namespace) -> int:
    """Run the rig; any failure is one line on stderr (the run reports it) and exit 1."""
    try:
        run(args)
    except Exception as exc:  # one line for the run's log; the run reports it
        print(f"latlab-{args.mode}: error: {exc}", file=sys.stderr)
        return 1
    return 0
