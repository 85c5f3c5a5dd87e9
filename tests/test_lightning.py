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

    def training_step(self, batch, index):
        self.seen.append(
            (
                self.current_epoch,
                tuple(batch.stream[:, 0].tolist()),
                tuple(batch.step[:, 0].tolist()),
            )
        )
        x = (batch.data.float() % 1000)[..., None] / 1000
        out, _ = self.gru(x)
        loss = ((self.head(out)[..., 0] - x[..., 0]) ** 2 * batch.valid).sum()
        return loss / batch.valid.sum().clamp(min=1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def make_loader():
    lengths = [23, 7, 31, 12, 5, 18, 26, 9, 14, 3, 20, 11]
    return StreamLoader(coded_streams(lengths), 3, 4, shuffle=True, seed=1)


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


def test_epochs_reshuffle_and_the_number_of_batches_is_the_loaders(tmp_path):
    loader, model = make_loader(), Recorder()
    expected = [loader.epoch_length(0), loader.epoch_length(1)]
    assert expected[0] != expected[1]  # (the case where it matters)
    lengths = Lengths(loader)
    t = trainer(
        tmp_path,
        max_epochs=2,
        enable_checkpointing=False,
        reload_dataloaders_every_n_epochs=1,  # the length of every epoch, read anew
        callbacks=[lengths],
    )
    t.fit(model, loader)
    assert lengths.seen == [(n, n) for n in expected]
    epochs = [[s for e, s, _ in model.seen if e == epoch] for epoch in (0, 1)]
    assert [len(e) for e in epochs] == expected
    assert epochs[0][0] != epochs[1][0], "epoch 1 begins with the same streams as epoch 0"
    reference = make_loader()
    for epoch in (0, 1):
        reference.set_epoch(epoch)
        assert epochs[epoch] == [tuple(b.stream[:, 0].tolist()) for b in reference]


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
