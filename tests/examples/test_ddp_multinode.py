import json

from runner import load
from widths import read_widths  # noqa: F401


def test_the_gru_reads_every_step_of_every_chunk(monkeypatch, tmp_path, request):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK"):
        monkeypatch.delenv(name, raising=False)
    module = load("ddp_multinode")
    widths = request.getfixturevalue("read_widths")()
    module.main(["--out", str(tmp_path), "--streams", "4", "--stop", "3"])
    assert widths and set(widths) == {10}  # the chunk's last step too (lookahead=1)


def test_stop_then_resume_on_other_rows_in_one_process(monkeypatch, tmp_path, capsys):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK"):
        monkeypatch.delenv(name, raising=False)
    module = load("ddp_multinode")
    args = ["--out", str(tmp_path), "--streams", "8"]
    first = module.main([*args, "--stop", "3", "--batch-size", "4"])
    rest = module.main([*args, "--resume", "--batch-size", "3"])
    assert (first["rank"], first["world_size"], first["node"]) == (0, 1, 0)
    assert len(first["batches"]) == 3 and first["state"]["next_batch"] == 3
    assert len(rest["batches"]) == rest["length"] and len(rest["rows"]) == 3
    steps = {}
    for record in (first, rest):
        for batch in record["batches"]:
            for _, pairs in batch:
                for s, k in pairs:
                    steps.setdefault(s, []).append(k)
    lengths = [len(s) for s in module.make_streams(8, 30, 120)]
    assert all(steps[s] == list(range(n)) for s, n in enumerate(lengths))
    saved = json.loads((tmp_path / "delivered-resume-0.json").read_text())
    assert saved["rows"] == rest["rows"]
    assert "resume run, rank 0/1 (node 0)" in capsys.readouterr().out
