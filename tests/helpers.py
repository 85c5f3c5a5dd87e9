"""Helpers shared by the tests: batch comparison, child processes, test streams."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import psutil

from streamseq._tree import leaves


def as_numpy(batches):
    """Batches of tensors (data an array or a tree) as tuples of numpy leaves, copied."""
    return [tuple(_array(x) for x in leaves(tuple(b))) for b in batches]


def _array(x):
    return x.numpy().copy() if hasattr(x, "numpy") else np.array(x)


def assert_same(a, b):
    """Two lists of batches (tensors or arrays) are equal, field by field."""
    a, b = as_numpy(a), as_numpy(b)
    assert len(a) == len(b), f"{len(a)} batches != {len(b)}"
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        for f, g in zip(x, y, strict=True):
            np.testing.assert_array_equal(f, g, err_msg=f"batch {i}")


def assume_rows_filled(layout, pad, world_size=1):
    """Hypothesis: skip layouts that ``pad`` refuses (drop and wrap need a stream per row)."""
    from hypothesis import assume

    rows = layout.batch_size * world_size
    assume(pad == "zeros" or sum(n > 0 for n in layout.lengths) >= rows)


def live_children():
    """Child processes of this one that have not ended (zombies excluded)."""
    alive = []
    for c in psutil.Process().children(recursive=True):
        try:
            if c.status() != psutil.STATUS_ZOMBIE:
                alive.append(c)
        except psutil.NoSuchProcess:
            pass
    return alive


def no_children(before=(), timeout=5.0):
    """True once every child process not in ``before`` has ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [c for c in live_children() if c.pid not in before]
        if not alive:
            return True
        time.sleep(0.05)
    print("still running:", [(c.pid, c.cmdline()) for c in alive])
    return False


@contextlib.contextmanager
def default_sigint():
    """Ctrl-C raises KeyboardInterrupt here, even in a job started in the background.

    A shell starts a background job (``&``, ``nohup``) with SIGINT ignored, and Python
    then leaves it ignored: a test that sends SIGINT installs the default handler itself.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def free_port():
    """A TCP port of this machine free now (for a rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(script, *args, nproc=2):
    """The command that runs ``script`` with ``args`` on ``nproc`` local ranks (torchrun)."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc}",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        str(script),
        *args,
    ]


def state_refused(saving, resuming, state=None, batch_size=2):
    """Whether a loader of ``resuming`` refuses ``state`` (by default, the state of a
    loader of ``saving`` after one batch), with the message of another plan."""
    from streamseq import StreamLoader

    if state is None:
        loader = StreamLoader(saving, batch_size=batch_size, tbins=3)
        next(iter(loader))
        state = loader.state_dict()
    try:
        StreamLoader(resuming, batch_size=batch_size, tbins=3).load_state_dict(state)
    except ValueError as e:
        assert "this state was made by another plan" in str(e)
        return True
    return False


def run_python(code, *args, timeout):
    """Run ``python -c code args`` with this repository first on ``PYTHONPATH``, as a
    user's script runs (its output captured as text; ``TimeoutExpired`` past
    ``timeout``)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, PYTHONPATH=path),
    )


def run_script(folder, code, *, timeout, hang=None):
    """Run ``code`` as the script ``folder/script.py`` (a file: spawned workers import
    its ``__main__``), its output captured as text. Past ``timeout``: an AssertionError
    saying ``hang`` when given, else ``TimeoutExpired``."""
    script = folder / "script.py"
    script.write_text(code)
    try:
        return subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as e:
        if hang is None:
            raise
        raise AssertionError(hang) from e


def raised_in_thread(fn, hang, bound=60):
    """What ``fn()`` raised in a daemon thread (None: nothing), which must end within
    ``bound`` seconds (a bound on a hang, not a measure of speed; ``hang`` says it)."""
    import threading

    got = []

    def run():
        try:
            fn()
        except Exception as e:
            got.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(bound)
    assert not thread.is_alive(), hang
    return got[0] if got else None


def assert_changed_during_a_pass(error, paths):
    """``error`` (a SourceError, or None) is that of a file of ``paths`` changed during a
    pass: it names the file, the stream and the steps."""
    assert error is not None
    text = str(error)
    assert error.path in {str(p) for p in paths} and error.path in text
    assert "changed since the source was made" in text
    assert error.index is not None and error.steps is not None and "steps" in text
