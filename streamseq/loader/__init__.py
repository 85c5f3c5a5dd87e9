"""The loader: a facade over its configuration, data spec, worker topology and pass."""

from .config import resolve_rank
from .stats import PassStats, WorkerStats
from .stream_loader import StreamLoader

__all__ = ["PassStats", "StreamLoader", "WorkerStats", "resolve_rank"]
