"""Train a GRU on several nodes with torchrun, stop mid-epoch, finish on another number of ranks.

The same script runs on every node. Each rank builds the same :class:`~streamseq.StreamLoader`
(rank and world size from torch.distributed), reads its rows of the one global plan and
trains a GRU with ``DistributedDataParallel``. After ``--stop`` batches every rank takes
part in gathering the hidden states of all global rows, and rank 0 writes the checkpoint
(model, optimizer, ``loader.state_dict()``, hidden states) to ``--out``, a folder every node
sees. A later run, with any number of nodes and ranks, loads it with ``--resume``: every
rank plans the rest of the epoch on its rows, moves the hidden states of the rows that go
on with a begun stream (:meth:`~streamseq.StreamLoader.row_map`) and finishes the epoch.

Two nodes of 2 processes (run the same line on both, with the first node's address)::

    torchrun --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d \\
        --rdzv-endpoint=node0.example:29400 --rdzv-id=gru-42 \\
        examples/ddp_multinode.py --out /shared/gru --stop 5

then one node of 3 processes::

    torchrun --nnodes=1 --nproc-per-node=3 --rdzv-backend=c10d \\
        --rdzv-endpoint=localhost:29400 --rdzv-id=gru-43 \\
        examples/ddp_multinode.py --out /shared/gru --resume

Each rank writes what it delivered (every batch: each row's reset and the stream and step
of each valid step) to ``delivered-<phase>-<rank>.json`` in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys

import torch
from torch.nn.parallel import DistributedDataParallel

import streamseq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_train import make_streams, masked_mse  # noqa: E402
from elastic_resume import gather_rows, moved  # noqa: E402
from models import Predictor, process_group  # noqa: E402


def run(args: argparse.Namespace) -> dict:
    streams = make_streams(args.streams, args.min_len, args.max_len)  # the same on every node
    loader = streamseq.StreamLoader(
        streams,
        args.batch_size,
        args.tbins,
        num_workers=args.workers,
        shuffle=True,
        seed=5,
        lookahead=1,  # the step after each chunk: the chunk's last step predicts it
    )
    rank, world = loader.rank, loader.world_size
    torch.manual_seed(0)
    model = Predictor(args.hidden)
    if world > 1:
        model = DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    h = torch.zeros(1, args.batch_size, args.hidden)
    path = os.path.join(args.out, "checkpoint.pt")
    record: dict = {"rank": rank, "world_size": world, "host": socket.gethostname()}
    record["node"] = int(os.environ.get("GROUP_RANK", 0))  # torchrun's node rank
    if args.resume:
        checkpoint = torch.load(path)
        unwrapped(model).load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        rows = loader.row_map(checkpoint["loader"])  # this rank's rows -> old global rows
        loader.load_state_dict(checkpoint["loader"])
        h = moved(checkpoint["hidden"], rows)
        record.update(rows=rows, moved=h[0].tolist())
    record.update(length=len(loader), epoch=loader.epoch, batches=[])
    for batch in loader:
        h = h.detach()
        h[:, batch.reset] = 0  # rows that start a stream; moved rows have no reset here
        pred, h = model(batch.data[:, :-1], h)  # the chunk's tbins steps: h after the last
        loss = masked_mse(pred, batch.data[:, 1:], batch.target_mask())
        optimizer.zero_grad()
        loss.backward()  # an all-reduce: every rank gets here as often
        optimizer.step()
        record["batches"].append(delivered(batch))
        if not args.resume and len(record["batches"]) == args.stop:
            break
    hidden = gather_rows(h.detach())  # [1, world * batch_size, hidden]: every rank takes part
    record["state"] = loader.state_dict()  # the same on every rank
    if not args.resume and rank == 0:  # one writer, into a folder every node sees
        checkpoint = {
            "model": unwrapped(model).state_dict(),
            "optimizer": optimizer.state_dict(),
            "loader": record["state"],
            "hidden": hidden,
        }
        torch.save(checkpoint, path)
    phase = "resume" if args.resume else "first"
    with open(os.path.join(args.out, f"delivered-{phase}-{rank}.json"), "w") as f:
        json.dump(record, f)
    count = len(record["batches"])
    print(f"{phase} run, rank {rank}/{world} (node {record['node']}): {count} batches")
    return record


def delivered(batch: streamseq.Batch) -> list[list]:
    """Each row of ``batch``: ``[reset, [[stream, step], ...]]`` over the chunk's valid steps.

    (Not the look-ahead step after the chunk: it is the first step of the next chunk.)
    """
    rows, t = [], batch.valid.shape[1] - batch.lookahead
    for r in range(batch.valid.shape[0]):
        v = batch.valid[r, :t]
        pairs = zip(batch.stream[r, :t][v].tolist(), batch.step[r, :t][v].tolist(), strict=True)
        rows.append([bool(batch.reset[r]), [list(p) for p in pairs]])
    return rows


def unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside ``DistributedDataParallel``, or the model."""
    return model.module if isinstance(model, DistributedDataParallel) else model


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="a folder every node sees")
    parser.add_argument("--resume", action="store_true", help="load the checkpoint, finish")
    parser.add_argument("--stop", type=int, default=5, help="batches of the first run")
    parser.add_argument("--batch-size", type=int, default=2, help="rows per rank")
    parser.add_argument("--streams", type=int, default=20)
    parser.add_argument("--min-len", type=int, default=30)
    parser.add_argument("--max-len", type=int, default=120)
    parser.add_argument("--tbins", type=int, default=10)
    parser.add_argument("--hidden", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--workers", type=int, default=0, help="loader workers per rank")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    with process_group():
        record = run(args)
    return record


if __name__ == "__main__":
    main()
