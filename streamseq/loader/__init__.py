"""The loader: a facade over its configuration, data spec, worker topology and pass."""

from .config import resolve_rank
from .stream_loader import StreamLoader

__all__ = ["StreamLoader", "resolve_rank"]
