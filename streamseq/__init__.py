"""streamseq: temporally coherent batches of streams for recurrent and streaming models."""

import importlib
from typing import Any

from .batch import Batch, Chunk
from .deliver.assemble import assemble
from .deliver.pin import pin_memory
from .errors import SourceError, StreamError, WorkerError, WorkerTimeout
from .interleave import Row, interleave_streams, map_steps
from .loader import StreamLoader
from .mix import Mixture, mix
from .plot import plot_plan
from .read.transform import StepInfo
from .split import split_by_worker
from .store import materialize
from .stream_table import StreamTable
from .tbin import tbin
from .workers.prefetched import prefetch
from .zip_batch import zip_batch
from .zip_streams import zip_streams

__version__ = "0.4.0"  # the one place of the version (pyproject.toml reads it)

_LAZY = ("io", "testing")  # submodules loaded on first use: av and hypothesis stay unimported


def __getattr__(name: str) -> Any:
    """Load :mod:`streamseq.io` and :mod:`streamseq.testing` on first use."""
    if name in _LAZY:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*__all__, *_LAZY, "__version__"])


__all__ = [
    "Batch",
    "Chunk",
    "Mixture",
    "Row",
    "SourceError",
    "StepInfo",
    "StreamError",
    "StreamLoader",
    "StreamTable",
    "WorkerError",
    "WorkerTimeout",
    "assemble",
    "interleave_streams",
    "map_steps",
    "materialize",
    "mix",
    "pin_memory",
    "plot_plan",
    "prefetch",
    "split_by_worker",
    "tbin",
    "zip_batch",
    "zip_streams",
]
