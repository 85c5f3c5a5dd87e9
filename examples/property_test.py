"""Property-test your own pipeline with streamseq.testing and hypothesis.

The pipeline under test feeds a model the step-to-step differences of each stream
(``x[k] - x[k-1]``, with ``x[-1] = 0``), computed lazily by a stream wrapper. A wrapper
like this is easy to get subtly wrong: computed within each slice, the first difference of
every chunk uses 0 instead of the previous step, and nothing looks wrong in a plot.

The property: for any stream lengths, batch size, chunk length and number of workers, the
batches are continuous (:func:`streamseq.testing.check_continuity`) and their data equal
the differences computed on the whole streams. :func:`streamseq.testing.coded_streams`
makes streams whose every value tells its stream and step, and
:func:`streamseq.testing.layouts` draws the layouts. hypothesis finds the buggy wrapper
at once and shrinks the failure to the smallest layout that shows it.

In a test suite::

    @given(layouts(), st.sampled_from([0, 2]))
    def test_deltas_pipeline(layout, workers):
        check_pipeline(deltas_pipeline, layout, workers)

Run: ``python examples/property_test.py [--examples 30]``
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import streamseq
from streamseq.testing import Layout, check_continuity, coded_streams, layouts


class Deltas:
    """The differences ``x[k] - x[k-1]`` of a stream (``x[-1] = 0``), computed per slice."""

    def __init__(self, stream: Any):
        self.stream = stream

    def __len__(self) -> int:
        return len(self.stream)

    def __getitem__(self, key: slice) -> np.ndarray:
        start, stop, _ = key.indices(len(self))
        before = self.stream[start - 1 : start] if start > 0 else np.zeros(1, np.int64)
        return np.diff(self.stream[start:stop], prepend=before[-1:])


class BuggyDeltas(Deltas):
    """The same, wrong at slice starts: the step before the slice is not read."""

    def __getitem__(self, key: slice) -> np.ndarray:
        start, stop, _ = key.indices(len(self))
        return np.diff(self.stream[start:stop], prepend=0)


def deltas_pipeline(streams: list[Any], batch_size: int, tbins: int, workers: int = 0) -> Any:
    """The pipeline under test: differences of each stream, in coherent batches."""
    return streamseq.StreamLoader(
        [Deltas(s) for s in streams], batch_size, tbins, num_workers=workers
    )


def buggy_pipeline(streams: list[Any], batch_size: int, tbins: int, workers: int = 0) -> Any:
    return streamseq.StreamLoader(
        [BuggyDeltas(s) for s in streams], batch_size, tbins, num_workers=workers
    )


def check_pipeline(pipeline: Callable[..., Any], layout: Layout, workers: int = 0) -> None:
    """The property: continuous batches whose data are the differences of whole streams."""
    streams = coded_streams(layout.lengths)
    expected = [np.diff(s, prepend=0) for s in streams]  # computed on the whole stream
    batches = pipeline(streams, layout.batch_size, layout.tbins, workers)
    check_continuity(batches, layout.lengths, sources=expected)


def run_property(pipeline: Callable[..., Any], examples: int) -> str | None:
    """Run the property on ``examples`` layouts; the failure report, or None if it holds."""

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True)
    @given(
        layouts(max_streams=8, max_length=30, max_batch=4, max_tbins=6),
        st.sampled_from([0, 0, 2]),
    )
    def prop(layout: Layout, workers: int) -> None:
        check_pipeline(pipeline, layout, workers)

    try:
        prop()
    except AssertionError as e:
        return "\n".join([str(e), *getattr(e, "__notes__", [])])
    return None


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=30, help="layouts per property")
    args = parser.parse_args(argv)

    correct = run_property(deltas_pipeline, args.examples)
    print(f"deltas_pipeline: {'holds' if correct is None else 'FAILS'} on {args.examples} layouts")
    buggy = run_property(buggy_pipeline, args.examples)
    print("buggy_pipeline: " + ("holds" if buggy is None else "fails, shrunk to:"))
    if buggy is not None:
        print("  " + buggy.replace("\n", "\n  "))
    return {"correct": correct, "buggy": buggy}


if __name__ == "__main__":
    main()
