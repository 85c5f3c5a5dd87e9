"""The items streamseq delivers: :class:`Chunk` for one row, :class:`Batch` for many."""

from __future__ import annotations

from typing import Any, NamedTuple

from ._tree import tree_map


def describe_field(value: Any) -> str:
    """An array's dtype and shape (``uint8[2, 16, 3]``), a dict or tuple of them as such.

    numpy arrays and torch tensors alike; anything else is its ``repr``.

    Example:
        >>> import numpy as np
        >>> describe_field(np.zeros((2, 3), np.float32))
        'float32[2, 3]'
        >>> describe_field({"x": np.zeros(4, bool), "y": (np.zeros((4, 2)), None)})
        "{'x': bool[4], 'y': (float64[4, 2], None)}"
    """
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {describe_field(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (tuple, list)):
        inner = ", ".join(describe_field(v) for v in value)
        if isinstance(value, list):
            return f"[{inner}]"
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return repr(value)
    name = str(dtype).removeprefix("torch.")
    return f"{name}[{', '.join(str(int(n)) for n in shape)}]"


def describe_fields(item: tuple) -> str:
    """``Name(field=dtype[shape], ...)`` for a :class:`Chunk` or a :class:`Batch`."""
    fields = ", ".join(f"{k}={describe_field(v)}" for k, v in zip(item._fields, item, strict=True))
    return f"{type(item).__name__}({fields})"


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

    def __repr__(self) -> str:
        return describe_fields(self)


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

    Its ``repr`` shows the dtype and shape of every field, not the values:

        >>> b  # doctest: +NORMALIZE_WHITESPACE
        Batch(data=float64[2, 3], reset=bool[2], valid=bool[2, 3],
              stream=int64[2, 3], step=int64[2, 3])
    """

    data: Any
    reset: Any
    valid: Any
    stream: Any
    step: Any

    def __repr__(self) -> str:
        return describe_fields(self)

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
