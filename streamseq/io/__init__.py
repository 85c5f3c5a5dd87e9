"""Sources: files on disk (video, audio, tokens, events), manifests of them, procedural streams.

Each function returns a stream, a lazy sequence of timesteps: ``len(s)`` is its number of
steps and ``s[a:b]`` an array whose first axis has ``b - a`` steps (slices are clamped
like numpy's; only contiguous slices are supported). Streams are picklable and open their
file on the first read in the process that reads it, so they can be handed to worker
processes, forked or spawned.
"""

from streamseq.io.audio import audio
from streamseq.io.corpus import token_corpus
from streamseq.io.events import EVENT_DTYPE, events, synthetic_events
from streamseq.io.lerobot import lerobot
from streamseq.io.manifest import manifest
from streamseq.io.probe import probe_lengths
from streamseq.io.procedural import texture, virtual_camera
from streamseq.io.recording import recording
from streamseq.io.table import table
from streamseq.io.tokens import tokens
from streamseq.io.video import video

__all__ = [
    "EVENT_DTYPE",
    "audio",
    "events",
    "lerobot",
    "manifest",
    "probe_lengths",
    "recording",
    "synthetic_events",
    "table",
    "texture",
    "token_corpus",
    "tokens",
    "video",
    "virtual_camera",
]
