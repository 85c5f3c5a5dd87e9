from runner import load


def test_a_corpus_and_a_manifest_plan_as_tables(capsys):
    out = load("corpus_at_scale").main(["--docs", "50000", "--files", "12"])
    printed = capsys.readouterr().out
    assert out["documents"] == 50_000 and out["files"] == 12
    assert out["manifest_equals_list"]
    assert out["batches"] > 0 and out["state_bytes"] < 50_000  # a bit a document, at most
    assert "50000 documents" in printed and "same as the list: True" in printed
