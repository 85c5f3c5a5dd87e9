import pytest
from runner import load


@pytest.mark.parametrize(
    "argv, start",
    [
        (["--crash-at", "25", "--save-every", "10"], 20),  # within the first epoch
        (["--crash-at", "41", "--save-every", "7", "--workers", "2"], 35),  # in the second
    ],
)
def test_resumed_run_is_the_uninterrupted_run(argv, start, tmp_path, capsys):
    checkpoint = str(tmp_path / "checkpoint.pt")
    result = load("resume_run").main([*argv, "--checkpoint", checkpoint])
    assert result["start"] == start
    assert result["resumed"] == result["expected"][start:]
    assert result["same_batches"] and result["same_params"]
    assert "differing in tbins" in result["refused"]
    assert "identical final parameters: True" in capsys.readouterr().out
