"""Robot episodes from a Parquet table and one video per episode, as dict steps.

Writes a small dataset laid out as LeRobot's: one Parquet table with a row per frame
(``episode_index``, ``frame_index``, ``timestamp``, ``observation.state``, ``action``)
and one video per episode, whose frames are the camera images of its rows. The robot
moves a white square over the picture; its state is the square's position ``(x, y)`` in
pixels and its action the move to the next position.

:func:`streamseq.io.table` makes one stream per episode from the table, reading only the
row groups it needs; :class:`Episode` puts each beside its video (:func:`streamseq.io.video`,
told its length by the table), so a step is ``{"frame", "state", "action"}`` and a batch
holds the three, aligned, with two worker processes reading them. The example prints,
for the first step of each row, the state and where the square is in the frame.

With ``--url s3://bucket/prefix`` the dataset is uploaded there and read back by URL: the
table and the videos get the endpoint and credentials as ``storage_options``, and each
worker process connects with them.

Run: ``python examples/robot_episodes.py [--episodes 6] [--workers 2] [--out out/]
[--url s3://bucket/robot --endpoint http://127.0.0.1:9000 --key KEY --secret SECRET]``
(a URL needs ``pip install 'streamseq[remote]'``)
"""

from __future__ import annotations

import argparse
import os
import tempfile
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import streamseq
from streamseq.io import table, video

FPS = 10
HEIGHT, WIDTH = 48, 64
SQUARE = 8  # pixels


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


def write_dataset(folder: str, lengths: list[int]) -> tuple[str, list[str]]:
    """The table ``data.parquet`` and ``videos/episode_XXXXXX.mp4``; their paths."""
    codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
    os.makedirs(os.path.join(folder, "videos"), exist_ok=True)
    columns: dict[str, list[np.ndarray]] = {"episode_index": [], "frame_index": []}
    columns.update({"timestamp": [], "observation.state": [], "action": []})
    videos = []
    for episode, n in enumerate(lengths):
        states = trajectory(episode, n + 1)  # one more: the action of the last frame
        path = os.path.join(folder, "videos", f"episode_{episode:06d}.mp4")
        with av.open(path, "w") as out:
            stream = out.add_stream(codec, rate=FPS)
            stream.height, stream.width, stream.pix_fmt = HEIGHT, WIDTH, "yuv420p"
            stream.codec_context.thread_count = 1  # one thread: the same file every time
            for state in states[:n]:
                out.mux(stream.encode(av.VideoFrame.from_ndarray(draw(state), "rgb24")))
            out.mux(stream.encode())
        videos.append(path)
        columns["episode_index"].append(np.full(n, episode))
        columns["frame_index"].append(np.arange(n))
        columns["timestamp"].append((np.arange(n) / FPS).astype(np.float32))
        columns["observation.state"].append(states[:n])
        columns["action"].append(np.diff(states, axis=0))
    data = {name: np.concatenate(parts) for name, parts in columns.items()}
    vectors = {
        name: pa.FixedSizeListArray.from_arrays(data[name].ravel(), 2)
        for name in ("observation.state", "action")
    }
    path = os.path.join(folder, "data.parquet")
    pq.write_table(pa.table({**data, **vectors}), path, row_group_size=64)
    return path, videos


def upload(folder: str, paths: list[str], url: str, options: dict[str, Any]) -> list[str]:
    """Copy files of ``folder`` under ``url`` (``s3://bucket/prefix``); their URLs."""
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True, **options)
    bucket = url[len("s3://") :].split("/")[0]
    if not fs.exists(bucket):
        fs.mkdir(bucket)
    urls = []
    for path in paths:
        name = os.path.relpath(path, folder).replace(os.sep, "/")
        urls.append(f"{url.rstrip('/')}/{name}")
        fs.put_file(path, urls[-1])
    return urls


class Episode:
    """One episode as a stream of dict steps ``{"frame", "state", "action"}``.

    Args:
        rows: the episode's stream of the table (dict steps of its columns).
        frames: the episode's video, one frame per row.
    """

    def __init__(self, rows: Any, frames: Any):
        self.rows, self.frames = rows, frames

    def __repr__(self) -> str:
        return f"Episode({self.rows!r}, {self.frames!r})"

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, key: int | slice) -> dict[str, np.ndarray]:
        columns = self.rows[key]
        return {
            "frame": self.frames[key],
            "state": columns["observation.state"],
            "action": columns["action"],
        }


def episodes(
    table_path: str, video_paths: list[str], storage_options: dict[str, Any] | None = None
) -> list[Episode]:
    """The episodes of a dataset: each table stream beside the video of its episode.

    Args:
        table_path: the table, a path or a URL.
        video_paths: the video of every episode, paths or URLs.
        storage_options: for URLs, the options of their fsspec filesystem.
    """
    rows = table(
        table_path,
        group_by="episode_index",
        columns=["observation.state", "action"],
        storage_options=storage_options,
    )
    return [
        Episode(r, video(video_paths[r.group], length=len(r), storage_options=storage_options))
        for r in rows
    ]


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
    table_path, video_paths = write_dataset(folder, lengths)
    options, where = None, folder
    if args.url:
        options = s3_options(args.endpoint, args.key, args.secret)
        table_path, *video_paths = upload(folder, [table_path, *video_paths], args.url, options)
        where = args.url
    streams = episodes(table_path, video_paths, options)
    print(f"{len(streams)} episodes of {[len(e) for e in streams]} frames in {where}")

    loader = streamseq.StreamLoader(
        streams, args.batch_size, args.tbins, num_workers=args.workers, lengths=lengths
    )
    print(f"{len(loader)} batches of {args.batch_size} rows x {args.tbins} steps")
    batches = []
    for i, batch in enumerate(loader):
        batches.append(batch)
        frame, state = batch.data["frame"], batch.data["state"]
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
