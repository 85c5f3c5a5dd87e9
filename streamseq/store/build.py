"""Decode once: every step of every stream written into a memory-mapped store.

:func:`materialize` reads every stream (decoding, resizing, and a transform the user
marks deterministic), writes its steps into the store's data files and returns streams
that read them back, zero-copy. See :mod:`streamseq.store.layout` for the files and for
why a stream cut short by a crash is never read.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import hashlib
import logging
import multiprocessing
import numbers
import os
import re
import shutil
import signal
import time
import types
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, NamedTuple

import numpy as np

from streamseq._checks import check_int
from streamseq._redact import redact_text
from streamseq._tree import leaves, tree_map
from streamseq.errors import SourceError, WorkerError, WorkerTimeout
from streamseq.mix import Mixture
from streamseq.read.ref import StreamRef, as_refs, describe
from streamseq.read.transform import StepInfo, Transform
from streamseq.store import layout
from streamseq.store.check import (
    Contents,
    keep_verified,
    lengths_digest,
    make_index,
    read_store,
    record_files,
)
from streamseq.store.generation import Plan, start_generation
from streamseq.store.identity import (
    check_copied,
    check_source,
    content_digest,
    record_change,
    source_record,
)
from streamseq.store.layout import Damaged
from streamseq.store.lock import build_lock
from streamseq.store.table import StoreTable, store_table

log = logging.getLogger(__name__)

#: bytes read from a stream at once while writing it
READ_BYTES = 32 << 20
#: bytes (and streams) given to a worker at once; its streams are recorded together
TASK_BYTES, TASK_STREAMS = 256 << 20, 64
ON_CHANGE = ("rebuild", "error")


class _Build(NamedTuple):
    """What every writer needs (inherited by forked workers, never pickled)."""

    folder: str
    generation: str
    refs: list[StreamRef]
    offsets: np.ndarray
    lengths: np.ndarray
    layout: list[tuple[np.dtype, tuple[int, ...]]]
    transform: Transform | None
    records: list[Any]  # of the sources, taken before any was read (see check_copied)


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
) -> StoreTable | Mixture:
    """Write every step of every stream once into a memory-mapped store, and read it back.

    The store (a folder: see :mod:`streamseq.store.layout`) keeps the steps as the
    sources deliver them, after ``transform``, one data file per array of a step, with
    the offset and length of every stream, the step dtypes and shapes, and what
    identifies every source (its path and its file's size, modification time, inode
    and ``ctime``, which no call sets back; those of every file of a recording, of
    streams zipped or of a LeRobot episode; a digest of the bytes of arrays in memory).
    The streams returned read it with memory maps, without a copy: a loader given them delivers the
    same batches as one given the sources (with the same ``transform``), at the cost of a
    copy instead of a decode.

    Building is resumable: a stream is recorded once its steps are synced to disk, so a
    build stopped at any point (Ctrl-C, a kill, a full disk) keeps what it wrote and
    the next call writes only what is missing, never reading a stream cut short. A call
    on a complete store that matches the sources reads nothing but one step. Several
    processes (the ranks of one machine) may call it at once: one builds, the others
    wait for it (``lock_timeout``) and read. A store whose files do not agree with its
    manifest (edited, cut short, deleted) is made again. Steps written are never written
    again in the same files: a store made again gets new files, so steps a process holds
    never change. A complete store in a folder that cannot be written is read as it is.

    Args:
        streams: streams or openers (as for :class:`~streamseq.StreamLoader`), or a
            :class:`~streamseq.Mixture` (a mixture of the stored streams is returned).
        path: the store's folder (made if needed): empty, or a store's.
        lengths: the streams' lengths, when known (else measured).
        transform: ``fn(steps, info)`` applied to the steps before they are stored; it
            must be deterministic (``info.epoch`` is always 0): it is applied once.
        seed: the seed of ``info.rng``.
        num_workers: worker processes (forked) writing streams in parallel; 0 writes in
            this process.
        on_change: a source that differs from the one the store was made from (another
            file, a file changed: size, time, ctime or inode; an array changed in
            memory), or other settings: ``"rebuild"`` writes it again, ``"error"``
            raises a :class:`~streamseq.SourceError`.
        key: any text that names what the store holds beyond the sources (a version of
            the transform, a resize setting): another key rebuilds the store.
        timeout: seconds without any stream written before the build is abandoned
            (``None``: as long as the workers live).
        lock_timeout: seconds to wait for another process building the same store.

    Returns:
        A :class:`~streamseq.store.table.StoreTable` of the stored streams, in order: a
        :class:`~streamseq.store.StoredStream` made when one is indexed, the lengths
        and offsets as arrays, a slice a table of the same store (a
        :class:`~streamseq.Mixture` of its slices, one a group, for a mixture).

    Raises:
        SourceError: a source's file changed since the source was made, or since the
            store was made (with ``on_change="error"``), or while its steps were copied
            (the stream is not recorded: the next call writes it); it names the stream
            and the file.
            Or the store's folder cannot be written and the store there is not complete,
            or does not match the streams; or it holds no store but other files.
        StreamError: a stream failed to read, or its steps differ in dtype or shape
            from the first stream's (named with the steps).
        TypeError: the steps are not arrays of numbers, text or bytes (objects,
            structured arrays); a ``key`` that is not text; a timeout that is not a
            number.
        OSError: ``errno.ENOSPC`` when the steps left to write would not fit the disk.
        ValueError: an ``on_change`` not known, streams all empty, a timeout that is
            NaN or negative (``timeout`` 0), an empty ``path``.
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
    timeout = _seconds(timeout, "timeout", none=True)
    lock_timeout = _seconds(lock_timeout, "lock_timeout", none=False)
    if key is not None and not isinstance(key, str):
        raise TypeError(
            f"key must be text (or None), got {type(key).__name__}: the manifest keeps "
            "it as JSON, and a key that JSON gives back otherwise (a tuple) would make the "
            "store again at every call"
        )
    if not os.fspath(path):
        raise ValueError("path is empty: give the store's folder (an empty path is not '.')")
    refs = as_refs(streams, lengths)
    folder = os.path.abspath(os.fspath(path))
    os.makedirs(folder, exist_ok=True)
    fn = None if transform is None else Transform(transform, seed=check_int(seed, "seed", 0))
    with build_lock(folder, lock_timeout) as writable:
        stored = _build(refs, folder, fn, num_workers, on_change, key, timeout, writable)
    if isinstance(streams, Mixture):
        bounds = streams.spec.bounds
        parts = [stored[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        return Mixture(stored, streams.spec, parts)
    return stored


def _seconds(value: Any, name: str, none: bool) -> float | None:
    """``value`` checked as seconds: a number, not NaN; ``timeout`` > 0 (or ``None``).

    Example:
        >>> _seconds(2, "timeout", True), _seconds(float("inf"), "lock_timeout", False)
        (2.0, inf)
        >>> _seconds(float("nan"), "lock_timeout", False)
        Traceback (most recent call last):
        ...
        ValueError: lock_timeout must be >= 0 seconds (inf: no limit), got nan
    """
    if value is None and none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        what = " (or None)" if none else ""
        raise TypeError(f"{name} must be a number of seconds{what}, got {value!r}")
    seconds = float(value)
    if none and not seconds > 0:  # (NaN too)
        raise ValueError(f"{name} must be > 0 seconds (None: no limit), got {value}")
    if not seconds >= 0:
        raise ValueError(f"{name} must be >= 0 seconds (inf: no limit), got {value}")
    return seconds


def _build(
    refs: list[StreamRef],
    folder: str,
    fn: Transform | None,
    num_workers: int,
    on_change: str,
    key: str | None,
    timeout: float | None,
    writable: bool,
) -> StoreTable:
    """Bring the store in ``folder`` up to date with ``refs`` (holding its lock).

    With ``writable`` false (a folder this process cannot write), a complete store that
    matches the sources is read, and anything else is a :class:`SourceError`.
    """
    lengths = np.array([len(r) for r in refs], dtype=np.int64)
    for ref in refs:
        check_source(ref)
    records = [source_record(r) for r in refs]
    spec = _first_spec(refs, lengths, fn)
    config = {
        "version": layout.VERSION,
        "streams": len(refs),
        "lengths_sha256": lengths_digest(lengths),
        "steps": int(lengths.sum()),
        "spec": spec,
        "transform": None if fn is None else transform_name(fn.fn),
        "seed": None if fn is None else fn.seed,
        "key": key,
    }
    found = _contents(folder, writable)
    if found is None and writable:
        _check_own(folder)
    plan = _reusable(refs, folder, found, config, records, on_change)
    pending = np.flatnonzero(~plan.done & (lengths > 0))
    empty = np.flatnonzero(~plan.done & (lengths == 0))
    manifest = {**config, "generation": plan.generation, "records": records, "complete": True}
    if found is not None and layout.manifest_body(found.manifest, "files") == manifest:
        keep_verified(folder, found, locked=writable)  # (a copy: its files' identity)
        return store_table(folder, found.manifest, found.index)  # complete, as the streams are
    if not writable:
        raise SourceError(
            folder,
            "the store is not complete or does not match the streams, and its folder is "
            "not writable: make it where it can be written, or give the streams it was "
            "made from",
        )
    per_step = layout.step_bytes(spec)
    copy = 0 if plan.copy_from is None else sum(layout.leaf_bytes(spec, config["steps"]))
    _check_space(folder, lengths[pending], per_step, copy)
    index = make_index(lengths)
    if found is None or plan.generation != found.manifest["generation"]:
        start_generation(folder, plan, {**manifest, "complete": False}, index)
    else:
        layout.write_manifest(folder, {**manifest, "complete": False})
    layout.remove_other_generations(folder, plan.generation)
    if len(empty):
        layout.append_done(folder, plan.generation, empty)
    if len(pending):
        build = _Build(
            folder,
            plan.generation,
            refs,
            index[:, 0],
            lengths,
            layout.leaf_layout(spec),
            fn,
            records,
        )
        log.info("materialize: writing %d streams into %s", len(pending), folder)
        _run(build, _tasks(pending, lengths, per_step, num_workers), num_workers, timeout)
    leaves = len(layout.leaf_layout(spec))
    manifest = {**manifest, "files": record_files(folder, plan.generation, leaves)}
    layout.write_manifest(folder, manifest)
    return store_table(folder, manifest, index)


#: the address in a default ``repr`` (``<Crop object at 0x7f...>``): another every run
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def transform_name(fn: Callable[..., Any]) -> str:
    """What names a transform in a store's manifest: the same every run, arguments and all.

    A function by its qualified name and a digest of its code, defaults and closure
    (see :func:`_function_text`); a ``functools.partial`` with its arguments; an
    object with a ``repr`` of its own by that ``repr``, one with the default ``repr``
    (its address, another every run) by its type and attributes. Arrays among them are
    named by a digest of their bytes. Another name makes the store again.

    A credential among them (a ``storage_options``, a ``token=``, a URL's password:
    see :func:`streamseq._redact.redact_text`) is never written: it is hidden, and the
    name ends with a slow salted digest of the whole text instead, so that another value
    of an argument hidden (a ``key="rgb"`` that is a setting) still makes the store again.

    Example:
        >>> import functools
        >>> class Crop:
        ...     def __init__(self, n):
        ...         self.n = n
        >>> transform_name(Crop(8)), transform_name(functools.partial(np.clip, a_max=3))
        ('Crop(n=8)', 'clip(a_max=3)')
        >>> transform_name(functools.partial(np.clip, token="s3cr3t"))[:16]
        'clip(token=***)#'
    """
    text = _name(fn)
    hidden = redact_text(text)
    if hidden == text:
        return text
    return f"{hidden}#{_slow_digest(text)}"


def _slow_digest(text: str) -> str:
    """A digest of ``text`` that holds a credential: costly to reverse by trying guesses."""
    raw = hashlib.pbkdf2_hmac("sha256", text.encode(), b"streamseq.transform_name", 200_000)
    return raw.hex()[:32]


def _name(fn: Callable[..., Any]) -> str:
    """What names ``fn`` (see :func:`transform_name`), credentials and all."""
    if isinstance(fn, functools.partial):
        args = [_stable(a) for a in fn.args]
        args += [f"{k}={_stable(v)}" for k, v in sorted(fn.keywords.items())]
        return f"{_name(fn.func)}({', '.join(args)})"
    name = getattr(fn, "__qualname__", None)
    if isinstance(fn, types.FunctionType) and isinstance(name, str):
        return f"{name}#{_slow_digest(_function_text(fn))[:16]}"
    if isinstance(name, str):
        return name
    text = repr(fn)
    if not _ADDRESS.search(text):
        return text
    fields = sorted((getattr(fn, "__dict__", None) or {}).items())
    return f"{type(fn).__qualname__}({', '.join(f'{k}={_stable(v)}' for k, v in fields)})"


def _function_text(fn: types.FunctionType) -> str:
    """What a function computes, as text the same every run: its code, defaults, closure.

    Its bytecode, constants and names (nested functions' too), and the settings among
    its default arguments and the values its closure holds now (numbers, text, arrays:
    see :func:`_shallow`): a function edited under the same name, or one whose closure
    holds another factor, is another transform. (Globals it reads, and what lists,
    dicts or objects it holds contain, are not in it: name them with ``key``.)
    """
    parts: list[str] = []

    def code(c: types.CodeType) -> None:
        parts.append(c.co_code.hex())
        parts.append(repr(c.co_names))
        for const in c.co_consts:
            if isinstance(const, types.CodeType):
                code(const)
            else:
                parts.append(_ADDRESS.sub("", repr(const)))

    code(fn.__code__)
    parts += [_shallow(v) for v in fn.__defaults__ or ()]
    parts += [f"{k}={_shallow(v)}" for k, v in sorted((fn.__kwdefaults__ or {}).items())]
    for cell in fn.__closure__ or ():
        try:
            parts.append(_shallow(cell.cell_contents))
        except ValueError:  # (a cell not filled yet)
            parts.append("<empty>")
    return "\n".join(parts)


#: values a function's closure or defaults name by value (others by their type: a list,
#: a dict, an object that the function may change as it runs is state, not a setting)
_SETTINGS = (numbers.Number, str, bytes, type(None), np.ndarray)


def _shallow(value: Any) -> str:
    """A setting (number, text, array, a tuple of them) by value, anything else by type."""
    if isinstance(value, tuple) and all(isinstance(v, _SETTINGS) for v in value):
        return _stable(value)
    if isinstance(value, _SETTINGS):
        return _stable(value)
    return getattr(value, "__qualname__", None) or type(value).__qualname__


def _stable(value: Any) -> str:
    """``value`` as text that is the same every run (see :func:`transform_name`)."""
    if isinstance(value, np.ndarray):
        return content_digest([value])
    if callable(value):
        return _name(value)
    return _ADDRESS.sub("", repr(value))


def _contents(folder: str, writable: bool) -> Contents | None:
    """The checked contents of the store in ``folder``; ``None`` when there is none to keep.

    A damaged store (see :mod:`streamseq.store.check`) is made again (told in the log);
    where the folder cannot be written, it is a :class:`SourceError`.
    """
    try:
        return read_store(folder)
    except Damaged as e:
        if not writable:
            raise SourceError(folder, f"{e}, and the folder is not writable") from None
        _check_own(folder)  # (a manifest.json of another's is not a store to make again)
        log.warning("materialize: %s: %s; the store is made again", folder, e)
        return None


def _check_own(folder: str) -> None:
    """Raise a :class:`SourceError` when ``folder``, holding no store, holds other files.

    A store is made in an empty folder or in a store's own: a build writes its
    manifest and index and removes data files of other generations, which must never
    be files the user keeps there (a folder of recordings given by mistake).
    """
    foreign = layout.foreign_names(folder)
    if foreign:
        shown = ", ".join(foreign[:5]) + (
            f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        )
        raise SourceError(
            folder,
            f"not a store, and not empty: it holds {shown}; a store is made in an empty "
            "folder (or its own): give another path",
        )


def _first_spec(refs: list[StreamRef], lengths: np.ndarray, fn: Transform | None) -> Any:
    """The step layout (see :func:`layout.encode_spec`) of the first stream with steps.

    Raises:
        TypeError: its step is not one a store can hold, naming the stream.
    """
    nonempty = np.flatnonzero(lengths)
    first = _first_step(refs, lengths, fn)
    try:
        return layout.encode_spec(first)
    except TypeError as e:
        i = int(nonempty[0])
        raise TypeError(f"stream {i} ({describe(refs[i].source)}), steps 0:1: {e}") from None


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
    found: Contents | None,
    config: dict[str, Any],
    records: list[Any],
    on_change: str,
) -> Plan:
    """Which files the streams are written into, and what they already hold.

    A stream written whole is kept in its files; every other stream is written into them.
    A store that is absent, made from other settings, or that says it is complete but
    is not, is made again in a new generation; so is one where the source of a stream
    written changed (the other streams copied over), since a process may have mapped
    the steps written (``on_change="error"``: a :class:`SourceError` instead).
    """
    if found is None:
        return Plan(layout.new_generation(), np.zeros(len(records), bool), None)
    manifest = found.manifest
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
        return Plan(layout.new_generation(), np.zeros(len(records), bool), None)
    done = found.done
    if manifest.get("complete") is True and not done.all():
        log.warning("materialize: %s: the done log lacks streams; made again", folder)
        return Plan(layout.new_generation(), np.zeros(len(records), bool), None)
    changed = np.array([a != b for a, b in zip(before, records, strict=True)], bool)
    if (changed & done).any():
        log.warning("materialize: %d changed streams written again", int(changed.sum()))
        return Plan(layout.new_generation(), done & ~changed, manifest["generation"])
    return Plan(manifest["generation"], done & ~changed, None)


def _check_space(folder: str, lengths: np.ndarray, per_step: int, copy: int) -> None:
    """Raise ``OSError(ENOSPC)`` when what is left to write does not fit the free space.

    That is the steps left, and ``copy`` bytes of streams kept copied into new files.
    """
    steps = int(lengths.sum())
    need = steps * per_step + copy
    free = shutil.disk_usage(folder).free
    log.info("materialize: %d steps x %d bytes = %d bytes to write", steps, per_step, need)
    if need > free:
        copied = f" and {copy} bytes of the streams kept, copied into new files" if copy else ""
        raise OSError(
            errno.ENOSPC,
            f"the store needs {need} bytes ({len(lengths)} streams, {steps} steps x "
            f"{per_step} bytes a step{copied}) but {free} bytes are free on its disk",
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
            layout.append_done(build.folder, build.generation, _write_task(build, task))
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
                    layout.append_done(build.folder, build.generation, future.result())
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
        os.open(os.path.join(build.folder, layout.leaf_file(i, build.generation)), os.O_WRONLY)
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
            for leaf, (fd, size, arr) in enumerate(zip(fds, sizes, arrays, strict=True)):
                try:
                    _pwrite(fd, arr, (offset + a) * size)
                except OSError as e:
                    raise _write_error(build, ref, leaf, e, (a, b)) from None
        check_copied(ref, build.records[i], n)
    finally:
        ref.close()


def _write_error(
    build: _Build, ref: StreamRef, leaf: int, error: OSError, steps: tuple[int, int]
) -> OSError:
    """``error`` of a write into a data file, naming the stream, its steps and the file.

    It stays an :class:`OSError` of the same ``errno`` (``ENOSPC`` for a disk that
    filled after the space was checked: another process wrote there).
    """
    path = os.path.join(build.folder, layout.leaf_file(leaf, build.generation))
    return OSError(
        error.errno,
        f"stream {ref.index} ({describe(ref.source)}), steps {steps[0]}:{steps[1]}: cannot "
        f"be written into the store ({error.strerror or error}); the streams written "
        "whole are kept and this one is not recorded: make room and call materialize "
        "again",
        path,
    )


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
