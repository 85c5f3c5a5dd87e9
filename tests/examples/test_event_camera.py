import numpy as np
from PIL import Image
from runner import load
from sheets import check_pictures


def test_contact_sheet_and_animation(tmp_path, capsys):
    module = load("event_camera")
    result = module.main(["--small", "--out", str(tmp_path)])
    assert "4 recordings" in capsys.readouterr().out
    check_pictures(result, (20, 28), columns=3)
    layout = load("pictures").Sheet(3, 3, 4, (28, 20))
    left, top, right, bottom = layout.box(0, 0, 1)
    pixels = np.asarray(Image.open(result["sheet"]).convert("RGB")).astype(int)
    cell = pixels[top:bottom, left:right]  # the caption is white on black: neither
    on = cell[..., 0] > cell[..., 2] + 40  # orange
    off = cell[..., 2] > cell[..., 0] + 40  # blue
    assert on.any() and off.any()  # events of both polarities were drawn
    assert len(list((tmp_path / "events").glob("*.npy"))) == 4
