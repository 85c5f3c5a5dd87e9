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


def test_a_fresh_plan_is_made_once_per_spec_and_epoch():
    from streamseq.plan.planner import Epochs, plan_epoch
    from streamseq.plan.progress import progress_at
    from streamseq.plan.spec import PlanSpec

    spec = PlanSpec(np.array([5, 2, 3, 4, 1]), batch_size=2, tbins=2, shuffle=True)
    first = Epochs(spec).plan(1)
    assert Epochs(spec).plan(1) is first  # a loader resuming its own state: not planned again
    again = plan_epoch(spec, 1)
    assert [r.tolist() for r in first.assignment] == [r.tolist() for r in again.assignment]
    assert Epochs(spec).plan(2).epoch == 2
    assert Epochs(spec.replace(seed=1)).plan(1) is not first  # another spec
    lengths = spec.units[2]
    rest = progress_at(lengths, first.pieces, first.assignment, 2, False, 1)
    resumed = Epochs(spec, (1, rest)).plan(1)
    assert resumed is not first and resumed.rest is rest  # the rest of an epoch: its own
