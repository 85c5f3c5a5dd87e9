"""Train a GRU with Ray Train; after a lost worker, go on from the last checkpoint on fewer.

Every Ray Train worker builds a :class:`~streamseq.StreamLoader` over the same streams, with
its rank and the world size from ``ray.train.get_context()``: every worker computes the same
global plan and reads its own rows. Every ``--every`` batches the workers gather the GRU's
hidden state of every global row and report a checkpoint (rank 0 writes it): the model, the
optimizer, ``loader.state_dict()`` and those hidden states. When a worker fails, Ray Train
stops the group and starts a new one, with as many workers as the cluster then holds when
``--workers`` is a range (elastic); every worker loads the latest checkpoint
(``ray.train.get_checkpoint()``), plans the rest of the epoch on its rows and moves the
hidden states with :meth:`~streamseq.StreamLoader.row_map`. The batches trained after that
checkpoint and before the failure are trained again, from the restored state.

Run on a local Ray cluster of 2 CPUs (``--fail-after 6``: the worker of rank 1 exits after
6 batches, once; ``--workers 1 2``: elastic, from 1 to 2 workers)::

    python examples/ray_train.py --out /tmp/ray --workers 2 --fail-after 6
    python examples/ray_train.py --out /tmp/ray-elastic --workers 1 2 --fail-after 6

Every worker writes what it trained on (epoch, batch and the stream and step of every
valid step) to ``seen-<attempt>-<rank>.jsonl`` in ``--out``, and rank 0 writes
``attempt-<attempt>.json`` (world size, the checkpoint it started from); :func:`check`
follows the checkpoints from the attempt that finished back to the first one and tells
whether every step was trained on once.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import threading
import time
import uuid

import numpy as np
import ray
import ray.cloudpickle
import ray.train
import ray.train.torch
import torch
import torch.distributed as dist
from ray.cluster_utils import Cluster
from ray.train import Checkpoint, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer

import streamseq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp_train  # noqa: E402
import models  # noqa: E402
from elastic_resume import gather_rows, moved  # noqa: E402

# the workers receive the training function pickled: send the examples' own modules by value,
# so that the workers need not find them on their path (streamseq is installed everywhere)
for _module in (ddp_train, models, sys.modules["elastic_resume"]):
    ray.cloudpickle.register_pickle_by_value(_module)
if __name__ != "__main__":
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def train_loop(config: dict) -> None:
    """One Ray Train worker: read this rank's rows, train, checkpoint, fail once if asked."""
    torch.set_num_threads(1)
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    streams = ddp_train.make_streams(config["streams"], config["min_len"], config["max_len"])
    batch_size, hidden = config["batch_size"], config["hidden"]
    loader = streamseq.StreamLoader(
        streams,
        batch_size,
        config["tbins"],
        shuffle=True,
        seed=3,
        rank=rank,
        world_size=world,
        lookahead=1,  # the step after each chunk: the chunk's last step predicts it
    )
    t = config["tbins"]
    torch.manual_seed(0)
    model = ray.train.torch.prepare_model(models.Predictor(hidden))  # DDP with 2+ workers
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    h = torch.zeros(1, batch_size, hidden)
    attempt = agreed(uuid.uuid4().hex[:12])  # names this group's records
    parent = None
    checkpoint = ray.train.get_checkpoint()  # the latest one reported, None at the start
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            saved = torch.load(os.path.join(folder, "state.pt"))
        unwrapped(model).load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        rows = loader.row_map(saved["loader"])  # this rank's rows -> old global rows
        loader.load_state_dict(saved["loader"])
        h = moved(saved["hidden"], rows)  # [1, old world * old batch_size, hidden] -> ours
        parent = [saved["attempt"], saved["batches"]]
    out = config["out"]
    if rank == 0:
        info = {"attempt": attempt, "world_size": world, "parent": parent, "time": time.time()}
        with open(os.path.join(out, f"attempt-{attempt}.json"), "w") as f:
            json.dump(info, f)
    record = open(os.path.join(out, f"seen-{attempt}-{rank}.jsonl"), "w")  # noqa: SIM115
    count = 0  # batches trained by this group
    for epoch in range(loader.epoch, config["epochs"]):
        loader.set_epoch(epoch)  # keeps a loaded position
        for batch in loader:
            h = h.detach()
            h[:, batch.reset] = 0  # rows continuing a moved stream have no reset here
            pred, h = model(batch.data[:, :-1], h)  # the chunk's tbins steps: h after the last
            loss = ddp_train.masked_mse(pred, batch.data[:, 1:], batch.target_mask())
            optimizer.zero_grad()
            loss.backward()  # an all-reduce over the workers
            optimizer.step()
            count += 1
            valid = batch.valid[:, :t]  # the inputs: the chunk's steps
            steps = [
                pair
                for r in range(valid.shape[0])
                for pair in zip(
                    batch.stream[r, :t][valid[r]].tolist(),
                    batch.step[r, :t][valid[r]].tolist(),
                    strict=True,
                )
            ]
            record.write(json.dumps([epoch, count, steps]) + "\n")
            record.flush()
            if count % config["every"] == 0:
                save(model, optimizer, loader, h, attempt, count, loss.item())
            if (
                rank == config["fail_rank"]
                and count == config["fail_after"]
                and not os.path.exists(config["marker"])
            ):
                lose_worker(config)
    save(model, optimizer, loader, h, attempt, count, float("nan"))  # the end: done
    record.close()
    if rank == 0:
        with open(os.path.join(out, f"done-{attempt}.json"), "w") as f:
            json.dump({"attempt": attempt, "batches": count}, f)
    if dist.is_initialized():
        gc.collect()  # free the DDP model (a reference cycle) while the group lives
        dist.barrier()


