"""Sentence (pair) examples -> the original's classifier features, TFRecords and tf.data input.

Conversion is the original `convert_single_example`: WordPiece both texts, trim a pair by popping
from the end of the longer one (B on a tie) to `max_seq_length - 3` tokens, a single text to
`max_seq_length - 2`, pack `[CLS] A [SEP] B [SEP]` with segment ids 0/1, pad with zeros. Records
keep the original's feature names (`input_ids`, `input_mask`, `segment_ids`, `label_ids`,
`is_real_example`) plus `example_index`, the row of the example in its split, so predictions map
back to example ids. `label_ids` is int64 for classification and float for regression (STS-B).

Input pipeline (`classifier_dataset`): the split's records are parsed once into memory; training
reads them in a fresh seeded permutation every epoch (a full shuffle, where the original shuffled
through a 100-record buffer), the order being a function of the seed and the step alone, so a
resumed run rebuilds it and skips exactly the batches it had used. Each batch is cut to its
longest example (rounded up to a multiple of 8) instead of `max_seq_length`: padded positions are
masked out of attention, so the outputs are the same, and training steps run 1.6x (MRPC) to 2.8x
(SST-2) faster (bench/trim_padding.py).
"""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from data_gen.classifier_processors import InputExample
from data_gen.task_data import DataError, read_records

LENGTH_MULTIPLE = 8  # trimmed batches are this many tokens wide, or a multiple (fewer retraces)
SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids")


def truncate_seq_pair(tokens_a: list, tokens_b: list, max_length: int) -> None:
    """The original `_truncate_seq_pair`: pop from the longer list (B on a tie) until they fit."""
    while len(tokens_a) + len(tokens_b) > max_length:
        (tokens_a if len(tokens_a) > len(tokens_b) else tokens_b).pop()


def convert_example(example: InputExample, index: int, label_map: dict | None,
                    max_seq_length: int, tokenizer) -> dict:
    """One example -> feature lists (name -> values), as the original's `convert_single_example`.

    `label_map` maps label strings to ids; None means regression (the label is a float). An
    unlabelled example (a test row) gets label 0.
    """
    tokens_a = tokenizer.tokenize(example.text_a)
    # As the original: an empty second text (or one with no tokens) makes a single-text example.
    tokens_b = (tokenizer.tokenize(example.text_b) if example.text_b else None) or None
    if tokens_b is not None:
        truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
    else:
        del tokens_a[max_seq_length - 2:]
    tokens = ["[CLS]", *tokens_a, "[SEP]"]
    segment_ids = [0] * len(tokens)
    if tokens_b is not None:
        tokens += [*tokens_b, "[SEP]"]
        segment_ids += [1] * (len(tokens_b) + 1)
    input_ids = tokenizer.convert_tokens_to_ids(tokens)
    padding = [0] * (max_seq_length - len(input_ids))
    return {
        "input_ids": input_ids + padding,
        "input_mask": [1] * len(input_ids) + padding,
        "segment_ids": segment_ids + padding,
        "label_ids": [_label_value(example, label_map)],
        "is_real_example": [1],
        "example_index": [index],
    }


def _label_value(example: InputExample, label_map: dict | None):
    if example.label is None:
        return 0.0 if label_map is None else 0
    if label_map is None:
        try:
            return float(example.label)
        except ValueError:
            raise DataError(f"example {example.guid}: label {example.label!r} is not a number "
                            f"(the task is a regression)") from None
    if example.label not in label_map:
        raise DataError(f"example {example.guid}: label {example.label!r} is not one of "
                        f"{', '.join(label_map)}")
    return label_map[example.label]


def serialize(features: dict, regression: bool) -> bytes:
    import tensorflow as tf

    def feature(name, values):
        if name == "label_ids" and regression:
            return tf.train.Feature(float_list=tf.train.FloatList(value=values))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    return tf.train.Example(features=tf.train.Features(feature={
        name: feature(name, values) for name, values in features.items()
    })).SerializeToString()


def feature_spec(max_seq_length: int, regression: bool) -> dict:
    import tensorflow as tf

    spec = {name: tf.io.FixedLenFeature([max_seq_length], tf.int64) for name in SEQUENCE_FEATURES}
    spec["label_ids"] = tf.io.FixedLenFeature([], tf.float32 if regression else tf.int64)
    spec["is_real_example"] = tf.io.FixedLenFeature([], tf.int64)
    spec["example_index"] = tf.io.FixedLenFeature([], tf.int64)
    return spec


