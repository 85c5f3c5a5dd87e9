"""The loader's ``sampler``: where trainers set the epoch, as they do on a DataLoader's."""

from __future__ import annotations

from typing import Any


class EpochSampler:
    """Sets the epoch of a loader when a trainer calls ``sampler.set_epoch(epoch)``.

    Trainers written for :class:`torch.utils.data.DataLoader` set the epoch of its
    sampler before every epoch (Lightning does, with the number of epochs done, also
    after restoring a checkpoint). A loader's plan is its sampler: this object passes the
    call on to :meth:`StreamLoader.set_epoch <streamseq.StreamLoader.set_epoch>`, which
    keeps a position loaded from a state of that epoch. It draws nothing itself.

    Args:
        loader: the loader whose epoch is set.

    Example:
        >>> import numpy as np
        >>> from streamseq import StreamLoader
        >>> loader = StreamLoader([np.arange(4)], batch_size=1, tbins=2, shuffle=True)
        >>> loader.sampler.set_epoch(3)
        >>> loader.epoch, loader.sampler
        (3, EpochSampler(epoch=3))
    """

    def __init__(self, loader: Any):
        self._loader = loader

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch of the loader's next pass (see ``StreamLoader.set_epoch``)."""
        self._loader.set_epoch(epoch)

    def __repr__(self) -> str:
        return f"EpochSampler(epoch={self._loader.epoch})"
