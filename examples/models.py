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


class SelectiveSSM(nn.Module):
    """A diagonal, input-dependent (selective) state-space layer, scanned step by step.

    The state of each row is ``[width, states]``; at every step ``t`` the input ``u_t``
    (``x_t`` projected to ``width``) chooses its own step size, input and output maps::

        dt = softplus(W_dt u_t + b)                        # [width], > 0
        h_t = exp(dt * A) * h_(t-1) + (dt * u_t) B(u_t)    # A = -exp(A_log) < 0
        y_t = h_t C(u_t) + D * u_t

    so the state forgets at a rate the input sets (Mamba's selection), in plain PyTorch.
    The scan takes the state before the first step and returns the state after the last
    one, which is what truncated BPTT carries from batch to batch; ``starts`` marks the
    steps where a new stream begins (the state is zeroed just before them), so a row
    packing several streams (``pad="pack"``) is read as each stream alone.

    Args:
        inputs: Features of a step.
        outputs: Features predicted at every step.
        width: Channels of the layer.
        states: Diagonal states per channel.

    Example:
        >>> import torch
        >>> torch.manual_seed(0) is not None
        True
        >>> ssm = SelectiveSSM(1, 1, width=4, states=3).double()
        >>> x = torch.randn(2, 6, 1, dtype=torch.float64)
        >>> y, h = ssm(x, ssm.initial_state(2))
        >>> y.shape, h.shape
        (torch.Size([2, 6, 1]), torch.Size([2, 4, 3]))
        >>> y1, h1 = ssm(x[:, :4], ssm.initial_state(2))  # the same, in two pieces
        >>> y2, h2 = ssm(x[:, 4:], h1)
        >>> torch.allclose(torch.cat([y1, y2], 1), y) and torch.allclose(h2, h)
        True
    """

    def __init__(self, inputs: int, outputs: int, width: int = 16, states: int = 8):
        super().__init__()
        self.width, self.states = width, states
        self.embed = nn.Linear(inputs, width)
        self.dt = nn.Linear(width, width)
        self.to_b = nn.Linear(width, states, bias=False)
        self.to_c = nn.Linear(width, states, bias=False)
        a = torch.arange(1, states + 1, dtype=torch.float32).repeat(width, 1)
        self.a_log = nn.Parameter(torch.log(a))  # A = -[1 .. states] per channel
        self.skip = nn.Parameter(torch.ones(width))
        self.head = nn.Linear(width, outputs)

    def initial_state(self, rows: int) -> torch.Tensor:
        """Zeros ``[rows, width, states]``: the state before a stream's first step."""
        p = self.a_log
        return torch.zeros(rows, self.width, self.states, dtype=p.dtype, device=p.device)

    def forward(
        self, x: torch.Tensor, h: torch.Tensor, starts: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Scan ``x`` from state ``h``.

        Args:
            x: Inputs ``[B, T, inputs]``.
            h: The state ``[B, width, states]`` before the first step of ``x``.
            starts: ``[B, T]`` bool, True where a stream starts (zero the state there
                first); None: no stream starts inside ``x``.

        Returns:
            The outputs ``[B, T, outputs]`` and the state after the last step.
        """
        u = self.embed(x)  # [B, T, width]
        dt = nn.functional.softplus(self.dt(u))
        b, c = self.to_b(u), self.to_c(u)  # [B, T, states]
        a = -torch.exp(self.a_log)  # [width, states]
        ys = []
        for t in range(x.shape[1]):
            if starts is not None:
                h = h * (~starts[:, t]).to(h.dtype)[:, None, None]
            step = dt[:, t, :, None]
            h = torch.exp(step * a) * h + (step * u[:, t, :, None]) * b[:, t, None, :]
            ys.append((h * c[:, t, None, :]).sum(-1) + self.skip * u[:, t])
        return self.head(torch.stack(ys, 1)), h


def stream_starts(reset: torch.Tensor, valid: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """``[B, T]``: True where a row starts a stream (or a segment) at step t of a chunk.

    A row starts one at the chunk's first step where ``reset`` is set, and, with
    ``pad="pack"``, wherever a valid step is step 0 of its stream. (A segment after the
    first, packed inside a chunk, starts at another step: not marked here.)

    Example:
        >>> r = torch.tensor([True, False])
        >>> v = torch.tensor([[True, True, True], [True, True, False]])
        >>> k = torch.tensor([[5, 6, 7], [8, 0, -1]])
        >>> stream_starts(r, v, k).tolist()
        [[True, False, False], [False, True, False]]
    """
    starts = valid & (step == 0)
    starts[:, 0] |= reset
    return starts
