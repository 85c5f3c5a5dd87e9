"""Check stream continuity of any batch sequence, and hypothesis strategies for layouts.

Use these to property-test your own pipelines::

    from hypothesis import given
    from streamseq.testing import check_continuity, coded_streams, layouts

    @given(layouts())
    def test_my_pipeline(layout):
        streams = coded_streams(layout.lengths)
        batches = my_pipeline(streams, layout.batch_size, layout.tbins)
        check_continuity(batches, layout.lengths, sources=streams)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._tree import leaves, tree_map
from .batch import Batch, _check_lookahead
from .read.ref import as_stream

CODE = 1 << 32


def _np(x: Any) -> np.ndarray:
    return x.numpy() if hasattr(x, "numpy") and not isinstance(x, np.ndarray) else np.asarray(x)


def _batch_major(batch: Batch, time_major: bool) -> Batch:
    fields = [tree_map(_np, f) for f in batch]
    if time_major:
        data = tree_map(lambda a: np.swapaxes(a, 0, 1), fields[0])
        fields = [data, fields[1], *(np.swapaxes(f, 0, 1) for f in fields[2:])]
    return Batch(*fields, lookahead=getattr(batch, "lookahead", 0))


def _first_difference(
    got: Any, want: Any, r: int, n: int, at: int = 0, path: str = ""
) -> str | None:
    """Where row ``r`` of batch data ``got`` (``n`` steps from ``at``) differs from ``want``.

    Dicts are matched by key, whatever their order; returns None when they agree, else
    the path of the first difference (``""`` at the top, ``" at ['x'][0]"`` inside).
    """
    where = f" at {path}" if path else ""
    if isinstance(got, dict) or isinstance(want, dict):
        if not (isinstance(got, dict) and isinstance(want, dict)) or set(got) != set(want):
            keys = sorted(got, key=str) if isinstance(got, dict) else type(got).__name__
            wanted = sorted(want, key=str) if isinstance(want, dict) else type(want).__name__
            return f"{where} (keys {keys}, source has {wanted})"
        for key in got:
            differ = _first_difference(got[key], want[key], r, n, at, f"{path}[{key!r}]")
            if differ is not None:
                return differ
        return None
    if isinstance(got, (tuple, list)) or isinstance(want, (tuple, list)):
        if not (isinstance(got, (tuple, list)) and isinstance(want, (tuple, list))) or len(
            got
        ) != len(want):
            return f"{where} (a different structure)"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            differ = _first_difference(g, w, r, n, at, f"{path}[{i}]")
            if differ is not None:
                return differ
        return None
    return None if np.array_equal(got[r, at : at + n], np.asarray(want)) else where


def check_continuity(
    batches: Iterable[Batch],
    lengths: Sequence[int],
    *,
    sources: Sequence[Any] | None = None,
    complete: bool = True,
    allow_repeats: bool = False,
    time_major: bool = False,
    segment_length: int | None = None,
    pack: bool = False,
    max_streams_per_chunk: int | None = None,
    state: dict[str, Any] | None = None,
    lookahead: int = 0,
) -> int:
    """Assert that batches stream every stream whole, in order, within one row.

    Checks, batch by batch and row by row: valid steps of a stream are consecutive across
    batches; a new stream starts at step 0, only at the start of a chunk, with ``reset``
    set, and ``reset`` is never set otherwise; a stream never moves to another row and
    never comes back (unless ``allow_repeats``, for ``pad="wrap"``); a stream ends before
    padding starts; padding has ``stream == step == -1`` and zero data; and, when
    ``complete``, every non-empty stream was delivered whole by the end.

    Args:
        batches: the batches (numpy arrays or torch tensors, ``[B, T, ...]``).
        lengths: the length of every stream, by source index.
        sources: the streams themselves (sequences, or dicts and tuples of arrays); data at
            (stream s, step k) must equal ``sources[s][k]``. Dict data is compared key by
            key: a source may list its keys in another order than the batches.
        complete: require every non-empty stream to be delivered whole (False for
            ``pad="drop"``, which may cut the streams still running at the end).
        allow_repeats: allow a stream to start again in its row (``pad="wrap"``).
        time_major: the batches are laid out ``[T, B, ...]``.
        segment_length: the loader's ``segment_length``: each segment of a stream is
            checked as a stream of its own (it starts at its first step with ``reset``,
            may go to another row than the segment before).
        pack: the batches come from ``pad="pack"``: a row goes on with its next stream
            inside a chunk (the new stream starts at its step 0; ``reset`` is set where
            a chunk starts with a stream's first step), and padding is left only at the
            end of a row. A piece that goes on with a stream from a step other than 0 (a
            segment other than a stream's first, or a stream begun before ``state``)
            has no step 0 to mark it: it must start a chunk (after padding where the
            row's piece before it ended inside a chunk), a segment with ``reset``.
        max_streams_per_chunk: with ``pack``, the loader's ``max_streams_per_chunk``: a
            chunk holds pieces of at most this many streams, and one that holds this many
            may end in padding, the row going on at the next chunk with a stream's first
            step (and ``reset``).
        state: the :meth:`~streamseq.StreamLoader.state_dict` the batches were resumed
            from: streams it saw done are done (delivered again, they are an error), and
            a stream it saw begun goes on from its next step in any row, at the start of a
            chunk, with or without ``reset`` (with ``pack``, after padding where the row's
            stream before it ended inside a chunk); ``complete`` then covers the whole
            epoch.
        lookahead: the loader's ``lookahead``: the first ``tbins`` steps of each batch
            are checked as above; the last ``lookahead`` must hold the steps that
            follow, in the same stream, each row's step at ``tbins - 1`` (padding where
            there are none), and every next-step target (input at t < tbins, target at
            t + 1 where ``stream`` is equal and ``step`` consecutive) is counted: when
            ``complete`` (and not ``allow_repeats``), every step but the first of every
            stream is a target as many times as it was delivered (exactly once), except
            the first step of a segment, or of the rest of a stream begun before
            ``state``, which is a target at most once (where the piece before it ended
            at ``tbins - 1``, in its look-ahead). A :class:`~streamseq.Batch` that
            holds its own ``lookahead`` (the loader's batches do) must hold this one.

    Returns:
        The number of batches checked.

    Raises:
        AssertionError: naming the first batch and row that break continuity.
        TypeError: ``lookahead`` is not an integer.
        ValueError: ``lookahead`` is negative.

    Example:
        >>> from streamseq import StreamLoader
        >>> streams = [np.arange(n) for n in (5, 3, 4)]
        >>> check_continuity(StreamLoader(streams, 2, 2), [5, 3, 4], sources=streams)
        4
        >>> run = StreamLoader(streams, 2, 2); it = iter(run); _ = next(it)
        >>> wider = StreamLoader(streams, 3, 2); wider.load_state_dict(run.state_dict())
        >>> check_continuity(wider, [5, 3, 4], state=run.state_dict())
        2
    """
    lengths = [int(n) for n in lengths]
    lookahead = _check_lookahead(lookahead)
    if sources is not None:
        sources = [as_stream(source) for source in sources]
    n_ = segment_length

    def unit_of(sid: int, step: int) -> tuple[int, int]:
        return sid, (step // n_ if n_ else 0)

    def first(unit: tuple[int, int]) -> int:  # first step of a stream (or segment)
        return unit[1] * n_ if n_ else 0

    def end(unit: tuple[int, int]) -> int:  # step after its last
        return min(lengths[unit[0]], (unit[1] + 1) * n_) if n_ else lengths[unit[0]]

    def name(unit: tuple[int, int]) -> str:
        return f"stream {unit[0]}" + (f" segment {unit[1]}" if n_ else "")

    current: dict[int, tuple[int, int]] = {}  # row -> stream (or segment) being read
    expected: dict[int, int] = {}  # row -> next step of that stream
    owner: dict[tuple[int, int], int] = {}  # stream (or segment) -> row
    done: dict[tuple[int, int], int] = {}  # stream (or segment) -> times completed
    pending: dict[tuple[int, int], int] = {}  # begun before the state -> its next step
    if state is not None:
        done, pending = _resumed_from(state, lengths, segment_length)
    resumed_at = {(unit[0], k) for unit, k in pending.items()}  # where begun streams go on

    def check_run(where: str, run: int, sid: int, k0: int, m: int, reset_r: bool, r: int) -> None:
        """Steps ``k0 : k0 + m`` of stream ``sid``: the ``run``-th piece of row ``r``'s chunk."""
        assert 0 <= sid < len(lengths), f"{where}: unknown stream index {sid}"
        unit = unit_of(sid, k0)
        starts = k0 == first(unit) and current.get(r) != unit
        if current.get(r) == unit and expected[r] == end(unit) and k0 == first(unit):
            starts = True  # the same stream again (wrap)
        goes_on = current.get(r) != unit and pending.get(unit) == k0
        if goes_on:  # begun before the state: it goes on here, at a chunk
            del pending[unit]
            assert run == 0, f"{where}: {name(unit)} goes on at step {k0} inside the chunk"
        if pack and starts and k0 > 0:  # a segment but a stream's first: nothing but
            assert run == 0, (  # reset (at a chunk) marks where it starts
                f"{where}: {name(unit)} starts at step {k0} inside the chunk, after "
                f"{name(current[r]) if r in current else 'another stream'}: neither "
                "step == 0 nor reset marks it"
            )
        if starts or goes_on:
            if run == 0 and starts:
                assert reset_r, f"{where}: {name(unit)} starts without reset"
            if r in current:
                prev = current[r]
                assert expected[r] == end(prev), (
                    f"{where}: {name(prev)} left at step {expected[r]} of {end(prev)}"
                    f" for {name(unit)}"
                )
                done[prev] = done.get(prev, 0) + 1
            assert owner.get(unit, r) == r, (
                f"{where}: {name(unit)} was already read in row {owner[unit]}"
            )
            assert allow_repeats or unit not in done, f"{where}: {name(unit)} delivered twice"
            current[r], expected[r], owner[unit] = unit, k0 if goes_on else first(unit), r
        else:
            assert run == 0, f"{where}: {name(unit)} appears at step {k0} inside the chunk"
            assert not reset_r, f"{where}: reset set in the middle of {name(unit)}"
            assert current.get(r) == unit, (
                f"{where}: {name(unit)} appears at step {k0} without its start "
                f"(row was reading {current.get(r)})"
            )
        assert k0 == expected[r], f"{where}: {name(unit)} jumps from step {expected[r]} to {k0}"
        expected[r] += m
        assert expected[r] <= end(unit), f"{where}: {name(unit)} goes past its end {end(unit)}"

    ended: set[int] = set()  # rows padded for good (pad="pack": padding at row ends only)
    delivered: dict[tuple[int, int], int] = {}  # (stream, step) -> times delivered
    targets: dict[tuple[int, int], int] = {}  # (stream, step) -> times a next-step target
    count = 0
    for i, raw in enumerate(batches):
        own = getattr(raw, "lookahead", 0)  # (a Batch of the loader's holds its own)
        assert not own or own == lookahead, (
            f"check_continuity(lookahead={lookahead}): batch {i} holds lookahead={own} "
            f"look-ahead steps; pass lookahead={own}"
        )
        b = _batch_major(raw, time_major)
        if lookahead:
            b = _check_ahead(b, lookahead, lengths, sources, i, delivered, targets)
        valid, stream, step, reset = b.valid.astype(bool), b.stream, b.step, b.reset.astype(bool)
        data = leaves(b.data)
        t = valid.shape[1]
        for r in range(valid.shape[0]):
            where = f"batch {i}, row {r}"
            v, s, k = valid[r], stream[r], step[r]
            n = int(v.sum())
            assert v[:n].all(), f"{where}: valid steps are not a prefix of the chunk: {v.tolist()}"
            assert (s[n:] == -1).all() and (k[n:] == -1).all(), (
                f"{where}: padding must have stream and step -1"
            )
            for a in data:
                assert not np.any(a[r, n:]), f"{where}: padding data is not zero"
            if n and r in ended:  # (only a piece that goes on with a stream, at a chunk:
                unit = unit_of(int(s[0]), int(k[0]))  # begun before the state, or a
                k0 = int(k[0])  # segment but a stream's first)
                assert pending.get(unit) == k0 or 0 < k0 == first(unit), (
                    f"{where}: data after padding in a packed row"
                )
                ended.discard(r)
            if n == 0:
                assert not reset[r], f"{where}: reset set on a chunk of padding"
                if pack:
                    ended.add(r)
                if r in current:
                    unit = current.pop(r)
                    assert expected[r] == end(unit), (
                        f"{where}: {name(unit)} stopped at step {expected[r]} of {end(unit)}"
                        " and the row went on with padding"
                    )
                    done[unit] = done.get(unit, 0) + 1
                continue
            # runs: pieces of one stream (or segment) with consecutive steps
            cuts = [0]
            for j in range(1, n):
                if s[j] != s[j - 1] or k[j] != k[j - 1] + 1 or (n_ and k[j] % n_ == 0):
                    cuts.append(j)
            cap = max_streams_per_chunk if pack else None
            assert cap is None or len(cuts) <= cap, (
                f"{where}: {len(cuts)} streams in a chunk, at most {cap} "
                f"(max_streams_per_chunk): {s[:n].tolist()}"
            )
            if not pack and len(cuts) > 1:
                same = (s[:n] == s[0]).all()
                assert same, f"{where}: a chunk spans two streams: {s.tolist()}"
                raise AssertionError(f"{where}: steps are not consecutive: {k[:n].tolist()}")
            for run, c0 in enumerate(cuts):
                c1 = cuts[run + 1] if run + 1 < len(cuts) else n
                check_run(where, run, int(s[c0]), int(k[c0]), c1 - c0, bool(reset[r]), r)
                if sources is not None:
                    sid, k0, m = int(s[c0]), int(k[c0]), c1 - c0
                    want = sources[sid][k0 : k0 + m]
                    differ = _first_difference(b.data, want, r, m, c0)
                    assert differ is None, (
                        f"{where}: data of stream {sid} steps {k0}:{k0 + m} "
                        f"differ from the source{differ}"
                    )
            if n < t:
                unit = current[r]
                assert expected[r] == end(unit), (
                    f"{where}: {name(unit)} padded at step {expected[r]} before its end"
                )
                if pack and (cap is None or len(cuts) < cap):  # (capped: goes on at a chunk)
                    ended.add(r)
        count += 1
    for r, unit in current.items():
        if expected[r] == end(unit):
            done[unit] = done.get(unit, 0) + 1
    if complete:
        for sid, n in enumerate(lengths):
            for seg in range(-(-n // n_) if n_ else (1 if n > 0 else 0)):
                unit = (sid, seg)
                assert unit in done, (
                    f"{name(unit)} ({n} steps) was not delivered whole "
                    f"(row {owner.get(unit)}, reached step "
                    f"{expected.get(owner.get(unit, -1), 0) if unit in owner else 0})"
                )
        if lookahead and not allow_repeats:
            _check_targets(delivered, targets, segment_length, resumed_at)
    return count


def _check_ahead(
    b: Batch,
    lookahead: int,
    lengths: Sequence[int],
    sources: Sequence[Any] | None,
    i: int,
    delivered: dict[tuple[int, int], int],
    targets: dict[tuple[int, int], int],
) -> Batch:
    """Check the look-ahead steps of batch ``i``, count its targets; return its first tbins."""
    valid, stream, step = b.valid.astype(bool), b.stream, b.step
    t = valid.shape[1] - lookahead
    assert t >= 1, f"batch {i}: {valid.shape[1]} steps, fewer than lookahead={lookahead} + 1"
    data = leaves(b.data)
    for r in range(valid.shape[0]):
        where = f"batch {i}, row {r}, look-ahead"
        n, s, k = 0, -1, -1
        if valid[r, t - 1]:
            s, k = int(stream[r, t - 1]), int(step[r, t - 1])
            n = max(0, min(lookahead, lengths[s] - 1 - k))
        got = (valid[r, t:].tolist(), stream[r, t:].tolist(), step[r, t:].tolist())
        want_steps = [k + 1 + j if j < n else -1 for j in range(lookahead)]
        want = ([j < n for j in range(lookahead)], [s if j < n else -1 for j in range(lookahead)])
        assert got == (*want, want_steps), (
            f"{where}: (valid, stream, step) {got}, expected {(*want, want_steps)} after "
            f"stream {s} step {k}"
        )
        for a in data:
            assert not np.any(a[r, t + n :]), f"{where}: padding data is not zero"
        if sources is not None and n:
            differ = _first_difference(b.data, sources[s][k + 1 : k + 1 + n], r, n, t)
            assert differ is None, (
                f"{where}: data of stream {s} steps {k + 1}:{k + 1 + n} differ from the "
                f"source{differ}"
            )
        v, ss, kk = valid[r, : t + 1], stream[r, : t + 1], step[r, : t + 1]
        pair = v[:-1] & v[1:] & (ss[:-1] == ss[1:]) & (kk[1:] == kk[:-1] + 1)
        for j in np.flatnonzero(pair).tolist():
            key = (int(ss[j + 1]), int(kk[j + 1]))
            targets[key] = targets.get(key, 0) + 1
        for j in np.flatnonzero(v[:t]).tolist():
            key = (int(ss[j]), int(kk[j]))
            delivered[key] = delivered.get(key, 0) + 1
    head = tree_map(lambda a: a[:, :t], b.data)
    return Batch(head, b.reset, b.valid[:, :t], stream[:, :t], step[:, :t])


def _check_targets(
    delivered: dict[tuple[int, int], int],
    targets: dict[tuple[int, int], int],
    segment_length: int | None,
    starts: set[tuple[int, int]],
) -> None:
    """Every step delivered but the first of a stream is a target as often as delivered.

    The first step of a segment, and ``starts`` (steps where a piece begun before a
    resume goes on), are targets at most once: after a resume, where the piece before
    it ends, even if the step itself was delivered before the resume.
    """
    for (s, k), times in targets.items():
        first = (segment_length and k % segment_length == 0) or (s, k) in starts
        assert (s, k) in delivered or (first and times == 1), (
            f"stream {s} step {k} is a next-step target {times} times but was never delivered"
        )
    for (s, k), times in delivered.items():
        got = targets.get((s, k), 0)
        if k == 0:
            assert got == 0, f"stream {s} step 0 is a next-step target {got} times"
        elif (segment_length and k % segment_length == 0) or (s, k) in starts:
            assert got <= times, (
                f"stream {s} step {k} (a piece's first) is a next-step target {got} times"
            )
        else:
            assert got == times, (
                f"stream {s} step {k} is a next-step target {got} times, delivered {times}"
            )


def _resumed_from(
    state: dict[str, Any], lengths: Sequence[int], segment_length: int | None
) -> tuple[dict[tuple[int, int], int], dict[tuple[int, int], int]]:
    """Units (stream, segment) a state saw done, and those begun with their next step."""
    from .plan.fields import read_progress
    from .plan.progress import Progress
    from .plan.segments import segments

    source, start, length = segments(np.asarray(lengths, np.int64), segment_length)
    progress = Progress.from_state(read_progress(state["progress"]), length)

    def unit(u: int) -> tuple[int, int]:
        seg = int(start[u]) // segment_length if segment_length else 0
        return int(source[u]), seg

    done = {unit(u): 1 for u in np.flatnonzero(progress.done & (length > 0)).tolist()}
    begun = zip(progress.begun.tolist(), progress.next.tolist(), strict=True)
    pending = {unit(u): int(start[u]) + k for u, k in begun}
    return done, pending


def coded_streams(lengths: Sequence[int], shape: tuple[int, ...] = ()) -> list[np.ndarray]:
    """In-memory int64 streams whose value at (stream s, step k) is ``s * 2**32 + k + 1``.

    Never zero, so padding is told from data; extra ``shape`` dimensions repeat the code.

    Example:
        >>> [a.tolist() for a in coded_streams([2, 1])]
        [[1, 2], [4294967297]]
    """
    return [
        np.broadcast_to(
            (s * CODE + np.arange(n, dtype=np.int64) + 1).reshape(n, *[1] * len(shape)),
            (n, *shape),
        ).copy()
        for s, n in enumerate(lengths)
    ]


@dataclass(frozen=True)
class Layout:
    """A stream layout for property tests: stream lengths, batch size and chunk size."""

    lengths: tuple[int, ...]
    batch_size: int
    tbins: int


def _strategies() -> Any:
    """:mod:`hypothesis.strategies`, or an ImportError that names the extra to install."""
    try:
        from hypothesis import strategies
    except ImportError as e:
        raise ImportError(
            "streamseq.testing's strategies need hypothesis: pip install 'streamseq[testing]'"
        ) from e
    return strategies


def stream_lengths(max_streams: int = 12, max_length: int = 20, min_streams: int = 1) -> Any:
    """Hypothesis strategy: lists of stream lengths with at least one non-empty stream.

    Example:
        >>> from hypothesis import find
        >>> lengths = find(stream_lengths(), lambda ls: len(ls) > 2)
        >>> len(lengths), sum(lengths) > 0
        (3, True)
    """
    st = _strategies()

    return st.lists(st.integers(0, max_length), min_size=min_streams, max_size=max_streams).filter(
        any
    )


def layouts(
    max_streams: int = 12, max_length: int = 20, max_batch: int = 6, max_tbins: int = 6
) -> Any:
    """Hypothesis strategy: :class:`Layout` values (lengths, batch size, tbins).

    Example:
        >>> from hypothesis import find
        >>> find(layouts(), lambda lay: lay.batch_size > 1).batch_size
        2
    """
    st = _strategies()

    return st.builds(
        Layout,
        lengths=stream_lengths(max_streams, max_length).map(tuple),
        batch_size=st.integers(1, max_batch),
        tbins=st.integers(1, max_tbins),
    )
