from runner import load


def test_every_bar_ends_full(capsys):
    bars = load("progress").main(["--files", "12", "--epochs", "2", "--workers", "2"])
    assert set(bars) == {"epoch 0", "epoch 1", "run", "resumed", "resumed wider"}
    for name, (n, total) in bars.items():
        assert n == total > 0, name
    assert bars["run"][1] == bars["epoch 0"][1] + bars["epoch 1"][1]
    err = capsys.readouterr().err
    assert "probing lengths: 100%" in err and "resumed: 100%" in err
    assert "resumed wider: 100%" in err
    assert "steps/s=" in err and "wait=" in err  # the epoch bars show loader.stats
