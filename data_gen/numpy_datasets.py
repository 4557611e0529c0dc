"""The fine-tuning input pipeline in NumPy, for the backends without tf.data (JAX, PyTorch).

`in_memory_batches` is the twin of `data_gen.datasets.in_memory_dataset` (which calls it when Keras
runs on another backend than TensorFlow) and follows its module docstring rule for rule: a fresh
seeded permutation every epoch, the last partial batch of the endless stream dropped; windows of
`bucket_window` batches sorted by length and their batches shuffled; evaluation and prediction in
order (sorted by length with bucketing), padded for several input pipelines with copies of row 0
marked `example_index` -1 and `is_real_example` 0; batches trimmed to their longest row rounded up
to `width_multiple`; whole examples per batch with `example_slot`. Several input pipelines (JAX
processes) each take a contiguous share of every global batch (tf.data deals rows round-robin):
the batch the processes assemble is then row for row one process's batch, so their losses, dropout
included, are one process's (tests/test_jax_runners.py). The permutations come from
NumPy's generator seeded by (seed, epoch) (and (seed, window) for the bucket shuffles): the same
rules as TensorFlow's pipeline, not its draws, so the two backends see the examples in different
orders (docs/backends.md).

A `Batches` is iterable any number of times, each pass from its start, and `skip(n)` makes one that
starts after the first `n` batches: a resumed run skips the batches it had used, without gathering
them (only index arrays are made for the skipped part).
"""
from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import os
from typing import Callable, Iterator

import numpy as np

from bert_tf2.data_gen.errors import DataError


@dataclasses.dataclass(frozen=True)
class HostInputContext:
    """The part of `tf.distribute.InputContext` the pipelines read: this host's input pipeline
    among `num_input_pipelines` (one per process), and the replicas (devices) of the run."""

    num_input_pipelines: int = 1
    input_pipeline_id: int = 0
    num_replicas_in_sync: int = 1

    def get_per_replica_batch_size(self, global_batch_size: int) -> int:
        """What one input pipeline batches: its process's share of the global batch (the
        process then splits it over its own devices)."""
        if global_batch_size % self.num_input_pipelines:
            raise ValueError(f"global batch {global_batch_size} does not split into "
                             f"{self.num_input_pipelines} processes")
        return global_batch_size // self.num_input_pipelines


class Batches:
    """Batches (dicts of NumPy arrays) made from an endless or finite stream of index arrays.

    The stream (cheap: which rows or records make each batch) is walked by the consumer; the
    batches themselves are made by `workers` threads, up to `2 * workers` batches ahead, and come
    out in the stream's order. The makers are NumPy and compiled code that release the GIL, so the
    threads make batches side by side and beside the training step (0 workers: made in turn by
    the consumer)."""

    def __init__(self, index_batches: Callable[[], Iterator], make_batch: Callable,
                 skipped: int = 0, workers: int | None = None):
        self._index_batches = index_batches
        self._make_batch = make_batch
        self._skipped = skipped
        self.workers = default_workers() if workers is None else workers

    def skip(self, count: int) -> "Batches":
        return Batches(self._index_batches, self._make_batch, self._skipped + count,
                       self.workers)

    def with_workers(self, workers: int) -> "Batches":
        return Batches(self._index_batches, self._make_batch, self._skipped, workers)

    def _stream(self) -> Iterator:
        stream = self._index_batches()
        for _ in range(self._skipped):
            if next(stream, None) is None:
                return
        yield from stream

    def __iter__(self):
        if not self.workers:
            for indices in self._stream():
                yield self._make_batch(indices)
            return
        pool = concurrent.futures.ThreadPoolExecutor(self.workers, thread_name_prefix="input")
        try:
            pending = collections.deque()
            for indices in self._stream():
                pending.append(pool.submit(self._make_batch, indices))
                if len(pending) > 2 * self.workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def default_workers() -> int:
    """Input threads: one per core the process may use, at most 8 (they sleep while the batches
    ahead are made, so an accelerator's step loses nothing to them)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


def _epoch_order(count: int, seed: int) -> Iterator[int]:
    """Row indices, a fresh permutation of 0..count-1 every epoch, endlessly."""
    epoch = 0
    while True:
        yield from np.random.default_rng([seed, 0, epoch]).permutation(count).tolist()
        epoch += 1


def _share(batches: Iterator, size: int, pipeline: int) -> Iterator:
    """This pipeline's contiguous `size` rows of each global batch."""
    for batch in batches:
        yield batch[pipeline * size:(pipeline + 1) * size]


