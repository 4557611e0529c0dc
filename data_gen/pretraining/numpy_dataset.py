"""The pretraining input in NumPy, for the backends without tf.data (JAX, PyTorch).

The twin of `dataset.pretraining_dataset` and `dynamic_masking`, rule for rule:
- training: the file list in a fresh seeded order each pass, records interleaved one at a time
  from up to `num_cpu_threads` open files (a finished file replaced by the next), through a
  seeded shuffle buffer of the original's 100 records, endlessly; evaluation: the files in order,
  once; batches drop the remainder; int64 features become int32, `masked_lm_weights` stays
  float32;
- several input pipelines (processes) split the files, or, with fewer files than pipelines, each
  reads every record and keeps its share;
- `--dynamic_masking`: each batch un-masked and masked afresh by the original's rule
  (`dynamic_masking.mask_batch`'s), from a generator seeded by (seed, batch number), so a resumed
  run sees the same masks.
The draws are NumPy's, not tf.data's: the same rules, another order (docs/backends.md). Records
are read with `data_gen.tfrecord_frames` and parsed by `data_gen.example_proto`; a damaged file is
a `DataError` naming it and the byte where its framing breaks.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from bert_tf2.data_gen import example_proto, tfrecord_frames
from bert_tf2.data_gen.errors import DataError
from bert_tf2.data_gen.numpy_datasets import Batches
from bert_tf2.data_gen.pretraining import schema
from bert_tf2.data_gen.pretraining.schema import SHUFFLE_BUFFER_RECORDS


def _records(path: str) -> Iterator[bytes]:
    try:
        yield from tfrecord_frames.read_frames(path)
    except ValueError as e:
        raise DataError(f"{e}; make the file again with create_pretraining_data and rerun "
                        f"(training resumes from the last checkpoint)") from None


def _interleaved(files: list, cycle: int) -> Iterator[bytes]:
    """One record from each of `cycle` open files in turn; a finished file gives way to the
    next of `files`."""
    pending = iter(files)
    open_files = [_records(path) for path in [next(pending, None) for _ in range(cycle)]
                  if path is not None]
    while open_files:
        for reader in list(open_files):
            record = next(reader, None)
            if record is None:
                open_files.remove(reader)
                following = next(pending, None)
                if following is not None:
                    open_files.append(_records(following))
            else:
                yield record


def _training_records(files: list, seed: int, cycle: int) -> Iterator[bytes]:
    rng = np.random.default_rng([seed, 2])
    buffer = []
    epoch = 0
    while True:
        order = [files[i] for i in np.random.default_rng([seed, 3, epoch]).permutation(len(files))]
        for record in _interleaved(order, min(cycle, len(files))):
            if len(buffer) < SHUFFLE_BUFFER_RECORDS:
                buffer.append(record)
                continue
            slot = int(rng.integers(len(buffer)))
            yield buffer[slot]
            buffer[slot] = record
        epoch += 1


def _chunks(records: Iterator[bytes], batch_size: int) -> Iterator[list]:
    """Full batches of raw records (parsed only when used: a resumed run skips unparsed)."""
    while True:
        chunk = [record for _, record in zip(range(batch_size), records)]
        if len(chunk) < batch_size:
            return
        yield chunk


def mask_batch(batch: dict, rng: np.random.Generator, vocab_size: int, mask_id: int,
               cls_id: int, sep_id: int, masked_lm_prob: float = 0.15) -> dict:
    """`dynamic_masking.mask_batch` in NumPy (see its module docstring for the rule)."""
    ids = batch["input_ids"].copy()
    positions = batch["masked_lm_positions"]
    real = batch["masked_lm_weights"] > 0
    rows = np.broadcast_to(np.arange(len(ids))[:, None], positions.shape)
    ids[rows[real], positions[real]] = batch["masked_lm_ids"][real]  # the original ids
    max_predictions = positions.shape[1]
    candidates = (batch["input_mask"] > 0) & (ids != cls_id) & (ids != sep_id)
    scores = np.where(candidates, rng.random(ids.shape), -1.0)
    length = (batch["input_mask"] > 0).sum(axis=1).astype(np.float32)
    to_predict = np.minimum(max_predictions, np.maximum(
        1, np.round(length * np.float32(masked_lm_prob)).astype(np.int32)))
    to_predict = np.minimum(to_predict, candidates.sum(axis=1))
    top = np.argsort(-scores, axis=1, kind="stable")[:, :max_predictions]
    used = np.arange(max_predictions)[None, :] < to_predict[:, None]
    big = np.iinfo(np.int32).max
    chosen = np.sort(np.where(used, top, big), axis=1)
    used = chosen < big
    chosen = np.where(used, chosen, 0).astype(np.int32)
    original = np.take_along_axis(ids, chosen, axis=1)
    roll = rng.random(chosen.shape)
    random_ids = rng.integers(0, vocab_size, chosen.shape)
    replacement = np.where(roll < 0.8, mask_id, np.where(roll < 0.9, original, random_ids))
    masked = ids.copy()
    rows = np.broadcast_to(np.arange(len(ids))[:, None], chosen.shape)
    masked[rows[used], chosen[used]] = replacement[used]
    return {**batch, "input_ids": masked.astype(batch["input_ids"].dtype),
            "masked_lm_positions": chosen.astype(positions.dtype),
            "masked_lm_ids": np.where(used, original, 0).astype(batch["masked_lm_ids"].dtype),
            "masked_lm_weights": used.astype(batch["masked_lm_weights"].dtype)}


def pretraining_batches(input_files, batch_size: int, max_seq_length: int,
                        max_predictions_per_seq: int, is_training: bool,
                        num_cpu_threads: int = 4, seed: int = 0, input_context=None,
                        masking: dict | None = None) -> Batches:
    """Batches of the seven features from `input_files` (see the module docstring)."""
    files = list(input_files)
    if not files:
        raise ValueError("pretraining_batches: no input files")
    pipelines = input_context.num_input_pipelines if input_context else 1
    pipeline = input_context.input_pipeline_id if input_context else 0
    shard_records = 1 < pipelines and len(files) < pipelines
    if 1 < pipelines and not shard_records:
        files = files[pipeline::pipelines]
    spec = schema.fixed_spec(max_seq_length, max_predictions_per_seq)

    def stream():
        records = (_training_records(files, seed, num_cpu_threads) if is_training
                   else (record for path in files for record in _records(path)))
        if shard_records:
            records = (r for i, r in enumerate(records) if i % pipelines == pipeline)
        return enumerate(_chunks(records, batch_size))

    def make(item):
        number, chunk = item
        batch = {name: value.astype(np.int32) if value.dtype == np.int64 else value
                 for name, value in example_proto.parse_fixed(chunk, spec).items()}
        if masking:
            batch = mask_batch(batch, np.random.default_rng([seed, 4, number]), **masking)
        return batch

    return Batches(stream, make)
