"""The one batch writer: chunks of rows into batches, and their metadata.

- :mod:`.writer`: :class:`~.writer.Table`, the rows of a zip as arrays, read into
  batches (the compiled pass :mod:`._gather` copies rows of arrays when it was built).
- :mod:`.positions`: where every row reads in a batch.
- :mod:`.meta`: ``reset``, ``valid``, ``stream`` and ``step``, written only there (and
  by the compiled pass, which writes the same).
- :mod:`.stack`: a batch stacked from the items of other parts (chunks and batches).
- :mod:`.check`: steps checked against the batch they go into, and copied safely.
"""

from .check import put, spec_mismatch
from .positions import packed_pieces
from .stack import stack
from .writer import Table

__all__ = ["Table", "packed_pieces", "put", "spec_mismatch", "stack"]
