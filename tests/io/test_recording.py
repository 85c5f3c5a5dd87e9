import pickle

import numpy as np
import pytest
from helpers import as_numpy, assert_same
from hypothesis import given, settings
from hypothesis import strategies as st
from media import plain_audio, plain_video, write_audio, write_vfr_video, write_video

from streamseq import StreamLoader
from streamseq.errors import SourceError
from streamseq.io import audio, events, recording, synthetic_events, video
from streamseq.testing import check_continuity

FRAMES, FPS, RATE = 40, 25, 16000  # 1.6 s of video; the audio as long
SENSOR = (12, 16)


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    """A video (40 frames at 25/s), its audio (1.6 s at 16 kHz, stereo) and its events."""
    folder = tmp_path_factory.mktemp("recording")
    video_path = write_video(folder / "scene.mp4", FRAMES, gop=6, bf=2)
    audio_path = write_audio(folder / "scene.wav", int(1.6 * RATE), rate=RATE)
    ev = synthetic_events(height=SENSOR[0], width=SENSOR[1], duration_us=1_600_000, seed=3)
    events_path = folder / "scene.npy"
    np.save(events_path, ev)
    return {
        "video": video_path,
        "audio": audio_path,
        "events": events_path,
        "frames": plain_video(video_path),
        "samples": plain_audio(audio_path),
        "ev": ev,
        "labels": np.arange(FRAMES, dtype=np.int64) * 10,
    }


def make(scene, step, **kwargs):
    return recording(
        step,
        video=video(scene["video"]),
        audio=audio(scene["audio"]),
        events=events(
            scene["events"], window_us=1000, height=SENSOR[0], width=SENSOR[1], t0=0, length=1600
        ),
        label=(np.arange(FRAMES) / FPS, scene["labels"]),
        **kwargs,
    )


