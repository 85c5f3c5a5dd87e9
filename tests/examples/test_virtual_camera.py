from PIL import Image
from runner import load


def test_contact_sheet_and_animation(tmp_path, capsys):
    module = load("virtual_camera")
    result = module.main(["--small", "--out", str(tmp_path)])
    assert "4 cameras" in capsys.readouterr().out
    gap, sep = module.GAP, module.SEP
    batches, b, t, (h, w) = 3, 3, 4, (20, 28)
    sheet = Image.open(result["sheet"])
    assert sheet.size == (batches * (t * (w + gap) + sep) - sep + gap, b * (h + gap) + gap)
    assert sheet.getpixel((gap + 1, gap + h // 2)) == module.RED
    gif = Image.open(result["gif"])
    assert gif.n_frames == batches * t
    assert gif.size == (b * (w + gap) + gap, h + 2 * gap)


def test_same_batches_with_and_without_workers(tmp_path):
    module = load("virtual_camera")
    a = module.main(["--small", "--out", str(tmp_path / "a"), "--workers", "0"])
    b = module.main(["--small", "--out", str(tmp_path / "b"), "--workers", "2"])
    assert Image.open(a["sheet"]).tobytes() == Image.open(b["sheet"]).tobytes()
