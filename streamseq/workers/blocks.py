"""Items handed over in blocks: one hand-over carries several consecutive items.

Every hand-over from a worker costs the main process a job sent, a wait and a reply
(tens of microseconds, more when the cores are busy), whatever the size of the item. For
small items (a micro-batch of tokens) that cost dominates. :class:`Blocks` groups up to
``size`` consecutive items into one (a list, evaluated by one worker into one
shared-memory slot), and :class:`Unblocked` gives them back one by one, holding one block
at a time. The first blocks are smaller (1, 2, 4, ... items, then ``size``), so that the
first items come as soon as without blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .wire import dump_error, load_error


class Layout:
    """Which items each block holds: 1, 2, 4, ... items (below ``size``), then ``size``.

    Example:
        >>> layout = Layout(5, 20)
        >>> [layout.start(j) for j in range(6)], len(layout)
        ([0, 1, 3, 7, 12, 17], 6)
        >>> [layout.block_of(i) for i in (0, 1, 2, 3, 6, 7, 11, 12, 19)]
        [0, 1, 1, 2, 2, 3, 3, 4, 5]
    """

    def __init__(self, size: int, items: int):
        if size < 1:
            raise ValueError(f"block size must be >= 1, got {size}")
        self.size, self.items = int(size), int(items)
        self.ramp = (self.size - 1).bit_length()  # blocks of 1, 2, 4, ... below size
        self.ramped = (1 << self.ramp) - 1  # the items they hold

    def start(self, j: int) -> int:
        """The first item of block ``j``."""
        if j < self.ramp:
            return (1 << j) - 1
        return self.ramped + (j - self.ramp) * self.size

    def block_of(self, i: int) -> int:
        """The block that holds item ``i``."""
        if i < self.ramped:
            return (i + 1).bit_length() - 1
        return self.ramp + (i - self.ramped) // self.size

    def __len__(self) -> int:
        return 0 if self.items == 0 else self.block_of(self.items - 1) + 1


class Failed:
    """The error of an item of a block, after the items before it: raised in its place.

    A block hands over the items read before the failing one, so that they are
    delivered as without blocks (a read error at batch 100 comes after batch 99,
    whatever the number of workers). It pickles its error as worker errors travel
    (:func:`~.wire.dump_error`: causes chained, the worker's traceback noted).

    Example:
        >>> import pickle
        >>> again = pickle.loads(pickle.dumps(Failed(KeyError("frame 3"))))
        >>> again.error
        KeyError('frame 3')
    """

    def __init__(self, error: BaseException):
        self.error = error

    def __reduce__(self) -> tuple:
        return _failed, (dump_error(self.error),)


def _failed(payload: bytes) -> Failed:
    return Failed(load_error(payload))


class Blocks:
    """The items of ``seq`` in blocks (lists) of up to ``size``: see :class:`Layout`.

    What ``seq.describe_item`` says of the items names a block (:meth:`name_item`);
    ``release`` of ``seq`` carries over.

    Example:
        >>> blocks = Blocks(list(range(7)), 3)
        >>> len(blocks), blocks[0], blocks[2]
        (4, [0], [3, 4, 5])
    """

    def __init__(self, seq: Sequence[Any], size: int):
        self.seq, self.layout = seq, Layout(size, len(seq))

    def __len__(self) -> int:
        return len(self.layout)

    def __getitem__(self, j: int) -> list[Any]:
        """The items of block ``j``; those before a failing one, then :class:`Failed`.

        An error of the first item is raised: the block has nothing to hand over.
        """
        start = self.layout.start(j)
        stop = min(self.layout.items, self.layout.start(j + 1))
        items: list[Any] = []
        for i in range(start, stop):
            try:
                items.append(self.seq[i])
            except Exception as e:
                if not items:
                    raise
                items.append(Failed(e))
                break
        return items

    def name_item(self, j: int) -> str:
        """The items of block ``j``, as ``seq`` describes them (the first three and the last).

        Example:
            >>> Blocks(list(range(9)), 4).name_item(3)
            'items 7 to 8'
            >>> class Named(list):
            ...     def describe_item(self, i):
            ...         return f"batch {i}: stream 0 steps {4 * i}:{4 * i + 4}"
            >>> Blocks(Named(range(9)), 4).name_item(3)
            'batch 7: stream 0 steps 28:32; batch 8: stream 0 steps 32:36'
        """
        a = self.layout.start(j)
        b = min(self.layout.items, self.layout.start(j + 1))
        describe = getattr(self.seq, "describe_item", None)
        if not callable(describe):
            return f"item {a}" if b - a == 1 else f"items {a} to {b - 1}"
        shown = [*range(a, min(b, a + 3)), *([b - 1] if b - 1 >= a + 3 else [])]
        what = [_described(describe, i) for i in shown]
        if b - a > 4:
            what.insert(3, f"... {b - a - 4} more")
        return "; ".join(what)

    def release(self) -> None:
        """Release ``seq`` (close its files), if it can."""
        release = getattr(self.seq, "release", None)
        if release is not None:
            release()


def _described(describe: Any, i: int) -> str:
    try:
        return str(describe(i))
    except Exception:
        return f"item {i}"


class Unblocked:
    """The items of a sequence of blocks (:class:`Layout` of ``size``) one by one.

    The block being read is held (its shared-memory slot with it) until another is asked
    for or :meth:`release`; ``prepare(i)`` is passed on for the block of item ``i``.

    Example:
        >>> items = Unblocked(Blocks(list(range(7)), 3), 3, 7)
        >>> [items[i] for i in range(7)]
        [0, 1, 2, 3, 4, 5, 6]
    """

    def __init__(self, blocks: Sequence[list[Any]], size: int, length: int):
        self.blocks, self.layout, self.length = blocks, Layout(size, length), int(length)
        self._held: tuple[int, list[Any]] | None = None
        self._prepare = getattr(blocks, "prepare", None)

    def __len__(self) -> int:
        return self.length

    def prepare(self, i: int) -> None:
        """Start the blocks' workers on the block of item ``i``, unless it is held."""
        held, j = self._held, self.layout.block_of(i)
        if self._prepare is not None and (held is None or held[0] != j):
            self._prepare(j)

    def block(self, i: int) -> tuple[Any, int]:
        """The block that holds item ``i`` (a list, or a :class:`~.placed.Placed`), and where.

        The block is held until another is asked for.
        """
        if not 0 <= i < self.length:
            raise IndexError(f"item {i} out of range for {self.length} items")
        j = self.layout.block_of(i)
        held = self._held
        if held is None or held[0] != j:
            self._held = None  # (its slot is free before the next block is awaited)
            held = self._held = (j, self.blocks[j])
        return held[1], i - self.layout.start(j)

    def __getitem__(self, i: int) -> Any:
        items, k = self.block(i)
        if type(items) is not list:  # written in place (:mod:`.placed`): this group's rows
            if k < items.count:
                return items.item(k)
            self._held = None
            if items.failed is not None:
                raise items.failed.error
            raise IndexError(f"item {i} is missing from its block of {items.count} items")
        item = items[k] if k < len(items) else items[-1]  # (one cut short ends failed)
        if isinstance(item, Failed):
            self._held = None
            raise item.error
        if k >= len(items):
            raise IndexError(f"item {i} is missing from its block of {len(items)} items")
        return item

    def release(self) -> None:
        """Let go of the block held, and release the blocks, if they can be."""
        self._held = None
        release = getattr(self.blocks, "release", None)
        if release is not None:
            release()
