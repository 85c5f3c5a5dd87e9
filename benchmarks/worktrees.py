"""Git worktrees of other revisions, for benchmarks that time a baseline beside this tree."""

from __future__ import annotations

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def git(*args: str, cwd: str = REPO) -> str:
    """The output of ``git args`` in ``cwd`` (this repository by default)."""
    cmd = ["git", "--no-optional-locks", "-C", cwd, *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


def baseline_tree(rev: str, data: str) -> str:
    """A git worktree of ``rev`` in ``data``, its C extension built in place (kept for reuse).

    Remove it with ``git worktree remove --force <path>``.
    """
    commit = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    path = os.path.join(os.path.abspath(data), f"baseline-{commit[:12]}")
    if not os.path.exists(os.path.join(path, ".git")):
        os.makedirs(data, exist_ok=True)
        git("worktree", "prune")
        git("worktree", "add", "--detach", path, commit)
    head = git("rev-parse", "HEAD", cwd=path)
    if head != commit:
        raise RuntimeError(f"{path} is at {head}, not {rev} ({commit})")
    build = [sys.executable, "setup.py", "build_ext", "--inplace", "-q"]
    subprocess.run(build, cwd=path, check=True, capture_output=True)
    return path
