"""An action-chunking policy on LeRobot episodes: at every step, the next H actions.

An action-chunking policy (ACT, diffusion policies) predicts at step t the actions of
steps ``t .. t + H - 1`` (LeRobot's ``delta_timestamps`` of ``action``: ``[0, 1/fps, ...,
(H-1)/fps]``). A chunk of ``tbins`` steps holds them for its first steps only; with
``lookahead=H - 1`` every row also holds the ``H - 1`` steps that follow its chunk in the
same episode, so every step of a chunk has its whole action chunk, but where the episode
ends first. The policy here is a selective state-space layer (:class:`models.SelectiveSSM`)
over the robot's state, trained by truncated BPTT: its state carried from batch to batch
and zeroed where a row starts an episode, so the policy trained on chunks is the one that
runs over a whole episode at inference.

The dataset is the one of ``robot_episodes.py`` (LeRobot v3.0, written with its layout): a
square moving over a picture, its position the state and the move to the next position
the action. The policy reads the states (``cameras=[]``: no video is decoded; a frame
encoder before the layer would read the camera the same way).

- ``action_mask(batch, H)`` ``[B, tbins, H]``: True where step t is valid and the step
  ``t + j`` of the same row goes on its episode (same ``stream``, ``step`` j later): the
  actions that exist, never those of another episode;
- every action of every episode is a target at each of the H offsets it can be predicted
  from (``min(H, its step + 1)`` times), exactly once an epoch each;
- a batch of padding alone is skipped (``continue``).

Run: ``python examples/robot_policy.py [--horizon 4] [--epochs 6] [--workers 2]``
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any

import torch

import streamseq
from streamseq.io import lerobot

# models.py and robot_episodes.py lie beside this file (found as a script and by path)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import SelectiveSSM, stream_starts  # noqa: E402
from robot_episodes import HEIGHT, WIDTH, write_dataset  # noqa: E402

SCALE = max(HEIGHT, WIDTH)  # states in pixels: the policy reads them in [0, 1]


class Policy(SelectiveSSM):
    """A selective state-space layer reading states ``[B, T, 2]``, giving ``[B, T, H, 2]``.

    Args:
        horizon: Actions predicted at every step (H).
        width: Channels of the layer.
        states: Diagonal states per channel.
    """

    def __init__(self, horizon: int, width: int = 16, states: int = 8):
        super().__init__(2, 2 * horizon, width, states)
        self.horizon = horizon

    def forward(
        self, x: torch.Tensor, h: torch.Tensor, starts: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The H actions from every step of ``x`` (states in pixels), and the state after."""
        out, h = super().forward(x / SCALE, h, starts)
        return out.unflatten(-1, (self.horizon, 2)), h


def action_mask(batch: streamseq.Batch, horizon: int) -> torch.Tensor:
    """``[B, tbins, H]``: the action of step ``t + j`` is a target of step ``t``.

    True where step t is valid and position ``t + j`` holds step ``step + j`` of the same
    stream (an episode that ends first leaves the rest out).
    """
    tbins = batch.valid.shape[1] - batch.lookahead
    if batch.lookahead < horizon - 1:
        raise ValueError(f"action chunks of {horizon} need lookahead={horizon - 1} or more")
    valid, stream, step = batch.valid, batch.stream, batch.step
    cols = []
    for j in range(horizon):
        ahead = slice(j, j + tbins)
        cols.append(
            valid[:, :tbins]
            & valid[:, ahead]
            & (stream[:, ahead] == stream[:, :tbins])
            & (step[:, ahead] == step[:, :tbins] + j)
        )
    return torch.stack(cols, -1)


def chunk_loss(
    policy: Policy, batch: streamseq.Batch, h: torch.Tensor
) -> tuple[torch.Tensor, int, int, torch.Tensor]:
    """The squared error of a batch's action chunks, read from state ``h``, summed.

    Returns the sum, the number of steps read as inputs, the number of (step, action)
    targets and the state after the chunk's last step (not detached).
    """
    tbins, horizon = batch.valid.shape[1] - batch.lookahead, policy.horizon
    state = batch.data["observation.state"].to(h.dtype)
    action = batch.data["action"].to(h.dtype)
    valid = batch.valid[:, :tbins]
    starts = stream_starts(batch.reset, valid, batch.step[:, :tbins])
    pred, h = policy(state[:, :tbins], h, starts)  # [B, tbins, H, 2]
    want = torch.stack([action[:, j : j + tbins] for j in range(horizon)], 2)
    mask = action_mask(batch, horizon)
    err = ((pred - want) ** 2).sum(-1)
    return (err * mask).sum(), int(valid.sum()), int(mask.sum()), h


def episode_loss(policy: Policy, episode: dict[str, Any]) -> torch.Tensor:
    """The same error over a whole episode read at once, from a zero state."""
    state = torch.tensor(episode["observation.state"], dtype=policy.a_log.dtype)[None]
    action = torch.tensor(episode["action"], dtype=state.dtype)
    pred, _ = policy(state, policy.initial_state(1))
    n, total = len(action), torch.zeros((), dtype=state.dtype)
    for j in range(min(policy.horizon, n)):
        total = total + ((pred[0, : n - j, j] - action[j:]) ** 2).sum()
    return total


def make_loader(streams: list, batch_size: int, tbins: int, horizon: int, **kw: Any):
    """Episodes in rows of ``batch_size``, each row also holding the next ``H - 1`` steps."""
    return streamseq.StreamLoader(streams, batch_size, tbins, lookahead=horizon - 1, **kw)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=6)
    parser.add_argument("--horizon", type=int, default=4, help="actions a step predicts (H)")
    parser.add_argument("--batch-size", type=int, default=3)
    parser.add_argument("--tbins", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--out", help="folder for the dataset (a temporary one by default)")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    folder = args.out or tempfile.mkdtemp(prefix="robot_policy_")
    lengths = [30 + 13 * (k % 4) for k in range(args.episodes)]
    write_dataset(folder, lengths)
    streams = lerobot(folder, cameras=[], columns=["observation.state", "action"])
    loader = make_loader(
        streams, args.batch_size, args.tbins, args.horizon, num_workers=args.workers, shuffle=True
    )
    policy = Policy(args.horizon)
    optimiser = torch.optim.Adam(policy.parameters(), lr=args.lr)
    h_ = args.horizon
    wanted = sum(sum(min(h_, n - t) for t in range(n)) for n in lengths)
    print(
        f"{len(streams)} episodes, {sum(lengths)} steps, {len(loader)} batches an epoch, "
        f"chunks of {h_} actions (lookahead={h_ - 1})"
    )
    losses, counts = [], []
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        h = policy.initial_state(args.batch_size)
        total, inputs, targets = 0.0, 0, 0
        for batch in loader:
            if not batch.valid.any():  # all padding: no step, counted nowhere
                continue
            loss, read, n, h = chunk_loss(policy, batch, h.detach())
            if n:
                optimiser.zero_grad()
                (loss / n).backward()
                optimiser.step()
            total, inputs, targets = total + float(loss.detach()), inputs + read, targets + n
        losses.append(total / targets)
        counts.append((inputs, targets))
        print(
            f"epoch {epoch}: loss {losses[-1]:.3f}; {inputs} steps read as inputs, "
            f"{targets} actions used as targets"
        )
    print(f"expected: {sum(lengths)} inputs and {wanted} targets an epoch")
    return {
        "folder": folder,
        "streams": streams,
        "lengths": lengths,
        "losses": losses,
        "counts": counts,
        "wanted": wanted,
        "policy": policy,
    }


if __name__ == "__main__":
    main()
