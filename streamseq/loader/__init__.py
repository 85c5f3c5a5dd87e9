"""The loader: a facade over its configuration, data spec, reading and pass.

Modules:
    stream_loader: :class:`StreamLoader`, the facade: settings as read-only attributes,
        one :class:`~streamseq.plan.cursor.Cursor`, passes that report its transitions.
    config: the frozen :class:`~.config.LoaderConfig` (how batches are read and delivered).
    checks: checks of the streams and settings made when a loader is built.
    first_step: the data's dtype and step shape (:class:`~.first_step.FirstStepSpec`).
    reading: what a pass reads from: this process, or the worker pool (:mod:`streamseq.workers`).
    run: a pass (:class:`~.run.Pass`) and the ``num_workers="auto"`` trial.
    sampler: where trainers set the epoch.
    stats: the figures of a pass.
"""

from .config import resolve_rank
from .stats import PassStats, WorkerStats
from .stream_loader import StreamLoader

__all__ = ["PassStats", "StreamLoader", "WorkerStats", "resolve_rank"]
