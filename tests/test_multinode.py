"""Two torchrun nodes of 2 ranks (c10d rendezvous, gloo), then a resume on one node of 3."""

import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist

from streamseq import StreamLoader

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "ddp_multinode.py"
B, T, STOP, STREAMS, SEED = 2, 10, 5, 20, 5  # the example's defaults (rows per rank, ...)

pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()), reason="needs gloo"
)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(nnodes, nproc, port, *args):
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        f"--rdzv-id=streamseq-{uuid.uuid4().hex[:8]}",
        str(EXAMPLE),
        *map(str, args),
    ]


def run_agents(commands, out, name, timeout=240):
    """Start one torchrun agent per command, each in its own process group (a node), and
    wait for all; on a timeout or a failure, kill every group, so nothing outlives the test."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    logs = [open(out / f"{name}-agent{i}.log", "w") for i in range(len(commands))]  # noqa: SIM115
    agents = [
        subprocess.Popen(c, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        for c, log in zip(commands, logs, strict=True)
    ]
    try:
        codes = [agent.wait(timeout=timeout) for agent in agents]
    finally:
        for agent in agents:
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.wait(timeout=30)
        for log in logs:
            log.close()
    text = "\n".join((out / f"{name}-agent{i}.log").read_text()[-3000:] for i in range(len(logs)))
    assert codes == [0] * len(agents), text
    return text


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("multinode")
    port = free_port()
    first = torchrun(2, 2, port, "--out", out, "--stop", STOP, "--workers", 1)
    run_agents([first, first], out, "first")  # two agents on this machine: two nodes
    run_agents([torchrun(1, 3, free_port(), "--out", out, "--resume")], out, "resume")
    load = lambda phase, r: json.loads((out / f"delivered-{phase}-{r}.json").read_text())  # noqa: E731
    return {
        "first": [load("first", r) for r in range(4)],
        "resume": [load("resume", r) for r in range(3)],
        "checkpoint": torch.load(out / "checkpoint.pt"),
    }


def streams():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from ddp_train import make_streams
    finally:
        sys.path.remove(str(ROOT / "examples"))
    return make_streams(STREAMS, 30, 120)


def global_rows(loader, stop=None):
    """Every batch of ``loader`` as the example records it: per row (reset, [[stream, step]])."""
    out = []
    for i, batch in enumerate(loader):
        if i == stop:
            break
        rows = []
        for r in range(batch.valid.shape[0]):
            v = batch.valid[r]
            steps = zip(batch.stream[r][v].tolist(), batch.step[r][v].tolist(), strict=True)
            pairs = [list(p) for p in steps]
            rows.append([bool(batch.reset[r]), pairs])
        out.append(rows)
    return out


def test_two_nodes_of_two_ranks(runs):
    first = runs["first"]
    assert [r["rank"] for r in first] == [0, 1, 2, 3]
    assert {r["world_size"] for r in first} == {4}
    nodes = sorted(r["node"] for r in first)
    assert nodes == [0, 0, 1, 1]
    assert {r["node"] for r in first[:2]} != {r["node"] for r in first[2:]}  # one node each


def test_same_number_of_batches_and_identical_states_on_every_rank(runs):
    for phase in ("first", "resume"):
        records = runs[phase]
        assert len({r["length"] for r in records}) == 1
        assert len({len(r["batches"]) for r in records}) == 1
        assert all(r["state"] == records[0]["state"] for r in records), phase
    assert len(runs["first"][0]["batches"]) == STOP
    assert runs["first"][0]["state"]["next_batch"] == STOP
    assert runs["checkpoint"]["loader"] == runs["first"][0]["state"]
    assert len(runs["resume"][0]["batches"]) == runs["resume"][0]["length"]


def test_every_global_row_once(runs):
    """Rank r's rows are rows r * B onwards of one loader of all the global rows."""
    for phase, world in (("first", 4), ("resume", 3)):
        whole = StreamLoader(streams(), B * world, T, shuffle=True, seed=SEED)
        if phase == "resume":
            whole.load_state_dict(runs["checkpoint"]["loader"])
        want = global_rows(whole, STOP if phase == "first" else None)
        for r, record in enumerate(runs[phase]):
            got = record["batches"]
            assert len(got) == len(want)
            for i, (g, w) in enumerate(zip(got, want, strict=True)):
                assert g == w[r * B : (r + 1) * B], (phase, r, i)


def test_the_resume_delivers_the_rest_of_the_epoch_once(runs):
    lengths = [len(s) for s in streams()]
    steps = {}
    for phase in ("first", "resume"):
        for record in runs[phase]:
            assert record["epoch"] == 0
            for batch in record["batches"]:
                for _, pairs in batch:
                    for s, k in pairs:
                        steps.setdefault(s, []).append(k)
    first = sum(len(p) for r in runs["first"] for b in r["batches"] for _, p in b)
    assert 0 < first < sum(lengths)
    for s, n in enumerate(lengths):
        assert sorted(steps.get(s, [])) == list(range(n)), s
    # in order within a stream: a stream stays in one row of one rank per phase
    for s in range(len(lengths)):
        order = [
            k
            for phase in ("first", "resume")
            for record in runs[phase]
            for batch in record["batches"]
            for _, pairs in batch
            for t, k in pairs
            if t == s
        ]
        assert order == sorted(order), s


def test_row_map_moves_the_hidden_states_with_their_streams(runs):
    hidden = runs["checkpoint"]["hidden"][0].numpy()  # [old global rows, H]
    last = {}  # old global row -> (stream, step) it delivered last
    for r, record in enumerate(runs["first"]):
        for batch in record["batches"]:
            for j, (_, pairs) in enumerate(batch):
                if pairs:
                    last[r * B + j] = tuple(pairs[-1])
    continued = 0
    for record in runs["resume"]:
        for j, g in enumerate(record["rows"]):
            moved = np.array(record["moved"][j])
            if g < 0:
                np.testing.assert_array_equal(moved, 0)
                continue
            continued += 1
            np.testing.assert_allclose(moved, hidden[g], rtol=0, atol=0)
            reset, pairs = record["batches"][0][j]
            s, k = last[g]
            assert not reset and pairs[0] == [s, k + 1], (g, pairs[:2], (s, k))
    assert continued > 0
