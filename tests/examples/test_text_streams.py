from runner import load


def test_rows_visibly_continue_across_batches(capsys):
    shown = load("text_streams").main(["--workers", "2", "--batches", "4", "--tbins", "12"])
    out = capsys.readouterr().out
    assert "27 texts, 8 batches" in out and "batch 3" in out and "batch 4" not in out
    assert len(shown) == 4 and all(len(lines) == 8 for lines in shown)
    assert shown[0][1] == "* b_0;b_1;b_2;" and shown[1][1] == "  b_3;........"
    assert shown[1][2] == "  c_3;c_4;c_5;"
    assert all(line.startswith("*") for line in shown[0])


def test_the_default_run_shows_padding_then_a_new_text_in_the_first_batches(capsys):
    shown = load("text_streams").main([])
    out = capsys.readouterr().out
    assert "* = the row starts a new text (batch.reset), . = padding" in out
    assert len(shown) == 8  # every batch of the epoch
    assert shown[0][0] == "* a_0;a_1;...."  # text a ends: padding
    new = shown[1][0]  # the row moves on to a new text, with reset
    assert new.startswith("* ") and new[2] != "a" and new[3:5] == "_0"
    assert any(line.startswith("  ") for line in shown[1])  # other rows continue
    assert any(line.strip() == "............" for line in shown[-1])  # a row ran out of texts


def test_same_output_in_process():
    module = load("text_streams")
    assert module.main(["--workers", "0", "--batches", "5"]) == module.main(
        ["--workers", "2", "--batches", "5"]
    )
