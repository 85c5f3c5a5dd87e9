import functools
import gc
import os
import pathlib
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamseq import StreamLoader
from streamseq.errors import StreamError
from streamseq.read.ref import StreamRef, as_refs, describe, is_stream


def failing_opener():
    raise OSError("disk on fire")


def test_array_and_opener_are_told_apart():
    assert is_stream(np.arange(3))
    assert not is_stream(functools.partial(np.arange, 3))


def test_opener_is_called_lazily_and_once_per_process():
    calls = []

    def opener():
        calls.append(os.getpid())
        return np.arange(5)

    ref = StreamRef(0, opener, length=5)
    assert calls == []
    assert ref.read(1, 3).tolist() == [1, 2]
    assert ref.read(3, 5).tolist() == [3, 4]
    assert calls == [os.getpid()]


def test_length_is_measured_without_keeping_the_opener_open():
    ref = StreamRef(0, functools.partial(np.arange, 7))
    assert len(ref) == 7
    assert not ref.is_open


def test_opener_error_names_the_stream_and_chains_the_cause():
    ref = StreamRef(4, failing_opener, length=3)
    with pytest.raises(StreamError, match=r"stream 4 \(.*failing_opener.*\): opening failed") as e:
        ref.read(0, 1)
    assert isinstance(e.value.__cause__, OSError)
    assert e.value.index == 4


@pytest.mark.parametrize("declared", [0, 3, 5])
def test_declared_length_of_an_array_must_be_its_length(declared):
    with pytest.raises(
        StreamError, match=f"stream 2.*declared length {declared} but the stream has 4"
    ):
        StreamRef(2, np.arange(4), length=declared)


def test_short_opened_stream_is_an_error_naming_it():
    ref = StreamRef(2, functools.partial(np.arange, 3), length=5)
    with pytest.raises(StreamError, match="stream 2.*declared length 5 but the stream has 3"):
        ref.read(0, 1)


class Shrinking:
    """A stream that claims 10 steps but returns fewer past step 6."""

    def __len__(self):
        return 10

    def __getitem__(self, key):
        return np.arange(10)[key][: max(0, 6 - key.start)]


def test_read_returning_too_few_steps_is_an_error():
    ref = StreamRef(1, Shrinking())
    assert ref.read(0, 4).tolist() == [0, 1, 2, 3]
    with pytest.raises(
        StreamError,
        match=r"stream 1.*steps 4:8 returned 2 steps, not 4, though its length is 10 \(its "
        r"slices return fewer steps than its len\(\) says\)",
    ):
        ref.read(4, 8)


def test_non_stream_non_callable_is_a_type_error():
    with pytest.raises(TypeError, match="stream 0"):
        StreamRef(0, 42)


def test_opener_returning_a_non_stream_is_an_error():
    with pytest.raises(StreamError, match="not a stream"):
        StreamRef(0, functools.partial(int, 3)).read(0, 1)


def test_declared_length_spares_the_len_probe():
    class NoLen(Shrinking):
        def __len__(self):
            raise AssertionError("len() must not be called")

    assert StreamRef(0, NoLen(), length=6).read(0, 6).tolist() == list(range(6))


def test_a_path_is_not_a_stream():
    with pytest.raises(TypeError, match=r"stream 3 \('a.npy'\) is a path, not a stream"):
        StreamRef(3, "a.npy")


def test_each_source_is_told_apart_by_itself_not_by_its_type():
    import types

    as_refs([types.SimpleNamespace(__len__=None, __getitem__=None)])  # a "stream" by hasattr
    with pytest.raises(TypeError, match="expected a stream"):
        as_refs([types.SimpleNamespace()])  # the same type: judged anew


def test_sources_of_every_kind():
    refs = as_refs([np.arange(3), functools.partial(np.arange, 4), [1, 2], np.arange(5)])
    assert [len(r) for r in refs] == [3, 4, 2, 5]
    with pytest.raises(TypeError, match=r"stream 1 .* is a path"):
        as_refs([np.arange(3), pathlib.Path("a.npy")])
    with pytest.raises(TypeError, match=r"stream 2 .* got float"):
        as_refs([np.arange(3), np.arange(2), 1.5])


def test_as_refs_pauses_the_collector_and_restores_it():
    gc.enable()
    with pytest.raises(TypeError):
        as_refs([np.arange(3), 42])
    assert gc.isenabled()
    as_refs([np.arange(3)], lengths=np.array([3]))
    assert gc.isenabled()
    gc.disable()
    try:
        as_refs([np.arange(3)])
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()


def test_lengths_may_be_any_integer_sequence():
    for lengths in ([3, 2], np.array([3, 2], np.uint32), (3.0, 2.0)):
        assert [len(r) for r in as_refs([np.arange(3), np.arange(2)], lengths)] == [3, 2]


