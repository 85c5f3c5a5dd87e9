import numpy as np
from runner import load

from streamseq import StepInfo


def test_crops_jitter_and_tokens(tmp_path, capsys):
    module = load("augment")
    result = module.main(["--small", "--out", str(tmp_path)])
    assert result["same"]
    batch = result["video"][0]
    assert tuple(batch.data.shape) == (3, 4, 3, *module.CROP)
    assert str(batch.data.dtype) == "torch.float32"
    assert "identical with 2 workers and with none: True" in capsys.readouterr().out
    assert result["text"][0] == "row 0* 'the quick brown '"


def test_the_crop_is_drawn_once_per_stream():
    module = load("augment")
    frames = np.arange(5 * 36 * 48 * 3, dtype=np.int64).reshape(5, 36, 48, 3) % 251
    frames = frames.astype(np.uint8)
    whole = module.crop_and_jitter(frames, StepInfo(3, 0, 5, 0, 7))
    parts = [
        module.crop_and_jitter(frames[a:b], StepInfo(3, a, b, 0, 7)) for a, b in ((0, 2), (2, 5))
    ]
    np.testing.assert_array_equal(whole, np.concatenate(parts))
