import multiprocessing
import operator
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from media import AUDIO_FILES, damage_codec_tag, frames_of, plain_audio, truncate, write_audio

from streamseq.errors import SourceError
from streamseq.io import audio

# (layout, sample_rate, frame): conversions to check against the plain decode
SETTINGS = [(None, None, 1000), ("mono", None, 777), ("stereo", 22050, 1024), (1, 8000, 500)]


@pytest.fixture(scope="module")
def references(audio_files):
    cache = {}

    def reference(name, layout, rate):
        key = (name, layout, rate)
        if key not in cache:
            if isinstance(layout, int):
                layout = {1: "mono", 2: "stereo"}[layout]
            cache[key] = plain_audio(audio_files[name], layout, rate)
        return cache[key]

    return reference


@pytest.mark.parametrize("name", AUDIO_FILES)
@pytest.mark.parametrize("layout, rate, frame", SETTINGS)
def test_length_and_sequential_read(name, layout, rate, frame, audio_files, references, seeks):
    a = audio(audio_files[name], layout=layout, sample_rate=rate, frame=frame)
    ref = references(name, layout, rate)
    assert a.num_samples() == len(ref)
    assert len(a) == -(-len(ref) // frame)
    got = np.concatenate([a[i : i + 3] for i in range(0, len(a), 3)])
    assert got.dtype == np.float32 and got.shape == (len(a), frame, ref.shape[1])
    np.testing.assert_array_equal(got, frames_of(ref, frame))
    assert not got[-1, len(ref) - (len(a) - 1) * frame :].any()  # zero padding
    assert seeks == {"seek": 0, "restart": 0}


@pytest.mark.parametrize("name", AUDIO_FILES)
@pytest.mark.parametrize("layout, rate, frame", [SETTINGS[0], SETTINGS[2]])
@settings(max_examples=8)
@given(reads=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 4)), min_size=1, max_size=6))
def test_random_access_matches_plain_decode(
    name, layout, rate, frame, audio_files, references, reads
):
    a = audio(audio_files[name], layout=layout, sample_rate=rate, frame=frame)
    ref = frames_of(references(name, layout, rate), frame)
    for i, n in reads:
        np.testing.assert_array_equal(a[i : i + n], ref[i : i + n])


@pytest.mark.parametrize(
    "name, rate",
    [
        ("wav_s16", None),
        ("wav_s16", 22050),
        ("flac_mono", None),
        ("flac_mono", 22050),
        ("aac_m4a", None),
        ("aac_m4a", 22050),
        ("mp3", None),  # (at 22050 Hz, these positions are too close to the start: restarts)
    ],
)
def test_backward_reads_seek_instead_of_restarting(name, rate, audio_files, references, seeks):
    a = audio(audio_files[name], sample_rate=rate, frame=256)
    ref = frames_of(references(name, None, rate), 256)
    for i in [77, 40, 70, 45]:  # on, back, on (a short gap), back
        np.testing.assert_array_equal(a[i : i + 2], ref[i : i + 2])
    assert seeks == {"seek": 2, "restart": 0}


def test_slicing_rules(audio_files, references):
    a = audio(audio_files["wav_s16"], frame=1000)
    ref = frames_of(references("wav_s16", None, None), 1000)
    assert len(a) == 20
    np.testing.assert_array_equal(a[-2:], ref[-2:])
    np.testing.assert_array_equal(a[15:99], ref[15:])
    np.testing.assert_array_equal(a[3], ref[3])
    assert a[30:40].shape == (0, 1000, 2)
    with pytest.raises(IndexError):
        a[20]
    with pytest.raises(ValueError, match="step"):
        a[::2]


def test_declared_length(audio_files, references):
    ref = frames_of(references("wav_s16", None, None), 1024)  # 20 steps, last one partial
    a = audio(audio_files["wav_s16"], frame=1024, length=20)
    np.testing.assert_array_equal(a[15:20], ref[15:20])
    too_long = audio(audio_files["wav_s16"], frame=1024, length=25)
    with pytest.raises(SourceError, match="wav_s16.wav: truncated"):
        too_long[18:22]


def test_pickle_and_worker_processes(audio_files, references):
    a = audio(audio_files["aac_m4a"], frame=500)
    ref = frames_of(references("aac_m4a", None, None), 500)
    a[3:5]
    copy = pickle.loads(pickle.dumps(a))
    np.testing.assert_array_equal(copy[30:32], ref[30:32])
    for method in ["fork", "spawn"]:
        with multiprocessing.get_context(method).Pool(1) as pool:
            got = pool.starmap(operator.getitem, [(a, slice(10, 14)), (a, slice(2, 3))])
        np.testing.assert_array_equal(got[0], ref[10:14])
        np.testing.assert_array_equal(got[1], ref[2:3])
    np.testing.assert_array_equal(a[5:7], ref[5:7])


def test_missing_and_garbage_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.wav"):
        audio(tmp_path / "nowhere.wav")
    path = tmp_path / "garbage.wav"
    path.write_bytes(b"RIFF" + np.random.default_rng(0).bytes(3000))
    with pytest.raises(SourceError, match="garbage.wav"):
        len(audio(path))


def test_damaged_codec_description(tmp_path):
    whole = write_audio(tmp_path / "whole.wav", 20000, "pcm_s16le", "wav", 16000, "stereo")
    path = damage_codec_tag(whole, tmp_path / "damaged.wav")
    with pytest.raises(SourceError, match="damaged.wav: no decoder for audio stream 0"):
        len(audio(path))
    with pytest.raises(SourceError, match="damaged.wav"):
        audio(path, length=5, layout="mono", sample_rate=16000)[0:2]


@pytest.mark.parametrize(
    "name, codec, fmt",
    [
        ("a.wav", "pcm_s16le", "wav"),  # header declares the data size
        ("a.flac", "flac", "flac"),  # header declares the number of samples
        ("a.m4a", "aac", "mp4"),  # index at the end: cannot open
        ("a.mkv", "flac", "matroska"),  # duration in the header
    ],
)
def test_truncated_file(tmp_path, name, codec, fmt):
    whole = write_audio(tmp_path / name, 40000, codec, fmt, 16000, "stereo")
    for fraction in [0.5, 0.9]:
        path = truncate(whole, tmp_path / f"cut{fraction}_{name}", fraction)
        with pytest.raises(SourceError, match=f"cut{fraction}_{name}"):
            a = audio(path)
            a[0 : len(a)]


def test_bad_arguments(audio_files):
    with pytest.raises(ValueError, match="frame"):
        audio(audio_files["wav_s16"], frame=0)
    with pytest.raises(ValueError):
        audio(audio_files["wav_s16"], layout="no such layout")


def test_a_state_of_audio_is_refused_by_the_files_decoded_to_other_steps(audio_files):
    from streamseq import StreamLoader

    path = audio_files["wav_s16"]  # 20000 samples at 16 kHz, stereo

    def loader(**options):
        return StreamLoader([audio(path, **options)], batch_size=1, tbins=4)

    saving = loader(layout="stereo", frame=1000)
    next(iter(saving))
    state = saving.state_dict()
    others = [
        {"layout": "mono", "frame": 1000},
        {"layout": "stereo", "frame": 500, "sample_rate": 8000},  # (20 steps, as saved)
    ]
    for options in others:
        with pytest.raises(ValueError, match="the streams' reader options"):
            loader(**options).load_state_dict(state)
    same = loader(layout=2, frame=1000, stream_index=0)  # (the same options, spelled otherwise)
    same.load_state_dict(state)
    assert [b.data.tolist() for b in same] == [b.data.tolist() for b in list(saving)[1:]]
