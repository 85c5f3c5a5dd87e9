"""The workers: who evaluates items ahead, in which process or thread, and how they stop.

Every module, in one line each:

- :mod:`.prefetched`: :func:`~streamseq.prefetch` and the life of a set of workers
  (start, restart, grow, close, :func:`~.prefetched.close_together`).
- :mod:`.config`: :class:`~.config.WorkerConfig`, the frozen options of a set of workers.
- :mod:`.pool`: :class:`~.pool.WorkerPool`, a loader's workers, one per group of rows.
- :mod:`.epochs`: the blocks of every epoch that persistent workers read.
- :mod:`.sizing`: sizes of micro-batches, blocks and slots; the one slot sizing rule.
- :mod:`.blocks`: items handed over in blocks, given back one by one.
- :mod:`.loop`: the worker loop, the same in a thread and in a process.
- :mod:`.threads`: the thread transport (queues).
- :mod:`.processes`: the process transport (pipes, shared-memory slots).
- :mod:`.slots`: the shared-memory slots, handed out and given back.
- :mod:`.shm`: arrays allocated straight in the current slot.
- :mod:`.placed`: each group's rows written in place in a slot shared by the groups.
- :mod:`.wire`: what crosses the pipes.
- :mod:`.window`: items evaluated ahead, delivered in order.
- :mod:`.timing`: the seconds each worker spent reading and idle, sent with its results.
- :mod:`.poll`: the one wait loop (deadline, liveness of the workers, cancel).
- :mod:`.inline`: an item evaluated in the calling process, under the timeout.
- :mod:`.failures`: what the backends raise, as types.
- :mod:`.reaper`: joins exited worker processes in the background.
- :mod:`.forks`: a slot held at a fork is reused once the child has its own copy.
- :mod:`.threadlocals`: what other threads keep in thread-locals is never freed in a
  forked child.
- :mod:`.ownership`: only the process that started workers stops them (not a forked child).
- :mod:`.watchdog`: a worker process ends when its parent is gone.

Shutdown
========

Every ``close()`` of :class:`~.prefetched.Prefetched`, its finalizer, a restart at
another index, and every error that ends the workers go through the backend's ``stop()``
(or, for an object collected without it, the same ``end()`` from a
:func:`weakref.finalize`), which does this, in this order:

1. **Wake the waiters.** ``close()`` from another thread first cancels the workers: a
   thread waiting for an item polls (every 0.1 s) and raises instead of waiting on, and
   releases the lock that ``close()`` then takes. Nothing else ever waits without a
   timeout or a liveness check: a waiting caller checks every 0.1 s that every worker
   is alive (thread ``is_alive``, process exit code) and that every worker process said
   it started within :data:`.processes.STARTUP` seconds, another caller waits for it
   (the lock), a worker process's watchdog checks that its parent is the same every
   0.25 s, even while the worker reads (:mod:`.watchdog`), and a worker thread polls
   its stop flag.
2. **Stop markers.** Threads: the jobs still queued are dropped, then one stop marker per
   thread is queued, so a thread stops after the item it is evaluating. Processes: one
   stop marker down each job pipe; a worker answers with a goodbye when it will not
   touch the shared memory again, after the item it is evaluating (its result is
   dropped).
   The groups of a loader are stopped together (:func:`.processes.stop_together`):
   every stop marker is sent first, then all share one deadline.
3. **Bounded joins, then kill.** Threads are joined for up to a second in all, then
   left to finish their item as daemons (logged). A process that sent no goodbye within
   a second (0.25 s when a pass stops its groups together: what it reads is not
   wanted) is stuck or busy: it is killed (``SIGKILL``) and joined. The others exit by
   themselves: ``close(wait=True)`` joins them (up to a second); with ``wait=False``
   they go to the reaper, a daemon thread that joins each as soon as it has exited (so
   that none stays a zombie, even after a ``KeyboardInterrupt``), kills one that has
   not exited after five seconds, and ends when none is left. Every new set of workers
   reaps first.
4. **Pipes closed.** Both ends that the main process holds, once the goodbyes are in:
   a worker still writing gets an error rather than blocking. A forked worker closes
   its inherited copies of the main process's ends at start, so that its pipes break
   when the main process dies, even killed; a spawned worker never had them.
5. **Shared memory released.** The slots are one block of shared memory that the main
   process maps (unlinked from ``/dev/shm`` at once, see :mod:`.shm`); after the
   goodbyes no worker writes to it. Delivered items are views of it that stay valid:
   the block is freed when the last view is gone (a slot is handed out again only once
   every view of it is gone, and every child forked while it was held has its own
   copy: :mod:`.forks`).
6. **Finalizers.** The backend registers ``end()`` with :func:`weakref.finalize`: a
   backend collected without ``stop()`` still stops its workers; ``stop()`` detaches
   it, so each step runs once. Worker processes are daemons, and end by themselves when
   their parent is gone, killed included, whatever they are doing (:mod:`.watchdog`), so
   none outlives its owner.

Only the process that started the workers does any of this (:mod:`.ownership`): in a
child forked from it, ``close()``, finalizers, collections and the child's exit leave the
parent's workers and memory alone, and a pass in the child starts workers of its own.

Start methods: with ``fork`` a worker inherits the sequence and the shared memory, freezes
the inherited objects out of its garbage collections and runs torch on one thread; with
``spawn`` (or ``forkserver``) they are pickled once per worker, and the same protocol
applies. A worker ignores ``SIGINT``: Ctrl-C is for the main process, which then stops
the workers as above.
"""
