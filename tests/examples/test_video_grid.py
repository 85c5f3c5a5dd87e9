from PIL import Image
from runner import load
from sheets import check_pictures


def test_contact_sheet_and_animation(tmp_path, capsys):
    module = load("video_grid")
    result = module.main(["--small", "--out", str(tmp_path)])
    assert "5 videos" in capsys.readouterr().out
    assert result["batches"] == 4 and all(result["reset"][0])  # every row starts a clip
    check_pictures(result, (24, 32), columns=3)


def test_the_default_pictures_show_a_new_clip_and_padding(tmp_path):
    result = load("video_grid").main(["--out", str(tmp_path), "--workers", "0"])
    assert any(any(reset) for reset in result["reset"][1:])
    assert not all(all(all(row) for row in valid) for valid in result["valid"])
    check_pictures(result, (36, 48), columns=4)


def test_stream_a_folder(tmp_path):
    module = load("video_grid")
    clips = module.write_clips(str(tmp_path / "clips"), 3, 6, (16, 24))
    (tmp_path / "clips" / "notes.txt").write_text("not a video")
    out = tmp_path / "out"
    args = ["--folder", str(tmp_path / "clips"), "--out", str(out), "--size", "16", "24"]
    args += ["--batch-size", "2", "--tbins", "3", "--batches", "2", "--workers", "0"]
    result = module.main(args)
    assert len(clips) == 3 and result["batches"] == 2
    check_pictures(result, (16, 24), columns=2)
    assert Image.open(result["sheet"]).size[0] <= load("pictures").WIDTH
