"""Signal handling so that SIGTERM and Ctrl-C unwind through cleanup code."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class Terminated(SystemExit):
    """Raised in the main thread when SIGTERM arrives (exit status 143)."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)


def interruptible() -> None:
    """Make SIGINT raise KeyboardInterrupt (a clean stop) even if latlab was started with
    it ignored: a shell ignores SIGINT in the commands it starts in the background (``&``,
    nohup, many CI runners), and Python keeps an ignored SIGINT ignored, so ``kill -INT``
    would not stop a run. Called first by the entry points."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _restorable(handler: object) -> object:
    """``signal.signal`` returns None for handlers not set from Python; restore the default."""
    return signal.SIG_DFL if handler is None else handler


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated()


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` so ``finally`` blocks run."""
    if not _in_main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, _restorable(previous))


@contextmanager
def signals_deferred() -> Iterator[list[int]]:
    """Hold SIGINT/SIGTERM while cleaning up; raise for the first one afterwards.

    Yields the list of signals received so far (cleanup code may hurry when non-empty).
    """
    received: list[int] = []
    if not _in_main_thread():
        yield received
        return

    def hold(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    previous = {s: signal.signal(s, hold) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, _restorable(handler))
    if received:
        if received[0] == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated()
