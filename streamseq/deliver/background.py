"""Run an iterator in one background thread, with a bounded queue and liveness checks."""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ..workers.poll import poll

_DONE = object()


class _Raised:
    def __init__(self, error: BaseException):
        self.error = error


class Background:
    """Iterate ``make_iter()`` in a daemon thread, at most ``max_buffered`` items ahead.

    Every wait polls with a timeout and checks that the other side is alive, so neither
    the consumer nor the thread can hang on the other. ``close()`` stops the thread.

    Args:
        make_iter: builds the iterator, called in the thread.
        max_buffered: bound on items produced but not yet consumed.
        poll: seconds between liveness checks.

    Example:
        >>> with Background(lambda: iter(range(4))) as it:
        ...     list(it)
        [0, 1, 2, 3]
    """

    def __init__(self, make_iter: Callable[[], Iterator[Any]], max_buffered: int = 2, poll=0.2):
        self.queue: queue.Queue = queue.Queue(max_buffered)
        self.stop = threading.Event()
        self.poll = poll
        self.pid = os.getpid()  # a forked child has no thread: it leaves this one alone
        self.thread = threading.Thread(target=self._run, args=(make_iter,), daemon=True)
        try:
            self.thread.start()
        except BaseException:  # (Ctrl-C as it starts): nobody will read it, it stops
            self.stop.set()
            raise

    def _put(self, item: Any) -> bool:
        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=self.poll)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, make_iter: Callable[[], Iterator[Any]]) -> None:
        try:
            for item in make_iter():
                if not self._put(item):
                    return
        except BaseException as e:
            self._put(_Raised(e))
            return
        self._put(_DONE)

    def _get(self, seconds: float) -> Any:
        return self.queue.get(timeout=seconds)

    def _alive(self) -> None:
        if not self.thread.is_alive() and self.queue.empty():
            raise RuntimeError("the background thread stopped without a result")

    def __iter__(self) -> Background:
        return self

    def __next__(self) -> Any:
        item = poll(self._get, self.poll, self._alive)
        if item is _DONE:
            self.close()
            raise StopIteration
        if isinstance(item, _Raised):
            self.close()
            raise item.error
        return item

    def close(self, timeout: float = 5.0) -> None:
        """Stop the thread and wait for it (bounded); nothing in a forked child."""
        if os.getpid() != self.pid:  # (the queue's lock may have been held at the fork)
            return
        self.stop.set()
        while True:
            try:
                self.queue.get_nowait()
            except queue.Empty:
                break
        if self.thread is not threading.current_thread():
            self.thread.join(timeout)

    def __enter__(self) -> Background:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
