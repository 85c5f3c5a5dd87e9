"""Robot episodes of a LeRobot dataset (v3.0): camera frames, states and actions as dict steps.

Writes a small dataset in LeRobot's v3.0 layout: ``meta/info.json``, the episodes'
metadata in ``meta/episodes/chunk-000/file-000.parquet``, tables of several episodes each
(``data/chunk-000/file-XXX.parquet``: a row per frame with ``episode_index``,
``frame_index``, ``index``, ``timestamp``, ``observation.state``, ``action``) and videos
of several episodes each, one after the other (``videos/observation.images.front/
chunk-000/file-XXX.mp4``). The robot moves a white square over the picture; its state is
the square's position ``(x, y)`` in pixels and its action the move to the next position.

:func:`streamseq.io.lerobot` makes one stream per episode from the metadata alone: a step
is ``{"observation.images.front", "observation.state", "action"}``, the frame being the
one nearest the row's timestamp in the episode's window of its video; two worker
processes read the episodes, each only the row groups and the video window it needs. The
example prints, for the first step of each row, the state and where the square is in the
frame.

With ``--url s3://bucket/prefix`` the dataset is uploaded there and read back by URL, the
endpoint and credentials given as ``storage_options`` (each worker process connects with
them).

Run: ``python examples/robot_episodes.py [--episodes 6] [--workers 2] [--out out/]
[--url s3://bucket/robot --endpoint http://127.0.0.1:9000 --key KEY --secret SECRET]``
(a URL needs ``pip install 'streamseq[remote]'``)
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import streamseq
from streamseq.io import lerobot

FPS = 10
HEIGHT, WIDTH = 48, 64
SQUARE = 8  # pixels
CAMERA = "observation.images.front"
EPISODES_PER_FILE = 3  # in a table and in a video


def trajectory(episode: int, frames: int) -> np.ndarray:
    """The square's centre ``(x, y)`` in every frame of an episode, float32 ``[frames, 2]``."""
    t = np.arange(frames) / FPS
    x = WIDTH / 2 + (WIDTH / 2 - SQUARE) * np.sin(0.9 * t + episode)
    y = HEIGHT / 2 + (HEIGHT / 2 - SQUARE) * np.cos(0.6 * t + 2 * episode)
    return np.round(np.stack([x, y], axis=1)).astype(np.float32)


def s3_options(
    endpoint: str | None = None, key: str | None = None, secret: str | None = None
) -> dict[str, Any]:
    """The ``storage_options`` of an S3 server: endpoint and credentials, those given.

    Without any, s3fs finds the usual AWS credentials (environment, ``~/.aws``).
    """
    options: dict[str, Any] = {}
    if key is not None:
        options.update(key=key, secret=secret)
    if endpoint is not None:
        options["client_kwargs"] = {"endpoint_url": endpoint}
    return options


