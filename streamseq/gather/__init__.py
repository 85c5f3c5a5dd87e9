"""The one batch writer: chunks of rows into batches, and their metadata.

- :mod:`.chunkmap`: :class:`~.chunkmap.ChunkMap`, where every chunk of every row lies,
  as arrays.
- :mod:`.writer`: :class:`~.writer.BatchWriter`, a chunk map that writes batches (the
  compiled pass :mod:`._gather` copies rows of arrays when it was built).
- :mod:`.positions`: where every row reads in a batch.
- :mod:`.ahead`: the look-ahead steps that follow a chunk.
- :mod:`.warm`: the first reads of every row, concurrently.
- :mod:`.meta`: ``reset``, ``valid``, ``stream`` and ``step``, written only there (and
  by the compiled pass, which writes the same).
- :mod:`.stack`: a batch stacked from the items of other parts (chunks and batches).
- :mod:`.check`: steps checked against the batch they go into, and copied safely.
"""

from .check import put, spec_mismatch
from .positions import packed_pieces
from .stack import stack
from .writer import BatchWriter

__all__ = ["BatchWriter", "packed_pieces", "put", "spec_mismatch", "stack"]
