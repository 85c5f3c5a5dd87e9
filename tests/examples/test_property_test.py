from runner import load


def test_property_holds_for_the_pipeline_and_catches_the_bug(capsys):
    result = load("property_test").main(["--examples", "15"])
    assert result["correct"] is None
    assert "differ from the source" in result["buggy"]
    assert "lengths=(2,)" in result["buggy"]  # shrunk to the smallest layout
    out = capsys.readouterr().out
    assert "deltas_pipeline: holds" in out and "buggy_pipeline: fails" in out
