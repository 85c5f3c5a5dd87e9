import importlib.util
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "migrate_from_dataloader.py"


def load():
    spec = importlib.util.spec_from_file_location("migrate_from_dataloader", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # for dataclasses and pickling into workers
    spec.loader.exec_module(module)
    return module


def test_streamseq_carries_the_state_a_window_loader_cannot(capsys):
    result = load().main([])
    before, after = result["DataLoader"], result["streamseq"]
    total = sum(len(r) for r in load().make_recordings(48))
    assert after["steps"] == total > before["steps"]  # no tail dropped
    assert before["continued_rows"] < 0.1 < 0.5 < after["continued_rows"]
    assert after["losses"][-1] < 0.5 * before["losses"][-1]
    assert "streamseq:" in capsys.readouterr().out
