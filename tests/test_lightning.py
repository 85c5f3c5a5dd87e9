"""A real Lightning Trainer: epochs reshuffle, checkpoints keep the loader's position."""

import warnings

import pytest
import torch

from streamseq import StreamLoader
from streamseq.testing import coded_streams

lightning = pytest.importorskip("lightning")


class Recorder(lightning.LightningModule):
    """A GRU over the streams that records what every training step saw."""

    def __init__(self):
        super().__init__()
        self.gru = torch.nn.GRU(1, 4, batch_first=True)
        self.head = torch.nn.Linear(4, 1)
        self.seen = []  # (epoch, streams of the batch's rows, first steps)
        self.cells = []  # (epoch, streams, first steps, (stream, step) of every valid step)

    def training_step(self, batch, index):
        self.seen.append(
            (
                self.current_epoch,
                tuple(batch.stream[:, 0].tolist()),
                tuple(batch.step[:, 0].tolist()),
            )
        )
        self.cells.append((*self.seen[-1], cells(batch)))
        x = (batch.data.float() % 1000)[..., None] / 1000
        out, _ = self.gru(x)
        loss = ((self.head(out)[..., 0] - x[..., 0]) ** 2 * batch.valid).sum()
        return loss / batch.valid.sum().clamp(min=1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def make_loader():
    return StreamLoader(coded_streams(LENGTHS), 3, 4, shuffle=True, seed=1)


def trainer(tmp_path, **kw):
    return lightning.Trainer(
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        **kw,
    )


@pytest.fixture(autouse=True)
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


class Lengths(lightning.Callback):
    """Records the trainer's number of batches and the loader's length at each epoch."""

    def __init__(self, loader):
        self.loader, self.seen = loader, []

    def on_train_epoch_start(self, trainer, module):
        self.seen.append((trainer.num_training_batches, len(self.loader)))


def cells(batch):
    """The (stream, step) of every valid step of a batch."""
    valid = batch.valid.bool()
    return list(zip(batch.stream[valid].tolist(), batch.step[valid].tolist(), strict=True))


LENGTHS = [23, 7, 31, 12, 5, 18, 26, 9, 14, 3, 20, 11]
EVERY_STEP = sorted((s, k) for s, n in enumerate(LENGTHS) for k in range(n))


def test_a_default_trainer_trains_on_every_step_of_every_epoch(tmp_path):
    loader, model = make_loader(), Recorder()
    lengths = Lengths(loader)
    t = trainer(tmp_path, max_epochs=3, enable_checkpointing=False, callbacks=[lengths])
    t.fit(model, loader)  # Lightning's defaults: it reads len(loader) once
    n = loader.epoch_length(0)
    assert lengths.seen == [(n, n)] * 3
    for epoch in range(3):
        seen = sorted(c for e, _, _, cs in model.cells if e == epoch for c in cs)
        assert seen == EVERY_STEP, f"epoch {epoch}: steps skipped or repeated"
    reference = make_loader()
    for epoch in range(3):
        reference.set_epoch(epoch)
        got = [s for e, s, _ in model.seen if e == epoch]
        assert got == [tuple(b.stream[:, 0].tolist()) for b in reference]


def test_a_crash_in_epoch_1_resumed_with_a_fresh_loader_trains_every_step_once(tmp_path):
    n = make_loader().epoch_length(0)
    stop = n + n // 2  # a checkpoint in the middle of epoch 1
    every = lightning.pytorch.callbacks.ModelCheckpoint(
        dirpath=tmp_path, every_n_train_steps=stop, save_top_k=-1, filename="{step}"
    )
    first = Recorder()
    crash = Crash(stop + 3)  # dies 3 steps after the checkpoint
    with pytest.raises(RuntimeError, match="crash"):
        trainer(tmp_path / "first", max_epochs=3, callbacks=[every, crash]).fit(
            first, make_loader()
        )
    resumed = Recorder()
    t = trainer(tmp_path / "resumed", max_epochs=3, enable_checkpointing=False)
    t.fit(resumed, make_loader(), ckpt_path=tmp_path / f"step={stop}.ckpt")  # no set_epoch
    before = [c for e, _, _, cs in first.cells[:stop] if e == 1 for c in cs]
    after = [c for e, _, _, cs in resumed.cells if e == 1 for c in cs]
    assert sorted(before + after) == EVERY_STEP
    assert [e for e, *_ in resumed.cells].count(1) == n - (stop - n)
    assert sorted(c for e, _, _, cs in resumed.cells if e == 2 for c in cs) == EVERY_STEP


class Crash(lightning.Callback):
    """Raises in the training step numbered ``at`` (counting from 0)."""

    def __init__(self, at):
        self.at = at

    def on_train_batch_start(self, trainer, module, batch, index):
        if trainer.global_step == self.at:
            raise RuntimeError("crash")


def test_a_plain_fit_reshuffles_every_epoch(tmp_path):
    loader, model = make_loader(), Recorder()
    trainer(tmp_path, max_epochs=3, enable_checkpointing=False).fit(model, loader)
    firsts = [next(s for e, s, _ in model.seen if e == epoch) for epoch in range(3)]
    assert len(set(firsts)) == 3, firsts


def test_a_checkpoint_mid_epoch_resumes_the_loader_where_it_was(tmp_path):
    stop = 5  # a checkpoint after this many steps, inside epoch 0
    every = lightning.pytorch.callbacks.ModelCheckpoint(
        dirpath=tmp_path, every_n_train_steps=stop, save_top_k=-1, filename="{step}"
    )
    full = Recorder()
    trainer(tmp_path / "full", max_epochs=2, callbacks=[every]).fit(full, make_loader())
    assert len(full.seen) > stop + 1 and full.seen[stop][0] == 0
    resumed = Recorder()
    t = trainer(tmp_path / "resumed", max_epochs=2, enable_checkpointing=False)
    t.fit(resumed, make_loader(), ckpt_path=tmp_path / f"step={stop}.ckpt")
    assert resumed.seen == full.seen[stop:]


def test_resuming_from_the_default_end_of_epoch_checkpoint_trains_every_step_once(tmp_path):
    n = make_loader().epoch_length(0)
    first = Recorder()
    trainer(tmp_path / "first", max_epochs=2).fit(first, make_loader())  # default checkpoint
    (ckpt,) = (tmp_path / "first").rglob("*.ckpt")  # saved at the end of epoch 1
    resumed = Recorder()
    t = trainer(tmp_path / "resumed", max_epochs=4, enable_checkpointing=False)
    t.fit(resumed, make_loader(), ckpt_path=ckpt)
    assert [e for e, *_ in resumed.seen] == [2] * n + [3] * n
    for epoch in (2, 3):
        seen = sorted(c for e, _, _, cs in resumed.cells if e == epoch for c in cs)
        assert seen == EVERY_STEP, f"epoch {epoch}: steps skipped or repeated"
    # Lightning sets the epoch (loader.sampler.set_epoch) from then on
    reference = make_loader()
    reference.set_epoch(3)
    got = [s for e, s, _ in resumed.seen if e == 3]
    assert got == [tuple(b.stream[:, 0].tolist()) for b in reference]


def test_lightning_sets_the_epoch_through_the_sampler(tmp_path):
    loader = make_loader()
    calls = []
    set_epoch = loader.set_epoch
    loader.set_epoch = lambda e: (calls.append(e), set_epoch(e))[1]
    trainer(tmp_path, max_epochs=3, enable_checkpointing=False).fit(Recorder(), loader)
    assert calls == [0, 1, 2]
