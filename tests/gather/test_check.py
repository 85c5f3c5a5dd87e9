import numpy as np
import pytest

from streamseq.gather import put, spec_mismatch


def test_trees_are_compared_leaf_by_leaf():
    spec = {"a": np.zeros((0, 2)), "b": (np.zeros(0, np.int8),)}
    ok = {"a": np.ones((3, 2)), "b": (np.ones(3, np.int8),)}
    assert spec_mismatch(spec, ok) is None
    assert spec_mismatch(spec, {"a": ok["a"]}).startswith("steps are a dict with keys ['a']")
    bad = {"a": ok["a"], "b": (np.ones(3),)}
    assert (
        spec_mismatch(spec, bad)
        == "['b']: [0]: dtype float64 differs from the first stream's int8"
    )


def test_other_byte_orders_match():
    assert spec_mismatch(np.zeros((0,), "<i4"), np.ones(2, ">i4")) is None


def test_put_neither_broadcasts_nor_casts_unsafely():
    out = np.zeros((2, 2), np.int16)
    with pytest.raises(ValueError, match="data of shape"):
        put(out, np.ones(2, np.int16))
    with pytest.raises(TypeError):
        put(out, np.ones((2, 2)))
