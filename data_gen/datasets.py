"""The fine-tuning input pipeline: a split's features held in memory, batched for the trainer.

Every fine-tuning task's features (one row per example or window, NumPy arrays by name, with
`example_index` and `is_real_example`) go through `in_memory_dataset`:
- training reads them in a fresh seeded permutation every epoch (a full shuffle, where the
  original shuffled through a 100-record buffer), the order being a function of the seed and the
  step alone, so a resumed run rebuilds it and skips exactly the batches it had used; the last
  partial batch of the stream is dropped;
- evaluation and prediction read each row once, in order; with several replicas the split is
  padded to a multiple of the global batch with copies of row 0 marked `example_index` -1 and
  `is_real_example` 0 (the original padded for TPUs the same way);
- with `trim`, each batch's per-position features are cut to its longest row, rounded up to a
  multiple of `width_multiple`, instead of `max_seq_length`: padded positions are masked out of
  attention, so the outputs are the same, and training steps run 1.6x (MRPC) to 2.8x (SST-2)
  faster (bench/trim_padding.py);
- with `bucket_window` (batches), examples of similar length share a batch, so that trimming
  leaves little padding: training cuts its permuted stream into windows of that many batches,
  sorts each window by length (stable), batches it and shuffles the window's batches (seeded by
  the seed and the window's number: deterministic, and a resumed run skips exactly as before);
  evaluation and prediction read the split sorted by length (the driver puts the outputs back in
  row order). Widths are multiples of `width_multiple`: 8 by default, which bounds the shapes
  a step meets to `max_seq_length / 8` (XLA compiles each shape); the fine-tuning driver asks
  for 1 on a CPU without XLA, where the step is traced once for any width.

- with `whole_examples` (training), a batch holds `batch_size` whole examples rather than rows:
  every row of each (a long document's windows, consecutive rows sharing an `example_index`),
  in a fresh seeded permutation of the examples every epoch, each row carrying `example_slot`,
  its example's place in the batch (0, 0, 1, 2, 2, 2, ...), so that a task can pool an example's
  rows in its loss. Such batches have a varying number of rows and are not bucketed.

Iterators are made without tf.data's autotuning model (`without_autotune_model`): deleting one
could wait up to a minute for the model's thread.

On JAX and PyTorch, `data_gen.numpy_datasets` makes the same batches in NumPy, by the same rules.

`Batching` carries these choices from the runner's flags to a task's `dataset`; a task that packs
several examples into one row (`data_gen.example_packing`) reads `pack` from it.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from bert_tf2.data_gen.batching import (  # noqa: F401 (also named here)
    BUCKET_WINDOW,
    LENGTH_MULTIPLE,
    SEQUENCE_FEATURES,
    Batching,
    example_lengths,
    example_row_spans,
)
from bert_tf2.data_gen.errors import DataError


def _as_written(fn):
    """`fn`, a function of a `Dataset.map` or `flat_map` here: tensor code with no Python
    condition on a tensor, so it is traced as written, without AutoGraph's conversion of its
    source (0.2 CPU-seconds of each fine-tuning run, for nothing: 2 AVX-512 EPYC cores)."""
    import tensorflow as tf

    return tf.autograph.experimental.do_not_convert(fn)


def rounded_width(longest, full, multiple: int = LENGTH_MULTIPLE):
    """The width of a batch whose longest row is `longest`: rounded up to `multiple`, at most
    `full` (tensors or ints)."""
    import tensorflow as tf

    return tf.minimum(full, (longest + multiple - 1) // multiple * multiple)


def trim_to_longest(batch: dict, sequence_features=SEQUENCE_FEATURES,
                    multiple: int = LENGTH_MULTIPLE) -> dict:
    """Cut the per-position features of a batch (their last axis: `[batch, length]`, or
    `[batch, choices, length]` for multiple choice) to its longest row, rounded up to `multiple`."""
    import tensorflow as tf

    full = tf.shape(batch["input_mask"])[-1]
    longest = tf.reduce_max(tf.reduce_sum(batch["input_mask"], axis=-1))
    width = rounded_width(longest, full, multiple)
    return {name: value[..., :width] if name in sequence_features else value
            for name, value in batch.items()}


def _padded_gather(tensors: dict, indices, count: int) -> dict:
    import tensorflow as tf

    real = indices < count
    batch = {name: tf.gather(value, tf.where(real, indices, 0)) for name, value in tensors.items()}
    batch["example_index"] = tf.where(real, batch["example_index"], -1)
    batch["is_real_example"] = tf.cast(real, batch["is_real_example"].dtype)
    return batch


def _bucketed(indices, lengths, batch_size: int, window: int, seed: int):
    """Batches (index vectors) of the index stream `indices`, sorted by length within windows of
    `window` batches, the batches of each window in a seeded random order."""
    import tensorflow as tf

    def batches_of(number, rows):
        by_length = tf.gather(rows, tf.argsort(tf.gather(lengths, rows), stable=True))
        batches = tf.reshape(by_length, (window, batch_size))
        # Negative seeds' second half: never one of the epoch permutations' (seed, epoch >= 0).
        order = tf.random.experimental.stateless_shuffle(
            tf.range(window), seed=tf.stack([tf.constant(seed, tf.int64), -1 - number]))
        return tf.data.Dataset.from_tensor_slices(tf.gather(batches, order))

    windows = indices.batch(batch_size * window, drop_remainder=True).enumerate()
    return windows.flat_map(_as_written(batches_of))


def _epoch_order(count: int, seed: int):
    """The indices 0..count-1 in a fresh permutation every epoch, endlessly: a function of
    (seed, epoch) alone, whatever the global seed is (a tensor seed in Dataset.shuffle fails
    when the global seed is 0)."""
    import tensorflow as tf

    def epoch(e):
        order = tf.random.experimental.stateless_shuffle(
            tf.range(count, dtype=tf.int64), seed=tf.stack([tf.constant(seed, tf.int64), e]))
        return tf.data.Dataset.from_tensor_slices(order)

    return tf.data.Dataset.counter().flat_map(_as_written(epoch))


def _whole_example_batches(tensors: dict, spans: tuple, batch_size: int, seed: int,
                           pipelines: int, pipeline: int):
    """Training batches of `batch_size` whole examples (see the module docstring), from each
    example's first row and number of rows (`example_row_spans`)."""
    import tensorflow as tf

    starts, counts = (tf.constant(value) for value in spans)

    def gather(examples):
        first, rows = tf.gather(starts, examples), tf.gather(counts, examples)
        index = tf.ragged.range(first, first + rows).flat_values
        batch = {name: tf.gather(value, index) for name, value in tensors.items()}
        batch["example_slot"] = tf.repeat(tf.range(batch_size, dtype=tf.int32), rows)
        return batch

    examples = _epoch_order(len(spans[1]), seed)
    if pipelines > 1:
        examples = examples.shard(pipelines, pipeline)
    return examples.batch(batch_size, drop_remainder=True).map(_as_written(gather))