def test_list_streams_read_as_arrays():
    assert StreamRef(0, [[1, 2], [3, 4], [5, 6]]).read(1, 3).tolist() == [[3, 4], [5, 6]]


def test_closable_streams_given_directly_are_closed_when_left():
    class Closable(Shrinking):
        closed = 0

        def close(self):
            Closable.closed += 1

    ref = StreamRef(0, Closable())
    ref.read(0, 2)
    ref.close()
    assert Closable.closed == 1


def test_pickling_drops_the_open_stream():
    ref = StreamRef(0, functools.partial(np.arange, 4))
    ref.read(0, 1)
    clone = pickle.loads(pickle.dumps(ref))
    assert not clone.is_open
    assert clone.read(2, 4).tolist() == [2, 3]


def test_dict_and_tuple_steps():
    stream = (np.arange(6).reshape(3, 2), np.arange(3))
    ref = StreamRef(0, _TupleStream(stream))
    a, b = ref.read(1, 3)
    assert a.tolist() == [[2, 3], [4, 5]] and b.tolist() == [1, 2]


class _TupleStream:
    def __init__(self, arrays):
        self.arrays = arrays

    def __len__(self):
        return len(self.arrays[0])

    def __getitem__(self, key):
        return tuple(a[key] for a in self.arrays)


@pytest.mark.parametrize(
    "streams, lengths, message",
    [
        ([], None, "no streams"),
        ([np.arange(2)], [1, 2], "2 lengths given for 1 streams"),
        ([np.arange(2)], [-1], "negative length for stream 0"),
    ],
)
def test_as_refs_bad_input(streams, lengths, message):
    with pytest.raises(ValueError, match=message):
        as_refs(streams, lengths)


def test_describe_is_short_for_big_arrays():
    assert describe(np.zeros((1000, 3))) == "ndarray(shape=(1000, 3), dtype=float64)"


def test_identity_names_files_not_contents(tmp_path):
    from streamseq.read.ref import identity

    class Source:
        path = tmp_path / "clip.mp4"

    assert identity(Source()) == str(tmp_path / "clip.mp4")
    assert identity(functools.partial(np.load, tmp_path / "a.npy")) == f"load:{tmp_path}/a.npy"
    assert identity(np.arange(3)) == identity(np.arange(5)) == "ndarray"


# --- a declared length is checked wherever the length is known without reading ---------


def structured(kind, n):
    """A stream of ``n`` steps: an array, a list, or a dict or tuple of arrays (nested)."""
    x, y = np.arange(n), np.arange(2 * n).reshape(n, 2)
    return {
        "array": x,
        "list": x.tolist(),
        "dict": {"x": x, "y": y},
        "tuple": (x, y),
        "nested": {"a": (x, {"y": y}), "b": [x]},
    }[kind]


