from PIL import Image
from runner import load


def test_loss_falls(tmp_path, capsys):
    result = load("train_gru").main(["--small", "--workers", "2", "--out", str(tmp_path)])
    losses = result["losses"]
    out = capsys.readouterr().out
    assert "epoch 0" in out and len(losses) == 6
    assert losses[0] < 2.9  # about chance (log 16 = 2.77) at first
    assert losses[-1] < 0.25 * losses[0] and losses[-1] < 0.3
    assert Image.open(result["picture"]).size == (480, 200)
