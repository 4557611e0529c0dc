"""A document's window logits pooled into one row: the mean, or the maximum of each logit.

Long documents (`--doc_stride`) are read as overlapping windows; every decision about a document
(metrics, prediction files, served answers, and with `--window_loss=document` the training loss)
is made on its pooled logits. `pool_windows` pools a split's outputs in NumPy (float64);
`pool_window_logits` is its tensor twin, used inside the graph (the training loss, the
SavedModel), tested equal to it.
"""
from __future__ import annotations

import numpy as np

POOLINGS = ("mean", "max")


def pool_windows(logits, example_index, examples: int, pooling: str) -> np.ndarray:
    """One row of logits per example from its windows' rows: their mean or their maximum."""
    logits = np.asarray(logits, np.float64)
    example_index = np.asarray(example_index)
    counts = np.bincount(example_index, minlength=examples)
    if np.any(counts == 0):
        raise RuntimeError(f"examples without a window: {np.flatnonzero(counts == 0)[:5]}")
    if pooling == "max":
        pooled = np.full((examples, logits.shape[1]), -np.inf)
        np.maximum.at(pooled, example_index, logits)
        return pooled
    pooled = np.zeros((examples, logits.shape[1]))
    np.add.at(pooled, example_index, logits)
    return pooled / counts[:, None]


def pool_window_logits(logits, segments, pooling: str):
    """`pool_windows` on tensors: the rows of `logits` ([rows, n]) pooled by `segments` ([rows],
    sorted, every id from 0 to the largest present), one row per segment."""
    from keras import ops

    if pooling == "max":
        return ops.segment_max(logits, segments, sorted=True)
    sums = ops.segment_sum(logits, segments, sorted=True)
    counts = ops.segment_sum(ops.ones_like(logits[:, :1]), segments, sorted=True)
    return sums / counts
