"""The Lightning recipe: a plain Trainer, the loader as it is, checkpoints with the GRU's state."""

import warnings
from collections import Counter

import pytest
import torch
from runner import load

pytest.importorskip("lightning")


@pytest.fixture(autouse=True)
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def cells_per_epoch(trained, epochs):
    """The (stream, step) cells trained on in each epoch, counted."""
    return [Counter(c for e, cells in trained for c in cells if e == epoch) for epoch in epochs]


def test_a_default_trainer_trains_on_every_step_of_every_epoch_once(tmp_path):
    module = load("lightning_tbptt")
    result = module.run(str(tmp_path), epochs=3, accelerator="cpu")
    assert result["crashed"] is None
    n = len(result["loader"])
    assert result["lengths"] == [n, n, n]  # read once, the same every epoch
    trained = result["model"].trained
    assert len(trained) == 3 * n
    expected = module.every_step(module.make_streams())
    assert cells_per_epoch(trained, range(3)) == [expected] * 3  # the GRU's inputs
    # the targets of the loss: every step but the first of every stream, once an epoch
    targets = cells_per_epoch(result["model"].targets, range(3))
    assert targets == [module.every_target(module.make_streams())] * 3
    streams = len(module.make_streams())
    assert all(sum(t.values()) == sum(expected.values()) - streams for t in targets)
    firsts = [next(cells[0][0] for e, cells in trained if e == epoch) for epoch in range(3)]
    assert len(set(firsts)) > 1, "the epochs are not reshuffled"


def test_a_run_resumed_mid_epoch_trains_on_the_rest_of_the_epoch_once(tmp_path):
    module = load("lightning_tbptt")
    n = len(module.make_loader())
    save, crash = n + n // 3, n + n // 3 + 3  # a checkpoint inside epoch 1, then 3 more steps
    first = module.run(str(tmp_path), 3, save_every=save, crash_at=crash, accelerator="cpu")
    assert first["crashed"] == f"killed after step {crash}"
    assert list(first["checkpoints"]) == [save] and len(first["model"].trained) == crash
    saved = torch.load(first["checkpoints"][save], weights_only=False)
    (state,) = saved["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert (state["epoch"], state["next_batch"]) == (1, save - n)

    second = module.run(str(tmp_path), 3, ckpt_path=first["checkpoints"][save], accelerator="cpu")
    assert second["crashed"] is None
    assert [e for e, _ in second["model"].trained] == [1] * (2 * n - save) + [2] * n
    before = first["model"].trained[:save]  # what the checkpoint holds; the 3 after are lost
    expected = module.every_step(module.make_streams())
    got = cells_per_epoch(before + second["model"].trained, range(3))
    assert got == [expected] * 3
    targets = first["model"].targets[:save] + second["model"].targets
    want = module.every_target(module.make_streams())
    assert cells_per_epoch(targets, range(3)) == [want] * 3

    # the resumed run gets exactly the batches an uninterrupted run gets
    whole = module.run(str(tmp_path / "whole"), 3, accelerator="cpu")["model"].trained
    assert before + second["model"].trained == whole


def test_the_hidden_state_goes_on_through_the_checkpoint(tmp_path):
    module = load("lightning_tbptt")

    class Watched(module.TBPTT):
        """Records the state the GRU gets in the first step of the run."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.first_state = None
            self.gru.register_forward_pre_hook(self.record)

        def record(self, gru, args):
            if self.first_state is None:
                self.first_state = args[1].clone()

    module.TBPTT = Watched  # what run() builds
    plan = module.make_loader()
    n = len(plan)
    plan.set_epoch(1)
    # a checkpoint inside epoch 1 whose next batch has rows of both kinds
    mixed = [j for j in range(1, n) if plan[j].reset.any() and (~plan[j].reset).any()]
    save = n + min(mixed, key=lambda j: abs(j - n // 3))
    first = module.run(str(tmp_path), 3, save_every=save, crash_at=save, accelerator="cpu")
    saved = torch.load(first["checkpoints"][save], weights_only=False)["hidden"]
    assert torch.equal(saved, first["model"].hidden)  # the state after the last step trained
    assert saved.shape == (1, 4, 16) and saved.abs().sum(-1).gt(0).all()

    second = module.run(str(tmp_path), 3, ckpt_path=first["checkpoints"][save], accelerator="cpu")
    assert torch.equal(second["model"].resumed_hidden, saved)
    loader = module.make_loader()
    loader.set_epoch(1)
    reset = loader[save - n].reset  # the first batch after resuming
    assert reset.any() and (~reset).any()  # (both kinds of rows)
    state = second["model"].first_state
    assert torch.equal(state[:, ~reset], saved[:, ~reset])  # rows that continue: their state
    assert not state[:, reset].any()  # rows that start a new stream: zeros
