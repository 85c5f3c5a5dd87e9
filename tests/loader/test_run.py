"""A pass (``loader.run.Pass``): what it delivers, however it is iterated."""

import threading

import numpy as np
import pytest

from streamseq import StreamLoader, materialize


@pytest.mark.parametrize("stored", [False, True])
def test_one_pass_read_from_several_threads_delivers_every_batch_once(tmp_path, stored):
    sources = [np.arange(n * 4, dtype=np.int64).reshape(n, 4) + 1000 * n for n in range(5, 40)]
    streams = materialize(sources, tmp_path / "s") if stored else sources
    loader = StreamLoader(streams, 4, 3)
    want = sorted(b.step[:, 0].tolist() + b.stream[:, 0].tolist() for b in loader)
    for _ in range(5):
        it, got, barrier = iter(loader), [], threading.Barrier(3)

        def read(it=it, got=got, barrier=barrier):
            barrier.wait()
            for batch in it:
                got.append(batch.step[:, 0].tolist() + batch.stream[:, 0].tolist())

        threads = [threading.Thread(target=read) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(got) == want  # (each batch once: none twice, none lost)
