from runner import load


def test_rows_visibly_continue_across_batches(capsys):
    shown = load("text_streams").main(["--workers", "2", "--batches", "4", "--tbins", "12"])
    out = capsys.readouterr().out
    assert "27 texts" in out and "batch 3" in out
    assert len(shown) == 4 and all(len(lines) == 8 for lines in shown)
    assert [line[2:] for line in shown[0]][:2] == ["a_0;a_1;a_2;", "b_0;b_1;b_2;"]
    assert shown[1][0][2:] == "a_3;a_4;a_5;"
    assert all(line.startswith("*") for line in shown[0])
    assert not any(line.startswith("*") for line in shown[1])


def test_same_output_in_process():
    module = load("text_streams")
    assert module.main(["--workers", "0", "--batches", "5"]) == module.main(
        ["--workers", "2", "--batches", "5"]
    )