def concat(r, bounds):
    """The steps of ``r`` read as consecutive blocks between ``bounds``, concatenated."""
    parts = [r[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    out = {k: np.concatenate([p[k] for p in parts]) for k in parts[0] if k != "valid"}
    out["valid"] = {k: np.concatenate([p["valid"][k] for p in parts]) for k in parts[0]["valid"]}
    return out


@settings(max_examples=15, deadline=None)
@given(
    step=st.sampled_from([0.02, 0.04, 0.1, 0.125, 0.2]),
    cuts=st.lists(st.integers(1, 11), min_size=1, max_size=12),
)
def test_steps_concatenate_to_every_modality_without_gap_or_overlap(scene, step, cuts):
    r = make(scene, step)
    n = len(r)
    assert n == int(np.ceil(1.6 / step - 1e-9))
    bounds = sorted({0, n, *(b for b in np.cumsum(cuts).tolist() if b < n)})
    got = concat(r, bounds)
    assert all(v.all() for v in got["valid"].values())
    # video: the frame shown at the start of each step
    shown = [int(np.floor(i * step * FPS + 1e-9)) for i in range(n)]
    np.testing.assert_array_equal(got["video"], scene["frames"][shown])
    # audio: every sample once, in order, exactly step * rate a step, at the boundaries too
    per_step = round(step * RATE)
    assert got["audio"].shape == (n, per_step, 2)
    samples = got["audio"].reshape(-1, 2)
    np.testing.assert_array_equal(samples[: len(scene["samples"])], scene["samples"])
    assert not samples[len(scene["samples"]) :].any()  # the last step padded with zeros
    # events: every event counted once, in the step of its time
    assert got["events"].shape == (n, 2, *SENSOR)
    assert got["events"].sum() == len(scene["ev"])
    counts = got["events"].sum(axis=(1, 2, 3))
    expected = np.bincount(scene["ev"]["t"] // round(step * 1e6), minlength=n)
    np.testing.assert_array_equal(counts, expected)
    # labels: the one in force at the start of each step
    np.testing.assert_array_equal(got["label"], scene["labels"][shown])


def test_a_step_holds_what_each_source_gives_for_it(scene):
    r = make(scene, 0.04)
    window = events(scene["events"], window_us=40_000, height=SENSOR[0], width=SENSOR[1], t0=0)
    step = r[17]
    assert set(step) == {"video", "audio", "events", "label", "valid"}
    np.testing.assert_array_equal(step["video"], scene["frames"][17])
    np.testing.assert_array_equal(step["audio"], audio(scene["audio"], frame=640)[17])
    np.testing.assert_array_equal(step["events"], window[17])
    assert step["label"] == 170
    assert step["valid"] == {"video": True, "audio": True, "events": True, "label": True}
    assert r.spans() == {k: (0, 40) for k in ("video", "audio", "events", "label")}


def test_consecutive_reads_keep_the_decoders_going(scene, seeks):
    r = make(scene, 0.02)  # every frame shown twice
    for a in range(0, len(r), 7):
        r[a : a + 7]
    assert seeks == {"seek": 0, "restart": 0}
    r[3:5]  # back: each media source seeks (or restarts) on its own
    assert seeks["seek"] + seeks["restart"] >= 2


def test_variable_frame_rate_video_shows_what_a_player_shows(tmp_path):
    times = [0, 30, 45, 130, 300, 310, 320, 460]
    path = write_vfr_video(tmp_path / "vfr.mp4", times, last_ms=40)
    r = recording(0.05, video=video(path), label=np.arange(10))
    frames = plain_video(path)
    shown = [max(k for k, t in enumerate(times) if t <= 50 * i) for i in range(10)]
    assert len(r) == 10  # 0.5 s
    np.testing.assert_array_equal(r[0:10]["video"], frames[shown])


def test_offsets_and_ragged_modalities(scene, tmp_path):
    short = write_audio(tmp_path / "short.wav", int(1.0 * RATE), rate=RATE)
    with pytest.raises(SourceError) as info:
        len(recording(0.04, video=video(scene["video"]), audio=audio(short)))
    message = str(info.value)
    assert "recording 'scene'" in message and "modality 'audio'" in message
    assert "1 s" in message and "1.6 s" in message and "ragged=True" in message

    r = recording(
        0.04, video=video(scene["video"]), audio=audio(short), ragged=True, offsets={"audio": 0.2}
    )
    assert len(r) == 40 and r.spans()["audio"] == (5, 30)
    steps = r[0:40]
    valid = steps["valid"]["audio"]
    assert not valid[:5].any() and valid[5:30].all() and not valid[30:].any()
    assert not steps["audio"][:5].any() and not steps["audio"][30:].any()
    np.testing.assert_array_equal(steps["audio"][5:30].reshape(-1, 2), plain_audio(short))
    assert steps["valid"]["video"].all()


def test_labels_before_their_first_time_are_not_valid(scene):
    r = recording(0.1, label=(np.array([0.25, 0.5, 0.75]), np.array([1, 2, 3])))
    steps = r[0 : len(r)]
    assert len(r) == 10  # a label lasts the mean interval: the last one to 1.0 s
    assert steps["valid"]["label"].tolist() == [False] * 3 + [True] * 7
    assert steps["label"].tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 3, 3]


def test_errors_name_the_recording_and_the_modality(scene, tmp_path):
    with pytest.raises(SourceError, match="mismatched rates that cannot divide a step") as info:
        len(recording(1 / 30, name="take 7", video=video(scene["video"]), sound=scene["audio"]))
    assert "recording 'take 7', modality 'sound'" in str(info.value)
    with pytest.raises(SourceError, match="recording 'scene', modality 'mic'.*No such file"):
        recording(0.04, video=scene["video"], mic=tmp_path / "missing.wav")
    with pytest.raises(SourceError, match="modality 'video'.*mismatched rates"):
        recording(0.04, video=video(scene["video"], fps=30))
    with pytest.raises(ValueError, match="whole number of steps"):
        recording(0.04, video=scene["video"], offsets={"video": 0.05})
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(scene["video"].read_bytes())
    r = recording(0.04, video=video(broken), label=scene["labels"])
    len(r)
    broken.write_bytes(b"not a video")
    with pytest.raises(SourceError, match=r"recording 'broken', modality 'video', steps 8:12"):
        r[8:12]


def test_pickles_small_and_reads_in_a_copy(scene):
    r = make(scene, 0.04)
    first = r[0:10]
    data = pickle.dumps(r)
    assert len(data) < 200_000  # the paths and the probes: no decoder, no sample
    copy = pickle.loads(data)
    again = copy[0:10]
    for key in ("video", "audio", "events", "label"):
        np.testing.assert_array_equal(again[key], first[key])


@pytest.fixture(scope="module")
def takes(scene, tmp_path_factory):
    """Three recordings of different lengths (the scene cut short)."""
    folder = tmp_path_factory.mktemp("takes")
    out = []
    for k, frames in enumerate([40, 23, 31]):
        v = write_video(folder / f"take{k}.mp4", frames, gop=5, bf=2)
        a = write_audio(folder / f"take{k}.wav", frames * 640, rate=RATE, layout="mono")
        ev = scene["ev"][scene["ev"]["t"] < frames * 40_000]
        e = events(ev, window_us=40_000, height=SENSOR[0], width=SENSOR[1], t0=0, length=frames)
        out.append(
            recording(0.04, video=video(v), audio=audio(a), events=e, label=np.arange(frames))
        )
    return out


@pytest.mark.parametrize("workers", [0, 2])
def test_in_a_loader_same_batches_for_any_workers_and_after_resume(takes, workers):
    lengths = [len(r) for r in takes]
    assert lengths == [40, 23, 31]
    reference = as_numpy(StreamLoader(takes, 2, 6))
    loader = StreamLoader(takes, 2, 6, num_workers=workers)
    batches = list(loader)
    check_continuity(batches, lengths, sources=takes)
    assert_same(as_numpy(batches), reference)
    run = loader  # a second pass, stopped after 4 batches
    it = iter(run)
    for _ in range(4):
        next(it)
    state = run.state_dict()
    resumed = StreamLoader(takes, 2, 6, num_workers=workers)
    resumed.load_state_dict(state)
    assert_same(as_numpy(resumed), reference[4:])
    batch = batches[0]
    assert set(batch.data) == {"video", "audio", "events", "label", "valid"}
    assert tuple(batch.data["audio"].shape) == (2, 6, 640, 1)
    assert batch.data["valid"]["audio"].dtype.is_floating_point is False


@pytest.mark.parametrize(
    "step, offsets, problem",
    [
        (float("inf"), None, "step must be"),
        (1e-300, None, "microsecond"),
        (0.001, {"events": float("inf")}, "offset inf s"),
        (0.001, {"events": float("-inf")}, "offset -inf s"),
    ],
)
def test_a_step_or_offset_that_is_no_number_of_microseconds_is_refused_naming_it(
    step, offsets, problem
):
    # (they failed with an OverflowError or a ZeroDivisionError naming nothing)
    ev = synthetic_events(height=8, width=8, duration_us=50_000, seed=1)
    e = events(ev, window_us=1000, height=8, width=8)
    with pytest.raises((ValueError, SourceError), match=problem):
        recording(step=step, events=e, offsets=offsets)


@pytest.mark.parametrize("step", [float("nan"), float("inf"), -0.1, 0])
def test_a_step_that_is_no_positive_number_of_seconds_names_the_recording(tmp_path, step):
    # (the error named the step only: of which of a thousand recordings, it did not say)
    path = tmp_path / "drive_0042.npy"
    np.save(path, synthetic_events(height=8, width=8, duration_us=50_000, seed=1))
    e = events(path, window_us=1000, height=8, width=8)
    with pytest.raises(ValueError, match=r"recording 'drive_0042': step must be"):
        recording(step=step, events=e)
    with pytest.raises(ValueError, match=r"recording 'named': step must be"):
        recording(step=step, events=e, name="named")
