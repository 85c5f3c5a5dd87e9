import numpy as np
import pytest
import torch

import streamseq.deliver.torch
from streamseq import StreamLoader
from streamseq._warn import user_stacklevel, warn
from streamseq.io.probe import probe_lengths


def test_warn_names_the_callers_line():
    with pytest.warns(UserWarning, match="careful") as record:
        warn("careful")
    assert record[0].filename == __file__


def test_user_stacklevel_outside_the_package_is_the_caller():
    assert user_stacklevel() == 1


def test_length_cache_warning_points_at_the_caller(tmp_path):
    cache = tmp_path / "lengths.json"
    cache.write_text("{not json")
    with pytest.warns(UserWarning, match="length cache") as record:
        probe_lengths([np.arange(3)], cache=cache, progress=False)
    assert record[0].filename == __file__


@pytest.mark.skipif(torch.cuda.is_available(), reason="the warning is for machines without CUDA")
def test_pin_memory_warning_points_at_the_loop():
    streamseq.deliver.torch._warned.clear()
    loader = StreamLoader([np.arange(4), np.arange(3)], 2, 2, pin_memory=True)
    with pytest.warns(RuntimeWarning, match="CUDA is not available") as record:
        list(loader)
    assert record[0].filename == __file__
