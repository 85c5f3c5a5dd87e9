import numpy as np
from runner import load


def test_two_robot_datasets_get_their_weights(capsys, tmp_path):
    out = load("mix_robots").main(
        ["--workers", "2", "--out", str(tmp_path / "out"), "--dir", str(tmp_path / "data")]
    )
    printed = capsys.readouterr().out
    assert "Mixture({reach: 40, sweep: 8}" in printed
    summary, delivered = out["summary"], out["delivered"]
    assert {g.group: g.steps for g in summary.groups} == dict(delivered)
    total = sum(delivered.values())
    longest = 80
    for g in summary.groups:  # within 1% of the weight, or the longest stream
        assert abs(g.share - g.weight) <= max(0.01, longest / total)
    reach = summary.groups[0]
    assert reach.streams > 40  # upsampled: read again, round after round
    per_batch = out["per_batch"]
    assert per_batch.shape == (len(per_batch), 2)
    np.testing.assert_allclose(per_batch.sum(axis=1)[per_batch.sum(axis=1) > 0], 1.0)
    assert (tmp_path / "out" / "mix_robots.png").stat().st_size > 10_000


def test_same_batches_in_process(tmp_path):
    module = load("mix_robots")
    a = module.main(["--workers", "0", "--dir", str(tmp_path / "a")])
    b = module.main(["--workers", "2", "--dir", str(tmp_path / "b")])
    np.testing.assert_array_equal(a["per_batch"], b["per_batch"])
    assert a["delivered"] == b["delivered"]
