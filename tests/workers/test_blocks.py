"""Items handed over in blocks: the same items, in order, from any position."""

from hypothesis import given
from hypothesis import strategies as st

from streamseq.workers.blocks import Blocks, Layout, Unblocked
from streamseq.workers.sizing import block_size


@given(st.integers(1, 40), st.integers(0, 200))
def test_blocks_hold_every_item_once_in_order(size, items):
    layout = Layout(size, items)
    blocks = Blocks(list(range(items)), size)
    assert [x for j in range(len(blocks)) for x in blocks[j]] == list(range(items))
    for j in range(len(blocks)):
        assert 1 <= len(blocks[j]) <= size
        assert all(layout.block_of(i) == j for i in blocks[j])
        assert layout.start(j) == blocks[j][0]
    assert [len(blocks[j]) for j in range(min(3, len(blocks)))] == [
        min(n, size, items - (2**k - 1)) for k, n in enumerate((1, 2, 4)) if 2**k - 1 < items
    ]


@given(st.integers(1, 40), st.integers(1, 200), st.data())
def test_unblocked_gives_any_item_from_any_position(size, items, data):
    asked = []

    class Counting(Blocks):
        def __getitem__(self, j):
            asked.append(j)
            return super().__getitem__(j)

    unblocked = Unblocked(Counting(list(range(items)), size), size, items)
    start = data.draw(st.integers(0, items - 1))
    assert [unblocked[i] for i in range(start, items)] == list(range(start, items))
    assert asked == sorted(set(asked))  # each block fetched once, reading in order
    i = data.draw(st.integers(0, items - 1))
    assert unblocked[i] == i
    unblocked.release()


def test_block_size_aims_at_a_few_megabytes():
    assert block_size(64 * 1024) == 32  # small micro-batches: many per hand-over
    assert block_size(300_000) == 6
    assert block_size(10**7) == 1  # a large one: one per hand-over
