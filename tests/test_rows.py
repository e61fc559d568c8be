"""latlab.analysis.rows.unique_rows against numpy's own ``np.unique(axis=1)``: the same
distinct columns in the same order and the same inverse, for narrow columns (one packed
key), columns that need ranking between packs (more than 62 bits together), columns
that cannot be packed at all (one spans more than 62 bits), any integer dtype."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from latlab.analysis.rows import unique_rows

DTYPES = st.sampled_from([np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64])


def _numpy(columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    uniq, inverse = np.unique(columns, axis=1, return_inverse=True)
    return uniq, inverse.ravel()


@settings(max_examples=200, deadline=None)
@given(
    hnp.arrays(
        DTYPES,
        st.tuples(st.integers(1, 5), st.integers(0, 60)),
        elements={"min_value": 0, "max_value": 7},
    )
)
def test_narrow_columns_give_what_numpy_gives(columns: np.ndarray) -> None:
    uniq, inverse = unique_rows(columns)
    want_uniq, want_inverse = _numpy(columns)
    assert np.array_equal(uniq, want_uniq) and np.array_equal(inverse, want_inverse)
    assert uniq.dtype == columns.dtype


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 2**32),
    hnp.arrays(
        np.int64,
        st.tuples(st.integers(2, 5), st.integers(1, 60)),
        elements={"min_value": -(2**40), "max_value": 2**40},
    ),
)
def test_wide_columns_ranked_between_packs_give_what_numpy_gives(
    offset: int, columns: np.ndarray
) -> None:
    columns = columns + offset  # 41-bit spans: two do not fit one key
    columns[:, ::3] = columns[:, :1]  # repeated entries
    uniq, inverse = unique_rows(columns)
    want_uniq, want_inverse = _numpy(columns)
    assert np.array_equal(uniq, want_uniq) and np.array_equal(inverse, want_inverse)


@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
def test_a_column_spanning_more_than_62_bits_falls_back_to_numpy(dtype: type) -> None:
    info = np.iinfo(dtype)
    columns = np.array([[info.max, info.min, info.max, 3], [1, 2, 1, 2]], dtype=dtype)
    uniq, inverse = unique_rows(columns)
    want_uniq, want_inverse = _numpy(columns)
    assert np.array_equal(uniq, want_uniq) and np.array_equal(inverse, want_inverse)


def test_no_entries_and_bad_shapes() -> None:
    uniq, inverse = unique_rows(np.zeros((3, 0), dtype=np.int64))
    assert uniq.shape == (3, 0) and inverse.shape == (0,)
    with pytest.raises(ValueError):
        unique_rows(np.zeros(4, dtype=np.int64))
    with pytest.raises(ValueError):
        unique_rows(np.zeros((2, 4), dtype=np.float64))
