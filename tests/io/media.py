"""Small media files written with PyAV, and the plain decodes the sources must match."""

from fractions import Fraction

import av
import numpy as np

# name: (codec, container format, extension, gop size, B-frames)
VIDEO_CLIPS = {
    "x264_gop1": ("libx264", "mp4", "mp4", 1, 0),
    "x264_gop5_b2": ("libx264", "mp4", "mp4", 5, 2),
    "x264_gop12_b0": ("libx264", "mp4", "mp4", 12, 0),
    "x264_gop12_b2": ("libx264", "mp4", "mp4", 12, 2),
    "mpeg4_gop5_b2": ("mpeg4", "mp4", "mp4", 5, 2),
    "x264_mkv_b2": ("libx264", "matroska", "mkv", 7, 2),
    "x264_avi_b2": ("libx264", "avi", "avi", 12, 2),  # timestamps that lie: decode order
}

# name: (codec, container format, extension, sample rate, layout)
AUDIO_FILES = {
    "wav_s16": ("pcm_s16le", "wav", "wav", 16000, "stereo"),
    "flac_mono": ("flac", "flac", "flac", 16000, "mono"),
    "aac_m4a": ("aac", "mp4", "m4a", 16000, "stereo"),
    "mp3": ("libmp3lame", "mp3", "mp3", 16000, "mono"),
    "opus_ogg": ("libopus", "ogg", "ogg", 48000, "stereo"),  # no exact seek: restarts
    "flac_mkv_44k": ("flac", "matroska", "mkv", 44100, "mono"),  # millisecond timestamps
}


def video_frame(i, height=48, width=64):
    """Frame ``i`` of the test clips: moving square, drifting colour, fixed noise."""
    rng = np.random.default_rng(i % 7)
    img = np.zeros((height, width, 3), np.uint8)
    img[..., 0] = (i * 9) % 256
    img[..., 1] = rng.integers(0, 64, (height, width))
    y, x = (3 * i) % (height - 8), (5 * i) % (width - 8)
    img[y : y + 8, x : x + 8] = 255
    return img


def write_video(path, n=40, codec="libx264", fmt="mp4", gop=12, bf=2, size=(48, 64), options=None):
    """Write ``n`` frames with PyAV; returns ``path``."""
    with av.open(str(path), "w", format=fmt, options=options or {}) as out:
        stream = out.add_stream(codec, rate=25)
        stream.height, stream.width = size
        stream.pix_fmt = "yuv420p"
        stream.codec_context.gop_size = gop
        stream.options = {"bf": str(bf)}
        for i in range(n):
            frame = av.VideoFrame.from_ndarray(video_frame(i, *size), format="rgb24")
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
    return path


def plain_video(path, size=None, format="rgb24"):
    """All frames of a plain decode."""
    kwargs = {} if size is None else {"height": size[0], "width": size[1]}
    with av.open(str(path)) as container:
        frames = [
            f.to_ndarray(format=format, threads=1, **kwargs) for f in container.decode(video=0)
        ]
    return np.stack(frames)


def write_audio(path, n=20000, codec="pcm_s16le", fmt=None, rate=16000, layout="stereo"):
    """Write ``n`` samples of tones (one pitch per channel) with PyAV; returns ``path``."""
    channels = av.AudioLayout(layout).nb_channels
    t = np.arange(n) / rate
    x = np.stack([0.3 * np.sin(2 * np.pi * (220 + 110 * k) * t + k) for k in range(channels)])
    with av.open(str(path), "w", format=fmt) as out:
        stream = out.add_stream(codec, rate=rate, layout=layout)
        for i in range(0, n, 1000):
            frame = av.AudioFrame.from_ndarray(
                np.ascontiguousarray(x[:, i : i + 1000], np.float32), format="fltp", layout=layout
            )
            frame.sample_rate, frame.pts = rate, i
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
    return path


