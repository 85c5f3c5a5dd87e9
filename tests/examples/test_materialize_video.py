from runner import load


def test_the_store_gives_the_batches_of_the_clips(tmp_path, capsys):
    result = load("materialize_video").main(["--small", "--dir", str(tmp_path)])
    printed = capsys.readouterr().out
    assert "same batches: True" in printed and result["same"] and result["again"]
    assert result["shape"] == (4, 8, 32, 32, 3) and result["batches"] > 1


def test_in_process(tmp_path):
    result = load("materialize_video").main(["--small", "--workers", "0", "--dir", str(tmp_path)])
    assert result["same"]
