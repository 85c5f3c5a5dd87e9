"""Throughput of streamseq against other streaming loaders and the hardware limit.

Two workloads, each timed in one run for every loader, side by side:

- ``tokens``: 512 in-memory int64 token streams of 1k to 10k tokens, batches of 64 x 256.
  Limit: one process copying precomputed row slices into a batch array. For reference,
  one ``memcpy`` per batch of precomputed whole batches (the data alone, at memory
  speed), and streamseq's numpy path (what runs when the package was built without a C
  compiler).
- ``video``: 24 H.264 clips of 224x224 with 60 to 240 frames (made here, once, in
  ``--data``), batches of 8 x 8 RGB frames. Limit: the fastest decode PyAV allows, with
  no loader: as many processes as there are usable cores (``os.sched_getaffinity``),
  taking the files from a shared queue (longest first), each decoding with one codec
  thread and converting to RGB arrays with one reused ``VideoReformatter`` of one thread
  (:func:`count_frames`). With a process per core, FFmpeg's own threads (slice or frame
  threads, one per core, PyAV's default) only oversubscribe the cores: on 2 cores one
  thread per process decoded about 1.3 to 2 times as fast as PyAV's defaults, and faster
  than ``thread_type`` ``"AUTO"``, ``"FRAME"`` or ``"SLICE"`` with a thread per core
  (``benchmarks/README.rst``). For reference, the same processes with PyAV's defaults
  (slice threads, one per core, and a new auto-threaded scaler per frame, as
  ``frame.to_ndarray(format="rgb24")`` does).

Loaders: streamseq's :class:`~streamseq.StreamLoader`; pytorch-stream-dataloader 1.0
(``StreamDataset`` + ``StreamDataLoader``, used as its text and video examples do); and
the "MultiStreamDataLoader" pattern (one torch ``DataLoader`` with one worker per group
of rows, zipped). Every loader gets the same streams, batch shape and number of workers
(``--compare-workers``, 2) and delivers every step of every stream once per epoch.

``--baseline [REV]`` (default ``327156d``, the last release before transforms, dict
streams and the new worker loop) also times the streamseq of revision ``REV`` in the same
run, interleaved with the current tree: in-process tokens, 2-worker tokens and 2-worker
video. The revision is checked out as a git worktree in ``--data`` (kept for the next
run), its C extension is built in place, and its children run with ``PYTHONPATH`` set to
that worktree; every child checks that ``import streamseq`` found the tree it was meant
to time. The table then shows the baseline rows next to the current ones, and the ratios
current / baseline per workload (of the medians, and per repeat).

The video workload has one more row: 2 workers with a ``transform`` that crops every
frame to 160x160 at a random offset per stream (:func:`crop`), to compare with the plain
video rows (the crop's cost; it also makes the batch half as large). The limit stays the
plain decode. The tokens workload has two more: in-process and 2 workers with a
``transform`` that hashes every token twice (:func:`mix`, about ten times the cost of
reading the tokens): the scaling of a transform worth workers.

``--workers [LIST]`` runs the scaling sweep instead of the loader comparison: streamseq
with each number of workers in ``LIST`` (comma-separated; without a list 0, 1, 2, 4, ...
up to the usable cores) for each workload, with the limit rows, and prints one table:
a row per workload, a column per number of workers, the rate and its ratios to 0
workers and to the limit.

``--warm`` reads one pass of every configuration untimed before timing it: the steady
state (persistent workers started, files open, shared memory mapped), for the cost of the
hand-over alone. ``--auto`` adds a row of streamseq with ``num_workers="auto"`` to each
workload; the row names the number of workers it chose (one per repeat).

Each measurement runs in a fresh process (so peak memory is its own), repeated
``--repeats`` times, interleaved; the table shows medians. Throughput counts the steps of
the streams (tokens or frames) delivered per second after the first batch; the time to
the first batch is shown apart. The CPU time per step is that of the process and its
workers (user and system) over whole epochs, planning and worker starts included; the
main CPU per batch is that of the main process alone (``time.process_time()``: its threads,
not its workers) over whole epochs, divided by the batches: what the hand-over costs the
process that trains. Peak
memory is the largest sum of the RSS of the main process and its worker processes, sampled
every 20 ms (pages shared between processes count in each). Every table starts with the
cores (``os.cpu_count()`` and those this process may use) and the load average.

Run ``python benchmarks/bench_throughput.py`` (both workloads, about 3 minutes) or
``--quick`` (smaller data, one repeat, under a minute); ``--workload tokens`` or ``video``
selects one; ``--baseline`` adds the baseline rows (about 8 minutes in all on 2 cores);
``--loaders streamseq,psd`` runs only those loaders (and the limit); ``--workers 0,1,2``
the sweep (about 3 minutes on 2 cores). Needs the ``bench`` extra
(``pip install -c constraints.txt -e ".[bench]"``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import chain, zip_longest
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

B_TOKENS, T_TOKENS = 64, 256
B_VIDEO, T_VIDEO = 8, 8
SIZE = 224
CROP = 160
BASELINE = "327156d"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))
from worktrees import baseline_tree, git  # noqa: E402

# -- data ----------------------------------------------------------------------------------


def token_streams(count: int, seed: int = 0) -> list[np.ndarray]:
    """``count`` int64 token streams of 1k to 10k tokens."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1000, 10_001, count)
    return [rng.integers(0, 50_000, n, dtype=np.int64) for n in lengths]


#: the end-of-document token of the corpus workload (GPT-2's)
EOD = 50256


def corpus_path(folder: str, documents: int, seed: int = 0) -> str:
    """A token corpus of ``documents`` (made once in ``folder``, kept): its path.

    nanoGPT's layout: flat ``uint16`` tokens, each document of 10 to 400 tokens followed
    by ``EOD``.
    """
    path = os.path.join(folder, f"corpus-{documents}-{seed}.bin")
    if not os.path.exists(path):
        rng = np.random.default_rng(seed)
        lengths = rng.integers(10, 401, documents)
        tokens = rng.integers(0, EOD, int(lengths.sum()) + documents, dtype=np.uint16)
        tokens[np.cumsum(lengths + 1) - 1] = EOD
        os.makedirs(folder, exist_ok=True)
        tokens.tofile(path + ".part")
        os.replace(path + ".part", path)
    return path


def make_clips(folder: str, count: int, seed: int = 0) -> list[str]:
    """``count`` H.264 clips of 224x224 with 60 to 240 frames (kept for the next run)."""
    import av

    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    lengths = rng.integers(60, 241, count)
    paths = []
    yy, xx = np.mgrid[0:SIZE, 0:SIZE]
    for k, n in enumerate(lengths.tolist()):
        path = os.path.join(folder, f"clip{k:03d}_{n}.mp4")
        paths.append(path)
        if os.path.exists(path):
            continue
        tmp = path + ".part.mp4"
        with av.open(tmp, "w") as out:
            s = out.add_stream("libx264", rate=30)
            s.width, s.height, s.pix_fmt = SIZE, SIZE, "yuv420p"
            s.options = {"preset": "veryfast", "crf": "23"}
            for i in range(n):  # moving gradients, a moving square and some grain
                img = np.stack([(xx + 3 * i) % 256, (yy + 2 * i + k) % 256, (xx + yy) % 256], -1)
                y0, x0 = (5 * i) % (SIZE - 40), (7 * i + 13 * k) % (SIZE - 40)
                img[y0 : y0 + 40, x0 : x0 + 40] = 255 - img[y0 : y0 + 40, x0 : x0 + 40]
                img = img + rng.integers(-16, 17, img.shape)
                frame = av.VideoFrame.from_ndarray(np.clip(img, 0, 255).astype(np.uint8))
                out.mux(s.encode(frame))
            out.mux(s.encode())
        os.replace(tmp, path)
    return paths


def decode(path: str) -> Any:
    """The frames of a file as ``[H, W, 3]`` uint8 arrays: PyAV with its defaults."""
    import av

    with av.open(path) as container:
        for frame in container.decode(video=0):
            yield frame.to_ndarray(format="rgb24")


def chunks(steps: Any, tbins: int, empty: np.ndarray) -> Any:
    """Group an iterable of steps (arrays) into chunks of ``tbins``, the last zero-padded."""
    buf: list[np.ndarray] = []
    for x in steps:
        buf.append(x)
        if len(buf) == tbins:
            yield np.stack(buf)
            buf = []
    if buf:
        out = np.zeros((tbins, *empty.shape[1:]), empty.dtype)
        out[: len(buf)] = np.stack(buf)
        yield out