def plain_audio(path, layout=None, sample_rate=None):
    """All samples of a plain decode, converted as :func:`streamseq.io.audio` documents."""
    with av.open(str(path)) as container:
        stream = container.streams.audio[0]
        layout = layout or stream.codec_context.layout.name
        rate = stream.codec_context.sample_rate
        channels = av.AudioLayout(layout).nb_channels
        convert = av.AudioResampler(format="flt", layout=layout)
        x = np.concatenate(
            [g.to_ndarray().reshape(-1, channels) for f in container.decode(stream)
             for g in convert.resample(f)]
        )  # fmt: skip
    if sample_rate is None or sample_rate == rate:
        return x
    resampler = av.AudioResampler(format="flt", layout=layout, rate=sample_rate)
    out = []
    for i in range(0, len(x), 3000):  # any chunking gives the same samples
        frame = av.AudioFrame.from_ndarray(
            np.ascontiguousarray(x[i : i + 3000]).reshape(1, -1), format="flt", layout=layout
        )
        frame.sample_rate, frame.pts, frame.time_base = rate, i, Fraction(1, rate)
        out += [g.to_ndarray().reshape(-1, channels) for g in resampler.resample(frame)]
    out += [g.to_ndarray().reshape(-1, channels) for g in resampler.resample(None)]
    return np.concatenate(out)


