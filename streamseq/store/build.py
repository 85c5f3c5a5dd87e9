"""Decode once: every step of every stream written into a memory-mapped store.

:func:`materialize` reads every stream (decoding, resizing, and a transform the user
marks deterministic), writes its steps into the store's data files and returns streams
that read them back, zero-copy. See :mod:`streamseq.store.layout` for the files and for
why a stream cut short by a crash is never read.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import logging
import multiprocessing
import os
import shutil
import signal
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, NamedTuple

import numpy as np

from streamseq._checks import check_int
from streamseq._tree import leaves, tree_map
from streamseq.errors import SourceError, WorkerError, WorkerTimeout
from streamseq.mix import Mixture
from streamseq.read.ref import StreamRef, as_refs
from streamseq.read.transform import StepInfo, Transform
from streamseq.store import layout
from streamseq.store.identity import check_source, record_change, source_record
from streamseq.store.lock import build_lock
from streamseq.store.stream import StoredStream, stored_streams

log = logging.getLogger(__name__)

#: bytes read from a stream at once while writing it
READ_BYTES = 32 << 20
#: bytes (and streams) given to a worker at once; its streams are recorded together
TASK_BYTES, TASK_STREAMS = 256 << 20, 64
ON_CHANGE = ("rebuild", "error")


class _Build(NamedTuple):
    """What every writer needs (inherited by forked workers, never pickled)."""

    folder: str
    refs: list[StreamRef]
    offsets: np.ndarray
    lengths: np.ndarray
    layout: list[tuple[np.dtype, tuple[int, ...]]]
    transform: Transform | None


_BUILD: list[_Build] = []  # the build of this process, for its forked workers


def materialize(
    streams: Sequence[Any],
    path: str | os.PathLike,
    *,
    lengths: Sequence[int] | None = None,
    transform: Callable[[Any, StepInfo], Any] | None = None,
    seed: int = 0,
    num_workers: int = 0,
    on_change: str = "rebuild",
    key: str | None = None,
    timeout: float | None = None,
    lock_timeout: float = 3600.0,
) -> list[StoredStream] | Mixture:
    """Write every step of every stream once into a memory-mapped store, and read it back.

    The store (a folder: see :mod:`streamseq.store.layout`) keeps the steps as the
    sources deliver them, after ``transform``, one data file per array of a step, with
    the offset and length of every stream, the step dtypes and shapes, and what
    identifies every source (its path and its file's size, time and inode). The streams
    returned read it with memory maps, without a copy: a loader given them delivers the
    same batches as one given the sources (with the same ``transform``), at the cost of a
    copy instead of a decode.

    Building is resumable: a stream is recorded once its steps are synced to disk, so a
    build stopped at any point (Ctrl-C, a kill, a full disk) keeps what it wrote and
    the next call writes only what is missing, never reading a stream cut short. A call
    on a complete store that matches the sources reads nothing but one step. Several
    processes (the ranks of one machine) may call it at once: one builds, the others
    wait for it (``lock_timeout``) and read.

    Args:
        streams: streams or openers (as for :class:`~streamseq.StreamLoader`), or a
            :class:`~streamseq.Mixture` (a mixture of the stored streams is returned).
        path: the store's folder (made if needed).
        lengths: the streams' lengths, when known (else measured).
        transform: ``fn(steps, info)`` applied to the steps before they are stored; it
            must be deterministic (``info.epoch`` is always 0): it is applied once.
        seed: the seed of ``info.rng``.
        num_workers: worker processes (forked) writing streams in parallel; 0 writes in
            this process.
        on_change: a source that differs from the one the store was made from (another
            file, a file changed: size, time or inode), or other settings: ``"rebuild"``
            writes it again, ``"error"`` raises a :class:`~streamseq.SourceError`.
        key: any text that names what the store holds beyond the sources (a version of
            the transform, a resize setting): another key rebuilds the store.
        timeout: seconds without any stream written before the build is abandoned
            (``None``: as long as the workers live).
        lock_timeout: seconds to wait for another process building the same store.

    Returns:
        One :class:`~streamseq.store.StoredStream` per stream, in order (a
        :class:`~streamseq.Mixture` of them for a mixture).

    Raises:
        SourceError: a source's file changed since the source was made, or since the
            store was made (with ``on_change="error"``); it names the stream and the file.
        StreamError: a stream failed to read, or its steps differ in dtype or shape
            from the first stream's (named with the steps).
        OSError: ``errno.ENOSPC`` when the steps left to write would not fit the disk.
        TimeoutError: another process held the store for ``lock_timeout``.
        WorkerError: a worker died (:class:`~streamseq.WorkerTimeout` after ``timeout``).

    Example:
        >>> import tempfile
        >>> from streamseq import StreamLoader
        >>> streams = [np.arange(7) * 2, np.arange(4)]
        >>> with tempfile.TemporaryDirectory() as d:
        ...     stored = materialize(streams, d)
        ...     a = [b.data.tolist() for b in StreamLoader(streams, 2, 3)]
        ...     b = [b.data.tolist() for b in StreamLoader(stored, 2, 3)]
        ...     a == b, type(stored[0][0:2]).__name__
        (True, 'memmap')
    """
    if on_change not in ON_CHANGE:
        raise ValueError(f"on_change must be one of {ON_CHANGE}, got {on_change!r}")
    num_workers = check_int(num_workers, "num_workers", 0)
    refs = as_refs(streams, lengths)
    folder = os.path.abspath(os.fspath(path))
    os.makedirs(folder, exist_ok=True)
    fn = None if transform is None else Transform(transform, seed=check_int(seed, "seed", 0))
    with build_lock(folder, lock_timeout):
        stored = _build(refs, folder, fn, num_workers, on_change, key, timeout)
    if isinstance(streams, Mixture):
        return Mixture(stored, streams.spec)
    return stored


def _build(
    refs: list[StreamRef],
    folder: str,
    fn: Transform | None,
    num_workers: int,
    on_change: str,
    key: str | None,
    timeout: float | None,
) -> list[StoredStream]:
    """Bring the store in ``folder`` up to date with ``refs`` (holding its lock)."""
    lengths = np.array([len(r) for r in refs], dtype=np.int64)
    for ref in refs:
        check_source(ref)
    records = [source_record(r) for r in refs]
    spec = layout.encode_spec(_first_step(refs, lengths, fn))
    config = {
        "version": layout.VERSION,
        "streams": len(refs),
        "lengths_sha256": hashlib.sha256(lengths.astype("<i8").tobytes()).hexdigest(),
        "steps": int(lengths.sum()),
        "spec": spec,
        "transform": None if fn is None else fn.name,
        "seed": None if fn is None else fn.seed,
        "key": key,
    }
    manifest = layout.read_manifest(folder)
    done = _reusable(refs, folder, manifest, config, records, on_change)
    if done is None:
        done = _fresh(folder, config, records, lengths)
    offsets = np.load(os.path.join(folder, layout.INDEX))[:, 0]
    pending = np.flatnonzero(~done & (lengths > 0))
    empty = np.flatnonzero(~done & (lengths == 0))
    if len(empty):
        layout.append_done(folder, empty)
    _check_space(folder, lengths[pending], layout.step_bytes(spec))
    if len(pending):
        build = _Build(folder, refs, offsets, lengths, layout.leaf_layout(spec), fn)
        log.info("materialize: writing %d streams into %s", len(pending), folder)
        tasks = _tasks(pending, lengths, layout.step_bytes(spec), num_workers)
        _run(build, tasks, num_workers, timeout)
    index = np.stack([offsets, lengths], axis=1)
    return stored_streams(folder, {**config, "records": records}, index)


def _first_step(refs: list[StreamRef], lengths: np.ndarray, fn: Transform | None) -> Any:
    """Zero-step arrays of the first step of the first stream with steps (after ``fn``)."""
    nonempty = np.flatnonzero(lengths)
    if not len(nonempty):
        raise ValueError(f"all {len(refs)} streams are empty: nothing to store")
    i = int(nonempty[0])
    ref = refs[i]
    try:
        data = ref.read(0, 1)
        if fn is not None:
            data = fn(ref, i, data, 0, 1)
    finally:
        ref.close()
    return tree_map(lambda a: np.asarray(a)[:0], data)


def _reusable(
    refs: list[StreamRef],
    folder: str,
    manifest: dict[str, Any] | None,
    config: dict[str, Any],
    records: list[Any],
    on_change: str,
) -> np.ndarray | None:
    """What the store in ``folder`` holds of the streams, or ``None`` to start afresh.

    Streams whose source changed are forgotten (``on_change="rebuild"``) or an error.
    """
    if manifest is None:
        return None
    old = {k: manifest.get(k) for k in config}
    before = manifest.get("records") or []
    if len(before) == len(records):
        for i in range(len(records)):
            if before[i] != records[i]:
                error = record_change(refs[i], before[i], records[i])
                if error is not None and on_change == "error":
                    raise error
    if old != config:
        what = [k for k in config if old[k] != config[k]]
        if on_change == "error":
            raise SourceError(
                folder,
                f"the store was made from other streams or settings ({', '.join(what)} "
                "differ); use another folder, or on_change='rebuild'",
            )
        log.warning("materialize: %s: %s changed, the store is made again", folder, what)
        return None
    done = layout.read_done(folder, len(records))
    changed = np.array([a != b for a, b in zip(before, records, strict=True)], bool)
    if changed.any():
        log.warning("materialize: %d changed streams written again", int(changed.sum()))
        done &= ~changed
        layout.rewrite_done(folder, done)
        layout.write_manifest(folder, {**config, "records": records})
    return done


def _fresh(
    folder: str, config: dict[str, Any], records: list[Any], lengths: np.ndarray
) -> np.ndarray:
    """Start an empty store: no stream done, data files of the right size (sparse)."""
    for name in (layout.DONE, layout.MANIFEST):
        if os.path.exists(os.path.join(folder, name)):
            os.remove(os.path.join(folder, name))
    for name in os.listdir(folder):
        if name.startswith("leaf-") and name.endswith(".bin"):
            os.remove(os.path.join(folder, name))
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    np.save(os.path.join(folder, layout.INDEX), np.stack([offsets, lengths], axis=1))
    total = int(lengths.sum())
    for i, (dtype, shape) in enumerate(layout.leaf_layout(config["spec"])):
        with open(os.path.join(folder, layout.leaf_file(i)), "wb") as f:
            f.truncate(total * dtype.itemsize * int(np.prod(shape, dtype=np.int64)))
    layout.sync_folder(folder)
    layout.write_manifest(folder, {**config, "records": records})
    return np.zeros(len(lengths), bool)


def _check_space(folder: str, lengths: np.ndarray, per_step: int) -> None:
    """Raise ``OSError(ENOSPC)`` when the steps left to write do not fit the free space."""
    steps = int(lengths.sum())
    need = steps * per_step
    free = shutil.disk_usage(folder).free
    log.info("materialize: %d steps x %d bytes = %d bytes to write", steps, per_step, need)
    if need > free:
        raise OSError(
            errno.ENOSPC,
            f"the store needs {need} bytes ({len(lengths)} streams, {steps} steps x "
            f"{per_step} bytes a step) but {free} bytes are free on its disk",
            folder,
        )


def _tasks(
    pending: np.ndarray, lengths: np.ndarray, per_step: int, workers: int
) -> list[np.ndarray]:
    """The pending streams, longest first, in groups of at most TASK_BYTES or TASK_STREAMS.

    At least 4 groups a worker where there are streams enough: the workers stay busy to
    the end, and a build stopped early keeps more.

    Example:
        >>> [t.tolist() for t in _tasks(np.arange(3), np.array([1, 5, 2]), 1, 0)]
        [[1], [2], [0]]
        >>> [t.tolist() for t in _tasks(np.arange(300), np.ones(300, int), 1, 1)][0][:3]
        [0, 1, 2]
    """
    order = pending[np.argsort(-lengths[pending], kind="stable")]
    size = np.cumsum(lengths[order] * per_step)
    per_task = min(TASK_STREAMS, -(-len(order) // (4 * max(1, workers))))
    group = np.maximum((size - 1) // TASK_BYTES, np.arange(len(order)) // max(1, per_task))
    cuts = np.flatnonzero(np.diff(group)) + 1
    return np.split(order, cuts)


def _run(build: _Build, tasks: list[np.ndarray], num_workers: int, timeout: float | None) -> None:
    """Write every task's streams, recording each task once its data is synced."""
    if num_workers == 0:
        for task in tasks:
            layout.append_done(build.folder, _write_task(build, task))
        return
    _BUILD[:] = [build]
    context = multiprocessing.get_context("fork")
    pool = ProcessPoolExecutor(num_workers, mp_context=context, initializer=_die_with_parent)
    try:
        todo, running = list(tasks), set[Future]()
        last = time.monotonic()
        while todo or running:
            while todo and len(running) < 2 * num_workers:
                running.add(pool.submit(_write_in_worker, todo.pop(0)))
            finished, running = wait(running, timeout=1.0, return_when=FIRST_COMPLETED)
            for future in finished:
                try:
                    layout.append_done(build.folder, future.result())
                except BrokenProcessPool:
                    raise WorkerError(
                        f"a worker writing the store {build.folder} died (killed, or out "
                        "of memory); what was written is kept: call materialize again"
                    ) from None
                last = time.monotonic()
            if timeout is not None and time.monotonic() - last > timeout:
                raise WorkerTimeout(
                    f"no stream of the store {build.folder} was written for {timeout:g} s"
                )
    finally:
        _BUILD.clear()
        _stop(pool)


def _stop(pool: ProcessPoolExecutor) -> None:
    """Stop the workers now (a task left is written by the next call)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in processes:
        if p.is_alive():
            p.terminate()
    for p in processes:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
            p.join(timeout=10)


def _die_with_parent() -> None:
    """Have the kernel kill this worker when the process that made it dies (Linux)."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle


def _write_in_worker(task: np.ndarray) -> np.ndarray:
    """A forked worker's task: the build comes from its parent's memory."""
    return _write_task(_BUILD[0], task)


def _write_task(build: _Build, task: np.ndarray) -> np.ndarray:
    """Write the streams of ``task``, sync the data files, and return them."""
    fds = [
        os.open(os.path.join(build.folder, layout.leaf_file(i)), os.O_WRONLY)
        for i in range(len(build.layout))
    ]
    try:
        for i in task.tolist():
            _write_stream(build, i, fds)
        for fd in fds:
            os.fsync(fd)
    finally:
        for fd in fds:
            os.close(fd)
    return task


def _write_stream(build: _Build, i: int, fds: list[int]) -> None:
    """Write the steps of stream ``i`` at its place in the data files."""
    ref, n, offset = build.refs[i], int(build.lengths[i]), int(build.offsets[i])
    sizes = [d.itemsize * int(np.prod(s, dtype=np.int64)) for d, s in build.layout]
    step = max(1, READ_BYTES // max(1, sum(sizes)))
    try:
        for a in range(0, n, step):
            b = min(n, a + step)
            data = ref.read(a, b)
            if build.transform is not None:
                data = build.transform(ref, i, data, a, b)
            arrays = _checked(ref, data, build.layout, a, b)
            for fd, size, arr in zip(fds, sizes, arrays, strict=True):
                _pwrite(fd, arr, (offset + a) * size)
    finally:
        ref.close()


def _checked(
    ref: StreamRef, data: Any, want: list[tuple[np.dtype, tuple[int, ...]]], a: int, b: int
) -> list[np.ndarray]:
    """The arrays of ``data`` (steps ``a:b``), checked against the store's layout."""
    arrays = [np.asarray(x) for x in leaves(data)]
    got = [(x.dtype, x.shape[1:]) for x in arrays]
    if got != want or any(len(x) != b - a for x in arrays):
        error = ref.error(
            f"steps {a}:{b} are {_show(got)} with {[len(x) for x in arrays]} steps, but the "
            f"store holds steps of {_show(want)} (the first stream's): every stream must "
            "give steps of one dtype and shape"
        )
        error.locate(ref.index, error.stream or "", (a, b))
        raise error
    return arrays


def _show(layout_: list[tuple[np.dtype, tuple[int, ...]]]) -> str:
    return ", ".join(f"{d.name}{list(s)}" for d, s in layout_)


def _pwrite(fd: int, array: np.ndarray, position: int) -> None:
    """Write all the bytes of ``array`` at ``position`` of the file ``fd``."""
    view = memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
    while len(view):
        written = os.pwrite(fd, view, position)
        view, position = view[written:], position + written
