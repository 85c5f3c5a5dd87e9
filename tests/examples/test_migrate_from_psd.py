import pytest
from runner import load


def test_rows_continue_like_before(capsys):
    result = load("migrate_from_psd").main(["--workers", "2"])
    first, second = result["shown"][:2]
    assert all(row.startswith("*") and row[2] == "0" for row in first)  # new texts, step 0
    assert first[0][:4] == "*a0 "  # the first text starts the first row
    letters = [row[1] for row in first]
    assert [row[:3] for row in second] == [f" {c}3" for c in letters]  # rows go on
    assert "both loaders agree" in capsys.readouterr().out


@pytest.mark.parametrize("pad", ["wrap", "drop"])
def test_padding_modes(pad):
    result = load("migrate_from_psd").main(["--pad", pad, "--workers", "0", "--show", "0"])
    assert result["batches"] > 0


def test_old_iterator_wrapped_as_a_stream():
    module = load("migrate_from_psd")
    text = module.make_texts(1)[0]
    assert (module.from_chunks(module.text_chunks, text, 4) == text).all()
