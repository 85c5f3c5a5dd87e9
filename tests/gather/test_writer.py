"""The compiled batch assembly equals the numpy path, and refuses what it cannot copy."""

import os
import tempfile
from unittest import mock

import numpy as np
import pytest
from helpers import assume_rows_filled, raised_in_thread
from hypothesis import given, settings
from hypothesis import strategies as st

from streamseq import StreamError, StreamLoader, interleave_streams, tbin, zip_batch
from streamseq.gather import writer
from streamseq.testing import check_continuity, coded_streams, layouts
from streamseq.workers import shm as _shm

fill = pytest.importorskip("streamseq.gather._gather").fill

KINDS = ["plain", "swapped", "strided", "memmap", "sequence", "slice_of_larger"]


class ListStream:
    """A stream that is not an array: a Python list of steps."""

    def __init__(self, steps):
        self.steps = list(steps)

    def __len__(self):
        return len(self.steps)

    def __getitem__(self, s):
        return np.array(self.steps[s]).reshape(-1, *np.shape(self.steps[0]))


def variant(a, kind, folder, i):
    if kind == "swapped":
        return a.astype(a.dtype.newbyteorder("S"))
    if kind == "strided":
        return np.repeat(a, 2, axis=0)[::2]
    if kind == "memmap":
        path = os.path.join(folder, f"{i}.npy")
        np.save(path, a)
        return np.load(path, mmap_mode="r")
    if kind == "sequence":
        return ListStream(a)
    if kind == "slice_of_larger":
        big = np.concatenate([a, a, a])
        return big[len(a) : 2 * len(a)]
    return a


def drawn_variants(lengths, step, data, folder):
    """Coded streams of ``step`` (shape, dtype), each of a kind drawn from :data:`KINDS`."""
    shape, dtype = step
    kinds = data.draw(
        st.lists(st.sampled_from(KINDS), min_size=len(lengths), max_size=len(lengths))
    )
    base = [s.astype(dtype) for s in coded_streams(lengths, shape)]
    return [variant(a, k, folder, i) for i, (a, k) in enumerate(zip(base, kinds, strict=True))]


def batches(streams, layout, pad, compiled):
    loader = StreamLoader(streams, layout.batch_size, layout.tbins, pad=pad)
    with mock.patch.object(writer, "fill", fill if compiled else None):
        return [tuple(f.numpy().copy() for f in b) for b in loader]


def test_the_compiled_path_is_built():
    assert writer.fill is fill, "streamseq.gather._gather was not built: install with a C compiler"


@settings(max_examples=60, deadline=None)
@given(
    layouts(max_streams=10, max_length=30),
    st.sampled_from(["zeros", "drop", "wrap"]),
    st.sampled_from([((), "int64"), ((2, 3), "uint8"), ((3,), "float32")]),
    st.data(),
)
def test_compiled_equals_numpy_path(layout, pad, step, data):
    assume_rows_filled(layout, pad)
    with tempfile.TemporaryDirectory() as folder:
        streams = drawn_variants(layout.lengths, step, data, folder)
        fast = batches(streams, layout, pad, compiled=True)
        slow = batches(streams, layout, pad, compiled=False)
        assert len(fast) == len(slow)
        for x, y in zip(fast, slow, strict=True):
            for f, g in zip(x, y, strict=True):
                assert f.dtype == g.dtype
                np.testing.assert_array_equal(f, g)
        del streams  # memmaps closed before the folder goes


@settings(max_examples=30, deadline=None)
@given(layouts(), st.sampled_from(["zeros", "drop", "wrap"]))
def test_plain_arrays_take_the_compiled_path(layout, pad):
    assume_rows_filled(layout, pad)
    returns = []

    def spy(*args):
        returns.append(fill(*args))
        return returns[-1]

    streams = coded_streams(layout.lengths)
    loader = StreamLoader(streams, layout.batch_size, layout.tbins, pad=pad)
    with mock.patch.object(writer, "fill", spy):
        out = list(loader)
    assert set(returns) == ({-1} if out else set())
    if pad == "zeros":
        check_continuity(out, layout.lengths, sources=streams)