def in_memory_dataset(features: dict, batch_size: int, is_training: bool, seed: int = 0,
                      input_context=None, batching: Batching = Batching(),
                      sequence_features=SEQUENCE_FEATURES, transform: Callable | None = None,
                      whole_examples: bool = False):
    """Batches of `features` (see the module docstring). `transform` maps each batch before it is
    trimmed (a task adding a derived feature, or packing rows); `sequence_features` are the
    names trimmed; `whole_examples`: training batches of whole examples, not rows. On another
    Keras backend than TensorFlow: the same batches in NumPy (`data_gen.numpy_datasets`)."""
    from bert_tf2.process import environment

    if not environment.uses_tensorflow():
        from bert_tf2.data_gen.numpy_datasets import in_memory_batches

        return in_memory_batches(features, batch_size, is_training, seed, input_context,
                                 batching, sequence_features, transform, whole_examples)
    import tensorflow as tf

    trim, window = batching.trim, batching.bucket_window

    count = len(features["example_index"])
    pipelines = input_context.num_input_pipelines if input_context else 1
    pipeline = input_context.input_pipeline_id if input_context else 0
    tensors = {name: tf.constant(value) for name, value in features.items()}
    spans = None  # with whole_examples: each example's first row and number of rows
    if is_training and whole_examples:
        spans = example_row_spans(features["example_index"])
    units = count if spans is None else len(spans[1])  # what a training batch counts
    if is_training and units < batch_size * pipelines:
        raise DataError(f"{units} training examples are fewer than one batch of "
                        f"{batch_size * pipelines}")
    if spans is not None:
        dataset = _whole_example_batches(tensors, spans, batch_size, seed, pipelines, pipeline)
    elif is_training:
        # A permutation per epoch, the same in every pipeline, sharded below.
        indices = _epoch_order(count, seed)
        if pipelines > 1:
            indices = indices.shard(pipelines, pipeline)
        if window:
            indices = _bucketed(indices, tf.constant(example_lengths(features), tf.int64),
                                batch_size, window, seed)
        else:
            indices = indices.batch(batch_size, drop_remainder=True)
        dataset = indices.map(_as_written(lambda idx: {name: tf.gather(value, idx)
                                                       for name, value in tensors.items()}))
    else:
        replicas = input_context.num_replicas_in_sync if input_context else 1
        total = count if replicas == 1 else -(-count // (batch_size * replicas)) * (
            batch_size * replicas)
        order = np.arange(total)
        if window:  # the real rows shortest first, then the padding rows
            order[:count] = np.argsort(example_lengths(features), kind="stable")
        indices = tf.data.Dataset.from_tensor_slices(order)
        if pipelines > 1:
            indices = indices.shard(pipelines, pipeline)
        dataset = indices.batch(batch_size).map(
            _as_written(lambda idx: _padded_gather(tensors, idx, count)))
    if transform is not None:
        dataset = dataset.map(transform)
    if trim:
        dataset = dataset.map(_as_written(lambda batch: trim_to_longest(
            batch, sequence_features, batching.width_multiple)))
    return without_autotune_model(dataset.prefetch(tf.data.AUTOTUNE))


def without_autotune_model(dataset):
    """`dataset` with tf.data's autotuning model off (prefetch buffers still adapt).

    Why: with it on, deleting an iterator that has run for a while can wait for the model's
    background thread, which sleeps between optimization rounds whose period doubles up to 60 s;
    a finished training run then hung silently for up to a minute at the end (issue 29:
    bench/exit_latency.py). A pipeline of in-memory gathers, or of parsing with a fixed
    parallelism, has nothing for the model to tune. Measured in docs/benchmarks.md. A dataset
    that has the model off already is returned as it is (no second options node: an iterator
    checkpointed from it restores into the same pipeline)."""
    import tensorflow as tf

    if dataset.options().autotune.enabled is False:
        return dataset
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)
