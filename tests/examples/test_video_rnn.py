from runner import load

SMALL = ["--clips", "24", "--held-out", "2", "--epochs", "8"]


def test_loss_falls_and_workers_change_nothing(tmp_path, capsys):
    module = load("video_rnn")
    losses = module.main([*SMALL, "--workers", "2", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "train: 24 clips" in out and "held-out clips: loss" in out
    assert len(losses) == 8 and out.count("epoch ") == 8
    assert losses[0] > 0.8  # about the loss of predicting no motion at first
    assert losses[-1] < 0.5 * losses[0]
    # the same batches, the same model and the same first epoch without worker processes
    first = module.main([*SMALL, "--epochs", "1", "--workers", "0", "--out", str(tmp_path)])
    assert first == losses[:1]
