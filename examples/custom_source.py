"""Build your own source: a lazy, picklable stream over a sensor log, and a procedural one.

A stream is anything with ``len(s)`` and ``s[a:b]`` returning an array whose first axis has
``b - a`` steps. Two are built here:

- ``SensorLog``: a CSV file of accelerometer samples (``t,ax,ay,az`` per line). Its length
  comes from one cheap pass that records where every line starts; a slice seeks to the
  first line it needs and parses only its lines. The file handle is opened lazily in the
  process that reads, and dropped when the object is pickled for a worker process.
- ``SineWaves``: a procedural stream computed on demand, no file at all.

Both go to :class:`streamseq.StreamLoader` as they are or through an opener
(``functools.partial(SensorLog, path)``, called in the worker), and
:func:`streamseq.io.probe_lengths` measures the logs in parallel, caching by path.

Run: ``python examples/custom_source.py [--logs 6] [--workers 2]``
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
from typing import Any

import numpy as np

import streamseq
from streamseq.io import probe_lengths
from streamseq.testing import check_continuity


class SensorLog:
    """Samples ``[n, 3]`` (float32 ax, ay, az) of a CSV log with a header line."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)  # a ``path`` attribute lets probe_lengths cache it
        self._offsets: np.ndarray | None = None  # byte offset of every sample line, and EOF
        self._file: Any = None
        self._pid = -1

    def __repr__(self) -> str:
        return f"SensorLog({self.path!r})"

    def _index(self) -> np.ndarray:
        if self._offsets is None:
            with open(self.path, "rb") as f:
                f.readline()  # header
                offsets = [f.tell()]
                for line in f:
                    offsets.append(offsets[-1] + len(line))
            self._offsets = np.asarray(offsets, dtype=np.int64)
        return self._offsets

    def __len__(self) -> int:
        return len(self._index()) - 1

    def _handle(self) -> Any:
        if self._file is None or self._pid != os.getpid():  # never share a file across a fork
            self._file, self._pid = open(self.path, "rb"), os.getpid()
        return self._file

    def __getitem__(self, key: int | slice) -> np.ndarray:
        n = len(self)
        if isinstance(key, slice):
            start, stop, step = key.indices(n)
            if step != 1:
                raise ValueError("only contiguous slices")
            stop = max(start, stop)
        else:
            index = key + n if key < 0 else key
            if not 0 <= index < n:
                raise IndexError(f"sample {key} out of range for {n} samples")
            return self[index : index + 1][0]
        offsets = self._index()
        f = self._handle()
        f.seek(offsets[start])
        text = f.read(int(offsets[stop] - offsets[start]))
        rows = [line.split(b",")[1:4] for line in text.splitlines()]
        return np.array(rows, dtype=np.float32).reshape(stop - start, 3)

    def close(self) -> None:
        if self._file is not None and self._pid == os.getpid():
            self._file.close()
        self._file = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_file"], state["_pid"] = None, -1  # a worker opens its own handle
        return state


class SineWaves:
    """A procedural stream: ``[n, 3]`` sines of three frequencies, computed on demand."""

    def __init__(self, length: int, freq: float):
        self.length, self.freq = length, freq

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, key: int | slice) -> np.ndarray:
        if isinstance(key, slice):
            start, stop, _ = key.indices(self.length)
            t = np.arange(start, max(start, stop), dtype=np.float32)[:, None]
        else:
            t = np.array([[key % self.length]], dtype=np.float32)
        waves = np.sin(2 * np.pi * self.freq * t * np.array([1.0, 2.0, 3.0], np.float32))
        return waves if isinstance(key, slice) else waves[0]


def write_log(path: str, samples: int, seed: int) -> None:
    """A synthetic accelerometer log."""
    rng = np.random.default_rng(seed)
    acc = np.cumsum(rng.normal(size=(samples, 3)), axis=0).round(3)
    with open(path, "w") as f:
        f.write("t,ax,ay,az\n")
        for i, (x, y, z) in enumerate(acc):
            f.write(f"{i * 0.01:.2f},{x},{y},{z}\n")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", type=int, default=6, help="number of CSV logs")
    parser.add_argument("--waves", type=int, default=3, help="number of procedural streams")
    parser.add_argument("--workers", type=int, default=2, help="loader worker processes")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--tbins", type=int, default=25)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for k in range(args.logs):
            paths.append(os.path.join(folder, f"log{k}.csv"))
            write_log(paths[-1], samples=40 + 37 * k, seed=k)

        # openers: each log is opened in the worker that reads it
        openers: list[Any] = [functools.partial(SensorLog, p) for p in paths]
        openers += [SineWaves(60 + 20 * k, 0.01 * (k + 1)) for k in range(args.waves)]
        cache = os.path.join(folder, "lengths.json")
        lengths = probe_lengths(openers, num_workers=args.workers, cache=cache, progress=False)
        print(f"lengths: {lengths}")

        loader = streamseq.StreamLoader(
            openers, args.batch_size, args.tbins, num_workers=args.workers, lengths=lengths
        )
        batch = next(iter(loader))
        print(f"{len(loader)} batches of {tuple(batch.data.shape)} {batch.data.dtype}")

        # the whole run is continuous and equals the sources, read directly
        sources = [SensorLog(p) for p in paths] + openers[args.logs :]
        checked = check_continuity(loader, lengths, sources=sources)
        print(f"check_continuity: {checked} batches, every stream whole and in order")
    return {"lengths": lengths, "batches": checked, "shape": tuple(batch.data.shape)}


if __name__ == "__main__":
    main()
