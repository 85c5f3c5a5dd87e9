import importlib.util
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "property_test.py"


def load():
    spec = importlib.util.spec_from_file_location("property_test", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # for dataclasses and pickling into workers
    spec.loader.exec_module(module)
    return module


def test_property_holds_for_the_pipeline_and_catches_the_bug(capsys):
    result = load().main(["--examples", "15"])
    assert result["correct"] is None
    assert "differ from the source" in result["buggy"]
    assert "lengths=(2,)" in result["buggy"]  # shrunk to the smallest layout
    out = capsys.readouterr().out
    assert "deltas_pipeline: holds" in out and "buggy_pipeline: fails" in out
