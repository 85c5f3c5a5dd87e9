"""The Lightning recipe: a plain Trainer, the loader as it is, checkpoints with the GRU's state."""

import json
import os
import signal
import subprocess
import warnings
from collections import Counter

import numpy as np
import pytest
import torch
import torch.distributed as dist
from helpers import torchrun
from runner import EXAMPLES, load

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


def whole_loss(model, streams):
    """Next-step squared error summed over every stream, each read at once from step 0."""
    total = torch.zeros((), dtype=torch.float64)
    with torch.no_grad():
        for x in streams:
            x = torch.as_tensor(x, dtype=torch.float64)[None]
            out, _ = model.gru(x[:, :-1])
            total = total + ((model.head(out) - x[:, 1:]) ** 2).sum()
    return total.item()


def epoch_loss(model, epoch=0):
    return sum(loss for e, loss in model.losses if e == epoch)


PARITY = dict(epochs=1, accelerator="cpu", lr=0.0, dtype=torch.float64)  # weights kept


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("pad", ["zeros", "pack"])
def test_a_default_trainer_gives_the_loss_of_whole_streams(tmp_path, workers, pad):
    module = load("lightning_tbptt")
    result = module.run(str(tmp_path), workers=workers, pad=pad, **PARITY)
    want = whole_loss(result["model"], module.make_streams())
    assert abs(epoch_loss(result["model"]) - want) <= 1e-10 * want


def test_parity_through_a_resume_on_another_batch_size_with_row_map(tmp_path):
    module = load("lightning_tbptt")
    n = len(module.make_loader(3))
    save = n // 2
    kw = dict(PARITY, epochs=2)
    first = module.run(str(tmp_path), save_every=save, crash_at=save + 2, batch_size=3, **kw)
    path = first["checkpoints"][save]
    # wider rows: every stream begun goes on in a row of its own (narrower, a begun stream
    # that waits for a row restarts there with reset set: its state cannot follow it)
    second = module.run(str(tmp_path / "b"), ckpt_path=path, batch_size=4, **kw)
    state = torch.load(path, weights_only=False)["loops"]["fit_loop"]["state_dict"]
    rows = second["loader"].row_map(state["combined_loader"][0])
    assert len(rows) == 4 and rows != [0, 1, 2, -1]  # rows move
    want = whole_loss(second["model"], module.make_streams())
    got = sum(loss for _, loss in first["model"].losses[:save]) + epoch_loss(second["model"])
    assert abs(got - want) <= 1e-10 * want  # the resumed epoch, its state moved by row_map
    # the next epoch has the length of the new rows (Lightning reads len once)
    assert len([e for e, _ in second["model"].losses if e == 1]) == len(module.make_loader(4))
    assert abs(epoch_loss(second["model"], 1) - want) <= 1e-10 * want


def test_a_batch_of_padding_alone_is_skipped_and_counted_nowhere(tmp_path):
    module = load("lightning_tbptt")
    rng = np.random.default_rng(0)
    streams = [rng.normal(size=(n, 1)).astype(np.float32) for n in (40, 30, 6, 5)]
    # rank 1 of 2: its 2 rows end before rank 0's, its last batches are padding
    kw = dict(streams=streams, batch_size=2, tbins=4, rank=1, world_size=2, pad="zeros")
    loader = module.make_loader(**kw)
    padding = [i for i, b in enumerate(loader) if not b.valid.any()]
    assert len(padding) >= 2 and (loader[0].stream[:, 0] >= 0).all()
    result = module.run(str(tmp_path), epochs=1, accelerator="cpu", **kw)
    model, n = result["model"], len(loader)
    assert model.skipped == len(padding)
    assert len(model.trained) == len(model.losses) == n - len(padding)
    with_targets = sum(1 for _, cells in model.targets if cells)
    assert model.trainer.global_step == with_targets  # one optimizer step a batch with targets
    inputs = Counter(c for _, cells in model.trained for c in cells)
    mine = {int(s) for b in loader for s in b.stream[b.valid]}  # rank 1's streams
    assert inputs == Counter((s, t) for s in mine for t in range(len(streams[s])))


