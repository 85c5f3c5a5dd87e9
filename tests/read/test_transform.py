"""Transforms run where the steps are read, with randomness that is part of the plan."""

import functools

import numpy as np
import pytest
from helpers import as_numpy, assert_same
from hypothesis import given, settings
from hypothesis import strategies as st

from streamseq import (
    StepInfo,
    StreamError,
    StreamLoader,
    interleave_streams,
    map_steps,
    tbin,
    zip_batch,
)
from streamseq._tree import leaves, tree_map
from streamseq.testing import check_continuity, layouts

SIDE, CROP = 6, 4


def frames(lengths):
    """int32 frames [n, 6, 6]: pixel (y, x) of step k of stream s is s*1e6 + k*100 + y*10 + x."""
    yx = np.arange(SIDE)[:, None] * 10 + np.arange(SIDE)
    return [
        (s * 1_000_000 + np.arange(n)[:, None, None] * 100 + yx).astype(np.int32)
        for s, n in enumerate(lengths)
    ]


def crop_and_jitter(steps, info):
    """One random crop per stream, one random jitter per step: int32 [6,6] -> float64 [4,4]."""
    oy, ox = info.rng().integers(0, SIDE - CROP + 1, size=2)
    jitter = np.array([info.rng(k).random() for k in range(info.start, info.stop)])
    crop = steps[:, oy : oy + CROP, ox : ox + CROP].astype(np.float64)
    return crop + jitter[:, None, None]


def check_crops(batches, seed, epoch):
    """Every valid step holds its stream's crop of its source frame plus its step's jitter."""
    for b in as_numpy(batches):
        data, _, valid, stream, step = b
        for r, t in zip(*np.nonzero(valid), strict=True):
            s, k = int(stream[r, t]), int(step[r, t])
            info = StepInfo(s, k, k + 1, epoch, seed)
            oy, ox = info.rng().integers(0, SIDE - CROP + 1, size=2)
            yx = (np.arange(CROP)[:, None] + oy) * 10 + np.arange(CROP) + ox
            expected = s * 1_000_000 + k * 100 + yx + info.rng(k).random()
            np.testing.assert_array_equal(data[r, t], expected, err_msg=f"stream {s} step {k}")


@settings(max_examples=8)
@given(layouts(max_streams=8, max_length=12, max_batch=4, max_tbins=4), st.integers(0, 3))
def test_random_crop_is_per_stream_and_the_same_for_any_workers_and_after_resume(layout, seed):
    lengths = list(layout.lengths)
    streams = frames(lengths)

    def loader(**kw):
        return StreamLoader(
            streams,
            layout.batch_size,
            layout.tbins,
            seed=seed,
            shuffle=True,
            transform=crop_and_jitter,
            **kw,
        )

    reference = [b for b in loader()]
    check_crops(reference, seed, 0)
    check_continuity(reference, lengths)
    for method in ("process", "thread"):
        for workers in (1, 2, 3):
            assert_same(list(loader(num_workers=workers, method=method)), reference)
    for stop in range(len(reference)):
        run = loader()
        for _, _ in zip(range(stop), run, strict=False):
            pass
        state = run.state_dict()
        again = loader(num_workers=2)
        again.load_state_dict(state)
        assert_same(list(again), reference[stop:])


def test_another_epoch_draws_other_crops():
    streams = frames([5, 5])
    loader = StreamLoader(streams, 2, 5, transform=crop_and_jitter)
    epochs = []
    for epoch in range(4):
        loader.set_epoch(epoch)
        batches = list(loader)
        check_crops(batches, 0, epoch)
        epochs.append(as_numpy(batches)[0][0])
    assert any(not np.array_equal(epochs[0], e) for e in epochs[1:])


def test_the_batch_layout_comes_from_the_transformed_steps():
    loader = StreamLoader(frames([3, 4]), 2, 2, transform=crop_and_jitter, pin_memory=False)
    batch = loader[0]
    assert batch.data.shape == (2, 2, CROP, CROP) and str(batch.data.dtype) == "torch.float64"


def fail_on_step_5(steps, info):
    if info.start <= 5 < info.stop and info.stream == 1:
        raise ValueError("bad frame")
    return steps


def drop_a_step(steps, info):
    return steps[1:]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_transform_that_raises_names_the_stream_and_the_steps(workers):
    loader = StreamLoader(frames([4, 8]), 2, 3, num_workers=workers, transform=fail_on_step_5)
    with pytest.raises(StreamError, match=r"stream 1 .*steps 3:6.*ValueError: bad frame") as e:
        list(loader)
    assert e.value.index == 1


def test_a_transform_must_keep_the_number_of_steps():
    loader = StreamLoader(frames([4, 8]), 2, 3, transform=drop_a_step)
    with pytest.raises(StreamError, match=r"stream 0 .*returned 0 steps for steps 0:1"):
        list(loader)


def test_a_transform_must_be_callable():
    with pytest.raises(TypeError, match="transform must be callable"):
        StreamLoader(frames([4]), 1, 2, transform="crop")


def add(steps, info, value):
    return steps + value


def test_map_steps_composes_and_hand_built_pipelines_equal_the_loader():
    streams = frames([5, 3, 7])
    twice = functools.partial(add, value=1)
    rows = interleave_streams(streams, 2, transform=crop_and_jitter, seed=2, epoch=1, tbins=3)
    rows = [map_steps(r, twice, seed=2, epoch=1) for r in rows]
    hand = list(zip_batch([tbin(r, 3) for r in rows]))

    def both(steps, info):
        return crop_and_jitter(steps, info) + 1

    loader = StreamLoader(streams, 2, 3, seed=2, transform=both)
    loader.set_epoch(1)
    assert_same(hand, list(loader))


