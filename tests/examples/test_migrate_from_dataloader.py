from runner import load


def test_streamseq_carries_the_state_a_window_loader_cannot(capsys):
    result = load("migrate_from_dataloader").main([])
    before, after = result["DataLoader"], result["streamseq"]
    total = sum(len(r) for r in load("migrate_from_dataloader").make_recordings(48))
    assert after["steps"] == total > before["steps"]  # no tail dropped
    assert before["continued_rows"] < 0.1 < 0.5 < after["continued_rows"]
    assert after["losses"][-1] < 0.5 * before["losses"][-1]
    assert "streamseq:" in capsys.readouterr().out