# -- loaders -------------------------------------------------------------------------------
# Each returns (iterable of batches, steps delivered per epoch, steps in the first batch).


class TokenChunks:
    """pytorch-stream-dataloader streamer: the chunks of one token stream, as its text example."""

    def __init__(self, tbins: int):
        self.tbins = tbins

    def __call__(self, tokens: np.ndarray) -> Any:
        for i in range(0, len(tokens), self.tbins):
            data = tokens[i : i + self.tbins]
            frame = np.zeros((1, self.tbins), dtype=np.int64)
            frame[0, : len(data)] = data
            yield torch.from_numpy(frame)


class VideoChunks:
    """pytorch-stream-dataloader streamer: the chunks of one clip, as its video example."""

    def __init__(self, tbins: int):
        self.tbins = tbins

    def __call__(self, path: str) -> Any:
        empty = np.zeros((0, SIZE, SIZE, 3), np.uint8)
        for c in chunks(decode(path), self.tbins, empty):
            yield torch.from_numpy(c)[None]


def cat_rows(parts: Any) -> Any:
    return torch.cat(list(parts))


def psd_loader(sources: list[Any], workers: int, video: bool) -> Any:
    from pytorch_stream_dataloader.stream_dataloader import StreamDataLoader
    from pytorch_stream_dataloader.stream_dataset import StreamDataset

    if video:
        streamer, b = VideoChunks(T_VIDEO), B_VIDEO
        fill = torch.zeros((1, T_VIDEO, SIZE, SIZE, 3), dtype=torch.uint8)
    else:
        streamer, b = TokenChunks(T_TOKENS), B_TOKENS
        fill = torch.zeros((1, T_TOKENS), dtype=torch.int64)
    dataset = StreamDataset(list(sources), streamer, b, "zeros", fill)
    return StreamDataLoader(dataset, workers, cat_rows)


class GroupOfRows(IterableDataset):
    """The "MultiStreamDataLoader" pattern: one IterableDataset per group of rows.

    Each row reads its streams one after the other in chunks; the group yields the tuple
    of its rows' chunks (zero chunks for rows that ended) until every row has ended.
    """

    def __init__(self, rows: list[list[Any]], tbins: int, video: bool):
        self.rows, self.tbins, self.video = rows, tbins, video

    def row(self, sources: list[Any]) -> Any:
        for s in sources:
            if self.video:
                yield from chunks(decode(s), self.tbins, np.zeros((0, SIZE, SIZE, 3), np.uint8))
            else:
                yield from chunks(s, self.tbins, np.zeros(0, np.int64))

    def __iter__(self) -> Any:
        shape = (self.tbins, SIZE, SIZE, 3) if self.video else (self.tbins,)
        zero = np.zeros(shape, np.uint8 if self.video else np.int64)
        return zip_longest(*[self.row(r) for r in self.rows], fillvalue=zero)


def multistream_loader(sources: list[Any], workers: int, video: bool) -> Any:
    b, t = (B_VIDEO, T_VIDEO) if video else (B_TOKENS, T_TOKENS)
    rows = [list(sources[r::b]) for r in range(b)]
    groups = max(1, workers)
    size = b // groups
    datasets = [GroupOfRows(rows[g * size : (g + 1) * size], t, video) for g in range(groups)]

    def batches() -> Any:
        loaders = [DataLoader(d, batch_size=None, num_workers=min(1, workers)) for d in datasets]
        for parts in zip(*loaders, strict=False):
            yield torch.stack(list(chain(*parts)))

    return _Iterable(batches)


class _Iterable:
    def __init__(self, make: Any):
        self.make = make

    def __iter__(self) -> Any:
        return self.make()


def crop(frames: np.ndarray, info: Any) -> np.ndarray:
    """The ``transform`` of the crop row: frames cropped to 160x160, one offset per stream."""
    top, left = info.rng("crop").integers(0, np.subtract(frames.shape[1:3], CROP - 1))
    return frames[:, top : top + CROP, left : left + CROP]


def mix(tokens: np.ndarray, info: Any) -> np.ndarray:
    """The ``transform`` of the mix rows: two rounds of a multiplicative hash of each token.

    About ten times what reading the tokens costs in-process (numpy calls on each read of
    ``T_TOKENS`` tokens): a transform worth workers.
    """
    for _ in range(2):
        tokens = (tokens * 1103515245 + 12345) % 50021
    return tokens


def streamseq_loader(
    sources: list[Any], workers: int, video: bool, transform: Any = None, persistent: bool = False
) -> Any:
    import streamseq

    extra: dict[str, Any] = {} if transform is None else {"transform": transform}
    if persistent:
        extra["persistent_workers"] = True
    if video:
        from streamseq.io import video as open_video

        streams = [open_video(p) for p in sources]
        return streamseq.StreamLoader(streams, B_VIDEO, T_VIDEO, num_workers=workers, **extra)
    return streamseq.StreamLoader(sources, B_TOKENS, T_TOKENS, num_workers=workers, **extra)


def check_import(root: str) -> str:
    """Where ``streamseq`` comes from in this process; raises unless it is under ``root``.

    Also raises when its compiled batch assembly is missing: every tree is timed built.
    """
    import streamseq

    where = os.path.realpath(streamseq.__file__)
    if not where.startswith(os.path.realpath(root) + os.sep):
        raise RuntimeError(f"streamseq imported from {where}, expected under {root}")
    try:
        import streamseq.gather._gather  # noqa: F401
    except ModuleNotFoundError as e:  # a revision from before streamseq.gather
        if e.name != "streamseq.gather":
            raise
        import streamseq._gather  # noqa: F401

    return where


def describe_current() -> str:
    """The commit of the current tree and whether the package differs from it."""
    head = git("rev-parse", "--short", "HEAD")
    changed = git("status", "--porcelain", "--", "streamseq", "setup.py")
    return f"{head}" + (" with uncommitted changes in streamseq/" if changed else "")


# -- limits --------------------------------------------------------------------------------


