import dataclasses

import pytest

from streamseq import prefetch
from streamseq.workers.config import WorkerConfig


def test_a_config_is_checked_when_made_and_frozen():
    config = WorkerConfig(2, "thread", max_buffered=3, timeout=float("inf"))
    assert config.timeout is None and config.persistent_workers is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.num_workers = 3
    with pytest.raises(ValueError, match="num_workers must be >= 0"):
        WorkerConfig(-1)
    with pytest.raises(ValueError, match="unknown prefetch method 'fork'"):
        WorkerConfig(1, "fork")
    with pytest.raises(ValueError, match="max_buffered too small for the process backend"):
        WorkerConfig(1, max_buffered=3)
    with pytest.raises(TypeError, match="timeout must be a number"):
        WorkerConfig(1, timeout="1")


def test_prefetch_keeps_its_options_in_one_config():
    seq = prefetch([1, 2, 3], 1, method="thread", max_buffered=2, timeout=5, shm_size=None)
    with seq:
        assert seq.config == WorkerConfig(1, "thread", 2, 5.0)
        assert (seq.num_workers, seq.method, seq.max_buffered, seq.timeout) == (1, "thread", 2, 5)
        assert list(seq) == [1, 2, 3]
