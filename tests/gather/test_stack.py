import numpy as np
import pytest

from streamseq.batch import Batch, Chunk
from streamseq.gather import stack


def chunk(data, start, stream=0):
    n = len(data)
    step = np.full(3, -1)
    step[:n] = np.arange(start, start + n)
    ids = np.where(step >= 0, stream, -1)
    padded = np.zeros((3, *np.shape(data)[1:]))
    padded[:n] = data
    return Chunk(padded.astype(np.asarray(data).dtype), start == 0, step >= 0, ids, step)


def test_rows_without_items_are_padding():
    b = stack([(1, 1, chunk([5, 6], 0, stream=2))], rows=3, tbins=3)
    assert b.data.tolist() == [[0, 0, 0], [5, 6, 0], [0, 0, 0]]
    assert b.reset.tolist() == [False, True, False]
    assert b.stream.tolist() == [[-1] * 3, [2, 2, -1], [-1] * 3]
    assert b.step.tolist() == [[-1] * 3, [0, 1, -1], [-1] * 3]


def test_a_batch_item_fills_its_rows_and_metadata_only_items_keep_zeros():
    inner = stack([(0, 1, chunk([1, 2, 3], 3)), (1, 1, chunk([4], 0, 1))], rows=2, tbins=3)
    meta_only = Batch(None, *inner[1:])
    b = stack([(0, 2, inner), (2, 2, meta_only)], rows=4, tbins=3)
    assert b.data.tolist() == [[1, 2, 3], [4, 0, 0], [0, 0, 0], [0, 0, 0]]
    assert b.step[2:].tolist() == inner.step.tolist()


def test_the_data_layout_comes_from_spec_then_items_then_describe():
    spec = np.zeros((0, 2), np.float32)
    assert stack([], 1, 3, spec=spec).data.dtype == np.float32
    assert stack([], 1, 3).data is None
    assert stack([], 1, 3, describe=lambda: spec).data.shape == (1, 3, 2)


def test_data_that_does_not_fit_names_the_row():
    with pytest.raises(ValueError, match=r"batch 7, row 1: ValueError: data of shape"):
        stack([(1, 1, chunk(np.ones((2, 5)), 0))], 2, 3, np.zeros((0, 4)), where="batch 7, ")
