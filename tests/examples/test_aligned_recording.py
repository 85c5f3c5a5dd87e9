import numpy as np
from PIL import Image
from runner import load

from streamseq.testing import check_continuity


def test_modalities_line_up_and_the_picture_fits_the_page(tmp_path, capsys):
    module = load("aligned_recording")
    result = module.main(["--out", str(tmp_path), "--seconds", "1.0", "--workers", "2"])
    out = capsys.readouterr().out
    assert "3 takes of [20, 32, 44] steps of 50 ms" in out
    batches, takes, lengths = result["batches"], result["takes"], result["lengths"]
    check_continuity(batches, lengths, sources=takes)
    steps = 0
    for batch in batches:
        valid = batch.valid.numpy()
        data = {k: v.numpy() for k, v in batch.data.items() if k != "valid"}
        for mask in batch.data["valid"].values():
            np.testing.assert_array_equal(mask.numpy(), valid)  # every modality covers its take
        for r, s in zip(*np.nonzero(valid), strict=True):
            x = module.ball_in_frame(data["video"][r, s])
            # the label of the frame, the pitch of its sound and its events: the same ball
            edge = np.abs(x - np.array([1, 2]) * module.WIDTH / 3).min()
            assert data["label"][r, s] == module.third(np.array([x]))[0] or edge < 1
            expected = module.LOW + (module.HIGH - module.LOW) * x / module.WIDTH
            assert abs(module.pitch(data["audio"][r, s]) - expected) < 25
            counts = data["events"][r, s].sum(axis=(0, 1))
            if counts.sum() > 20:
                centre = (counts * (np.arange(module.WIDTH) + 0.5)).sum() / counts.sum()
                assert abs(centre - x) < 2 * module.RADIUS
            steps += 1
    assert steps == sum(lengths)
    picture = Image.open(result["picture"])
    assert picture.size[0] <= module.PAGE and picture.size[1] < 600


def test_same_batches_in_process(tmp_path):
    module = load("aligned_recording")
    args = ["--seconds", "0.6", "--takes", "2"]
    a = module.main([*args, "--out", str(tmp_path / "a"), "--workers", "0"])["batches"]
    b = module.main([*args, "--out", str(tmp_path / "b"), "--workers", "2"])["batches"]
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        for key in ("video", "audio", "events", "label"):
            np.testing.assert_array_equal(x.data[key].numpy(), y.data[key].numpy())
        np.testing.assert_array_equal(x.valid.numpy(), y.valid.numpy())
