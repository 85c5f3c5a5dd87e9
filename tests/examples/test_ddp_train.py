from runner import load
from widths import read_widths  # noqa: F401


def test_the_gru_reads_every_step_of_every_chunk(monkeypatch, tmp_path, request):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    module = load("ddp_train")
    widths = request.getfixturevalue("read_widths")()
    module.main(["--streams", "4", "--epochs", "1", "--tbins", "12"])
    assert widths and set(widths) == {12}  # the chunk's last step too (lookahead=1)


def test_trains_in_one_process_without_torchrun(monkeypatch, tmp_path, capsys):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    module = load("ddp_train")
    record = module.main(["--streams", "8", "--epochs", "3", "--out", str(tmp_path)])
    assert (record["rank"], record["world_size"]) == (0, 1)
    assert record["lengths"] == record["batches"]
    assert all(set(s) == set(range(8)) for s in record["streams"])
    assert module.epoch_loss(record, 2) < module.epoch_loss(record, 0)
    assert (tmp_path / "rank0.json").exists()
    assert "epoch 2:" in capsys.readouterr().out
