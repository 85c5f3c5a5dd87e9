"""The cursor: where a run stands, moved only by pure transitions."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamseq.plan.cursor import Cursor

# a run: passes of some batches each, left early or read to the end of the epoch
passes = st.lists(st.tuples(st.integers(0, 4), st.booleans()), max_size=6)


def run_pass(cursor, batches, to_end, length=5):
    """A pass from ``cursor``: ``batches`` delivered, then the end reached or not."""
    c = cursor.pass_opened()
    for _ in range(min(batches, length - c.next)):
        c = c.delivered()
    if to_end:
        for _ in range(length - c.next):
            c = c.delivered()
        c = c.ended()
    return c


@settings(max_examples=60, deadline=None)
@given(passes)
def test_every_pass_that_delivered_moves_to_the_next_epoch(run):
    cursor, epoch = Cursor(), 0
    for batches, to_end in run:
        opened = cursor.pass_opened()
        assert opened.epoch == epoch and opened.next == 0
        cursor = run_pass(cursor, batches, to_end)
        if batches or to_end:
            epoch += 1
        assert cursor.upcoming == epoch


@settings(max_examples=60, deadline=None)
@given(passes, st.integers(0, 9), st.booleans(), passes)
def test_an_epoch_set_holds_for_every_pass_until_set_again(before, epoch, running, after):
    cursor = Cursor()
    for batches, to_end in before:
        cursor = run_pass(cursor, batches, to_end)
    if running:
        cursor = cursor.pass_opened()
    cursor = cursor.set_epoch(epoch, running=running)
    assert cursor.upcoming == epoch
    for batches, to_end in after:
        cursor = run_pass(cursor, batches, to_end)
        assert cursor.epoch == epoch and cursor.upcoming == epoch


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 9), st.integers(0, 4), st.integers(0, 4))
def test_set_epoch_during_a_pass_leaves_that_pass_its_epoch(epoch, done, other):
    cursor = Cursor(epoch).pass_opened()
    for _ in range(done):
        cursor = cursor.delivered()
    moved = cursor.set_epoch(other, running=True)
    assert (moved.epoch, moved.next) == (cursor.epoch, cursor.next)
    assert moved.pass_opened().epoch == other and moved.pass_opened().next == 0


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 9), st.integers(1, 6), st.data())
def test_a_state_resumes_where_it_was_saved_or_at_the_next_epoch(epoch, length, data):
    nxt = data.draw(st.integers(0, length))
    cursor = Cursor.from_state(epoch, nxt, length)
    where = (epoch, nxt) if nxt < length else (epoch + 1, 0)
    assert cursor.to_state() == where
    opened = cursor.pass_opened()
    assert (opened.epoch, opened.next) == where and opened.pending
    assert opened.set_epoch(where[0], running=False).next == where[1]  # survives its epoch
    assert opened.set_epoch(where[0] + 1, running=False).next == 0


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 9), st.integers(0, 5), st.booleans())
def test_a_state_saved_by_a_pass_is_where_it_stands(epoch, done, chosen):
    cursor = Cursor(epoch, epoch_set=chosen).pass_opened()
    for _ in range(done):
        cursor = cursor.delivered()
    assert cursor.to_state() == (epoch, done)
    ended = cursor.ended()
    assert ended.to_state() == ((epoch, done) if chosen else (epoch + 1, 0))


def test_a_cursor_is_immutable():
    cursor = Cursor(2, 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cursor.next = 4
    assert cursor.delivered() == Cursor(2, 4, started=True) and cursor == Cursor(2, 3)


@settings(max_examples=40, deadline=None)
@given(
    st.tuples(
        st.integers(0, 9),
        st.integers(0, 9),
        st.booleans(),
        st.booleans(),
        st.booleans(),
        st.booleans(),
        st.none() | st.integers(0, 9),
    )
)
def test_delivered_moves_next_on_and_keeps_every_other_field(values):
    cursor = Cursor(*values)
    after = cursor.delivered()
    moved = {"next": cursor.next + 1, "pending": False, "started": True}
    for f in dataclasses.fields(Cursor):  # (a field added later is checked too)
        assert getattr(after, f.name) == moved.get(f.name, getattr(cursor, f.name)), f.name
