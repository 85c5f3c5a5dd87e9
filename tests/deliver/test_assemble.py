import numpy as np

from streamseq import interleave_streams, tbin, zip_batch
from streamseq.deliver.assemble import assemble
from streamseq.workers.runs import in_row_order


class Prepared:
    """A group of micro-batches that records the items it is prepared for."""

    def __init__(self, items):
        self.items, self.prepared = items, []

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]

    def prepare(self, i):
        self.prepared.append(i)


def test_runs_of_one_group_prepare_it_once_per_batch():
    streams = [np.arange(n) + 100 * k for k, n in enumerate([6, 5, 6, 4])]
    rows = interleave_streams(streams, 4)
    mine = [np.array([0, 2]), np.array([1, 3])]  # every worker's rows: two runs each
    groups = [Prepared(zip_batch([tbin(rows[r], 2) for r in m])) for m in mine]
    batches = assemble(in_row_order(groups, mine))
    whole = zip_batch([tbin(r, 2) for r in rows])
    for i in range(len(whole)):
        batch, steps = batches.counted(i)
        assert np.array_equal(batch.data.numpy(), whole[i].data)
        assert np.array_equal(batch.step.numpy(), whole[i].step)
        assert steps == int(whole[i].valid.sum())
    assert [g.prepared for g in groups] == [list(range(len(whole)))] * 2
