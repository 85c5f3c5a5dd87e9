"""The CI scripts name paths that exist (a moved test file would make a job run nothing)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_path_of_the_matrix_subset_exists():
    job = (ROOT / ".ci" / "job").read_text()
    subset = re.search(r"^SUBSET=\((.*?)\)", job, re.M | re.S)
    assert subset, "no SUBSET in .ci/job"
    paths = subset.group(1).split()
    assert paths
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, f".ci/job's SUBSET names paths that do not exist: {missing}"
