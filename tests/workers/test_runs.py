"""runs: a worker's group as any set of rows, each run written at its rows of the slot."""

import gc

import numpy as np
import pytest

from streamseq import StreamLoader
from streamseq.errors import StreamError
from streamseq.workers import shm
from streamseq.workers.runs import RunItems, Runs, in_row_order, runs_of

pytestmark = pytest.mark.timeout(120)

#: one stream a row, 8 rows: cut in two contiguous groups, one costs 3% over the mean
LENGTHS = [480, 476, 470, 478, 440, 450, 448, 450]


def streams(lengths=LENGTHS):
    rng = np.random.default_rng(0)
    return [rng.integers(0, 1000, (n, 3)).astype(np.float32) for n in lengths]


def fields(loader):
    return [
        [np.ascontiguousarray(np.asarray(x)).tobytes() for x in (b.data, *b[1:5])] for b in loader
    ]


def test_runs_of_sorted_rows():
    assert runs_of(np.array([], np.int64)) == []
    assert runs_of(np.array([3])) == [(3, 1)]
    assert runs_of(np.array([0, 2, 3, 4, 7])) == [(0, 1), (2, 3), (7, 1)]


@pytest.mark.parametrize("method", ["process", "thread"])
def test_groups_of_any_rows_give_the_batches_of_0_workers_over_the_slot(method):
    loader = StreamLoader(streams(), 8, 16, num_workers=2, method=method)
    plan = loader.plan()
    groups = loader._reading.groups(plan, 2)
    assert all(type(g) is Runs for g in groups)  # not contiguous: runs
    rows = np.sort(np.concatenate([g.given_rows for g in groups]))
    assert rows.tolist() == list(range(8))  # every row, once
    costs = [len(r) for r in loader._reading.rows(plan)]
    got = [sum(costs[r] for r in g.given_rows) for g in groups]
    assert max(got) < max(sum(costs[:4]), sum(costs[4:]))
    try:
        for i, batch in enumerate(loader):
            if i == 1 and method == "process":  # a view of the slot, no copy
                assert not batch.data.numpy().flags.owndata
        del batch
        for _ in range(2):  # epochs 0 and 1
            assert fields(loader) == fields(StreamLoader(streams(), 8, 16))
        if method == "process":
            gc.collect()
            slots = loader._workers.slots
            assert slots.held() == 0 and len(slots.free) == slots.count
    finally:
        loader.close()


def test_a_failing_row_of_a_run_names_its_stream_after_the_batches_before():
    class FailingAt:
        def __init__(self, n, at):
            self.n, self.at = n, at

        def __len__(self):
            return self.n

        def __getitem__(self, key):
            if key.start <= self.at < key.stop:
                raise OSError(f"bad step {self.at}")
            return np.arange(self.n)[key].astype(np.float32) * 10

    data = [np.arange(n, dtype=np.float32) for n in LENGTHS]
    data[5] = FailingAt(LENGTHS[5], 100)
    loader = StreamLoader(data, 8, 16, num_workers=2, method="process")
    assert all(type(g) is Runs for g in loader._reading.groups(loader.plan(), 2))
    delivered = 0
    with pytest.raises(StreamError) as info:
        for _ in loader:
            delivered += 1
    loader.close()
    assert delivered == 100 // 16  # every batch before the failing one
    assert "stream 5" in str(info.value) and "bad step 100" in str(info.value)


def test_resume_mid_pass_of_runs_gives_the_rest():
    whole = fields(StreamLoader(streams(), 8, 16))
    loader = StreamLoader(streams(), 8, 16, num_workers=2)
    it = iter(loader)
    for _ in range(7):
        next(it)
    state = loader.state_dict()
    loader.close()
    again = StreamLoader(streams(), 8, 16, num_workers=2)
    again.load_state_dict(state)
    try:
        assert fields(again) == whole[7:]
    finally:
        again.close()


def test_in_row_order_slices_groups_and_picks_runs():
    a = [RunItems([np.array([0, 1]), np.array([5])], [0, 5])]
    b = [np.array([2, 3, 4])]
    runs = in_row_order([a, b], [np.array([0, 1, 5]), np.array([2, 3, 4])])
    assert np.concatenate([r[0] for r in runs]).tolist() == [0, 1, 2, 3, 4, 5]
    assert in_row_order([a, b], [None, None]) == [a, b]


class _Rows:
    """Micro-batches of ``rows`` rows written where the current slot puts them."""

    def __init__(self, rows, value, in_slot=True):
        self.num_rows, self.value, self.in_slot = rows, value, in_slot
        self.spec_ = None

    def __len__(self):
        return 3

    def __getitem__(self, i):
        make = shm.empty if self.in_slot else np.empty
        out = make((self.num_rows, 2), np.int64)
        out[:] = self.value + i
        return (out,)


def test_runs_write_their_rows_of_the_same_arrays_in_a_slot():
    memory = bytearray(1 << 12)
    slot = shm.Slot(memoryview(memory), 0, len(memory), (0, 5))
    runs = Runs([_Rows(2, 10), _Rows(1, 40)], [0, 3])  # rows 0-1 and 3 of 5
    shm.use(slot)
    try:
        got = runs[1]
    finally:
        shm.use(None)
    whole = np.ndarray((5, 2), np.int64, memory, 0)
    assert whole[[0, 1, 3], 0].tolist() == [11, 11, 41]
    assert [p[0][:, 0].tolist() for p in got.parts] == [[11, 11], [41]]


def test_a_run_not_written_in_the_slot_is_read_again_apart_never_over_another():
    memory = bytearray(1 << 12)
    slot = shm.Slot(memoryview(memory), 0, len(memory), (0, 5))
    runs = Runs([_Rows(2, 10), _Rows(1, 40, in_slot=False)], [0, 3])
    shm.use(slot)
    try:
        got = runs[2]
        assert shm.current() is slot
    finally:
        shm.use(None)
    assert [p[0][:, 0].tolist() for p in got.parts] == [[12, 12], [42]]


def test_batches_held_across_stopped_passes_whose_groups_differ_stay_those_of_0_workers():
    rng = np.random.default_rng(3)
    data = [
        rng.integers(0, 1000, (int(n), 3)).astype(np.float32) for n in rng.integers(20, 200, 24)
    ]
    want = StreamLoader(data, 8, 8, shuffle=True)
    wanted = []
    for e in range(3):
        want.set_epoch(e)
        wanted.append(fields(want))
    loader = StreamLoader(data, 8, 8, num_workers=3, shuffle=True)
    try:
        sets = []
        for e in range(3):
            loader.set_epoch(e)
            sets.append([g.given_rows.tolist() for g in loader._reading.groups(loader.plan(), 3)])
        assert len({str(s) for s in sets}) > 1  # (the groups differ from one epoch to the next)
        held = []
        for e in range(3):
            loader.set_epoch(e)
            for i, batch in enumerate(loader):  # each pass stopped early: a new one after
                held.append((e, i, batch))
                if i == 3 + e:
                    break
        gc.collect()
        for e, i, batch in held:
            got = [
                np.ascontiguousarray(np.asarray(x)).tobytes() for x in (batch.data, *batch[1:5])
            ]
            assert got == wanted[e][i], (e, i)
    finally:
        loader.close()
