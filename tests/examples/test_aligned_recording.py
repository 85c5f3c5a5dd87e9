import av
import numpy as np
import pytest
from PIL import Image
from runner import load

import streamseq
from streamseq.io.video import shown_frames
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


def _frames_alone(files, module):
    """Each take's frame at every step, from a plain one-thread PyAV decode of its file."""
    out = []
    for f in files:
        with av.open(f["video"]) as container:
            stream = container.streams.video[0]
            stream.codec_context.thread_count = 1
            frames = list(container.decode(stream))
            pixels = np.stack([x.to_ndarray(format="rgb24") for x in frames])
            times = np.array([float(x.time) for x in frames])
        steps = round(f["seconds"] / module.STEP)
        out.append(pixels[shown_frames(times, np.arange(steps) * module.STEP)])
    return out


@pytest.mark.filterwarnings("ignore:batch_size=3 gives 3 rows")
def test_same_batches_in_process(tmp_path):
    """The same takes read with 0 and 2 workers: the same bytes, the frames of a plain decode.

    The takes are written once: two writes of a take are two H.264 encodes, which are not
    byte-for-byte the same file every time (the encoder's choices vary between writes in
    one process), so batches of two writes may differ by a few pixel levels while both
    read their own file right.
    """
    module = load("aligned_recording")
    files = [module.write_take(str(tmp_path), k, 0.6 + 0.6 * k) for k in range(2)]
    runs = []
    for workers in (0, 2):
        takes = [module.take_recording(f) for f in files]
        runs.append(list(streamseq.StreamLoader(takes, 3, 4, num_workers=workers)))
    a, b = runs
    assert len(a) == len(b) > 0
    for x, y in zip(a, b, strict=True):
        for key in ("video", "audio", "events", "label"):
            np.testing.assert_array_equal(x.data[key].numpy(), y.data[key].numpy())
        np.testing.assert_array_equal(x.valid.numpy(), y.valid.numpy())
    alone = _frames_alone(files, module)
    checked = 0
    for batch in a:
        video, valid = batch.data["video"].numpy(), batch.valid.numpy()
        for r, s in zip(*np.nonzero(valid), strict=True):
            take, step = int(batch.stream[r, s]), int(batch.step[r, s])
            np.testing.assert_array_equal(video[r, s], alone[take][step])
            checked += 1
    assert checked == sum(len(x) for x in alone)