def outputs(rows=2, t=4, step=()):
    return (
        np.full((rows, t, *step), 7, np.int64),
        np.zeros(rows, bool),
        np.zeros((rows, t), bool),
        np.full((rows, t), 9, np.int64),
        np.full((rows, t), 9, np.int64),
    )


def call(streams, starts, counts, ids, outs):
    a = [np.array(x, np.int64) for x in (starts, counts, ids)]
    return fill(list(streams), *a, *outs)


def test_fill_writes_rows_padding_and_metadata():
    outs = outputs()
    assert call([np.arange(10), np.arange(10, 13)], [4, 0], [4, 3], [5, 8], outs) == -1
    data, reset, valid, stream, step = outs
    np.testing.assert_array_equal(data, [[4, 5, 6, 7], [10, 11, 12, 0]])
    np.testing.assert_array_equal(reset, [False, True])
    np.testing.assert_array_equal(valid, [[1, 1, 1, 1], [1, 1, 1, 0]])
    np.testing.assert_array_equal(stream, [[5, 5, 5, 5], [8, 8, 8, -1]])
    np.testing.assert_array_equal(step, [[4, 5, 6, 7], [0, 1, 2, -1]])


def test_fill_idle_row_is_padding():
    outs = outputs()
    assert call([np.arange(10), np.zeros(0, np.int64)], [0, -1], [2, 0], [0, -1], outs) == -1
    data, reset, valid, stream, step = outs
    np.testing.assert_array_equal(data[1], 0)
    assert not reset[1] and not valid[1].any()
    assert (stream[1] == -1).all() and (step[1] == -1).all()


@pytest.mark.parametrize(
    "bad",
    [
        [0, 1, 2],  # not an array
        np.arange(10, dtype=np.int32),  # another dtype
        np.arange(10).astype(">i8"),  # another byte order
        np.arange(20)[::2],  # not contiguous
        np.arange(10).reshape(5, 2),  # another step shape
        np.arange(3),  # too short for the steps asked
        np.array([object()] * 10, dtype=object),  # references: never copied as memory
    ],
)
def test_fill_refuses_what_it_cannot_copy_and_writes_nothing(bad):
    outs = outputs()
    before = [o.copy() for o in outs]
    assert call([np.arange(10), bad], [0, 2], [4, 4], [0, 1], outs) == 1
    for o, b in zip(outs, before, strict=True):
        np.testing.assert_array_equal(o, b)


def test_fill_refuses_counts_beyond_the_chunk():
    assert call([np.arange(10), np.arange(10)], [0, 0], [4, 5], [0, 1], outputs()) == 1


def test_fill_checks_its_outputs():
    data, reset, valid, stream, step = outputs()
    streams = [np.arange(10), np.arange(10)]
    with pytest.raises(ValueError, match="shapes"):
        call(streams, [0, 0], [1, 1], [0, 1], (data[:1], reset, valid, stream, step))
    with pytest.raises(TypeError, match="step"):
        call(streams, [0, 0], [1, 1], [0, 1], (data, reset, valid, stream, step.astype(np.int32)))
    with pytest.raises(TypeError, match="data"):
        call(streams, [0, 0], [1, 1], [0, 1], (data[:, ::2], reset, valid, stream, step))
    with pytest.raises(TypeError):
        fill(tuple(streams), *([np.zeros(2, np.int64)] * 3), data, reset, valid, stream, step)


def test_fill_refuses_starts_that_would_overflow():
    outs = outputs(rows=1, step=(3,))
    outs = (np.zeros((1, 4, 3), np.uint8), *outs[1:])
    stream = np.zeros((10, 3), np.uint8)
    for start in (2**63 - 2, 2**62, 9):
        assert call([stream], [start], [4], [0], outs) == 0


