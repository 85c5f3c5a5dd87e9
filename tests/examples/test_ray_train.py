import json

import pytest
from runner import load

pytest.importorskip("ray", reason="needs Ray Train: pip install 'streamseq[ray]'")


def write(out, attempt, world, parent, seen):
    """An attempt's records: ``seen[rank]`` lists (count, [[stream, step], ...])."""
    info = {"attempt": attempt, "world_size": world, "parent": parent, "time": 0}
    (out / f"attempt-{attempt}.json").write_text(json.dumps(info))
    for rank, batches in enumerate(seen):
        lines = [json.dumps([0, count, pairs]) for count, pairs in batches]
        (out / f"seen-{attempt}-{rank}.jsonl").write_text("\n".join(lines) + "\n")


def test_check_follows_the_checkpoints_back(tmp_path):
    check = load("ray_train").check
    # stream 0: 4 steps, stream 1: 3 steps; rows of 2 steps
    first = [[(1, [[0, 0], [0, 1]]), (2, [[0, 2], [0, 3]])], [(1, [[1, 0], [1, 1]]), (2, [])]]
    write(tmp_path, "a", 2, None, first)  # failed after 2 batches, checkpoint after 1
    write(tmp_path, "b", 1, ["a", 1], [[(1, [[0, 2], [0, 3]]), (2, [[1, 2]])]])
    (tmp_path / "done-b.json").write_text(json.dumps({"attempt": "b", "batches": 2}))
    summary = check(str(tmp_path), [4, 3])
    assert summary["exactly_once"]
    assert summary["retrained"] == 2  # stream 0's steps 2 and 3, after the checkpoint
    assert [(a["world_size"], a["committed"]) for a in summary["attempts"]] == [(2, 1), (1, None)]
    # the same records with the restored group restarting from the first checkpoint's start
    write(tmp_path, "b", 1, ["a", 2], [[(1, [[0, 2], [0, 3]]), (2, [[1, 2]])]])
    assert not check(str(tmp_path), [4, 3])["exactly_once"]  # steps 2 and 3 twice


def test_check_without_a_finished_attempt(tmp_path):
    write(tmp_path, "a", 1, None, [[(1, [[0, 0]])]])
    summary = load("ray_train").check(str(tmp_path), [1])
    assert not summary["exactly_once"] and "done" in summary["why"]
