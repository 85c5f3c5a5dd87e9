import numpy as np
from PIL import Image
from runner import load


def test_contact_sheet_and_animation(tmp_path, capsys):
    module = load("event_camera")
    result = module.main(["--small", "--out", str(tmp_path)])
    assert "4 recordings" in capsys.readouterr().out
    gap, sep = module.GAP, module.SEP
    batches, b, t, (h, w) = 3, 3, 4, (20, 28)
    sheet = Image.open(result["sheet"])
    assert sheet.size == (batches * (t * (w + gap) + sep) - sep + gap, b * (h + gap) + gap)
    pixels = np.asarray(sheet.convert("RGB"))
    first_cell = pixels[gap : gap + h, gap + 4 : gap + w]  # right of the red bar
    assert first_cell.any()  # events were drawn
    assert tuple(pixels[gap + h // 2, gap + 1]) == module.RED
    gif = Image.open(result["gif"])
    assert gif.n_frames == batches * t
    assert gif.size == (b * (w + gap) + gap, h + 2 * gap)
    assert len(list((tmp_path / "events").glob("*.npy"))) == 4