def test_fill_reads_memmaps_but_not_other_subclasses(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(10))
    assert (
        call(
            [np.arange(10), np.load(tmp_path / "a.npy", mmap_mode="r")],
            [0, 2],
            [4, 4],
            [0, 1],
            outputs(),
        )
        == -1
    )

    class Doubled(np.ndarray):
        def __getitem__(self, key):
            return np.asarray(self)[key] * 2

    assert (
        call([np.arange(10), np.arange(10).view(Doubled)], [0, 0], [4, 4], [0, 1], outputs()) == 1
    )
    loader = StreamLoader([np.arange(8).view(Doubled), np.arange(4)], 2, 4)
    assert next(iter(loader)).data.tolist() == [[0, 2, 4, 6], [0, 1, 2, 3]]


def test_fill_leaves_object_data_to_the_numpy_path():
    data = np.zeros((2, 4), object)
    _, reset, valid, stream, step = outputs()
    streams = [np.arange(10).astype(object), np.zeros(0, object)]
    assert call(streams, [0, -1], [4, 0], [0, -1], (data, reset, valid, stream, step)) == 0
    rows = interleave_streams([np.arange(10).astype(object), np.arange(5).astype(object)], 2)
    spec = np.zeros(0, object)
    batches = zip_batch([tbin(r, 4) for r in rows], length=5, spec=spec)
    assert [b.data[1].tolist() for b in batches][-2:] == [[0, 0, 0, 0], [0, 0, 0, 0]]


def test_a_zero_dim_array_with_a_declared_length_names_the_stream():
    loader = StreamLoader([np.arange(10), np.array(5)], 2, 4, lengths=[10, 3])
    with pytest.raises(StreamError, match=r"stream 1 .*len\(\) failed"):
        list(loader)


@pytest.mark.parametrize("compiled", [True, False])
def test_declined_batches_allocate_their_metadata_once(compiled):
    streams = [ListStream(range(20)), ListStream(range(30))]  # not arrays: fill declines
    loader = StreamLoader(streams, 2, 8)
    group = loader._in_process()
    used = []
    with mock.patch.object(writer, "fill", fill if compiled else None):
        for i in range(len(group)):
            slot = _shm.Slot(memoryview(bytearray(1 << 16)), 0, 1 << 16)
            _shm.use(slot)
            try:
                batch = group[i]
            finally:
                _shm.use(None)
            base = np.frombuffer(slot.view, np.uint8)
            assert all(np.shares_memory(f, base) for f in batch)
            used.append(slot.offset)
    sizes = 2 * 8 * 8 + 2 + 2 * 8 + 2 * 2 * 8 * 8  # data, reset, valid, stream, step
    assert max(used) < sizes + 5 * _shm.ALIGN


@settings(max_examples=40, deadline=None)
@given(
    layouts(max_streams=8, max_length=25),
    st.sampled_from(["zeros", "drop", "wrap", "pack"]),
    st.integers(0, 2),
    st.booleans(),
)
def test_written_gives_the_batch_and_its_valid_steps_from_the_plan(layout, pad, lookahead, spec):
    streams = coded_streams(layout.lengths, (2,))
    rows = interleave_streams(streams, layout.batch_size)
    parts = [tbin(r, layout.tbins, pack=pad == "pack", lookahead=lookahead) for r in rows]
    given_spec = streams[0][:0] if spec else None
    zipped = zip_batch(parts, pad=pad, spec=given_spec)
    for i in range(len(zipped)):
        *fields, ahead, steps = zipped.written(i)
        batch = zipped[i]
        assert ahead == batch.lookahead == lookahead
        for f, g in zip(fields, batch, strict=True):
            np.testing.assert_array_equal(f, g)
        assert steps is None or steps == int(np.count_nonzero(batch.valid))
        if pad != "pack":
            assert steps is not None  # (known from the plan: nothing counted)


