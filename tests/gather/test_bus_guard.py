"""A memory map cut short while the compiled pass copies from it is an error, not a SIGBUS."""

import signal

import pytest
from helpers import run_python

pytest.importorskip("streamseq.gather._gather")

_PRELUDE = """
import os, sys, tempfile, threading
import numpy as np
from streamseq.errors import StreamError
from streamseq.gather._gather import fill

def batch(rows, t, width):
    return (np.zeros((rows, t, width), np.uint8), np.zeros(rows, bool),
            np.zeros((rows, t), bool), np.zeros((rows, t), np.int64),
            np.zeros((rows, t), np.int64))

def fill_from(streams, start, count, ids, width):
    rows = len(streams)
    out = batch(rows, count, width)
    n = np.full(rows, count, np.int64)
    return fill(streams, np.full(rows, start, np.int64), n, np.array(ids, np.int64), *out)

path = os.path.join(tempfile.mkdtemp(), "leaf-0.bin")
np.arange(64 * 4096, dtype=np.uint8).tofile(path)
mapped = np.memmap(path, np.uint8, mode="r", shape=(64, 4096))
"""

_CUT = (
    _PRELUDE
    + """
assert fill_from([np.zeros((4, 4096), np.uint8)], 0, 4, [9], 4096) == -1  # (a copy)
os.truncate(path, 4096)  # (steps 1: past its end now)
try:
    fill_from([np.zeros((64, 4096), np.uint8), mapped[8:40]], 2, 16, [5, 7], 4096)
except StreamError as e:
    print("ERROR", e)
"""
)


def test_a_map_cut_short_during_the_copy_is_a_stream_error_naming_file_stream_steps():
    run = run_python(_CUT, timeout=120)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    assert "ERROR" in run.stdout, run.stdout
    message = run.stdout.split("ERROR", 1)[1]
    assert "leaf-0.bin" in message and "cut short" in message, message
    assert "stream 7" in message and "steps 2:18" in message, message


_OTHER_THREAD = (
    _PRELUDE
    + """
if sys.argv[1] == "faulthandler":
    import faulthandler
    faulthandler.enable()
assert fill_from([mapped], 0, 4, [0], 4096) == -1  # (the guard is in place from here)
os.truncate(path, 4096)
def touch():
    np.array(mapped[32:40])  # (a read past the end, not by the compiled pass)
thread = threading.Thread(target=touch)
thread.start()
thread.join()
print("ALIVE")
"""
)


@pytest.mark.parametrize("before", ["default", "faulthandler"])
def test_a_bus_error_outside_the_copy_does_what_it_did_before(before):
    run = run_python(_OTHER_THREAD, before, timeout=120)
    assert run.returncode == -signal.SIGBUS, (run.returncode, run.stderr[-2000:])
    assert "ALIVE" not in run.stdout
    if before == "faulthandler":
        assert "Bus error" in run.stderr, run.stderr[-2000:]


_LOADER = """
import glob, os, sys, threading, time
import numpy as np
from streamseq import StreamLoader, materialize
from streamseq.errors import SourceError
arrays = [np.full((n, 64 << 10), i, np.uint8) for i, n in enumerate([40, 50, 30, 60])]
stored = materialize(arrays, sys.argv[1])
(path,) = glob.glob(os.path.join(sys.argv[1], "leaf-0.*.bin"))
size = os.path.getsize(path)
stop = threading.Event()
def attack():  # cut short and made whole again, in a loop
    while not stop.is_set():
        os.truncate(path, 0)
        os.truncate(path, size)
threading.Thread(target=attack, daemon=True).start()
try:
    for epoch in range(200):
        for batch in StreamLoader(stored, 4, 16):
            pass
except SourceError as e:
    print("ERROR", e)
stop.set()
"""


def test_a_store_cut_short_in_a_loop_while_a_loader_reads_ends_in_an_error(tmp_path):
    run = run_python(_LOADER, str(tmp_path / "s"), timeout=240)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    assert "ERROR" in run.stdout, run.stdout
    message = run.stdout.split("ERROR", 1)[1]
    assert "leaf-0." in message and "stream" in message and "steps" in message, message


_FAULTHANDLER_AFTER = (
    _PRELUDE
    + """
import faulthandler
assert fill_from([mapped], 0, 4, [0], 4096) == -1  # (the guard is in place from here)
faulthandler.enable()  # (after a guarded copy: the next copy's guard is above it)
os.truncate(path, 4096)
try:
    fill_from([mapped[8:40]], 2, 16, [7], 4096)
except StreamError as e:
    print("ERROR", e)
"""
)


def test_faulthandler_enabled_after_the_guard_prints_no_fatal_error_for_a_guarded_copy():
    run = run_python(_FAULTHANDLER_AFTER, timeout=120)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    assert "ERROR" in run.stdout and "cut short" in run.stdout, run.stdout
    assert "Fatal Python error" not in run.stderr, run.stderr[-2000:]


_HANDLER_REPLACED = (
    _PRELUDE
    + """
import faulthandler
faulthandler.enable()  # (as pytest does, before any copy)
assert fill_from([mapped], 0, 4, [0], 4096) == -1
if sys.argv[1] == "faulthandler":  # (a library turning it off and on: what it found comes back)
    faulthandler.disable()
    faulthandler.enable()
else:  # (a program setting the default action again)
    faulthandler.disable()
    import signal
    signal.signal(signal.SIGBUS, signal.SIG_DFL)
os.truncate(path, 4096)
try:
    fill_from([mapped[8:40]], 2, 16, [7], 4096)
except StreamError as e:
    print("ERROR", e)
"""
)


@pytest.mark.parametrize("how", ["faulthandler", "signal"])
def test_a_copy_stays_guarded_when_the_handler_was_replaced_after_an_earlier_copy(how):
    run = run_python(_HANDLER_REPLACED, how, timeout=120)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    assert "ERROR" in run.stdout and "cut short" in run.stdout, run.stdout
    assert "Fatal Python error" not in run.stderr, run.stderr[-2000:]
