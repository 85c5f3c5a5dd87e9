import importlib.util
from pathlib import Path

from PIL import Image

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "audio_streams.py"


def load():
    spec = importlib.util.spec_from_file_location("audio_streams", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rows_and_picture(tmp_path, capsys):
    module = load()
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
