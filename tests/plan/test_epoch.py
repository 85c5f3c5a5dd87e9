"""The epoch plan: rows and number of batches from the lengths alone."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from streamseq.plan.epoch import epoch_rows, row_chunks
from streamseq.testing import layouts


@given(layouts(max_streams=30), st.sampled_from(["zeros", "drop", "wrap"]), st.integers(0, 5))
def test_every_stream_once_and_rows_balanced(layout, pad, epoch):
    lengths = np.array(layout.lengths)
    rows, n = epoch_rows(lengths, layout.batch_size, layout.tbins, pad, shuffle=True, epoch=epoch)
    placed = np.sort(np.concatenate(rows))
    assert placed.tolist() == np.flatnonzero(lengths).tolist()  # each non-empty once
    totals = [int(lengths[r].sum()) for r in rows]
    assert max(totals) - min(totals) <= lengths.max()  # invariant 6
    chunks = row_chunks(lengths, rows, layout.tbins)
    assert n == (chunks.min() if pad == "drop" else chunks.max())
