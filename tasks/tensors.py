"""Where record batches meet a model, for every task: the encoder's input names, and per-position
outputs made collectable.

Records keep the original's feature names (`input_ids`, `input_mask`, `segment_ids`); the encoder
takes `input_word_ids`, `input_mask`, `input_type_ids`. Trimmed batches (`--trim_padding`) differ
in width, so per-position outputs are padded back to `max_seq_length` before `Trainer.predict`
concatenates them.
"""
from __future__ import annotations

from keras import ops


def model_inputs(batch) -> dict:
    """Record feature names (the original's) -> the encoder's input names."""
    return {"input_word_ids": batch["input_ids"], "input_mask": batch["input_mask"],
            "input_type_ids": batch["segment_ids"]}


def pad_positions(values, length: int, value):
    """`[batch, width, ...]` -> `[batch, length, ...]`, filling the new positions with `value`."""
    padding = [[0, 0], [0, length - ops.shape(values)[1]]] + [[0, 0]] * (len(values.shape) - 2)
    return ops.pad(values, padding, constant_values=value)
