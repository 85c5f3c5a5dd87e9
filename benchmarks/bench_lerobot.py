"""An epoch of a LeRobot v3.0 dataset: streamseq's episodes read in order, against seeking.

The dataset is the one ``examples/robot_episodes.py`` writes (H.264, several episodes per
video file), at ``--size``. Two ways to read every frame of every episode once, in one
process, on the same files:

- ``streamseq``: ``io.lerobot`` episodes, each read in order in chunks of ``--tbins``
  steps (what a loader's worker does with its rows): the decoder goes on, each episode
  seeks once, to the keyframe before its window;
- ``seek per frame``: what a loader of independent samples does (LeRobot's
  ``decode_video_frames`` with PyAV): for every row, seek to the keyframe before its time
  in its video file (kept open, which is generous) and decode up to the frame nearest it.

Both give the same frames (checked, frame by frame). The table gives frames per second
and the frames each decoded per frame delivered.

Run: ``python benchmarks/bench_lerobot.py [--episodes 24] [--size 240x320] [--tbins 32]``
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import av
import numpy as np

from streamseq.io import lerobot
from streamseq.io._media import Reader

ROOT = Path(__file__).resolve().parents[1]


def _example() -> Any:
    spec = importlib.util.spec_from_file_location(
        "robot_episodes", ROOT / "examples" / "robot_episodes.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def read_streamseq(episodes: list[Any], camera: str, tbins: int) -> list[np.ndarray]:
    out = []
    for e in episodes:
        out += [e[a : a + tbins][camera] for a in range(0, len(e), tbins)]
    return out


def read_seeking(episodes: list[Any], camera: str, fps: float) -> tuple[list[np.ndarray], int]:
    """Every frame by a seek to its time and a decode up to it; and the frames decoded."""
    containers: dict[str, Any] = {}
    out, decoded = [], 0
    half = 0.5 / fps
    for e in episodes:
        v = e.videos[camera]
        offset = v.start or 0.0
        if v.path not in containers:
            containers[v.path] = av.open(v.path)
        container = containers[v.path]
        stream = container.streams.video[0]
        convert = av.video.reformatter.VideoReformatter()
        times = e[:]["timestamp"].astype(np.float64) + offset  # the rows' times in the video
        for t in times:
            container.seek(int((t - half) / stream.time_base), backward=True, stream=stream)
            for frame in container.decode(stream):
                decoded += 1
                if frame.time >= t - half:
                    out.append(convert.reformat(frame, format="rgb24", threads=1).to_ndarray())
                    break
    for container in containers.values():
        container.close()
    return out, decoded


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=24)
    parser.add_argument("--size", default="240x320", help="HEIGHTxWIDTH of the frames")
    parser.add_argument("--tbins", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "streamseq-lerobot"))
    args = parser.parse_args(argv)
    example = _example()
    example.HEIGHT, example.WIDTH = (int(x) for x in args.size.split("x"))
    example.SQUARE = max(8, example.HEIGHT // 6)
    lengths = [60 + 37 * (k % 5) for k in range(args.episodes)]
    folder = os.path.join(args.data, f"{args.episodes}-{args.size}")
    if not os.path.exists(os.path.join(folder, "meta", "info.json")):
        example.write_dataset(folder, lengths)
    camera, fps = example.CAMERA, example.FPS
    frames = sum(lengths)

    counts = {"streamseq": 0}
    real = Reader.next_frame

    def counting(self: Reader) -> Any:
        frame = real(self)
        counts["streamseq"] += frame is not None
        return frame

    Reader.next_frame = counting  # type: ignore[method-assign]
    times: dict[str, list[float]] = {"streamseq": [], "seek per frame": []}
    decoded = {}
    for _ in range(args.repeats):
        episodes = lerobot(folder, cameras=[camera], columns=["timestamp"])
        counts["streamseq"] = 0
        start = time.perf_counter()
        ours = np.concatenate(read_streamseq(episodes, camera, args.tbins))
        times["streamseq"].append(time.perf_counter() - start)
        decoded["streamseq"] = counts["streamseq"]
        start = time.perf_counter()
        theirs, decoded["seek per frame"] = read_seeking(episodes, camera, fps)
        times["seek per frame"].append(time.perf_counter() - start)
        assert len(ours) == len(theirs) == frames
        np.testing.assert_array_equal(ours, np.stack(theirs))  # the same frames
    print(
        f"{args.episodes} episodes, {frames} frames of {args.size} (H.264, "
        f"{example.EPISODES_PER_FILE} episodes per file), {args.repeats} repeats, "
        f"cpus {os.cpu_count()}, load {os.getloadavg()[0]:.2f}; the same frames: yes"
    )
    print(f"{'reader':<16} {'frames/s':>10} {'decoded/frame':>14}")
    for name, seconds in times.items():
        rate = frames / float(np.median(seconds))
        print(f"{name:<16} {rate:>10.0f} {decoded[name] / frames:>14.2f}")


if __name__ == "__main__":
    main()
