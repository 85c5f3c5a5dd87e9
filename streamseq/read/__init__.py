"""Reading: streams, the references that read them, per-process handles, transforms.

- :mod:`.stream`: what a stream is (:class:`~.stream.ArrayTree`: a dict or tuple of
  arrays as one stream).
- :mod:`.step_spec`: a stream's dtype and step shape, where known without a read.
- :mod:`.ref`: :class:`~.ref.StreamRef`, the reference that opens and reads one stream.
- :mod:`.handle`: per-process handles on what streams read from.
- :mod:`.transform`: transforms applied where a stream is read.
"""
