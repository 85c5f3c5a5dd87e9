import numpy as np
import pytest
import torch

from streamseq import Batch, StreamLoader


def make(data):
    return Batch(
        data,
        torch.tensor([True, False]),
        torch.ones(2, 3, dtype=torch.bool),
        torch.zeros(2, 3, dtype=torch.int64),
        torch.arange(3).repeat(2, 1),
    )


class Recording(torch.Tensor):
    """A tensor that records the arguments of every ``to`` call made on it."""

    calls: list = []

    def to(self, *args, **kwargs):
        Recording.calls.append((args, kwargs))
        return super().to(*args, **kwargs)


def test_moves_every_field_and_keeps_the_structure():
    x, y = torch.arange(6.0).reshape(2, 3), torch.ones(2, 3, 4)
    b = make({"x": x, "pair": (y, [y[..., 0]])})
    moved = b.to("cpu")
    assert isinstance(moved, Batch) and moved is not b
    assert set(moved.data) == {"x", "pair"}
    assert isinstance(moved.data["pair"], tuple) and isinstance(moved.data["pair"][1], list)
    assert torch.equal(moved.data["x"], x) and torch.equal(moved.data["pair"][1][0], y[..., 0])
    for field, before in zip(moved[1:], b[1:], strict=True):
        assert field.device.type == "cpu" and torch.equal(field, before)


def test_converts_dtype_like_tensor_to():
    b = make(torch.zeros(2, 3)).to(torch.float64)
    assert b.data.dtype == torch.float64 and b.valid.dtype == torch.float64


def test_non_blocking_is_passed_to_every_tensor():
    Recording.calls = []
    fields = [f.as_subclass(Recording) for f in make(torch.zeros(2, 3))]
    fields[0] = {"a": fields[0], "b": fields[0].clone()}
    Batch(*fields).to("cpu", non_blocking=True)
    assert len(Recording.calls) == 6
    assert all(args == ("cpu",) and kw == {"non_blocking": True} for args, kw in Recording.calls)
    Recording.calls = []
    Batch(*fields).to("cpu")
    assert all(kw == {"non_blocking": False} for _, kw in Recording.calls)


def test_a_loader_batch_moves_with_non_blocking_on_cpu():
    streams = [{"x": np.arange(n, dtype=np.float32), "y": np.arange(n)} for n in (5, 3)]
    batch = StreamLoader(streams, 2, 4, pin_memory=False)[0]
    moved = batch.to("cpu", non_blocking=True)
    assert torch.equal(moved.data["x"], batch.data["x"]) and torch.equal(moved.step, batch.step)


def test_numpy_fields_are_refused_with_a_clear_message():
    b = Batch(
        np.zeros((1, 2)),
        np.ones(1, bool),
        np.ones((1, 2), bool),
        np.zeros((1, 2)),
        np.zeros((1, 2)),
    )
    with pytest.raises(TypeError, match="Batch.to moves torch tensors, got ndarray"):
        b.to("cpu")


def test_no_data_stays_none():
    assert make(None).to("cpu").data is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_moves_to_cuda():
    b = make({"x": torch.zeros(2, 3).pin_memory()}).to("cuda", non_blocking=True)
    assert b.data["x"].is_cuda and b.reset.is_cuda and b.step.is_cuda


def test_repr_of_a_large_batch_shows_shapes_and_dtypes():
    streams = [np.zeros((20, 64, 64, 3), np.uint8), np.ones((18, 64, 64, 3), np.uint8)]
    batch = StreamLoader(streams, 2, 16)[0]
    text = repr(batch)
    assert text == (
        "Batch(data=uint8[2, 16, 64, 64, 3], reset=bool[2], valid=bool[2, 16], "
        "stream=int64[2, 16], step=int64[2, 16])"
    )
    assert len(text) < 200


def test_repr_shows_the_structure_of_dict_and_tuple_data():
    b = make({"x": torch.zeros(2, 3), "pair": (torch.ones(2, 3, 4, dtype=torch.uint8), None)})
    assert repr(b).startswith(
        "Batch(data={'x': float32[2, 3], 'pair': (uint8[2, 3, 4], None)}, reset=bool[2], "
    )
    assert repr(make((np.zeros((2, 3), np.int16),))).startswith("Batch(data=(int16[2, 3],), ")


def test_a_batch_records_its_look_ahead_and_keeps_five_fields():
    import pickle

    fields = (np.zeros((2, 4)), np.ones(2, bool), np.ones((2, 4), bool))
    fields += (np.zeros((2, 4), np.int64), np.tile(np.arange(4), (2, 1)))
    plain = Batch(*fields)
    assert plain.lookahead == 0 and len(plain) == 5
    data, reset, valid, stream, step = Batch(*fields, lookahead=1)  # still five fields
    b = Batch(*fields, lookahead=1)
    assert b.lookahead == 1 and b == plain  # the same fields
    assert pickle.loads(pickle.dumps(b)).lookahead == 1
    assert "lookahead=1" in repr(b) and "lookahead" not in repr(plain)
    assert b.target_mask().tolist() == [[True] * 3] * 2
    for bad in (-1, 1.0, True, "1"):
        with pytest.raises((ValueError, TypeError), match="lookahead"):
            Batch(*fields, lookahead=bad)