def draw(state: np.ndarray) -> np.ndarray:
    """The camera image of a state: a white square centred on it, on a dark background."""
    image = np.full((HEIGHT, WIDTH, 3), 30, np.uint8)
    x, y = (int(v) - SQUARE // 2 for v in state)
    image[y : y + SQUARE, x : x + SQUARE] = 255
    return image


def square_position(frame: np.ndarray) -> tuple[float, float]:
    """Where the square is in a frame: the centre of its bright pixels ``(x, y)``."""
    ys, xs = np.nonzero(np.asarray(frame).mean(axis=-1) > 128)
    return float(xs.mean() + 0.5), float(ys.mean() + 0.5)


def _write_video(path: str, images: list[np.ndarray]) -> None:
    """Encode images at :data:`FPS` (H.264 when available), one thread: the same file each time."""
    codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with av.open(path, "w") as out:
        stream = out.add_stream(codec, rate=FPS)
        stream.height, stream.width, stream.pix_fmt = HEIGHT, WIDTH, "yuv420p"
        stream.codec_context.thread_count = 1
        stream.codec_context.gop_size = 10
        for image in images:
            out.mux(stream.encode(av.VideoFrame.from_ndarray(image, "rgb24")))
        out.mux(stream.encode())


def _vectors(x: np.ndarray) -> pa.Array:
    return pa.FixedSizeListArray.from_arrays(x.astype(np.float32).ravel(), 2)


def write_dataset(folder: str, lengths: list[int]) -> list[str]:
    """A LeRobot v3.0 dataset of episodes of ``lengths`` frames in ``folder``; its files."""
    vector = {"dtype": "float32", "shape": [2], "names": ["x", "y"]}
    scalar = {"shape": [1], "names": None}
    info = {
        "codebase_version": "v3.0",
        "fps": FPS,
        "total_episodes": len(lengths),
        "total_frames": sum(lengths),
        "chunks_size": 1000,
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
        "features": {
            CAMERA: {"dtype": "video", "shape": [HEIGHT, WIDTH, 3], "names": None},
            "observation.state": vector,
            "action": vector,
            "timestamp": {"dtype": "float32", **scalar},
            **{n: {"dtype": "int64", **scalar} for n in ("frame_index", "episode_index", "index")},
        },
    }
    os.makedirs(os.path.join(folder, "meta", "episodes", "chunk-000"), exist_ok=True)
    paths = [os.path.join(folder, "meta", "info.json")]
    with open(paths[0], "w") as f:
        json.dump(info, f, indent=2)
    meta: dict[str, list[Any]] = {}
    first = 0  # global index of an episode's first row
    for file in range(0, len(lengths), EPISODES_PER_FILE):
        rows: list[pa.Table] = []
        images: list[np.ndarray] = []
        for episode in range(file, min(file + EPISODES_PER_FILE, len(lengths))):
            n = lengths[episode]
            states = trajectory(episode, n + 1)  # one more: the action of the last frame
            rows.append(
                pa.table(
                    {
                        "episode_index": np.full(n, episode),
                        "frame_index": np.arange(n),
                        "index": first + np.arange(n),
                        "timestamp": (np.arange(n) / FPS).astype(np.float32),
                        "observation.state": _vectors(states[:n]),
                        "action": _vectors(np.diff(states, axis=0)),
                    }
                )
            )
            start = len(images) / FPS  # the episode's window of the video file
            images += [draw(state) for state in states[:n]]
            entry = {
                "episode_index": episode,
                "length": n,
                "data/chunk_index": 0,
                "data/file_index": file // EPISODES_PER_FILE,
                "dataset_from_index": first,
                "dataset_to_index": first + n,
                f"videos/{CAMERA}/chunk_index": 0,
                f"videos/{CAMERA}/file_index": file // EPISODES_PER_FILE,
                f"videos/{CAMERA}/from_timestamp": start,
                f"videos/{CAMERA}/to_timestamp": len(images) / FPS,
            }
            for name, value in entry.items():
                meta.setdefault(name, []).append(value)
            first += n
        name = f"chunk-000/file-{file // EPISODES_PER_FILE:03d}"
        paths.append(os.path.join(folder, "data", f"{name}.parquet"))
        os.makedirs(os.path.dirname(paths[-1]), exist_ok=True)
        pq.write_table(pa.concat_tables(rows), paths[-1], row_group_size=32)
        paths.append(os.path.join(folder, "videos", CAMERA, f"{name}.mp4"))
        _write_video(paths[-1], images)
    paths.append(os.path.join(folder, "meta", "episodes", "chunk-000", "file-000.parquet"))
    pq.write_table(pa.table(meta), paths[-1])
    return paths


def upload(folder: str, paths: list[str], url: str, options: dict[str, Any]) -> None:
    """Copy files of ``folder`` under ``url`` (``s3://bucket/prefix``), at the same places."""
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True, **options)
    bucket = url[len("s3://") :].split("/")[0]
    if not fs.exists(bucket):
        fs.mkdir(bucket)
    for path in paths:
        name = os.path.relpath(path, folder).replace(os.sep, "/")
        fs.put_file(path, f"{url.rstrip('/')}/{name}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse the command line, write the dataset and print its first batches."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=3)
    parser.add_argument("--tbins", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", help="folder for the dataset (a temporary one by default)")
    parser.add_argument("--url", help="s3://bucket/prefix: upload there and read by URL")
    parser.add_argument("--endpoint", help="of an S3-compatible server (MinIO, Ceph, ...)")
    parser.add_argument("--key", help="access key (default: the usual AWS credentials)")
    parser.add_argument("--secret", help="secret key")
    args = parser.parse_args(argv)
    folder = args.out or tempfile.mkdtemp(prefix="robot_episodes_")
    lengths = [30 + 13 * (k % 4) for k in range(args.episodes)]
    paths = write_dataset(folder, lengths)
    options, where = None, folder
    if args.url:
        options = s3_options(args.endpoint, args.key, args.secret)
        upload(folder, paths, args.url, options)
        where = args.url
    streams = lerobot(where, columns=["observation.state", "action"], storage_options=options)
    print(f"{len(streams)} episodes of {[len(e) for e in streams]} frames in {where}")

    loader = streamseq.StreamLoader(
        streams, args.batch_size, args.tbins, num_workers=args.workers, lengths=lengths
    )
    print(f"{len(loader)} batches of {args.batch_size} rows x {args.tbins} steps")
    batches = []
    for i, batch in enumerate(loader):
        batches.append(batch)
        frame, state = batch.data[CAMERA], batch.data["observation.state"]
        print(f"batch {i}: frame {tuple(frame.shape)}, state {tuple(state.shape)}")
        for r in range(args.batch_size):
            if not batch.valid[r, 0]:
                print(f"  row {r}: padding")
                continue
            x, y = square_position(frame[r, 0].numpy())
            print(
                f"  row {r}: episode {int(batch.stream[r, 0])} step {int(batch.step[r, 0]):2d}"
                f"{' (reset)' if batch.reset[r] else '        '}  state {state[r, 0].tolist()}"
                f", square seen at [{x:.1f}, {y:.1f}]"
            )
    return {"folder": folder, "streams": streams, "lengths": lengths, "batches": batches}


if __name__ == "__main__":
    main()
