from PIL import Image
from runner import load


def test_rows_and_picture(tmp_path, capsys):
    module = load("audio_streams")
    result = module.main(["--small", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "4 sounds" in out and "batch 2" in out
    assert out.count("(reset)") >= 3  # every row starts a sound in the first batch
    batches, b, t, width = 3, 3, 4, result["width"]
    picture = Image.open(result["picture"])
    assert picture.size == (
        batches * (t * width + module.SEP) - module.SEP,
        b * (module.WAVE + module.BINS + module.GAP) - module.GAP,
    )
    assert picture.getpixel((0, module.WAVE)) == module.RED
    assert {p.suffix for p in (tmp_path / "sounds").iterdir()} == {".wav", ".flac", ".m4a"}
