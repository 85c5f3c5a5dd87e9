import numpy as np
import pytest

from streamseq import StreamLoader
from streamseq.workers.blocks import Layout
from streamseq.workers.epochs import EpochBlocks

pytestmark = pytest.mark.timeout(120)

STREAMS = [np.arange(n) for n in (30, 20, 25, 12, 40)]


def batches(loader):
    return [b.data.tolist() for b in loader]


@pytest.mark.parametrize("method", ["process", "thread"])
def test_persistent_workers_read_any_epoch(method):
    loader = StreamLoader(
        STREAMS, 2, 4, shuffle=True, num_workers=2, method=method, persistent_workers=True
    )
    try:
        for epoch in (0, 2**24, 2**40, 2**63 - 1):
            expected = StreamLoader(STREAMS, 2, 4, shuffle=True)
            expected.set_epoch(epoch)
            loader.set_epoch(epoch)
            assert batches(loader) == batches(expected), epoch
    finally:
        loader.close()


def test_epoch_blocks_have_no_end():
    loader = StreamLoader(STREAMS, 2, 4)
    blocks = EpochBlocks(loader._reading.group_of, loader._epochs, 0, 2, size=2)
    item = EpochBlocks.first_item(2**70)
    assert blocks.segment_end(item) == item + len(Layout(2, len(loader)))
    assert [b.step.tolist() for b in blocks[item + 1]] == [[[4, 5, 6, 7]], [[8, 9, 10, 11]]]
    assert blocks.name_item(item).startswith(f"epoch {2**70}, batch 0: stream ")
    with pytest.raises(TypeError):
        len(blocks)