def to_dict(steps, info):
    return {"crop": steps[:, :2, :2], "mean": steps.reshape(len(steps), -1).mean(1)}


def test_a_transform_may_return_a_dict():
    streams = frames([3, 5])
    batches = list(StreamLoader(streams, 2, 2, num_workers=2, transform=to_dict))
    assert set(batches[0].data) == {"crop", "mean"}
    expected = [np.asarray(to_dict(s, None)["mean"]) for s in streams]
    check_continuity([b._replace(data=b.data["mean"]) for b in batches], [3, 5], sources=expected)


def test_step_info_rng_keys():
    info = StepInfo(stream=2, start=0, stop=4, epoch=3, seed=7)
    assert info.rng("crop").random() == StepInfo(2, 8, 9, 3, 7).rng("crop").random()
    assert info.rng("crop").random() != info.rng("flip").random()
    assert info.rng().random() != StepInfo(2, 0, 4, 4, 7).rng().random()  # another epoch
    with pytest.raises(TypeError):
        info.rng(1.5)


# --- the steps a transform gets are read-only views of the stream ---------------------


def double_in_place(steps, info):
    steps *= 2
    return steps


def double(steps, info):
    return tree_map(lambda a: a * 2, steps)


def double_leaves_in_place(steps, info):
    for leaf in leaves(steps):
        leaf *= 2
    return steps


def assign_first(steps, info):
    for leaf in leaves(steps):
        leaf[:1] = 0
    return steps


@pytest.mark.parametrize("workers", [0, 2])
def test_a_transform_that_writes_into_its_input_names_itself_and_changes_nothing(workers):
    streams = [np.ones(2, np.int64), np.ones(3, np.int64) * 2]
    kept = [s.copy() for s in streams]
    loader = StreamLoader(streams, 2, 2, num_workers=workers, transform=double_in_place)
    with pytest.raises(
        StreamError,
        match=r"stream \d .*double_in_place wrote into its input "
        r"on steps 0:\d.*read-only",
    ) as e:
        list(loader)
    assert isinstance(e.value.__cause__, ValueError)
    for s, k in zip(streams, kept, strict=True):
        np.testing.assert_array_equal(s, k)
        assert s.flags.writeable  # the user's arrays are left writable


def test_the_same_loader_gives_the_same_first_batch_every_epoch():
    streams = [np.ones(2, np.int64), np.ones(2, np.int64)]
    loader = StreamLoader(streams, 2, 2, transform=double, pin_memory=False)
    for epoch in range(3):
        loader.set_epoch(epoch)
        assert np.asarray(loader[0].data).tolist() == [[2, 2], [2, 2]]
    assert [s.tolist() for s in streams] == [[1, 1], [1, 1]]


@pytest.mark.parametrize("fn", [double_leaves_in_place, assign_first])
@pytest.mark.parametrize("structure", ["dict", "tuple", "nested"])
def test_every_leaf_of_dict_and_tuple_steps_is_read_only(fn, structure):
    x, y = np.arange(4.0), np.arange(8).reshape(4, 2)
    stream = {
        "dict": {"x": x, "y": y},
        "tuple": (x, y),
        "nested": {"a": (x,), "b": {"y": y}},
    }[structure]
    with pytest.raises(StreamError, match=rf"stream 0 .*transform {fn.__name__} wrote"):
        list(StreamLoader([stream], 1, 2, transform=fn))
    assert x.tolist() == [0, 1, 2, 3] and y.ravel().tolist() == list(range(8))


def test_a_memory_mapped_stream_is_read_only_in_a_transform(tmp_path):
    path = tmp_path / "a.npy"
    np.save(path, np.arange(6))
    mapped = np.load(path, mmap_mode="r+")  # writable map: a write would change the file
    with pytest.raises(StreamError, match="assign_first wrote into its input"):
        list(StreamLoader([mapped], 1, 3, transform=assign_first))
    assert np.load(path).tolist() == list(range(6))


def test_a_partial_is_named_by_its_function():
    fn = functools.partial(double_in_place)
    with pytest.raises(StreamError, match="transform double_in_place wrote"):
        list(StreamLoader([np.ones(3)], 1, 3, transform=fn))


@settings(max_examples=25)
@given(
    st.lists(st.integers(0, 6), min_size=1, max_size=5).filter(any),
    st.sampled_from([double, double_leaves_in_place, assign_first]),
    st.booleans(),
    st.integers(1, 3),
    st.integers(1, 4),
)
def test_transforms_never_change_the_users_arrays(lengths, fn, as_dict, batch_size, tbins):
    rng = np.random.default_rng(len(lengths) * 7 + sum(lengths))
    arrays = [rng.integers(-100, 100, size=(n, 2)) for n in lengths]
    kept = [a.copy() for a in arrays]
    streams = [{"a": a} for a in arrays] if as_dict else arrays
    loader = StreamLoader(streams, batch_size, tbins, transform=fn, pin_memory=False)
    try:
        batches = list(loader)
    except StreamError as e:
        assert fn in (double_leaves_in_place, assign_first)
        assert f"transform {fn.__name__} wrote into its input" in str(e)
    else:
        assert fn is double
        data = [b._replace(data=b.data["a"]) for b in batches] if as_dict else batches
        check_continuity(data, lengths, sources=[a * 2 for a in kept])
    for a, k in zip(arrays, kept, strict=True):
        np.testing.assert_array_equal(a, k)
