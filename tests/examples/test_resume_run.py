import pytest
from runner import load
from widths import read_widths  # noqa: F401


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


def test_the_gru_reads_every_step_of_every_chunk(tmp_path, request):
    module = load("resume_run")
    widths = request.getfixturevalue("read_widths")()
    module.main(
        ["--crash-at", "5", "--save-every", "4", "--epochs", "1"]
        + ["--checkpoint", str(tmp_path / "c.pt")]
    )
    assert widths and set(widths) == {16}  # the chunk's last step too (lookahead=1)
