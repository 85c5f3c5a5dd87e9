import math

import numpy as np
from PIL import Image
from runner import load


def test_loss_falls(tmp_path, capsys):
    module = load("train_gru")
    result = module.main(["--small", "--workers", "2", "--out", str(tmp_path)])
    losses = result["losses"]
    out = capsys.readouterr().out
    assert "epoch 0" in out and len(losses) == 6
    assert losses[0] < 2.9  # about chance (log 16 = 2.77) at first
    assert losses[-1] < 0.25 * losses[0] and losses[-1] < 0.3
    assert result["starts"][0] == 0 and result["starts"] == sorted(result["starts"])
    lengths = result["lengths"]  # every token an input, all but a file's first a target
    assert result["counts"] == [(sum(lengths), sum(lengths) - len(lengths))] * 6
    assert f"{sum(lengths)} tokens read as inputs, {sum(lengths) - len(lengths)} used" in out

    picture = Image.open(result["picture"]).convert("RGB")
    assert picture.size == module.PLOT
    pixels = np.asarray(picture)
    x0, y0, x1, y1 = module.axes_box()
    black = (pixels == 0).all(-1)
    assert black[y0:y1, x0].mean() > 0.9 and black[y1, x0:x1].mean() > 0.9  # the axes
    top = max([math.log(16), *result["batch_losses"]]) * 1.1
    baseline = round(y1 - math.log(16) * (y1 - y0) / top)
    red = (pixels[baseline - 1 : baseline + 2, x0:x1] == module.CHANCE_COLOUR).all(-1).any(0)
    assert 0.4 < red.mean() < 0.8  # a dashed line across the axes, hidden in part by the legend
    for colour in (module.BATCH_COLOUR, module.EPOCH_COLOUR):
        assert (pixels == colour).all(-1).sum() > 100