def test_the_printout_counts_what_the_checkpoint_holds_past_a_batch_without_target(
    tmp_path, monkeypatch, capsys
):
    module = load("lightning_tbptt")
    packed = module.make_loader(pad="pack")
    n = len(packed)
    quiet = [i for i, b in enumerate(packed) if b.valid.any() and not b.target_mask().any()]
    assert quiet  # a batch read, for the state, without an optimizer step
    make = module.make_loader
    monkeypatch.setattr(module, "make_loader", lambda *a, **kw: make(*a, pad="pack", **kw))
    # the checkpoint after optimizer step n lies past that batch: n + 1 batches trained
    argv = ["--epochs", "2", "--save-every", str(n), "--crash-at", str(n + 1)]
    result = module.main([*argv, "--out", str(tmp_path)])
    assert result["once"] and result["targets_once"]
    out = capsys.readouterr().out
    assert "an input once per epoch: True" in out and "a target once per epoch: True" in out


# Two processes: a real Trainer(accelerator="cpu", devices=2, strategy="ddp"), launched by
# torchrun (Lightning started by pytest cannot launch its own copies of the test run).
DRIVER = """
import json, os, sys
from datetime import timedelta

import torch
from lightning.pytorch.strategies import DDPStrategy

sys.path.insert(0, {examples!r})
import lightning_tbptt as module

out, one_process, save = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.set_num_threads(1)
kw = dict(epochs=1, accelerator="cpu", devices=2, lr=0.0, dtype=torch.float64, batch_size=2)


def ddp():  # "ddp" on gloo, a collective that waits too long fails instead of hanging
    return DDPStrategy(process_group_backend="gloo", timeout=timedelta(seconds=60))


whole = module.run(os.path.join(out, "whole"), save_every=save, strategy=ddp(), **kw)
resumed = module.run(os.path.join(out, "resumed"), ckpt_path=one_process, strategy=ddp(), **kw)
rank, model = whole["model"].global_rank, whole["model"]
record = dict(
    rank=rank,
    streams=sorted({{s for _, cells in model.trained for s, _ in cells}}),
    losses=model.losses,
    trained=model.trained,
    steps=model.steps,
    skipped=model.skipped,
    global_step=model.trainer.global_step,
    checkpoints=whole["checkpoints"],
    resumed=resumed["model"].losses,
)
with open(os.path.join(out, f"rank{{rank}}.json"), "w") as f:
    json.dump(record, f)
# the process group's threads stopped before the interpreter exits (left to exit, a
# loaded machine saw one rank abort there: "terminate called without an active exception")
if torch.distributed.is_initialized():
    torch.distributed.destroy_process_group()
"""


def launch(command, env, timeout):
    """Runs ``command`` in a session of its own, every process of it killed on timeout."""
    with subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            pytest.fail(f"two ranks still running after {timeout} s:\n{out[-3000:]}")
    return proc.returncode, out


def reference(module):
    """The module every run of the parity tests builds (the same seed, weights kept)."""
    torch.manual_seed(0)
    return module.TBPTT(2, dtype=torch.float64)


