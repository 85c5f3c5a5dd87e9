"""Fault tolerance: dead workers, early exits, interrupts, slow consumers, spawn."""

import functools
import gc
import multiprocessing
import multiprocessing.heap
import os
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest
from helpers import default_sigint, run_script
from hypothesis import given, settings
from hypothesis import strategies as st

import streamseq
from streamseq import StreamError, StreamLoader, WorkerError
from streamseq.workers.blocks import Layout
from streamseq.workers.sizing import group_block_size

pytestmark = pytest.mark.timeout(60)


def block_of(loader, rows):
    """Micro-batches per hand-over of a worker reading the first ``rows`` rows."""
    plan = loader.plan()
    group = loader._reading.group(plan, loader._reading.rows(plan)[:rows])
    return group_block_size(group, loader.tbins)


def token_streams(count=24, low=2000, high=4000, seed=0):  # (more than workers buffer)
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 1000, n, dtype=np.int64) for n in rng.integers(low, high, count)]


def live_children():
    out = []
    for c in psutil.Process().children(recursive=True):
        try:
            if c.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in c.cmdline()[-1]:
                out.append(c)
        except (psutil.NoSuchProcess, IndexError):
            pass
    return out


def wait_no_children(timeout=5.0):
    deadline = time.monotonic() + timeout
    while live_children() and time.monotonic() < deadline:
        time.sleep(0.02)
    return live_children()


def shm_state():
    """Blocks of shared memory still allocated, shm fds open, and files left in /dev/shm.

    multiprocessing keeps freed arenas smaller than 4 MB mapped for reuse: they are not
    in use, but their two fds (the arena's and its mmap's) stay open.
    """
    heap = multiprocessing.heap.BufferWrapper._heap
    blocks = sum(len(b) for b in heap._allocated_blocks.values())
    fds = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds += os.readlink(f"/proc/self/fd/{fd}").startswith("/dev/shm/")
        except OSError:
            pass
    files = [n for n in os.listdir("/dev/shm") if n.startswith(f"pym-{os.getpid()}-")]
    return blocks, fds - 2 * len(heap._arenas), files


def worker_pids(loader):
    return [p for pf in loader._active().prefetchers for p in pf.pids]


@pytest.fixture
def clean():
    """No worker before, none after, and no shared memory left in use by the test."""
    gc.collect()
    assert not live_children()
    blocks, _, _ = shm_state()
    yield
    gc.collect()
    assert not wait_no_children(), "worker processes left behind"
    after, extra_fds, files = shm_state()
    assert files == [], f"shared-memory files left in /dev/shm: {files}"
    assert after <= blocks, "shared memory still allocated"
    assert extra_fds <= 0, "shared-memory files open beyond multiprocessing's free arenas"


def test_killed_worker_is_a_clear_error_within_seconds(clean):
    loader = StreamLoader(token_streams(), 8, 16, num_workers=2)
    it = iter(loader)
    for _ in range(3):
        next(it)
    victim = worker_pids(loader)[1]
    os.kill(victim, signal.SIGKILL)
    start = time.monotonic()
    message = rf"died unexpectedly.*process {victim} killed by SIGKILL"
    with pytest.raises(WorkerError, match=message):
        for _ in it:
            pass
    assert time.monotonic() - start < 5
    del it, loader


class Slow:
    """A stream whose reads take a while: the main process is waiting when a worker dies."""

    def __init__(self, n, delay):
        self.n, self.delay = n, delay

    def __len__(self):
        return self.n

    def __getitem__(self, key):
        time.sleep(self.delay)
        return np.arange(self.n)[key]