KINDS = ["array", "list", "dict", "tuple", "nested"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("declared", [0, 2, 6])
def test_a_declared_length_that_disagrees_names_the_stream(kind, declared):
    pattern = rf"stream 3 .*declared length {declared} but the stream has 5 steps"
    with pytest.raises(StreamError, match=pattern) as e:
        StreamRef(3, structured(kind, 5), length=declared)
    assert e.value.index == 3
    opened = StreamRef(3, functools.partial(structured, kind, 5), length=declared)
    with pytest.raises(StreamError, match=pattern):
        opened.read(0, min(declared, 5) or 1)
    assert len(StreamRef(3, structured(kind, 5), length=5)) == 5


@pytest.mark.parametrize("kind", ["dict", "tuple", "nested"])
@pytest.mark.parametrize("declared", [0, 2])
def test_the_loader_neither_drops_nor_cuts_a_dict_or_tuple_stream(kind, declared):
    streams = [structured(kind, 4), structured(kind, 5)]
    with pytest.raises(StreamError, match=f"stream 1 .*declared length {declared} but .* 5 steps"):
        StreamLoader(streams, 2, 2, lengths=[4, declared])


def test_arrays_of_different_lengths_name_the_stream():
    with pytest.raises(ValueError, match=r"stream 1 \(.*\): leaves disagree .*\[4, 5\]"):
        as_refs([np.arange(3), {"x": np.arange(5), "y": np.arange(4)}])


@pytest.mark.filterwarnings("ignore:batch_size=")
@settings(max_examples=30)
@given(
    st.sampled_from(KINDS),
    st.lists(st.integers(0, 6), min_size=1, max_size=4),
    st.data(),
)
def test_declared_lengths_are_used_only_when_they_are_the_lengths(kind, lengths, data):
    declared = [data.draw(st.sampled_from([n, n, max(n - 1, 0), n + 1])) for n in lengths]
    sources = [structured(kind, n) for n in lengths]
    wrong = [i for i, (d, n) in enumerate(zip(declared, lengths, strict=True)) if d != n]
    try:
        loader = StreamLoader(sources, 2, 3, lengths=declared, pin_memory=False)
    except StreamError as e:
        assert e.index == wrong[0]
        assert f"declared length {declared[e.index]} but the stream has" in str(e)
        assert f"has {lengths[e.index]} steps" in str(e)
        return
    except ValueError as e:  # every stream is empty
        assert not any(lengths) and "empty" in str(e)
        return
    assert not wrong
    steps = {}
    for b in loader:
        stream, step = np.asarray(b.stream), np.asarray(b.step)
        for s, k in zip(stream[stream >= 0].tolist(), step[stream >= 0].tolist(), strict=True):
            steps.setdefault(s, []).append(k)
    assert steps == {s: list(range(n)) for s, n in enumerate(lengths) if n}


@pytest.mark.parametrize(
    ("declared", "error", "match"),
    [
        ([3, 5.5], TypeError, r"lengths\[1\] must be an integer, got 5.5"),
        ([3, np.nan], TypeError, r"lengths\[1\] must be an integer"),
        ([3, -5], ValueError, "negative length for stream 1: -5"),
    ],
)
def test_lengths_declared_for_a_table_are_checked_as_for_a_list(declared, error, match):
    from streamseq.stream_table import StreamTable

    streams = [np.zeros(3), np.zeros(5)]
    table = StreamTable(np.zeros, [3, 5], step_spec=(np.float64, ()))
    for streams_given in (streams, table):
        with pytest.raises(error, match=match):
            as_refs(streams_given, declared)


class _Pausing:
    """A thread inside ``_collector_paused()`` until ``leave()``: the steps told by Events."""

    def __init__(self):
        import threading

        from streamseq.read.ref import _collector_paused

        self.inside, self.go = threading.Event(), threading.Event()

        def pause():
            with _collector_paused():
                self.inside.set()
                self.go.wait(30)

        self.thread = threading.Thread(target=pause, daemon=True)
        self.thread.start()
        assert self.inside.wait(30)

    def leave(self):
        self.go.set()
        self.thread.join(30)
        assert not self.thread.is_alive()


@pytest.fixture
def collector():
    """The collector as the test leaves it is set back as it was."""
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def _reported(pid, read, write):
    """What the child ``pid`` wrote in the pipe ``(read, write)``, once it ended."""
    os.close(write)
    got = os.read(read, 64)
    os.close(read)
    os.waitpid(pid, 0)
    return got


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
@pytest.mark.parametrize("enabled", [True, False])
def test_a_process_forked_while_another_thread_pauses_the_collector_collects(collector, enabled):
    """A child forked during a pause runs with the collector as it was before the pause.

    (The pausing thread, which enables it again, is not in the child: a worker forked
    then would never collect.)
    """
    (gc.enable if enabled else gc.disable)()
    other = _Pausing()
    try:
        assert not gc.isenabled()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: say whether its collector runs
            os.write(write, b"1" if gc.isenabled() else b"0")
            os._exit(0)
        got = _reported(pid, read, write)
    finally:
        other.leave()
    assert got == (b"1" if enabled else b"0")


@pytest.mark.parametrize("last", ["first", "second"])
def test_two_threads_pausing_the_collector_leave_it_off_until_both_are_done(collector, last):
    gc.enable()
    first = _Pausing()
    second = _Pausing()  # (begun while the first's pause is under way)
    done_first, done_last = (second, first) if last == "first" else (first, second)
    try:
        done_first.leave()
        assert not gc.isenabled()  # the other pause is still under way
    finally:
        done_first.go.set()
        done_last.leave()
    assert gc.isenabled()


def test_pauses_leave_a_collector_the_user_disabled_disabled(collector):
    from streamseq.read.ref import _collector_paused

    gc.disable()
    first = _Pausing()
    try:
        with _collector_paused():
            assert not gc.isenabled()
        first.go.set()
        first.thread.join(30)
        assert not gc.isenabled()
        gc.enable()  # the user enables it meanwhile: the pauses after it restore that
        second = _Pausing()
        with _collector_paused():
            second.leave()
            assert not gc.isenabled()
        assert gc.isenabled()
    finally:
        first.go.set()


@settings(max_examples=30, deadline=None)
@given(
    enabled=st.booleans(),
    depths=st.lists(st.integers(min_value=-3, max_value=3), min_size=1, max_size=8),
)
def test_nested_pauses_restore_the_collector_only_when_the_outermost_ends(enabled, depths):
    """Pauses nested in any order: off while any is under way, as before once none is."""
    import contextlib

    from streamseq.read.ref import _collector_paused

    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        with contextlib.ExitStack() as stack:
            pauses = []
            for step in depths:  # enter `step` pauses, or leave `-step` of them
                for _ in range(step):
                    pauses.append(stack.enter_context(contextlib.ExitStack()))
                    pauses[-1].enter_context(_collector_paused())
                for _ in range(min(-step, len(pauses))):
                    pauses.pop().close()
                assert gc.isenabled() == (enabled and not pauses)
        assert gc.isenabled() == enabled
    finally:
        (gc.enable if was else gc.disable)()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_child_forked_inside_a_pause_of_its_own_thread_keeps_that_pause(collector):
    """A child's count of pauses is its own: another thread's pause is gone, the forking
    thread's pause is still under way there, and ends there."""
    from streamseq.read.ref import _collector_paused

    gc.enable()
    other = _Pausing()
    try:
        with _collector_paused():
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: the collector inside its pause, and after it
                states = [gc.isenabled()]
                with _collector_paused():
                    states.append(gc.isenabled())
                states.append(gc.isenabled())
        if pid == 0:
            states.append(gc.isenabled())  # its pause ended: the collector as before it
            os.write(write, bytes(map(int, states)))
            os._exit(0)
        got = _reported(pid, read, write)
    finally:
        other.leave()
    assert list(got) == [0, 0, 0, 1]  # off in the pause it was forked in, and then on
    assert gc.isenabled()


def _segmented_row(streams=100, segments=3):
    from streamseq.read.ref import RowRefs
    from streamseq.stream_table import StreamTable

    ids = np.repeat(np.arange(streams), segments)  # each stream in `segments` segments
    return RowRefs(StreamTable(np.arange, [5] * streams), ids, ids), ids


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 299), min_size=1, max_size=12))
def test_a_row_asked_in_any_order_keeps_its_open_references_and_shares_them_by_source(order):
    refs, ids = _segmented_row()
    opened = {}
    for j in order:
        ref = refs[j]
        if int(ids[j]) in opened:  # the source open: the same reference
            assert ref is opened[int(ids[j])]
        ref.open()
        opened[int(ids[j])] = ref
    listed = list(refs)
    for j, ref in enumerate(listed):
        if int(ids[j]) in opened:
            assert ref is opened[int(ids[j])]
        if j and ids[j] == ids[j - 1]:
            assert ref is listed[j - 1]
    for ref in opened.values():
        ref.close()
    again, _ = _segmented_row()
    asked = [again[j] for j in range(len(ids))]  # in order, nothing open: a run, one reference
    assert all(asked[j] is asked[j - 1] for j in range(1, len(ids)) if ids[j] == ids[j - 1])