def test_a_segmented_loader_counts_the_valid_steps_of_the_plan():
    streams = coded_streams([13, 7, 22, 5])
    for lookahead in (0, 1):
        loader = StreamLoader(streams, 2, 3, segment_length=6, lookahead=lookahead)
        it = iter(loader)
        valid = sum(int(b.valid.sum()) for b in it)
        assert it.meter.steps == valid > 0


def test_new_arrays_reuse_memory_only_once_every_view_of_it_is_gone():
    import torch

    from streamseq.gather.writer import KEPT_FROM, block, new_array

    if block is None:
        pytest.skip("without the compiled pass")
    shape, dtype = (KEPT_FROM // 8, 2), np.dtype(np.int64)
    first = new_array(shape, dtype)
    assert type(first.base.base) is type(block(1))  # (over a kept block)
    first[:] = 7
    views = [first[3:], torch.from_numpy(first)[5], first.reshape(-1)[::3]]
    address = first.ctypes.data
    del first
    later = [new_array(shape, dtype) for _ in range(12)]
    for a in later:
        assert a.ctypes.data != address  # (its memory is still seen through the views)
        a[:] = -1
    assert all((np.asarray(v) == 7).all() for v in views)
    del views, later
    kept = {new_array(shape, dtype).ctypes.data for _ in range(3)}
    assert len(kept) == 1  # (each one gone before the next: one block kept, given out again)
    assert new_array((4,), dtype).base is None  # (small: numpy's)
    objects = new_array((KEPT_FROM,), np.dtype(object))
    assert objects.base is None and objects[0] is None


def test_a_batch_array_too_large_raises_numpys_error_naming_its_size_shape_and_dtype():
    from streamseq.gather.writer import new_array

    for shape in [(1 << 40, 1 << 10), (1 << 31, 1 << 31, 8)]:  # 8 PiB; bytes past 2**63
        with pytest.raises(Exception) as expected:
            np.empty(shape, np.float64)
        with pytest.raises(type(expected.value)) as got:
            new_array(shape, np.dtype(np.float64))
        assert str(got.value) == str(expected.value) != ""


def test_the_kept_blocks_make_room_for_the_sizes_in_use():
    """Blocks of sizes no longer made (another loader's batches) do not keep the sizes
    made now out of the pool: the oldest kept go, and the pool stays bounded."""
    from streamseq.gather import _gather
    from streamseq.gather.writer import KEPT_FROM, new_array

    u1 = np.dtype(np.uint8)
    for k in range(1, 20):  # sizes of earlier batches, each gone before the next
        new_array((KEPT_FROM * k,), u1)
    size = 3 << 20
    new_array((size,), u1)
    kept = _gather.kept()
    assert kept[-1] == size  # (kept for the next array of its size)
    assert len(kept) <= 8 and sum(kept) <= 64 << 20
    held = new_array((size,), u1)  # (given out again: no longer kept)
    assert size not in _gather.kept()
    big = [new_array((20 << 20,), u1) for _ in range(5)]
    del big
    assert len(_gather.kept()) <= 8 and sum(_gather.kept()) <= 64 << 20
    del held


def test_a_batch_shape_of_numpy_integers_whose_bytes_overflow_is_numpys_error():
    from streamseq.gather.writer import new_array

    shape = (np.int64(2**61 + 2**14), 8)  # (its bytes, in int64, wrap round to 1 MiB)
    with pytest.raises(ValueError) as expected:
        np.empty(shape, np.float64)
    with np.errstate(over="ignore"), pytest.raises(ValueError) as got:
        new_array(shape, np.dtype(np.float64))
    assert str(got.value) == str(expected.value)


def test_the_large_arrays_of_a_tree_of_steps_are_made_over_kept_memory_like_an_arrays():
    from streamseq.gather.writer import KEPT_FROM, block

    if block is None:
        pytest.skip("without the compiled pass")
    kept = type(block(1))
    rng = np.random.default_rng(0)
    wide = [rng.integers(0, 99, (n, 2048)) for n in (5, 9, 7)]  # 16 KiB a step
    streams = [{"x": w, "y": w[:, :2].astype(np.float32)} for w in wide]
    batches = zip_batch([tbin(r, 4) for r in interleave_streams(streams, 2)])
    for i in range(len(batches)):
        batch = batches[i]
        x, y = batch.data["x"], batch.data["y"]
        assert x.nbytes >= KEPT_FROM and type(x.base.base) is kept  # (as an array's data)
        assert y.nbytes < KEPT_FROM and y.base is None  # (small: numpy's)
        assert (x[~batch.valid] == 0).all() and (y[~batch.valid] == 0).all()


def _add_one(steps, info):
    """A transform (picklable): batches read through the checked path."""
    return steps + 1


@settings(max_examples=15, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 12), min_size=1, max_size=6).filter(any),
    batch_size=st.integers(1, 4),
    pad=st.sampled_from(["zeros", "wrap", "drop", "pack"]),
    lookahead=st.integers(0, 2),
    segment=st.booleans(),
    how=st.sampled_from(["arrays", "tree", "transform"]),
)
@pytest.mark.filterwarnings("ignore")
def test_batches_over_kept_memory_equal_those_over_numpys_every_byte_written(
    lengths, batch_size, pad, lookahead, segment, how
):
    """A kept block holds the bytes of the batch before it: every byte of a batch (its
    padding zeros) is written whatever the options, so batches over kept memory (16 KiB
    steps) are those over fresh memory, pass after pass."""
    if writer.block is None:
        pytest.skip("without the compiled pass")
    rng = np.random.default_rng(len(lengths))
    arrays = [rng.integers(1, 99, (n, 2048)) for n in lengths]
    streams = [{"x": a, "y": a[:, :4].copy()} for a in arrays] if how == "tree" else arrays
    options = {
        "pad": pad,
        "lookahead": min(lookahead, max(lengths)),
        "segment_length": 4 if segment else None,
        "shuffle": True,
        "transform": _add_one if how == "transform" else None,
    }
    try:
        kept = StreamLoader(streams, batch_size, 3, **options)
    except ValueError:  # (options that do not go together)
        return
    with mock.patch.object(writer, "block", None):
        fresh = StreamLoader(streams, batch_size, 3, **options)
        want = [[as_numpy_tree(b) for b in fresh] for _ in range(2)]
    got = [[as_numpy_tree(b) for b in kept] for _ in range(2)]
    assert got == want


