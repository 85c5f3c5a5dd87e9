"""The items streamseq delivers: :class:`Chunk` for one row, :class:`Batch` for many."""

from __future__ import annotations

from typing import Any, NamedTuple

from ._tree import tree_map


class Chunk(NamedTuple):
    """``tbins`` consecutive steps of one row, never spanning two streams.

    Attributes:
        data: step data ``[T, ...]`` (an array or a tuple/dict of arrays), zeros where padded.
        reset: True when the chunk starts a stream (its step 0).
        valid: bool ``[T]``, False on padding.
        stream: int64 ``[T]``, index of the source in the list given, -1 on padding.
        step: int64 ``[T]``, index of the step inside its stream, -1 on padding.
    """

    data: Any
    reset: Any
    valid: Any
    stream: Any
    step: Any


class Batch(NamedTuple):
    """A batch of ``B`` rows of ``T`` steps; row r continues row r of the previous batch.

    Attributes:
        data: step data ``[B, T, ...]`` (an array or a tuple/dict of arrays), zeros where padded.
        reset: bool ``[B]``, True where row r starts a new stream in this batch (reset
            the recurrent state of that row before using it).
        valid: bool ``[B, T]``, False on padding.
        stream: int64 ``[B, T]``, index of the source in the list given, -1 on padding.
        step: int64 ``[B, T]``, index of the step inside its stream, -1 on padding.

    With ``time_major=True`` the loader delivers ``data`` as ``[T, B, ...]`` and
    ``valid``, ``stream``, ``step`` as ``[T, B]``.

    Example:
        >>> import numpy as np
        >>> b = Batch(np.zeros((2, 3)), np.array([True, False]), np.ones((2, 3), bool),
        ...           np.zeros((2, 3), np.int64), np.tile(np.arange(3), (2, 1)))
        >>> b.reset.tolist()
        [True, False]
    """

    data: Any
    reset: Any
    valid: Any
    stream: Any
    step: Any

    def to(self, device: Any, non_blocking: bool = False) -> Batch:
        """Move every tensor of the batch to ``device``, as ``torch.Tensor.to`` does.

        ``data`` may be a tensor or a tuple, list or dict of tensors (nested); each is
        moved and the structure kept (``None`` stays ``None``).

        Args:
            device: where to move the tensors (``"cuda"``, ``torch.device("cuda", 1)``, ...).
            non_blocking: passed to ``Tensor.to``; with ``pin_memory=True`` on the loader,
                the copy to a GPU overlaps with the work already queued there.

        Returns:
            A new :class:`Batch` whose fields are the moved tensors.

        Raises:
            TypeError: a field holds something other than tensors (numpy arrays, say).

        Example:
            >>> import torch
            >>> b = Batch({"x": torch.zeros(2, 3)}, torch.tensor([True, False]),
            ...           torch.ones(2, 3, dtype=torch.bool), torch.zeros(2, 3, dtype=torch.int64),
            ...           torch.arange(3).repeat(2, 1))
            >>> moved = b.to("cpu")
            >>> moved.data["x"].device, moved.reset.tolist()
            (device(type='cpu'), [True, False])
        """

        def move(tensor: Any) -> Any:
            if tensor is None:  # a batch without data
                return None
            if not hasattr(tensor, "to") or not hasattr(tensor, "device"):
                raise TypeError(
                    f"Batch.to moves torch tensors, got {type(tensor).__name__}; "
                    "convert the batch with torch.as_tensor first"
                )
            return tensor.to(device, non_blocking=non_blocking)

        return Batch(*(tree_map(move, field) for field in self))