def copy_limit(streams: list[np.ndarray]) -> Any:
    """One process copying precomputed row slices into a fresh batch array."""
    b, t = B_TOKENS, T_TOKENS
    rows = [np.concatenate(streams[r::b]) for r in range(b)]
    n = max(-(-len(r) // t) for r in rows)
    slices = [[r[i * t : (i + 1) * t] for r in rows] for i in range(n)]

    def batches() -> Any:
        for row_slices in slices:
            out = np.empty((b, t), np.int64)
            for r, s in enumerate(row_slices):
                k = len(s)
                out[r, :k] = s
                if k < t:
                    out[r, k:] = 0
            yield out

    return _Iterable(batches)


def memcpy_bound(streams: list[np.ndarray]) -> Any:
    """One copy of a whole precomputed batch per batch: the data alone, at memory speed."""
    b, t = B_TOKENS, T_TOKENS
    rows = [np.concatenate(streams[r::b]) for r in range(b)]
    n = max(-(-len(r) // t) for r in rows)
    flat = np.zeros((b, n * t), np.int64)  # (padding stays zero)
    for r, row in enumerate(rows):
        flat[r, : len(row)] = row
    whole = np.ascontiguousarray(flat.reshape(b, n, t).transpose(1, 0, 2))

    def batches() -> Any:
        for batch in whole:
            out = np.empty((b, t), np.int64)
            np.copyto(out, batch)
            yield out

    return _Iterable(batches)


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def machine() -> str:
    """The cores, for the head of every table."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    return f"cores: os.cpu_count() {os.cpu_count()}, sched_getaffinity {usable}"


def load() -> str:
    """The load averages over 1, 5 and 15 minutes."""
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def count_frames(path: str, threads: int | None = 1) -> int:
    """Decode a file into ``[H, W, 3]`` uint8 arrays; the number of frames.

    ``threads=1``: one codec thread and one reused reformatter of one thread, the fastest
    decode with a process per core. ``None``: PyAV's defaults (slice threads, one per
    core, and a new auto-threaded scaler per frame), as :func:`decode`.
    """
    if threads is None:
        return sum(1 for _ in decode(path))
    import av
    from av.video.reformatter import VideoReformatter

    convert, n = VideoReformatter(), 0
    with av.open(path) as container:
        stream = container.streams.video[0]
        stream.thread_count = threads  # one thread: FFmpeg starts none (thread_type moot)
        for frame in container.decode(stream):
            convert.reformat(frame, format="rgb24", threads=threads).to_ndarray()
            n += 1
    return n


def count_default(path: str) -> int:
    return count_frames(path, None)


class DecodeLimit:
    """``processes`` forked processes decoding the files, longest first, with no loader.

    The processes start once, before the timings; an iteration yields the frame count of
    every file as its process finishes it.
    """

    def __init__(self, paths: list[str], processes: int, default_threads: bool = False):
        self.paths = sorted(paths, key=frames_in, reverse=True)  # longest first: short tail
        self.count = count_default if default_threads else count_frames
        self.pool = multiprocessing.get_context("fork").Pool(processes)

    def __iter__(self) -> Any:
        return self.pool.imap_unordered(self.count, self.paths)

    def close(self) -> None:
        self.pool.close()
        self.pool.join()


def frames_in(path: str) -> int:
    """The frame count of a clip made by :func:`make_clips` (in its name)."""
    return int(os.path.basename(path).split("_")[1].split(".")[0])


# -- measurement ---------------------------------------------------------------------------


def tree_rss(process: Any) -> int:
    """RSS of a process plus its descendants (bytes)."""
    import psutil

    total = 0
    try:
        family = [process, *process.children(recursive=True)]
    except psutil.Error:
        return 0
    for p in family:
        try:
            total += p.memory_info().rss
        except psutil.Error:  # ended meanwhile
            pass
    return total


def measure(job: dict) -> dict:
    """Run one configuration in this process: throughput, first batch, peak memory."""
    video = job["workload"] == "video"
    if video:
        paths = make_clips(job["data"], job["count"])
        sources: list[Any] = paths
        total = sum(frames_in(p) for p in paths)
        first_steps = B_VIDEO * T_VIDEO
    elif job["workload"] == "corpus":
        path = corpus_path(job["data"], job["count"])
        if job["loader"] == "limit":
            tokens = np.fromfile(path, np.uint16)
            sources = np.split(tokens, np.flatnonzero(tokens == EOD)[:-1] + 1)
        else:  # (the tree timed is imported only once check_import found it)
            sources = []
        total = os.path.getsize(path) // 2
        first_steps = B_TOKENS * T_TOKENS
    else:
        sources = token_streams(job["count"])
        total = sum(len(s) for s in sources)
        first_steps = B_TOKENS * T_TOKENS
    kind, workers = job["loader"], job["workers"]
    imported = check_import(job["root"]) if kind.startswith("streamseq") else None
    if job["workload"] == "corpus" and kind != "limit":
        from streamseq.io import token_corpus

        sources = token_corpus(path, eod=EOD)
    if kind == "limit":
        loader = DecodeLimit(sources, workers) if video else copy_limit(sources)
    elif kind == "pyav-defaults":
        loader = DecodeLimit(sources, workers, default_threads=True)
    elif kind == "memcpy":
        loader = memcpy_bound(sources)
    elif kind == "streamseq":
        transform = {"crop": crop, "mix": mix}.get(job.get("transform"))
        loader = streamseq_loader(sources, workers, video, transform, job.get("persistent"))
    elif kind == "streamseq-numpy":  # as installed without a C compiler
        try:
            import streamseq.gather.writer

            streamseq.gather.writer.fill = None
        except ModuleNotFoundError:  # a revision from before streamseq.gather
            import streamseq.read.writer

            streamseq.read.writer._fill = None
        loader = streamseq_loader(sources, workers, video)
    elif kind == "streamseq-lookahead":
        loader = lookahead_loader(sources, workers, job["lookahead"])
    elif kind == "psd":
        loader = psd_loader(sources, workers, video)
    else:
        loader = multistream_loader(sources, workers, video)
    if job.get("warm"):  # one pass untimed: workers started, files opened, pages mapped
        for _ in loader:
            pass
    steps = seconds = 0.0
    firsts = []
    epochs = batches = 0
    cpu_start = cpu_seconds()
    main_start = time.process_time()  # the main process alone (its threads, not workers)
    while epochs < job["min_epochs"] or seconds < job["min_seconds"]:
        start = time.perf_counter()
        it = iter(loader)
        next(it)
        first = time.perf_counter()
        batches += 1
        for _ in it:
            batches += 1
        end = time.perf_counter()
        firsts.append(first - start)
        if kind in ("limit", "pyav-defaults") and video:  # whole files: count them all
            steps += total
            seconds += end - start
        else:
            steps += total - first_steps
            seconds += end - first
        epochs += 1
        del it
    main_cpu = time.process_time() - main_start
    chosen = getattr(loader, "num_workers", None) if job["workers"] == "auto" else None
    forking = fork_seconds() if kind == "streamseq" and job["workers"] != 0 else None
    if hasattr(loader, "close"):
        loader.close()
    del loader
    deadline = time.monotonic() + 5  # workers count once they are joined
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.01)
    return {
        "steps_per_s": steps / seconds,
        "cpu_per_step": (cpu_seconds() - cpu_start) / (epochs * total),
        "main_cpu_per_batch": main_cpu / max(1, batches),
        "chosen": chosen,
        "first_s": min(firsts),
        "pass_s": (seconds + sum(firsts)) / epochs,
        "fork_s": forking,
        "epochs": epochs,
        "streamseq": imported,
    }


def fork_seconds(times: int = 5) -> tuple[float, float]:
    """Seconds to fork this process, and to fork it and see the child end (medians).

    The floor of a pass whose workers start with it: each worker is such a fork of the
    main process (its page tables copied, its pages shared copy-on-write), and its exit
    unmaps all of that again.
    """
    forks, lives = [], []
    for _ in range(times):
        start = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        forks.append(time.perf_counter() - start)
        os.waitpid(pid, 0)
        lives.append(time.perf_counter() - start)
    return statistics.median(forks), statistics.median(lives)


def cpu_seconds() -> float:
    """CPU time of this process and of its children that were joined (user + system)."""
    import resource

    own, children = (
        resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_child(job: dict) -> dict:
    """Run ``job`` in a fresh process, sampling its memory from here every 20 ms.

    Sampling from another process keeps the measured process free of a sampling thread
    (which would hold its GIL now and then).
    """
    import psutil

    cmd = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(job)]
    env = dict(os.environ)  # the tree to time comes first on the path
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [job["root"], env.get("PYTHONPATH")]))
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env)
        process, peak = psutil.Process(child.pid), 0
        while child.poll() is None:
            peak = max(peak, tree_rss(process))
            time.sleep(0.02)
        out.seek(0)
        err.seek(0)
        if child.returncode != 0:
            raise RuntimeError(f"{job} failed:\n{err.read()[-4000:]}")
        result = json.loads(out.read().strip().splitlines()[-1])
    result["peak_rss"] = peak
    return result


# -- look-ahead ----------------------------------------------------------------------------


def lookahead_loader(sources: list[Any], workers: int, lookahead: int) -> Any:
    """streamseq on the tokens with ``lookahead`` steps after every chunk (as ``tokens``)."""
    import streamseq

    return streamseq.StreamLoader(
        sources, B_TOKENS, T_TOKENS, num_workers=workers, lookahead=lookahead
    )


def lookahead_configs(
    lookahead: int | None, workers: int, base: dict | None = None
) -> list[tuple[str, int, dict]]:
    """The rows ``--lookahead K`` adds to the tokens workload: K, in-process and ``workers``.

    The plain streamseq rows of the same run are the rows of ``lookahead=0``; with a
    baseline (``base``), its rows of K too, beside its rows of ``lookahead=0``.
    """
    if not lookahead:
        return []
    kinds = [{}] + ([base] if base else [])
    rows = [{"lookahead": lookahead, **b} for b in kinds]
    return [("streamseq-lookahead", k, extra) for extra in rows for k in (0, workers)]


def lookahead_ratios(rows: list[tuple[dict, list[dict]]]) -> str:
    """``lookahead=K / lookahead=0`` of the same number of workers: medians and per repeat.

    Tokens per second count the streams' tokens (the look-ahead steps, delivered a second
    time, are not counted): the ratio is what the look-ahead costs.
    """
    zero = {
        (j["workers"], j.get("baseline")): rs
        for j, rs in rows
        if j["loader"] == "streamseq" and plain(dict(j, baseline=None))
    }
    out = []
    for job, results in rows:
        other = zero.get((job["workers"], job.get("baseline")))
        if job["loader"] != "streamseq-lookahead" or other is None:
            continue
        a = [r["steps_per_s"] for r in results]
        b = [r["steps_per_s"] for r in other]
        each = " ".join(f"{x / y:.2f}" for x, y in zip(a, b, strict=True))
        cpu = statistics.median(r["cpu_per_step"] for r in results) / statistics.median(
            r["cpu_per_step"] for r in other
        )
        rate = statistics.median(a) / statistics.median(b)
        out.append(f"{label(job):44s} {rate:8.2f} {cpu:9.2f}   {each}")
    if not out:
        return ""
    head = f"{'lookahead=K / lookahead=0':44s} {'steps/s':>8s} {'CPU/step':>9s}   per repeat"
    return "\n".join(["", head, *out])


# -- report --------------------------------------------------------------------------------

LABELS = {
    "limit": {
        "tokens": "copy limit (1 process)",
        "corpus": "copy limit (1 process)",
        "video": "decode limit ({w} x 1 thread)",
    },
    "pyav-defaults": {"video": "decode, PyAV default threads ({w} proc.)"},
    "memcpy": {"tokens": "memcpy of whole batches (data only)"},
    "streamseq": "streamseq",
    "streamseq-numpy": "streamseq, numpy path",
    "streamseq-lookahead": "streamseq, lookahead={k}",
    "psd": "pytorch-stream-dataloader 1.0",
    "multistream": "DataLoader per group, zipped",
}


def label(job: dict) -> str:
    name = LABELS[job["loader"]]
    if isinstance(name, dict):
        return name[job["workload"]].format(w=job["workers"])
    name = name.format(k=job.get("lookahead"))
    if job.get("baseline"):
        name += f" (baseline {job['baseline']})"
    text = f"{name}, {job['workers'] or 'in-process'}" + (" workers" if job["workers"] else "")
    text += " (persistent)" if job.get("persistent") else ""
    return text + (f" + {job['transform']} transform" if job.get("transform") else "")


def plain(job: dict) -> bool:
    """A configuration of the current tree without a transform, workers started per pass."""
    return not (job.get("baseline") or job.get("transform") or job.get("persistent"))


def per_step(seconds: float) -> str:
    """A time per step with its unit."""
    for scale, unit in ((1e9, "ns"), (1e6, "us"), (1e3, "ms")):
        if seconds * scale < 1000:
            return f"{seconds * scale:.3g} {unit}"
    return f"{seconds:.3g} s"


def table(workload: str, rows: list[tuple[dict, list[dict]]], unit: str, head: str) -> str:
    med = {id(j): statistics.median(r["steps_per_s"] for r in rs) for j, rs in rows}
    limit = next(med[id(j)] for j, _ in rows if j["loader"] == "limit")
    psd = {j["workers"]: med[id(j)] for j, _ in rows if j["loader"] == "psd"}
    lines = [
        f"{'loader':44s} {unit + '/s':>12s} {'x limit':>8s} {'x psd':>7s} "
        f"{'CPU/step':>9s} {'main CPU/b':>10s} {'1st batch':>10s} {'peak RSS':>9s}",
        "-" * 116,
    ]
    for job, results in rows:
        rate = med[id(job)]
        vs_psd = psd.get(job["workers"])
        cpu = statistics.median(r["cpu_per_step"] for r in results)
        first = statistics.median(r["first_s"] for r in results)
        peak = statistics.median(r["peak_rss"] for r in results)
        main = statistics.median(r.get("main_cpu_per_batch", 0.0) for r in results)
        ratio = f"{rate / vs_psd:7.1f}" if vs_psd else f"{'-':>7s}"
        name = label(job)
        chosen = [r["chosen"] for r in results if r.get("chosen") is not None]
        if chosen:
            name += f" (chose {', '.join(map(str, chosen))})"
        lines.append(
            f"{name:44s} {rate / 1e6 if unit.startswith('M') else rate:12.2f} "
            f"{rate / limit:8.2f} {ratio} {per_step(cpu):>9s} {per_step(main):>10s} "
            f"{1e3 * first:7.0f} ms {peak / 2**20:6.0f} MB"
        )
    return f"\n{workload} ({head})\n" + "\n".join(lines) + ratios(rows)


def main_cpu_table(rows: list[tuple[dict, list[dict]]]) -> str:
    """The main process's CPU a batch (us) of each configuration, every repeat and the median."""
    lines = ["", f"{'main CPU a batch (us)':44s} {'median':>7s}   per repeat"]
    for job, results in rows:
        if job["loader"] == "limit":
            continue
        each = [1e6 * r["main_cpu_per_batch"] for r in results]
        text = " ".join(f"{x:.0f}" for x in each)
        lines.append(f"{label(job):44s} {statistics.median(each):7.0f}   {text}")
    return "\n".join(lines)


def ratios(rows: list[tuple[dict, list[dict]]]) -> str:
    """Current / baseline, crop transform / none, persistent workers / started every pass.

    Of the medians and per repeat, of steps/s (higher: faster) and of CPU per step
    (lower: cheaper). The configurations of a repeat ran one after the other
    (interleaved), so the ratio within a repeat compares runs that shared the machine's
    state of the moment.
    """

    def line(name: str, num: list[dict], den: list[dict]) -> str:
        def of(key: str) -> tuple[float, list[float]]:
            a, b = [r[key] for r in num], [r[key] for r in den]
            each = [x / y for x, y in zip(a, b, strict=True)]
            return statistics.median(a) / statistics.median(b), each

        rate, each = of("steps_per_s")
        cpu, _ = of("cpu_per_step")
        main, _ = of("main_cpu_per_batch")
        return f"{name:44s} {rate:8.2f} {cpu:9.2f} {main:10.2f}   " + " ".join(
            f"{x:.2f}" for x in each
        )

    current = {j["workers"]: rs for j, rs in rows if j["loader"] == "streamseq" and plain(j)}
    groups: dict[str, list[str]] = {}
    for job, results in rows:
        other = current.get(job["workers"])
        if job["loader"] != "streamseq" or other is None:
            continue
        if job.get("baseline"):
            name = label(dict(job, baseline=None))
            head = f"current / baseline {job['baseline']}"
            groups.setdefault(head, []).append(line(name, other, results))
        elif job.get("transform"):
            head = f"{job['transform']} transform / none"
            groups.setdefault(head, []).append(line(label(job), results, other))
        elif job.get("persistent"):
            head = "persistent workers / started every pass"
            groups.setdefault(head, []).append(line(label(job), results, other))
    if not groups:
        return ""
    out = [
        "",
        f"{'ratios':44s} {'steps/s':>8s} {'CPU/step':>9s} {'main CPU/b':>10s}   "
        "steps/s per repeat",
    ]
    for head, texts in groups.items():
        out += [head, *texts]
    return "\n".join(out)


def targets(results: dict) -> list[str]:
    out = []

    def rate(workload: str, loader: str, workers: int) -> float | None:
        for job, rs in results.get(workload, []):
            if job["loader"] == loader and job["workers"] == workers and plain(job):
                return statistics.median(r["steps_per_s"] for r in rs)
        return None

    def mixed(workload: str, workers: int, persistent: bool = False) -> float | None:
        for job, rs in results.get(workload, []):
            if job["loader"] == "streamseq" and job["workers"] == workers:
                if bool(job.get("persistent")) == persistent and not job.get("baseline"):
                    if job.get("transform") == "mix":
                        return statistics.median(r["steps_per_s"] for r in rs)
        return None

    def persistent(workload: str, workers: int) -> float | None:
        for job, rs in results.get(workload, []):
            if job["loader"] == "streamseq" and job["workers"] == workers:
                if job.get("persistent") and not (job.get("transform") or job.get("baseline")):
                    return statistics.median(r["steps_per_s"] for r in rs)
        return None

    def started_every_pass(workload: str, workers: int) -> str | None:
        """What a pass costs and what forking its workers costs, of the plain rows."""
        runs = {}
        for job, rs in results.get(workload, []):
            if job["loader"] == "streamseq" and job["workers"] in (0, workers) and plain(job):
                runs[job["workers"]] = rs
        if len(runs) < 2 or not all(r.get("fork_s") for r in runs[workers]):
            return None
        here = statistics.median(r["pass_s"] for r in runs[0])
        there = statistics.median(r["pass_s"] for r in runs[workers])
        fork = statistics.median(r["fork_s"][0] for r in runs[workers])
        life = statistics.median(r["fork_s"][1] for r in runs[workers])
        return (
            f"  (a pass: {1e3 * here:.1f} ms in-process, {1e3 * there:.1f} ms with {workers} "
            f"workers started for it; a fork of the loader's process: {1e3 * fork:.1f} ms in "
            f"it, {1e3 * life:.1f} ms until the child has exited, per worker)"
        )

    def check(name: str, num: float | None, den: float | None, goal: float) -> None:
        if num is not None and den:
            value = num / den
            ok = "met" if value >= goal else "MISSED"
            out.append(f"{name:58s} {value:8.2f} (target >= {goal:g}) {ok}")

    w = results.get("workers", 2)
    if "tokens" in results:
        s0, s2 = rate("tokens", "streamseq", 0), rate("tokens", "streamseq", w)
        p0, p2 = rate("tokens", "psd", 0), rate("tokens", "psd", w)
        lim = rate("tokens", "limit", 0)
        check("tokens: streamseq in-process / psd in-process", s0, p0, 3)
        check("tokens: streamseq in-process / copy limit", s0, lim, 0.5)
        check(f"tokens: streamseq {w} workers / streamseq in-process", s2, s0, 0.5)
        check(f"tokens: streamseq {w} workers / psd {w} workers", s2, p2, 20)
        m0, m2 = mixed("tokens", 0), mixed("tokens", w)
        check(f"tokens + mix transform: streamseq {w} workers / in-process", m2, m0, 1.6)
        floor = started_every_pass("tokens", w)
        if floor:
            out.append(floor)
        check(f"tokens: {w} persistent workers / in-process", persistent("tokens", w), s0, 0.5)
        mp = mixed("tokens", w, persistent=True)
        check(f"tokens + mix transform: {w} persistent workers / in-process", mp, m0, 1.6)
    if "video" in results:
        s2, p2 = rate("video", "streamseq", w), rate("video", "psd", w)
        n = cores()
        lim = rate("video", "limit", n)
        check(f"video: streamseq {w} workers / {n}-process decode limit", s2, lim, 0.85)
        check(f"video: streamseq {w} workers / psd {w} workers", s2, p2, 1.6)
    return out


def sweep_counts(text: str) -> list[int]:
    """``"0,1,2"`` as a list; ``""``: 0, 1, 2, 4, ... up to the usable cores (and them)."""
    if text:
        counts = [int(x) for x in text.split(",")]
        if min(counts) < 0:
            raise ValueError("a number of workers is >= 0")
        return counts
    counts, n = [0], 1
    while n < cores():
        counts.append(n)
        n *= 2
    return [*counts, cores()]


def scaling_table(results: dict, counts: list[int], head: str) -> str:
    """A row per workload, a column per number of workers: rate, x 0 workers, x limit, CPU.

    With persistent workers timed too, each workload has a second row of them.
    """

    def med(rs: list[dict], key: str = "steps_per_s") -> float:
        return statistics.median(r[key] for r in rs)

    width = 10

    def line(name: str, cells: list[str], first: str = "") -> str:
        return f"{first:19s} {name:12s}" + "".join(f"{c:>{width}s}" for c in cells)

    cols = ["limit"] + [f"{n} worker{'s' * (n != 1)}" for n in counts]
    lines = [
        f"scaling: streamseq by number of workers, medians ({head})",
        line("", cols, "workload"),
        "-" * (32 + width * len(cols)),
    ]
    notes = []
    for workload in ("tokens", "video"):
        if workload not in results:
            continue
        rows = results[workload]
        scale, unit = (1e6, "M tokens/s") if workload == "tokens" else (1.0, "frames/s")
        limit_job, lim = next((j, rs) for j, rs in rows if j["loader"] == "limit")
        limit = med(lim)
        plain_runs = {
            j["workers"]: rs for j, rs in rows if j["loader"] == "streamseq" and plain(j)
        }
        zero = med(plain_runs[0]) if 0 in plain_runs else None
        for persistent in (False, True):
            by = {
                j["workers"]: rs
                for j, rs in rows
                if j["loader"] == "streamseq" and bool(j.get("persistent")) == persistent
            }
            if not by:
                continue
            cells = [None if persistent else lim, *(by.get(n) for n in counts)]
            rate = [None if rs is None else med(rs) for rs in cells]

            def fmt(values: list[float | None], text: str = "{:.2f}") -> list[str]:
                return ["" if v is None else text.format(v) for v in values]

            name = f"{workload}, persistent" if persistent else workload
            lines.append(line(unit, fmt([x and x / scale for x in rate]), name))
            if zero:
                lines.append(line("x 0 workers", ["", *fmt([x and x / zero for x in rate[1:]])]))
            lines.append(line("x limit", fmt([x and x / limit for x in rate])))
            cpu = [None if rs is None else per_step(med(rs, "cpu_per_step")) for rs in cells]
            lines.append(line("CPU/step", fmt(cpu, "{}")))
        text = f"{workload} limit: {label(limit_job)}"
        for job, rs in rows:
            if job["loader"] in ("memcpy", "pyav-defaults"):
                text += f"; {label(job)}: {med(rs) / scale:.2f} {unit}"
        notes.append(text)
    return "\n".join(lines + notes)


# -- decode once: a store, and video on unequal clips --------------------------------------

STORE_SIZE = 64  # the frames a model trained on small frames reads (from 224x224 clips)


def store_loader(job: dict) -> Any:
    """The loader (or limit) of one decode-once configuration, and the frames it counts."""
    import streamseq
    from streamseq.io import video as open_video

    kind, workers, paths = job["kind"], job["workers"], job["paths"]
    rows, tbins = job.get("rows", B_VIDEO), job.get("tbins", T_VIDEO)
    if kind == "decode64":
        streams = [open_video(p, size=(STORE_SIZE, STORE_SIZE)) for p in paths]
    elif kind == "store":
        streams = streamseq.store.open_store(job["store"])
    elif kind in ("decode224", "decode224p"):
        streams = [open_video(p) for p in paths]
    elif kind in ("copy", "copyfresh"):
        return store_copy_limit(job["store"], rows * tbins, fresh=kind == "copyfresh")
    elif kind == "copy2":
        return store_copy_two_threads(job["store"], rows, tbins)
    elif kind == "decode1":
        return DecodeLimit(paths, 1)
    else:
        return DecodeLimit(paths, workers)
    persistent = kind == "decode224p"  # (workers kept from pass to pass)
    return streamseq.StreamLoader(
        streams, rows, tbins, num_workers=workers, persistent_workers=persistent
    )


def store_copy_limit(store: str, steps: int = B_VIDEO * T_VIDEO, fresh: bool = False) -> Any:
    """One process copying the store's bytes into batch-sized arrays, nothing to decide.

    ``steps`` frames a batch, copied into ONE reused array (a buffer always hot in the
    caches), or with ``fresh`` into a new array for every batch, the one before it held
    until the next one is made (what a loader's user does: ``for batch in loader``), as
    a loader must hand out memory its user may keep.
    """
    import streamseq

    whole = streamseq.store.open_store(store)[0]._files.maps()
    out = np.empty((steps, *whole.shape[1:]), whole.dtype)

    def batches() -> Any:
        batch = out
        for a in range(0, len(whole) - len(out) + 1, len(out)):
            if fresh:
                batch = np.empty_like(out)
            batch[:] = whole[a : a + len(out)]
            yield batch

    return _Iterable(batches)


def store_copy_two_threads(store: str, rows: int, tbins: int) -> Any:
    """Two threads copying the store's bytes into ONE reused batch-sized array.

    The compiled copy alone (``gather._gather.Copy``: the copying thread and its waiter
    take the rows of a batch), with nothing to decide: the floor of a process that
    copies with two cores, as the store read in this process does.
    """
    from streamseq.gather._gather import Copy, fill

    import streamseq

    whole = streamseq.store.open_store(store)[0]._files.maps()
    out = np.empty((rows, tbins, *whole.shape[1:]), whole.dtype)
    meta = (
        np.empty(rows, bool),
        np.empty((rows, tbins), bool),
        np.empty((rows, tbins), np.int64),
        np.empty((rows, tbins), np.int64),
    )
    streams, counts, ids = [whole] * rows, np.full(rows, tbins), np.arange(rows)

    def batches() -> Any:
        for a in range(0, len(whole) - rows * tbins + 1, rows * tbins):
            copy = Copy()
            fill(streams, np.arange(rows) * tbins + a, counts, ids, out, *meta, copy)
            copy.start()
            copy.wait()
            yield out

    return _Iterable(batches)


def measure_store(job: dict) -> dict:
    """Frames a second of one decode-once configuration, in this process (after the first
    batch; a decode limit: whole passes, as :func:`measure`)."""
    import resource

    torch.set_num_threads(1)
    if job.get("root"):
        check_import(job["root"])
    loader = store_loader(job)
    total = sum(frames_in(p) for p in job["paths"])
    first_steps = job.get("rows", B_VIDEO) * job.get("tbins", T_VIDEO)
    copy = job["kind"] in ("copy", "copyfresh", "copy2")
    if copy:
        total = total // first_steps * first_steps
    import psutil

    limit = job["kind"] in ("decode1", "limit")
    workers = job["kind"] == "decode224" and job["workers"] > 0
    # one pass untimed: files opened, the loader's slots written once (a decode limit's
    # processes run until it is closed: their CPU would count, and they start warm anyway)
    if job.get("warm") and not limit:
        for _ in loader:
            pass
        deadline = time.monotonic() + 5  # its workers joined: their CPU is not counted
        while multiprocessing.active_children() and time.monotonic() < deadline:
            time.sleep(0.01)
    steps = seconds = cpu = 0.0
    epochs = batches = 0
    cpu_start, main_start = cpu_seconds(), time.process_time()
    children_start = resource.getrusage(resource.RUSAGE_CHILDREN)
    split: list[list[float]] = []  # per pass: frames, CPU seconds of each worker
    while epochs < 1 or seconds < job["min_seconds"]:
        before = {c.pid for c in psutil.Process().children()} if workers else set()
        start = time.perf_counter()
        it = iter(loader)
        batch = next(it)
        first, cpu_first = time.perf_counter(), time.thread_time()
        rows = batch.valid.sum(1).numpy() if workers else None
        n = 0
        for batch in it:
            n += 1
            if workers:
                rows += batch.valid.sum(1).numpy()
        end, cpu_end = time.perf_counter(), time.thread_time()
        if workers:  # every block is handed over: the workers only wait to be stopped
            split.append(worker_split(rows, job["workers"], before))
        steps += total if limit else total - first_steps
        seconds += end - start if limit else end - first
        cpu += cpu_end - cpu_first
        batches += n
        epochs += 1
        del it, batch
    main_cpu = time.process_time() - main_start
    if hasattr(loader, "close"):
        loader.close()
    del loader
    deadline = time.monotonic() + 5  # workers count once they are joined
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.01)
    frames = epochs * total  # every frame read, the first batch and the start included
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # (the joined ones)
    return {
        "fps": steps / seconds,
        "epochs": epochs,
        "cpu_ms_per_1000": 1e6 * (cpu_seconds() - cpu_start) / frames,
        "main_ms_per_1000": 1e6 * main_cpu / frames,
        "children_sys_ms_per_1000": 1e6 * (children.ru_stime - children_start.ru_stime) / frames,
        "children_faults_per_pass": (children.ru_minflt - children_start.ru_minflt) / epochs,
        "split": split,
        "us_batch": 1e6 * seconds / max(1, batches),  # (after the first of each pass)
        "cpu_us_batch": 1e6 * cpu / max(1, batches),  # this thread's CPU
    }


def beside_line(med: Any, size: tuple[int, int], baseline: str | None) -> str:
    """The per-batch cost beside the copy of batches of ``size`` read in this process.

    The store's microseconds a batch (0 workers: read here) less those of the copy into
    a fresh array, wall and this thread's CPU time (medians, ``med(config, key)``); with
    ``baseline``, the baseline's figures beside them.
    """

    def beside(tree: str, key: str) -> float:
        return med(("store", 0, size, tree), key) - med(("copyfresh", 0, size, ""), key)

    line = (
        f"store {size[0]}x{size[1]}, 0 workers: per-batch cost beside the copy "
        f"{beside('', 'us_batch'):.1f} us ({beside('', 'cpu_us_batch'):.1f} us CPU)"
    )
    if baseline:
        line += (
            f", {baseline}: {beside('base', 'us_batch'):.1f} us "
            f"({beside('base', 'cpu_us_batch'):.1f} us CPU)"
        )
    return line


def worker_split(rows: np.ndarray, workers: int, before: set[int]) -> list[float]:
    """The frames each of the ``workers`` workers of a pass read, then their CPU seconds.

    The frames come from the valid steps of each row in the pass (``rows``) and the rows
    of each group (:func:`streamseq.plan.balance.balanced_sets`, as the loader gives them;
    the cuts of ``balanced_sizes`` in a revision without it); the CPU seconds are each
    worker's user and system time so far, read once every block is handed over, before
    the pass stops them (the children that were not there before the pass, ``before``:
    those of an earlier pass may still be exiting).
    """
    import psutil

    from streamseq.plan import balance

    sets = getattr(balance, "balanced_sets", None)  # (any set of rows; a revision before: cuts)
    if sets is not None:
        frames = [float(rows[mine].sum()) for mine in sets(rows, workers)]
    else:
        cuts = np.cumsum(balance.balanced_sizes(rows, workers))[:-1]
        frames = [float(part.sum()) for part in np.split(rows, cuts)]
    cpu = []
    for child in [c for c in psutil.Process().children() if c.pid not in before][:workers]:
        try:
            t = child.cpu_times()
            cpu.append(t.user + t.system)
        except psutil.Error:  # ended meanwhile
            cpu.append(float("nan"))
    return frames + cpu + [float("nan")] * (workers - len(cpu))


def build_store(paths: list[str], store: str) -> tuple[float, int, int]:
    """Build the 64x64 store of ``paths`` afresh with 2 workers: seconds, bytes on disk, frames."""
    import shutil

    import streamseq
    from streamseq.io import video as open_video

    shutil.rmtree(store, ignore_errors=True)
    clips = [open_video(p, size=(STORE_SIZE, STORE_SIZE)) for p in paths]
    start = time.perf_counter()
    stored = streamseq.materialize(clips, store, num_workers=2)
    seconds = time.perf_counter() - start
    disk = sum(os.stat(os.path.join(store, f)).st_blocks * 512 for f in os.listdir(store))
    return seconds, disk, sum(len(s) for s in stored)


def decode_once(args: Any) -> None:
    """``--workload store`` / ``unequal``: video decoded every epoch against a store, and
    2 workers on unequal clips against the best decode of the machine, in one run.

    ``store``: the 24 clips read at 64x64, decoded every epoch (0 and 2 workers) and read
    from a store that :func:`streamseq.materialize` built (timed, with its size on disk;
    0 and 2 workers), against the copy limit of the store's bytes (one process copying
    them into ONE reused batch-sized array), and beside it the same copy into a fresh
    array a batch (what a loader, which hands out memory its user may keep, is up
    against; :func:`store_copy_limit`), and two threads copying into one reused array
    (the store read here copies a batch with two threads: :func:`store_copy_two_threads`).
    Targets: the store at 0.9 of the copy limit (of the reused array, one thread) or
    more, and 20 times the decode or more. A second size, batches of 16 x 16 (3 MiB:
    read here too, whatever the workers; 16 rows, none of them empty with 24 clips),
    shows how the ratio moves with the batch's size. The store rows also
    show the wall time and this thread's CPU time a batch (medians, after the first
    batch of each pass), and for each size the per-batch cost beside the copy: the
    store's microseconds a batch less those of the copy into a fresh array (wall and CPU
    time; with ``--baseline``, the baseline's beside it). With ``--baseline REV``
    the store rows are timed with the streamseq of ``REV`` too, in the same run.
    ``--store-only`` leaves out the decoding rows. Both workloads then time the clips
    at 224x224 with 2 workers against the best decode the machine allows: twice the
    rate of one process decoding every frame (one thread, as :func:`count_frames`),
    measured here; and, for reference, :class:`DecodeLimit` with 2 processes.
    Target: 0.85. The loader's row is timed twice: with its workers started at every
    pass (the default, as PyTorch's), and kept from pass to pass
    (``persistent_workers=True``; its CPU a frame is left out: a kept worker's time is
    counted only once it exits, the untimed first pass's with it).
    """
    repeats = args.repeats or (1 if args.quick else 3)
    data = os.path.join(args.data, "quick" if args.quick else "full")
    paths = make_clips(data, 8 if args.quick else 24)
    store = os.path.join(data, f"store{STORE_SIZE}")
    common = {"paths": paths, "store": store, "min_seconds": 0.5 if args.quick else 2.0}
    common["warm"] = args.warm
    small, large = (B_VIDEO, T_VIDEO), (16, 16)  # (24 clips: 16 rows, none empty)
    decoding = [("decode1", 1, small, ""), ("limit", 2, small, ""), ("decode224", 2, small, "")]
    decoding.append(("decode224p", 2, small, ""))  # (persistent_workers=True)
    if args.baseline and args.workload == "unequal":  # its loader's row, timed in the same run
        decoding.append(("decode224", 2, small, "base"))
    configs = [] if args.store_only else decoding
    built = None
    roots = {"": REPO}
    if args.baseline:
        roots["base"] = baseline_tree(args.baseline, args.data)
        print(f"baseline {args.baseline}: {roots['base']}", file=sys.stderr)
    if args.workload == "store":
        built = build_store(paths, store)
        stored = []
        for size in (small, large):
            stored += [("store", 0, size, ""), ("store", 2, size, "")]
            stored += [("store", 0, size, "base"), ("store", 2, size, "base")] * bool(
                args.baseline
            )
            stored += [("copy", 0, size, ""), ("copyfresh", 0, size, ""), ("copy2", 0, size, "")]
        decode64 = (
            [] if args.store_only else [("decode64", 0, small, ""), ("decode64", 2, small, "")]
        )
        configs = decode64 + stored + configs
    at_start = load()
    runs: dict[tuple, list[dict]] = {c: [] for c in configs}
    for r in range(repeats):
        for config in configs:
            kind, workers, (rows, tbins), tree = config
            what = f"{kind}{' ' + tree if tree else ''}, {workers}, {rows} x {tbins}"
            print(f"[{args.workload} {r + 1}/{repeats}] {what} ...", file=sys.stderr)
            job = dict(common, kind=kind, workers=workers, rows=rows, tbins=tbins)
            job["root"] = roots[tree] if kind in ("store", "decode224") else ""
            cmd = [sys.executable, os.path.abspath(__file__), "--store-child", json.dumps(job)]
            env = dict(os.environ)
            first = roots[tree] if kind in ("store", "decode224") else REPO
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [first, env.get("PYTHONPATH")]))
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
            if out.returncode != 0:
                raise RuntimeError(f"{job} failed:\n{out.stderr[-4000:]}")
            runs[config].append(json.loads(out.stdout.strip().splitlines()[-1]))

    def med(config: tuple, key: str = "fps") -> float:
        return statistics.median(x[key] for x in runs[config])

    frames = sum(frames_in(p) for p in paths)
    print(f"\ndecode once ({machine()}; {at_start} at start, {load()} at end; {repeats} repeats)")
    print(f"{len(paths)} H.264 clips of {SIZE}x{SIZE}, {frames} frames")
    if args.baseline:
        print(f"baseline: {args.baseline} ({roots['base']}); current: {describe_current()}")
    names = {
        "decode64": f"video at {STORE_SIZE}x{STORE_SIZE}, decoded every epoch",
        "store": f"video at {STORE_SIZE}x{STORE_SIZE}, read from the store",
        "copy": "copy limit of the store's bytes (reused array)",
        "copyfresh": "copy of the store's bytes, fresh array a batch",
        "copy2": "copy limit, two threads (reused array)",
        "decode1": f"decode at {SIZE}x{SIZE}, 1 process",
        "limit": f"decode limit at {SIZE}x{SIZE} (2 processes x 1 thread)",
        "decode224": f"video at {SIZE}x{SIZE}, streamseq",
        "decode224p": f"video at {SIZE}x{SIZE}, streamseq, persistent_workers",
    }
    head = f"{'':>52}  {'batch':>7}  {'workers':>7}  {'frames/s':>10}  {'us/batch':>8}"
    print(f"{head}  {'CPU us':>7}  {'per repeat':>24}")
    for config in configs:
        kind, workers, (rows, tbins), tree = config
        each = " ".join(f"{x['fps']:.0f}" for x in runs[config])
        name = names[kind] + (f" ({args.baseline})" if tree else "")
        per = (
            ""
            if kind not in ("store", "copy", "copyfresh", "copy2")
            else f"{med(config, 'us_batch'):8.1f}"
        )
        cpu = "" if not per else f"{med(config, 'cpu_us_batch'):7.1f}"
        print(
            f"{name:>52}  {f'{rows}x{tbins}':>7}  {workers:>7}  {med(config):>10.0f}  "
            f"{per:>8}  {cpu:>7}  {each:>24}"
        )
    print()
    if built is not None:
        seconds, disk, stored_frames = built
        print(
            f"store built (2 workers): {seconds:.2f} s ({stored_frames / seconds:.0f} frames/s), "
            f"{disk / 2**20:.1f} MiB on disk ({disk / stored_frames:.0f} bytes a frame)"
        )
        for size in (small, large):
            copy, fresh = med(("copy", 0, size, "")), med(("copyfresh", 0, size, ""))
            if not copy or not fresh:  # (--quick: a single batch of this size)
                continue
            for w in (0, 2):
                x_copy = med(("store", w, size, "")) / copy
                x_fresh = med(("store", w, size, "")) / fresh
                x_two = med(("store", w, size, "")) / med(("copy2", 0, size, ""))
                line = (
                    f"store {size[0]}x{size[1]}, {w} workers: {x_copy:.2f} of the copy limit "
                    f"(target 0.9), {x_fresh:.2f} of the copy into fresh arrays, {x_two:.2f} "
                    "of two threads' copy"
                )
                if args.baseline:
                    base = med(("store", w, size, "base"))
                    line += f", {med(('store', w, size, '')) / base:.2f}x {args.baseline}"
                if size == small and not args.store_only:
                    x_decode = med(("store", w, size, "")) / med(("decode64", w, size, ""))
                    ok = "met" if x_copy >= 0.9 and x_decode >= 20 else "MISSED"
                    line += f", {x_decode:.1f}x the decode (target 20): {ok}"
                elif size == small:
                    line += f": {'met' if x_copy >= 0.9 else 'MISSED'}"
                print(line)
            print(beside_line(med, size, args.baseline))
    if args.store_only:
        return
    best = 2 * med(("decode1", 1, small, ""))
    ratio = med(("decode224", 2, small, "")) / best
    print(
        f"unequal clips, 2 workers: {ratio:.2f} of the best decode (2 x 1 process, "
        f"{best:.0f} frames/s; target 0.85): {'met' if ratio >= 0.85 else 'MISSED'}; "
        f"{med(('decode224', 2, small, '')) / med(('limit', 2, small, '')):.2f} of the "
        "2-process decode limit"
    )
    kept = med(("decode224p", 2, small, "")) / best
    print(
        f"unequal clips, 2 workers kept from pass to pass (persistent_workers=True): "
        f"{kept:.2f} of the best decode (target 0.85): {'met' if kept >= 0.85 else 'MISSED'}"
    )
    if ("decode224", 2, small, "base") in runs:
        base = med(("decode224", 2, small, "base"))
        print(f"unequal clips, 2 workers, {args.baseline}: {base / best:.2f} of the best decode")
    decoded = [c for c in configs if c[0] in ("decode1", "limit", "decode224")]
    keys = [(c[0] + (f" {args.baseline}" if c[3] else ""), c[1]) for c in decoded]
    print(cpu_lines({k: runs[c] for k, c in zip(keys, decoded, strict=True)}, keys))


