import os

import numpy as np
import pytest
import torch

from streamseq import interleave_streams, tbin, zip_batch
from streamseq.deliver.assemble import assemble
from streamseq.workers.runs import in_row_order


class Prepared:
    """A group of micro-batches that records the items it is prepared for."""

    def __init__(self, items):
        self.items, self.prepared = items, []

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]

    def prepare(self, i):
        self.prepared.append(i)


def test_runs_of_one_group_prepare_it_once_per_batch():
    streams = [np.arange(n) + 100 * k for k, n in enumerate([6, 5, 6, 4])]
    rows = interleave_streams(streams, 4)
    mine = [np.array([0, 2]), np.array([1, 3])]  # every worker's rows: two runs each
    groups = [Prepared(zip_batch([tbin(rows[r], 2) for r in m])) for m in mine]
    batches = assemble(in_row_order(groups, mine))
    whole = zip_batch([tbin(r, 2) for r in rows])
    for i in range(len(whole)):
        batch, steps = batches.counted(i)
        assert np.array_equal(batch.data.numpy(), whole[i].data)
        assert np.array_equal(batch.step.numpy(), whole[i].step)
        assert steps == int(whole[i].valid.sum())
    assert [g.prepared for g in groups] == [list(range(len(whole)))] * 2


def test_a_store_read_here_copies_the_next_batch_while_this_one_is_handed_over(tmp_path):
    from streamseq import StreamLoader, materialize
    from streamseq.gather import writer

    pytest.importorskip("streamseq.gather._gather")
    rng = np.random.default_rng(0)
    sources = [rng.integers(0, 255, (n, 6, 5), np.uint8) for n in (9, 30, 4, 17, 12)]
    stored = materialize(sources, tmp_path / "s")
    loader = StreamLoader(stored, 3, 4, lookahead=1)
    want = [loader[i] for i in range(len(loader))]  # (indexed: read at once)
    it = iter(loader)
    held, ahead = [], []
    for batch in it:
        held.append(batch)
        ahead.append(None if it.batches._ahead is None else it.batches._ahead[0])
    assert ahead == [*range(1, len(loader)), None]  # (never past the pass)
    assert writer.Copy is not None
    for got, w in zip(held, want, strict=True):  # (held batches never change)
        for a, b in zip(got, w, strict=True):
            assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b
    arrays = [b.data.numpy().tobytes() for b in StreamLoader(sources, 3, 4, lookahead=1)]
    assert [b.data.numpy().tobytes() for b in held] == arrays


def test_a_pass_stopped_with_a_batch_copied_ahead_resumes_at_the_batch_after_the_last_one(
    tmp_path,
):
    from streamseq import StreamLoader, materialize

    sources = [np.arange(n * 3, dtype=np.int32).reshape(n, 3) + n for n in (9, 30, 4, 17)]
    stored = materialize(sources, tmp_path / "s")
    loader = StreamLoader(stored, 2, 3)
    want = [b.data.clone() for b in loader]
    it = iter(loader)
    first = [next(it).data for _ in range(3)]
    state = loader.state_dict()
    del it
    again = StreamLoader(stored, 2, 3)
    again.load_state_dict(state)
    rest = [b.data for b in again]
    assert all(torch.equal(a, b) for a, b in zip(first + rest, want, strict=True))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
@pytest.mark.parametrize("change", ["edit", "truncate"])
def test_a_forked_child_checks_the_batch_copied_ahead_in_its_parent_against_its_files(
    tmp_path, change
):
    from streamseq import StreamLoader, materialize
    from streamseq.errors import SourceError

    pytest.importorskip("streamseq.gather._gather")
    sources = [np.arange(n * 64, dtype=np.uint8).reshape(n, 64) for n in (40, 33, 50, 20)]
    stored = materialize(sources, tmp_path / "s")
    (leaf,) = [p for p in (tmp_path / "s").iterdir() if p.name.startswith("leaf-")]
    it = iter(StreamLoader(stored, 2, 4))
    next(it)  # (batch 1 is copied ahead, its files checked in this process)
    pid = os.fork()
    if pid == 0:  # the child changes the file, then reads on: batch 1 is an error there too
        code = 1
        try:
            if change == "edit":
                with open(leaf, "r+b") as f:
                    f.write(b"\xff" * 4096)
            else:
                os.truncate(leaf, 64)
            try:
                next(it)
                code = 3  # (delivered: its files were never checked in the child)
            except SourceError as e:
                code = 0 if leaf.name in str(e) and "steps 4:8" in str(e) else 4
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
