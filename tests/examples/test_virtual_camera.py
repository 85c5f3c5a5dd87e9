from PIL import Image
from runner import load
from sheets import check_pictures


def test_contact_sheet_and_animation(tmp_path, capsys):
    module = load("virtual_camera")
    result = module.main(["--small", "--out", str(tmp_path)])
    assert "4 cameras" in capsys.readouterr().out
    assert result["batches"] == 3
    check_pictures(result, (20, 28), columns=3)


def test_the_default_pictures_show_a_reset_and_padding(tmp_path):
    result = load("virtual_camera").main(["--out", str(tmp_path), "--workers", "0"])
    assert any(any(reset) for reset in result["reset"][1:])  # a row moves on to a new stream
    assert not all(all(all(row) for row in valid) for valid in result["valid"])  # padding
    check_pictures(result, (36, 48), columns=4)


def test_same_batches_with_and_without_workers(tmp_path):
    module = load("virtual_camera")
    a = module.main(["--small", "--out", str(tmp_path / "a"), "--workers", "0"])
    b = module.main(["--small", "--out", str(tmp_path / "b"), "--workers", "2"])
    assert Image.open(a["sheet"]).tobytes() == Image.open(b["sheet"]).tobytes()
