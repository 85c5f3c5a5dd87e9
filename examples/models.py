"""The model of ``ddp_train.py`` and ``resume_run.py``: a GRU predicting the next value."""

from __future__ import annotations

import torch
from torch import nn


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