def test_a_row_refuses_a_float_index_whether_its_reference_was_made_or_not():
    refs, _ = _segmented_row()
    refs[1]
    with pytest.raises(TypeError):
        refs[1.0]


def test_a_state_of_openers_is_refused_by_openers_of_the_same_files_read_another_way(tmp_path):
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "io"))
    from helpers import state_refused
    from media import write_audio, write_video

    from streamseq.io import audio, tokens, video
    from streamseq.read.ref import reader_of

    paths = []
    for i, n in enumerate([11, 6, 9]):
        paths.append(str(tmp_path / f"{i}.bin"))
        np.arange(n, dtype=np.uint16).tofile(paths[-1])

    def opened(*args, **options):
        return [functools.partial(tokens, p, *args, **options) for p in paths]

    # options given as keywords, or as values that are not text: an opener's own words
    assert state_refused(opened(dtype="<u2"), opened(dtype="<i2"))
    assert state_refused(opened(np.uint16), opened(np.int16))
    assert not state_refused(opened(dtype="<u2"), opened(dtype=np.uint16))
    assert not state_refused(opened(np.uint16), opened(dtype=np.uint16))
    # the same words as the reader made by the opener says of itself
    assert reader_of(opened(dtype=">i2")[0]) == reader_of(opened(">i2")[0]()) != ""
    clip = str(write_video(tmp_path / "v.mp4", 12))
    sized = functools.partial(video, clip, size=(24, 32), threads=1)
    assert reader_of(sized) == reader_of(sized()) != reader_of(functools.partial(video, clip))
    sound = str(write_audio(tmp_path / "a.wav", 8000))
    mono = functools.partial(audio, sound, frame=512, layout=1)
    assert reader_of(mono) == reader_of(mono()) != reader_of(functools.partial(audio, sound))
    assert reader_of(mono) == reader_of(functools.partial(audio, sound, frame=512, layout="mono"))
    # an opener whose call is wrong names no reader (opening it says what is wrong)
    assert reader_of(functools.partial(tokens, paths[0], nonsense=1)) == ""