def _chunks(stream: Iterator[int], size: int) -> Iterator[np.ndarray]:
    """Consecutive full chunks of `size` indices (an endless stream has no remainder)."""
    while True:
        chunk = np.fromiter(stream, dtype=np.int64, count=size)
        yield chunk


def _bucketed(stream: Iterator[int], lengths: np.ndarray, batch_size: int, window: int,
              seed: int) -> Iterator[np.ndarray]:
    for number, rows in enumerate(_chunks(stream, batch_size * window)):
        by_length = rows[np.argsort(lengths[rows], kind="stable")]
        batches = by_length.reshape(window, batch_size)
        yield from batches[np.random.default_rng([seed, 1, number]).permutation(window)]


def trimmed(batch: dict, sequence_features, multiple: int) -> dict:
    """Per-position features cut to the longest row (of the last axis), rounded up to `multiple`."""
    full = batch["input_mask"].shape[-1]
    longest = int(np.max(np.sum(batch["input_mask"] != 0, axis=-1), initial=0))
    width = min(full, -(-longest // multiple) * multiple)
    return {name: value[..., :width] if name in sequence_features else value
            for name, value in batch.items()}


def _whole_example_stream(spans: tuple, batch_size: int, seed: int, pipelines: int,
                          pipeline: int) -> Iterator[tuple]:
    starts, counts = spans
    examples = _epoch_order(len(counts), seed)
    for chosen in _share(_chunks(examples, batch_size * pipelines), batch_size, pipeline):
        rows = np.concatenate([np.arange(starts[e], starts[e] + counts[e]) for e in chosen])
        yield rows, np.repeat(np.arange(batch_size, dtype=np.int32), counts[chosen])


def in_memory_batches(features: dict, batch_size: int, is_training: bool, seed: int = 0,
                      input_context=None, batching=None, sequence_features=None,
                      transform: Callable | None = None, whole_examples: bool = False,
                      ) -> Batches:
    """`data_gen.datasets.in_memory_dataset` in NumPy (see the module docstring)."""
    from bert_tf2.data_gen.batching import (
        SEQUENCE_FEATURES,
        Batching,
        example_lengths,
        example_row_spans,
    )

    batching = batching or Batching()
    sequence_features = sequence_features or SEQUENCE_FEATURES
    arrays = {name: np.asarray(value) for name, value in features.items()}
    count = len(arrays["example_index"])
    pipelines = input_context.num_input_pipelines if input_context else 1
    pipeline = input_context.input_pipeline_id if input_context else 0
    window = batching.bucket_window

    def finish(batch: dict) -> dict:
        if transform is not None:
            batch = transform(batch)
        if batching.trim:
            batch = trimmed(batch, sequence_features, batching.width_multiple)
        return batch

    spans = example_row_spans(arrays["example_index"]) if is_training and whole_examples \
        else None
    units = count if spans is None else len(spans[1])
    if is_training and units < batch_size * pipelines:
        raise DataError(f"{units} training examples are fewer than one batch of "
                        f"{batch_size * pipelines}")
    if spans is not None:
        def gather_whole(item):
            rows, slots = item
            return finish({**{name: value[rows] for name, value in arrays.items()},
                           "example_slot": slots})

        return Batches(lambda: _whole_example_stream(spans, batch_size, seed, pipelines,
                                                     pipeline), gather_whole)
    if is_training:
        lengths = example_lengths(arrays)

        def training_indices():
            stream, size = _epoch_order(count, seed), batch_size * pipelines
            batches = (_bucketed(stream, lengths, size, window, seed) if window
                       else _chunks(stream, size))
            return _share(batches, batch_size, pipeline)

        return Batches(training_indices,
                       lambda rows: finish({name: value[rows] for name, value in arrays.items()}))
    total = count if pipelines == 1 else -(-count // (batch_size * pipelines)) * (
        batch_size * pipelines)
    order = np.arange(total)
    if window:
        order[:count] = np.argsort(example_lengths(arrays), kind="stable")

    def evaluation_indices():
        size = batch_size * pipelines
        yield from _share((order[start:start + size] for start in range(0, total, size)),
                          batch_size, pipeline)

    def gather_padded(rows):
        real = rows < count
        batch = {name: value[np.where(real, rows, 0)] for name, value in arrays.items()}
        batch["example_index"] = np.where(real, batch["example_index"], -1).astype(
            batch["example_index"].dtype)
        batch["is_real_example"] = real.astype(batch["is_real_example"].dtype)
        return finish(batch)

    return Batches(evaluation_indices, gather_padded)