def held(losses, steps, save):
    """The loss of the batches a checkpoint after optimizer step ``save`` holds."""
    return sum(loss for (_, loss), s in zip(losses, steps, strict=True) if s < save)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """One process (3 rows) saves mid-epoch; two DDP ranks (2 rows each) train an epoch,
    saving mid-epoch, and resume the one-process checkpoint."""
    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("needs gloo")
    out = tmp_path_factory.mktemp("lightning_ddp")
    module = load("lightning_tbptt")
    n = len(module.make_loader(3))
    one = module.run(
        str(out / "one"), save_every=n // 2, crash_at=n // 2 + 2, batch_size=3, **PARITY
    )
    driver = out / "driver.py"
    driver.write_text(DRIVER.format(examples=str(EXAMPLES)))
    save = len(module.make_loader(2, rank=0, world_size=2)) // 2
    command = torchrun(driver, str(out), one["checkpoints"][n // 2], str(save))
    root = str(EXAMPLES.parent)
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=path, PYTHONWARNINGS="ignore")
    code, printed = launch(command, env, timeout=240)
    assert code == 0, printed[-3000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    return {"module": module, "one": one, "one_save": n // 2, "ranks": ranks, "save": save}


def test_two_ddp_ranks_read_their_own_rows_and_give_the_loss_of_whole_streams(two_ranks):
    module, ranks = two_ranks["module"], two_ranks["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    streams = [set(r["streams"]) for r in ranks]
    assert not streams[0] & streams[1]  # disjoint rows of one plan, not rank 0's twice
    assert streams[0] | streams[1] == set(range(len(module.make_streams())))
    # rank 0 ends with a batch of padding alone: it steps with rank 1 (no hang, no drift)
    assert [r["skipped"] for r in ranks] == [1, 0]
    assert ranks[0]["global_step"] == ranks[1]["global_step"] > 0
    want = whole_loss(reference(module), module.make_streams())
    got = sum(loss for r in ranks for _, loss in r["losses"])
    assert abs(got - want) <= 1e-10 * want


def test_a_checkpoint_of_two_ranks_holds_the_state_of_every_global_row(two_ranks):
    path = two_ranks["ranks"][0]["checkpoints"][str(two_ranks["save"])]
    hidden = torch.load(path, weights_only=False)["hidden"]
    assert hidden.shape == (1, 4, 16)  # [layers, world_size * batch_size, H]
    assert hidden.abs().sum(-1).gt(0).all()  # rank 1's rows too, not zeros


def test_one_process_resumed_on_two_ddp_ranks_keeps_the_loss_of_whole_streams(two_ranks):
    module, one, ranks = two_ranks["module"], two_ranks["one"], two_ranks["ranks"]
    before = held(one["model"].losses, one["model"].steps, two_ranks["one_save"])
    got = before + sum(loss for r in ranks for _, loss in r["resumed"])  # 3 rows -> 2 x 2
    want = whole_loss(reference(module), module.make_streams())
    assert abs(got - want) <= 1e-10 * want


def test_two_ddp_ranks_resumed_on_one_process_with_more_rows_keep_the_loss(two_ranks, tmp_path):
    module, ranks, save = two_ranks["module"], two_ranks["ranks"], two_ranks["save"]
    path = ranks[0]["checkpoints"][str(save)]
    one = module.run(str(tmp_path), ckpt_path=path, batch_size=5, **PARITY)  # 2 x 2 -> 5
    state = torch.load(path, weights_only=False)["loops"]["fit_loop"]["state_dict"]
    rows = one["loader"].row_map(state["combined_loader"][0])
    assert {2, 3} & set(rows)  # rows of rank 1 go on here, with the state rank 1 saved
    before = sum(held(r["losses"], r["steps"], save) for r in ranks)
    want = whole_loss(reference(module), module.make_streams())
    assert abs(before + epoch_loss(one["model"]) - want) <= 1e-10 * want


def test_two_ddp_ranks_resumed_on_fewer_rows_read_every_step_once_a_waiting_stream_afresh(
    two_ranks, tmp_path
):
    module, ranks, save = two_ranks["module"], two_ranks["ranks"], two_ranks["save"]
    path = ranks[0]["checkpoints"][str(save)]
    one = module.run(str(tmp_path), ckpt_path=path, batch_size=3, **PARITY)  # 2 x 2 -> 3
    # a stream begun in the row that is gone waits, then goes on mid-way with reset set
    late = [b for b in one["loader"] if (b.reset & (b.step[:, 0] > 0)).any()]
    assert late
    before = [
        cells
        for r in ranks
        for (_, cells), s in zip(r["trained"], r["steps"], strict=True)
        if s < save
    ]
    inputs = Counter(tuple(c) for cells in before for c in cells)
    inputs.update(c for _, cells in one["model"].trained for c in cells)
    assert inputs == module.every_step(module.make_streams())  # every step once
    got = sum(held(r["losses"], r["steps"], save) for r in ranks) + epoch_loss(one["model"])
    want = whole_loss(reference(module), module.make_streams())
    assert abs(got - want) > 1e-6 * want  # its state zeroed mid-way: not the whole streams'
