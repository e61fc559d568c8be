"""Run independent pieces of numpy work on a few threads (numpy releases the GIL in its loops)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

WORKERS = max(1, min(4, os.cpu_count() or 1))


def parallel_map(fn: Callable[[T], R], items: Iterable[T], workers: int = WORKERS) -> list[R]:
    """``[fn(item) for item in items]``, computed on up to ``workers`` threads."""
    items = list(items)
    if workers < 2 or len(items) < 2:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        return list(pool.map(fn, items))


def in_background(fn: Callable[[], R]) -> Callable[[], R]:
    """Start ``fn()`` on a thread now; the returned function waits for its result."""
    pool = ThreadPoolExecutor(max_workers=1)
    future = pool.submit(fn)
    pool.shutdown(wait=False)
    return future.result
