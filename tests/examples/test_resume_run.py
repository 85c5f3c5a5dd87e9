import importlib.util
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "resume_run.py"


def load():
    spec = importlib.util.spec_from_file_location("resume_run", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # for dataclasses and pickling into workers
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "argv, start",
    [
        (["--crash-at", "25", "--save-every", "10"], 20),  # within the first epoch
        (["--crash-at", "41", "--save-every", "7", "--workers", "2"], 35),  # in the second
    ],
)
def test_resumed_run_is_the_uninterrupted_run(argv, start, tmp_path, capsys):
    checkpoint = str(tmp_path / "checkpoint.pt")
    result = load().main([*argv, "--checkpoint", checkpoint])
    assert result["start"] == start
    assert result["resumed"] == result["expected"][start:]
    assert result["same_batches"] and result["same_params"]
    assert "other streams" in result["refused"]
    assert "identical final parameters: True" in capsys.readouterr().out
