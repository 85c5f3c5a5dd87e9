"""The loader: a facade over its configuration, data spec, worker topology and pass.

Modules:
    stream_loader: :class:`StreamLoader`, the facade: settings as read-only attributes,
        one :class:`~streamseq.plan.cursor.Cursor`, passes that report its transitions.
    config: the frozen :class:`~.config.LoaderConfig` (how batches are read and delivered).
    checks: checks of the streams and settings made when a loader is built.
    spec: the data's dtype and step shape.
    topology: who reads which rows (this process, or workers).
    run: a pass (:class:`~.run.Pass`) and the ``num_workers="auto"`` trial.
    sampler: where trainers set the epoch.
    stats: the figures of a pass.
"""

from .config import resolve_rank
from .stats import PassStats, WorkerStats
from .stream_loader import StreamLoader

__all__ = ["PassStats", "StreamLoader", "WorkerStats", "resolve_rank"]
