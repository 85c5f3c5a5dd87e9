"""Planning: pure functions of the stream lengths, arrays in and arrays out.

Modules:
    spec: the frozen settings a plan is a pure function of (:class:`PlanSpec`).
    segments: streams cut into segments, planned as streams of their own.
    rows: which streams go to which row.
    packing: packed rows with at most K streams per chunk.
    epoch: the plan of one epoch: rows and number of batches.
    planner: the plans of a run's epochs (:class:`Epochs`), the resumed rest included.
    mix: the units every epoch of a weighted mixture draws.
    progress: where every stream of an epoch stands, and the rest planned from there.
    reweigh: a mixture's state loaded with other weights.
    cursor: where a run stands (:class:`Cursor`): epoch, next batch, pure transitions.
    state: what a run saves, what loading checks, how rows carry over.
    fields: the fields of a saved state read strictly.
"""