def frames_of(samples, frame):
    """Cut samples into zero-padded steps of ``frame`` samples."""
    steps = -(-len(samples) // frame)
    padded = np.zeros((steps * frame, samples.shape[1]), np.float32)
    padded[: len(samples)] = samples
    return padded.reshape(steps, frame, samples.shape[1])


def truncate(src, dst, fraction):
    """Copy the first ``fraction`` of the bytes of ``src`` to ``dst``; returns ``dst``."""
    data = src.read_bytes()
    dst.write_bytes(data[: int(len(data) * fraction)])
    return dst


def damage_codec_tag(src, dst):
    """Copy an MP4 or WAV file, overwriting the codec of its first stream with an unknown one."""
    data = bytearray(src.read_bytes())
    if data[:4] == b"RIFF":
        tag = data.index(b"fmt ") + 8  # chunk size, then the format tag
        data[tag : tag + 2] = b"\x99\x99"
    else:
        tag = data.index(b"stsd") + 16  # version, flags, entry count, entry size
        data[tag : tag + 4] = b"zzzz"
    dst.write_bytes(data)
    return dst


def write_vfr_video(path, times_ms, size=(48, 64), codec="libx264", bf=0, last_ms=None):
    """Write frame ``i`` of :func:`video_frame` at ``times_ms[i]`` milliseconds (variable rate).

    The stream's time base is a millisecond; ``last_ms`` is the duration of the last frame
    (the file tells it through the packet durations). Returns ``path``.
    """
    with av.open(str(path), "w", format="mp4") as out:
        stream = out.add_stream(codec, rate=1000)
        stream.height, stream.width = size
        stream.pix_fmt = "yuv420p"
        stream.codec_context.time_base = Fraction(1, 1000)
        stream.time_base = Fraction(1, 1000)
        stream.options = {"bf": str(bf)}
        packets = []
        for i, t in enumerate(times_ms):
            frame = av.VideoFrame.from_ndarray(video_frame(i, *size), format="rgb24")
            frame.pts, frame.time_base = int(t), Fraction(1, 1000)
            packets += stream.encode(frame)
        packets += stream.encode()
        ends = [int(t) for t in times_ms[1:]] + [int(times_ms[-1]) + (last_ms or 0)]
        end_of = dict(zip([int(t) for t in times_ms], ends, strict=True))
        for packet in packets:
            if last_ms is not None and packet.pts is not None:
                packet.duration = end_of[packet.pts] - packet.pts
            out.mux(packet)
    return path


def plain_video_times(path, size=None, format="rgb24"):
    """All frames of a plain decode, and the time of each (its timestamp, in seconds)."""
    kwargs = {} if size is None else {"height": size[0], "width": size[1]}
    with av.open(str(path)) as container:
        decoded = [
            (f.to_ndarray(format=format, threads=1, **kwargs), float(f.time))
            for f in container.decode(video=0)
        ]
    return np.stack([f for f, _ in decoded]), np.array([t for _, t in decoded])


#: the cameras of the LeRobot datasets of the tests, and the codec of each
LEROBOT_CAMERAS = {"observation.images.top": "libsvtav1", "observation.images.wrist": "libx264"}


def lerobot_frame(camera, episode, step, size=(24, 32)):
    """The image of a camera at a step of an episode: a square placed by the three."""
    height, width = size
    img = np.full((height, width, 3), 20 + 40 * camera, np.uint8)
    y, x = (2 * step + episode) % (height - 6), (3 * step + 5 * episode) % (width - 6)
    img[y : y + 6, x : x + 6] = (255, 200 - 50 * camera, 40 * episode % 256)
    return img


def _lerobot_video(path, codec, images, fps):
    """Encode images at ``fps`` (one thread: the same file every time)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=fps)
        stream.height, stream.width = images[0].shape[:2]
        stream.pix_fmt = "yuv420p"
        stream.codec_context.thread_count = 1
        stream.codec_context.gop_size = 8
        for image in images:
            out.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        out.mux(stream.encode())


def write_lerobot(
    folder, version, lengths, fps=10, size=(24, 32), episodes_per_file=2, videos_per_file=3
):
    """Write a small LeRobot dataset (``"v2.1"`` or ``"v3.0"``) in ``folder``; returns it.

    Two cameras (AV1 and H.264, :data:`LEROBOT_CAMERAS`) and a table of ``episode_index``,
    ``frame_index``, ``index``, ``task_index``, ``timestamp``, ``observation.state`` and
    ``action`` (float32 vectors of 2); with v3.0, ``episodes_per_file`` episodes per data
    file and ``videos_per_file`` per video file (row groups of 8 rows).
    """
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "meta").mkdir(exist_ok=True)
    cameras = list(LEROBOT_CAMERAS)
    features = {
        name: {
            "dtype": "video",
            "shape": [size[0], size[1], 3],
            "names": ["height", "width", "channels"],
        }
        for name in cameras
    }
    vector = {"dtype": "float32", "shape": [2], "names": ["x", "y"]}
    features.update({"observation.state": vector, "action": vector})
    for name in ("timestamp",):
        features[name] = {"dtype": "float32", "shape": [1], "names": None}
    for name in ("frame_index", "episode_index", "index", "task_index"):
        features[name] = {"dtype": "int64", "shape": [1], "names": None}
    v3 = version == "v3.0"
    info = {
        "codebase_version": version,
        "robot_type": "test",
        "total_episodes": len(lengths),
        "total_frames": int(sum(lengths)),
        "fps": fps,
        "chunks_size": 1000,
        "features": features,
    }
    if v3:
        info["data_path"] = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
        info["video_path"] = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    else:
        info["data_path"] = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
        info["video_path"] = (
            "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
        )
    (folder / "meta" / "info.json").write_text(json.dumps(info, indent=2))

    def rows(episode, n, first):
        t = np.arange(n)
        state = np.stack([np.sin(t / 5 + episode), np.cos(t / 7) + episode], 1).astype(np.float32)
        return {
            "observation.state": pa.FixedSizeListArray.from_arrays(state.ravel(), 2),
            "action": pa.FixedSizeListArray.from_arrays(
                np.diff(state, axis=0, append=state[-1:]).ravel(), 2
            ),
            "timestamp": (t / fps).astype(np.float32),
            "frame_index": t,
            "episode_index": np.full(n, episode),
            "index": first + t,
            "task_index": np.zeros(n, np.int64),
        }

    firsts = np.concatenate([[0], np.cumsum(lengths)]).astype(int)
    if not v3:
        lines = []
        for e, n in enumerate(lengths):
            path = folder / "data" / "chunk-000" / f"episode_{e:06d}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.table(rows(e, n, firsts[e])), path, row_group_size=8)
            for c, cam in enumerate(cameras):
                images = [lerobot_frame(c, e, k, size) for k in range(n)]
                video = folder / "videos" / "chunk-000" / cam / f"episode_{e:06d}.mp4"
                _lerobot_video(video, LEROBOT_CAMERAS[cam], images, fps)
            lines.append(json.dumps({"episode_index": e, "tasks": ["move"], "length": n}))
        (folder / "meta" / "episodes.jsonl").write_text("\n".join(lines) + "\n")
        return folder

    meta = {k: [] for k in ("episode_index", "length", "data/chunk_index", "data/file_index")}
    meta.update({"dataset_from_index": [], "dataset_to_index": []})
    for f, group in enumerate(range(0, len(lengths), episodes_per_file)):
        episodes = range(group, min(group + episodes_per_file, len(lengths)))
        parts = [pa.table(rows(e, lengths[e], firsts[e])) for e in episodes]
        path = folder / "data" / "chunk-000" / f"file-{f:03d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.concat_tables(parts), path, row_group_size=8)
        for e in episodes:
            meta["episode_index"].append(e)
            meta["length"].append(lengths[e])
            meta["data/chunk_index"].append(0)
            meta["data/file_index"].append(f)
            meta["dataset_from_index"].append(int(firsts[e]))
            meta["dataset_to_index"].append(int(firsts[e + 1]))
    for c, cam in enumerate(cameras):
        for name in ("chunk_index", "file_index", "from_timestamp", "to_timestamp"):
            meta[f"videos/{cam}/{name}"] = []
        for f, group in enumerate(range(0, len(lengths), videos_per_file)):
            episodes = range(group, min(group + videos_per_file, len(lengths)))
            images, start = [], 0
            for e in episodes:
                images += [lerobot_frame(c, e, k, size) for k in range(lengths[e])]
                meta[f"videos/{cam}/chunk_index"].append(0)
                meta[f"videos/{cam}/file_index"].append(f)
                meta[f"videos/{cam}/from_timestamp"].append(start / fps)
                start += lengths[e]
                meta[f"videos/{cam}/to_timestamp"].append(start / fps)
            video = folder / "videos" / cam / "chunk-000" / f"file-{f:03d}.mp4"
            _lerobot_video(video, LEROBOT_CAMERAS[cam], images, fps)
    path = folder / "meta" / "episodes" / "chunk-000" / "file-000.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(meta), path)
    return folder


def write_resized_video(path, parts, fmt="matroska"):
    """One MJPEG stream whose frames change size: ``parts`` lists ``((height, width), n)``.

    Each JPEG frame carries its own size, so a plain decode gives frames of every size.
    """
    rng = np.random.default_rng(3)
    with av.open(str(path), "w", format=fmt) as out:
        stream = out.add_stream("mjpeg", rate=25)
        stream.height, stream.width = parts[0][0]
        stream.pix_fmt = "yuvj444p"
        t = 0
        for (height, width), n in parts:
            codec = av.CodecContext.create("mjpeg", "w")
            codec.width, codec.height, codec.pix_fmt = width, height, "yuvj444p"
            codec.time_base = Fraction(1, 25)
            codec.open()
            for _ in range(n):
                img = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
                frame = av.VideoFrame.from_ndarray(img, format="rgb24")
                frame.pts, frame.time_base, t = t, Fraction(1, 25), t + 1
                for packet in codec.encode(frame):
                    packet.stream = stream
                    out.mux(packet)
            for packet in codec.encode(None):
                packet.stream = stream
                out.mux(packet)
    return path


def count_seeks(monkeypatch):
    """Count the seeks and the restarts from the beginning of the file of media sources."""
    from streamseq.io._media import MediaSource

    counts = {"seek": 0, "restart": 0}
    real_seek, real_restart = MediaSource._seek, MediaSource._restart

    def seek(self, reader, start):
        counts["seek"] += 1
        return real_seek(self, reader, start)

    def restart(self):
        counts["restart"] += 1
        return real_restart(self)

    monkeypatch.setattr(MediaSource, "_seek", seek)
    monkeypatch.setattr(MediaSource, "_restart", restart)
    return counts