def cpu_lines(details: dict[tuple[str, int], list[dict]], configs: list[tuple[str, int]]) -> str:
    """CPU a frame of the 224x224 rows (all processes, every frame read, start included),
    the main process's share, and how the frames and CPU of the workers split: the
    figures that hold on a shared machine, where the rates swing with the load."""

    def med(config: tuple[str, int], key: str) -> float:
        return statistics.median(d[key] for d in details[config])

    lines = [
        "",
        f"CPU a frame at {SIZE}x{SIZE} (user + system, all processes, ms per 1000 frames):",
    ]
    for kind, workers in configs:
        each = " ".join(f"{d['cpu_ms_per_1000']:.0f}" for d in details[(kind, workers)])
        lines.append(
            f"{kind:>12} {workers} workers: {med((kind, workers), 'cpu_ms_per_1000'):6.1f} "
            f"(main process {med((kind, workers), 'main_ms_per_1000'):5.1f}; repeats {each})"
        )
        if "children_faults_per_pass" in details[(kind, workers)][0]:
            lines.append(
                f"{'':>24}child processes: system CPU "
                f"{med((kind, workers), 'children_sys_ms_per_1000'):5.1f}, minor page faults "
                f"{med((kind, workers), 'children_faults_per_pass'):7.0f} a pass"
            )
    one, ours = ("decode1", 1), ("decode224", 2)
    if one in details and ours in details:
        ratio = med(one, "cpu_ms_per_1000") / med(ours, "cpu_ms_per_1000")
        lines.append(f"streamseq, 2 workers: {ratio:.2f} of the CPU efficiency of 1 process")
        passes = [p for d in details[ours] for p in d.get("split", [])]
        if passes:
            split = np.median(np.array(passes), axis=0)
            half = len(split) // 2
            frames, cpu = split[:half], split[half:]
            lines.append(
                "workers (median of passes): frames "
                + " / ".join(f"{f:.0f}" for f in frames)
                + f" (the busiest {frames.max() / frames.mean() - 1:+.1%} over the mean), "
                + "CPU s "
                + " / ".join(f"{c:.2f}" for c in cpu)
                + ", ms per 1000 frames "
                + " / ".join(f"{1e6 * c / f:.0f}" for c, f in zip(cpu, frames, strict=True))
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--workload",
        choices=["tokens", "video", "corpus", "all", "store", "unequal"],
        default="all",
    )
    parser.add_argument("--quick", action="store_true", help="smaller data, one repeat")
    parser.add_argument(
        "--workers",
        nargs="?",
        const="",
        metavar="LIST",
        help="run the scaling sweep with these numbers of workers (comma-separated; "
        "default 0, 1, 2, 4, ... up to the usable cores) instead of the loader comparison",
    )
    parser.add_argument(
        "--compare-workers",
        type=int,
        default=2,
        metavar="N",
        help="workers of the loader comparison (default 2)",
    )
    parser.add_argument(
        "--warm",
        action="store_true",
        help="read one pass untimed before timing each configuration (the steady state: "
        "persistent workers started, files open)",
    )
    parser.add_argument(
        "--auto",
        action="store_true",
        help='also time streamseq with num_workers="auto" (the row names the choice)',
    )
    parser.add_argument(
        "--persistent-workers",
        action="store_true",
        help="also time streamseq with persistent_workers=True (rows with workers)",
    )
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "streamseq-bench"))
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument(
        "--baseline",
        nargs="?",
        const=BASELINE,
        metavar="REV",
        help=f"also time the streamseq of git revision REV (default {BASELINE}); "
        "--workload corpus takes several, comma-separated (REV,REV)",
    )
    parser.add_argument(
        "--loaders",
        help="only these, comma-separated (limit, pyav-defaults, memcpy, streamseq, "
        "streamseq-numpy, psd, multistream); the limit always runs",
    )
    parser.add_argument(
        "--lookahead",
        type=int,
        metavar="K",
        help="also time the tokens with lookahead=K (in-process and --compare-workers), "
        "beside the rows of lookahead=0, and their ratios",
    )
    parser.add_argument(
        "--store-only",
        action="store_true",
        help="--workload store: only the rows read from the store and the copy limits",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--store-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.store_child:
        print(json.dumps(measure_store(json.loads(args.store_child))))
        return
    if args.workload in ("store", "unequal"):
        decode_once(args)
        return
    if args.child:
        print(json.dumps(measure(json.loads(args.child))))
        return
    sweep = args.workers is not None
    if sweep and (args.baseline or args.loaders):
        parser.error("--workers runs the sweep alone: leave out --baseline and --loaders")
    try:
        counts = sweep_counts(args.workers) if sweep else []
    except ValueError as e:
        parser.error(f"--workers: {e}")
    loaders = args.loaders.split(",") if args.loaders else []
    unknown = sorted(set(loaders) - set(LABELS))
    if unknown:
        parser.error(f"--loaders: unknown {', '.join(unknown)} (known: {', '.join(LABELS)})")
    repeats = args.repeats or (1 if args.quick else 3)
    w = args.compare_workers
    n = cores()
    workloads = ["tokens", "video"] if args.workload == "all" else [args.workload]
    if args.workload == "corpus" and (sweep or args.loaders):
        parser.error("--workload corpus times streamseq and its baselines only")
    results: dict[str, Any] = {"workers": w, "cores": n, "cpu_count": os.cpu_count()}
    data = os.path.join(args.data, "quick" if args.quick else "full")
    bases = [
        {"baseline": rev, "root": baseline_tree(rev, args.data)}
        for rev in (args.baseline.split(",") if args.baseline else [])
    ]
    for b in bases:
        print(f"baseline {b['baseline']}: {b['root']}", file=sys.stderr)
    if len(bases) > 1 and workloads != ["corpus"]:
        parser.error("several baselines: --workload corpus only")
    base = bases[0] if bases else {"baseline": None, "root": None}
    print(f"current: {REPO} ({describe_current()})", file=sys.stderr)
    start_load = load()
    for workload in workloads:
        video = workload == "video"
        count = (8 if args.quick else 24) if video else (128 if args.quick else 512)
        if workload == "corpus":
            count = 5_000 if args.quick else 50_000
            corpus_path(data, count)  # (written once, outside the timings)
        common = {
            "workload": workload,
            "count": count,
            "data": data,
            "root": REPO,
            "min_seconds": 0.5 if args.quick else 2.0,
            "min_epochs": 1,
            "warm": args.warm,
        }
        if video:
            make_clips(common["data"], common["count"])  # outside the timings
        if sweep:
            limits = [("limit", n, {}), ("pyav-defaults", n, {})] if video else []
            limits = limits or [("limit", 0, {}), ("memcpy", 0, {})]
            configs = limits + [("streamseq", k, {}) for k in counts]
            if args.persistent_workers:
                configs += [("streamseq", k, {"persistent": True}) for k in counts if k]
        elif workload == "corpus":  # in-process and w workers, beside every baseline
            configs = [("limit", 0, {})]
            for k in (0, w):
                configs += [("streamseq", k, {})] + [("streamseq", k, b) for b in bases]
        elif video:
            configs = [("limit", n, {}), ("pyav-defaults", n, {}), ("streamseq", w, {})]
            configs += [("streamseq", w, base)] if args.baseline else []
            configs += [("streamseq", w, {"persistent": True})] if args.persistent_workers else []
            configs += [("streamseq", w, {"transform": "crop"})]
            configs += [("streamseq", "auto", {})] if args.auto else []
            configs += [("psd", w, {}), ("multistream", w, {})]
            if not args.quick:
                configs[2:2] = [("streamseq", 0, {})]
        else:
            configs = [("limit", 0, {}), ("memcpy", 0, {}), ("streamseq", 0, {})]
            configs += [("streamseq", 0, base)] if args.baseline else []
            configs += [("streamseq-numpy", 0, {}), ("psd", 0, {}), ("multistream", 0, {})]
            configs += [("streamseq", w, {})]
            configs += [("streamseq", w, {"persistent": True})] if args.persistent_workers else []
            configs += [("streamseq", w, base)] if args.baseline else []
            configs += [("streamseq", "auto", {})] if args.auto else []
            configs += [("streamseq", k, {"transform": "mix"}) for k in (0, w)]
            if args.persistent_workers:
                configs += [("streamseq", w, {"transform": "mix", "persistent": True})]
            configs += [("psd", w, {}), ("multistream", w, {})]
            configs += lookahead_configs(args.lookahead, w, base if args.baseline else None)
        if args.loaders:
            keep = {"limit", *loaders}
            configs = [c for c in configs if c[0] in keep]
        jobs = [dict(common, loader=k, workers=k_w, **extra) for k, k_w, extra in configs]
        runs: dict[int, list[dict]] = {id(j): [] for j in jobs}
        at_start = load()
        for r in range(repeats):
            for job in jobs:
                print(f"[{workload} {r + 1}/{repeats}] {label(job)} ...", file=sys.stderr)
                runs[id(job)].append(run_child(job))
        results[workload] = [(j, runs[id(j)]) for j in jobs]
        unit = "frames" if video else "M tokens"
        head = f"{machine()}; {at_start} at start, {load()} at end; {repeats} repeats"
        if not sweep:
            print(table(workload, results[workload], unit, head), flush=True)
            if workload == "corpus":
                print(main_cpu_table(results[workload]), flush=True)
            if args.lookahead:
                print(lookahead_ratios(results[workload]), flush=True)
    if sweep:
        head = f"{machine()}; {start_load} at start, {load()} at end; {repeats} repeats"
        print(scaling_table(results, counts, head))
    else:
        print("\ntargets (ratios of medians, measured in this run)")
        print("\n".join(targets(results)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({k: v for k, v in results.items()}, f, indent=1)


if __name__ == "__main__":
    main()
