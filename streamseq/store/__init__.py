"""Streams decoded once into a memory-mapped store (:func:`materialize`), read zero-copy."""

from streamseq.store.build import materialize
from streamseq.store.stream import StoredStream, open_store
from streamseq.store.table import StoreTable

__all__ = ["StoreTable", "StoredStream", "materialize", "open_store"]