def example_records(examples: Sequence[InputExample], labels: Sequence[str],
                    max_seq_length: int, tokenizer) -> Iterable[bytes]:
    """Serialised records of `examples` in order (labels empty: regression)."""
    label_map = {label: i for i, label in enumerate(labels)} if labels else None
    for index, example in enumerate(examples):
        yield serialize(convert_example(example, index, label_map, max_seq_length, tokenizer),
                        regression=label_map is None)


def load_features(path: str, max_seq_length: int, regression: bool) -> dict:
    """Every record of a features file as NumPy arrays (int32 sequences), in file order."""
    features = read_records(path, feature_spec(max_seq_length, regression))
    for name in (*SEQUENCE_FEATURES, "example_index"):
        features[name] = features[name].astype(np.int32)
    if not regression:
        features["label_ids"] = features["label_ids"].astype(np.int32)
    return features


def trim_to_longest(batch: dict, multiple: int = LENGTH_MULTIPLE) -> dict:
    """Cut the sequence features of a batch to its longest example, rounded up to `multiple`."""
    import tensorflow as tf

    full = tf.shape(batch["input_mask"])[1]
    longest = tf.reduce_max(tf.reduce_sum(batch["input_mask"], axis=1))
    width = tf.minimum(full, (longest + multiple - 1) // multiple * multiple)
    return {name: value[:, :width] if name in SEQUENCE_FEATURES else value
            for name, value in batch.items()}


def _padded_gather(tensors: dict, indices, count: int) -> dict:
    import tensorflow as tf

    real = indices < count
    batch = {name: tf.gather(value, tf.where(real, indices, 0)) for name, value in tensors.items()}
    batch["example_index"] = tf.where(real, batch["example_index"], -1)
    batch["is_real_example"] = tf.cast(real, batch["is_real_example"].dtype)
    return batch


def classifier_dataset(features: dict, batch_size: int, is_training: bool, seed: int = 0,
                       input_context=None, trim: bool = True):
    """Batches of `features` (from `load_features`): training repeats in a new permutation each
    epoch and drops the last partial batch; evaluation reads each example once, in order.
    """
    import tensorflow as tf

    count = len(features["example_index"])
    pipelines = input_context.num_input_pipelines if input_context else 1
    pipeline = input_context.input_pipeline_id if input_context else 0
    tensors = {name: tf.constant(value) for name, value in features.items()}
    if is_training:
        if count < batch_size * pipelines:
            raise DataError(f"{count} training examples are fewer than one batch of "
                            f"{batch_size * pipelines}")

        def epoch(e):  # a permutation per epoch, the same in every pipeline, sharded below
            # Stateless: a function of (seed, epoch) alone, whatever the global seed is (a
            # tensor seed in Dataset.shuffle fails when the global seed is 0).
            order = tf.random.experimental.stateless_shuffle(
                tf.range(count, dtype=tf.int64), seed=tf.stack([tf.constant(seed, tf.int64), e]))
            return tf.data.Dataset.from_tensor_slices(order)

        indices = tf.data.Dataset.counter().flat_map(epoch)
        if pipelines > 1:
            indices = indices.shard(pipelines, pipeline)
        indices = indices.batch(batch_size, drop_remainder=True)
        dataset = indices.map(lambda idx: {name: tf.gather(value, idx)
                                           for name, value in tensors.items()})
    else:
        # Several replicas: every replica must get a batch at every step, so the split is padded
        # to a multiple of the global batch with copies of example 0 marked `example_index` -1
        # and `is_real_example` 0 (the original padded for TPUs the same way).
        replicas = input_context.num_replicas_in_sync if input_context else 1
        total = count if replicas == 1 else -(-count // (batch_size * replicas)) * (
            batch_size * replicas)
        indices = tf.data.Dataset.range(total)
        if pipelines > 1:
            indices = indices.shard(pipelines, pipeline)
        dataset = indices.batch(batch_size).map(lambda idx: _padded_gather(tensors, idx, count))
    if trim:
        dataset = dataset.map(trim_to_longest)
    return dataset.prefetch(tf.data.AUTOTUNE)
