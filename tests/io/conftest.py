"""Fixtures: the media files of :mod:`media`, written once per session."""

import pytest
from media import AUDIO_FILES, VIDEO_CLIPS, count_seeks, write_audio, write_video


@pytest.fixture(scope="session")
def video_clips(tmp_path_factory):
    """The clips of VIDEO_CLIPS (40 frames, 64x48), written once per session."""
    folder = tmp_path_factory.mktemp("video")
    paths = {}
    for name, (codec, fmt, ext, gop, bf) in VIDEO_CLIPS.items():
        paths[name] = write_video(folder / f"{name}.{ext}", 40, codec, fmt, gop, bf)
    return paths


@pytest.fixture(scope="session")
def audio_files(tmp_path_factory):
    """The files of AUDIO_FILES (20000 samples), written once per session."""
    folder = tmp_path_factory.mktemp("audio")
    paths = {}
    for name, (codec, fmt, ext, rate, layout) in AUDIO_FILES.items():
        paths[name] = write_audio(folder / f"{name}.{ext}", 20000, codec, fmt, rate, layout)
    return paths


@pytest.fixture
def seeks(monkeypatch):
    """Count the seeks and the restarts from the beginning of the file of media sources."""
    return count_seeks(monkeypatch)
