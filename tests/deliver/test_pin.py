import warnings

import numpy as np
import pytest
import torch

import streamseq.deliver.torch
from streamseq import Batch, interleave_streams, pin_memory, tbin, zip_batch
from streamseq.deliver.assemble import assemble_parts as assemble
from streamseq.deliver.torch import to_torch


def batches():
    rows = interleave_streams([np.arange(1, 6), np.arange(10, 13)], 2)
    return zip_batch([tbin(r, 2) for r in rows])


def test_pin_memory_yields_the_same_batches_as_tensors():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pinned = pin_memory(batches())
        got = list(pinned)
    assert len(pinned) == len(got) == 3
    for b, ref in zip(got, batches(), strict=True):
        for t, a in zip(b, ref, strict=True):
            assert isinstance(t, torch.Tensor)
            np.testing.assert_array_equal(t.numpy(), a)
    assert torch.equal(pinned[1].data, got[1].data)
    if torch.cuda.is_available():
        assert streamseq.deliver.torch.is_pinned(got[0])


@pytest.mark.skipif(torch.cuda.is_available(), reason="the warning is for machines without CUDA")
def test_warns_once_without_cuda():
    streamseq.deliver.torch._warned.clear()
    with pytest.warns(RuntimeWarning, match="CUDA is not available") as record:
        list(pin_memory(batches()))
        list(pin_memory(batches()))
    assert len([w for w in record if "CUDA" in str(w.message)]) == 1


def test_to_torch_without_pinning_shares_memory():
    b = batches()[0]
    t = to_torch(b)
    t.data[0, 0] = 99
    assert b.data[0, 0] == 99


def test_assemble_copies_once_into_new_tensors():
    parts = [batches()[0], batches()[1]]
    out = assemble(parts)
    assert out.data.shape == (4, 2)
    assert out.data.tolist() == [[1, 2], [10, 11], [3, 4], [12, 0]]
    parts[0].data[0, 0] = -5
    assert out.data[0, 0] == 1
    tm = assemble(parts, time_major=True)
    assert tm.data.shape == (2, 4) and tm.valid.shape == (2, 4) and tm.reset.shape == (4,)


def test_assemble_dict_data():
    part = Batch(
        {"a": np.ones((1, 2, 3))},
        np.ones(1, bool),
        np.ones((1, 2), bool),
        np.zeros((1, 2), np.int64),
        np.arange(2)[None],
    )
    out = assemble([part, part])
    assert out.data["a"].shape == (2, 2, 3)


def test_arrays_in_non_native_byte_order_are_converted():
    native = batches()[0]
    swapped = native._replace(data=native.data.astype(">i8"), step=native.step.astype(">i8"))
    outs = [to_torch(swapped), assemble([swapped]), assemble([swapped, native], time_major=True)]
    if torch.cuda.is_available():
        outs += [to_torch(swapped, pin=True), assemble([swapped], pin=True)]
    for out in outs:
        assert out.data.dtype == out.step.dtype == torch.int64
    assert outs[0].data.tolist() == outs[1].data.tolist() == native.data.tolist()
    assert outs[2].data.T.tolist() == np.concatenate([native.data] * 2).tolist()
    assert outs[0].step.tolist() == native.step.tolist()
    assert streamseq.deliver.torch.torch_dtype(np.dtype(">u2")) == torch.uint16
