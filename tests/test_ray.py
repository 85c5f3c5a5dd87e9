"""Ray Train, elastic: a node lost mid-epoch, the run goes on from a checkpoint on 1 worker.

The example starts a local Ray cluster of two 1-CPU nodes (and a head without CPUs), trains
on 2 workers (``num_workers=(1, 2)``) and, after 6 batches, the rank 1 worker leaves a
marker and its node is removed. Ray Train restarts the group with the one worker the
cluster still holds, from the checkpoint reported after 4 batches.
"""

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "ray_train.py"
EVERY, FAIL_AFTER = 4, 6

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None,
    reason="needs Ray Train: pip install 'streamseq[ray]'",
)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ray")
    command = [sys.executable, str(EXAMPLE), "--out", str(out), "--workers", "1", "2"]
    command += ["--nodes", "2", "--fail-after", str(FAIL_AFTER), "--every", str(EVERY)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), RAY_USAGE_STATS_ENABLED="0")
    log = out / "driver.log"
    with open(log, "w") as f:
        # its own process group: a timeout kills the driver and the Ray processes it started
        driver = subprocess.Popen(
            command, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            code = driver.wait(timeout=270)
        finally:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
                driver.wait(timeout=30)
    text = log.read_text()
    assert code == 0, text[-5000:]
    return out, text


def attempts(out):
    found = [json.loads(p.read_text()) for p in out.glob("attempt-*.json")]
    return sorted(found, key=lambda a: a["time"])


def records(out, attempt, rank):
    lines = (out / f"seen-{attempt}-{rank}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def lengths():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from ddp_train import make_streams
    finally:
        sys.path.remove(str(ROOT / "examples"))
    return [len(s) for s in make_streams(14, 30, 120)]  # the example's defaults


def test_two_workers_then_one_from_the_checkpoint(run):
    out, text = run
    first, second = attempts(out)  # the failed group and the one that finished
    assert (first["world_size"], second["world_size"]) == (2, 1)
    assert first["parent"] is None
    assert second["parent"] == [first["attempt"], EVERY]  # the last checkpoint before
    assert [p.name for p in out.glob("done-*.json")] == [f"done-{second['attempt']}.json"]
    assert "workers per attempt: 2 -> 1" in text
    assert json.loads((out / "failed-once.json").read_text())["node"]


def test_every_step_trained_once_by_the_committed_batches(run):
    out, _ = run
    first, second = attempts(out)
    steps = {}
    retrained = 0
    for rank in (0, 1):
        batches = records(out, first["attempt"], rank)
        assert [count for _, count, _ in batches] == list(range(1, FAIL_AFTER + 1))
        for _, count, pairs in batches:
            if count > EVERY:  # after the checkpoint: trained again by the next group
                retrained += len(pairs)
                continue
            for s, k in pairs:
                steps.setdefault(s, []).append(k)
    committed_first = sum(map(len, steps.values()))
    for _, _, pairs in records(out, second["attempt"], 0):
        for s, k in pairs:
            steps.setdefault(s, []).append(k)
    sizes = lengths()
    assert 0 < committed_first < sum(sizes)
    assert retrained > 0
    for s, n in enumerate(sizes):
        assert steps.get(s) == list(range(n)), s  # once, in order
    # the steps trained again are among those the restored group trained
    again = set()
    for rank in (0, 1):
        for _, count, pairs in records(out, first["attempt"], rank):
            if count > EVERY:
                again.update(map(tuple, pairs))
    last = {tuple(p) for _, _, pairs in records(out, second["attempt"], 0) for p in pairs}
    assert again <= last


def test_the_example_agrees(run):
    out, text = run
    sys.path.insert(0, str(ROOT / "tests" / "examples"))
    try:
        from runner import load
    finally:
        sys.path.remove(str(ROOT / "tests" / "examples"))
    summary = load("ray_train").check(str(out), lengths())
    assert summary["exactly_once"], summary
    assert [a["world_size"] for a in summary["attempts"]] == [2, 1]
    assert [a["committed"] for a in summary["attempts"]] == [EVERY, None]
    assert "every step read as an input once, in order: True" in text