def as_numpy_tree(batch):
    """The bytes of every field of a batch (each leaf of a tree)."""
    out = []
    for f in batch:
        for leaf in [f[k] for k in sorted(f)] if isinstance(f, dict) else [f]:
            out.append(np.asarray(leaf).tobytes())
    return out


class _Reentering:
    """A stream whose read asks for the next batch of the pass it is read for."""

    def __init__(self, data, ask):
        self.data, self.ask = data, ask  # (ask: a list of at most one call, made once)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, key):
        if self.ask:
            self.ask.pop()()
        return self.data[key]


@pytest.mark.parametrize("asks", ["next", "index"])
def test_a_batch_whose_own_read_asks_for_a_batch_is_an_error_not_a_hang(asks):
    # The writer writes one batch at a time; a read of the batch (a transform, a source)
    # that asks the same writer for a batch in the same thread would wait for itself
    # for ever: it is an error naming the stream and the steps.

    ask = []
    streams = [_Reentering(np.arange(12), ask), np.arange(10) + 100]
    loader = StreamLoader(streams, 2, 3, pin_memory=False)
    it = iter(loader)
    ask.append(lambda: next(it) if asks == "next" else loader[2])
    error = raised_in_thread(lambda: next(it), "the read that asked for a batch waits for ever")
    assert isinstance(error, StreamError)
    assert "steps 0:3" in str(error) and "same thread" in str(error)
