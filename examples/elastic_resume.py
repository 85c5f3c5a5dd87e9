"""Train a GRU on 2 ranks, stop mid-epoch, and finish the epoch on 1 rank with other rows.

A run on ``torchrun --nproc_per_node=2`` (2 CPU processes, gloo) trains with 3 rows per
rank for a few batches, then writes a checkpoint: the model, the optimizer, the loader's
state and the GRU's hidden state of all 6 global rows (gathered from both ranks). A new
run on one process with 4 rows loads it: the loader plans the rest of the epoch on its
4 rows from where every stream stands, and :meth:`~streamseq.StreamLoader.row_map` says
which old row each new row continues, so its hidden state moves with it. With
``lookahead=1`` every row also holds the step after its chunk: the GRU reads the chunk's
``tbins`` steps and predicts the steps one later (``batch.target_mask()``). Over the two
runs, every step of every stream is read as an input exactly once, in order, and every
step but the first of every stream is a target exactly once::

    torchrun --nproc_per_node=2 examples/elastic_resume.py --out /tmp/elastic --stop 6
    python examples/elastic_resume.py --out /tmp/elastic --resume --batch-size 4

Each run writes what it read and predicted (stream and step of every input, and of every
target) to ``seen-<phase>-<rank>.json`` in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import streamseq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_train import make_streams, masked_mse  # noqa: E402
from models import Predictor, process_group  # noqa: E402


def gather_rows(h: torch.Tensor) -> torch.Tensor:
    """The hidden states ``[1, B, H]`` of every rank, as ``[1, world * B, H]`` (global rows)."""
    if not dist.is_initialized():
        return h
    parts = [torch.empty_like(h) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, h.contiguous())
    return torch.cat(parts, dim=1)


def moved(old: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """Hidden states for new rows: that of the old global row each continues, else zeros."""
    index = torch.tensor(rows)
    h = old[:, index.clamp(min=0)]
    h[:, index < 0] = 0
    return h


def run(args: argparse.Namespace) -> dict:
    streams = make_streams(args.streams, args.min_len, args.max_len)
    loader = streamseq.StreamLoader(
        streams, args.batch_size, args.tbins, shuffle=True, seed=3, lookahead=1
    )
    torch.manual_seed(0)
    model = Predictor(args.hidden)
    if loader.world_size > 1:
        model = DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    h = torch.zeros(1, args.batch_size, args.hidden)
    path = os.path.join(args.out, "checkpoint.pt")
    if args.resume:
        checkpoint = torch.load(path)
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        rows = loader.row_map(checkpoint["loader"])  # before or after loading: the same
        loader.load_state_dict(checkpoint["loader"])
        h = moved(checkpoint["hidden"], rows)
        print(f"resumed epoch {loader.epoch} on {args.batch_size} rows; they continue {rows}")
    seen: list[tuple[int, int]] = []  # inputs
    targets: list[tuple[int, int]] = []
    count, t = 0, args.tbins
    for batch in loader:
        h = h.detach()
        # rows that start a stream forget the last one; after resuming, the rows that go
        # on with a begun stream (row_map) have no reset: they keep the state moved here
        h[:, batch.reset] = 0
        pred, h = model(batch.data[:, :-1], h)  # the chunk's tbins steps: h after the last
        mask = batch.target_mask()  # step t + 1 of the same stream
        loss = masked_mse(pred, batch.data[:, 1:], mask)
        # (a rank whose batch is all padding still steps: its zero gradient is averaged
        # with the others', and every rank of DistributedDataParallel must take part)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        stream, step = batch.stream, batch.step
        for r in range(batch.valid.shape[0]):
            v, m = batch.valid[r, :t], mask[r]
            seen += zip(stream[r, :t][v].tolist(), step[r, :t][v].tolist(), strict=True)
            targets += zip(stream[r, 1:][m].tolist(), step[r, 1:][m].tolist(), strict=True)
        count += 1
        if not args.resume and count == args.stop:
            break
    hidden = gather_rows(h.detach())  # every rank takes part
    if not args.resume and loader.rank == 0:
        checkpoint = {
            "model": model.module.state_dict() if loader.world_size > 1 else model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "loader": loader.state_dict(),  # the same on every rank
            "hidden": hidden,
        }
        torch.save(checkpoint, path)
    if dist.is_initialized():
        dist.barrier()  # no rank tears the group down while rank 0 still writes
    phase = "resume" if args.resume else "first"
    with open(os.path.join(args.out, f"seen-{phase}-{loader.rank}.json"), "w") as f:
        json.dump({"inputs": seen, "targets": targets}, f)
    print(
        f"{phase} run, rank {loader.rank}/{loader.world_size}: {count} batches, "
        f"{len(seen)} steps read as inputs, {len(targets)} used as targets"
    )
    return {
        "batches": count,
        "seen": seen,
        "targets": targets,
        "lengths": [len(s) for s in streams],
    }


def check(out: str, lengths: list[int], key: str = "inputs", first: int = 0) -> bool:
    """Whether the runs in ``out`` read every step of every stream once, in order.

    ``key="targets", first=1``: whether they predicted every step but the first once.
    """
    steps: dict[int, list[int]] = {}
    for phase in ("first", "resume"):
        for name in sorted(os.listdir(out)):
            if name.startswith(f"seen-{phase}-"):
                with open(os.path.join(out, name)) as f:
                    for s, k in json.load(f)[key]:
                        steps.setdefault(s, []).append(k)
    return all(steps.get(s, []) == list(range(first, n)) for s, n in enumerate(lengths))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the checkpoint and records")
    parser.add_argument("--resume", action="store_true", help="load the checkpoint, finish")
    parser.add_argument("--stop", type=int, default=6, help="batches of the first run")
    parser.add_argument("--batch-size", type=int, default=3, help="rows per rank")
    parser.add_argument("--streams", type=int, default=14)
    parser.add_argument("--min-len", type=int, default=30)
    parser.add_argument("--max-len", type=int, default=120)
    parser.add_argument("--tbins", type=int, default=10)
    parser.add_argument("--hidden", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.02)
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    with process_group():
        result = run(args)
    if args.resume:
        result["exactly_once"] = check(args.out, result["lengths"])
        result["targets_once"] = check(args.out, result["lengths"], "targets", first=1)
        print(f"every step read as an input once, in order: {result['exactly_once']}")
        print(f"every step but the first a target once, in order: {result['targets_once']}")
    result["total"] = int(np.sum(result["lengths"]))
    return result


if __name__ == "__main__":
    main()
