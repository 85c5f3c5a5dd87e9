import importlib.util
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "progress.py"


def load():
    spec = importlib.util.spec_from_file_location("progress", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # for dataclasses and pickling into workers
    spec.loader.exec_module(module)
    return module


def test_every_bar_ends_full(capsys):
    bars = load().main(["--files", "12", "--epochs", "2", "--workers", "2"])
    assert set(bars) == {"epoch 0", "epoch 1", "run", "resumed"}
    for name, (n, total) in bars.items():
        assert n == total > 0, name
    assert bars["run"][1] == bars["epoch 0"][1] + bars["epoch 1"][1]
    err = capsys.readouterr().err
    assert "probing lengths: 100%" in err and "resumed: 100%" in err
