"""A hostile user, as a state machine: every batch held stays as it was delivered.

The machine drives a loader (0 or 2 workers, persistent or not, packed or not, plain or
dict data, wide steps whose batches read in this process are over memory kept between
batches (:func:`streamseq.gather.writer.new_array`), or the same streams stored by
:func:`materialize`: read in this process, or with 2 workers by the workers) and, in
lockstep, the same loader over the arrays read in this process (``num_workers=0``): the
reference.
It holds batches and views of every kind, starts passes and leaves them early, sets
epochs, saves and loads states (its own, and those of a loader with another batch
size), forks children that check their batches after the parent dropped and reused
them and children that read on in the parent's pass (a store's next batch copied ahead),
indexes the loader from another thread during a pass, closes and deletes loaders. After
every step, every batch delivered equals the reference's, and everything held equals its
copy taken at delivery (invariant 8). Every pass read to its end from the start of an
epoch, or from a state loaded, is checked on its own by
:func:`~streamseq.testing.check_continuity` against the arrays (every step once, in its
row, each stream or segment marked where it starts, every step but a stream's first a
target once with look-ahead: invariants 1 to 3 and 9).
"""

import atexit
import functools
import gc
import os
import shutil
import tempfile
import threading

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import streamseq.loader.reading
from streamseq import Batch, StreamLoader, materialize, mix
from streamseq.testing import check_continuity

pytestmark = pytest.mark.timeout(300)

ROWS, TBINS = 4, 4


def streams(kind, weights=(1.0, 1.0)):
    rng = np.random.default_rng(1)
    tokens = [rng.integers(0, 1000, n, dtype=np.int64) for n in rng.integers(10, 60, 8)]
    tokens[3] = tokens[3][:0]  # (an empty stream: a store keeps it, the plan skips it)
    if kind.startswith("store"):
        return stored(kind)
    if kind == "plain":
        return tokens
    if kind == "wide":  # 16 KiB a step: a batch of 4 x 4 steps is a kept block's
        return [s[:, None] + np.arange(2048) for s in tokens]
    if kind == "mix":  # two groups whose weights a resume may change
        return mix({"a": tokens[:5], "b": tokens[5:]}, dict(zip("ab", weights, strict=True)))
    return [{"x": s, "y": (s * 2).astype(np.float32)[:, None].repeat(2, 1)} for s in tokens]


@functools.cache
def stored(kind):
    """The streams of ``kind`` without "store " (plain, dict or wide), materialized once."""
    folder = tempfile.mkdtemp(prefix="streamseq-held-")
    atexit.register(shutil.rmtree, folder, True)
    return materialize(streams(reference(kind)), folder)


def reference(kind):
    """The data a loader of ``kind`` reads, as arrays (a store's: its sources)."""
    return {"store": "plain", "store dict": "dict", "store wide": "wide"}.get(kind, kind)


def tensors(batch):
    """The tensors of a batch (the leaves of dict data too), in a fixed order."""
    out = []
    for field in batch:
        out.extend(field[k] for k in sorted(field)) if isinstance(field, dict) else out.append(
            field
        )
    return out


def equal(a, b):
    """``torch.equal`` in numpy: a child forked after torch ran OpenMP threads cannot run
    them (GNU OpenMP waits for ever on its pool there)."""
    a = a.numpy() if isinstance(a, torch.Tensor) else a
    b = b.numpy() if isinstance(b, torch.Tensor) else b
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)


def same_batch(a, b):
    ta, tb = tensors(a), tensors(b)
    return len(ta) == len(tb) and all(equal(x, y) for x, y in zip(ta, tb, strict=True))


def view_of(batch, kind):
    """What a user keeps of a batch: the batch, or a view of one of its tensors."""
    data = batch.data["x"] if isinstance(batch.data, dict) else batch.data
    if kind == "batch":
        return batch
    if kind == "numpy":
        return data.numpy()
    if kind == "asarray":
        return np.asarray(batch.valid)
    if kind == "slice":
        return data[1:3]
    if kind == "from_numpy":
        return torch.from_numpy(batch.step.numpy())[:, 1:]
    return batch.reset


def arrays_of(batch):
    """A copy of a batch as numpy arrays (dict data too)."""
    data, *fields = batch
    if isinstance(data, dict):
        data = {k: v.numpy().copy() for k, v in data.items()}
    else:
        data = data.numpy().copy()
    return Batch(data, *(f.numpy().copy() for f in fields))


def copy_of(held):
    if isinstance(held, np.ndarray):
        return held.copy()
    if isinstance(held, torch.Tensor):
        return held.clone()
    return [t.clone() for t in tensors(held)]


def unchanged(held, copy):
    if isinstance(held, np.ndarray):
        return np.array_equal(held, copy)
    if isinstance(held, torch.Tensor):
        return equal(held, copy)
    return all(equal(t, c) for t, c in zip(tensors(held), copy, strict=True))