def agreed(value: str) -> str:
    """Rank 0's ``value``, on every rank."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside ``DistributedDataParallel``, or the model."""
    return model.module if hasattr(model, "module") else model


def save(model, optimizer, loader, h, attempt: str, count: int, loss: float) -> None:
    """Report a checkpoint: rank 0 writes it, every rank gathers and reports (a barrier)."""
    hidden = gather_rows(h.detach())  # [1, world * batch_size, hidden], every rank takes part
    metrics = {"loss": loss, "batches": count, "epoch": loader.epoch}
    if ray.train.get_context().get_world_rank() != 0:
        ray.train.report(metrics, checkpoint=None)
        return
    with tempfile.TemporaryDirectory() as folder:
        state = {
            "model": unwrapped(model).state_dict(),
            "optimizer": optimizer.state_dict(),
            "loader": loader.state_dict(),  # the same on every rank
            "hidden": hidden,
            "attempt": attempt,
            "batches": count,
        }
        torch.save(state, os.path.join(folder, "state.pt"))
        ray.train.report(metrics, checkpoint=Checkpoint.from_directory(folder))


def lose_worker(config: dict) -> None:
    """Simulate a lost worker: leave a marker (with this node's id), wait, exit at once.

    It first waits for Ray Train to register the checkpoints reported so far (a report is
    collected by the controller a moment later: a worker that dies before loses it), so
    that the run restarts from a known checkpoint.
    """
    ray.train.get_all_reported_checkpoints()
    with open(config["marker"], "w") as f:
        json.dump({"node": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}, f)
    time.sleep(config["fail_wait"])  # time for a supervisor to take the node away
    os._exit(1)


