"""The action-chunking policy on LeRobot episodes: every action chunk, parity with episodes."""

import warnings

import pytest
import torch
from runner import load

from streamseq.io import lerobot

pytest.importorskip("pyarrow")

LENGTHS = [9, 1, 14, 5, 0, 11, 3]
HORIZON = 3


@pytest.fixture(scope="module")
def example():
    return load("robot_policy")


@pytest.fixture(scope="module")
def episodes(example, tmp_path_factory):
    folder = tmp_path_factory.mktemp("robot")
    example.write_dataset(str(folder), LENGTHS)
    return lerobot(str(folder), cameras=[], columns=["observation.state", "action"])


def policy(module):
    torch.manual_seed(0)
    return module.Policy(HORIZON, width=4, states=3).double()


def whole_loss(module, net, episodes):
    total = torch.zeros((), dtype=torch.float64)
    for e in episodes:
        if len(e):
            total = total + module.episode_loss(net, e[0 : len(e)])
    return total


def chunked(module, net, batches, h):
    total, targets = torch.zeros((), dtype=torch.float64), 0
    for batch in batches:
        if not batch.valid.any():
            continue
        loss, _, n, h = module.chunk_loss(net, batch, h)
        total, targets = total + loss, targets + n
    return total, targets, h


def close(got, want):
    return abs(got.item() - want.item()) <= 1e-10 * abs(want.item())


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("pad", ["zeros", "pack"])
def test_chunked_loss_with_carried_state_equals_the_episode_loss(example, episodes, workers, pad):
    net = policy(example)
    want = whole_loss(example, net, episodes)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        loader = example.make_loader(
            episodes, 3, 4, HORIZON, num_workers=workers, pad=pad, shuffle=True
        )
        got, targets, _ = chunked(example, net, loader, net.initial_state(3))
    assert close(got, want), (got.item(), want.item())
    assert targets == sum(min(HORIZON, n - t) for n in LENGTHS for t in range(n))


@pytest.mark.parametrize("pad", ["zeros", "pack"])
def test_parity_holds_across_a_resume_on_another_batch_size_with_row_map(example, episodes, pad):
    net = policy(example)
    want = whole_loss(example, net, episodes)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run = example.make_loader(episodes, 2, 4, HORIZON, pad=pad)
        it = iter(run)
        before = [next(it) for _ in range(2)]
        state = run.state_dict()
        first, _, h = chunked(example, net, before, net.initial_state(2))
        again = example.make_loader(episodes, 3, 4, HORIZON, pad=pad, num_workers=2)
        again.load_state_dict(state)
        moved = net.initial_state(3)
        for r, old in enumerate(again.row_map(state)):
            if old >= 0:
                moved[r] = h[old]
        rest, _, _ = chunked(example, net, again, moved)
    assert close(first + rest, want), ((first + rest).item(), want.item())


def test_without_look_ahead_the_action_chunks_are_refused(example, episodes):
    loader = example.make_loader(episodes, 3, 4, 1)  # lookahead=0
    with pytest.raises(ValueError, match="lookahead=2"):
        example.action_mask(loader[0], 3)


def test_the_example_trains_on_every_action_chunk(example, tmp_path, capsys):
    result = example.main(["--episodes", "4", "--epochs", "3", "--out", str(tmp_path)])
    lengths = result["lengths"]
    assert result["counts"] == [(sum(lengths), result["wanted"])] * 3
    out = capsys.readouterr().out
    assert f"{sum(lengths)} steps read as inputs, {result['wanted']} actions used" in out
    assert result["losses"][-1] < result["losses"][0]