def same_position(state, ref_state):
    """Whether two states stand at the same place (a store's names other sources)."""
    where = ("epoch", "next_batch", "epoch_done", "length", "batch_size", "progress", "resumed")
    return all(state[k] == ref_state[k] for k in where)


KINDS = ["batch", "numpy", "asarray", "slice", "from_numpy", "reset"]


class HostileUser(RuleBasedStateMachine):
    @initialize(
        workers=st.sampled_from([2, 0, 2]),  # (workers: where slots are)
        persistent=st.booleans(),
        data=st.sampled_from(
            ["plain", "dict", "mix", "store", "store dict", "wide", "store wide"]
        ),
        pad=st.sampled_from(["zeros", "zeros", "pack"]),  # (pack: rests laid out anew)
        segment_length=st.sampled_from([None, None, 6, 8]),
        lookahead=st.sampled_from([0, 0, 1]),
    )
    def start(self, workers, persistent, data, pad, segment_length, lookahead):
        self.data, self.workers, self.persistent = data, workers, persistent and workers > 0
        self.pad, self.segment_length, self.lookahead = pad, segment_length, lookahead
        self.loaded = None  # the state the next pass goes on from (a pass checked whole)
        self.delivered = None  # the batches of the pass in progress, when it is checked
        self.here_bytes = streamseq.loader.reading.COPY_HERE_BYTES
        if data.startswith("store") and workers:  # (else read here whatever the workers)
            streamseq.loader.reading.COPY_HERE_BYTES = 0
        self.weights = (1.0, 1.0)
        self.held = []  # (what is held, its copy at delivery)
        self.steps = 0  # valid steps of the batches of the pass in progress
        self.states = []
        self.loader = self.ref = None
        self.it = self.ref_it = None
        self.new_loaders()

    def make(self, workers, batch_size=ROWS, ref=False):
        return StreamLoader(
            streams(reference(self.data) if ref else self.data, self.weights),
            batch_size,
            TBINS,
            shuffle=True,
            seed=3,
            pad=self.pad,
            segment_length=self.segment_length,
            lookahead=self.lookahead,
            num_workers=workers,
            max_buffered=4,
            persistent_workers=self.persistent and workers > 0,
        )

    def new_loaders(self):
        self.loader, self.ref = self.make(self.workers), self.make(0, ref=True)
        self.it = self.ref_it = None

    def teardown(self):
        streamseq.loader.reading.COPY_HERE_BYTES = self.here_bytes
        if self.loader is not None:
            self.loader.close()

    def next_pair(self):
        """The next batch of the loader and of the reference (None at the end of a pass)."""
        if self.it is None:
            self.it, self.ref_it = iter(self.loader), iter(self.ref)
            self.delivered = self.pass_checked()
        got, want = next(self.it, None), next(self.ref_it, None)
        assert (got is None) == (want is None), "the passes have different lengths"
        if got is None:
            self.it = self.ref_it = None
            if self.delivered is not None:
                self.check_pass(*self.delivered)
            self.delivered = None
            return None
        if self.delivered is not None:
            self.delivered[0].append(arrays_of(want))
        assert same_batch(got, want), "a batch differs from the reference's"
        valid, stats = int(got.valid.sum()), self.loader.stats
        self.steps = (self.steps if stats.batches > 1 else 0) + valid  # (a pass's first)
        assert stats.steps == self.steps, "the pass's figures are not those of its batches"
        assert stats.padding_steps == got.valid.numel() * stats.batches - stats.steps
        return got

    def pass_checked(self):
        """``([], state)`` where the pass starting is checked whole, else None.

        A pass from the start of an epoch (``state`` None), or from the state just loaded;
        not a mixture's (its streams are drawn, some more than once).
        """
        state, self.loaded = self.loaded, None
        if self.data == "mix" or (state is None and self.ref.progress.done):
            return None
        return [], state

    def check_pass(self, batches, state):
        source = streams(reference(self.data))
        lengths = [len(s["x"]) if isinstance(s, dict) else len(s) for s in source]
        check_continuity(
            batches,
            lengths,
            sources=source,
            pack=self.pad == "pack",
            segment_length=self.segment_length,
            state=state,
            lookahead=self.lookahead,
        )

    @rule(
        new_pass=st.booleans(),
        count=st.integers(1, 30),
        kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=3),
    )
    def take_and_hold(self, new_pass, count, kinds):
        if new_pass:
            self.it = self.ref_it = None  # (the pass in progress, if any, is left)
        for k in range(count):
            batch = self.next_pair()
            if batch is None:
                return
            if k < len(kinds):
                held = view_of(batch, kinds[k])
                self.held.append((held, copy_of(held)))

    @rule(data=st.data())
    def drop_some(self, data):
        if self.held:
            keep = data.draw(st.lists(st.booleans(), min_size=len(self.held)))
            self.held = [h for h, k in zip(self.held, keep, strict=False) if k]
            gc.collect()

    @rule(
        action=st.sampled_from(["set_epoch", "save", "load", "load other", "close", "delete"]),
        data=st.data(),
    )
    def disturb(self, action, data):
        """What a user does between passes; every one ends the pass in progress."""
        if action == "set_epoch":
            epoch = data.draw(st.integers(0, 3))
            if epoch != self.ref.epoch:  # a position loaded is left: the epoch from its start
                self.loaded = None
            self.loader.set_epoch(epoch)
            self.ref.set_epoch(epoch)
            return  # (a pass may go on after set_epoch)
        if action == "save":
            state, ref_state = self.loader.state_dict(), self.ref.state_dict()
            assert same_position(state, ref_state)
            self.states.append((state, ref_state, self.weights))
            return
        if action == "load" and self.states:
            state, ref_state, weights = data.draw(st.sampled_from(self.states))
            changed = weights != self.weights  # (a mixture's state of other weights)
            self.loader.load_state_dict(state, weights_changed=changed)
            self.ref.load_state_dict(ref_state, weights_changed=changed)
            self.loaded = ref_state
        elif action in ("load", "load other"):  # a state of a loader of another batch size
            batch_size, count = data.draw(st.sampled_from([2, 3])), data.draw(st.integers(0, 5))
            for loader, ref in ((self.loader, False), (self.ref, True)):
                other = self.make(0, batch_size, ref=ref)
                it = iter(other)
                for _ in range(count):
                    next(it, None)
                state = other.state_dict()
                loader.load_state_dict(state)
                if ref:
                    self.loaded = state
        elif action == "close":
            self.loader.close()
            self.ref.close()
            self.loaded = None  # (a pass from where it stands is checked from an epoch's start)
        else:  # delete the loaders, held batches kept; new ones
            self.loader.close()
            del self.loader, self.ref
            gc.collect()
            self.new_loaders()
            self.loaded = None  # (new loaders start afresh)
        self.it = self.ref_it = None

    @precondition(lambda self: self.held and hasattr(os, "fork"))
    @rule(count=st.integers(1, 8))
    def fork_a_child_that_checks_its_batches(self, count):
        """The child holds every batch; the parent drops them all and reads on."""
        go_r, go_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(go_w)
                os.read(go_r, 1)
                code = 0 if all(unchanged(h, c) for h, c in self.held) else 3
            finally:
                os._exit(code)
        os.close(go_r)
        self.held = []
        gc.collect()
        try:
            for _ in range(count * 4):  # the parent reuses its memory
                self.next_pair()
        finally:
            os.write(go_w, b"x")
            os.close(go_w)
            _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "a batch held by a forked child changed"

    @precondition(lambda self: self.it is not None and hasattr(os, "fork"))
    @rule(count=st.integers(1, 6))
    def fork_a_child_that_reads_on_in_the_pass(self, count):
        """The child reads on in the parent's pass (a batch copied ahead there); so does it."""
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                for _ in range(count):
                    if self.next_pair() is None:
                        break
                code = 0 if all(unchanged(h, c) for h, c in self.held) else 3
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "a forked child read other batches"
        for _ in range(count):
            if self.next_pair() is None:
                break

    @precondition(lambda self: self.it is not None)
    @rule(data=st.data())
    def index_from_a_thread_during_the_pass(self, data):
        """``loader[i]`` in another thread while a pass stands (a batch copied ahead)."""
        i = data.draw(st.integers(0, len(self.loader) - 1))
        before = self.ref[i]  # (the pass may end meanwhile: loader[i] is of the epoch then)
        got = []
        thread = threading.Thread(target=lambda: got.append(self.loader[i]))
        thread.start()
        batch = self.next_pair()
        thread.join(60)
        assert not thread.is_alive(), "loader[i] in a thread did not return"
        assert got and (same_batch(got[0], before) or same_batch(got[0], self.ref[i])), (
            "loader[i] in a thread differs"
        )
        if batch is not None:
            self.held.append((batch, copy_of(batch)))

    @precondition(lambda self: self.data == "mix")
    @rule(
        weights=st.tuples(*[st.sampled_from([0.0, 0.05, 0.3, 1.0, 4.0])] * 2).filter(any),
        batch_size=st.sampled_from([ROWS, 2, 3]),
    )
    def load_a_state_with_other_weights(self, weights, batch_size):
        """New loaders of the mixture with other weights (and rows) resume the state."""
        state = self.loader.state_dict()
        self.loader.close()
        self.ref.close()
        self.weights = weights
        ref_state = self.ref.state_dict()
        self.loader = self.make(self.workers, batch_size)
        self.ref = self.make(0, batch_size, ref=True)
        self.loader.load_state_dict(state, weights_changed=True)
        self.ref.load_state_dict(ref_state, weights_changed=True)
        self.it = self.ref_it = None

    @invariant()
    def held_batches_never_change(self):
        for k, (held, copy) in enumerate(self.held):
            assert unchanged(held, copy), f"held item {k} of {len(self.held)} changed"


HostileUser.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_a_hostile_user_never_sees_a_held_batch_change = HostileUser.TestCase
