"""What the training examples share: a GRU predicting the next value, a process group."""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import nn


@contextlib.contextmanager
def process_group() -> Iterator[bool]:
    """The ``torch.distributed`` group of a ``torchrun`` process (gloo); nothing otherwise.

    Yields whether the process is one of a group. On success the ranks leave together:
    the DistributedDataParallel model (held in a reference cycle) is freed while its
    group lives, then all meet at a barrier (gloo aborts the process otherwise).
    """
    distributed = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if distributed and not dist.is_initialized():
        dist.init_process_group("gloo")
    try:
        yield distributed
        if distributed:
            gc.collect()
            dist.barrier()
    finally:
        if distributed:
            dist.destroy_process_group()


class Predictor(nn.Module):
    """A GRU reading ``[B, T, 1]`` and predicting the next value at every step.

    Args:
        hidden: Units of the GRU.
    """

    def __init__(self, hidden: int = 16):
        super().__init__()
        self.gru = nn.GRU(1, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Predict the value after each step of ``x``.

        Args:
            x: Values ``[B, T, 1]``.
            h: Hidden state ``[1, B, hidden]`` before the first step of ``x``.

        Returns:
            The predictions ``[B, T, 1]`` and the hidden state after the last step.
        """
        out, h = self.gru(x, h)
        return self.head(out), h
