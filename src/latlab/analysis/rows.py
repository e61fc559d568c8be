"""Unique rows of integer columns, fast.

``np.unique(a, axis=...)`` compares rows as opaque byte strings: on the millions of
candidate pairs an SFU capture gives (:mod:`latlab.analysis.forwarding`) it took most of
a run's analysis. :func:`unique_rows` gives the same answer by packing the columns into
one int64 key per row, most significant column first, so that the order of keys is the
rows' lexicographic order; where the columns need more than 62 bits, the columns packed
so far are first replaced by their dense rank, which keeps that order.
"""

from __future__ import annotations

import numpy as np

_KEY_BITS = 62  # a packed key stays a non-negative int64


def unique_rows(columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct columns of the integer array ``columns`` (k rows of n values: one
    entry per row of the table, as ``np.stack`` of k arrays gives it), in lexicographic
    order, and for each of the n entries the index of its distinct column: what
    ``np.unique(columns, axis=1, return_inverse=True)`` returns (its inverse flat)."""
    columns = np.asarray(columns)
    if columns.ndim != 2 or not np.issubdtype(columns.dtype, np.integer):
        raise ValueError("unique_rows needs a 2-D integer array")
    n = columns.shape[1]
    if n == 0:
        return columns.copy(), np.zeros(0, dtype=np.int64)
    key, bits = np.zeros(n, dtype=np.int64), 0
    for row in columns:
        low = int(row.min())
        width = (int(row.max()) - low).bit_length()
        if width > _KEY_BITS:
            return _by_bytes(columns)
        if bits + width > _KEY_BITS:
            _, key = np.unique(key, return_inverse=True)
            bits = int(key.max()).bit_length()
            if bits + width > _KEY_BITS:
                return _by_bytes(columns)
        key = (key << width) | _from_zero(row, low)
        bits += width
    _, inverse = np.unique(key, return_inverse=True)
    inverse = inverse.ravel()
    first = np.empty(int(inverse.max()) + 1, dtype=np.int64)
    first[inverse] = np.arange(n)  # any entry of a distinct column stands for it
    return columns[:, first], inverse


def _from_zero(row: np.ndarray, low: int) -> np.ndarray:
    """``row - low`` as int64 (its span is known to fit), without overflowing its dtype."""
    if np.issubdtype(row.dtype, np.unsignedinteger):
        return (row.astype(np.uint64) - np.uint64(low)).astype(np.int64)
    return row.astype(np.int64) - np.int64(low)


def _by_bytes(columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The slow path, for columns whose values span more than 62 bits."""
    uniq, inverse = np.unique(columns, axis=1, return_inverse=True)
    return uniq, inverse.ravel()
