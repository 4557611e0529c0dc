"""How rows become batches, for both input pipelines: the choices (`Batching`) and what the tf.data
pipeline (`data_gen.datasets`) and its NumPy twin (`data_gen.numpy_datasets`) both compute from the
features alone (each row's length, each example's rows)."""
from __future__ import annotations

import dataclasses

import numpy as np

LENGTH_MULTIPLE = 8  # trimmed batches are this many tokens wide, or a multiple (fewer retraces)
# Where every step is XLA-compiled, once per width (JAX; TensorFlow with --jit_compile, TPUs):
# multiples of 32 bound the compiles of each step function to max_seq_length / 32 (4 at 128,
# 16 at 512; multiples of 8 gave 16 and 64), for at most 31 padded positions a row.
XLA_LENGTH_MULTIPLE = 32
SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids")
BUCKET_WINDOW = 50  # batches sorted by length together (the default of --bucket_by_length)


@dataclasses.dataclass(frozen=True)
class Batching:
    """How rows become batches: `trim` to the longest row (rounded up to `width_multiple`),
    `bucket_window` batches of similar lengths (0: off), `pack` several examples per training
    row (tasks that support it)."""

    trim: bool = True
    bucket_window: int = 0
    pack: bool = False
    # Trimmed widths are multiples of this. 8 bounds the shapes a step meets (XLA compiles each
    # one; GPUs' fast kernels want multiples of 8); on a CPU without XLA every width runs at the
    # same speed per token and a new one costs ~0.04 s once, so 1 (the longest row) wastes least.
    width_multiple: int = LENGTH_MULTIPLE


def example_lengths(features: dict) -> np.ndarray:
    """Real tokens of each row (of its longest choice, for `[rows, choices, length]` masks)."""
    mask = np.asarray(features["input_mask"])
    return (mask != 0).sum(-1).reshape(len(mask), -1).max(-1).astype(np.int32)


def example_row_spans(example_index) -> tuple:
    """The first row and the number of rows of each example, whose rows must be consecutive
    (a split's windows are written in document order)."""
    example_index = np.asarray(example_index)
    examples = int(example_index.max()) + 1 if len(example_index) else 0
    if np.any(np.diff(example_index) < 0) or np.any(example_index < 0):
        raise ValueError("whole_examples needs each example's rows consecutive, in order")
    counts = np.bincount(example_index, minlength=examples)
    if np.any(counts == 0):
        raise ValueError(f"examples without a row: {np.flatnonzero(counts == 0)[:5]}")
    return np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64), counts.astype(np.int64)
