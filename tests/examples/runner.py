"""Load the examples by their path, as ``python examples/NAME.py`` would, without running them.

Imported by the tests of this folder as ``runner``: pytest puts the folder on ``sys.path``,
as it does for ``tests/io/media.py``.
"""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> ModuleType:
    """Execute ``examples/<name>.py`` afresh as the module ``name`` and return it."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # for dataclasses and pickling into workers
    spec.loader.exec_module(module)
    return module
