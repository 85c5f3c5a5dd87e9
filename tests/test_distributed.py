"""Two ranks under torchrun (gloo): disjoint rows of one plan, equal lengths, DDP training."""

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch.distributed as dist
from helpers import torchrun

from streamseq import StreamLoader

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "ddp_train.py"
ARGS = ["--streams", "13", "--batch-size", "2", "--tbins", "16", "--epochs", "3"]

pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()), reason="needs gloo"
)


def load_example():
    spec = importlib.util.spec_from_file_location("ddp_train", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    command = torchrun(EXAMPLE, "--out", str(out), "--workers", "1", *ARGS)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def test_ranks_come_from_torch_distributed(ranks):
    assert [r["rank"] for r in ranks] == [0, 1]
    assert [r["world_size"] for r in ranks] == [2, 2]


def test_equal_lengths_on_every_rank(ranks):
    a, b = ranks
    assert a["lengths"] == b["lengths"] == a["batches"] == b["batches"]
    assert len(a["losses"]) == len(b["losses"]) == sum(a["batches"])


def test_disjoint_streams_covering_all(ranks):
    streams = load_example().make_streams(13, 40, 160)
    everything = {s for s, x in enumerate(streams) if len(x)}
    for epoch in range(3):
        mine = [set(r["streams"][epoch]) for r in ranks]
        assert not mine[0] & mine[1], f"epoch {epoch}: a stream on both ranks"
        assert mine[0] | mine[1] == everything, f"epoch {epoch}: streams missing"


def test_each_rank_reads_its_rows_of_the_global_plan(ranks):
    streams = load_example().make_streams(13, 40, 160)
    whole = StreamLoader(streams, 4, 16, shuffle=True, seed=1, rank=0, world_size=1)
    for epoch in range(3):
        whole.set_epoch(epoch)
        rows = whole.plan().assignment  # (whole streams: pieces are streams)
        assert len(whole) == ranks[0]["lengths"][epoch]
        for r, record in enumerate(ranks):
            ids = {int(i) for row in rows[2 * r : 2 * r + 2] for i in row}
            assert ids == set(record["streams"][epoch])


def test_ddp_training_loss_falls_and_ranks_agree(ranks):
    module = load_example()
    first, last = module.epoch_loss(ranks[0], 0), module.epoch_loss(ranks[0], 2)
    assert last < 0.5 * first, (first, last)
    np.testing.assert_allclose(ranks[0]["params"], ranks[1]["params"], rtol=0, atol=1e-6)
