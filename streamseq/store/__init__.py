"""Streams decoded once into a memory-mapped store (:func:`materialize`), read zero-copy."""

from streamseq.store.build import materialize
from streamseq.store.stream import StoredStream
from streamseq.store.table import StoreTable, open_store

__all__ = ["StoreTable", "StoredStream", "materialize", "open_store"]
