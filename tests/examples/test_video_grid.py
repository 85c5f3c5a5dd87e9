from PIL import Image
from runner import load


def test_contact_sheet_and_animation(tmp_path, capsys):
    module = load("video_grid")
    result = module.main(["--small", "--out", str(tmp_path)])
    assert "5 videos" in capsys.readouterr().out
    gap, sep = module.GAP, module.SEP
    batches, b, t, (h, w) = 4, 3, 4, (24, 32)
    sheet = Image.open(result["sheet"])
    assert sheet.size == (batches * (t * (w + gap) + sep) - sep + gap, b * (h + gap) + gap)
    # every row starts a clip in the first batch: red bar at the left of the first column
    for r in range(b):
        assert sheet.getpixel((gap + 1, gap + r * (h + gap) + h // 2)) == module.RED
    gif = Image.open(result["gif"])
    assert gif.n_frames == batches * t
    assert gif.size == (b * (w + gap) + gap, h + 2 * gap)


def test_stream_a_folder(tmp_path):
    module = load("video_grid")
    clips = module.write_clips(str(tmp_path / "clips"), 3, 6, (16, 24))
    (tmp_path / "clips" / "notes.txt").write_text("not a video")
    out = tmp_path / "out"
    args = ["--folder", str(tmp_path / "clips"), "--out", str(out), "--size", "16", "24"]
    args += ["--batch-size", "2", "--tbins", "3", "--batches", "2", "--workers", "0"]
    result = module.main(args)
    assert len(clips) == 3 and result["batches"] == 2
    assert Image.open(result["sheet"]).size[1] == 2 * (16 + module.GAP) + module.GAP
