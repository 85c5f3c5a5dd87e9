"""streamseq: temporally coherent batches of streams for recurrent and streaming models."""

from .batch import Batch, Chunk
from .errors import SourceError, StreamError, WorkerError
from .interleave import Row, interleave_streams
from .loader import StreamLoader
from .pin import pin_memory
from .prefetch import prefetch
from .split import split_by_worker
from .tbin import tbin
from .zip_batch import zip_batch

__version__ = "0.1.0"

__all__ = [
    "Batch",
    "Chunk",
    "Row",
    "SourceError",
    "StreamError",
    "StreamLoader",
    "WorkerError",
    "interleave_streams",
    "pin_memory",
    "prefetch",
    "split_by_worker",
    "tbin",
    "zip_batch",
]
