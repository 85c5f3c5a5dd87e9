"""Running two threads of a loader test: the second one once the first has paused."""

import threading


def while_paused(first, name, entered, other, timeout=30):
    """Run ``first`` in a thread named ``name``, and ``other`` in another once ``entered``
    says the first has paused; wait for both (``timeout`` seconds each at most)."""
    thread = threading.Thread(target=first, name=name)
    thread.start()
    assert entered.wait(timeout)
    second = threading.Thread(target=other)
    second.start()
    thread.join(timeout)
    second.join(timeout)
