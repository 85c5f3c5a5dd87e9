import numpy as np
import pytest
from runner import load

from streamseq.testing import check_continuity


@pytest.mark.parametrize("workers", [0, 2])
def test_both_compositions_keep_rows_continuous(workers):
    module = load("seqtools_compose")
    result = module.run(count=7, batch_size=3, tbins=4, workers=workers)
    streams = result["streams"]
    lengths = [len(s) for s in streams]

    # (a) seqtools over streamseq's batches
    batches = result["batches"]
    check_continuity(batches, lengths, sources=streams)
    check_continuity(result["head"], lengths, sources=streams, complete=False)
    assert len(result["head"]) == len(batches) // 2
    check_continuity(result["prefetched"], lengths, sources=streams)
    for plain, halved, ahead in zip(batches, result["halved"], result["prefetched"], strict=True):
        np.testing.assert_array_equal(halved.data, plain.data * 0.5)
        for a, b in zip(plain, ahead, strict=True):
            np.testing.assert_array_equal(a, b)

    # (b) streamseq over seqtools' streams
    sources = result["sources"]
    expected = [(s - 5) / 10 for s in streams] + [np.concatenate(streams[:2])]
    lengths = [len(s) for s in expected]
    assert lengths[-1] == lengths[0] + lengths[1]
    check_continuity(result["loader"], lengths, sources=expected)
    check_continuity(result["by_hand"], lengths, sources=expected)
    for a, b in zip(result["loader"], result["by_hand"], strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(np.asarray(x), y)
    assert len(sources) == len(streams) + 1


def test_main_prints_both(capsys):
    module = load("seqtools_compose")
    result = module.main(["--workers", "2"])
    out = capsys.readouterr().out
    assert "prefetched per group, same batches: True" in out
    assert "row 0 starts with [-0.5, -0.5]" in out
    assert len(result["loader"]) == len(result["by_hand"])