def check(out: str, lengths: list[int], epochs: int = 1) -> dict:
    """Follow the checkpoints from the attempt that finished back to the first attempt.

    An attempt commits the batches up to the checkpoint the next attempt started from; the
    one that finished commits all its batches. Returns ``exactly_once`` (every step of every
    stream trained on once per epoch, in order, by the committed batches), the attempts in
    order (``attempt``, ``world_size``, ``committed`` batches) and ``retrained``: steps
    trained after the last checkpoint of a failed attempt (trained again after it).
    """
    attempts = {}
    for name in os.listdir(out):
        if name.startswith("attempt-"):
            with open(os.path.join(out, name)) as f:
                info = json.load(f)
            attempts[info["attempt"]] = info
    done = [n for n in os.listdir(out) if n.startswith("done-")]
    if len(done) != 1:
        return {"exactly_once": False, "attempts": [], "retrained": 0, "why": f"done: {done}"}
    with open(os.path.join(out, done[0])) as f:
        last = json.load(f)
    chain = [(last["attempt"], None)]  # (attempt, batches committed; None: all)
    while attempts[chain[-1][0]]["parent"] is not None:
        chain.append(tuple(attempts[chain[-1][0]]["parent"]))
    chain.reverse()
    steps: dict[tuple[int, int], list[int]] = {}
    retrained = 0
    for name, committed in chain:
        for rank in range(attempts[name]["world_size"]):
            with open(os.path.join(out, f"seen-{name}-{rank}.jsonl")) as f:
                for line in f:
                    epoch, count, pairs = json.loads(line)
                    if committed is not None and count > committed:
                        retrained += len(pairs)
                        continue
                    for s, k in pairs:
                        steps.setdefault((epoch, s), []).append(k)
    once = all(
        steps.get((e, s), []) == list(range(n))
        for e in range(epochs)
        for s, n in enumerate(lengths)
    )
    once = once and sum(map(len, steps.values())) == epochs * sum(lengths)
    order = [
        {"attempt": a, "world_size": attempts[a]["world_size"], "committed": c} for a, c in chain
    ]
    return {"exactly_once": once, "attempts": order, "retrained": retrained}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the records and checkpoints")
    parser.add_argument("--workers", type=int, nargs="+", default=[2], help="N, or MIN MAX")
    parser.add_argument("--fail-after", type=int, default=0, help="rank 1 exits after N")
    parser.add_argument("--fail-rank", type=int, default=1, help="the rank that exits")
    parser.add_argument("--fail-wait", type=float, default=0.0, help="seconds before it exits")
    parser.add_argument("--max-failures", type=int, default=2, help="restarts allowed")
    parser.add_argument("--every", type=int, default=4, help="batches between checkpoints")
    parser.add_argument("--batch-size", type=int, default=3, help="rows per worker")
    parser.add_argument("--streams", type=int, default=14)
    parser.add_argument("--min-len", type=int, default=30)
    parser.add_argument("--max-len", type=int, default=120)
    parser.add_argument("--tbins", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--hidden", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray cluster")
    parser.add_argument("--nodes", type=int, default=0, help="simulate N nodes of 1 CPU")
    args = parser.parse_args(argv)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    config = {k: v for k, v in vars(args).items() if k not in ("workers", "cpus", "nodes")}
    config.update(out=out, marker=os.path.join(out, "failed-once.json"))
    if args.fail_after <= 0:
        config["fail_rank"] = -1
    cluster = None
    if args.nodes:  # a cluster of nodes on this machine; the failing worker's node is lost
        cluster = simulated_cluster(args.nodes)
        config["fail_wait"] = max(args.fail_wait, 120.0)  # killed with its node before
        # Ray Train counts the lost node's CPU until its resource view refreshes (every 20 s):
        # a group of the old size waits for it this long (60 s by default), then it retries
        # with the workers the cluster holds
        os.environ.setdefault("RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S", "10")
        watch = threading.Thread(target=take_node_away, args=(cluster, config["marker"]))
        watch.daemon = True
        watch.start()
    elif not ray.is_initialized():  # a local cluster; connect to yours with ray.init(address=)
        ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    try:
        result = fit(args, config)
    finally:
        if cluster is not None:
            ray.shutdown()
            cluster.shutdown()
    lengths = [len(s) for s in ddp_train.make_streams(args.streams, args.min_len, args.max_len)]
    summary = check(out, lengths, args.epochs)
    summary.update(lengths=lengths, total=int(np.sum(lengths)) * args.epochs)
    summary["checkpoint"] = result.checkpoint.path if result.checkpoint else None
    worlds = " -> ".join(str(a["world_size"]) for a in summary["attempts"])
    print(f"workers per attempt: {worlds}; steps trained again: {summary['retrained']}")
    print(f"every step read as an input once, in order: {summary['exactly_once']}")
    return summary


def fit(args: argparse.Namespace, config: dict) -> ray.train.Result:
    """Run the trainer: ``args.workers`` workers (a range: elastic), restarts on failure."""
    workers = args.workers[0] if len(args.workers) == 1 else tuple(args.workers)
    trainer = TorchTrainer(
        train_loop,
        train_loop_config=config,
        torch_config=TorchConfig(backend="gloo"),
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=False),
        run_config=RunConfig(
            name="streamseq-gru",
            storage_path=os.path.join(config["out"], "storage"),  # shared by all nodes
            failure_config=FailureConfig(max_failures=args.max_failures),
        ),
    )
    return trainer.fit()


def simulated_cluster(nodes: int) -> Cluster:
    """A head node without CPUs (the driver, Ray Train's controller) and ``nodes`` nodes of
    1 CPU each, all on this machine: a worker per node."""
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(nodes):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    return cluster


def take_node_away(cluster: Cluster, marker: str) -> None:
    """Once the marker names a node, remove that node from the cluster (a lost node)."""
    while not os.path.exists(marker):
        time.sleep(0.2)
    time.sleep(0.2)  # the marker is written in one go, but let it land
    with open(marker) as f:
        node = json.load(f)["node"]
    for candidate in list(cluster.worker_nodes):
        if candidate.node_id == node:
            cluster.remove_node(candidate)


if __name__ == "__main__":
    main()
