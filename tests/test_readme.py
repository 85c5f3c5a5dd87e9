import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def setup_commands():
    text = (ROOT / "README.rst").read_text()
    return re.findall(r"::\n\n    (pip install .+)\n", text)


def test_readme_has_the_two_setup_commands():
    commands = setup_commands()
    assert len(commands) == 2
    assert "examples/text_streams.py" in commands[0]
    assert "pytest" in commands[1]
    assert all("-c constraints.txt" in c for c in commands)
    assert "torch==2.13.0" in (ROOT / "constraints.txt").read_text()


def test_ci_runs_the_readme_test_command_verbatim():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert setup_commands()[1] in ci