def test_worker_killed_while_the_main_process_waits(clean):
    loader = StreamLoader([Slow(400, 0.05) for _ in range(4)], 4, 4, num_workers=2)
    it = iter(loader)
    next(it)
    victim = worker_pids(loader)[0]
    os.kill(victim, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(WorkerError):
        for _ in it:
            pass
    assert time.monotonic() - start < 5
    del it, loader


def test_both_workers_killed_and_the_loader_still_works_after(clean):
    streams = token_streams()
    loader = StreamLoader(streams, 8, 16, num_workers=2)
    it = iter(loader)
    next(it)
    for pid in worker_pids(loader):
        os.kill(pid, signal.SIGKILL)
    with pytest.raises(WorkerError):
        list(it)
    again = [b.data.numpy() for b in loader]
    expected = [b.data.numpy() for b in StreamLoader(streams, 8, 16)]
    assert all((a == b).all() for a, b in zip(again, expected, strict=True))
    del it, loader


def interrupt_main_and_workers(loader):
    """What Ctrl-C does in a terminal: SIGINT to every process of the foreground group."""
    for pid in worker_pids(loader):
        os.kill(pid, signal.SIGINT)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(1)  # the KeyboardInterrupt is raised here, in the main process


def stop_early(loader, how):
    """Consume part of an epoch, then stop the way ``how`` says."""
    if how == "break":
        for i, _ in enumerate(loader):
            if i == 3:
                break
    elif how == "delete":
        it = iter(loader)
        for _ in range(3):
            next(it)
        del it
    elif how == "interrupt":
        with default_sigint(), pytest.raises(KeyboardInterrupt):
            for i, _ in enumerate(loader):
                if i == 3:
                    interrupt_main_and_workers(loader)
    elif how == "second epoch":
        first = iter(loader)
        for _ in range(3):
            next(first)
        second = list(loader)
        assert len(second) == len(loader)
        with pytest.raises(RuntimeError, match="superseded"):  # delivers nothing more
            next(first)
    elif how == "close":
        it = iter(loader)
        next(it)
        loader.close()


HOWS = ["break", "delete", "interrupt", "second epoch", "close"]


@pytest.mark.parametrize("how", HOWS)
def test_stopping_early_ends_the_workers(clean, how):
    loader = StreamLoader(token_streams(), 8, 16, num_workers=2)
    stop_early(loader, how)
    if how != "delete":
        assert not wait_no_children()
    del loader


@pytest.fixture
def pinning(monkeypatch):
    """The pinning thread's code path on a machine without CUDA (memory not page-locked)."""
    import torch

    from streamseq.deliver import assemble, pin
    from streamseq.deliver import torch as to_torch

    def empty(shape, dtype, pin):
        return torch.empty(shape, dtype=to_torch.torch_dtype(np.dtype(dtype)))

    for module in (assemble, pin, to_torch):
        if hasattr(module, "can_pin"):
            monkeypatch.setattr(module, "can_pin", lambda: True)
        if hasattr(module, "empty"):
            monkeypatch.setattr(module, "empty", empty)


@pytest.mark.parametrize("how", HOWS)
def test_stopping_early_ends_the_pinning_thread_and_the_workers(clean, pinning, how):
    threads = psutil.Process().num_threads()
    loader = StreamLoader(token_streams(), 8, 16, num_workers=2, pin_memory=True)
    streams = token_streams()
    assert [b.data.tolist() for b in loader] == [
        b.data.tolist() for b in StreamLoader(streams, 8, 16)
    ]
    stop_early(loader, how)
    gc.collect()
    if how != "delete":
        assert not wait_no_children()
    deadline = time.monotonic() + 5
    while psutil.Process().num_threads() > threads and time.monotonic() < deadline:
        time.sleep(0.05)
    assert psutil.Process().num_threads() <= threads
    del loader


def test_fifty_epochs_of_early_stops_keep_processes_fds_and_memory_flat(clean):
    me = psutil.Process()
    loader = StreamLoader(token_streams(), 8, 16, num_workers=2)
    for epoch in range(5):  # warm up: imports, allocator, shared-memory arenas
        stop_early(loader, HOWS[epoch % len(HOWS)])
    gc.collect()
    assert not wait_no_children()
    fds, rss = me.num_fds(), me.memory_info().rss
    threads = me.num_threads()
    for epoch in range(50):
        stop_early(loader, HOWS[epoch % len(HOWS)])
        if epoch % 10 == 9:
            assert len(wait_no_children()) == 0
    gc.collect()
    assert not wait_no_children()
    assert me.num_fds() <= fds + 2
    assert me.memory_info().rss - rss < 32 * 2**20
    time.sleep(1.2)  # the monitor threads of stopped workers notice within a second
    assert me.num_threads() <= threads + 1
    del loader


class Counted:
    """A stream that counts its reads in shared memory (one counter per stream)."""

    def __init__(self, n, counts, index):
        self.n, self.counts, self.index = n, counts, index

    def __len__(self):
        return self.n

    def __getitem__(self, key):
        self.counts[self.index] += 1
        return np.arange(self.n)[key]


def test_a_slow_consumer_holds_a_bounded_number_of_batches(clean):
    rows, buffered = 4, 4
    counts = multiprocessing.RawArray("q", rows)
    streams = [Counted(3000, counts, i) for i in range(rows)]
    loader = StreamLoader(streams, rows, 8, num_workers=2, max_buffered=buffered)
    me = psutil.Process()
    memory = []
    block = None
    for i, _ in enumerate(loader):
        if block is None:  # micro-batches per hand-over: max_buffered counts hand-overs
            block = block_of(loader, 2)
            assert block > 1
        time.sleep(0.002)
        ahead = sum(counts) / rows - (i + 1)  # batches read by the workers, not consumed
        assert ahead <= buffered * block, f"{ahead} batches ahead at batch {i}"
        if i % 50 == 0:
            memory.append(sum(p.memory_info().rss for p in [me, *me.children()]))
    assert i + 1 == len(loader) == 375
    assert max(memory[2:]) - min(memory[2:]) < 16 * 2**20
    del loader


class Exiting:
    def __len__(self):
        return 40

    def __getitem__(self, key):
        if isinstance(key, slice) and key.start >= 20:
            raise SystemExit("stream gave up")
        return np.arange(40)[key]


def test_a_thread_worker_that_exits_is_an_error_not_a_hang(clean):
    loader = StreamLoader([Exiting(), np.arange(40)], 2, 4, num_workers=2, method="thread")
    with pytest.raises(WorkerError, match="SystemExit"):
        list(loader)


class ExitOnStream:
    """A transform that exits (``sys.exit``, Ctrl-C) on one stream, in a worker."""

    def __init__(self, stream, error):
        self.stream, self.error = stream, error

    def __call__(self, steps, info):
        if info.stream == self.stream and info.start >= 8:
            raise self.error
        return steps


@pytest.mark.parametrize("method", ["thread", "process"])
@pytest.mark.parametrize("error", [SystemExit(2), KeyboardInterrupt()])
def test_an_exit_in_a_workers_transform_names_the_stream_and_the_steps(clean, method, error):
    streams = [np.arange(n) for n in (40, 30, 50, 20)]
    transform = ExitOnStream(2, error)
    loader = StreamLoader(streams, 2, 4, num_workers=2, method=method, transform=transform)
    with pytest.raises(WorkerError, match=type(error).__name__) as caught:
        list(loader)
    assert "stream 2 (" in str(caught.value)
    assert "steps 8:12" in str(caught.value)
    assert isinstance(caught.value.__cause__, type(error))
    loader.close()


def test_a_stream_error_in_a_worker_stops_every_worker(clean):
    streams = token_streams()
    openers = [functools.partial(np.array, s) for s in streams]  # opened in the workers
    loader = StreamLoader(openers, 8, 16, num_workers=2, lengths=[len(s) + 5 for s in streams])
    with pytest.raises(StreamError, match="declared length"):
        list(loader)
    assert not wait_no_children()


SPAWN = """
import functools, multiprocessing, os, sys, time
import numpy as np
import psutil
from streamseq import StreamError, StreamLoader

class Squares:
    def __init__(self, n):
        self.n = n
    def __len__(self):
        return self.n
    def __getitem__(self, key):
        return (np.arange(self.n) ** 2)[key]

def pid_stream(n):
    return np.full(n, os.getpid(), dtype=np.int64)

if __name__ == "__main__":
    multiprocessing.set_start_method("spawn")
    streams = [np.arange(7), Squares(9), functools.partial(np.arange, 100, 111)]
    streams += [Squares(4), np.arange(50, 55)]
    reference = [b.data.tolist() for b in StreamLoader(streams, 2, 3)]
    loader = StreamLoader(streams, 2, 3, num_workers=2)
    assert [b.data.tolist() for b in loader] == reference, "spawned workers differ"
    pids = {int(p) for b in StreamLoader([functools.partial(pid_stream, 6)] * 2, 2, 3,
            num_workers=2, lengths=[6, 6]) for p in b.data[b.valid].tolist()}
    assert os.getpid() not in pids and len(pids) == 2, pids
    try:
        streams = [np.arange(5), lambda: np.arange(3)]
        list(StreamLoader(streams, 2, 2, num_workers=2, lengths=[5, 3]))
    except StreamError as e:
        assert "stream 1" in str(e) and "lambda" in str(e) and "does not pickle" in str(e), e
    else:
        raise AssertionError("a lambda opener went to spawned workers")
    try:
        list(StreamLoader([np.arange(5)], 1, 2, num_workers=1, transform=lambda x, info: x))
    except TypeError as e:
        assert "transform" in str(e) and "does not pickle" in str(e), e
    else:
        raise AssertionError("a lambda transform went to spawned workers")
    deadline = time.monotonic() + 10
    def command(c):  # empty while a process starts or ends; gone once it has ended
        try:
            return "" if c.status() == "zombie" else " ".join(c.cmdline()) or "?"
        except psutil.NoSuchProcess:
            return ""

    while time.monotonic() < deadline:  # the workers exit by themselves, soon
        alive = [cmd for cmd in map(command, psutil.Process().children()) if cmd]
        if all("resource_tracker" in cmd for cmd in alive):  # multiprocessing's
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"workers left: {alive}")
    print("spawn", multiprocessing.get_start_method(), "ok")
"""


def test_spawned_workers_get_pickled_streams_and_openers(tmp_path):
    out = run_script(tmp_path, SPAWN, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "spawn spawn ok" in out.stdout


SPAWNED_CHILD_FAILS = """
import multiprocessing, sys
import numpy as np
import streamseq

if multiprocessing.current_process().name != "MainProcess":  # (a spawned worker)
    raise SystemExit("the worker fails as it imports the main module")

if __name__ == "__main__":
    multiprocessing.set_start_method("spawn")
    streams = [np.zeros((2000, 64), np.float32) for _ in range(8)]  # (megabytes to pickle)
    loader = streamseq.StreamLoader(streams, 4, 8, num_workers=2)
    try:
        list(loader)
    except streamseq.WorkerError as e:
        print("error:", e)
"""


@pytest.mark.timeout(240)
def test_a_spawned_worker_that_dies_before_it_reads_its_streams_is_an_error_not_a_hang(tmp_path):
    """Its streams (more than a pipe holds) are sent once it runs: its death breaks the pipe."""
    hang = "the main process hung while starting a worker"
    done = run_script(tmp_path, SPAWNED_CHILD_FAILS, timeout=120, hang=hang)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "error: a worker process died unexpectedly" in done.stdout, done.stdout
    assert "exit code 1" in done.stdout, done.stdout


def test_streams_and_openers_pickle():
    import pickle

    from streamseq.read.ref import as_refs

    refs = as_refs([np.arange(3), functools.partial(np.arange, 5)])
    refs[1].read(0, 2)  # opened here: the opened stream is not pickled
    again = pickle.loads(pickle.dumps(refs))
    assert [r.read(0, 2).tolist() for r in again] == [[0, 1], [0, 1]]
    assert again[1]._opened is not None and refs[1]._opened is not again[1]._opened


KILLED_MAIN = """
import os, signal, sys, time
import numpy as np
import streamseq

class Growing:  # items after the first outgrow their slots: they travel through the pipe
    def __len__(self):
        return 50
    def __getitem__(self, i):
        return np.zeros(10 if i == 0 else 4_000_000, np.uint8)

ahead = streamseq.prefetch(Growing(), 1)
ahead[0]
ahead.prepare(1)
time.sleep(1.0)  # the worker is now writing item 1, more than a pipe holds
print(*ahead.pids, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_workers_end_when_the_main_process_is_killed_mid_write(tmp_path):
    out = run_script(tmp_path, KILLED_MAIN, timeout=60)
    assert out.returncode == -signal.SIGKILL, out.stderr[-3000:]
    pids = [int(p) for p in out.stdout.split()]
    assert pids
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(psutil.pid_exists(p) for p in pids):
        time.sleep(0.1)
    left = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    assert not left, f"workers outlived the main process: {left}"


class StuckAfter(Slow):
    """A stream whose reads from step ``at`` on never return in time (a hung file)."""

    def __init__(self, n, at):
        super().__init__(n, delay=60)
        self.at = at

    def __getitem__(self, key):
        if key.start >= self.at:
            return super().__getitem__(key)
        return np.arange(self.n)[key]


@pytest.mark.parametrize("method", ["process", "thread"])
def test_a_stuck_worker_is_an_error_after_the_timeout(clean, method):
    streams = [StuckAfter(40, 20), np.arange(40)]
    loader = StreamLoader(streams, 2, 4, num_workers=2, method=method, timeout=1.5)
    start = time.monotonic()
    delivered = []
    with pytest.raises(WorkerError, match=r"delivered nothing for 1.5 s .*timeout=1.5"):
        for batch in loader:
            delivered.append(batch)
    assert time.monotonic() - start < 15
    # every batch before the block of micro-batches with the stuck read (batch 5) came
    size = block_of(loader, 1)
    layout = Layout(size, len(loader))
    assert len(delivered) == layout.start(layout.block_of(5)) == 3
    loader.close()


def test_a_slow_worker_within_the_timeout_is_waited_for(clean):
    loader = StreamLoader([Slow(12, 0.3), np.arange(12)], 2, 4, num_workers=2, timeout=5)
    expected = StreamLoader([np.arange(12), np.arange(12)], 2, 4)
    assert [b.data.tolist() for b in loader] == [b.data.tolist() for b in expected]


def test_an_unclosed_persistent_loader_lets_the_interpreter_exit(tmp_path):
    script = tmp_path / "unclosed.py"
    script.write_text(
        "import os\n"
        "import numpy as np\n"
        "import streamseq\n"
        "streams = [np.arange(1000) for _ in range(64)]\n"
        "loader = streamseq.StreamLoader(streams, 8, 16, num_workers=2, persistent_workers=True)\n"
        "for batch in loader:\n"
        "    pass\n"
        "print(*(p for pf in loader._workers.persistent for p in pf.pids), flush=True)\n"
    )
    run = [sys.executable, str(script)]
    done = subprocess.run(run, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr[-2000:]
    pids = [int(p) for p in done.stdout.split()]
    assert len(pids) == 2
    time.sleep(0.5)
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


FORKED = """
import gc, multiprocessing, os, sys
import numpy as np
import psutil
from streamseq import StreamLoader

def streams():
    rng = np.random.default_rng(0)
    return [rng.integers(0, 1000, n) for n in rng.integers(200, 400, 12)]

def in_child(mode, loader, it, reference, persistent):
    if mode == "close":
        loader.close()
    elif mode == "pass":  # a pass of its own: workers of its own
        assert [b.data.tolist() for b in loader] == reference, "the child's pass"
        if persistent:
            assert [b.data.tolist() for b in loader] == reference, "the child's next pass"
        loader.close()
    elif mode == "next":  # goes on with the pass it inherited
        assert [b.data.tolist() for b in it] == reference[5:], "the child's rest"
    elif mode == "collect":
        del it, loader
        gc.collect()
    sys.exit(0)  # a normal exit: atexit handlers and finalizers run

if __name__ == "__main__":
    start, method, persistent = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    multiprocessing.set_start_method(start)
    reference = [b.data.tolist() for b in StreamLoader(streams(), 4, 8)]
    for mode in ("exit", "close", "pass", "next", "collect"):
        loader = StreamLoader(streams(), 4, 8, num_workers=2, method=method,
                              persistent_workers=persistent)
        if persistent:
            assert [b.data.tolist() for b in loader] == reference
        it = iter(loader)
        got = [next(it).data.tolist() for _ in range(5)]
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            in_child(mode, loader, it, reference, persistent)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, f"the child ({mode}) failed"
        got += [b.data.tolist() for b in it]  # the parent's workers are still there
        assert got == reference, mode
        if persistent:
            assert [b.data.tolist() for b in loader] == reference, mode
        loader.close()
        print(mode, "ok", flush=True)
"""


@pytest.mark.timeout(240)  # (subprocesses that import torch, on a busy machine)
@pytest.mark.parametrize(
    "start, method, persistent",
    [
        ("fork", "process", 0),
        ("fork", "process", 1),
        ("spawn", "process", 1),
        ("fork", "thread", 1),
    ],
)
def test_a_forked_child_leaves_its_parents_workers_alone(tmp_path, start, method, persistent):
    script = tmp_path / "forked.py"
    script.write_text(FORKED)
    run = [sys.executable, str(script), start, method, str(persistent)]
    main = subprocess.Popen(
        run, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    stdout, stderr = main.communicate(timeout=150)
    out = subprocess.CompletedProcess(run, main.returncode, stdout, stderr)
    assert out.returncode == 0, out.stderr[-3000:]
    deadline = time.monotonic() + 30  # nothing of the parent nor of its children is left
    while any(session_left(main.pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(session_left(main.pid)), session_left(main.pid)
    assert out.stdout.split() == [
        w for m in ("exit", "close", "pass", "next", "collect") for w in (m, "ok")
    ]


STUCK_MAIN = """
import multiprocessing, os, sys, threading, time
import numpy as np
import psutil
from streamseq import StreamLoader

def stuck(steps, info):  # reads never return in the workers (the main process reads one)
    if os.getpid() != int(os.environ["STREAMSEQ_TEST_MAIN"]):
        time.sleep(3600)
    return steps

def ready():
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        names = [" ".join(c.cmdline()) for c in psutil.Process().children()]
        if sum("resource_tracker" not in n for n in names) >= 2:
            break
        time.sleep(0.05)
    time.sleep(1.0)  # the workers are in the transform now
    print("ready", flush=True)

if __name__ == "__main__":
    start, persistent, where = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
    multiprocessing.set_start_method(start)
    os.environ["STREAMSEQ_TEST_MAIN"] = str(os.getpid())
    streams = [np.arange(200) for _ in range(4)]
    loader = StreamLoader(streams, 4, 8, num_workers=2, transform=stuck,
                          persistent_workers=persistent)
    if where == "main":  # workers started by the main thread
        threading.Thread(target=ready, daemon=True).start()
        list(loader)
    else:  # workers started by another thread (the parent death signal does not apply)
        threading.Thread(target=lambda: list(loader), daemon=True).start()
        ready()
        time.sleep(3600)
"""


def session_left(sid):
    """Live processes of session ``sid``, and processes mapping shared memory it made."""
    left, mapping = [], []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                left.append(p.pid)
            with open(f"/proc/{p.pid}/maps") as f:
                if f"/dev/shm/pym-{sid}-" in f.read():
                    mapping.append(p.pid)
        except (OSError, psutil.Error):
            pass
    files = [n for n in os.listdir("/dev/shm") if n.startswith(f"pym-{sid}-")]
    return left, mapping, files


@pytest.mark.timeout(240)  # (subprocesses that import torch, on a busy machine)
@pytest.mark.parametrize(
    "start, persistent, where",
    [("fork", 0, "main"), ("fork", 1, "thread"), ("spawn", 0, "thread"), ("spawn", 1, "main")],
)
def test_workers_stuck_in_a_read_end_when_the_main_process_is_killed(
    tmp_path, start, persistent, where
):
    script = tmp_path / "stuck.py"
    script.write_text(STUCK_MAIN)
    run = [sys.executable, str(script), start, str(persistent), where]
    main = subprocess.Popen(run, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert main.stdout.readline().strip() == "ready"
        assert len(session_left(main.pid)[0]) >= 3  # the main process and its workers
    finally:
        main.kill()
        main.wait(30)
    deadline = time.monotonic() + 30
    while any(session_left(main.pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    left, mapping, files = session_left(main.pid)
    assert not left, f"processes outlived the main process: {left}"
    assert not mapping and not files, f"shared memory left: {mapping} {files}"


def persistent_pids(loader):
    return [p for pf in loader._workers.persistent or () for p in pf.pids]


def test_a_dead_persistent_worker_stops_them_all(clean):
    streams = token_streams()
    loader = StreamLoader(streams, 8, 16, num_workers=2, persistent_workers=True)
    expected = [b.data.tolist() for b in StreamLoader(streams, 8, 16)]
    assert [b.data.tolist() for b in loader] == expected
    it = iter(loader)
    next(it)
    pids = persistent_pids(loader)
    assert len(pids) == 2
    os.kill(pids[1], signal.SIGKILL)
    message = r"died unexpectedly while evaluating epoch 1, batch \d+: stream \d+ .* steps \d+:\d+"
    with pytest.raises(WorkerError, match=message) as info:
        for _ in it:
            pass
    assert "EpochBlocks" not in str(info.value) and "prefetch(" not in str(info.value)
    assert not wait_no_children(), "the other persistent worker was left running"
    assert loader._workers.persistent is None
    assert [b.data.tolist() for b in loader] == expected  # new workers for the next pass
    loader.close()


def stuck_in_epoch_0(steps, info):
    """Reads of epoch 0 from step 12 on take far longer than the timeout."""
    if info.epoch == 0 and info.start >= 12:
        time.sleep(30)
    return steps


def test_an_item_left_stuck_by_a_pass_is_not_seen_by_the_next(clean):
    streams = [np.arange(400), np.arange(1000, 1400)]
    loader = StreamLoader(
        streams,
        2,
        4,
        num_workers=2,
        persistent_workers=True,
        timeout=2,
        transform=stuck_in_epoch_0,
    )
    for i, _ in enumerate(loader):  # left at batch 2: the workers are stuck on batch 3
        if i == 2:
            break
    expected = StreamLoader(streams, 2, 4, transform=stuck_in_epoch_0)
    expected.set_epoch(1)  # a new pass after one left before its end: the next epoch
    assert [b.data.tolist() for b in loader] == [b.data.tolist() for b in expected]
    loader.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_an_infinite_timeout_is_no_timeout(workers):
    streams = [np.arange(40), np.arange(30)]
    loader = StreamLoader(streams, 2, 4, num_workers=workers, timeout=float("inf"))
    assert loader.timeout is None
    assert len(list(loader)) == len(loader)
    assert streamseq.prefetch([1, 2], 1, method="thread", timeout=float("inf")).timeout is None


@pytest.mark.parametrize(
    "timeout, error",
    [(float("nan"), ValueError), (-1, ValueError), (float("-inf"), ValueError), ("3", TypeError)],
)
def test_a_timeout_that_is_no_duration_is_refused(timeout, error):
    with pytest.raises(error, match="timeout must be"):
        StreamLoader([np.arange(4)], 1, 2, timeout=timeout)
    with pytest.raises(error, match="timeout must be"):
        streamseq.prefetch([1, 2], 1, timeout=timeout)


class FailingAt:
    """A stream whose reads that cover step ``at`` fail."""

    def __init__(self, n, at):
        self.n, self.at = n, at

    def __repr__(self):
        return f"FailingAt({self.n}, {self.at})"

    def __len__(self):
        return self.n

    def __getitem__(self, key):
        if key.start <= self.at < key.stop:
            raise OSError(f"bad step {self.at}")
        return np.arange(self.n)[key] * 10


def read_until_error(loader):
    delivered = []
    with pytest.raises(StreamError) as info:
        for batch in loader:
            delivered.append((batch.data.tolist(), batch.stream.tolist(), batch.step.tolist()))
    loader.close()
    return delivered, str(info.value)


@settings(max_examples=6, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 60), min_size=2, max_size=5),
    failing=st.integers(0, 4),
    where=st.floats(0, 1, exclude_max=True),
    batch_size=st.integers(2, 3),
    tbins=st.integers(1, 4),
)
def test_a_read_error_comes_after_every_batch_before_it(
    lengths, failing, where, batch_size, tbins
):
    failing %= len(lengths)
    at = int(where * lengths[failing])

    def streams():
        return [
            FailingAt(n, at) if s == failing else np.arange(n) + 1000 * s
            for s, n in enumerate(lengths)
        ]

    expected = read_until_error(StreamLoader(streams(), batch_size, tbins))
    assert f"stream {failing} (FailingAt" in expected[1]
    for method in ("thread", "process"):
        loader = StreamLoader(streams(), batch_size, tbins, num_workers=2, method=method)
        assert read_until_error(loader) == expected, method
    assert not wait_no_children()


def test_a_forked_child_reads_while_a_thread_of_its_parent_holds_the_loaders_lock():
    import threading

    loader = StreamLoader([np.arange(10)], 1, 2)
    held, release = threading.Event(), threading.Event()

    def hold():
        with loader._lock.get():  # e.g. a thread planning an epoch at the moment of the fork
            held.set()
            release.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert held.wait(10)
        pid = os.fork()
        if pid == 0:  # the child plans and reads with a lock of its own
            code = 0 if loader[1].data.tolist() == [[2, 3]] else 1
            os._exit(code)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the child waited for its parent's lock")
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        release.set()
        thread.join()
