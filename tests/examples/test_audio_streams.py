import numpy as np
from PIL import Image
from runner import load


def test_rows_and_picture(tmp_path, capsys):
    module = load("audio_streams")
    result = module.main(["--small", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "4 sounds" in out and "batch 2" in out
    assert out.count("(reset)") >= 3  # every row starts a sound in the first batch
    batches, b, t, width = 3, 3, 4, result["width"]
    picture = Image.open(result["picture"]).convert("RGB")
    strip = module.WAVE + module.BINS
    assert picture.size == (  # the three blocks fit on one line of the page
        module.LABEL + batches * (t * width + module.SEP) - module.SEP,
        module.HEADER + b * (strip + module.GAP) + module.SEP + module.LEGEND,
    )
    assert picture.size[0] <= module.PAGE
    pixels = np.asarray(picture)
    for r in range(b):  # a red bar left of every row of the first batch
        top = module.HEADER + r * (strip + module.GAP)
        assert tuple(pixels[top + module.WAVE, module.LABEL]) == module.RED
    assert {p.suffix for p in (tmp_path / "sounds").iterdir()} == {".wav", ".flac", ".m4a"}


def test_the_default_picture_wraps_its_blocks_to_the_page_width(tmp_path):
    module = load("audio_streams")
    result = module.main(["--out", str(tmp_path), "--workers", "0"])
    picture = Image.open(result["picture"])
    per_line = (module.PAGE - module.LABEL + module.SEP) // (8 * result["width"] + module.SEP)
    assert result["batches"] == 8 and per_line < 8
    assert picture.size[0] <= module.PAGE
    strip = module.WAVE + module.BINS
    block = module.HEADER + 4 * (strip + module.GAP) + module.SEP
    assert picture.size[1] == -(-8 // per_line) * block + module.LEGEND
