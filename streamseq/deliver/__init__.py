"""Delivery: numpy batches to torch tensors, assembled with one copy, pinned by one thread."""
