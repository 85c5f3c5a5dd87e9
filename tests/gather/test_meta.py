import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamseq import interleave_streams, tbin
from streamseq.gather import meta
from streamseq.gather.positions import packed_pieces
from streamseq.gather.writer import BatchWriter


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=6), st.integers(1, 4), st.integers(1, 5))
def test_the_tables_of_steps_give_what_computing_them_gives(lengths, rows, tbins):
    streams = [np.arange(n) for n in lengths]
    parts = [tbin(r, tbins) for r in interleave_streams(streams, rows)]
    table = BatchWriter(parts, "zeros", tbins)
    computed = meta.StepTables(tbins, 0, segmented=True)
    computed.ramps = computed.masks = None
    for i in range(int(table.counts.max(initial=0))):
        positions = table.positions(i, 1)
        a, b = meta.allocate(rows, tbins), meta.allocate(rows, tbins)
        table.step_tables.write(a, positions, 0)
        computed.write(b, positions, 0)
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_packed_metadata_marks_where_each_stream_starts():
    (row,) = interleave_streams([np.arange(3), np.arange(2)], 1)
    m = meta.allocate(1, 4)
    meta.write_packed(m, [row], [packed_pieces(row, 0, 4)])
    reset, valid, stream, step = (a.tolist() for a in m)
    assert reset == [True]
    assert valid == [[True, True, True, True]]
    assert step == [[0, 1, 2, 0]] and len(set(stream[0])) == 2
