"""The items streamseq delivers: :class:`Chunk` for one row, :class:`Batch` for many."""

from __future__ import annotations

import numbers
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


def _check_lookahead(lookahead: Any) -> int:
    """``lookahead`` as an int >= 0 (an integer, not a bool)."""
    if isinstance(lookahead, bool) or not isinstance(lookahead, numbers.Integral):
        raise TypeError(f"lookahead must be an integer >= 0, got {lookahead!r}")
    if lookahead < 0:
        raise ValueError(f"lookahead must be >= 0, got {lookahead}")
    return int(lookahead)


class _Fields(NamedTuple):
    data: Any
    reset: Any
    valid: Any
    stream: Any
    step: Any


class Batch(_Fields):
    """A batch of ``B`` rows of ``T`` steps; row r continues row r of the previous batch.

    Attributes:
        data: step data ``[B, T, ...]`` (an array or a tuple/dict of arrays), zeros where padded.
        reset: bool ``[B]``, True where row r starts a new stream in this batch (reset
            the recurrent state of that row before using it).
        valid: bool ``[B, T]``, False on padding.
        stream: int64 ``[B, T]``, index of the source in the list given, -1 on padding.
        step: int64 ``[B, T]``, index of the step inside its stream, -1 on padding.
        lookahead: how many of the ``T`` steps are look-ahead steps (the loader's
            ``lookahead``; 0 by default). Not a field: a batch is still the five fields
            above (``data, reset, valid, stream, step = batch``); it goes with the batch
            through :meth:`to`, pickling, pinning and the workers.
        time_major: whether the batch is laid out ``[T, B, ...]`` (the loader's
            ``time_major``; False by default). Not a field either, kept as ``lookahead``
            is: :meth:`target_mask` reads it.

    With ``time_major=True`` the loader delivers ``data`` as ``[T, B, ...]`` and
    ``valid``, ``stream``, ``step`` as ``[T, B]``.

    Example:
        >>> import numpy as np
        >>> b = Batch(np.zeros((2, 3)), np.array([True, False]), np.ones((2, 3), bool),
        ...           np.zeros((2, 3), np.int64), np.tile(np.arange(3), (2, 1)))
        >>> b.reset.tolist(), b.lookahead
        ([True, False], 0)

    Its ``repr`` shows the dtype and shape of every field, not the values:

        >>> b  # doctest: +NORMALIZE_WHITESPACE
        Batch(data=float64[2, 3], reset=bool[2], valid=bool[2, 3],
              stream=int64[2, 3], step=int64[2, 3])
    """

    lookahead: int = 0  # (an instance's own where not 0)
    time_major: bool = False  # (an instance's own where True)

    def __new__(
        cls,
        data: Any,
        reset: Any,
        valid: Any,
        stream: Any,
        step: Any,
        lookahead: int = 0,
        time_major: bool = False,
    ) -> Batch:
        """The five fields, and ``lookahead`` (an integer >= 0) and ``time_major`` beside them."""
        self = super().__new__(cls, data, reset, valid, stream, step)
        if type(lookahead) is not int or lookahead:  # (a plain batch: no attribute of its own)
            self.lookahead = _check_lookahead(lookahead)
        if time_major:
            self.time_major = True
        return self

    def _replace(self, **fields: Any) -> Batch:
        """The batch with some fields replaced; its ``lookahead`` kept."""
        return self.like(super()._replace(**fields))

    def like(self, fields: Any) -> Batch:
        """A :class:`Batch` of ``fields`` (five, in order), ``lookahead`` and ``time_major`` kept.

        Example:
            >>> b = Batch(None, [False], [[True] * 3], [[0] * 3], [[0, 1, 2]], lookahead=1)
            >>> b.like([None, [True], [[True] * 3], [[0] * 3], [[4, 5, 6]]]).lookahead
            1
        """
        out = Batch._make(fields)
        own = getattr(self, "__dict__", None)
        if own:
            out.__dict__.update(own)
        return out

    def __repr__(self) -> str:
        text = describe_fields(self)[:-1]
        if self.lookahead:
            text += f", lookahead={self.lookahead}"
        if self.time_major:
            text += ", time_major=True"
        return text + ")"

    def target_mask(self, lookahead: int | None = None, time_major: bool | None = None) -> Any:
        """Where step t + 1 is the next-step target of input t: ``[B, T]`` (``[T, B]``).

        For a batch with ``lookahead`` steps after its ``T = tbins`` steps (the loader's
        ``lookahead``): entry ``t`` (``t < T``) is True where steps t and t + 1 are
        valid, of the same stream and consecutive. So the inputs are the first ``T``
        steps, the targets the ``T`` steps after the first, and, over an epoch, every
        step but the first of every stream is a target exactly once (with
        ``segment_length``, the first step of a segment only where the segment before it
        ends its chunk); never one of another stream (with ``pad="pack"``, not across
        documents). numpy arrays or torch tensors alike.

        Args:
            lookahead: the look-ahead steps the batch holds: by default its own
                :attr:`lookahead`; another value is refused (inputs counted twice, or a
                real step taken for a look-ahead step).
            time_major: the batch is laid out ``[T, B, ...]``; by default its own
                :attr:`time_major` (the loader's ``time_major``).

        Returns:
            A bool array (or tensor) ``[B, T]``, ``[T, B]`` with ``time_major``.

        Raises:
            ValueError: the batch holds no look-ahead steps (build the loader with
                ``lookahead=1`` or more), ``lookahead`` is not the batch's, it leaves
                no input, or the shapes contradict ``time_major`` (``reset`` has one
                entry a row).

        Example:
            >>> import numpy as np
            >>> stream = np.array([[0, 0, 0, 1, 1]])  # pad="pack": stream 1 starts at 3
            >>> step = np.array([[4, 5, 6, 0, 1]])
            >>> b = Batch(None, np.array([False]), stream >= 0, stream, step, lookahead=1)
            >>> b.target_mask().tolist()  # inputs 0..3, targets 1..4
            [[True, True, False, True]]
            >>> x = b.step  # input and target of next-step prediction
            >>> x[:, :-1].tolist(), x[:, 1:].tolist()
            ([[4, 5, 6, 0]], [[5, 6, 0, 1]])
            >>> b.target_mask(2)
            Traceback (most recent call last):
            ...
            ValueError: target_mask(lookahead=2): the batch holds lookahead=1 ...
        """
        own = self.lookahead
        if lookahead is None:
            lookahead = own
        elif (
            isinstance(lookahead, bool)
            or not isinstance(lookahead, numbers.Integral)
            or lookahead != own
        ):
            raise ValueError(
                f"target_mask(lookahead={lookahead!r}): the batch holds lookahead={own} "
                "look-ahead steps; call target_mask() to use them"
            )
        if not lookahead:
            raise ValueError(
                "target_mask: the batch holds no look-ahead steps (lookahead=0), so the "
                "last step of each chunk has no target here; build the loader with "
                "lookahead=1 or more"
            )
        if time_major is None:
            time_major = self.time_major
        rows, steps = self.valid.shape[:2][:: -1 if time_major else 1]
        if len(self.reset) != rows:
            raise ValueError(
                f"target_mask(time_major={bool(time_major)}): valid is "
                f"{describe_field(self.valid)} but reset has {len(self.reset)} rows: the "
                f"batch is laid out {'[B, T]' if time_major else '[T, B]'}; pass "
                f"time_major={not time_major}"
            )
        if lookahead >= steps:
            raise ValueError(f"lookahead={lookahead} leaves no input in {steps} steps")
        t = steps - lookahead

        def at(a: Any, first: int) -> Any:
            return a[first : first + t] if time_major else a[:, first : first + t]

        valid, stream, step = self.valid, self.stream, self.step
        same = (at(stream, 0) == at(stream, 1)) & (at(step, 1) == at(step, 0) + 1)
        return at(valid, 0) & at(valid, 1) & same

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

        return self.like(tree_map(move, field) for field in self)
