import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamseq._index import slice_bounds, step_index


@given(st.integers(0, 30), st.integers(-40, 40) | st.none(), st.integers(-40, 40) | st.none())
def test_slice_bounds_are_numpys(n, a, b):
    x = np.arange(n)
    lo, hi = slice_bounds(slice(a, b), n)
    np.testing.assert_array_equal(x[lo:hi], x[a:b])


@given(st.integers(1, 30), st.integers(-40, 40))
def test_step_index_is_numpys(n, i):
    x = np.arange(n)
    if -n <= i < n:
        assert step_index(np.int64(i), n) == x[i]
    else:
        with pytest.raises(IndexError, match=f"index {i} out of range for 3 rows|length {n}"):
            step_index(i, n)


def test_bad_keys():
    with pytest.raises(ValueError, match="contiguous"):
        slice_bounds(slice(0, 4, 2), 5)
    for key in (1.0, "1", None):
        with pytest.raises(TypeError, match="indices must be integers or slices"):
            step_index(key, 5)
    with pytest.raises(IndexError, match="out of range for 3 rows"):
        step_index(3, 3, "{n} rows")
